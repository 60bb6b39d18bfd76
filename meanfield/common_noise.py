r"""The common noise of the homogenized limit as vector fields on weighted measures: one path's draws and its Stratonovich form.

A path of the limit (:class:`~meanfield.homogenized.HomogenizedLimit`) fixes quadrature nodes
:math:`(Q_m, K_m, V_m)` and Brownian motions :math:`W_k`; the noise then moves a point
:math:`x` by :math:`\sum_k f_k(x;\mu)\,dW_k` with ambient fields :math:`f_k = L_k a_{m(k)}`,
:math:`a_m` the attention average of node :math:`m` over the measure :math:`\mu`, and
:math:`L_k` the law's matrices: :math:`c E_{ab}` for every node and entry (:class:`GaussianWeights`,
:math:`c = \sigma_V/\sqrt{d\cdot\text{nodes}}`, a matrix Brownian motion per node), or
:math:`V_m/\sqrt{\text{nodes}}` (:class:`SampledWeights`, one scalar Brownian motion per node).

Stratonovich form. The limit is derived (and simulated by projected Euler-Maruyama) as an Itô
SDE with drift :math:`-P_x C(x,x)x - \frac12\operatorname{tr}(P_xC)x`. With the tangent fields
:math:`\sigma_k = P_x f_k`, the same process is the Stratonovich SDE

.. math::
    dX = \tilde b(X;\mu)\,dt + \sum_k \sigma_k(X;\mu)\circ dW_k, \qquad
    \tilde b = -\tfrac12\sum_k \big(P_x g_k + \langle x, f_k\rangle\,\sigma_k\big),

where :math:`g_k = \frac{d}{d\varepsilon} f_k\big(x + \varepsilon\sigma_k(x); (\mathrm{id} +
\varepsilon\sigma_k)_\#\mu\big)` is the derivative of :math:`f_k` when the point and the whole
measure are transported along :math:`\sigma_k` (every token feels the same noise). Derivation:
the Itô correction of the Stratonovich equation is :math:`\frac12\sum_k` of that total
derivative of :math:`\sigma_k`; its normal part is :math:`-\frac12|\sigma_k|^2x` (the sphere's
term) and its tangential part :math:`\frac12(P_xg_k - \langle x, f_k\rangle\sigma_k)`, which
leaves :math:`\tilde b` above. Transported measures give the same correction to the density:
the conditional law :math:`\rho` of a token given the noise solves the stochastic transport
equation

.. math:: d\rho + \operatorname{div}\big(\rho\,\tilde b[\rho]\big)dt + \sum_k \operatorname{div}\big(\rho\,\sigma_k[\rho]\big)\circ dW_k = 0,

first order (the second-order terms of the Itô form cancel), so a transport scheme advanced by
Heun's method (which converges to the Stratonovich solution) integrates it. A measure is given
as weighted atoms: the tokens with weights :math:`1/n`, or a grid's quadrature nodes with
:math:`\rho_j h`; the derivative :math:`g_k` then moves the atoms, which is the transport of
the measure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .random_weights import ATTENTION_BLOCK, GaussianWeights, check_centred, system_generators, value_sum
from .sphere import project_tangent

if TYPE_CHECKING:
    from .homogenized import HomogenizedLimit


class NoisePath:
    r"""The draws of one batch of paths: nodes :math:`(Q_m, K_m, V_m)` and Brownian increments per system.

    System ``s`` draws its nodes, then its increments step by step, from
    ``SeedSequence(seed, spawn_key=(s,))``, so a particle run and a density run with the same
    ``seed`` and ``dt`` are driven by the same path. ``increments`` (shape ``(steps,) +
    limit.increment_shape(systems, d)``) replaces the increments. Brownian-bridge refinements
    draw from a second stream per system, ``spawn_key=(s, 1)``.
    """

    def __init__(self, limit: HomogenizedLimit, systems: int, d: int, seed: int, dt: float,
                 steps: int, increments: np.ndarray | None = None):
        self.limit, self.dt = limit, dt
        if limit.noise:
            check_centred(limit.law, limit.beta, d)
        self.generators = system_generators(seed, systems)
        nodes = [limit.draw_nodes(g, d) for g in self.generators]
        self.query, self.key, self.value = (np.stack([node[i] for node in nodes]) for i in range(3))
        self.shape = limit.increment_shape(systems, d)
        if increments is not None:
            increments = np.asarray(increments, dtype=float)
            if increments.shape != (steps,) + self.shape:
                raise ValueError(f"increments must have shape {(steps,) + self.shape}, got {increments.shape}")
        self.given = increments
        self.bridges = [np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(s, 1))) for s in range(systems)]
        # The matrices of all the fields, kept when they are few (the density solvers' d = 2);
        # for d^2 fields of d x d matrices in high d they are built a block at a time.
        self._all_fields = None
        if self._family_size(self.field_count) <= ATTENTION_BLOCK:
            self._all_fields = self.field_matrices(0, self.field_count)

    def increment(self, step: int) -> np.ndarray:
        """The Brownian increments of step ``step`` (counted from 1), over ``dt``."""
        if self.given is not None:
            return self.given[step - 1]
        return np.stack([g.standard_normal(self.shape[1:]) for g in self.generators]) * np.sqrt(self.dt)

    def bridge(self, increment: np.ndarray, parts: int) -> np.ndarray:
        """``increment`` over ``dt`` split into ``parts`` increments over ``dt/parts`` of the same Brownian path."""
        if parts == 1:
            return increment[None]
        normal = np.stack([g.standard_normal((parts,) + self.shape[1:]) for g in self.bridges], axis=1)
        normal *= np.sqrt(self.dt / parts)
        return increment / parts + normal - normal.mean(axis=0)

    def displacement(self, averages: np.ndarray, increment: np.ndarray) -> np.ndarray:
        r"""The ambient noise move :math:`\sum_k f_k\,\Delta W_k` of averages ``(systems, nodes, P, d)``."""
        return value_sum(averages, self.limit.noise_matrices(increment, self.value))

    @property
    def field_count(self) -> int:
        """Number of noise fields per node: one per entry of :math:`V` for Gaussian values, one otherwise."""
        d = self.value.shape[-1]
        return d * d if isinstance(self.limit.law, GaussianWeights) else 1

    def _family_size(self, fields: int) -> int:
        """Doubles held by the matrices of ``fields`` fields."""
        return int(np.prod(self.value.shape)) * fields

    def field_matrices(self, start: int, stop: int) -> np.ndarray:
        r"""The matrices :math:`L_k` of the fields ``start <= k < stop``, as ``(systems, fields, nodes, d, d)``."""
        if self._all_fields is not None:
            return self._all_fields[:, start:stop]
        systems, nodes, d = self.value.shape[:3]
        if isinstance(self.limit.law, GaussianWeights):
            units = np.zeros((systems, stop - start, nodes, d, d))
            for field, entry in enumerate(range(start, stop)):
                units[:, field, :, entry // d, entry % d] = 1.0
            return self.limit.noise_matrices(units, self.value[:, None])
        return self.limit.noise_matrices(np.ones((systems, 1, nodes)), self.value[:, None])

    def field_blocks(self, points: int, atoms: int):
        """``(start, stop)`` blocks of fields whose work arrays stay within :data:`ATTENTION_BLOCK` doubles."""
        systems, nodes, d = self.value.shape[:3]
        # per field: its matrices, its moves and fields at the points, the derivative's moved keys
        # at the atoms and its scores (a point-by-atom array, twice)
        per_field = systems * nodes * (d * d + 4 * points * d + atoms * d + 2 * points * atoms)
        chunk = max(1, ATTENTION_BLOCK // per_field)
        return [(start, min(start + chunk, self.field_count)) for start in range(0, self.field_count, chunk)]


class WeightedAttention:
    r"""Every node's attention average over weighted atoms, evaluated at points, with its derivative.

    ``points`` ``(systems, P, d)``; the atoms are ``points[:, atoms]`` with ``weights``
    ``(systems, A)`` (nonnegative; a grid's density times its cell size, or ``1/n``). The softmax
    is shifted by its row maximum after the log-weights are added, so no weight underflows.
    """

    def __init__(self, points: np.ndarray, weights: np.ndarray, atoms: slice, path: NoisePath, beta: float):
        self.points, self.atom_points, self.beta, self.path = points, points[:, atoms], beta, path
        self.atoms = atoms
        self.queries = np.einsum("smed,spd->smpe", path.query, points)
        self.keys = np.einsum("smed,sjd->smje", path.key, self.atom_points)
        logits = self.queries @ np.swapaxes(self.keys, -1, -2)
        logits *= beta
        with np.errstate(divide="ignore"):
            logits += np.log(weights)[:, None, None, :]
        logits -= logits.max(axis=-1, keepdims=True)
        np.exp(logits, out=logits)
        logits /= logits.sum(axis=-1, keepdims=True)
        self.probabilities = logits
        self.averages = logits @ self.atom_points[:, None]  # (systems, nodes, P, d)

    def derivative(self, moves: np.ndarray) -> np.ndarray:
        r"""Derivative of the averages when every point moves by ``moves`` ``(systems, fields, nodes, P, d)`` (atoms with them).

        Field ``f`` moves every node's points and atoms by ``moves[:, f]``; the result, of the
        same shape, is the derivative of node ``m``'s averages along ``moves[:, f, m]``. With
        :math:`u` the point's move, :math:`v_j` the atoms' and :math:`s_j = \beta\langle Qx, Ky_j\rangle`,

        .. math::
            \delta a = \sum_j p_j v_j + \sum_j p_j(\delta s_j - \overline{\delta s})\,y_j, \quad
            \delta s_j = \beta\big(\langle Qu, Ky_j\rangle + \langle Qx, Kv_j\rangle\big),

        computed from the scores' changes :math:`\langle Qx, Kv_j\rangle` (one per point and atom)
        and attention-weighted sums of :math:`v_j` and :math:`\delta s_j y_j`: :math:`O(PAd)` per
        field and node, never a :math:`d \times d` matrix per atom.
        """
        atom_moves = moves[..., self.atoms, :]
        atom_keys = np.einsum("smed,sfmjd->sfmje", self.path.key, atom_moves)
        moved_queries = np.einsum("smed,sfmpd->sfmpe", self.path.query, moves)
        # delta s_pj = beta (<Q u_p, K y_j> + <Q x_p, K v_j>), with the attention p_pj of point p on atom j
        scores = self.beta * (moved_queries @ np.swapaxes(self.keys, -1, -2)[:, None]
                              + self.queries[:, None] @ np.swapaxes(atom_keys, -1, -2))
        scores *= self.probabilities[:, None]
        mean_shift = scores.sum(axis=-1, keepdims=True)
        moved = self.probabilities[:, None] @ atom_moves
        return moved + scores @ self.atom_points[:, None, None] - mean_shift * self.averages[:, None]

    def stratonovich_drift(self) -> tuple[np.ndarray, np.ndarray]:
        r"""The Stratonovich drift :math:`\tilde b` at the points, and :math:`\sum_k|\sigma_k|^2` there.

        Includes the deterministic limit's drift :math:`m_V P_x \frac1M\sum_m a_m` when the limit has one.
        """
        x = self.points[:, None, None]
        drift = np.zeros_like(self.points)
        spread = np.zeros(self.points.shape[:-1])
        if self.path.limit.noise:
            for start, stop in self.path.field_blocks(self.points.shape[1], self.atom_points.shape[1]):
                family = self.path.field_matrices(start, stop)  # (systems, fields, nodes, d, d)
                fields = np.einsum("sfmab,smpb->sfmpa", family, self.averages)
                moves = project_tangent(x, fields)
                total = np.einsum("sfmab,sfmpb->sfmpa", family, self.derivative(moves))
                along = np.sum(x * fields, axis=-1, keepdims=True)
                drift -= 0.5 * np.sum(project_tangent(x, total) + along * moves, axis=(1, 2))
                spread += np.sum(moves * moves, axis=(1, 2, -1))
        if self.path.limit.drift:
            drift += self.path.limit.drift * project_tangent(self.points, self.averages.mean(axis=1))
        return drift, spread

    def noise(self, increment: np.ndarray) -> np.ndarray:
        r"""The tangent noise move :math:`\sum_k \sigma_k\,\Delta W_k` at the points."""
        if not self.path.limit.noise:
            return np.zeros_like(self.points)
        return project_tangent(self.points, self.path.displacement(self.averages, increment))
