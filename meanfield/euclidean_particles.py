r"""The particle system of :class:`~meanfield.euclidean.PureAttention`: tokens in :math:`\mathbb{R}^d`.

:func:`meanfield.simulate_particles` and :func:`meanfield.observe_particles` come here when
the model's ``on_sphere`` is false; the schemes are those of the sphere without its
projection:

``"dop853"`` (default), an embedded pair of :mod:`meanfield.integration`
    Adaptive steps with error control, ``rtol`` relative to the tokens' size.
``"rk4"``
    Classical RK4 with fixed steps, the stages at their own times (the rescaled velocity
    depends on ``t`` through :math:`M(t) = e^{tHV}`).
``"euler"``
    Forward Euler of the model's equation (original or rescaled variables).
``"layer"``
    The paper's discrete Transformer :math:`x \leftarrow x + \Delta t\sum_h V_h P^h x`; in rescaled
    variables its Remark 4: :math:`z \leftarrow z + \Delta t\,R^{-1}V\sum_h(P^h z - z)`,
    :math:`R = I + \Delta t\,HV`, the logits at :math:`S z` with :math:`S` the product of the
    :math:`R` of the steps taken (from :math:`S = M(t_0)`), so that :math:`z^{[k]} = S_k^{-1}x^{[k]}`
    exactly.

The time-dependent right-hand side goes through the library's Runge-Kutta steppers with time
as one more coordinate (:math:`\dot t = 1`, integrated exactly by every consistent tableau);
the error norm ignores it.
"""

from __future__ import annotations

from typing import NoReturn

import numpy as np

from .errors import StepSizeCollapse
from .euclidean import check_tokens
from .integration import CLASSICAL_RK4, AdaptiveStep, ExplicitRungeKutta, ExplicitTableau, StepCounts, integrate
from .integration.fixed import dop853_frames, equal_steps
from .records import PARTICLES, euclidean_name, record_attrs

class EuclideanFlow:
    """The model's velocity as a function of ``(t, x)`` on batches ``(systems, n, d)``, and its rescaling."""

    def __init__(self, model, d: int):
        self.model, self.d = model, d
        self.identity = np.eye(d)

    def rescaling(self, t: float) -> np.ndarray:
        return self.model.rescaling(t, self.d) if self.model.rescaled else self.identity

    def velocity(self, t: float, x: np.ndarray) -> np.ndarray:
        return self.model.velocity_at(x, self.rescaling(t))

    def timed_rhs(self, shape: tuple[int, ...]):
        """The autonomous right-hand side of the state ``[t, x.ravel()]`` (``dt/dt = 1``)."""
        def rhs(q: np.ndarray) -> np.ndarray:
            out = np.empty_like(q)
            out[0] = 1.0
            out[1:] = self.velocity(float(q[0]), q[1:].reshape(shape)).ravel()
            return out
        return rhs


def checked_tokens(model, x0) -> np.ndarray:
    """``x0`` as tokens of ``model``: numpy, shape ``(n, d)`` or ``(systems, n, d)``, finite."""
    if not isinstance(x0, (np.ndarray, list, tuple)):
        raise ValueError(f"x0: PureAttention computes on numpy arrays, got {type(x0).__module__} arrays")
    x0 = check_tokens(x0, "x0", model.dimension)
    if x0.ndim > 3:
        raise ValueError(f"x0 must have shape (n, d) or (systems, n, d), got {x0.shape}")
    return x0


def simulate(model, x0: np.ndarray, times: np.ndarray, method, rtol: float, atol: float, dt: float, bar,
             settings: dict, attention: bool):
    """The run of ``model`` from checked tokens ``x0`` through checked ``times``, as a dataset."""
    batch = x0 if x0.ndim == 3 else x0[None]
    model.check_interval(batch, times[0], times[-1])
    flow = EuclideanFlow(model, batch.shape[-1])
    single = x0.ndim == 2

    def dataset(frames, rescalings):
        return euclidean_dataset(model, frames, rescalings, times, settings, attention=attention, single=single)

    if method == "dop853":
        def fail(t: float, message: str, frames: list) -> NoReturn:
            settings["failure"] = message
            raise StepSizeCollapse(f"adaptive integration failed at t={t:.6g}: {message}", time=t,
                                   partial=dataset(frames, [flow.rescaling(s) for s in times[:len(frames)]]))

        frames, evaluations = dop853_frames(lambda t, y: flow.velocity(t, y.reshape(batch.shape)).ravel(),
                                            batch, times, rtol, atol, bar, fail)
        settings.update(velocity_evaluations=evaluations)
        return dataset(frames, [flow.rescaling(t) for t in times])
    if isinstance(method, ExplicitTableau):
        return dataset(*_adaptive_pair(flow, batch, times, method, rtol, atol, bar, settings, dataset))
    return dataset(*fixed_step(flow, batch, times, method, dt, bar, np.copy, settings))


def _adaptive_pair(flow, batch, times, tableau, rtol, atol, bar, settings, dataset):
    """An embedded pair through the shared controller and driver, time as the state's first coordinate."""
    shape = batch.shape

    def rms(q):
        return float(np.sqrt(np.mean(q[1:] ** 2)))

    rhs = flow.timed_rhs(shape)
    stepper = ExplicitRungeKutta(tableau, rhs, norm=rms, tolerance=lambda q: atol + rtol * rms(q))
    frames, rescalings, counts = [], [], StepCounts()

    def record(t: float, q: np.ndarray) -> None:
        frames.append(q[1:].reshape(shape).copy())
        rescalings.append(flow.rescaling(t))

    def collapse(t: float, reason: str) -> NoReturn:
        settings.update(counts.as_dict(), failure=reason)
        raise StepSizeCollapse(f"adaptive integration failed at t={t:.6g}: {reason}", time=t,
                               partial=dataset(frames, rescalings))

    q0 = np.concatenate([[times[0]], batch.ravel()])
    speed = rms(rhs(q0))
    first = min(times[-1] - times[0], 0.01 * rms(q0) / speed if speed > 0 else np.inf)
    integrate(q0, times, AdaptiveStep(stepper), first_step=first, record=record, collapse=collapse,
              observer=None, progress=bar, name="particles", max_steps=10_000_000, counts=counts)
    settings.update(counts.as_dict(), velocity_evaluations=stepper.evaluations)
    return frames, rescalings


def fixed_step(flow, batch, times, method: str, dt: float, bar, observe, settings: dict):
    """A fixed-step scheme; returns ``[observe(x(t)) for t in times]`` and :math:`M(t)` at each."""
    shape, model = batch.shape, flow.model
    scheme = {"rk4": "RK4", "euler": "forward Euler", "layer": "Transformer layer x + h V P x"}[method]
    if method == "layer" and model.rescaled:
        scheme += " (rescaled by R = I + h H V, Remark 4)"
    settings.update(scheme=scheme)
    stepper = ExplicitRungeKutta(CLASSICAL_RK4, flow.timed_rhs(shape))
    linear = model.linear_part(flow.d) if model.rescaled else None
    x, cumulative = batch, flow.rescaling(times[0])
    frames, rescalings, evaluations = [observe(x)], [cumulative], 0
    for t0, t1 in zip(times[:-1], times[1:]):
        count, h = equal_steps(t0, t1, dt)
        for k in range(count):
            t = t0 + k * h
            if method == "rk4":
                x = stepper.advance(np.concatenate([[t], x.ravel()]), h)[0][1:].reshape(shape)
                continue
            evaluations += 1
            if method == "euler":
                x = x + h * flow.velocity(t, x)
            elif linear is None:
                x = x + h * model.velocity_at(x, cumulative)
            else:
                step_matrix = np.eye(flow.d) + h * linear  # R
                velocity = model.velocity_at(x, cumulative)
                x = x + h * np.linalg.solve(step_matrix, velocity.reshape(-1, flow.d).T).T.reshape(shape)
                cumulative = step_matrix @ cumulative
        frames.append(observe(x))
        rescalings.append(cumulative if method == "layer" else flow.rescaling(t1))
        bar.update(t1 - t0)
    settings.update(velocity_evaluations=stepper.evaluations + evaluations)
    return frames, rescalings


def euclidean_dataset(model, frames, rescalings, times, settings: dict, *, attention: bool, single: bool):
    """The run's dataset from batch frames ``(systems, n, d)``: ``x`` (the model's variables),
    ``rescaling`` (rescaled models: :math:`x = M z`), ``attention`` (:math:`P^h(t)`) on request."""
    import xarray as xr

    x = np.stack(frames, axis=1)  # (system, time, n, d)
    matrices = np.stack(rescalings)
    variables = {"x": (("system", "time", "particle", "component"), x,
                       {"long_name": "rescaled tokens z = M(t)^-1 x" if model.rescaled else "tokens"})}
    if model.rescaled:
        variables["rescaling"] = (("time", "component", "component_out"), matrices,
                                  {"long_name": "M(t) with x = M z: e^(t H V), or the product of R = I + h H V"})
    if attention:
        matrix = np.stack([model.attention_matrix(x[:, k], matrices[k]) for k in range(x.shape[1])], axis=1)
        variables["attention"] = (("system", "time", "head", "particle", "key"), matrix,
                                  {"long_name": "attention matrix P(t), rows sum to one"})
    ds = xr.Dataset(variables, coords={"time": times[: x.shape[1]]})
    if single:
        ds = ds.isel(system=0, drop=True)
    ds.attrs.update(record_attrs(PARTICLES, euclidean_name(x.shape[-1]), model, settings))
    return ds
