r"""One front door to the mean-field solvers: :func:`~solvers.solve` picks the discretisation.

Each solver class of this package is one entry of :data:`~solvers.methods.METHODS`: the geometry it solves on,
the discretisation it starts with, the one it hands over to when the first stops resolving
the density (``then``), whether it solves the layered equation of causal attention, and the
arguments that set its resolution. :func:`~solvers.solve` and :func:`~solvers.solver_for` choose the entry from
``geometry``, ``method`` and ``then``; the configuration of ``meanfield run`` is built from the
same table (``method.kind`` is an entry's name), so a solver added here is selectable there.

The discretisations (``method`` and ``then``):

=====================  ==========  ============================================================
name                   geometry    the state
=====================  ==========  ============================================================
``fourier``            circle      Fourier coefficients (pseudo-spectral)
``finite_volumes``     circle      cell averages (positive, mass exact)
``mass_coordinates``   circle      the measure's quantile: positions of equal-mass labels
``harmonics``          sphere      spherical-harmonic coefficients (shtns)
``atoms``              sphere      weighted Diracs on a Gauss grid
``gegenbauer``         sphere      a zonal density on S^{d-1}, any d: Gegenbauer coefficients in u
``rings``              sphere      a zonal measure on S^{d-1}: rings of mass in u
``finite_volumes``     line        pure attention's rescaled tokens' density (d = 1)
``mass_coordinates``   line        its quantile
=====================  ==========  ============================================================

Every entry takes any model that provides the model protocol (its ``velocity_field``), a
user's own included, through the discretisation's reference path (``solvers.reference``);
the causal entries take :class:`~meanfield.CausalAttention`, whose layers in the token
position are a policy of the same discretisations; the positional entry takes the models
whose tokens carry positions (``positional = True``: :class:`~meanfield.RotaryAttention`),
one density per position moved by the model's own particle velocity; the common-noise entries
take a limit whose density is driven by noise common to all tokens (``common_noise = True``:
:class:`~meanfield.HomogenizedLimit`), one density path per noise path.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import xarray as xr

GEOMETRIES = ("circle", "sphere", "line")
DISCRETISATIONS = ("fourier", "finite_volumes", "mass_coordinates", "harmonics", "atoms", "gegenbauer", "rings")


@dataclass(frozen=True)
class Method:
    """One solver of the package: where it solves, what it starts with and hands over to.

    The table is data (no solver module is imported to read it): the configuration checks of
    ``meanfield run`` and ``sweep`` read it in processes that never build a solver.

    Parameters
    ----------
    name : str
        The solver class's name (``method.kind`` in a config).
    geometry : str
        ``"circle"``, ``"sphere"`` or ``"line"``.
    discretisation : str
        What it starts with (module docstring).
    then : str or None
        What it hands over to once the first stops resolving the density; ``None``: nothing.
    causal : bool
        Whether it solves the layered equation of :class:`~meanfield.CausalAttention` (and
        nothing else).
    positional : bool
        Whether it solves the position-indexed equation of models whose tokens carry positions
        (and nothing else).
    noise : bool
        Whether it solves the stochastic density equation of a limit with noise common to all
        tokens (``common_noise = True``: :class:`~meanfield.HomogenizedLimit`), one density path
        per noise path (and nothing else).
    hierarchy : bool
        Whether it solves the first equation of the BBGKY hierarchy (the pair correlation of
        ``n`` tokens) instead of the mean field: chosen by its name only.
    family : str or None
        What labels its family of densities, when a configuration builds the labels from the
        model's section: ``"frequencies"``, one density per node of ``[model.frequencies]``' law
        (its ``frequencies`` and ``weights``, ``method.nodes`` of them); ``"lorentzian"``, the
        whole Lorentzian law at once (its ``width`` and ``center``: the exact reduction);
        ``"graphon"``, one density per vertex label of a graphon (``graphon``, the model's
        ``graphon`` read as a function). ``None``: none.
    settings : tuple of str
        Its settings a config may give (``[method]`` keys): the resolution, ``rtol``, the
        velocity path ``interaction``, and ``underresolved`` where its run can be under-resolved.
    resumable : bool
        Whether a run can go on from the end of its dataset (``continuation_state`` and ``solve``'s
        ``continued``, ``first_step``): a config may then checkpoint it.
    hands_to : tuple of str
        The solvers (entries' names) it can hand a run over to: its pairs in
        ``solvers.handover.TRANSITIONS``, the links a :class:`~solvers.Chain` is made of.
    """

    name: str
    geometry: str
    discretisation: str
    then: str | None = None
    causal: bool = False
    positional: bool = False
    noise: bool = False
    hierarchy: bool = False
    family: str | None = None
    settings: tuple[str, ...] = ()
    resumable: bool = True
    hands_to: tuple[str, ...] = ()

    @property
    def solver(self) -> type:
        """The class (its module imported on first use)."""
        import solvers

        return getattr(solvers, self.name)

    @property
    def options(self) -> frozenset[str]:
        """The constructor's keyword arguments besides the model."""
        return frozenset(inspect.signature(self.solver).parameters) - {"model"}

    @property
    def solve_options(self) -> frozenset[str]:
        """The keyword arguments of its ``solve`` besides the initial measure and the times."""
        return frozenset(inspect.signature(self.solver.solve).parameters) - {"self", "rho0", "times"}


_GRID = ("rtol", "interaction", "underresolved")  # what the grid solvers of the reference path take

#: Every solver of the package; the first of a geometry (and causality) is what
#: ``method="auto"`` picks when ``then`` is not given.
METHODS: tuple[Method, ...] = (
    Method("CircleAuto", "circle", "fourier", then="finite_volumes",
           settings=("cells", "outputs", *_GRID)),  # underresolved: of its finite volumes, after the hand-over
    Method("CircleFV", "circle", "finite_volumes", settings=("cells", *_GRID), hands_to=("CircleLagrangian",)),
    Method("CircleSpectral", "circle", "fourier", settings=("cells", "outputs", *_GRID), hands_to=("CircleFV",)),
    Method("CircleLagrangian", "circle", "mass_coordinates",
           settings=("points", "cells", "rtol")),  # exact for any measure: nothing to under-resolve
    Method("CircleFVLagrangian", "circle", "finite_volumes", then="mass_coordinates",
           settings=("cells", "points", "rtol", "interaction")),
    # the family of natural frequencies: one density per node of the frequency law (the interaction as model)
    Method("FrequencyCircleFV", "circle", "finite_volumes", family="frequencies", settings=("cells", *_GRID)),
    # one density per vertex label of a graphon
    Method("GraphonCircleFV", "circle", "finite_volumes", family="graphon", settings=("cells", "vertices", *_GRID)),
    # the marginal of Lorentzian frequencies exactly: its moments, one population at omega_0 + i Delta
    Method("LorentzianKuramoto", "circle", "fourier", family="lorentzian", settings=("modes", "rtol"), resumable=False),
    Method("CausalCircleFV", "circle", "finite_volumes", causal=True,
           settings=("cells", "layers", *_GRID)),
    Method("CausalCircleSpectral", "circle", "fourier", causal=True,
           settings=("cells", "layers", "outputs", *_GRID), hands_to=("CausalCircleFV",)),
    Method("SphereSpectral", "sphere", "harmonics", settings=("lmax", "threads", "outputs", *_GRID),
           hands_to=("SphereWeightedParticles",)),
    Method("SphereWeightedParticles", "sphere", "atoms",
           settings=("lmax", "quadrature_lmax", "rtol", "interaction")),  # as CircleLagrangian
    Method("SphereSpectralParticles", "sphere", "harmonics", then="atoms",
           settings=("lmax", "quadrature_lmax", "threads", "outputs", "rtol", "interaction")),
    Method("CausalSphereSpectral", "sphere", "harmonics", causal=True,
           settings=("lmax", "layers", "threads", "outputs", *_GRID)),
    # S^{d-1} for any d >= 3 (the setting d), zonal models and densities of u = <x, e>
    Method("ZonalSphereSpectral", "sphere", "gegenbauer", settings=("d", "lmax", "rtol", "outputs", "underresolved"),
           hands_to=("ZonalRings",)),
    Method("ZonalSpectralRings", "sphere", "gegenbauer", then="rings", settings=("d", "lmax", "rtol", "outputs")),
    Method("ZonalRings", "sphere", "rings", settings=("d", "lmax", "rtol")),
    # one density per position s, by quantile particles (rotary attention; D = 0)
    Method("PositionalQuantiles", "circle", "mass_coordinates", positional=True, settings=("layers", "points", "cells"),
           resumable=False),
    # the homogenized limit's stochastic density equation, one path per path of the common noise
    Method("CommonNoiseCircle", "circle", "fourier", noise=True, settings=("points", "dt", "systems", "seed"),
           resumable=False),
    Method("CommonNoiseSphere", "sphere", "harmonics", noise=True,
           settings=("lmax", "threads", "dt", "systems", "seed"), resumable=False),
    # the pair correlation of n tokens from exchangeable rotation-invariant ones, under a closure (BBGKY)
    Method("PairCorrelation", "circle", "fourier", hierarchy=True, settings=("n", "closure", "modes", "rtol"),
           resumable=False),
    Method("LineFV", "line", "finite_volumes", settings=("interval", "cells", "rtol", "underresolved")),
    Method("LineLagrangian", "line", "mass_coordinates",
           settings=("interval", "labels", "cells", "rtol")),
)

#: The entries by name (``method.kind`` of a config).
METHODS_BY_NAME = {method.name: method for method in METHODS}


def method_named(name: str) -> Method:
    """The entry of a solver class's name; an unknown name is a ``ValueError`` listing them."""
    try:
        return METHODS_BY_NAME[name]
    except (KeyError, TypeError):
        raise ValueError(f"method: no solver named {name!r}; the solvers are {', '.join(METHODS_BY_NAME)}") from None


def choose_method(model, geometry: str = "circle", method: str = "auto", then: str | None = None) -> Method:
    """The entry :func:`~solvers.solve` uses (its docstring says how it chooses).

    Parameters
    ----------
    model : object
        The model; its ``causal`` attribute selects the causal entries.
    geometry : {"circle", "sphere", "line"}
        Where the density lives.
    method : str
        ``"auto"``, a discretisation, or a solver class's name.
    then : str, optional
        The discretisation to hand over to.

    Returns
    -------
    Method
        The entry.

    Raises
    ------
    ValueError
        Naming the argument, its value and what is available.
    """
    if geometry not in GEOMETRIES:
        raise ValueError(f"geometry must be one of {', '.join(GEOMETRIES)}; got {geometry!r}")
    if method in METHODS_BY_NAME:
        chosen = METHODS_BY_NAME[method]
        if chosen.geometry != geometry:
            raise ValueError(f"method={method!r} solves on the {chosen.geometry}, not on the {geometry} "
                             f"(geometry={chosen.geometry!r})")
        if then is not None and then != chosen.then:
            raise ValueError(f"method={method!r} hands over to {chosen.then!r}, not to then={then!r}; give a "
                             f"discretisation as method to choose the hand-over")
        return _checked_equation(chosen, model)
    if method != "auto" and method not in DISCRETISATIONS:
        raise ValueError(f"method must be 'auto', a discretisation ({', '.join(DISCRETISATIONS)}) or a solver's "
                         f"name ({', '.join(METHODS_BY_NAME)}); got {method!r}")
    if then is not None and then not in DISCRETISATIONS:
        raise ValueError(f"then must be None or a discretisation ({', '.join(DISCRETISATIONS)}); got {then!r}")
    causal, positional, noise = _is_causal(model), _is_positional(model), _has_common_noise(model)
    here = [m for m in METHODS if m.geometry == geometry and m.causal == causal and m.positional == positional
            and m.noise == noise and not m.hierarchy]
    matching = [m for m in here if (method == "auto" or m.discretisation == method)
                and (m.then == then or (method == "auto" and then is None))]
    if not matching:
        offered = "; ".join(f"method={m.discretisation!r}, then={m.then!r} ({m.name})" for m in here) or "none"
        what = ("causal attention" if causal else "a model whose tokens carry positions" if positional
                else "a limit with common noise" if noise else "this model")
        raise ValueError(f"no solver of {what} on the {geometry} starts with method={method!r} and hands over to "
                         f"then={then!r}; available: {offered}")
    return matching[0]


def _is_causal(model) -> bool:
    return bool(getattr(model, "causal", False))


def _is_positional(model) -> bool:
    """Whether the model's tokens carry positions (the protocol's neutral value: ``False``)."""
    return bool(getattr(model, "positional", False))


def _has_common_noise(model) -> bool:
    """Whether the model's density equation is driven by common noise (the protocol's neutral value: ``False``)."""
    return bool(getattr(model, "common_noise", False))


#: The equations besides the plain mean field, each solved by its own entries only: the entries' flag, whether a
#: model needs it, what such a model's equation is, and what the entries solve (``{model}``: its class's name).
_EQUATIONS = (
    ("noise", _has_common_noise, "{model} drives its density with common noise: its stochastic equation",
     "the stochastic density equation of a limit with common noise (HomogenizedLimit); {model} has none"),
    ("positional", _is_positional, "{model}'s tokens carry positions: its position-indexed equation",
     "the position-indexed equation of models whose tokens carry positions (RotaryAttention); {model}'s do not"),
    ("causal", _is_causal, "{model} is causal: its layered equation",
     "the layered equation of causal attention; {model} is not causal"),
)


def _checked_equation(method: Method, model) -> Method:
    """``method``, if it solves the equation ``model`` needs; else a ``ValueError`` naming the entries that do."""
    name = type(model).__name__
    for flag, needs, theirs, ours in _EQUATIONS:
        needed = needs(model)
        if needed == getattr(method, flag):
            continue
        if needed:
            solving = [m.name for m in METHODS if getattr(m, flag)]
            here = [m.name for m in METHODS if getattr(m, flag) and m.geometry == method.geometry]
            raise ValueError(f"{theirs.format(model=name)} is solved by {' or '.join(here or solving)}, not by "
                             f"{method.name}")
        raise ValueError(f"{method.name} solves {ours.format(model=name)}")
    return method


def solver_for(model, *, geometry: str = "circle", method: str = "auto", then: str | None = None, **settings):
    """The solver :func:`~solvers.solve` would run, built (to continue runs, read its grid, or solve again).

    Parameters
    ----------
    model : object
        The model (any model protocol implementation).
    geometry, method, then
        As for :func:`~solvers.solve` (a sequence ``then`` builds a :class:`~solvers.Chain`).
    **settings
        The solver's constructor arguments (resolution, ``rtol``, ...).

    Returns
    -------
    object
        An instance of the chosen entry's class.

    Raises
    ------
    TypeError
        If a setting is not an argument of the chosen solver (the message lists them).
    ValueError
        If no solver matches, or the solver refuses the model or a setting.
    """
    if isinstance(then, (tuple, list)):
        return _chain(model, geometry, method, tuple(then), settings)
    chosen = choose_method(model, geometry, method, then)
    unknown = sorted(set(settings) - chosen.options)
    if unknown:
        raise TypeError(f"{chosen.name} takes no setting {unknown[0]!r}; its settings: {', '.join(sorted(chosen.options))}")
    return chosen.solver(model, **settings)


def solve(model, rho0, times, *, geometry: str = "circle", method: str = "auto", then: str | None = None,
          **settings) -> xr.Dataset:
    r"""Solve the mean-field equation of ``model`` from ``rho0``, recording at ``times``.

    The one entry point to the package's solvers. It picks the solver from ``geometry``,
    ``method`` and ``then`` (the table :data:`~solvers.methods.METHODS`), builds it with the settings its
    constructor takes, and calls its ``solve`` with the rest.

    Parameters
    ----------
    model : object
        :class:`~meanfield.SelfAttention`, :class:`~meanfield.ZonalAggregation`,
        :class:`~meanfield.CausalAttention` (the layered equation), :class:`~meanfield.RotaryAttention`
        (one density per position), pure attention on the line, or a model of your own
        (:class:`~meanfield.FieldModel`).
    rho0 : callable or numpy.ndarray
        The initial density, as the chosen solver takes it (a callable of the angle on the
        circle, of points on the sphere, of ``(s, angle)`` for causal and rotary attention; grid values;
        or the solver's own state with ``continued=True``).
    times : array_like
        Increasing output times.
    geometry : {"circle", "sphere", "line"}
        Where the density lives.
    method : str
        ``"auto"``: the circle's Fourier-then-finite-volumes (:class:`~solvers.CircleAuto`),
        the sphere's harmonics (:class:`~solvers.SphereSpectral`), the line's finite volumes,
        the causal finite volumes on the circle and harmonics on the sphere, the quantiles per
        position of rotary attention (:class:`~solvers.PositionalQuantiles`), the common-noise
        collocation of a homogenized limit (:class:`~solvers.CommonNoiseCircle`,
        :class:`~solvers.CommonNoiseSphere`); or the
        discretisation to start with (``"fourier"``, ``"finite_volumes"``,
        ``"mass_coordinates"``, ``"harmonics"``, ``"atoms"``; ``"gegenbauer"``, ``"rings"``: zonal
        densities on :math:`S^{d-1}`, with the setting ``d``), or a solver class's name.
    then : str or sequence of str, optional
        The discretisation to hand over to when the first stops resolving the density:
        ``"finite_volumes"`` after ``"fourier"``, ``"mass_coordinates"`` after
        ``"finite_volumes"`` on the circle, ``"atoms"`` after ``"harmonics"`` and ``"rings"`` after
        ``"gegenbauer"`` on the sphere. A sequence chains hand-overs (:class:`~solvers.Chain`):
        ``method="fourier", then=("finite_volumes", "mass_coordinates")`` follows the circle from
        smooth data to merged clusters; each solver is then built with the settings its
        constructor takes (a Fourier stage on ``cells`` modes, with its tail criterion).
    **settings
        The chosen solver's constructor arguments (``cells``, ``lmax``, ``points``,
        ``layers``, ``rtol``, ``interaction``, ...) and its ``solve``'s (``progress``,
        ``observer``, ``max_steps``, ``underresolved``, ...); with a chain, every solver's.

    Returns
    -------
    xarray.Dataset
        The chosen solver's dataset (its class page lists the fields).

    Raises
    ------
    TypeError
        If a setting belongs to neither the solver nor its ``solve``.
    ValueError
        If no solver matches the arguments, or the solver refuses the model, a setting or
        ``rho0``.

    Examples
    --------
    >>> import json, numpy as np, meanfield as mf, solvers
    >>> ds = solvers.solve(mf.SelfAttention(4.0), lambda t: 1 + 0.01 * np.cos(3 * t), [0, 1],
    ...                    method="finite_volumes", cells=128, progress=False)
    >>> json.loads(ds.attrs["settings"])["solver"]
    'CircleFV'
    """
    if isinstance(then, (tuple, list)):
        from .chain import Chain

        solve_options = frozenset(inspect.signature(Chain.solve).parameters) - {"self", "rho0", "times"}
    else:
        chosen = choose_method(model, geometry, method, then)
        solve_options, method, then = chosen.solve_options, chosen.name, None
    solve_settings = {key: settings.pop(key) for key in list(settings) if key in solve_options}
    return solver_for(model, geometry=geometry, method=method, then=then, **settings).solve(rho0, times,
                                                                                            **solve_settings)


def _chain(model, geometry: str, method: str, then: tuple, settings: dict):
    """The :class:`~solvers.Chain` that starts with discretisation ``method`` and hands over to each of ``then``."""
    names = (method, *then)
    if not then or any(name not in DISCRETISATIONS for name in names):
        raise ValueError(f"a chain is given by discretisations ({', '.join(DISCRETISATIONS)}): method and every "
                         f"entry of then; got method={method!r}, then={then!r}")
    return chained(model, [choose_method(model, geometry, name, None) for name in names], settings)


#: The settings that fix the grid a solver records on: a chain's solvers share them.
GRID_SETTINGS = ("cells", "lmax")


def chained(model, entries, settings: dict):
    """The :class:`~solvers.Chain` of the entries' solvers, each built with the settings its constructor takes.

    Parameters
    ----------
    model : object
        The model every solver solves.
    entries : sequence of Method
        The solvers in order; each must hand over to the next (``hands_to``).
    settings : dict
        Constructor arguments: each solver takes those it has (``cells`` goes to every solver of
        the circle), besides what its hand-over fixes (``Transition.source_settings``). A
        setting of the recorded grid (``GRID_SETTINGS``) not given is the smallest of the
        solvers' defaults, for every solver (they record on one grid; their own defaults differ).

    Returns
    -------
    Chain

    Raises
    ------
    ValueError
        If an entry does not hand over to the next.
    TypeError
        If no solver takes a setting (the message lists theirs).
    """
    from .chain import Chain
    from .handover import TRANSITIONS

    for before, after in zip(entries, entries[1:]):
        if after.name not in before.hands_to:
            raise ValueError(f"{before.name} hands a run over to {' or '.join(before.hands_to) or 'no solver'}, "
                             f"not to {after.name}")
    offered = set().union(*(entry.options for entry in entries))
    unknown = sorted(set(settings) - offered)
    if unknown:
        raise TypeError(f"no solver of the chain {' -> '.join(entry.name for entry in entries)} takes the setting "
                        f"{unknown[0]!r}; their settings: {', '.join(sorted(offered))}")
    defaults = {}
    for entry in entries:
        for key, parameter in inspect.signature(entry.solver).parameters.items():
            if key in GRID_SETTINGS and parameter.default not in (inspect.Parameter.empty, None):
                defaults[key] = min(defaults.get(key, parameter.default), parameter.default)
    settings = {**defaults, **settings}
    stages = []
    for entry, following in zip(entries, [*entries[1:], None]):
        own = {key: value for key, value in settings.items() if key in entry.options}
        fixed = TRANSITIONS[entry.name, following.name].source_settings if following is not None else {}
        stages.append(entry.solver(model, **{**own, **fixed}))
    return Chain(tuple(stages))
