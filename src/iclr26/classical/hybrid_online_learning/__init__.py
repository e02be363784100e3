"""Oracle-efficient hybrid online learning with a constrained adversary (arXiv:2603.04546)."""
from .learner import FollowTheLeader, HybridOnlineLearner, Threshold, threshold_erm

__all__ = ["HybridOnlineLearner", "FollowTheLeader", "Threshold", "threshold_erm"]
