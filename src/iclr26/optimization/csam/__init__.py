"""CSAM: "Towards Understanding The Calibration Benefits of Sharpness-Aware Minimization"
(arXiv:2505.23866)."""
from .calibration import adaptive_ece, brier_score, expected_calibration_error, nll
from .optimizer import CSAM, SAM, csam_loss

__all__ = ["SAM", "CSAM", "csam_loss", "expected_calibration_error", "adaptive_ece", "nll",
           "brier_score"]
