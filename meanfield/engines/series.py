r"""Exact fast summation of zonal attention through the kernel's series: ``O(n K)`` per velocity.

A zonal kernel is diagonal in harmonics (Funk-Hecke, :mod:`meanfield.spectra`):

.. math:: k(\langle x, y\rangle) = \sum_{l} \lambda_l \sum_{m} Y_{lm}(x)\, \overline{Y_{lm}(y)},

with :math:`Y_{lm}` orthonormal on the sphere and :math:`\lambda_l` the eigenvalues of
:meth:`SelfAttention.kernel_spectrum` (:math:`e^{\beta\langle x,y\rangle}`, or
:math:`e^{\beta(\langle x,y\rangle-1)}` for SA and time-rescaled USA). The attention sums of
``n`` tokens then split into an analysis and a synthesis,

.. math:: \sum_j k(\langle x_i, x_j\rangle)\, f(x_j) = \sum_{l,m} \lambda_l\, Y_{lm}(x_i)\,
          \underbrace{\sum_j \overline{Y_{lm}(x_j)}\, f(x_j)}_{G_{lm}[f]},
          \qquad f \in \{1, x^1, \dots, x^d\},

which gives the softmax denominators (``f = 1``) and the weighted sums of the tokens in
``O(n K)`` operations, ``K`` the number of harmonics kept, instead of ``O(n^2)``.

- Circle (``d = 2``): :math:`Y_m = e^{im\theta}/\sqrt{2\pi}`, :math:`\lambda_m = 2\pi I_m(\beta)`;
  :math:`K = 2M + 1` modes, the powers :math:`z_j^m` of :math:`z_j = x^1_j + i x^2_j` by
  repeated multiplication (relative error :math:`\le m\,\epsilon`).
- :math:`S^2` (``d = 3``): :math:`K = (L + 1)^2` harmonics from the three-term recurrence of
  the orthonormal associated Legendre functions, written in Cartesian coordinates
  (:math:`\sin\theta\, e^{i\phi} = x^1 + i x^2`, :math:`\cos\theta = x^3`), so no angle is
  ever formed.

Truncation: the series stops at the smallest degree whose tail
:math:`\sum_{l > L} \lambda_l \dim H_l / |S^{d-1}|`, which bounds :math:`|k - k_L|` uniformly,
is below :data:`TAIL` times :math:`k(1) = \sum_l \lambda_l \dim H_l / |S^{d-1}|`, the
kernel's largest value. Every pair weight then carries an absolute error below
:math:`2^{-56} k(1)`, which is the round-off of the direct sum's largest term, and each
denominator contains its self term :math:`k(1)`: the series equals the direct sum to
round-off (tests: 1e-12 for ``beta`` up to 40 and ``n`` in the thousands).

Points are processed in blocks of :data:`POINT_BLOCK` so that the per-point recurrence
vectors stay in the L1/L2 cache whatever ``n``.
"""

from __future__ import annotations

import numba
import numpy as np

from .fused import FAST_MATH, NO_NOISE, OUTPUT, STEP, VELOCITY, OutputKernel, finish_rows, finish_systems
from .kernels import SERIES_COST, TABLED_POINT_COST, TABLED_SERIES_COST
from ..models import SelfAttention
from ..spectra import SERIES_TAIL, truncation_degree
from ..sphere import normalize

#: Relative bound on the discarded tail of the kernel's series (below double round-off).
TAIL = SERIES_TAIL

#: Points per block of the per-point recurrences (eight vectors of 8 KiB: the L1/L2 cache).
POINT_BLOCK = 1024

#: Largest power table of a system on the circle (modes x tokens, each of its real and
#: imaginary parts: 512 KiB), kept from the analysis to the synthesis instead of forming the
#: powers twice (faster up to the largest table that fits the L2 cache; ``benchmarks/bench_series.py``).
TABLE_ELEMENTS = 2**16

#: Dimensions with a series: the circle (Fourier) and S^2 (spherical harmonics).
SERIES_DIMENSIONS = (2, 3)

#: The masses of tokens of equal weight (the particle system): none, so that their sums are those of the
#: points themselves (the analysis starts every recurrence at 1, or at a weighted measure's mass).
NO_MASSES = np.empty((0, 0))


def harmonic_dimension(degree: np.ndarray, d: int) -> np.ndarray:
    """Dimension of the degree-``l`` harmonics on :math:`S^{d-1}`: 1, 2, 2, ... (circle), ``2l + 1`` (S^2)."""
    degree = np.asarray(degree)
    if d == 2:
        return np.where(degree == 0, 1, 2)
    return 2 * degree + 1


def series_degree(model, d: int) -> int:
    r"""Smallest degree ``L`` whose series tail is below :data:`TAIL` times the kernel's largest value."""
    guess = int(np.ceil(model.beta + 10.0 * np.sqrt(model.beta + 1.0) + 16))
    return truncation_degree(lambda top: model.kernel_spectrum(top, d) * harmonic_dimension(np.arange(top + 1), d),
                             guess)


def series_harmonics(model, d: int) -> int:
    """Number of harmonics the series of ``model`` sums on :math:`S^{d-1}` (``2 L + 1`` or ``(L + 1)^2``)."""
    degree = series_degree(model, d)
    return 2 * degree + 1 if d == 2 else (degree + 1) ** 2


def circle_series_tabled(n: int, harmonics: int) -> bool:
    """Whether the circle's series of ``harmonics = 2 M + 1`` terms keeps the powers of ``n`` tokens in a table."""
    return (harmonics // 2 + 2) * n <= TABLE_ELEMENTS


class SeriesAttention(OutputKernel):
    r"""Attention output, velocity and step of a zonal :class:`SelfAttention` by its kernel's series.

    Parameters
    ----------
    model : SelfAttention
        Zonal (``Q = K = I``, ``V = cI``, one head), SA or USA, any ``beta`` and diffusion.
    d : int
        2 (the circle) or 3 (:math:`S^2`).
    """

    name = "series"

    def __init__(self, model, d: int) -> None:
        if not (isinstance(model, SelfAttention) and model.is_zonal):
            raise ValueError(f"the series summation needs a zonal SelfAttention, got {model!r}")
        if d not in SERIES_DIMENSIONS:
            raise ValueError(f"the series summation is implemented for d in {SERIES_DIMENSIONS}, got d={d}")
        self.d = d
        self.degree = series_degree(model, d)
        self.harmonics = 2 * self.degree + 1 if d == 2 else (self.degree + 1) ** 2
        # lambda_l / |S^{d-1}| Y-normalisation folded in: Y_m = e^{im theta} / sqrt(2 pi) on the circle;
        # the sphere's recurrence produces orthonormal Y_lm itself.
        spectrum = model.kernel_spectrum(self.degree, d)
        self.weights = spectrum / (2.0 * np.pi) if d == 2 else spectrum
        self.normalized = bool(model.normalized)
        self.value = float(model.value)
        self.settings = {"series_degree": self.degree}

    def pair_totals(self, x: np.ndarray) -> np.ndarray:
        r""":math:`\sum_{i,j} k(\langle x_i, x_j\rangle)` per system (shape ``x.shape[:-2]``), for the energy.

        A sum of non-negative terms :math:`\lambda_l |\sum_j Y_{lm}(x_j)|^2`: relative round-off only.
        """
        flat = self._flat(normalize(x))
        if self.d == 2:
            out = np.empty(flat.shape[0])
            _circle_pair_totals(flat, self.weights, out)
        else:
            sums = harmonic_sums(flat, self.degree)  # [system, l, m]; orders -m are the conjugates
            fold = np.where(np.arange(self.degree + 1) == 0, 1.0, 2.0)
            out = np.einsum("slm,l,m->s", np.abs(sums) ** 2, self.weights, fold)
        return out.reshape(x.shape[:-2])

    def tokens_cheaper(self, tokens: int, atoms: int) -> bool:
        """Whether the sums over ``tokens`` cost less than over the ``atoms`` they sit on, weighted by their masses.

        Only the circle's tabled sums (several times cheaper per term than the streamed ones that
        weighted atoms take) can, while the atoms are nearly as many as the tokens.

        Parameters
        ----------
        tokens, atoms : int
            Their numbers.

        Returns
        -------
        bool
        """
        if self.d != 2 or not circle_series_tabled(tokens, self.harmonics):
            return False
        return tokens * (self.harmonics * TABLED_SERIES_COST + TABLED_POINT_COST) < atoms * self.harmonics * SERIES_COST

    def weighted_velocity(self, x: np.ndarray, masses: np.ndarray) -> np.ndarray:
        r"""The velocity of the measure :math:`\sum_j m_j \delta_{x_j}` at its atoms, by the series (``O(n K)``).

        An engine of the model's reference, ``model.velocity_field(x, x, masses)`` (checked
        against it by :func:`meanfield.engines.check_consistency`): each point's harmonics enter
        the analysis times its mass.

        Parameters
        ----------
        x : numpy.ndarray, shape (..., n, d)
            Nonzero points, used through ``x / |x|``.
        masses : numpy.ndarray, shape (..., n)
            Nonnegative masses of the atoms.

        Returns
        -------
        numpy.ndarray, shape (..., n, d)
            The velocities, tangent at ``x / |x|``.
        """
        unit = normalize(x)
        flat = self._flat(unit)
        weights = np.ascontiguousarray(masses, dtype=float).reshape(flat.shape[:2])
        out = np.empty_like(flat)
        summation = _circle_streamed if self.d == 2 else _sphere_attention
        summation(flat, self.weights, self.normalized, self.value, out, weights)
        finish_systems(flat, out, 1.0, 1.0, VELOCITY, 0.0, True, NO_NOISE, 0.0, out)
        return out.reshape(unit.shape)

    def _flat(self, unit: np.ndarray) -> np.ndarray:
        if unit.shape[-1] != self.d:
            raise ValueError(f"this series is for points in R^{self.d}, got R^{unit.shape[-1]}")
        return np.ascontiguousarray(unit, dtype=float).reshape((-1,) + unit.shape[-2:])

    def _attention(self, unit: np.ndarray) -> np.ndarray:
        return self._summed(unit, OUTPUT)

    def velocity_unchecked(self, x: np.ndarray) -> np.ndarray:
        return self._summed(normalize(x), VELOCITY)

    def step(self, x: np.ndarray, h: float, *, project: bool, noise: np.ndarray | None = None,
             noise_scale: float = 0.0) -> np.ndarray:
        return self._summed(x, STEP, h, project, NO_NOISE if noise is None else noise, noise_scale)

    def _summed(self, unit: np.ndarray, mode: int, h: float = 0.0, project: bool = True,
                noise: np.ndarray = NO_NOISE, noise_scale: float = 0.0) -> np.ndarray:
        """The attention output, the velocity or the step (``mode``, :func:`meanfield.engines.fused.finish_rows`)."""
        x = self._flat(unit)
        noise = noise.reshape(x.shape) if noise.shape[1] else noise
        out = np.empty_like(x)
        if self.d == 2 and circle_series_tabled(x.shape[1], 2 * self.degree + 1):
            _circle_tabled(x, self.weights, self.normalized, self.value, out, numba.get_num_threads(), mode, h,
                           project, noise, noise_scale)
            return out.reshape(unit.shape)
        summation = _circle_streamed if self.d == 2 else _sphere_attention
        summation(x, self.weights, self.normalized, self.value, out, NO_MASSES)
        if mode != OUTPUT:
            finish_systems(x, out, 1.0, 1.0, mode, h, project, noise, noise_scale, out)
        return out.reshape(unit.shape)


# --------------------------------------------------------------------------- circle
@numba.njit(cache=True, error_model="numpy", fastmath=FAST_MATH)
def _power_sums(x, s, fr, fi, pr, pi, masses):
    """``fr + i fi = F_m = sum_j w_j z_j^m``, ``m = 0 .. fr.size - 1``, for system ``s`` (``pr``, ``pi``: scratch);
    ``w_j = masses[s, j]``, or 1 where ``masses`` is :data:`NO_MASSES`."""
    n = x.shape[1]
    block = pr.size
    weighted = masses.shape[1] > 0
    fr[:] = 0.0
    fi[:] = 0.0
    for start in range(0, n, block):
        count = min(block, n - start)
        for j in range(count):
            pr[j] = masses[s, start + j] if weighted else 1.0
            pi[j] = 0.0
        for m in range(fr.size):
            accr = 0.0
            acci = 0.0
            for j in range(count):
                c, sn = x[s, start + j, 0], x[s, start + j, 1]
                accr += pr[j]
                acci += pi[j]
                r = pr[j] * c - pi[j] * sn
                pi[j] = pr[j] * sn + pi[j] * c
                pr[j] = r
            fr[m] += accr
            fi[m] += acci


@numba.njit(cache=True, error_model="numpy", parallel=True)
def _circle_pair_totals(x, a, out):
    r""":math:`\sum_{ij} k_{ij} = a_0 n^2 + 2 \sum_{m \ge 1} a_m |F_m|^2` per system."""
    b, n, _ = x.shape
    block = min(n, POINT_BLOCK)
    for s in numba.prange(b):
        pr, pi = np.empty(block), np.empty(block)
        fr, fi = np.empty(a.size), np.empty(a.size)
        # np.int64: a prange index is typed int64 but lowered as uint64, and the inner kernels would
        # compile for both (here and below)
        _power_sums(x, np.int64(s), fr, fi, pr, pi, np.empty((0, 0)))  # no masses (a global would be read-only)
        total = a[0] * n * n
        for m in range(1, a.size):
            total += 2.0 * a[m] * (fr[m] * fr[m] + fi[m] * fi[m])
        out[s] = total


@numba.njit(cache=True, error_model="numpy", fastmath=FAST_MATH, parallel=True)
def _circle_streamed(x, a, normalized, value, out, masses):
    r"""``out_i = c S_i / Z_i`` (SA) or ``c S_i / n`` (USA), :math:`k_{ij} = \sum_{|m| \le M} a_m z_i^m \bar z_j^m`.

    With :math:`F_m = \sum_j z_j^m`: :math:`Z_i = a_0 n + 2\sum_{m \ge 1} a_m \mathrm{Re}(z_i^m \bar F_m)`
    and :math:`S_i = a_0 F_1 + \sum_{m\ge1} a_m (z_i^m \bar F_{m-1} + \bar z_i^m F_{m+1})`
    (``S`` as a complex number: the two components of the weighted sum). With ``masses``
    :math:`w_j` (not :data:`NO_MASSES`) the sums are those of the measure :math:`\sum_j w_j\delta_{z_j}`:
    :math:`F_m = \sum_j w_j z_j^m`, :math:`F_0` in place of ``n`` in ``Z``, and USA's ``c S_i``.

    The powers are formed twice (for the sums, then for the synthesis), the points in
    blocks of :data:`POINT_BLOCK`: systems too large for :func:`_circle_tabled`.
    """
    b, n, _ = x.shape
    modes = a.size - 1
    block = min(n, POINT_BLOCK)
    weighted = masses.shape[1] > 0
    for s in numba.prange(b):
        pr, pi = np.empty(block), np.empty(block)
        z, sr, si = np.empty(block), np.empty(block), np.empty(block)
        fr, fi = np.empty(modes + 2), np.empty(modes + 2)
        _power_sums(x, np.int64(s), fr, fi, pr, pi, masses)
        total = fr[0] if weighted else n
        for start in range(0, n, block):
            count = min(block, n - start)
            for i in range(count):
                pr[i] = x[s, start + i, 0]
                pi[i] = x[s, start + i, 1]
                z[i] = a[0] * total
                sr[i] = a[0] * fr[1]
                si[i] = a[0] * fi[1]
            for m in range(1, modes + 1):
                zr, zi, c1, c2, c3, c4 = _mode_coefficients(a, fr, fi, m)
                for i in range(count):
                    c, sn = x[s, start + i, 0], x[s, start + i, 1]
                    z[i] += pr[i] * zr + pi[i] * zi
                    sr[i] += pr[i] * c1 + pi[i] * c2
                    si[i] += pi[i] * c3 - pr[i] * c4
                    r = pr[i] * c - pi[i] * sn
                    pi[i] = pr[i] * sn + pi[i] * c
                    pr[i] = r
            for i in range(count):
                scale = value / (z[i] if normalized else (1.0 if weighted else n))
                out[s, start + i, 0] = sr[i] * scale
                out[s, start + i, 1] = si[i] * scale


@numba.njit(cache=True, error_model="numpy", fastmath=FAST_MATH, parallel=True)
def _circle_tabled(x, a, normalized, value, out, threads, mode, h, project, noise, noise_scale):
    """:func:`_circle_streamed` with each system's powers kept in a table (:func:`_power_table`) from
    the sums to the synthesis; ``mode`` other than OUTPUT: each system's output then goes
    through :func:`meanfield.engines.fused.finish_rows` (the velocity, or the step with ``h``,
    ``noise``, ...) while it is in the L1 cache. Scratch arrays are allocated once per thread.

    The synthesis is written out in the parallel loop's body rather than in a function of its
    own, and the sums are not streamed (``benchmarks/bench_series.py`` times the variants).
    """
    b, n, _ = x.shape
    modes = a.size - 1
    chunks = min(b, threads)  # numba.get_num_threads() in here would keep the function out of the cache
    for chunk in numba.prange(chunks):
        pr, pi = np.empty((modes + 2, n)), np.empty((modes + 2, n))
        z, sr, si = np.empty(n), np.empty(n), np.empty(n)
        fr, fi = np.empty(modes + 2), np.empty(modes + 2)
        for s in range(chunk * b // chunks, (chunk + 1) * b // chunks):
            _power_table(x, s, pr, pi, fr, fi)
            for i in range(n):
                z[i], sr[i], si[i] = a[0] * n, a[0] * fr[1], a[0] * fi[1]
            for m in range(1, a.size):
                zr, zi, c1, c2, c3, c4 = _mode_coefficients(a, fr, fi, m)
                for i in range(n):
                    p, q = pr[m, i], pi[m, i]
                    z[i] += p * zr + q * zi
                    sr[i] += p * c1 + q * c2
                    si[i] += q * c3 - p * c4
            for i in range(n):
                scale = value / (z[i] if normalized else n)
                out[s, i, 0] = sr[i] * scale
                out[s, i, 1] = si[i] * scale
            if mode != OUTPUT:
                finish_rows(x, s, out, s, 2, 1.0, 1.0, mode, h, project, noise, s, noise_scale, out, s)


@numba.njit(cache=True, error_model="numpy", fastmath=FAST_MATH)
def _power_table(x, s, pr, pi, fr, fi):
    """``pr[m] + i pi[m] = z_j^m`` for the ``n`` points of system ``s`` and ``fr + i fi = F_m``, ``m < len(pr)``.

    Row by row along the points (vectorized); each row is the previous one times ``z``.
    """
    n = x.shape[1]
    cr, ci = pr[1], pi[1]
    first_r, first_i = pr[0], pi[0]
    total_r, total_i = 0.0, 0.0
    for j in range(n):
        cr[j], ci[j] = x[s, j, 0], x[s, j, 1]
        first_r[j], first_i[j] = 1.0, 0.0
        total_r += cr[j]
        total_i += ci[j]
    fr[0], fi[0], fr[1], fi[1] = n, 0.0, total_r, total_i
    for m in range(2, pr.shape[0]):
        previous_r, previous_i, row_r, row_i = pr[m - 1], pi[m - 1], pr[m], pi[m]
        total_r, total_i = 0.0, 0.0
        for j in range(n):
            r = previous_r[j] * cr[j] - previous_i[j] * ci[j]
            i = previous_r[j] * ci[j] + previous_i[j] * cr[j]
            row_r[j], row_i[j] = r, i
            total_r += r
            total_i += i
        fr[m], fi[m] = total_r, total_i


@numba.njit(cache=True, error_model="numpy", fastmath=FAST_MATH, inline="always")
def _mode_coefficients(a, fr, fi, m):
    """What mode ``m`` adds to ``Z_i`` per ``(Re, Im) z_i^m``, then to ``Re S_i`` and ``Im S_i`` (:func:`_circle_streamed`)."""
    return (2.0 * a[m] * fr[m], 2.0 * a[m] * fi[m], a[m] * (fr[m - 1] + fr[m + 1]), a[m] * (fi[m - 1] + fi[m + 1]),
            a[m] * (fr[m - 1] - fr[m + 1]), a[m] * (fi[m - 1] - fi[m + 1]))


# --------------------------------------------------------------------------- sphere
@numba.njit(cache=True, error_model="numpy")
def _recurrence_coefficients(degree):
    r"""Coefficients of the orthonormal associated Legendre recurrence, by ``(l, m)``.

    :math:`Y_{mm} = \mu_m (x^1 + i x^2) Y_{m-1,m-1}`, :math:`Y_{m+1,m} = \sqrt{2m+3}\, x^3 Y_{mm}`,
    :math:`Y_{lm} = \alpha_{lm} (x^3 Y_{l-1,m} - \gamma_{lm} Y_{l-2,m})` (the Condon-Shortley sign
    is dropped: it cancels in :math:`Y(x)\overline{Y(y)}`).
    """
    alpha = np.zeros((degree + 1, degree + 1))
    gamma = np.zeros((degree + 1, degree + 1))
    diagonal = np.zeros(degree + 1)
    for m in range(1, degree + 1):
        diagonal[m] = np.sqrt((2.0 * m + 1.0) / (2.0 * m))
    for m in range(degree + 1):
        for l in range(m + 1, degree + 1):
            alpha[l, m] = np.sqrt((4.0 * l * l - 1.0) / (l * l - m * m))
            gamma[l, m] = np.sqrt(((l - 1.0) ** 2 - m * m) / (4.0 * (l - 1.0) ** 2 - 1.0))
    return diagonal, alpha, gamma


@numba.njit(cache=True, error_model="numpy", fastmath=FAST_MATH)
def _sphere_sweep(x, s, start, count, degree, coefficients, synthesis, g_re, g_im, weights, acc, masses):
    r"""One pass over the harmonics ``l <= degree`` for points ``start .. start + count`` of system ``s``.

    Analysis (``synthesis`` false): ``g_re + i g_im`` (shape ``(L+1, L+1, 4)``) accumulates
    :math:`\overline{G_{lm}[f]} = \sum_j w_j Y_{lm}(x_j) f(x_j)`, ``f = 1, x^1, x^2, x^3``, with
    :math:`w_j` = ``masses[s, j]`` (1 for :data:`NO_MASSES`): the recurrences are linear, so each
    point's starts at :math:`w_j Y_{00}` and carries its mass through every degree.
    Synthesis: ``acc[f, i] = sum_{l,m} w_m lambda_l Re(Y_lm(x_i) G_lm[f])`` with ``w_0 = 1``,
    ``w_m = 2`` (the orders ``-m`` folded in).
    """
    diagonal, alpha, gamma = coefficients
    # Contiguous coordinates: strided loads of x[s, j, c] keep LLVM from vectorizing the loops.
    cu, cv, cw = np.empty(count), np.empty(count), np.empty(count)
    for j in range(count):
        cu[j], cv[j], cw[j] = x[s, start + j, 0], x[s, start + j, 1], x[s, start + j, 2]
    ymr, ymi = np.empty(count), np.empty(count)
    p1r, p1i = np.empty(count), np.empty(count)
    p2r, p2i = np.empty(count), np.empty(count)
    weighted = masses.shape[1] > 0
    for j in range(count):
        ymr[j] = masses[s, start + j] / np.sqrt(4.0 * np.pi) if weighted else 1.0 / np.sqrt(4.0 * np.pi)
        ymi[j] = 0.0
    if synthesis:
        acc[:, :count] = 0.0
    for m in range(degree + 1):
        if m > 0:
            for j in range(count):
                u, v = cu[j], cv[j]
                r = diagonal[m] * (ymr[j] * u - ymi[j] * v)
                ymi[j] = diagonal[m] * (ymr[j] * v + ymi[j] * u)
                ymr[j] = r
        fold = 1.0 if m == 0 else 2.0
        for l in range(m, degree + 1):
            # p1 <- Y_lm, p2 <- Y_{l-1,m}
            if l == m:
                for j in range(count):
                    p1r[j], p1i[j] = ymr[j], ymi[j]
                    p2r[j], p2i[j] = 0.0, 0.0
            else:
                a, c = alpha[l, m], gamma[l, m]
                for j in range(count):
                    w = cw[j]
                    yr = a * (w * p1r[j] - c * p2r[j])
                    yi = a * (w * p1i[j] - c * p2i[j])
                    p2r[j], p2i[j] = p1r[j], p1i[j]
                    p1r[j], p1i[j] = yr, yi
            if synthesis:
                scale = fold * weights[l]
                k0r, k0i = scale * g_re[l, m, 0], scale * g_im[l, m, 0]
                k1r, k1i = scale * g_re[l, m, 1], scale * g_im[l, m, 1]
                k2r, k2i = scale * g_re[l, m, 2], scale * g_im[l, m, 2]
                k3r, k3i = scale * g_re[l, m, 3], scale * g_im[l, m, 3]
                for i in range(count):
                    acc[0, i] += p1r[i] * k0r + p1i[i] * k0i
                    acc[1, i] += p1r[i] * k1r + p1i[i] * k1i
                    acc[2, i] += p1r[i] * k2r + p1i[i] * k2i
                    acc[3, i] += p1r[i] * k3r + p1i[i] * k3i
            else:
                s0r = s0i = s1r = s1i = s2r = s2i = s3r = s3i = 0.0
                for j in range(count):
                    u, v, w = cu[j], cv[j], cw[j]
                    s0r += p1r[j]
                    s0i += p1i[j]
                    s1r += p1r[j] * u
                    s1i += p1i[j] * u
                    s2r += p1r[j] * v
                    s2i += p1i[j] * v
                    s3r += p1r[j] * w
                    s3i += p1i[j] * w
                g_re[l, m, 0] += s0r
                g_im[l, m, 0] += s0i
                g_re[l, m, 1] += s1r
                g_im[l, m, 1] += s1i
                g_re[l, m, 2] += s2r
                g_im[l, m, 2] += s2i
                g_re[l, m, 3] += s3r
                g_im[l, m, 3] += s3i


@numba.njit(cache=True, error_model="numpy")
def _sphere_analysis(x, s, degree, coefficients, g_re, g_im, acc, masses):
    """:math:`G_{lm}[f]` of system ``s`` (``f = 1, x^1, x^2, x^3``; times ``masses``), point block by point block."""
    n = x.shape[1]
    block = acc.shape[1]
    g_re[:] = 0.0
    g_im[:] = 0.0
    unused_weights = g_re[:, 0, 0]  # the analysis never reads the spectrum
    for start in range(0, n, block):
        _sphere_sweep(x, s, start, min(block, n - start), degree, coefficients, False, g_re, g_im, unused_weights,
                      acc, masses)


@numba.njit(cache=True, error_model="numpy", parallel=True)
def _sphere_attention(x, weights, normalized, value, out, masses):
    r"""``out_i = c S_i / Z_i`` (SA) or ``c S_i / n`` (USA) through the harmonic series on S^2; with ``masses``
    (not :data:`NO_MASSES`), of the measure :math:`\sum_j w_j \delta_{x_j}` (USA: ``c S_i``)."""
    b, n, _ = x.shape
    denominator = 1.0 if masses.shape[1] > 0 else n
    none = np.empty((0, 0))  # the synthesis's points carry no masses (a global array would be read-only in here)
    degree = weights.size - 1
    coefficients = _recurrence_coefficients(degree)
    block = min(n, POINT_BLOCK)
    for s in numba.prange(b):
        g_re = np.empty((degree + 1, degree + 1, 4))
        g_im = np.empty((degree + 1, degree + 1, 4))
        acc = np.empty((4, block))
        _sphere_analysis(x, np.int64(s), degree, coefficients, g_re, g_im, acc, masses)
        for start in range(0, n, block):
            count = min(block, n - start)
            _sphere_sweep(x, np.int64(s), start, count, degree, coefficients, True, g_re, g_im, weights, acc,
                          none)
            for i in range(count):
                scale = value / (acc[0, i] if normalized else denominator)
                for c in range(3):
                    out[s, start + i, c] = acc[c + 1, i] * scale


@numba.njit(cache=True, error_model="numpy", parallel=True)
def _harmonic_sums(x, degree, out):
    b, n, _ = x.shape
    coefficients = _recurrence_coefficients(degree)
    for s in numba.prange(b):
        g_re = np.empty((degree + 1, degree + 1, 4))
        g_im = np.empty((degree + 1, degree + 1, 4))
        acc = np.empty((4, min(n, POINT_BLOCK)))
        _sphere_analysis(x, np.int64(s), degree, coefficients, g_re, g_im, acc, np.empty((0, 0)))
        for l in range(degree + 1):
            for m in range(l + 1):
                sign = -1.0 if m % 2 else 1.0
                out[s, l, m] = sign * (g_re[l, m, 0] - 1j * g_im[l, m, 0])


def harmonic_sums(x: np.ndarray, degree: int) -> np.ndarray:
    r""":math:`\sum_j \overline{Y_{lm}(x_j)}` for ``0 <= m <= l <= degree``, per system, in ``O(n L^2)``.

    ``x`` of shape ``(n, 3)`` or ``(b, n, 3)`` (unit vectors); returns a complex array
    ``(..., degree + 1, degree + 1)`` indexed ``[l, m]`` (zero above the diagonal), with the
    Condon-Shortley phase of :func:`scipy.special.sph_harm_y` (far slower for this use).
    """
    x = np.asarray(x, dtype=float)
    flat = np.ascontiguousarray(x.reshape((-1,) + x.shape[-2:]))
    if flat.shape[-1] != 3:
        raise ValueError(f"harmonic_sums takes points on S^2 (3 components), got shape {x.shape}")
    out = np.zeros((flat.shape[0], degree + 1, degree + 1), dtype=complex)
    _harmonic_sums(flat, int(degree), out)
    return out.reshape(x.shape[:-2] + out.shape[1:])
