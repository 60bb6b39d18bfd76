r"""Blocked pair sums :math:`\sum_j w(\langle q_i, k_j\rangle)\, u_j` for batches of particle systems.

The pair matrix of ``n`` particles has ``n^2`` entries; it is never formed whole.
Rows (and, for many small systems, whole systems) are processed in blocks of at
most ``max_block_elements`` pair entries, so memory stays bounded (``n = 20000``
uses a few tens of MiB) while each block is still one large matrix product.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

#: Pair entries per block: 2^20 doubles = 8 MiB, large enough for efficient BLAS calls,
#: small enough to stay in cache-friendly territory and far below any memory limit.
DEFAULT_BLOCK_ELEMENTS = 2**20

# A weight transforms a block of inner products in place, G -> w(G), and returns the
# per-row log scale that was divided out (or None): rows of w are then exp(-shift) * true weights.
Weight = Callable[[np.ndarray], "np.ndarray | None"]


def pair_sums(queries: np.ndarray, keys: np.ndarray, values: np.ndarray, weight: Weight,
              *, key_offsets: np.ndarray | None = None,
              max_block_elements: int = DEFAULT_BLOCK_ELEMENTS) -> tuple[np.ndarray, np.ndarray | None]:
    r"""Return :math:`S_i = \sum_j w(\langle q_i, k_j\rangle + o_j)\, u_j` for every system of a batch.

    Parameters
    ----------
    queries : numpy.ndarray, shape (b, n, d)
    keys : numpy.ndarray, shape (b, k, d)
        ``k = n`` for a particle system; a measure's nodes may be more or fewer than the points.
    values : numpy.ndarray, shape (b, k, m)
    weight : callable
        Maps a block ``G`` of shape ``(bs, rows, k)`` in place to the weights and returns
        either ``None`` or a per-row log shift of shape ``(bs, rows, 1)`` that was subtracted
        from the exponent (softmax stabilisation).
    key_offsets : numpy.ndarray, shape (b, k), optional
        :math:`o_j`, added to every inner product with key ``j`` before ``weight`` (a softmax
        over weighted keys takes :math:`\log m_j/\beta` there, so that its stabilising shift is
        the largest weighted logit).
    max_block_elements : int
        Bound on the number of pair entries held at once.

    Returns
    -------
    sums : numpy.ndarray, shape (b, n, m)
    shifts : numpy.ndarray of shape (b, n, 1) or None
        The per-row log shifts, when ``weight`` returned them.
    """
    b, n, _ = queries.shape
    k = keys.shape[-2]
    sums = np.empty((b, n, values.shape[-1]))
    shifts = None
    keys_t = np.swapaxes(keys, -1, -2)
    if n * k <= max_block_elements:
        system_step, row_step = max(1, max_block_elements // max(n * k, 1)), n
    else:
        system_step, row_step = 1, max(1, max_block_elements // k)
    for s0 in range(0, b, system_step):
        systems = slice(s0, min(b, s0 + system_step))
        for r0 in range(0, n, row_step):
            rows = slice(r0, min(n, r0 + row_step))
            block = np.matmul(queries[systems, rows], keys_t[systems])
            if key_offsets is not None:
                block += key_offsets[systems, None, :]
            shift = weight(block)
            np.matmul(block, values[systems], out=sums[systems, rows])
            if shift is not None:
                if shifts is None:
                    shifts = np.empty((b, n, 1))
                shifts[systems, rows] = shift
    return sums, shifts
