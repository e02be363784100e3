"""Logit truncation and margin rebalancing in high-dimensional imbalanced classification (arXiv:2502.11323)."""
from .estimator import MarginRebalancedSVC, NotSeparableWarning
from .theory import (ImbalanceAsymptotics, imbalance_asymptotics, optimal_tau, sample_training_logits,
                     truncated_logit_cdf)

__all__ = ["MarginRebalancedSVC", "NotSeparableWarning", "ImbalanceAsymptotics", "imbalance_asymptotics", "optimal_tau",
           "sample_training_logits", "truncated_logit_cdf"]
