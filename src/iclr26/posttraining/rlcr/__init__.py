"""RLCR (arXiv:2507.16806): calibration reward (correctness + Brier) and confidence-weighted voting."""
from .reward import (ParsedCompletion, brier_score, expected_calibration_error, expected_reward, log_score,
                     parse_completion, parse_confidence, rlcr_reward, rlcr_score, rlvr_reward)
from .voting import confidence_weighted_vote, majority_vote, max_confidence

__all__ = ["ParsedCompletion", "brier_score", "expected_calibration_error", "expected_reward", "log_score",
           "parse_completion", "parse_confidence", "rlcr_reward", "rlcr_score", "rlvr_reward",
           "confidence_weighted_vote", "majority_vote", "max_confidence"]
