"""The general path (the model's ``velocity_field`` through a grid's quadrature) against the fast paths.

One velocity evaluation of each discretisation, the reference path timed against the fast path
that serves SA (``"zonal"``: FFT convolution on the circle, Funk-Hecke on the sphere) in the
same run: the ratio is what running a model no fast path serves costs per right-hand side.
Its floor is the pair count (``G N x N`` on ``N`` cells with ``G`` Gauss nodes per dual cell,
``M x M`` on ``M`` Fourier points, ``P x P`` on the sphere's ``P`` grid points) times one
exponential and ``2d`` flops per pair.
"""

from __future__ import annotations

import numpy as np

import meanfield as mf
from common import compare
from solvers import CircleFV, CircleSpectral, SphereSpectral


def circle_density(theta):
    return np.exp(np.cos(theta - 0.3)) + 0.3 * np.cos(2 * theta)


def sphere_density(points):
    return np.exp(points[..., 2] + 0.5 * points[..., 0])


def _fv(model, cells, path):
    solver = CircleFV(model, cells=cells, interaction=path, error_level=None)
    deviation = solver.initial_density(circle_density) - solver.operators.uniform
    return lambda: solver.operators.face_velocity(deviation), ""


def _fourier(model, cells, path):
    solver = CircleSpectral(model, cells=cells, interaction=path)
    coefficients = solver.initial_coefficients(circle_density)
    return lambda: solver.velocity(coefficients), ""


def _sphere(model, lmax, path):
    solver = SphereSpectral(model, lmax=lmax, interaction=path)
    coefficients = solver.initial_coefficients(sphere_density)
    return lambda: solver.velocity(coefficients), ""


CASES = [("CircleFV", _fv, 256), ("CircleFV", _fv, 1024), ("CircleSpectral", _fourier, 64),
         ("CircleSpectral", _fourier, 256), ("SphereSpectral", _sphere, 15), ("SphereSpectral", _sphere, 31)]


def run() -> list[tuple[str, float, float, float]]:
    model = mf.SelfAttention(4.0)
    rows = []
    for name, build, size in CASES:
        reference, _ = build(model, size, "reference")
        fast, _ = build(model, size, "zonal")
        ours, base, ratio = compare(reference, fast, rounds=3, repeats=2)
        unit = "lmax" if name == "SphereSpectral" else "cells"
        rows.append((f"reference path / zonal, SA velocity, {name} {unit}={size}", ours, base, ratio))
    return rows


if __name__ == "__main__":
    for label, ours, base, ratio in run():
        print(f"{label:64} {ours:10.4g} {base:10.4g} {ratio:9.3g}")
