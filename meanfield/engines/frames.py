"""A particle run's frames, recorded as they come: the copy and the squared norms in one compiled pass (numba,
imported with the run, not with the package)."""

from __future__ import annotations

import numba
import numpy as np

from ..sphere import squared_norms


def copy_with_norm_range(source: np.ndarray, target: np.ndarray) -> tuple[float, float]:
    """``target[...] = source``, and the smallest and largest squared norm of ``source``'s rows.

    Where a particle run records a frame at every step: on the circle and on :math:`S^2` the
    copy and the squares are one compiled pass (numpy's take a strided pass per component).
    The squares are summed in :func:`~meanfield.sphere.squared_norms`' order, so the extremes
    are its own, bit for bit; NaN if any row's is.

    Parameters
    ----------
    source : numpy.ndarray, shape (..., n, d)
        The points.
    target : numpy.ndarray, shape (..., n, d)
        Where they are copied (any strides).

    Returns
    -------
    tuple of float
        The smallest and the largest squared norm.
    """
    if source.shape[-1] in (2, 3) and target.ndim in (2, 3) and source.dtype == target.dtype == np.float64:
        source = np.ascontiguousarray(source)
        squares = np.empty(source.shape[:-1])
        if target.ndim == 2:  # one system
            _copy_with_squares(source[None], target[None], squares[None])
        else:  # a batch: the frame is a strided view of the run's array, written in place
            _copy_with_squares(source, target, squares)
    else:
        target[...] = source
        squares = squared_norms(source)
    return float(squares.min()), float(squares.max())


@numba.njit(cache=True)  # no fastmath: a fused multiply-add would change the sums
def _copy_with_squares(source, target, squares):
    """:func:`copy_with_norm_range`'s pass on ``(b, n, d)`` arrays, ``d`` 2 or 3 (written out: a loop over
    the components would keep LLVM from vectorising the one over the points)."""
    three = source.shape[2] == 3
    for s in range(source.shape[0]):
        if three:
            for i in range(source.shape[1]):
                a, b, c = source[s, i, 0], source[s, i, 1], source[s, i, 2]
                target[s, i, 0], target[s, i, 1], target[s, i, 2] = a, b, c
                squares[s, i] = a * a + b * b + c * c
        else:
            for i in range(source.shape[1]):
                a, b = source[s, i, 0], source[s, i, 1]
                target[s, i, 0], target[s, i, 1] = a, b
                squares[s, i] = a * a + b * b
