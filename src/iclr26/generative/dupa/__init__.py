"""DUPA: dual-path condition alignment for decoupled diffusion transformers ("Dual-Path Condition
Alignment for Diffusion Transformers", ICLR 2026; code https://github.com/PCH-gg/DUPA)."""
from .loss import DUPALoss, REPALoss, condition_disagreement, negative_cosine, train_ddt, training_loss
from .model import DDTConfig, DecoupledDiT

__all__ = ["DDTConfig", "DecoupledDiT", "DUPALoss", "REPALoss", "condition_disagreement", "negative_cosine", "train_ddt", "training_loss"]
