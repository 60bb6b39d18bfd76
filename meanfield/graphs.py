r"""Attention and Kuramoto coupling on a graph: pair weights in the sum over tokens.

"A mathematical perspective on Transformers", sec. 7.2: the Kuramoto model on a graph sums over
the neighbours only. With pair weights :math:`A_{ij}` (an adjacency matrix or any coupling
matrix :math:`K_{ij}`),

.. math::
    \text{USA:}\quad \dot x_i = c\,P_{x_i}\Big(\frac1n\sum_j A_{ij}\,e^{\beta\langle x_i, x_j\rangle}x_j\Big),
    \qquad
    \text{SA:}\quad \dot x_i = c\,P_{x_i}\Big(\frac{\sum_j A_{ij}\,e^{\beta\langle x_i, x_j\rangle}x_j}
                                               {\sum_j A_{ij}\,e^{\beta\langle x_i, x_j\rangle}}\Big),

so that USA at :math:`\beta = 0` on the circle is Kuramoto on the graph,
:math:`\dot\theta_i = \frac cn\sum_j A_{ij}\sin(\theta_j - \theta_i)`, and SA its
degree-normalised form (an attention mask). The sums run over the graph's edges: ``O(E)`` per
system for a sparse matrix. The complete graph is the library's all-to-all model, which it runs
(``O(n)`` for Kuramoto, through :class:`~meanfield.SelfAttention`). A batch of graphs, one per
system (``(systems, n, n)`` or a sequence of matrices), runs all systems in one edge sum over the
block-diagonal graph: a sweep over graph draws steps them together.

Graphs: :func:`erdos_renyi`, :func:`ring`, :func:`small_world`, :func:`graphon_graph`
(``scipy.sparse``, symmetric, no self-loops), :func:`draw_graph` (any of them by name, as configs give it), :func:`is_connected`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .checks import EXP_OVERFLOW, check_int, check_points, check_real
from .models import NeutralMembers, SelfAttention, TangentVelocity, WithoutEnergy


@dataclass(frozen=True, eq=False)
class GraphAttention(NeutralMembers, WithoutEnergy, TangentVelocity):
    r"""SA or USA with pair weights: attention (or Kuramoto) on a graph (module docstring).

    Parameters
    ----------
    beta : float
        Inverse temperature, ``>= 0`` (``0`` with USA: Kuramoto).
    adjacency : array_like or scipy.sparse matrix, shape (n, n); or a batch of them
        The pair weights :math:`A_{ij}` (token ``i`` feels token ``j`` with weight :math:`A_{ij}`);
        nonnegative for SA, any sign for USA (a coupling matrix). A batch, an array
        ``(systems, n, n)`` or a sequence of ``(n, n)`` matrices, gives each system its own graph:
        the tokens are then ``(systems, n, d)`` (``adjacency`` becomes a tuple of CSR arrays).
    normalized : bool
        ``True``: SA (the weights normalised per token); ``False`` (default): USA, divided by ``n``.
    value : float
        The prefactor ``c`` (Kuramoto's ``K``).
    diffusion : float
        Diffusion coefficient ``D >= 0``.
    """

    beta: float
    adjacency: object
    normalized: bool = False
    value: float = 1.0
    diffusion: float = 0.0
    complete: bool = field(init=False, repr=False)
    edges: tuple = field(init=False, repr=False)

    dimension = None
    logit_bound = 1.0

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "beta", check_real(self.beta, "beta", minimum=0.0))
        set_(self, "value", check_real(self.value, "value"))
        set_(self, "diffusion", check_real(self.diffusion, "diffusion", minimum=0.0))
        if not isinstance(self.normalized, (bool, np.bool_)):
            raise TypeError(f"normalized must be True (SA) or False (USA), got {self.normalized!r}")
        if not self.normalized and self.beta > EXP_OVERFLOW:
            raise ValueError(f"USA with beta={self.beta}: exp(beta <x, y>) overflows double precision")
        batch = _is_batch(self.adjacency)
        matrices = [self._checked(m) for m in (self.adjacency if batch else [self.adjacency])]
        if not matrices:
            raise ValueError("adjacency: a batch of graphs needs at least one")
        n = matrices[0].shape[0]
        if any(m.shape[0] != n for m in matrices):
            raise ValueError(f"adjacency: the graphs of a batch must have the same vertices, got "
                             f"{sorted({m.shape[0] for m in matrices})}")
        set_(self, "adjacency", tuple(matrices) if batch else matrices[0])
        set_(self, "complete", all(m.nnz == n * n and np.all(m.data == 1.0) for m in matrices))
        # the edges once, as indices into the batch's tokens (system s's vertex i is token s n + i)
        coo = [m.tocoo() for m in matrices]
        offsets = [np.full(c.nnz, s * n) for s, c in enumerate(coo)]
        set_(self, "edges", tuple(np.concatenate(part) for part in (
            [c.row + o for c, o in zip(coo, offsets)], [c.col + o for c, o in zip(coo, offsets)], [c.data for c in coo])))

    def _checked(self, adjacency):
        """One graph's matrix as a sorted CSR array, checked."""
        matrix = _csr(adjacency)
        if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1] or matrix.shape[0] < 1:
            raise ValueError(f"adjacency must be a square (n, n) matrix, got shape {matrix.shape}")
        if not np.all(np.isfinite(matrix.data)):
            raise ValueError("adjacency contains NaN or infinite weights")
        if self.normalized and np.any(matrix.data < 0):
            raise ValueError("adjacency: SA normalises the weights per token, so they must be >= 0 (a signed "
                             "coupling matrix needs normalized=False)")
        matrix.sum_duplicates()
        matrix.sort_indices()
        return matrix

    @property
    def systems(self) -> int | None:
        """The number of graphs of a batch (one per system), or ``None``: one graph shared by every system."""
        return len(self.adjacency) if isinstance(self.adjacency, tuple) else None

    @property
    def tokens(self) -> int:
        """The number ``n`` of tokens the graph has."""
        return (self.adjacency[0] if self.systems else self.adjacency).shape[0]

    @property
    def velocity_is_linear(self) -> bool:
        """Whether the velocity is linear in the measure: USA, and SA at ``beta = 0``."""
        return not (self.normalized and self.beta > 0)

    @property
    def all_to_all(self) -> SelfAttention:
        """The all-to-all model the complete graph is (``SelfAttention`` with the same parameters)."""
        return SelfAttention(self.beta, normalized=self.normalized, value=self.value, diffusion=self.diffusion)

    def velocity(self, x: np.ndarray) -> np.ndarray:
        """The velocity of the tokens ``x`` (the graph's vertices, in order).

        Parameters
        ----------
        x : numpy.ndarray, shape (..., n, d)
            Tokens on the unit sphere, token ``i`` at vertex ``i`` (a batch of graphs: shape
            ``(systems, n, d)``, system ``s`` on graph ``s``).

        Returns
        -------
        numpy.ndarray, shape (..., n, d)
            The velocities, tangent to the sphere.

        Raises
        ------
        ValueError
            If ``x`` is not on the unit sphere, holds another number of tokens than the graph, or
            another number of systems than a batch has graphs.
        """
        return self.velocity_unchecked(check_points(x, "x"))

    def _attention(self, flat: np.ndarray, masses: np.ndarray | None = None) -> np.ndarray:
        """The attention output of unit tokens ``(b, n, d)``: the all-to-all model's on the complete graph."""
        if masses is not None:
            raise TypeError("GraphAttention has no velocity of a weighted measure: its tokens are vertices")
        if flat.shape[-2] != self.tokens:
            raise ValueError(f"the graph has {self.tokens} vertices, got n={flat.shape[-2]} tokens")
        if self.systems is not None and flat.shape[0] != self.systems:
            raise ValueError(f"the batch has {self.systems} graphs (one per system), got tokens of {flat.shape[0]} "
                             f"systems: shape (systems, n, d)")
        if self.complete:
            return self.all_to_all._attention(flat)
        return self.edge_attention(flat)

    def edge_attention(self, flat: np.ndarray) -> np.ndarray:
        """The attention output summed over the graph's edges, ``O(E)`` per system (any graph).

        Parameters
        ----------
        flat : numpy.ndarray, shape (systems, n, d)
            Unit tokens.

        Returns
        -------
        numpy.ndarray, shape (systems, n, d)
            The output :math:`a_i` whose tangent projection is the velocity.
        """
        shape, n = flat.shape, self.tokens
        if self.systems is not None:  # one system of s n tokens on the block-diagonal graph
            flat = flat.reshape(1, -1, shape[-1])
        b, tokens, d = flat.shape
        rows, columns, data = self.edges
        logits = self.beta * np.einsum("sed,sed->se", flat[:, rows], flat[:, columns])  # (systems, edges)
        if self.normalized:
            top = np.full((b, tokens), -np.inf)
            np.maximum.at(top, (slice(None), rows), logits)
            logits -= top[:, rows]  # each token's largest logit: its weights stay finite
        weights = data * np.exp(logits)
        index = (np.arange(b)[:, None] * tokens + rows[None, :]).ravel()
        carried = weights[..., None] * flat[:, columns]
        # float: numpy's bincount returns integers where there is no edge at all
        sums = np.stack([np.bincount(index, carried[..., k].ravel(), minlength=b * tokens) for k in range(d)], axis=-1)
        sums = sums.reshape(b, tokens, d).astype(float, copy=False)
        if not self.normalized:
            return (self.value * sums / n).reshape(shape)
        totals = np.bincount(index, weights.ravel(), minlength=b * tokens).reshape(b, tokens, 1).astype(float, copy=False)
        out = np.zeros_like(sums)
        np.divide(sums, totals, out=out, where=totals > 0)  # a token without neighbours does not move
        return (self.value * out).reshape(shape)

    def to_dict(self) -> dict:
        """A JSON-serializable description (the graph as its edges).

        Returns
        -------
        dict
            Plain values; :func:`meanfield.model_from_dict` rebuilds the model.
        """
        def edges(matrix) -> dict:
            coo = matrix.tocoo()
            return {"n": self.tokens, "rows": coo.row.tolist(), "columns": coo.col.tolist(), "weights": coo.data.tolist()}

        adjacency = [edges(m) for m in self.adjacency] if self.systems else edges(self.adjacency)
        return {"model": "GraphAttention", "beta": self.beta, "normalized": bool(self.normalized),
                "value": self.value, "diffusion": self.diffusion, "adjacency": adjacency}

    @staticmethod
    def adjacency_from_dict(description: dict | list):
        """The sparse matrix (or a batch's matrices) of :meth:`to_dict`'s ``adjacency`` entry.

        Parameters
        ----------
        description : dict or list of dict
            ``{"n", "rows", "columns", "weights"}``, one per graph of a batch.

        Returns
        -------
        scipy.sparse.csr_array or list of them
            The matrix, or the batch's.
        """
        from scipy import sparse  # here: sweep workers import meanfield and never build a graph

        if isinstance(description, list):
            return [GraphAttention.adjacency_from_dict(one) for one in description]
        n = description["n"]
        return sparse.csr_array((description["weights"], (description["rows"], description["columns"])), shape=(n, n))


def _is_batch(adjacency) -> bool:
    """Whether ``adjacency`` is a batch of graphs: a sequence of matrices, or an array of three axes."""
    if isinstance(adjacency, (list, tuple)):
        return len(adjacency) == 0 or np.ndim(adjacency[0]) == 2 or hasattr(adjacency[0], "tocoo")
    return not hasattr(adjacency, "tocoo") and np.ndim(adjacency) == 3


def _csr(matrix):
    """``matrix`` (an array or a scipy.sparse matrix) as a float CSR array."""
    from scipy import sparse  # here: sweep workers import meanfield and never build a graph

    if sparse.issparse(matrix):
        return sparse.csr_array(matrix, dtype=float)
    try:
        return sparse.csr_array(np.asarray(matrix, dtype=float))
    except (TypeError, ValueError):
        raise TypeError(f"adjacency must be an (n, n) array of numbers or a scipy.sparse matrix, got "
                        f"{type(matrix).__name__}") from None


def _symmetric_pattern(n: int, rows: np.ndarray, columns: np.ndarray):
    """The symmetric 0/1 matrix with the edges ``(rows[k], columns[k])`` and their reverses."""
    from scipy import sparse  # here: sweep workers import meanfield and never build a graph

    both = (np.concatenate([rows, columns]), np.concatenate([columns, rows]))
    matrix = sparse.csr_array((np.ones(2 * rows.size), both), shape=(n, n))
    matrix.sum_duplicates()
    matrix.data[:] = 1.0
    return matrix


def _probability(p: object) -> float:
    p = check_real(p, "p", minimum=0.0)
    if p > 1:
        raise ValueError(f"p must lie in [0, 1], got {p!r}")
    return p


def erdos_renyi(n: int, p: float, seed=None):
    """The Erdos-Renyi graph ``G(n, p)``: each of the ``n (n - 1) / 2`` pairs an edge with probability ``p``.

    Parameters
    ----------
    n : int
        Vertices.
    p : float
        Edge probability in ``[0, 1]``.
    seed : int or numpy.random.Generator, optional
        The draw.

    Returns
    -------
    scipy.sparse.csr_array, shape (n, n)
        Symmetric 0/1 adjacency without self-loops.
    """
    n = check_int(n, "n", minimum=1)
    p = _probability(p)
    return _bernoulli_pairs(n, lambda rows, columns: p, seed)


def _bernoulli_pairs(n: int, probability, seed):
    """Each pair ``i < j`` an edge with ``probability(rows, columns)``, one uniform draw per pair in ``triu`` order."""
    rows, columns = np.triu_indices(n, 1)
    kept = np.random.default_rng(seed).random(rows.size) < probability(rows, columns)
    return _symmetric_pattern(n, rows[kept], columns[kept])


def graphon_graph(graphon, n: int, seed=None):
    r"""A graph drawn from a graphon: vertex ``i`` at the label :math:`x_i = (i + \tfrac12)/n`, the pair ``(i, j)`` an edge with probability :math:`W(x_i, x_j)`.

    As ``n`` grows, Kuramoto or attention on such graphs approaches the graphon mean field
    (:class:`solvers.GraphonCircleFV`), whose densities carry the same labels.

    Parameters
    ----------
    graphon : callable
        Vectorized :math:`W(x, y)` on :math:`[0, 1]^2`, symmetric, with values in ``[0, 1]``.
    n : int
        Vertices.
    seed : int or numpy.random.Generator, optional
        The draw.

    Returns
    -------
    scipy.sparse.csr_array, shape (n, n)
        Symmetric 0/1 adjacency without self-loops.

    Raises
    ------
    ValueError
        If the graphon's values are not in ``[0, 1]`` or not finite at the labels.
    """
    n = check_int(n, "n", minimum=1)
    labels = (np.arange(n) + 0.5) / n

    def probability(rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
        values = np.asarray(graphon(labels[rows], labels[columns]), dtype=float)
        if values.shape != rows.shape or not np.all((values >= 0) & (values <= 1)):
            raise ValueError("graphon must map label arrays (x, y) to probabilities in [0, 1] of the same shape")
        return values

    return _bernoulli_pairs(n, probability, seed)


def ring(n: int, k: int):
    """The ring lattice: each vertex joined to its ``k`` nearest neighbours on either side.

    Parameters
    ----------
    n : int
        Vertices.
    k : int
        Neighbours on each side, ``1 <= k < n / 2``.

    Returns
    -------
    scipy.sparse.csr_array, shape (n, n)
        Symmetric 0/1 adjacency, every degree ``2 k``.
    """
    n = check_int(n, "n", minimum=3)
    k = check_int(k, "k", minimum=1)
    if 2 * k >= n:
        raise ValueError(f"k must be below n / 2 = {n / 2:g} (each side), got {k}")
    vertices = np.arange(n)
    rows = np.repeat(vertices, k)
    columns = (rows + np.tile(np.arange(1, k + 1), n)) % n
    return _symmetric_pattern(n, rows, columns)


def small_world(n: int, k: int, p: float, seed=None):
    """The Watts-Strogatz graph: the :func:`ring` with each edge's far end rewired with probability ``p``.

    A rewired edge goes to a vertex drawn uniformly among those that are neither the vertex itself
    nor already its neighbour (the edge is kept where none is left).

    Parameters
    ----------
    n, k : int
        As for :func:`ring`.
    p : float
        Rewiring probability in ``[0, 1]`` (``0``: the ring).
    seed : int or numpy.random.Generator, optional
        The draw.

    Returns
    -------
    scipy.sparse.csr_array, shape (n, n)
        Symmetric 0/1 adjacency without self-loops.
    """
    lattice = ring(n, k)
    p = _probability(p)
    generator = np.random.default_rng(seed)
    neighbours = [set(lattice.indices[lattice.indptr[i]:lattice.indptr[i + 1]]) for i in range(n)]
    for step in range(1, k + 1):
        for i in range(n):
            j = (i + step) % n
            if j not in neighbours[i] or generator.random() >= p:
                continue
            free = np.setdiff1d(np.arange(n), [i, *neighbours[i]])
            if free.size == 0:
                continue
            new = int(generator.choice(free))
            neighbours[i].discard(j)
            neighbours[j].discard(i)
            neighbours[i].add(new)
            neighbours[new].add(i)
    rows = np.array([i for i in range(n) for j in neighbours[i] if i < j], dtype=int)
    columns = np.array([j for i in range(n) for j in neighbours[i] if i < j], dtype=int)
    return _symmetric_pattern(n, rows, columns)


#: The graphs :func:`draw_graph` draws by name, and the parameters each takes.
GRAPHS = {"erdos_renyi": ("edge_probability",), "ring": ("neighbours",),
          "small_world": ("neighbours", "edge_probability")}


def draw_graph(kind: str, n: int, *, edge_probability: float | None = None, neighbours: int | None = None,
               seed=None):
    """A graph by name: :func:`erdos_renyi`, :func:`ring` or :func:`small_world`.

    Parameters
    ----------
    kind : {"erdos_renyi", "ring", "small_world"}
    n : int
        Vertices.
    edge_probability : float, optional
        ``p`` of the Erdos-Renyi graph, or the small world's rewiring probability.
    neighbours : int, optional
        ``k``, the ring's (and the small world's) neighbours on each side.
    seed : int or numpy.random.Generator, optional
        The draw (a Generator draws on from where it is).

    Returns
    -------
    scipy.sparse.csr_array, shape (n, n)

    Raises
    ------
    ValueError
        For an unknown ``kind``, or a parameter the kind needs missing or one it does not take given.
    """
    if kind not in GRAPHS:
        raise ValueError(f"kind must be one of {sorted(GRAPHS)}, got {kind!r}")
    given = {"edge_probability": edge_probability, "neighbours": neighbours}
    for name, value in given.items():
        if (value is None) == (name in GRAPHS[kind]):
            need = " and ".join(GRAPHS[kind])
            raise ValueError(f"{kind} takes {need}; {name} {'is missing' if value is None else 'does not apply'}")
    if kind == "erdos_renyi":
        return erdos_renyi(n, edge_probability, seed)
    if kind == "ring":
        return ring(n, neighbours)
    return small_world(n, neighbours, edge_probability, seed)


def is_connected(adjacency) -> bool:
    """Whether the graph of the nonzero weights is connected (as an undirected graph).

    Parameters
    ----------
    adjacency : array_like or scipy.sparse matrix, shape (n, n)
        The graph.

    Returns
    -------
    bool
        One connected component.
    """
    from scipy.sparse.csgraph import connected_components  # here: as _csr

    return connected_components(_csr(adjacency), directed=True, connection="weak")[0] == 1
