"""Oracle-efficient hybrid online learning with a constrained adversary (arXiv:2603.04546)."""
from .baselines import CoverExponentialWeights, ExactThresholdFTRL
from .learner import FollowTheLeader, HybridOnlineLearner, SampleLedger
from .oracles import FiniteClassERM, Threshold, threshold_erm
from .regularizer import truncated_entropy, truncated_entropy_argmin, truncated_entropy_grad

__all__ = ["HybridOnlineLearner", "FollowTheLeader", "SampleLedger", "CoverExponentialWeights",
           "ExactThresholdFTRL", "Threshold", "threshold_erm", "FiniteClassERM", "truncated_entropy",
           "truncated_entropy_grad", "truncated_entropy_argmin"]
