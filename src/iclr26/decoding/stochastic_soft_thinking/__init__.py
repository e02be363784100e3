"""Stochastic Soft Thinking: Gumbel-Softmax randomised soft tokens (arXiv:2508.03440)."""
from .probes import js_divergence, replacement_probe
from .soft_thinking import SoftThinkingOutput, gumbel_softmax_weights, soft_thinking_generate, soft_token_weights

__all__ = [
    "soft_thinking_generate", "soft_token_weights", "gumbel_softmax_weights", "SoftThinkingOutput",
    "replacement_probe", "js_divergence",
]
