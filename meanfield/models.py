r"""Interaction models: self-attention (SA, USA) and zonal aggregation.

Every model gives the particle velocity :math:`v_i = P_{x_i}(\dots)` of docs/theory/model.md,
the interaction energy of the empirical measure (sec. 4), the diffusion coefficient of
the Fokker-Planck variant, and, when its kernel is zonal, the harmonic spectra the PDE
solvers need (sec. 5).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from scipy.special import logsumexp

from .checks import EXP_OVERFLOW, check_points, check_real
from .docstrings import fill_docstrings, parameters
from .field_model import FIELD_RETURNS
from .external import as_external, potential_energy
from .interaction import pair_sums
from .sphere import normalize, project_tangent
from .spectra import attention_spectrum, attention_spectrum_over_beta, funk_hecke_spectrum


def as_head_matrices(matrix: object, name: str, *, minimum_dimension: int = 2,
                     square: bool = True) -> np.ndarray | None:
    """``None`` (identity), or a read-only array of shape ``(heads, d, d)``, ``d >= minimum_dimension``.

    ``square=False`` (queries and keys): ``(heads, k, d)`` with ``1 <= k``, the head dimension of a
    Transformer (usually ``d / heads``); only :math:`Q^T K`, ``(d, d)``, enters the dynamics.
    """
    if matrix is None:
        return None
    array = np.asarray(matrix, dtype=float)
    if array.ndim == 2:
        array = array[None]
    if array.ndim != 3 or (square and array.shape[-1] != array.shape[-2]) or array.shape[-1] < minimum_dimension:
        shapes = "(d, d) matrix or a (heads, d, d) stack" if square else "(k, d) matrix or a (heads, k, d) stack"
        raise ValueError(f"{name} must be a {shapes}, got shape {np.shape(matrix)}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} contains NaN or infinite entries")
    array.setflags(write=False)
    return array


def _flatten_batch(x: np.ndarray) -> np.ndarray:
    """``x`` of shape ``(..., n, d)`` as a batch ``(systems, n, d)`` (a view where it can be)."""
    return x.reshape((-1,) + x.shape[-2:])


#: The Parameters section of the methods that read points off the sphere too (``{points_parameters}``).
POINTS_PARAMETERS = """
Parameters
----------
x : numpy.ndarray, shape (..., n, d)
    Nonzero points (any leading batch axes), used through ``x / |x|``.
"""

#: The entries of a spectrum's largest degree and the dimension (``{degree_and_dimension}``).
DEGREE_AND_DIMENSION = r"""
max_degree : int
    Largest degree (on the circle: the largest Fourier mode).
d : int
    Ambient dimension; the sphere is :math:`S^{d-1}`.
uniform_measure : bool
    Eigenvalues for densities relative to the uniform probability measure:
    :math:`\lambda_l/|S^{d-1}|`, finite in every dimension (``meanfield.attention_spectrum``).
"""

#: The Parameters section of a spectrum's arguments (``{degree_and_dimension_parameters}``).
DEGREE_AND_DIMENSION_PARAMETERS = parameters(DEGREE_AND_DIMENSION)

#: The Returns section of a model's spectrum (``{spectrum_returns}``).
SPECTRUM_RETURNS = """
Returns
-------
numpy.ndarray, shape (max_degree + 1,)
    The eigenvalues, degree by degree.
"""

#: The entry of the atoms' masses of a weighted measure's energy (``{masses}``).
MASSES = r"""
masses : numpy.ndarray, shape (..., n), optional
    The energy of :math:`\sum_j m_j\delta_{x_j}` (:math:`m_i m_j` in place of :math:`1/n^2`).
"""

#: The Returns section of an energy (``{energy_returns}``).
ENERGY_RETURNS = """
Returns
-------
numpy.ndarray, shape (...,)
    The energy per system.
"""

#: The Returns section of the velocity (``{velocity_returns}``).
VELOCITY_RETURNS = """
Returns
-------
numpy.ndarray, shape (..., n, d)
    The velocities, tangent to the sphere at each token.
"""

#: The Parameters section of the methods that read tokens (``{tokens_parameters}``).
TOKENS_PARAMETERS = """
Parameters
----------
x : numpy.ndarray, shape (..., n, d)
    Tokens on the unit sphere (any leading batch axes).
"""


@fill_docstrings(points_parameters=POINTS_PARAMETERS, field_returns=FIELD_RETURNS)
class TangentVelocity:
    """A model's velocity from its attention output: the tangent projection, extended off the sphere.

    A subclass defines ``_attention_at(points, nodes, masses)``: the output :math:`a(x)` at unit
    ``points`` of the measure of unit ``nodes`` with those masses, batched ``(batch, m, d)``;
    :meth:`velocity_field` projects it (the model's reference), and the particle velocity is it
    at the tokens' own empirical measure.
    """

    #: Tokens live on the unit sphere (layer normalization); :class:`meanfield.PureAttention` has ``False``.
    on_sphere = True

    def velocity_unchecked(self, x: np.ndarray) -> np.ndarray:
        """The velocity :math:`P_{x_i} a_i` without input checks, for integrators.

        Stage points of an integrator sit slightly off the sphere; the velocity is extended to
        them as ``v(x / |x|)``, which is orthogonal to ``x``, so ``|x|`` is conserved by the
        extended flow. (With ``P_x`` applied to the raw point instead, the sphere repels in the
        repulsive case and the norm drifts away.)

        {points_parameters}

        Returns
        -------
        numpy.ndarray, shape (..., n, d)
            The velocities, tangent at ``x / |x|``.
        """
        flat = normalize(_flatten_batch(x))
        return project_tangent(flat, self._attention(flat)).reshape(x.shape)

    def attention_output(self, x: np.ndarray) -> np.ndarray:
        """The attention layer's output :math:`a_i` before the tangent projection.

        {points_parameters}

        Returns
        -------
        numpy.ndarray, shape (..., n, d)
            :math:`a_i`, so that the velocity is :math:`P_{x_i} a_i`.
        """
        return self._attention(normalize(_flatten_batch(x))).reshape(x.shape)

    def velocity_field(self, x: np.ndarray, nodes: np.ndarray, weights: np.ndarray) -> np.ndarray:
        r"""The model's reference: the velocity :math:`v[\mu](x)` that :math:`\mu = \sum_j w_j\delta_{y_j}` induces at ``x``.

        Every discretisation of the mean-field equation runs the model through this method:
        the particle velocity is the field of the empirical measure at its own atoms
        (:math:`w_j = 1/n`), the weighted atoms of :class:`solvers.SphereSpectralParticles`
        carry their masses, and a PDE solver's general path (``interaction="reference"``)
        takes its quadrature of the density (nodes and weights :math:`w_j = \rho(y_j)\,|c_j|`)
        and evaluates the field where its fluxes need it. The faster paths of the solvers
        (FFT convolution, Funk-Hecke, head coefficients) are checked against it by
        :func:`solvers.check_pde_consistency`.

        Parameters
        ----------
        x : numpy.ndarray, shape (..., m, d)
            Nonzero points where the field is wanted, used through ``x / |x|``.
        nodes : numpy.ndarray, shape (..., k, d)
            Nonzero atoms :math:`y_j` of the measure, used through ``y / |y|`` (leading axes as ``x``'s).
        weights : numpy.ndarray, shape (..., k)
            Their real weights :math:`w_j`, of positive total: a probability measure sums to 1
            (the normalised models do not read the total), and a spectral solver's quadrature of
            its density may carry small negative weights where the density undershoots.

        {field_returns}

        Raises
        ------
        ValueError
            If an argument is not finite or of mismatched shape, or the weights' total is not positive.
        """
        points, atoms, masses = _measure_arguments(x, nodes, weights)
        flat_points, flat_atoms = _flatten_batch(points), _flatten_batch(atoms)
        flat_masses = masses.reshape(flat_atoms.shape[:-1])
        field_ = self._attention_at(flat_points, flat_atoms, flat_masses)
        return project_tangent(flat_points, field_).reshape(points.shape)

    def weighted_velocity(self, x: np.ndarray, masses: np.ndarray) -> np.ndarray:
        r"""The mean-field velocity :math:`v[\mu]` of the measure :math:`\mu = \sum_j m_j\delta_{x_j}` at its atoms.

        :meth:`velocity_field` at the atoms themselves (``velocity_field(x, x, masses)``). The
        particle velocity is the case :math:`m_j = 1/n`; with other masses it is the velocity
        field of the mean-field equation for a weighted measure, which the equation (without
        diffusion) transports atom by atom with the masses fixed: a sum of weighted Diracs is
        an exact solution (the weighted-particle continuation of
        :class:`solvers.SphereSpectralParticles`).

        Parameters
        ----------
        x : numpy.ndarray, shape (..., n, d)
            Nonzero points, used through ``x / |x|`` (as :meth:`velocity_unchecked`).
        masses : numpy.ndarray, shape (..., n)
            Nonnegative masses of the atoms (of total 1 for a probability measure).

        Returns
        -------
        numpy.ndarray, shape (..., n, d)
            The velocities, tangent at ``x / |x|``.
        """
        flat = normalize(_flatten_batch(x))
        masses = np.asarray(masses, dtype=float).reshape(flat.shape[:-1])
        return project_tangent(flat, self._attention(flat, masses)).reshape(x.shape)

    def _attention(self, flat: np.ndarray, masses: np.ndarray | None = None) -> np.ndarray:
        """The attention output at the atoms of the measure they make (``1/n`` each without ``masses``)."""
        return self._attention_at(flat, flat, masses)

    def _attention_at(self, points: np.ndarray, nodes: np.ndarray, masses: np.ndarray | None) -> np.ndarray:
        r"""The output :math:`a(x)` at unit ``points`` ``(b, m, d)`` of the measure of unit ``nodes`` ``(b, k, d)``.

        ``masses`` ``(b, k)``, or ``None`` for :math:`1/k` each; ``points is nodes`` for the
        particle system (a model may use it: the self term bounds the logits).
        """
        raise NotImplementedError(f"{type(self).__name__} has no velocity of a measure")


class NeutralMembers:
    """The protocol's neutral values of a one-head model without an external field or a rescaled time,
    whose velocity reads more than the tokens' inner products (a subclass overrides what differs)."""

    heads = 1
    is_zonal = False
    causal = False
    external = None
    time_rescaled = False


class WithoutEnergy:
    """The energy member of a model with no known interaction energy (``has_energy`` is False)."""

    has_energy = False

    def energy(self, x: np.ndarray) -> np.ndarray:
        """Not defined: no interaction energy is known for this model (``has_energy`` is False).

        Parameters
        ----------
        x : numpy.ndarray
            Ignored.

        Raises
        ------
        NotImplementedError
            Always.
        """
        raise NotImplementedError(f"{type(self).__name__} has no known interaction energy (has_energy is False)")


def _measure_arguments(x, nodes, weights) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``velocity_field``'s arguments checked and normalized: points, nodes and weights with common leading axes."""
    arrays = {}
    for name, value in (("x", x), ("nodes", nodes), ("weights", weights)):
        array = np.asarray(value, dtype=float)
        if not np.all(np.isfinite(array)):
            raise ValueError(f"{name} contains NaN or infinite entries")
        arrays[name] = array
    points, atoms, masses = arrays["x"], arrays["nodes"], arrays["weights"]
    if points.ndim < 2 or atoms.ndim < 2 or points.shape[-1] != atoms.shape[-1]:
        raise ValueError(f"x and nodes must be (..., m, d) and (..., k, d) with the same d, got shapes "
                         f"{points.shape} and {atoms.shape}")
    if masses.shape != atoms.shape[:-1]:
        raise ValueError(f"weights must have the shape {atoms.shape[:-1]} of nodes without its last axis, "
                         f"got {masses.shape}")
    if not np.all(masses.sum(axis=-1) > 0):
        raise ValueError(f"weights must have a positive total in every measure, got totals {masses.sum(axis=-1)}")
    lead = np.broadcast_shapes(points.shape[:-2], atoms.shape[:-2])
    points = np.broadcast_to(points, lead + points.shape[-2:])
    atoms = np.broadcast_to(atoms, lead + atoms.shape[-2:])
    masses = np.broadcast_to(masses, lead + masses.shape[-1:])
    if not (np.abs(points).max(axis=-1).all() and np.abs(atoms).max(axis=-1).all()):
        raise ValueError("x and nodes must be nonzero points (they are used through x / |x|)")
    return normalize(points), normalize(atoms), masses


def _carried(flat: np.ndarray, masses: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, float]:
    """The keys' points times their masses, the masses, and the divisor of the plain sum (``n`` without masses)."""
    if masses is None:
        return flat, np.ones(flat.shape[:-1] + (1,)), float(flat.shape[-2])
    return flat * masses[..., None], masses[..., None], 1.0


@fill_docstrings(tokens_parameters=TOKENS_PARAMETERS, velocity_returns=VELOCITY_RETURNS, masses=MASSES,
                 energy_returns=ENERGY_RETURNS, degree_and_dimension=DEGREE_AND_DIMENSION,
                 spectrum_returns=SPECTRUM_RETURNS)
@dataclass(frozen=True, eq=False)
class SelfAttention(TangentVelocity):
    r"""Self-attention dynamics on the sphere: softmax (SA) or unnormalized (USA).

    .. math::
        \text{SA:}\quad \dot x_i = P_{x_i}\Big(\sum_j
            \frac{e^{\beta\langle Q x_i, K x_j\rangle}}{\sum_l e^{\beta\langle Q x_i, K x_l\rangle}} V x_j\Big),
        \qquad
        \text{USA:}\quad \dot x_i = P_{x_i}\Big(\frac1n \sum_j e^{\beta\langle Q x_i, K x_j\rangle} V x_j\Big),

    summed over heads when ``query``/``key``/``value`` are stacks, plus noise
    :math:`\sqrt{2D}\,dB` on the sphere when ``diffusion > 0``.

    Parameters
    ----------
    beta : float
        Inverse temperature, ``>= 0``. ``beta = 0`` is the Kuramoto model (handled as a
        limit, never divided by).
    normalized : bool
        ``True`` for SA (softmax), ``False`` for USA.
    diffusion : float
        Diffusion coefficient ``D >= 0``.
    query, key : array_like, shape (k, d) or (heads, k, d), optional
        Query and key matrices; identity when omitted. ``k`` is the head dimension (usually
        ``d / heads``; only :math:`Q_h^T K_h` enters), the same for both; one given alone is square.
    value : float or array_like, shape (d, d) or (heads, d, d), optional
        Value matrix; a number ``c`` means ``c I``. ``value=-1`` is the repulsive case:
        velocities reversed, energy non-increasing, uniform state stable.
    time_rescaled : bool
        USA only: use the kernel :math:`e^{\beta(\langle x,y\rangle - 1)}`, i.e. measure time
        in units of :math:`e^{\beta}`. Needed for ``beta`` beyond ~700, where
        :math:`e^{\beta}` overflows.
    external : Perceptron, UserField or callable, optional
        A density-independent velocity added to the attention output (before the tangent
        projection): the perceptron block :math:`\sum_j w_j \mathrm{ReLU}(a_j\cdot x) a_j`, or
        any field (``meanfield.external``). The energy then includes
        :math:`\frac12\int v\,d\mu` (the flow of USA without noise ascends it).

    Attributes
    ----------
    logit_bound : float
        :math:`\max_h\|Q_h^T K_h\|_2`, the bound of the logits :math:`\langle Q_h x, K_h y\rangle`
        over unit vectors (1 without matrices): the model's bound, which sets the shifts that keep
        the exponentials finite and the kernel degree a solver must resolve.
    """

    beta: float
    normalized: bool = True
    diffusion: float = 0.0
    query: np.ndarray | None = None
    key: np.ndarray | None = None
    value: float | np.ndarray = 1.0
    time_rescaled: bool = False
    external: object = None
    logit_bound: float = field(init=False, repr=False)
    causal = False  # every token attends to every token

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "beta", check_real(self.beta, "beta", minimum=0.0))
        set_(self, "diffusion", check_real(self.diffusion, "diffusion", minimum=0.0))
        if not isinstance(self.normalized, (bool, np.bool_)):
            raise TypeError(f"normalized must be True (SA) or False (USA), got {self.normalized!r}")
        set_(self, "query", as_head_matrices(self.query, "query", square=False))
        set_(self, "key", as_head_matrices(self.key, "key", square=False))
        if np.ndim(self.value) == 0:
            set_(self, "value", check_real(self.value, "value"))
        else:
            set_(self, "value", as_head_matrices(self.value, "value"))
        shapes = {name: m.shape for name, m in
                  (("query", self.query), ("key", self.key), ("value", self.value))
                  if isinstance(m, np.ndarray)}
        if len({(shape[0], shape[-1]) for shape in shapes.values()}) > 1:
            raise ValueError(f"query, key and value must have the same heads and d (heads, ., d), got {shapes}")
        projections = {name: shapes[name] for name in ("query", "key") if name in shapes}
        rectangular_alone = len(projections) == 1 and any(shape[1] != shape[2] for shape in projections.values())
        if len(set(projections.values())) > 1 or rectangular_alone:
            raise ValueError(f"query and key must have the same shape (heads, k, d), or one alone be square (the "
                             f"other the identity), got {projections}")
        set_(self, "external", as_external(self.external))
        matrix_dimension = next((m.shape[-1] for m in (self.query, self.key, self.value) if isinstance(m, np.ndarray)),
                                None)
        field_dimension = None if self.external is None else self.external.dimension
        if None not in (matrix_dimension, field_dimension) and matrix_dimension != field_dimension:
            raise ValueError(f"the external field lives in R^{field_dimension} but the matrices are "
                             f"{matrix_dimension} x {matrix_dimension}")
        if self.time_rescaled and self.normalized:
            raise ValueError("time_rescaled applies to USA (normalized=False) only: SA is "
                             "already invariant under rescaling the kernel")
        set_(self, "logit_bound", self._logit_bound())
        if not self.normalized and not self.time_rescaled and self.beta * self.logit_bound > EXP_OVERFLOW:
            raise ValueError(
                f"USA with beta={self.beta}: the kernel exp(beta <Qx, Ky>) reaches "
                f"exp({self.beta * self.logit_bound:.4g}), which overflows double precision. "
                "Pass time_rescaled=True to use exp(beta (<Qx, Ky> - 1)) (time in units of exp(beta)).")

    # ------------------------------------------------------------------ structure
    @property
    def heads(self) -> int:
        for m in (self.query, self.key, self.value):
            if isinstance(m, np.ndarray):
                return m.shape[0]
        return 1

    @property
    def dimension(self) -> int | None:
        """Ambient dimension fixed by the matrices, or ``None`` (any ``d``)."""
        for m in (self.query, self.key, self.value):
            if isinstance(m, np.ndarray):
                return m.shape[-1]
        return None if self.external is None else self.external.dimension

    @property
    def is_zonal(self) -> bool:
        r"""Whether the velocity depends on :math:`\langle x, y\rangle` only (identity Q, K; V = cI; one head)."""
        return self.query is None and self.key is None and np.ndim(self.value) == 0

    @property
    def velocity_is_linear(self) -> bool:
        r"""Whether :math:`v[\rho] = \nabla_S(\Phi * \rho)` is linear in :math:`\rho`: USA, and SA at ``beta = 0``.

        These are gradient flows of the energy (of the free energy with diffusion); SA at
        ``beta > 0`` has :math:`v = \frac{c}{\beta}\nabla_S\log(K*\rho)` and no such functional once ``D > 0``.
        """
        return not (self.normalized and self.beta > 0)

    @property
    def has_energy(self) -> bool:
        """Whether :meth:`energy` is defined: always, unless an external field comes without a potential."""
        return self.external is None or self.external.has_potential

    @property
    def value_scale(self) -> float:
        """The scalar ``c`` of ``V = c I`` for a zonal model (``-1`` for the repulsive case)."""
        if not self.is_zonal:
            raise NotImplementedError("value_scale is defined for zonal models (V = c I) only")
        return float(self.value)

    def _logit_bound(self) -> float:
        r"""Upper bound of :math:`\langle Q x, K y\rangle` over unit vectors: :math:`\|Q^T K\|_2`."""
        if self.query is None and self.key is None:
            return 1.0
        d = self.dimension
        q = self.query if self.query is not None else np.broadcast_to(np.eye(d), (self.heads, d, d))
        k = self.key if self.key is not None else np.broadcast_to(np.eye(d), (self.heads, d, d))
        return float(max(np.linalg.norm(qh.T @ kh, 2) for qh, kh in zip(q, k)))

    @property
    def value_bound(self) -> float:
        r""":math:`\sum_h\|V_h\|_2`: SA's velocity is at most this (softmax averages of unit vectors), USA's
        this times the kernel's largest value."""
        return float(sum(abs(v) if np.ndim(v) == 0 else np.linalg.norm(v, 2) for _, _, v in self.head_matrices()))

    def head_matrices(self):
        """Yield ``(Q, K, V)`` per head, ``None`` standing for the identity (what engines and solvers read)."""
        for h in range(self.heads):
            q = None if self.query is None else self.query[h]
            k = None if self.key is None else self.key[h]
            v = self.value if np.ndim(self.value) == 0 else self.value[h]
            yield q, k, v

    def _check_dimension(self, x: np.ndarray) -> None:
        d = self.dimension
        if d is not None and x.shape[-1] != d:
            raise ValueError(f"x has points in R^{x.shape[-1]} but the model's matrices are {d} x {d}")

    # ------------------------------------------------------------------ velocity
    def velocity(self, x: np.ndarray) -> np.ndarray:
        r"""The velocity field :math:`\dot x_i` of the particle system at the tokens ``x``.

        {tokens_parameters}

        {velocity_returns}

        Raises
        ------
        ValueError
            If ``x`` is not finite, not of unit norm along its last axis, or of a dimension the
            model's matrices do not have.
        """
        x = check_points(x, "x")
        self._check_dimension(x)
        return self.velocity_unchecked(x)

    def _attention_at(self, points: np.ndarray, nodes: np.ndarray, masses: np.ndarray | None) -> np.ndarray:
        r"""The output at unit ``points`` ``(batch, m, d)`` of the measure of unit ``nodes`` ``(batch, k, d)``.

        .. math:: a(x) = \sum_h V_h \sum_j w^h_j(x)\, y_j,

        with the softmax weights :math:`m_j e^{\beta\langle Q_h x, K_h y_j\rangle} / \sum_l m_l
        e^{\beta\langle Q_h x, K_h y_l\rangle}` (SA) or :math:`m_j e^{\beta\langle Q_h x, K_h y_j\rangle}`
        (USA), :math:`m_j = 1/k` without ``masses``; the paper's discrete layer is
        :math:`x \leftarrow (x + h a) / |x + h a|` at ``points is nodes``.
        """
        total = np.zeros_like(points)
        for q, k, v in self.head_matrices():
            drive = self._head_drive(points, nodes, q, k, masses)
            total += v * drive if np.ndim(v) == 0 else drive @ v.T
        if self.external is not None:
            total += self.external.field(points)
        return total

    def _head_drive(self, x: np.ndarray, nodes: np.ndarray, q: np.ndarray | None, k: np.ndarray | None,
                    masses: np.ndarray | None = None) -> np.ndarray:
        """Attention-weighted average (SA) or mean (USA) of the nodes (weighted by ``masses``) seen from ``x``, before V."""
        d = x.shape[-1]
        carried, weights, divisor = _carried(nodes, masses)
        if self.beta == 0.0:
            mean = carried.sum(axis=-2, keepdims=True) / weights.sum(axis=-2, keepdims=True)
            return np.broadcast_to(mean, x.shape)
        beta = self.beta
        queries = x if q is None else x @ q.T
        keys = nodes if k is None else nodes @ k.T
        if self.normalized:
            # With Q = K = I and the points the nodes, the largest logit of row i is the self
            # term beta |x_i|^2 = beta; elsewhere the largest weighted logit, with the masses'
            # logarithms inside (a point far from every weighted node would underflow otherwise).
            self_bounded = q is None and k is None and x is nodes
            offsets = None
            if not self_bounded and masses is not None:
                # a signed measure (a spectral density's undershoots) keeps its signs in the sums
                with np.errstate(divide="ignore"):
                    offsets = np.log(np.abs(masses)) / beta
                signs = np.sign(masses)[..., None]
                carried, weights = nodes * signs, signs

            def softmax_weight(block: np.ndarray) -> None:
                block *= beta
                block -= beta if self_bounded else block.max(axis=-1, keepdims=True)
                np.exp(block, out=block)

            values = np.concatenate([carried, weights], axis=-1)
            sums, _ = pair_sums(queries, keys, values, softmax_weight, key_offsets=offsets)
            return sums[..., :d] / sums[..., d:]
        shift = beta * self.logit_bound if self.time_rescaled else 0.0

        def kernel_weight(block: np.ndarray) -> None:
            block *= beta
            if shift:
                block -= shift
            np.exp(block, out=block)

        sums, _ = pair_sums(queries, keys, carried, kernel_weight)
        return sums / divisor

    # ------------------------------------------------------------------ energy
    def log_energy(self, x: np.ndarray, *, log_pair_sum: Callable[[np.ndarray], np.ndarray] | None = None,
                   masses: np.ndarray | None = None) -> np.ndarray:
        r"""Natural logarithm of :meth:`energy`, finite for any ``beta > 0`` (shape ``(...,)``).

        {tokens_parameters}
        log_pair_sum : callable, optional
            Computes :math:`\log\sum_{i,j} e^{\beta\langle x_i, x_j\rangle}` of the
            ``(systems, n, d)`` tokens in place of the direct pair sum (an engine's faster sum:
            ``meanfield.engines.energy_pair_sum``; zonal models only).
        masses : numpy.ndarray, shape (..., n), optional
            As for :meth:`energy`.

        Returns
        -------
        numpy.ndarray, shape (...,)
            :math:`\log E` per system.

        Raises
        ------
        ValueError
            At ``beta = 0`` (where :math:`E` may vanish), with an external field, or with
            ``log_pair_sum`` on a non-zonal model.
        """
        if self.external is not None:
            raise ValueError("log_energy has no external-field term (E + (1/2) int v can be negative); use energy(x)")
        return self._log_attention_energy(x, log_pair_sum, masses)

    def _log_attention_energy(self, x: np.ndarray, log_pair_sum=None, masses: np.ndarray | None = None) -> np.ndarray:
        x = check_points(x, "x")
        self._check_dimension(x)
        if self.beta == 0.0:
            raise ValueError("log_energy is undefined at beta=0 (the energy there is |m|^2/2, possibly 0); "
                             "use energy")
        flat = _flatten_batch(x)
        n = flat.shape[-2]
        beta = self.beta
        if masses is not None:  # sum_ij m_i m_j e^{...}: the keys carry m_j, the rows log m_i, no 1/n^2
            masses = np.asarray(masses, dtype=float).reshape(flat.shape[:-1])
            with np.errstate(divide="ignore"):
                row_log_masses, n = np.log(masses), 1.0
        if log_pair_sum is not None:
            if masses is not None:
                raise ValueError("log_pair_sum sums equal masses only")
            if not self.is_zonal:
                raise ValueError("log_pair_sum sums the zonal kernel e^{beta <x_i, x_j>}: the model has matrices or heads")
            log_total = log_pair_sum(flat) - np.log(2.0 * beta * n * n)
            if self.time_rescaled:
                log_total = log_total - beta * self.logit_bound
            return log_total.reshape(x.shape[:-2])
        per_head = []
        for q, k, _ in self.head_matrices():
            def stable_exp(block: np.ndarray) -> np.ndarray:
                block *= beta
                row_max = block.max(axis=-1, keepdims=True)
                block -= row_max
                np.exp(block, out=block)
                return row_max

            queries = flat if q is None else flat @ q.T
            keys = flat if k is None else flat @ k.T
            key_masses = np.ones(flat.shape[:-1] + (1,)) if masses is None else masses[..., None]
            sums, shifts = pair_sums(queries, keys, key_masses, stable_exp)
            with np.errstate(divide="ignore"):  # atoms of zero mass add nothing (log 0 = -inf)
                row_terms = np.log(sums[..., 0]) + shifts[..., 0]
            if masses is not None:
                row_terms = row_terms + row_log_masses
            per_head.append(logsumexp(row_terms, axis=-1))
        log_total = logsumexp(np.stack(per_head), axis=0) - np.log(2.0 * beta * n * n)
        if self.time_rescaled:
            log_total = log_total - beta * self.logit_bound
        return log_total.reshape(x.shape[:-2])

    def energy(self, x: np.ndarray, *, log_pair_sum: Callable[[np.ndarray], np.ndarray] | None = None,
               masses: np.ndarray | None = None) -> np.ndarray:
        r"""Interaction energy of the empirical measure, shape ``(...,)``.

        .. math:: E = \frac{1}{2\beta n^2} \sum_h \sum_{i,j} e^{\beta \langle Q_h x_i, K_h x_j\rangle}

        (times :math:`e^{-\beta\|Q^TK\|}` when ``time_rescaled``). At ``beta = 0`` it is the
        limit of :math:`E - 1/(2\beta)` per head, :math:`\tfrac12 m^T Q^T K m` with
        :math:`m = \frac1n\sum_i x_i`. Attractive (``V = I``) SA and USA runs without
        diffusion make it non-decreasing; the repulsive one (``V = -I``) non-increasing.
        Raises :class:`OverflowError` where the value exceeds double precision
        (SA at ``beta`` beyond ~700): use :meth:`log_energy` there. With an external field
        with a potential :math:`\Phi`, :math:`\frac1n\sum_i \Phi(x_i)` is added.

        {tokens_parameters}
        log_pair_sum : callable, optional
            As for :meth:`log_energy`.
        {masses}

        {energy_returns}

        Raises
        ------
        OverflowError
            If the energy exceeds double precision.
        ValueError
            If the external field has no potential.
        """
        x = check_points(x, "x")
        external = potential_energy(self.external, x, masses)
        if external is None:
            raise ValueError("the external field has no potential: the energy E + (1/2) int v is undefined")
        if self.beta == 0.0:  # per head (1/2) m^T Q^T K m, the limit of E - 1/(2 beta)
            mean = x.mean(axis=-2) if masses is None else np.einsum("...n,...nd->...d", masses, x)
            total = np.zeros(mean.shape[:-1])
            for q, k, _ in self.head_matrices():
                queries = mean if q is None else mean @ q.T
                keys = mean if k is None else mean @ k.T
                total += 0.5 * np.sum(queries * keys, axis=-1)
            return total + external
        log_e = self._log_attention_energy(x, log_pair_sum, masses)
        if np.max(log_e) > EXP_OVERFLOW:
            raise OverflowError(f"the energy at beta={self.beta} exceeds double precision "
                                f"(log E = {np.max(log_e):.6g}); use log_energy(x)")
        return np.exp(log_e) + external

    # ------------------------------------------------------------------ spectra
    def kernel_spectrum(self, max_degree: int, d: int, *, uniform_measure: bool = False) -> np.ndarray:
        r"""Eigenvalues of :math:`\rho \mapsto K * \rho` on degrees ``0..max_degree`` of :math:`S^{d-1}`.

        The kernel is the one this model uses: :math:`e^{\beta\langle x,y\rangle}` for USA,
        :math:`e^{\beta(\langle x,y\rangle-1)}` for SA (scale-invariant, so the scaled,
        overflow-free values are used) and for time-rescaled USA.

        Parameters
        ----------
        {degree_and_dimension}

        {spectrum_returns}

        Raises
        ------
        NotImplementedError
            For general matrices or several heads (the kernel is not zonal).
        """
        self._require_zonal()
        return attention_spectrum(self.beta, max_degree, d, scaled=self.normalized or self.time_rescaled,
                                  uniform_measure=uniform_measure)

    def potential_spectrum(self, max_degree: int, d: int, *, uniform_measure: bool = False) -> np.ndarray:
        r"""Spectrum of :math:`\Phi` with :math:`v = \nabla_S (\Phi * \rho)`, for velocities linear in :math:`\rho`.

        USA: :math:`\Phi = c\, e^{\beta s} / \beta` (``c`` the value scalar); at ``beta = 0``
        (SA or USA, the Kuramoto model) :math:`\Phi = c\, s`. SA at ``beta > 0`` is not linear
        in :math:`\rho` (:math:`v = \frac{c}{\beta}\nabla_S \log K*\rho`): use :meth:`kernel_spectrum`.
        Degree 0 carries no gradient and may be returned as 0.

        Parameters
        ----------
        {degree_and_dimension}

        Returns
        -------
        numpy.ndarray, shape (max_degree + 1,)
            The eigenvalues of :math:`\rho \mapsto \Phi * \rho`, degree by degree.

        Raises
        ------
        ValueError
            For SA with ``beta > 0`` (velocity nonlinear in :math:`\rho`).
        NotImplementedError
            For general matrices or several heads.
        """
        self._require_zonal()
        if not self.velocity_is_linear:
            raise ValueError("SA with beta > 0 has a velocity nonlinear in rho; use kernel_spectrum")
        return self.value_scale * attention_spectrum_over_beta(self.beta, max_degree, d, scaled=self.time_rescaled,
                                                               uniform_measure=uniform_measure)

    def energy_spectrum(self, max_degree: int, d: int, *, scaled: bool = False,
                        uniform_measure: bool = False) -> np.ndarray:
        r"""Spectrum of :math:`\Psi` with :math:`E[\rho] = \tfrac12 \int \rho\, (\Psi * \rho)`: :math:`\lambda_l/\beta`.

        With ``scaled`` (or ``time_rescaled``) the values carry the factor :math:`e^{-\beta}`.
        At ``beta = 0`` degree 0 is dropped, matching :meth:`energy`'s convention there.

        Parameters
        ----------
        {degree_and_dimension}
        scaled : bool
            Multiply by :math:`e^{-\beta}` (finite for any ``beta``).

        {spectrum_returns}

        Raises
        ------
        NotImplementedError
            For general matrices or several heads.
        """
        self._require_zonal()
        return attention_spectrum_over_beta(self.beta, max_degree, d, scaled=scaled or self.time_rescaled,
                                            uniform_measure=uniform_measure)

    def _require_zonal(self) -> None:
        if not self.is_zonal:
            raise NotImplementedError(
                "general query/key/value matrices or several heads make the kernel non-zonal; "
                "harmonic spectra exist only for Q = K = I, V = cI and one head")

    def to_dict(self) -> dict:
        """A JSON-serializable description of the model.

        Returns
        -------
        dict
            Plain values (matrices as nested lists); :func:`model_from_dict` rebuilds the model.
        """
        def plain(m):
            return m.tolist() if isinstance(m, np.ndarray) else m
        return {"model": "SelfAttention", "beta": self.beta, "normalized": bool(self.normalized),
                "diffusion": self.diffusion, "query": plain(self.query), "key": plain(self.key),
                "value": plain(self.value), "time_rescaled": bool(self.time_rescaled),
                "external": None if self.external is None else self.external.to_dict()}


@fill_docstrings(tokens_parameters=TOKENS_PARAMETERS, velocity_returns=VELOCITY_RETURNS, masses=MASSES,
                 energy_returns=ENERGY_RETURNS, degree_and_dimension_parameters=DEGREE_AND_DIMENSION_PARAMETERS)
@dataclass(frozen=True, eq=False)
class ZonalAggregation(TangentVelocity):
    r"""Aggregation with a zonal potential :math:`W(\langle x, y\rangle)`.

    .. math:: \dot x_i = \nabla_S \Big(\frac1n\sum_j W(\langle x, x_j\rangle)\Big)\Big|_{x=x_i}
              = P_{x_i}\Big(\frac1n \sum_j W'(\langle x_i, x_j\rangle)\, x_j\Big)

    An increasing ``W`` attracts, a decreasing one repels; ``W(s) = e^{\beta s}/\beta`` is USA.
    The energy :math:`E = \frac{1}{2n^2}\sum_{i,j} W(\langle x_i, x_j\rangle)` is
    non-decreasing along the flow without diffusion.

    Parameters
    ----------
    potential : callable
        Vectorized :math:`W(s)`, ``s`` in ``[-1, 1]``.
    derivative : callable
        Vectorized :math:`W'(s)` (needed by the particle velocity; the PDE solvers use the
        Funk-Hecke spectrum of ``potential``).
    diffusion : float
        Diffusion coefficient ``D >= 0``.
    name : str
        A label kept in dataset attributes (callables cannot be serialized).
    """

    potential: Callable[[np.ndarray], np.ndarray]
    derivative: Callable[[np.ndarray], np.ndarray]
    diffusion: float = 0.0
    name: str = "W"

    def __post_init__(self) -> None:
        for arg, value in (("potential", self.potential), ("derivative", self.derivative)):
            if not callable(value):
                raise TypeError(f"{arg} must be a callable of s = <x, y>, got {value!r}")
        object.__setattr__(self, "diffusion", check_real(self.diffusion, "diffusion", minimum=0.0))

    # The neutral values of the model protocol (meanfield.protocols.Model).
    is_zonal = True
    heads = 1
    dimension = None
    causal = False
    external = None
    time_rescaled = False
    logit_bound = 1.0
    has_energy = True
    #: :math:`v = \nabla_S(W * \rho)`: always linear in :math:`\rho`.
    velocity_is_linear = True

    def velocity(self, x: np.ndarray) -> np.ndarray:
        r"""The velocity field :math:`\dot x_i = P_{x_i} a_i` at the tokens ``x``.

        {tokens_parameters}

        {velocity_returns}

        Raises
        ------
        ValueError
            If ``x`` is not finite or not of unit norm along its last axis.
        """
        return self.velocity_unchecked(check_points(x, "x"))

    def _attention_at(self, points: np.ndarray, nodes: np.ndarray, masses: np.ndarray | None) -> np.ndarray:
        r""":math:`a(x) = \sum_j m_j W'(\langle x, y_j\rangle)\, y_j` at unit ``points`` ``(batch, m, d)`` of the nodes' measure (:math:`m_j = 1/k` without ``masses``)."""
        derivative = self.derivative
        carried, _, divisor = _carried(nodes, masses)

        def weight(block: np.ndarray) -> None:
            block[...] = derivative(block)

        sums, _ = pair_sums(points, nodes, carried, weight)
        return sums / divisor

    def energy(self, x: np.ndarray, *, masses: np.ndarray | None = None) -> np.ndarray:
        r"""Interaction energy :math:`E = \frac{1}{2n^2}\sum_{i,j} W(\langle x_i, x_j\rangle)`.

        {tokens_parameters}
        {masses}

        {energy_returns}
        """
        flat = _flatten_batch(check_points(x, "x"))
        potential = self.potential

        def weight(block: np.ndarray) -> None:
            block[...] = potential(block)

        if masses is None:
            sums, _ = pair_sums(flat, flat, np.ones(flat.shape[:-1] + (1,)), weight)
            n = flat.shape[-2]
            return (sums.sum(axis=(-2, -1)) / (2.0 * n * n)).reshape(x.shape[:-2])
        masses = np.asarray(masses, dtype=float).reshape(flat.shape[:-1])
        sums, _ = pair_sums(flat, flat, masses[..., None], weight)
        return (0.5 * np.einsum("bn,bn->b", masses, sums[..., 0])).reshape(x.shape[:-2])

    def potential_spectrum(self, max_degree: int, d: int, *, uniform_measure: bool = False) -> np.ndarray:
        r"""Funk-Hecke eigenvalues of :math:`W` on degrees ``0..max_degree`` of :math:`S^{d-1}`.

        {degree_and_dimension_parameters}

        Returns
        -------
        numpy.ndarray, shape (max_degree + 1,)
            See :func:`meanfield.funk_hecke_spectrum`.
        """
        return funk_hecke_spectrum(self.potential, max_degree, d, uniform_measure=uniform_measure)

    def energy_spectrum(self, max_degree: int, d: int, *, scaled: bool = False,
                        uniform_measure: bool = False) -> np.ndarray:
        r"""Funk-Hecke spectrum of :math:`W` (:math:`E = \tfrac12\int\rho\,(W*\rho)`).

        {degree_and_dimension_parameters}
        scaled : bool
            Ignored (the potential has no exponential scale); accepted for the shared interface.

        Returns
        -------
        numpy.ndarray, shape (max_degree + 1,)
            The same values as :meth:`potential_spectrum`.
        """
        return self.potential_spectrum(max_degree, d, uniform_measure=uniform_measure)

    def to_dict(self) -> dict:
        """A JSON-serializable description of the model.

        Returns
        -------
        dict
            The potential's registered name and the diffusion; :func:`model_from_dict` rebuilds
            the model.
        """
        return {"model": "ZonalAggregation", "name": self.name, "diffusion": self.diffusion}
