"""Bayesian Attention Mechanism (arXiv 2505.22842): the generalised-Gaussian positional prior."""
from .prior import GGDPositionalBias, GGDPriorConfig

__all__ = ["GGDPositionalBias", "GGDPriorConfig"]
