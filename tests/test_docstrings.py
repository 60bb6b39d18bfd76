"""fill_docstrings: shared numpydoc sections written once, filled where a docstring names them;
inherit_docstrings: an undocumented override shows the docstring of the member it overrides."""

import inspect
from functools import cached_property

import pytest

from meanfield.docstrings import fill_docstrings, inherit_docstrings
from solvers import CausalCircleSpectral, CausalSphereSpectral, CircleSpectral, SphereSpectral
from solvers.spectral_solver import SpectralSolver

SERIES = """\
Parameters
----------
coefficients : numpy.ndarray
    The series' coefficients :math:`c_{k}`, :math:`k \\ge 0`."""

EXPECTED = """The value at zero.

Parameters
----------
coefficients : numpy.ndarray
    The series' coefficients :math:`c_{k}`, :math:`k \\ge 0`.

Returns
-------
float
    Its sum over :math:`\\{k\\}`."""


def test_a_function_gets_the_section_at_its_placeholder_and_keeps_other_braces():
    @fill_docstrings(series=SERIES)
    def at_zero(coefficients):
        r"""The value at zero.

        {series}

        Returns
        -------
        float
            Its sum over :math:`\{k\}`.
        """

    assert inspect.cleandoc(at_zero.__doc__) == EXPECTED
    assert "        coefficients : numpy.ndarray\n            The series'" in at_zero.__doc__  # the placeholder's indent


def test_every_kind_of_class_member_is_filled():
    @fill_docstrings(series=SERIES)
    class Series:
        """A series.

        {series}
        """

        def method(self, coefficients):
            """M.

            {series}
            """

        @staticmethod
        def static(coefficients):
            """S.

            {series}
            """

        @classmethod
        def of_class(cls, coefficients):
            """C.

            {series}
            """

        @property
        def getter(self):
            """P.

            {series}
            """

        @cached_property
        def cached(self):
            """Q.

            {series}
            """

    for name in ("method", "static", "of_class", "getter", "cached"):
        member = vars(Series)[name]  # the wrapper (staticmethod, property, ...) keeps a copy of the docstring
        for doc in (inspect.getdoc(getattr(Series, name)), inspect.cleandoc(member.__doc__)):
            assert doc.endswith(inspect.cleandoc(SERIES)) and "{series}" not in doc, name
    assert "{series}" not in Series.__doc__ and "coefficients : numpy.ndarray" in Series.__doc__


def test_a_section_not_given_is_refused_at_import():
    with pytest.raises(ValueError, match=r"names a section \{series\} that fill_docstrings was not given"):
        @fill_docstrings(other=SERIES)
        def at_zero(coefficients):
            """The value at zero.

            {series}
            """


def test_a_brace_that_is_not_alone_on_its_line_is_not_a_placeholder():
    @fill_docstrings()
    def f():
        """A set {a} and {b}, and {c} inline."""

    assert f.__doc__ == "A set {a} and {b}, and {c} inline."


def _library_docstrings():
    """Every docstring of the packages' modules, their functions, classes and class members."""
    import importlib
    import pkgutil

    import meanfield
    import solvers
    import validation

    for package in (meanfield, solvers, validation):
        names = [package.__name__] + [info.name for info in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]
        for name in names:
            module = importlib.import_module(name)
            yield name, module.__doc__
            for owner_name, owner in vars(module).items():
                if getattr(owner, "__module__", None) != name:
                    continue  # imported from elsewhere: checked where it is defined
                yield f"{name}.{owner_name}", getattr(owner, "__doc__", None)
                if isinstance(owner, type):
                    for member_name, member in vars(owner).items():
                        function = getattr(member, "__func__", None) or getattr(member, "fget", None) or member
                        for doc in (getattr(member, "__doc__", None), getattr(function, "__doc__", None)):
                            yield f"{name}.{owner_name}.{member_name}", doc


def test_an_undocumented_override_takes_the_nearest_documented_one_of_every_member_kind():
    class Template:
        def method(self):
            """The template's method."""

        @staticmethod
        def static():
            """The template's static method."""

        @property
        def prop(self):
            """The template's property."""

        def documented(self):
            """The template's, overridden with a docstring."""

    class Middle(Template):
        def method(self):
            """The middle class's method."""

    @inherit_docstrings
    class Implementation(Middle):
        def method(self):
            return 1

        @staticmethod
        def static():
            return 2

        @property
        def prop(self):
            return 3

        def documented(self):
            """Its own."""

        def new(self):
            return 4

    assert Implementation.method.__doc__ == "The middle class's method."  # the nearest base's
    assert Implementation.static.__doc__ == vars(Implementation)["static"].__doc__ == "The template's static method."
    assert Implementation.prop.__doc__ == vars(Implementation)["prop"].fget.__doc__ == "The template's property."
    assert Implementation.documented.__doc__ == "Its own."
    assert Implementation.new.__doc__ is None  # nothing to inherit
    assert Implementation().method() == 1 and Implementation.static() == 2 and Implementation().prop == 3


def test_the_spectral_solvers_show_the_template_docstrings_as_their_own():
    """numpydoc's checks read ``__doc__``, not ``inspect.getdoc``: each member the template
    declares has its docstring on the solver's own function."""
    declared = [name for name, member in vars(SpectralSolver).items() if callable(member) and member.__doc__
                and not name.startswith("__")]
    assert "lyapunov" in declared and "_transport_and_speed" in declared
    for solver in (CircleSpectral, SphereSpectral, CausalCircleSpectral, CausalSphereSpectral):
        for name in declared:
            assert getattr(solver, name).__doc__, (solver.__name__, name)
    assert CircleSpectral.lyapunov.__doc__ == SpectralSolver.lyapunov.__doc__
    assert "coefficients : numpy.ndarray" in SphereSpectral._deviation_norm.__doc__


def test_no_docstring_of_the_library_is_left_with_a_placeholder():
    """A class or function that names a shared section without ``fill_docstrings`` would show ``{name}``."""
    import re

    placeholder = re.compile(r"^[ \t]*\{\w+\}[ \t]*$", re.MULTILINE)
    unfilled = [where for where, doc in _library_docstrings() if isinstance(doc, str) and placeholder.search(doc)]
    assert not unfilled, unfilled

