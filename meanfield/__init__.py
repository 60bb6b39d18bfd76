"""meanfield: the self-attention model on the sphere and its particle system.

The equations are in the documentation's theory pages (docs/theory/). Public names::

    SelfAttention, ZonalAggregation      models (velocity, velocity_field, energy, spectra)
    FieldModel                           the base of a model given by its velocity_field alone
    SinkhornAttention                    doubly stochastic attention (Sinkformers), on that base
    CausalAttention                      causal (decoder) attention with ALiBi weights
    RotaryAttention, rope_frequencies    attention with the rotary positional encoding (RoPE)
    GraphAttention, erdos_renyi, ring, small_world, graphon_graph, draw_graph, is_connected
                                         attention and Kuramoto on a graph (pair weights)
    NaturalFrequencies                   tokens turning at their own frequencies (Kuramoto), with
    sample_frequencies,                  draws from a Lorentzian or Gaussian law,
    lorentzian_nodes, gaussian_nodes,    quadratures of the frequency law and the Ott-Antonsen
    ott_antonsen_radius, ott_antonsen_populations,     references, the incoherent state's
    incoherent_growth_rate                              linear stability
    PureAttention                        self-attention in R^d without layer normalization, hardmax
    Perceptron, QuadraticField, UserField  external velocity fields added to attention
    simulate_particles                   the particle system (ODE / SDE, batched)
    RandomAttention, GaussianWeights, MatrixWeights, SampledWeights, simulate_random_layers,
    observe_random_layers                weights resampled per layer and head (initialisation), or
                                         drawn once per system (random-matrix phase diagrams)
    HomogenizedLimit, simulate_homogenized
                                         its limit: an SDE with noise common to all tokens
    mean_inner_product, diameter, span_dimension
                                         representation-collapse observables
    observe_particles                    the same, keeping only observations (large ensembles)
    simulate_clusters, ReductionRefused  tokens or weighted atoms with tight clusters reduced to one
                                         atom: metastable runs to any time (merges recorded)
    sample_uniform, sample_circle, sample_sphere, sample_interval, sample_von_mises_fisher
    sinusoidal_encoding                  Vaswani et al.'s positional encoding (of the initial tokens)
    attention_spectrum, attention_spectrum_over_beta, funk_hecke_spectrum
"""

from .causal import CausalAttention, positional_cell_weights
from .errors import ModelFailure, NonFiniteState, ReductionRefused, StepSizeCollapse
from .euclidean import PureAttention
from .external import Perceptron, QuadraticField, UserField
from .field_model import FieldModel
from .graphs import GraphAttention, draw_graph, erdos_renyi, graphon_graph, is_connected, ring, small_world
from .frequencies import (NaturalFrequencies, gaussian_nodes, incoherent_growth_rate, lorentzian_nodes,
                          ott_antonsen_populations, ott_antonsen_radius, sample_frequencies)
from .homogenized import HomogenizedLimit, simulate_homogenized
from .random_weights import (GaussianWeights, MatrixWeights, RandomAttention, SampledWeights, diameter,
                             mean_inner_product, observe_random_layers, simulate_random_layers, span_dimension)
from .descriptions import model_from_dict
from .models import SelfAttention, ZonalAggregation
from .particles import observe_particles, simulate_particles
from .reduction import simulate_clusters
from .rotary import RotaryAttention, rope_frequencies
from .sinkhorn import SinkhornAttention
from .sampling import (in_common_hemisphere, sample_circle, sample_interval, sample_sphere, sample_uniform,
                       sample_von_mises_fisher, sinusoidal_encoding)
from .spectra import attention_spectrum, attention_spectrum_over_beta, funk_hecke_spectrum, zonal_polynomial
from .sphere import circle_angles, circle_points, project_tangent, sphere_area, sphere_points

__all__ = [
    "SelfAttention", "ZonalAggregation", "FieldModel", "SinkhornAttention", "CausalAttention", "RotaryAttention", "rope_frequencies", "NaturalFrequencies", "sample_frequencies", "lorentzian_nodes", "gaussian_nodes",
    "GraphAttention", "erdos_renyi", "ring", "small_world", "graphon_graph", "draw_graph", "is_connected",
    "ott_antonsen_radius", "ott_antonsen_populations", "incoherent_growth_rate", "PureAttention", "positional_cell_weights", "model_from_dict", "simulate_particles", "observe_particles",
    "simulate_clusters", "ReductionRefused", "StepSizeCollapse", "NonFiniteState", "ModelFailure", "Perceptron", "QuadraticField", "UserField",
    "RandomAttention", "GaussianWeights", "MatrixWeights", "SampledWeights", "simulate_random_layers",
    "observe_random_layers", "HomogenizedLimit", "simulate_homogenized", "mean_inner_product", "diameter",
    "span_dimension",
    "sample_uniform", "sample_circle", "sample_sphere", "sample_interval", "sample_von_mises_fisher", "in_common_hemisphere", "sinusoidal_encoding",
    "attention_spectrum", "attention_spectrum_over_beta", "funk_hecke_spectrum", "zonal_polynomial",
    "sphere_area", "project_tangent", "circle_points", "circle_angles", "sphere_points",
]
