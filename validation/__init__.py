"""validation: exact references, distances between measures, mean-field convergence."""

from .references import growth_rate, orthogonal_token_inner_product, wendel_probability

__all__ = ["growth_rate", "orthogonal_token_inner_product", "wendel_probability"]
