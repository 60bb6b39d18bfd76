r"""Metastability read off a run and predicted from its start: cluster counts, positions, merge times, the staircase.

**What the start predicts.** Perturbations of the uniform state of degree :math:`l` grow at
the rate :math:`\gamma_l` of the dispersion relation (:func:`validation.growth_rate`); the
fastest-growing degree :math:`l^*` sets the number of clusters that form first (on the
circle, :math:`l^*` clusters at the maxima of the growing mode,
:math:`\theta_j = (\arg \hat c_{l^*} + 2\pi j)/l^*` with
:math:`\hat c_k = \int e^{ik\theta}\,d\mu_0`). The prediction holds where the maximum of
:math:`\gamma_l` is sharp; where neighbouring degrees grow almost as fast (large ``beta``) the
count a run shows can differ by one.

**Merge times.** Two SA clusters of masses :math:`m_1, m_2` at angle :math:`\varphi` (any
:math:`S^{d-1}`: they stay on the great circle through them) close their gap at the speed

.. math:: \dot\varphi = -\sin\varphi\Big(\frac{m_2 a}{m_1 + m_2 a} + \frac{m_1 a}{m_2 + m_1 a}\Big),
          \qquad a = e^{-\beta(1 - \cos\varphi)},

and while :math:`a \ll 1` the time to close from :math:`\varphi_0` is dominated by the start
(Laplace's method on :math:`\int d\varphi / \dot\varphi`):

.. math:: T \simeq \frac{e^{\beta(1 - \cos\varphi_0)}}{\beta\,\sin^2\varphi_0\,(m_1/m_2 + m_2/m_1)}
          \big(1 + O(1/\beta)\big),

exponentially long in :math:`\beta` and in the gap (:func:`asymptotic_merge_time`; the
relative correction is measured to fall like :math:`1/\beta` in the tests). Merge times
measured at several ``beta`` are fitted to :math:`\log(\beta T) = s\,\beta + c + e/\beta` by least squares
(:func:`merge_time_fit`, with standard errors); the law predicts :math:`s = 1 - \cos\varphi_0`.

**The staircase.** In the rescaled time :math:`\tau = \log t / \beta` (:func:`rescaled_time`) a
merge of clusters at gap :math:`\varphi` happens at :math:`\tau \to 1 - \cos\varphi \le 2` as
:math:`\beta \to \infty`: every merge happens in finite rescaled time and the energy, constant
while the clusters wait, climbs in steps to its maximum. :func:`plateaus` cuts a run into its
plateaus (outputs of one cluster count) and :func:`plateau_saddles` gives the critical
configuration of the energy each plateau is near, with its index
(``meanfield.landscape.critical_configuration``): the saddle-to-saddle sequence.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import xarray as xr

from meanfield.checks import EXP_OVERFLOW, check_int, check_real
from meanfield.landscape import critical_configuration
from meanfield.sphere import circle_angles

from .references import growth_rate


def predicted_cluster_count(model, d: int = 2, *, max_degree: int | None = None) -> int:
    r"""The fastest-growing degree :math:`l^* = \arg\max_l \gamma_l` of the uniform state's perturbations.

    Parameters
    ----------
    model : SelfAttention or ZonalAggregation
        A zonal model.
    d : int
        The ambient dimension (2: the circle).
    max_degree : int, optional
        The largest degree compared (default :math:`4(\sqrt\beta + 2)`, beyond which the
        rates of SA fall).

    Returns
    -------
    int
        :math:`l^*` (on the circle, the number of clusters that form first).
    """
    check_int(d, "d", minimum=2)
    if max_degree is None:
        max_degree = 4 * int(np.sqrt(getattr(model, "beta", 1.0)) + 2)
    check_int(max_degree, "max_degree", minimum=1)
    rates = [growth_rate(model, degree, d) for degree in range(1, max_degree + 1)]
    return int(np.argmax(rates)) + 1


def predicted_cluster_positions(x0: np.ndarray, count: int, masses: np.ndarray | None = None) -> np.ndarray:
    r"""Where ``count`` clusters form on the circle: the maxima :math:`(\arg\hat c_k + 2\pi j)/k` of the mode ``k = count``.

    Parameters
    ----------
    x0 : numpy.ndarray, shape (n, 2)
        The initial tokens (or atoms) on the circle.
    count : int
        The mode ``k`` (:func:`predicted_cluster_count`).
    masses : numpy.ndarray, shape (n,), optional
        Their masses (default equal).

    Returns
    -------
    numpy.ndarray, shape (count,)
        Angles in :math:`[0, 2\pi)`, increasing.
    """
    check_int(count, "count", minimum=1)
    x0 = np.asarray(x0, dtype=float)
    if x0.ndim != 2 or x0.shape[1] != 2:
        raise ValueError(f"x0 must be tokens on the circle, shape (n, 2), got {x0.shape}")
    weights = np.full(len(x0), 1.0 / len(x0)) if masses is None else np.asarray(masses, dtype=float)
    coefficient = np.sum(weights * np.exp(1j * count * circle_angles(x0)))
    return np.sort(np.mod((np.angle(coefficient) + 2 * np.pi * np.arange(count)) / count, 2 * np.pi))


def asymptotic_merge_time(beta: float, gap: float, masses: tuple[float, float] = (0.5, 0.5)) -> float:
    r"""The leading term of the time two SA clusters at angle ``gap`` take to merge (:doc:`/guide/collapse`).

    .. math:: T \simeq \frac{e^{\beta(1 - \cos\varphi_0)}}{\beta\,\sin^2\varphi_0\,(m_1/m_2 + m_2/m_1)}

    Parameters
    ----------
    beta : float
        The inverse temperature (positive).
    gap : float
        The initial angle :math:`\varphi_0 \in (0, \pi)` between the clusters.
    masses : (float, float)
        Their masses (positive).

    Returns
    -------
    float
        The time, to a relative :math:`O(1/\beta)`.

    Raises
    ------
    ValueError
        If ``gap`` is outside :math:`(0, \pi)` or a mass is not positive.
    OverflowError
        If the time exceeds double precision.
    """
    check_real(beta, "beta", minimum=0.0, strictly=True)
    if not 0 < gap < np.pi:
        raise ValueError(f"gap must be in (0, pi), got {gap}")
    first, second = (float(mass) for mass in masses)
    if not (first > 0 and second > 0):
        raise ValueError(f"masses must be positive, got {masses}")
    log_time = beta * (1 - np.cos(gap)) - np.log(beta * np.sin(gap) ** 2 * (first / second + second / first))
    if log_time > EXP_OVERFLOW:
        raise OverflowError(f"the merge time e^{log_time:.6g} exceeds double precision (beta={beta}, gap={gap})")
    return float(np.exp(log_time))


@dataclass(frozen=True)
class MergeTimeFit:
    r"""The least-squares fit :math:`\log(\beta T) = s\,\beta + c + e/\beta` of merge times.

    Parameters
    ----------
    slope, slope_error : float
        :math:`s` and its standard error.
    intercept, intercept_error : float
        :math:`c` and its standard error.
    """

    slope: float
    slope_error: float
    intercept: float
    intercept_error: float

    def slope_interval(self, z: float = 2.0) -> tuple[float, float]:
        r"""The slope within ``z`` standard errors.

        Parameters
        ----------
        z : float
            The number of standard errors.

        Returns
        -------
        (float, float)
            :math:`s - z\sigma_s` and :math:`s + z\sigma_s`.
        """
        return self.slope - z * self.slope_error, self.slope + z * self.slope_error


def merge_time_fit(betas, times) -> MergeTimeFit:
    r"""Fit measured merge times to the law's form :math:`\log(\beta T) = s\,\beta + c + e/\beta` (:doc:`/guide/collapse`).

    The term :math:`e/\beta` is the law's first correction (relative :math:`O(1/\beta)`); without
    it the slope of a fit over moderate ``beta`` is biased by it. The law predicts
    :math:`s = 1 - \cos\varphi_0` and :math:`c = -\log(\sin^2\varphi_0\,(m_1/m_2 + m_2/m_1))`.

    Parameters
    ----------
    betas, times : array_like
        At least four ``beta`` and the merge times measured there (positive).

    Returns
    -------
    MergeTimeFit
        Slope and intercept with their standard errors (ordinary least squares; the residuals'
        variance estimates the noise).
    """
    betas, times = np.asarray(betas, dtype=float), np.asarray(times, dtype=float)
    if betas.ndim != 1 or betas.shape != times.shape or betas.size < 4:
        raise ValueError(f"betas and times must be 1-D of one length, at least 4, got {betas.shape} and {times.shape}")
    if not (np.all(np.isfinite(times)) and np.all(np.isfinite(betas))) or np.any(times <= 0) or np.any(betas <= 0):
        raise ValueError("betas and times must be positive and finite")
    design = np.column_stack([betas, np.ones_like(betas), 1.0 / betas])
    values = np.log(betas * times)
    coefficients, *_ = np.linalg.lstsq(design, values, rcond=None)
    residual = values - design @ coefficients
    variance = float(residual @ residual) / (betas.size - design.shape[1])
    errors = np.sqrt(np.diag(variance * np.linalg.inv(design.T @ design)))
    return MergeTimeFit(float(coefficients[0]), float(errors[0]), float(coefficients[1]), float(errors[1]))


def rescaled_time(t, beta: float) -> np.ndarray:
    r"""The rescaled time :math:`\tau = \log t / \beta` in which merges happen in finite time (:doc:`/guide/collapse`).

    Parameters
    ----------
    t : array_like
        Times (positive; ``0`` gives :math:`-\infty`).
    beta : float
        The inverse temperature (positive).

    Returns
    -------
    numpy.ndarray
        :math:`\tau`, the shape of ``t``.
    """
    check_real(beta, "beta", minimum=0.0, strictly=True)
    with np.errstate(divide="ignore"):
        return np.log(np.asarray(t, dtype=float)) / beta


@dataclass(frozen=True)
class Plateau:
    """A stretch of outputs with one cluster count.

    Parameters
    ----------
    first, last : int
        Its first and last output's index.
    start, end : float
        Their times.
    count : int
        The cluster count.
    energy : float
        The energy at its last output.
    """

    first: int
    last: int
    start: float
    end: float
    count: int
    energy: float


def plateaus(ds: xr.Dataset) -> list[Plateau]:
    """The plateaus of a run: maximal runs of outputs with one ``cluster_count``, in time order.

    Parameters
    ----------
    ds : xarray.Dataset
        A run that records ``cluster_count`` and ``energy`` (``meanfield.simulate_clusters``, the
        Lagrangian solvers).

    Returns
    -------
    list of Plateau
    """
    counts = ds.cluster_count.values
    energy = ds.energy.values if "energy" in ds else np.full(counts.shape, np.nan)
    times = ds.time.values
    starts = np.flatnonzero(np.concatenate([[True], counts[1:] != counts[:-1]]))
    ends = np.concatenate([starts[1:] - 1, [counts.size - 1]])
    return [Plateau(int(first), int(last), float(times[first]), float(times[last]), int(counts[first]),
                    float(energy[last])) for first, last in zip(starts, ends)]


def plateau_saddles(model, ds: xr.Dataset, *, min_outputs: int = 2) -> list[tuple[Plateau, object]]:
    """The critical configuration of the energy each plateau of a particle run is near, with its index.

    Newton's method on the tokens (``meanfield.landscape.critical_configuration``) from the
    plateau's last output: the configuration of clusters the run waits near and the number of
    directions the dynamics leaves it by (``index``; 0 at the final consensus).

    Parameters
    ----------
    model : SelfAttention
        The run's model (zonal).
    ds : xarray.Dataset
        A particle run with ``x(time, particle, component)`` (``meanfield.simulate_clusters``).
    min_outputs : int
        Plateaus of fewer outputs (the passages between) are left out.

    Returns
    -------
    list of (Plateau, meanfield.landscape.CriticalConfiguration)
    """
    return [(plateau, critical_configuration(model, ds.x.values[plateau.last]))
            for plateau in plateaus(ds) if plateau.last - plateau.first + 1 >= min_outputs]
