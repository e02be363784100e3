"""Conditioned initialisation for attention (ICLR 2026, OpenReview cKNOCYPo2W)."""
from .init import (attention_jacobian, attention_jacobian_condition, attention_weights,
                   conditioned_init_, mimetic_init_, scale_matched_init_)
from .layers import AttentionConfig, SelfAttention

__all__ = ["conditioned_init_", "scale_matched_init_", "mimetic_init_", "attention_jacobian",
           "attention_jacobian_condition", "attention_weights", "SelfAttention", "AttentionConfig"]
