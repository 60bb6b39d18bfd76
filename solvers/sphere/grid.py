r"""Spherical-harmonic transforms and grid of :math:`S^2` (a thin layer over shtns).

Orthonormal complex harmonics with the Condon-Shortley phase; coefficients for
``m >= 0`` only (real fields). The Gauss grid has about 3/2 the minimal size in each
direction, so that quadratic products (the flux :math:`\rho v`) do not alias.
"""

from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass, field

import numpy as np

from meanfield.checks import check_int
from meanfield.sphere import sphere_points


def _import_shtns_quietly():
    """Import shtns without its build banner, which the C library prints on stdout at import.

    The banner would otherwise precede the output of every command (``--help`` and
    ``--quiet`` included) and of every sweep worker. The C stdio buffer is flushed while
    stdout still points at the null device, so the banner cannot surface later either.
    """
    sys.stdout.flush()
    saved = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        import shtns

        ctypes.CDLL(None).fflush(None)
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)
    return shtns


shtns = _import_shtns_quietly()

#: shtns refuses Gauss grids with fewer latitudes.
MIN_LATITUDES = 32


def grid_shape(lmax: int) -> tuple[int, int]:
    """``(nlat, nphi)`` of the dealiased Gauss grid for degree ``lmax`` (known before any planning).

    3/2-rule for quadratic products: ``nlat >= 3 (lmax + 1) / 2``, ``nphi >= 3 lmax + 1``.
    """
    nlat = max(MIN_LATITUDES, 2 * ((3 * (lmax + 1) + 3) // 4))
    return nlat, 2 * nlat


#: shtns's threads unless a solver asks for more: on a machine with other work a second
#: thread makes a transform wait for a busy core (docs/performance.md, "Threads").
DEFAULT_THREADS = 1


@dataclass(frozen=True, eq=False)
class SphereGrid:
    """Transforms up to degree ``lmax`` on a dealiased Gauss grid, on ``threads`` OpenMP threads of shtns."""

    lmax: int
    threads: int = DEFAULT_THREADS
    transform: shtns.sht = field(init=False, repr=False)
    degree: np.ndarray = field(init=False, repr=False)
    laplacian_eigenvalue: np.ndarray = field(init=False, repr=False)
    parseval_weight: np.ndarray = field(init=False, repr=False)
    deviation_weight: np.ndarray = field(init=False, repr=False)
    area_weight: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        check_int(self.threads, "threads", minimum=1)
        sh = shtns.sht(self.lmax, self.lmax, nthreads=self.threads)
        nlat, nphi = grid_shape(self.lmax)
        sh.set_grid(nlat=nlat, nphi=nphi, flags=shtns.sht_gauss)
        set_(self, "transform", sh)
        set_(self, "degree", sh.l.astype(float))
        set_(self, "laplacian_eigenvalue", self.degree * (self.degree + 1))  # of -Lap_S
        # int f^2 = sum_l (|q_l0|^2 + 2 sum_{m>0} |q_lm|^2) for a real field f.
        set_(self, "parseval_weight", np.where(sh.m == 0, 1.0, 2.0))
        # The same over degrees >= 1: the deviation from the mean, without cancellation.
        set_(self, "deviation_weight", np.where(sh.l > 0, self.parseval_weight, 0.0))
        half = sh.gauss_wts()
        latitude_weights = np.concatenate([half, half[::-1]])
        set_(self, "area_weight", (2 * np.pi / sh.nphi) * latitude_weights[:, None] * np.ones(sh.nphi))

    @property
    def shape(self) -> tuple[int, int]:
        return (self.transform.nlat, self.transform.nphi)

    @property
    def description(self) -> str:
        """The grid in words, for messages: its axes and their lengths."""
        return (f"the Gauss grid of lmax = {self.lmax}: {self.shape[0]} colatitudes (grid.colatitude) x "
                f"{self.shape[1]} longitudes (grid.longitude)")

    @property
    def colatitude(self) -> np.ndarray:
        return np.arccos(self.transform.cos_theta)

    @property
    def longitude(self) -> np.ndarray:
        return 2 * np.pi * np.arange(self.transform.nphi) / self.transform.nphi

    def points(self) -> np.ndarray:
        """Grid points on the unit sphere, shape ``(nlat, nphi, 3)``."""
        return sphere_points(self.colatitude[:, None], self.longitude[None, :])

    def tangent_frame(self) -> np.ndarray:
        r"""Unit vectors :math:`e_\theta, e_\varphi` at the grid points, shape ``(2, 3, nlat, nphi)``."""
        theta, phi = self.colatitude[:, None], self.longitude[None, :]
        e_theta = np.broadcast_arrays(np.cos(theta) * np.cos(phi), np.cos(theta) * np.sin(phi), -np.sin(theta) + 0 * phi)
        e_phi = np.broadcast_arrays(-np.sin(phi) + 0 * theta, np.cos(phi) + 0 * theta, 0 * theta + 0 * phi)
        return np.array([e_theta, e_phi], dtype=float)

    def analyse(self, values: np.ndarray) -> np.ndarray:
        return self.transform.analys(np.ascontiguousarray(values, dtype=float))

    def synthesise(self, coefficients: np.ndarray) -> np.ndarray:
        return self.transform.synth(coefficients)

    def gradient(self, coefficients: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Colatitude and longitude components of the surface gradient, on the grid."""
        return self.transform.synth_grad(coefficients)

    def divergence(self, colatitude_part: np.ndarray, longitude_part: np.ndarray,
                   sign: float = 1.0) -> np.ndarray:
        r"""Coefficients of :math:`\mathrm{div}_S V` (times ``sign``) from the grid components of :math:`V`."""
        spheroidal, _ = self.transform.analys(np.ascontiguousarray(colatitude_part),
                                              np.ascontiguousarray(longitude_part))
        spheroidal *= (-sign) * self.laplacian_eigenvalue
        return spheroidal

    def tail_fraction(self, coefficients: np.ndarray) -> float:
        """Fraction of the spectral energy of the field's deviation from its mean held by the top 10 % of degrees."""
        power = self.parseval_weight * np.abs(coefficients) ** 2
        deviation = power[self.degree > 0].sum()
        if deviation == 0:
            return 0.0
        return float(power[self.degree > 0.9 * self.lmax].sum() / deviation)

    def integrate(self, values: np.ndarray) -> float:
        return float(np.sum(self.area_weight * values))

    def inner(self, a: np.ndarray, b: np.ndarray) -> float:
        r""":math:`\int f g` of two real fields from their coefficients (Parseval)."""
        return float(np.sum(self.parseval_weight * (a.conj() * b).real))

    def mass(self, coefficients: np.ndarray) -> float:
        return float(np.sqrt(4 * np.pi) * coefficients[0].real)

    def band_limited(self, degree: int) -> "BandLimited":
        """Synthesis on this grid of fields without degrees above ``degree`` (:class:`BandLimited`).

        Parameters
        ----------
        degree : int
            The largest degree the fields hold (at least ``lmax``: this grid's own transform).

        Returns
        -------
        BandLimited
        """
        check_int(degree, "degree", minimum=1)
        if degree >= self.lmax:
            return BandLimited(self.transform, slice(None))
        sh = shtns.sht(degree, degree, nthreads=self.threads)
        sh.set_grid(nlat=self.transform.nlat, nphi=self.transform.nphi, flags=shtns.sht_gauss)
        return BandLimited(sh, self.transform.l <= degree)

    def values_on(self, coefficients: np.ndarray, other: "SphereGrid") -> np.ndarray:
        """The band-limited field of these coefficients at the points of another grid (of any ``lmax``).

        Degrees above ``other.lmax`` are dropped (none when ``other.lmax >= lmax``: then the
        values are exact).
        """
        target = np.zeros(other.transform.nlm, dtype=complex)
        kept = self.transform.l <= other.lmax
        # shtns orders (l, m) by m, then l: the index of (l, m) is m (2 L + 3 - m) / 2 + l - m for L = lmax
        l, m, big = self.transform.l[kept], self.transform.m[kept], other.lmax
        target[m * (2 * big + 3 - m) // 2 + l - m] = coefficients[kept]
        return other.synthesise(target)

    def point_values(self, coefficients: np.ndarray, points: np.ndarray) -> np.ndarray:
        """Values of the band-limited field at arbitrary unit vectors ``points`` of shape ``(k, 3)``."""
        points = np.asarray(points, dtype=float).reshape(-1, 3)
        longitudes = np.arctan2(points[:, 1], points[:, 0])
        return np.array([self.transform.SH_to_point(coefficients, z, p)
                         for z, p in zip(np.clip(points[:, 2], -1, 1), longitudes)])


@dataclass(frozen=True, eq=False)
class BandLimited:
    """Synthesis of a band-limited field on a grid by a transform truncated at its degree.

    A transform's cost grows with the degrees it sums: the field of a smooth kernel, negligible
    above a low degree, costs a fraction of the grid's own synthesis. The coefficients are
    given in the grid's layout and selected by ``kept`` (shtns orders them by ``m``, then
    ``l``: the truncated layout is the grid's with the higher degrees left out).

    Parameters
    ----------
    transform : shtns.sht
        The truncated transform, on the grid's points.
    kept : numpy.ndarray or slice
        The grid's coefficients that it holds.
    """

    transform: shtns.sht
    kept: np.ndarray | slice

    def select(self, coefficients: np.ndarray) -> np.ndarray:
        """The coefficients the truncated transform holds, from the grid's layout."""
        return coefficients[self.kept]

    def synthesise(self, selected: np.ndarray) -> np.ndarray:
        """Grid values of the field of ``selected`` coefficients (:meth:`select`'s layout)."""
        return self.transform.synth(selected)

    def gradient(self, selected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Colatitude and longitude components of its surface gradient, on the grid."""
        return self.transform.synth_grad(selected)
