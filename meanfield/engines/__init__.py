r"""The particle engines: faster implementations of the models' reference right-hand sides.

Each engine computes what a model's own numpy methods define (the reference: the velocity
:math:`P_x a` and the attention output :math:`a`, :mod:`meanfield.models`), on batches
``(systems, n, d)``; no model imports an engine. :func:`select_kernel` chooses one for a run,
:func:`check_consistency` compares any engine with the reference.

``kernels``
    the choice, the model's own methods (:class:`NumpyKernel`) and the array API engine;
``fused``
    numba passes around batched BLAS products (:class:`SelfAttention`, up to 256 tokens);
``series``
    the kernel's Fourier or harmonic series (zonal models on the circle and :math:`S^2`), for
    tokens and for weighted measures (:class:`WeightedVelocity` chooses it for the latter);
``causal_series``
    the causal sum on the circle by a scan over positions;
``euclidean_array_api``
    pure attention in :math:`\mathbb{R}^d` (:class:`~meanfield.PureAttention`) in any array API namespace.
"""

from .consistency import check_consistency, engines_for
from .euclidean_array_api import EuclideanArrayAPIKernel
from .kernels import (ArrayAPIKernel, NumpyKernel, WeightedVelocity, energy_pair_sum, is_numpy, select_kernel,
                      series_is_cheaper, to_numpy)

__all__ = ["check_consistency", "engines_for", "select_kernel", "energy_pair_sum", "series_is_cheaper",
           "NumpyKernel", "ArrayAPIKernel", "EuclideanArrayAPIKernel", "WeightedVelocity", "is_numpy", "to_numpy"]
