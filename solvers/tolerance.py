r"""What ``rtol`` means in every PDE solver: local error relative to the deviation from uniform.

A step of size :math:`\Delta t` is accepted when its estimated local error :math:`e` obeys

.. math:: \|e\|_{L^2} \le \mathrm{rtol}\,\|\rho - \bar\rho\|_{L^2} + \epsilon\,\|\bar\rho\|_{L^2},

with :math:`\bar\rho = 1/|S^{d-1}|` the uniform density (the steady state every zonal model
shares) and :math:`\epsilon` the machine epsilon. A perturbation of relative size
:math:`10^{-10}` of the uniform state is therefore followed to ``rtol`` relative to the
perturbation, not to the density; the second term is the round-off of the density itself
(it only matters when ``rtol`` times the perturbation falls below it). Measuring against
:math:`\|\rho\|` instead lets the step grow until a small perturbation is lost in the error.

The solvers carry the deviation itself (the cell values of :math:`\rho - \bar\rho` on the
circle, the coefficients of degree :math:`\ge 1` on :math:`S^2`) so that it is represented to
full relative precision, and compute velocities from it.
"""

from __future__ import annotations

import numpy as np

#: Floor of the local error tolerance, relative to the L2 norm of the uniform density.
ROUNDOFF = float(np.finfo(float).eps)


def error_tolerance(rtol: float, deviation_norm: float, uniform_norm: float) -> float:
    """Largest accepted L2 local error of a step from a state whose deviation has ``deviation_norm``."""
    return rtol * deviation_norm + ROUNDOFF * uniform_norm
