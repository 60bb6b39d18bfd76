"""The graphon mean field on the circle (GraphonCircleFV) against Kuramoto on graphs drawn from the graphon."""

import warnings

import numpy as np
import pytest

import meanfield as mf
from solvers import CircleFV, GraphonCircleFV, UnderResolvedWarning


def order(rho: np.ndarray, cells: int) -> np.ndarray:
    """|int e^{i theta} rho| of cell averages (exact for piecewise constant densities)."""
    h = 2 * np.pi / cells
    left = np.arange(cells) * h
    return np.abs(rho @ ((np.exp(1j * (left + h)) - np.exp(1j * left)) / 1j))


def test_a_constant_graphon_is_the_all_to_all_model_with_the_coupling_scaled():
    start = lambda th: 1 + 0.5 * np.cos(th)  # noqa: E731
    times = [0.0, 0.5, 1.0]
    graphon = GraphonCircleFV(mf.SelfAttention(0.0, normalized=False, value=4.0), graphon=lambda x, y: 0.5 + 0 * x * y,
                              vertices=4, cells=128).solve(lambda s, th: start(th) + 0 * s, times, progress=False)
    plain = CircleFV(mf.SelfAttention(0.0, normalized=False, value=2.0), cells=128).solve(start, times, progress=False)
    np.testing.assert_allclose(graphon.rho.values, np.broadcast_to(plain.rho.values[:, None], graphon.rho.shape),
                               rtol=1e-12, atol=1e-14)


def test_kuramoto_on_graphon_graphs_follows_the_graphon_mean_field_label_by_label():
    """W(x, y) = x y: high labels have more neighbours and synchronise faster; particles on drawn graphs agree
    with the family of densities in each half of the labels, to 4 standard errors of 12 systems."""
    graphon, coupling, times, n, systems = (lambda x, y: x * y), 6.0, [0.0, 0.75, 1.5], 400, 12
    model = mf.SelfAttention(0.0, normalized=False, value=coupling)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnderResolvedWarning)
        ds = GraphonCircleFV(model, graphon=graphon, vertices=32, cells=256).solve(
            lambda s, th: 1 + 0.5 * np.cos(th) + 0 * s, times, progress=False)
    halves = [order(ds.rho.values[:, :16].mean(axis=1), 256), order(ds.rho.values[:, 16:].mean(axis=1), 256)]
    generator = np.random.default_rng(0)
    observed = []
    for _ in range(systems):
        adjacency = mf.graphon_graph(graphon, n, generator)
        x0 = mf.sample_circle(n, lambda th: 1 + 0.5 * np.cos(th), generator)
        run = mf.simulate_particles(mf.GraphAttention(0.0, adjacency, normalized=False, value=coupling), x0, times,
                                    method="rk4", dt=0.05, progress=False)
        z = run.x.values[..., 0] + 1j * run.x.values[..., 1]
        observed.append([np.abs(z[:, : n // 2].mean(-1)), np.abs(z[:, n // 2:].mean(-1))])
    observed = np.array(observed)  # (system, half, time)
    mean, error = observed.mean(axis=0), observed.std(axis=0, ddof=1) / np.sqrt(systems)
    np.testing.assert_array_less(np.abs(mean - np.array(halves)), 4 * error)
    assert halves[1][-1] - halves[0][-1] > 10 * error[:, -1].max()  # the labels differ, far beyond the noise


def test_bad_graphons_are_one_line():
    model = mf.SelfAttention(0.0, normalized=False, value=1.0)
    with pytest.raises(ValueError, match="symmetric"):
        GraphonCircleFV(model, graphon=lambda x, y: x + 0 * y)
    with pytest.raises(TypeError, match="graphon must be a callable"):
        GraphonCircleFV(model)
    with pytest.raises(ValueError, match="probabilities in"):
        mf.graphon_graph(lambda x, y: 2 + 0 * x, 10)
    with pytest.raises(ValueError, match="no neighbours"):
        GraphonCircleFV(mf.SelfAttention(1.0), graphon=lambda x, y: (x > 0.5) * (y > 0.5) * 1.0, vertices=4)
