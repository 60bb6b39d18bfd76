"""Pure self-attention in ℝᵈ: the figures of "The emergence of clusters in self-attention dynamics".
==================================================================================================

Each case is run in the paper's rescaled variables :math:`z = e^{-tV} x` (``PureAttention(rescaled=True)``,
:math:`n = 40` tokens drawn uniformly in :math:`[-1, 1]^d` as the paper's experiments, DOP853 at rtol 1e-10),
and the theorem's prediction is printed next to what the run shows:

- Figs. 1 and 5 (Thm 3.1): d = 3, Q = K = V = I: tokens end at the vertices of a polytope;
- Fig. 3 (Thm 2.1): d = 1, Q = K = V = 1: the attention matrix becomes Boolean of rank <= 2;
- Fig. 6 (Thm 4.1): d = 2, V symmetric with eigenvalues {1.35, -0.07}: <= 3 hyperplanes;
- Fig. 8 (Thm 5.1): d = 3, V = diag(1, 1, -1/2): a polytope in two coordinates, the third diverges.

Writes ``OUTPUT/pure_attention.png``.

    python examples/pure_attention.py        # a few seconds
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from mpl_toolkits.mplot3d.art3d import Poly3DCollection  # noqa: E402
from scipy.spatial import ConvexHull  # noqa: E402

import meanfield as mf  # noqa: E402
from meanfield import limit_geometry as lg  # noqa: E402

N, END, TOLERANCE = 40, 20.0, 1e-6
ANGLE = math.atan2(0.65, 0.76)
ROTATION = np.array([[math.cos(ANGLE), -math.sin(ANGLE)], [math.sin(ANGLE), math.cos(ANGLE)]])
FIG6_VALUE = ROTATION @ np.diag([1.35, -0.07]) @ ROTATION.T
FIG8_VALUE = np.diag([1.0, 1.0, -0.5])


def run(value, d: int, seed: int, times, attention: bool = False):
    x0 = np.random.default_rng(seed).uniform(-1.0, 1.0, (N, d))
    return mf.simulate_particles(mf.PureAttention(value=value, rescaled=True), x0, times, rtol=1e-10,
                                 attention=attention, progress=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--output", type=Path, default=Path("output"))
    output = parser.parse_args().output
    output.mkdir(parents=True, exist_ok=True)
    fig = plt.figure(figsize=(16, 4))

    polytope = run(1.0, 3, 1, [0.0, 2.0, END])
    final = polytope["x"].values[-1]
    vertices = lg.polytope_vertices(final, TOLERANCE)
    print(f"Fig. 5 (Thm 3.1, V = I, d = 3): every token at a vertex of a polytope. Run: {len(vertices)} vertices "
          f"(initial hull {len(lg.hull_vertices(polytope['x'].values[0]))}, n = {N}), largest distance of a token "
          f"to a vertex {lg.vertex_distance(final, vertices).max():.1e}")
    axes = fig.add_subplot(1, 4, 1, projection="3d")
    for k, colour in ((0, "0.75"), (1, "tab:blue")):
        axes.scatter(*polytope["x"].values[k].T, s=5, color=colour, alpha=0.6, label=f"t = {polytope.time.values[k]:g}")
    if len(vertices) >= 4:  # the final polytope drawn over the earlier tokens: its faces, then its vertices
        faces = vertices[ConvexHull(vertices).simplices]
        axes.add_collection3d(Poly3DCollection(faces, facecolor="tab:red", edgecolor="tab:red", alpha=0.12,
                                               linewidths=0.8))
    axes.scatter(*vertices.T, s=36, color="tab:red", depthshade=False, zorder=5,
                 label=f"t = {polytope.time.values[-1]:g}: {len(vertices)} vertices")
    axes.set_title("Fig. 5: V = I, polytope")
    axes.legend(fontsize=7)

    line = run(1.0, 1, 3, [0.0, 8.0], attention=True)
    limit = lg.boolean_limit(line["attention"].values[-1, 0])
    print(f"Fig. 3 (Thm 2.1, d = 1): P(t) tends to a Boolean matrix of rank 1 or 2. Run at t = 8: distance to "
          f"Boolean {limit.distance:.1e}, rank {limit.rank}, leaders {limit.leaders}")
    axes = fig.add_subplot(1, 4, 2)
    order = np.argsort(line["x"].values[0, :, 0])
    axes.imshow(line["attention"].values[-1, 0][np.ix_(order, order)], cmap="Greys")
    axes.set_title("Fig. 3: P(8), tokens sorted")

    planes = run(FIG6_VALUE, 2, 13, [0.0, END])
    coordinates = lg.leading_coordinates(planes["x"].values[-1], FIG6_VALUE)
    found = lg.levels(coordinates, TOLERANCE)
    print(f"Fig. 6 (Thm 4.1, good triple, d = 2): at most 3 values of phi_1^*(z). Run: {len(found)} "
          f"({', '.join(f'{level:.4f}' for level in found)})")
    axes = fig.add_subplot(1, 4, 3)
    for k, colour in ((0, "0.7"), (1, "tab:red")):
        axes.scatter(*planes["x"].values[k].T, s=8, color=colour)
    axes.set_title("Fig. 6: <= 3 lines orthogonal to phi_1")

    mixed = run(FIG8_VALUE, 3, 14, [0.0, 5.0, END])
    split = lg.paranormal_split(mixed["x"].values[-1], FIG8_VALUE)
    corners = lg.polytope_vertices(split.polytope, TOLERANCE)
    print(f"Fig. 8 (Thm 5.1, V = diag(1, 1, -1/2)): a polygon in (z1, z2), z3 diverging. Run: {len(corners)} "
          f"vertices, distance to them {lg.vertex_distance(split.polytope, corners).max():.1e}, "
          f"max |z3| {np.abs(split.subspace).max():.3g}")
    axes = fig.add_subplot(1, 4, 4)
    for k, colour in ((0, "0.7"), (1, "tab:blue"), (2, "tab:red")):
        axes.scatter(*mixed["x"].values[k, :, :2].T, s=8, color=colour)
    axes.set_title("Fig. 8: (z1, z2)")
    fig.tight_layout()
    fig.savefig(output / "pure_attention.png", dpi=120)


if __name__ == "__main__":
    main()
