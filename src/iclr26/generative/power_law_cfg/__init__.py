"""Power-law (non-linear) classifier-free guidance ("Overshoot and Shrinkage in Classifier-Free
Guidance: From Theory to Practice", ICLR 2026; arXiv:2502.07849)."""
from .guidance import NonLinearGuidance, PowerLawGuidance, nonlinear_guidance, power_law_guidance

__all__ = ["NonLinearGuidance", "PowerLawGuidance", "nonlinear_guidance", "power_law_guidance"]
