r"""Doubly stochastic attention (Sinkformers): the softmax matrix replaced by its Sinkhorn scaling.

"A mathematical perspective on Transformers", Remark 3.5, after Sander, Ablin, Blondel and
Peyré (2022). For the measure :math:`\mu = \sum_j w_j\delta_{y_j}` (tokens: :math:`w_j = 1/n`)
and one head, the scores :math:`s(x, y) = \beta\langle Qx, Ky\rangle` are scaled by potentials
:math:`f, g` into

.. math:: A(x, y_j) = w_j\,e^{f(x) + g_j + s(x, y_j)},

whose rows sum to one, :math:`\sum_j A(x, y_j) = 1` (this fixes :math:`f(x)` at any point),
and whose columns on the measure's own atoms are normalised too,
:math:`\sum_i w_i A(y_i, y_j) = w_j`: for :math:`w = 1/n` the matrix :math:`A(x_i, x_j)` is
doubly stochastic. The potentials solve the Schrödinger system of :math:`\mu` with itself; the
mean-field velocity is

.. math:: v[\mu](x) = P_x\Big(\sum_h V_h \sum_j A_h(x, y_j)\,y_j\Big).

Sinkhorn's iterations alternate the two normalisations, in the log domain (large
:math:`\beta` cannot overflow): ``iterations = L`` applies :math:`L` of them, the last a row
normalisation, so that ``iterations=1`` is softmax attention itself
(:class:`~meanfield.SelfAttention`); ``iterations=None`` iterates until the row sums on the
atoms are within ``tolerance`` of one after a column normalisation, and refuses to go on past
``max_iterations``.

The model is written as its velocity field (:class:`~meanfield.FieldModel`): the particle
system, the weighted atoms and every PDE discretisation (their ``interaction="reference"``
path) run it through :meth:`SinkhornAttention.velocity_field`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.special import logsumexp, softmax

from .checks import check_int, check_real
from .docstrings import fill_docstrings
from .errors import ModelFailure
from .field_model import FIELD_RETURNS, FieldModel
from .models import SelfAttention, _measure_arguments
from .sphere import project_tangent


#: Scores spanning less than this are scaled in the kernel domain (one exponential per call, then
#: products); beyond it (large beta) in the log domain, which no range of scores can overflow.
SCALING_RANGE = 500.0


#: Sinkhorn's error falls geometrically until the row sums' round-off: an error this small that no
#: longer falls is that round-off, and a tolerance below it is met there.
ROUNDOFF_STALL = 1e-11


def _symmetric(q: np.ndarray | None, k: np.ndarray | None) -> bool:
    """Whether :math:`Q^T K` is symmetric (``None``: the identity)."""
    if q is None and k is None:
        return True
    d = (q if q is not None else k).shape[-1]
    w = (np.eye(d) if q is None else q).T @ (np.eye(d) if k is None else k)
    return bool(np.allclose(w, w.T, rtol=1e-12, atol=1e-12 * np.abs(w).max()))


def _largest(values: np.ndarray, where: np.ndarray) -> float:
    return float(values[where].max()) if where.any() else 0.0


@fill_docstrings(field_returns=FIELD_RETURNS)
@dataclass(frozen=True, eq=False)
class SinkhornAttention(FieldModel):
    r"""Doubly stochastic (Sinkhorn) self-attention on the sphere (module docstring).

    Parameters
    ----------
    beta : float
        Inverse temperature, ``>= 0``.
    query, key, value
        As for :class:`~meanfield.SelfAttention` (identity and ``V = I`` by default; stacks
        of heads, each scaled by its own Sinkhorn iterations).
    iterations : int or None
        Number of normalisations, the last of the rows: ``1`` is softmax attention, ``2``
        normalises the columns once first, and so on. ``None``: to ``tolerance``.
    tolerance : float
        With ``iterations=None``: the largest :math:`|\sum_j A(y_i, y_j) - 1|` over the atoms
        after a column normalisation (a tolerance below the sums' round-off is met there: an
        error under ``1e-11`` that stops falling).
    max_iterations : int
        With ``iterations=None``: the most row-and-column rounds before the model refuses.
    diffusion : float
        Diffusion coefficient ``D >= 0`` (noise on the sphere, as for ``SelfAttention``).

    Raises
    ------
    ValueError
        If a parameter is out of range, or a weight of the measure is negative.
    ModelFailure
        When the velocity is evaluated, if the iterations do not reach ``tolerance`` within
        ``max_iterations`` (a run then ends with its outputs so far).
    """

    beta: float
    query: np.ndarray | None = None
    key: np.ndarray | None = None
    value: float | np.ndarray = 1.0
    iterations: int | None = None
    tolerance: float = 1e-12
    max_iterations: int = 10_000
    diffusion: float = 0.0
    softmax: SelfAttention = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # SelfAttention checks beta, the matrices and diffusion, and is the model of iterations=1
        softmax = SelfAttention(self.beta, diffusion=self.diffusion, query=self.query, key=self.key, value=self.value)
        object.__setattr__(self, "softmax", softmax)
        if self.iterations is not None:
            check_int(self.iterations, "iterations", minimum=1)
        check_real(self.tolerance, "tolerance", minimum=0.0, strictly=True)
        check_int(self.max_iterations, "max_iterations", minimum=1)

    @property
    def heads(self) -> int:
        """The number of heads (of the query, key and value stacks)."""
        return self.softmax.heads

    @property
    def dimension(self) -> int | None:
        """``d`` of the matrices (``None`` without matrices: any)."""
        return self.softmax.dimension

    @property
    def value_bound(self) -> float:
        r""":math:`\sum_h\|V_h\|_2`: the velocity's bound (doubly stochastic averages of unit vectors)."""
        return self.softmax.value_bound

    @property
    def logit_bound(self) -> float:
        r""":math:`\max_h\|Q_h^T K_h\|_2`, the bound of the scores over unit vectors (as for ``SelfAttention``)."""
        return self.softmax.logit_bound

    def velocity_field(self, x: np.ndarray, nodes: np.ndarray, weights: np.ndarray) -> np.ndarray:
        r"""The velocity :math:`v[\mu](x)` of :math:`\mu = \sum_j w_j\delta_{y_j}` at ``x`` (module docstring).

        Parameters
        ----------
        x : numpy.ndarray, shape (..., m, d)
            Nonzero points where the field is wanted, used through ``x / |x|``.
        nodes : numpy.ndarray, shape (..., k, d)
            Nonzero atoms :math:`y_j`, used through ``y / |y|``.
        weights : numpy.ndarray, shape (..., k)
            Their nonnegative weights, of positive total (normalised to a probability).

        {field_returns}

        Raises
        ------
        ValueError
            If an argument is not finite or of mismatched shape, a weight is negative, or the
            iterations do not converge within ``max_iterations``.
        """
        if self.iterations == 1:
            return self.softmax.velocity_field(x, nodes, weights)
        points, atoms, masses = _measure_arguments(x, nodes, weights)
        if np.any(masses < 0):
            raise ValueError(f"weights must be nonnegative for SinkhornAttention (its potentials are logarithms), "
                             f"got {masses.min():.3g}")
        shape = points.shape
        points, atoms = points.reshape((-1,) + shape[-2:]), atoms.reshape((-1,) + atoms.shape[-2:])
        with np.errstate(divide="ignore"):
            log_weights = np.log(masses.reshape(atoms.shape[:-1]) / masses.reshape(atoms.shape[:-1]).sum(
                axis=-1, keepdims=True))
        total = np.zeros_like(points)
        for attention, v in self._head_attention(points, atoms, log_weights):
            drive = attention @ atoms
            total += v * drive if np.ndim(v) == 0 else drive @ v.T
        return project_tangent(points, total).reshape(shape)

    @property
    def has_energy(self) -> bool:
        """Whether :meth:`energy` is defined: converged iterations and a symmetric :math:`Q_h^T K_h` in every head."""
        return self.iterations is None and self.beta > 0 and all(
            _symmetric(q, k) for q, k, _ in self.softmax.head_matrices())

    def energy(self, x: np.ndarray, *, masses: np.ndarray | None = None) -> np.ndarray:
        r"""The energy :math:`E(\mu) = \frac1\beta\sum_h \int f_h\,d\mu` whose gradient flow the model is.

        For a symmetric :math:`W_h = Q_h^T K_h` the Schrödinger system of :math:`\mu` with itself
        has a symmetric solution :math:`f_h` (the mean of the row and column potentials), with
        :math:`e^{f_h(x)}\int e^{f_h(y) + \beta\langle x, W_h y\rangle}d\mu(y) = 1`. Then
        :math:`\nabla f_h(x) = -\beta\int A_h(x, y) W_h y\,d\mu(y)`, and
        :math:`\frac{\delta}{\delta\mu}\int f_h\,d\mu = f_h` (the entropic transport of
        :math:`\mu` to itself is :math:`2\int f_h d\mu`, of first variation :math:`2 f_h`), so
        with :math:`V_h = c_h W_h`, :math:`c_h \ge 0`, head :math:`h` moves by
        :math:`-c_h\nabla\frac{\delta E_h}{\delta\mu}`, projected on the sphere: the flow is a
        Wasserstein gradient flow along which :math:`\sum_h c_h E_h` does not increase (with
        :math:`Q = K = V = I`: :math:`E` itself; the particles' :math:`dE/dt = -\frac1n\sum_i|v_i|^2`).

        Parameters
        ----------
        x : numpy.ndarray, shape (..., n, d)
            Tokens on the unit sphere (any leading batch axes).
        masses : numpy.ndarray, shape (..., n), optional
            The energy of :math:`\sum_j m_j\delta_{x_j}` (:math:`1/n` each by default).

        Returns
        -------
        numpy.ndarray, shape (...,)
            :math:`\sum_h E_h` per system.

        Raises
        ------
        ValueError
            If :attr:`has_energy` is false (fixed ``iterations``, ``beta = 0``, or a head with
            :math:`Q^T K` not symmetric), naming why.
        """
        if self.iterations is not None or self.beta == 0:
            raise ValueError(f"SinkhornAttention has an energy with iterations=None (converged potentials) and beta > 0, "
                             f"got iterations={self.iterations}, beta={self.beta}")
        x = np.asarray(x, dtype=float)
        flat = x.reshape((-1,) + x.shape[-2:])
        weights = (np.full(flat.shape[:-1], 1.0 / flat.shape[-2]) if masses is None
                   else np.asarray(masses, dtype=float).reshape(flat.shape[:-1]))
        with np.errstate(divide="ignore"):
            log_weights = np.log(weights / weights.sum(axis=-1, keepdims=True))
        total = np.zeros(flat.shape[0])
        for head, (q, k, _) in enumerate(self.softmax.head_matrices()):
            if not _symmetric(q, k):
                raise ValueError(f"SinkhornAttention's energy needs a symmetric Q^T K (query, key) in every head; head "
                                 f"{head} is not")
            queries, keys = (flat if q is None else flat @ q.T), (flat if k is None else flat @ k.T)
            scores = self.beta * queries @ np.swapaxes(keys, -1, -2)
            column = self.column_potential(scores, log_weights, symmetric=True)
            row = -logsumexp(scores + (log_weights + column)[:, None, :], axis=-1)
            occupied = weights > 0
            total += np.sum(np.where(occupied, weights * 0.5 * (row + column), 0.0), axis=-1) / weights.sum(axis=-1)
        return (total / self.beta).reshape(x.shape[:-2])

    def attention_matrix(self, x: np.ndarray) -> np.ndarray:
        r"""Every head's scaled attention matrix :math:`A_h(x_i, x_j)` of the tokens (doubly stochastic).

        Parameters
        ----------
        x : numpy.ndarray, shape (n, d)
            Tokens on the unit sphere (weights :math:`1/n`).

        Returns
        -------
        numpy.ndarray, shape (heads, n, n)
            Rows sum to one; with ``iterations=None`` columns too, within ``tolerance``.
        """
        x = np.asarray(x, dtype=float)[None]
        log_weights = np.full(x.shape[:-1], -np.log(x.shape[-2]))
        return np.stack([attention[0] for attention, _ in self._head_attention(x, x, log_weights)])

    def column_potential(self, scores: np.ndarray, log_weights: np.ndarray, *, symmetric: bool = False) -> np.ndarray:
        r"""The column potential :math:`g` of the atoms after the model's iterations.

        Parameters
        ----------
        scores : numpy.ndarray, shape (b, k, k)
            :math:`s(y_i, y_j)` among the atoms.
        log_weights : numpy.ndarray, shape (b, k)
            :math:`\log w_j` (a probability; ``-inf`` for an empty atom).
        symmetric : bool
            The scores are symmetric (:math:`Q^T K` is): with ``iterations=None`` the averaged
            symmetric iteration, much faster on clustered measures.

        Returns
        -------
        numpy.ndarray, shape (b, k)
            :math:`g_j`; the final row normalisation at any point then gives :math:`A(x, \cdot)`.

        Raises
        ------
        ValueError
            If ``iterations=None`` and the row sums do not come within ``tolerance`` of one in
            ``max_iterations`` rounds.
        """
        span = float(np.max(scores) - np.min(scores))
        if self.iterations is None and symmetric:
            return self._symmetric_potential(scores, log_weights, span < SCALING_RANGE)
        if span < SCALING_RANGE:
            # k_ij = e^{s_ij - m_i} <= 1 (m_i the row's largest score): a normalisation is one product
            # with a vector, on the scalings a_i = e^{f_i + m_i} (up to a constant) and b_j = e^{g_j}
            largest = scores.max(axis=-1)
            kernel, weights = np.exp(scores - largest[..., None]), np.exp(log_weights)
            scalings = self._alternate(
                rows=lambda b: 1.0 / (kernel @ (weights * b)[..., None])[..., 0],
                columns=lambda a: 1.0 / (np.swapaxes(kernel, -1, -2) @ (weights * a)[..., None])[..., 0],
                distance=lambda old, new: _largest(np.abs(old / new - 1.0), weights > 0),
                row=np.exp(largest - largest.max(axis=-1, keepdims=True)), column=np.ones_like(weights))
            return np.log(scalings)
        occupied = np.isfinite(log_weights)
        return self._alternate(  # f_i = -log sum_j w_j e^{g_j + s_ij}, g_j = -log sum_i w_i e^{f_i + s_ij}
            rows=lambda g: -logsumexp(scores + (log_weights + g)[:, None, :], axis=-1),
            columns=lambda f: -logsumexp(scores + (log_weights + f)[:, :, None], axis=-2),
            distance=lambda old, new: _largest(np.abs(np.expm1(old - new)), occupied),
            row=np.zeros_like(log_weights), column=np.zeros_like(log_weights))

    def _alternate(self, rows, columns, distance, row: np.ndarray, column: np.ndarray) -> np.ndarray:
        """The model's alternating normalisations from ``row`` and ``column`` (f = g = 0); the last column state.

        ``rows(column)`` and ``columns(row)`` normalise; ``distance(row, updated)`` is the row sums'
        distance from one after a column normalisation (the rows' update measures it).
        """
        if self.iterations is not None:
            # iterations - 1 normalisations on the atoms, alternating, the last of the columns
            for step in range(self.iterations - 1):
                if (self.iterations - 1 - step) % 2 == 0:
                    row = rows(column)
                else:
                    column = columns(row)
            return column
        row, error = rows(column), np.inf
        for _ in range(self.max_iterations):
            column = columns(row)
            updated = rows(column)
            error, previous = distance(row, updated), error
            row = updated
            if self._converged(error, previous):
                return column
        raise self._not_converged(error)

    def _symmetric_potential(self, scores: np.ndarray, log_weights: np.ndarray, scaled: bool) -> np.ndarray:
        r"""The symmetric solution :math:`f = g` of a symmetric system, by the averaged iteration.

        :math:`f \leftarrow \frac12(f + T f)`, :math:`(Tf)_i = -\log\sum_j w_j e^{f_j + s_{ij}}`
        (Feydy et al. 2019, symmetric Sinkhorn), whose fixed point is the Schrödinger potential:
        it stays fast where the alternating iteration's rate nears one (a clustered measure).
        The row sums of :math:`w_j e^{f_i + f_j + s_{ij}}` are
        :math:`e^{f_i - (Tf)_i}`. ``scaled``: on :math:`u = e^{f + M/2}` with the kernel
        :math:`e^{s - M}` (:math:`M` the largest score), where :math:`Tf` is :math:`1/(K(wu))`.
        """
        occupied = np.isfinite(log_weights)
        error = np.inf
        if scaled:
            largest = scores.max(axis=(-1, -2), keepdims=True)
            kernel, weights = np.exp(scores - largest), np.exp(log_weights)
            scaling = np.ones_like(weights)
            for _ in range(self.max_iterations):
                sums = scaling * (kernel @ (weights * scaling)[..., None])[..., 0]  # the row sums
                error, previous = _largest(np.abs(sums - 1.0), occupied), error
                if self._converged(error, previous):
                    return np.log(scaling) - 0.5 * largest[..., 0]
                scaling = scaling / np.sqrt(sums)
            raise self._not_converged(error)
        potential = np.zeros_like(log_weights)
        for _ in range(self.max_iterations):
            image = -logsumexp(scores + (log_weights + potential)[:, None, :], axis=-1)
            with np.errstate(over="ignore"):  # far from the fixed point at large beta: an infinite error
                error, previous = _largest(np.abs(np.expm1(potential - image)), occupied), error
            if self._converged(error, previous):
                return potential
            potential = 0.5 * (potential + image)
        raise self._not_converged(error)

    def _converged(self, error: float, previous: float) -> bool:
        """Within ``tolerance``, or stalled at the round-off: no smaller than the last round's, and tiny."""
        return error <= self.tolerance or (previous <= error <= ROUNDOFF_STALL)

    def _not_converged(self, error: float) -> ModelFailure:
        return ModelFailure(f"SinkhornAttention did not reach tolerance={self.tolerance:g} in max_iterations="
                          f"{self.max_iterations} (row sums off by {error:.3g}): raise max_iterations or tolerance, "
                          f"or lower beta (now {self.beta:g})")

    def _head_attention(self, points: np.ndarray, atoms: np.ndarray, log_weights: np.ndarray):
        """Per head, the scaled attention :math:`A_h(x, y_j)` of the points on the atoms ``(b, m, k)``, and ``V_h``.

        The column potential comes from the atoms' own scores; the final row normalisation is a
        softmax at the points.
        """
        for q, k, v in self.softmax.head_matrices():
            keys = np.swapaxes(atoms if k is None else atoms @ k.T, -1, -2)
            node_scores = self.beta * (atoms if q is None else atoms @ q.T) @ keys
            column = self.column_potential(node_scores, log_weights, symmetric=_symmetric(q, k))
            scores = self.beta * (points if q is None else points @ q.T) @ keys
            yield softmax(scores + (log_weights + column)[:, None, :], axis=-1), v

    def to_dict(self) -> dict:
        """The model's parameters (matrices as nested lists).

        Returns
        -------
        dict
            JSON-serializable.
        """
        softmax = self.softmax.to_dict()
        return {"model": "SinkhornAttention", **{key: softmax[key] for key in ("beta", "query", "key", "value",
                                                                             "diffusion")},
                "iterations": self.iterations, "tolerance": self.tolerance, "max_iterations": self.max_iterations}
