"""validation: what compares and reports: distances, exact references, mean-field convergence, clusters.

The application built on it (TOML experiments, sweeps, the ``meanfield`` command, reports)
is the subpackage :mod:`validation.app`; validation proper never imports it.
"""

__all__ = ["distance", "mean_field_convergence", "StudySettings", "PDEErrorWarning", "growth_rate",
           "orthogonal_token_inner_product", "orthogonal_token_clustering_time", "consensus_rate", "wendel_probability",
           "circle_stationary_density", "cluster_statistics", "order_parameter", "ClusterSummary", "kde_mode_count",
           "merge_times", "Merge", "circle_cluster_counts", "settling_time", "mixture_retrieval_profile",
           "recency_time", "order_parameters", "mean_phase_velocities", "locked_oscillators", "compare_dynamics",
           "value_spectra", "good_triple_fraction", "is_good_triple", "gram_limit_gap", "sample_zonal", "pair_correlation", "closure_deviation",
           "predicted_cluster_count", "predicted_cluster_positions", "asymptotic_merge_time", "merge_time_fit",
           "MergeTimeFit", "rescaled_time", "plateaus", "Plateau", "plateau_saddles"]


def __getattr__(name: str):
    # Loaded on first use (a sweep's worker needs none of them).
    if name in ("ClusterSummary", "cluster_statistics", "order_parameter", "merge_times", "Merge",
                "circle_cluster_counts", "settling_time"):
        from . import clusters as module
    elif name in ("PDEErrorWarning", "StudySettings", "mean_field_convergence"):
        from . import convergence as module
    elif name in ("mixture_retrieval_profile", "recency_time"):
        from . import causal_heads as module
    elif name in ("order_parameters", "mean_phase_velocities", "locked_oscillators"):
        from . import oscillators as module
    elif name in ("compare_dynamics", "value_spectra", "good_triple_fraction", "is_good_triple"):
        from . import real_models as module
    elif name in ("pair_correlation", "closure_deviation"):
        from . import bbgky as module
    elif name in ("gram_limit_gap", "sample_zonal"):
        from . import high_dimension as module
    elif name in ("predicted_cluster_count", "predicted_cluster_positions", "asymptotic_merge_time", "merge_time_fit",
                  "MergeTimeFit", "rescaled_time", "plateaus", "Plateau", "plateau_saddles"):
        from . import metastability as module
    elif name == "kde_mode_count":
        from . import modes as module
    elif name == "distance":
        from . import distances as module
    elif name in ("circle_stationary_density", "growth_rate", "orthogonal_token_clustering_time", "consensus_rate",
                  "orthogonal_token_inner_product", "wendel_probability"):
        from . import references as module
    else:
        raise AttributeError(f"module 'validation' has no attribute {name!r}")
    return getattr(module, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
