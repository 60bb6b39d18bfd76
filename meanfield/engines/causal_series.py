r"""Causal attention on the circle in ``O(n K)``: the kernel's Fourier series and a causal scan.

With :math:`z_j = x^1_j + i x^2_j` and the kernel's series
:math:`k(\theta_i - \theta_j) = \sum_{|m| \le M} a_{|m|}\, z_i^m \bar z_j^m`
(:mod:`meanfield.series`; :math:`a_m = I_m(\beta)`, times :math:`e^{-\beta}` for SA), every
causal sum is a combination of the running moments

.. math:: T_m(i) = \sum_{j<i} \pi_{ij}\, \bar z_j^{\,m}, \qquad
          T_m(i+1) = e^{-\lambda/n}\big(T_m(i) + \bar z_i^{\,m}\big),

an exponential scan over positions (the ALiBi weights are geometric in ``i - j``):

.. math:: \sum_{j<i}\pi_{ij} k_{ij} = a_0 T_0 + 2\sum_{m\ge1} a_m \mathrm{Re}(z_i^m T_m), \qquad
          \sum_{j<i}\pi_{ij} k_{ij}\, z_j = \sum_{|m|\le M} a_{|m|}\, z_i^m T_{m-1}

(:math:`T_{-m} = \bar T_m`; :math:`\bar z_j^{\,m} z_j = \bar z_j^{\,m-1}` on the circle). Cost:
about ``20 M`` flops per token instead of ``4 n``.

Accuracy: each pair weight carries the truncation error :math:`2^{-56} k(1)` of the series.
For USA the result is divided by the positional total, so the velocity is exact to round-off
relative to its scale :math:`c\,e^{\beta}`. For SA the denominator is the sum of the weights
themselves, which can be as small as :math:`e^{-2\beta-\lambda}` times its largest value
(every earlier token antipodal): ``"auto"`` takes the series for SA only while
:math:`2\beta + \lambda \le` :data:`SA_SERIES_MAX_EXPONENT` (relative error below ``1e-12``).
"""

from __future__ import annotations

import numba
import numpy as np

from .fused import FAST_MATH, OutputKernel
from .series import series_degree

#: Largest ``2 beta + alibi`` at which causal SA takes the series by default (see module docstring).
SA_SERIES_MAX_EXPONENT = 10.0


class CausalCircleSeries(OutputKernel):
    """Attention output, velocity and step of a :class:`~meanfield.causal.CausalAttention` on the circle, ``O(n K)``.

    For models without matrices whose heads share one ``beta`` and one slope (their values add up).
    """

    name = "series"

    def __init__(self, model) -> None:
        if not (model.without_matrices and len(model.mixed_groups) == 1):
            raise ValueError("kernel='series' for causal attention needs heads without query, key or value matrices "
                             f"that share one beta and one alibi slope, got {model!r}")
        mixed = model.mixed_model
        self.degree = series_degree(mixed, 2)
        self.coefficients = mixed.kernel_spectrum(self.degree, 2) / (2.0 * np.pi)
        self.model = model
        self.settings = {"series_degree": self.degree}

    def _attention(self, unit: np.ndarray) -> np.ndarray:
        if unit.shape[-1] != 2:
            raise ValueError(f"the causal series is for points on the circle (R^2), got R^{unit.shape[-1]}")
        x = np.ascontiguousarray(unit, dtype=float).reshape((-1,) + unit.shape[-2:])
        out = np.empty_like(x)
        model = self.model
        n = x.shape[1]
        ((alibi, mixed),) = model.mixed_groups
        totals = model.positional_totals(n, alibi)
        _causal_circle(x, self.coefficients, np.exp(-alibi / n), bool(model.normalized),
                       bool(model.include_self), mixed.value_scale, totals, out)
        return out.reshape(unit.shape)


@numba.njit(cache=True, error_model="numpy", fastmath=FAST_MATH, parallel=True)
def _causal_circle(x, a, decay, normalized, include_self, value, totals, out):
    """``out_i = c N_i / D_i`` (SA) or ``c N_i / Z_i`` (USA); zero where nothing is seen (module docstring)."""
    b, n, _ = x.shape
    modes = a.size - 1
    for s in numba.prange(b):
        tr, ti = np.zeros(modes + 2), np.zeros(modes + 2)
        pr, pi = np.empty(modes + 2), np.empty(modes + 2)
        for i in range(n):
            c, sn = x[s, i, 0], x[s, i, 1]
            pr[0], pi[0] = 1.0, 0.0
            for m in range(1, modes + 2):  # p_m = z_i^m
                pr[m] = pr[m - 1] * c - pi[m - 1] * sn
                pi[m] = pr[m - 1] * sn + pi[m - 1] * c
            if include_self:
                for m in range(modes + 2):
                    tr[m] += pr[m]
                    ti[m] -= pi[m]
            # D = a0 T0 + 2 sum a_m Re(p_m T_m);  N = a0 conj(T_1) + sum a_m (p_m T_{m-1} + conj(p_m T_{m+1}))
            den = a[0] * tr[0]
            nr = a[0] * tr[1]
            ni = -a[0] * ti[1]
            for m in range(1, modes + 1):
                den += 2.0 * a[m] * (pr[m] * tr[m] - pi[m] * ti[m])
                nr += a[m] * ((pr[m] * tr[m - 1] - pi[m] * ti[m - 1]) + (pr[m] * tr[m + 1] - pi[m] * ti[m + 1]))
                ni += a[m] * ((pr[m] * ti[m - 1] + pi[m] * tr[m - 1]) - (pr[m] * ti[m + 1] + pi[m] * tr[m + 1]))
            total = den if normalized else totals[i]
            if total > 0.0:
                out[s, i, 0] = value * nr / total
                out[s, i, 1] = value * ni / total
            else:
                out[s, i, 0] = 0.0
                out[s, i, 1] = 0.0
            for m in range(modes + 2):
                if not include_self:
                    tr[m] += pr[m]
                    ti[m] -= pi[m]
                tr[m] *= decay
                ti[m] *= decay
