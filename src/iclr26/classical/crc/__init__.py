"""Conformal Robustness Control: prediction sets learned under a robustness constraint (ICLR 2026)."""
from .estimator import (
    ConformalCRO,
    ConformalRobustnessControl,
    SimplexPortfolio,
    conformal_radius,
    min_calibration_size,
    robustness_entry_scores,
    smoothed_indicator,
)

__all__ = ["ConformalRobustnessControl", "ConformalCRO", "SimplexPortfolio", "conformal_radius",
           "min_calibration_size", "robustness_entry_scores", "smoothed_indicator"]
