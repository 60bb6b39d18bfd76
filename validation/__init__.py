"""validation: what compares and reports: distances, exact references, mean-field convergence, clusters.

The application built on it (TOML experiments, sweeps, the ``meanfield`` command, reports)
is the subpackage :mod:`validation.app`; validation proper never imports it.
"""

from .clusters import ClusterSummary, cluster_statistics, order_parameter
from .convergence import PDEErrorWarning, StudySettings, mean_field_convergence
from .distances import distance
from .references import (circle_stationary_density, growth_rate, orthogonal_token_clustering_time,
                         orthogonal_token_inner_product, wendel_probability)

__all__ = ["distance", "mean_field_convergence", "StudySettings", "PDEErrorWarning", "growth_rate",
           "orthogonal_token_inner_product", "orthogonal_token_clustering_time", "wendel_probability",
           "circle_stationary_density", "cluster_statistics", "order_parameter", "ClusterSummary"]


def __getattr__(name: str):
    from validation._moved import moved_name

    return moved_name(name)
    raise AttributeError(f"module 'validation' has no attribute {name!r}")
