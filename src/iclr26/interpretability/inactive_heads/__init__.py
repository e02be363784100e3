"""Inactive attention heads (arXiv:2504.03889): head-inactivity scores and per-input head zeroing."""
from .scores import (BASE_SCORES, RULES, SCORES, head_scores, inactive_mask, layer_normalize, random_mask,
                     threshold, zero_heads_per_input)

__all__ = ["BASE_SCORES", "RULES", "SCORES", "head_scores", "inactive_mask", "layer_normalize", "random_mask",
           "threshold", "zero_heads_per_input"]
