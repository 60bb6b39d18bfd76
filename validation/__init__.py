"""validation: exact references, distances between measures, mean-field convergence, sweeps, the CLI."""

from .clusters import ClusterSummary, cluster_statistics, order_parameter
from .convergence import StudySettings, mean_field_convergence
from .distances import distance
from .experiment import run_experiment
from .references import (circle_stationary_density, growth_rate, orthogonal_token_clustering_time,
                         orthogonal_token_inner_product, wendel_probability)
from .sweep import run_sweep

__all__ = ["distance", "mean_field_convergence", "StudySettings", "growth_rate",
           "orthogonal_token_inner_product", "orthogonal_token_clustering_time", "wendel_probability",
           "circle_stationary_density", "cluster_statistics", "order_parameter", "ClusterSummary",
           "run_experiment", "run_sweep"]
