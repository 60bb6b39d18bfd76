"""Every engine against the model's reference right-hand side (in the spirit of py-pde's ``check_rhs_consistency``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from array_api_compat import array_namespace

from .euclidean_array_api import EuclideanArrayAPIKernel
from .kernels import NumpyKernel, is_numpy, select_kernel, to_numpy

#: The engines for numpy arrays besides the reference itself (``"numpy"``: the model's own methods).
NUMPY_ENGINES = ("fused", "series")

#: Step size of the compared steps: large enough that the step differs from ``x`` in every digit.
STEP = 0.1

#: Seed of the unequal masses at which an engine's weighted velocity is compared.
WEIGHTED_SEED = 20261129

#: Time of the rescaling :math:`M(t) = e^{tHV}` at which rescaled tokens are compared (not the identity).
RESCALING_TIME = 0.7


@dataclass(frozen=True)
class Consistency:
    r"""How far one engine is from the reference (relative to the attention output's scale; steps absolute).

    Models in :math:`\mathbb{R}^d` have a velocity only: their ``attention_output`` and ``step`` are ``None``.
    """

    engine: str
    velocity: float
    attention_output: float | None
    step: float | None
    #: The velocity of a weighted measure at its atoms, for the engines that sum one (``weighted_velocity``).
    weighted_velocity: float | None = None


def engines_for(model, x) -> dict:
    r"""The engines, by name, that accept ``model`` on tokens like ``x`` (numpy, ``(systems, n, d)``).

    An array of another namespace (``array_api_strict``, CuPy, ...) names its array API engine.
    A model in :math:`\mathbb{R}^d` has that engine only.
    """
    if not model.on_sphere:
        return {} if is_numpy(x) else {"array_api": EuclideanArrayAPIKernel(model, x)}
    if not is_numpy(x):
        return {"array_api": select_kernel(model, x)}
    found = {}
    for name in NUMPY_ENGINES:
        try:
            found[name] = select_kernel(model, x, name)
        except ValueError:  # this engine does not implement this model
            continue
    return found


def check_consistency(model, x, *, rtol: float = 1e-12, like=None) -> list[Consistency]:
    r"""Compare every engine that accepts ``model`` with the model's reference on ``x``.

    The reference is the model's own numpy methods (``velocity_unchecked``, ``attention_output``, and the
    step :math:`\mathrm{normalize}(x + h v)` built from them), or for a model in :math:`\mathbb{R}^d`
    :meth:`~meanfield.PureAttention.velocity_at` (at :math:`M(t)`, :data:`RESCALING_TIME`, for rescaled
    tokens; relative to its bound :math:`H\max_h\|V_h\|_2\max_i|x_i|`); each engine's velocity and
    attention output must agree with it to ``rtol`` of the largest attention output (the
    velocity :math:`P_x a` cancels most of :math:`a`, not its round-off), and its steps (projected
    and not) to ``rtol`` of the unit points: the round-off of sums of ``n`` terms. An engine that
    also sums weighted measures (``weighted_velocity(x, masses)``, the series) is compared with
    ``model.velocity_field(x, x, masses)`` at unequal masses (drawn from a fixed seed), to ``rtol``
    of the largest attention output.

    Parameters
    ----------
    model
        Any model the library accepts.
    x : numpy.ndarray, shape (systems, n, d)
        Unit vectors (any finite tokens for a model in :math:`\mathbb{R}^d`).
    rtol : float
    like : array, optional
        An array of another namespace: compare that namespace's engine instead (``x`` is moved
        into it).

    Returns
    -------
    list of Consistency
        One record per engine compared (empty when no engine besides the reference accepts the model).

    Raises
    ------
    AssertionError
        Naming the engine, the quantity and the discrepancy, when one exceeds ``rtol``.
    """
    if not model.on_sphere:
        return _check_euclidean(model, x, rtol, like)
    reference = NumpyKernel(model)
    expected = {"velocity_unchecked": reference.velocity_unchecked(x), "attention_output": reference.attention_output(x),
                "step": reference.step(x, STEP, project=True), "layer": reference.step(x, STEP, project=False)}
    output_scale = float(np.abs(expected["attention_output"]).max()) or 1.0
    if like is not None:
        x = array_namespace(like).asarray(x)
    records = []
    for name, engine in engines_for(model, x).items():
        found = {"velocity_unchecked": engine.velocity_unchecked(x), "attention_output": engine.attention_output(x),
                 "step": engine.step(x, STEP, project=True), "layer": engine.step(x, STEP, project=False)}
        scale = {"velocity_unchecked": output_scale, "attention_output": output_scale, "step": 1.0, "layer": 1.0}
        errors = {key: float(np.abs(to_numpy(found[key]) - expected[key]).max()) / scale[key] for key in expected}
        for key, error in errors.items():
            if not error <= rtol:
                raise AssertionError(f"engine {name!r} ({type(engine).__name__}) is {error:.3g} (relative) from "
                                     f"the reference {key} of {model!r} on x of shape {tuple(x.shape)} (rtol {rtol:g})")
        weighted = _weighted_error(model, engine, x, output_scale)
        if weighted is not None and not weighted <= rtol:
            raise AssertionError(f"engine {name!r} ({type(engine).__name__}) is {weighted:.3g} (relative) from the "
                                 f"reference velocity_field of {model!r} at weighted atoms of shape {tuple(x.shape)} "
                                 f"(rtol {rtol:g})")
        records.append(Consistency(name, errors["velocity_unchecked"], errors["attention_output"],
                                   max(errors["step"], errors["layer"]), weighted))
    return records


def _weighted_error(model, engine, x, scale: float) -> float | None:
    """How far ``engine.weighted_velocity`` is from the model's field of the same weighted measure (relative to
    ``scale``); ``None`` for an engine that sums tokens of equal mass only."""
    if not hasattr(engine, "weighted_velocity") or not is_numpy(x):
        return None
    masses = np.random.default_rng(WEIGHTED_SEED).uniform(0.1, 1.0, x.shape[:-1])
    masses /= masses.sum(axis=-1, keepdims=True)
    expected = model.velocity_field(x, x, masses)
    return float(np.abs(engine.weighted_velocity(x, masses) - expected).max()) / scale


def _check_euclidean(model, x, rtol: float, like) -> list[Consistency]:
    r""":func:`check_consistency` for a model in :math:`\mathbb{R}^d`: the velocity alone."""
    d = x.shape[-1]
    rescaling = model.rescaling(RESCALING_TIME, d)
    expected = model.velocity_at(x, rescaling)
    bound = model.heads * max(np.linalg.norm(v, 2) for _, _, v in model.head_matrices(d)) * \
        float(np.linalg.norm(x, axis=-1).max())
    records = []
    for name, engine in engines_for(model, x if like is None else array_namespace(like).asarray(x)).items():
        found = engine.velocity_at(engine.asarray(x), rescaling)
        error = float(np.abs(to_numpy(found) - expected).max()) / (bound or 1.0)
        if not error <= rtol:
            raise AssertionError(f"engine {name!r} ({type(engine).__name__}) is {error:.3g} (relative) from "
                                 f"the reference velocity_at of {model!r} on x of shape {tuple(x.shape)} (rtol {rtol:g})")
        records.append(Consistency(name, error, None, None))
    return records
