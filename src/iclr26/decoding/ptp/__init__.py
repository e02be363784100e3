"""Parallel Token Prediction (ICLR 2026, arXiv:2512.21323): auxiliary uniforms as inputs make several
future tokens jointly predictable in one call; exact verification against the teacher."""
from .model import (
    AuxiliaryEmbedding, PTPConfig, PTPForCausalLM, ar_sample, pick, ptp_generate, ptp_loss, sample_auxiliaries,
    token_intervals, train_ptp, verify_ptp,
)

__all__ = ["AuxiliaryEmbedding", "PTPConfig", "PTPForCausalLM", "ar_sample", "pick", "ptp_generate", "ptp_loss",
           "sample_auxiliaries", "token_intervals", "train_ptp", "verify_ptp"]
