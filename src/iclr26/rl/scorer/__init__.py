"""SCORER: Stackelberg coupling of representation learning and Q-learning (arXiv:2508.07452)."""
from .agent import FOLLOWER_LOSSES, ScorerDQN, bellman_error_variance, msbe

__all__ = ["ScorerDQN", "bellman_error_variance", "msbe", "FOLLOWER_LOSSES"]
