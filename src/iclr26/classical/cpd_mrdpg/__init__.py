"""Change-point localisation and inference in dynamic multilayer RDPGs (arXiv:2506.21878)."""
from .changepoint import MRDPGChangePoint, cusum_split, hetero_pca, limiting_quantiles, seeded_intervals, th_pca
from .simulate import simulate_dmrdpg

__all__ = ["MRDPGChangePoint", "cusum_split", "hetero_pca", "limiting_quantiles", "seeded_intervals", "th_pca",
           "simulate_dmrdpg"]
