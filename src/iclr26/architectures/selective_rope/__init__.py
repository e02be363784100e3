"""Selective RoPE (arXiv 2511.17388): input-dependent rotary position embedding."""
from .layers import SelectiveRoPE, SelectiveRoPEConfig, apply_selective_rotary, selective_frequencies

__all__ = ["SelectiveRoPE", "SelectiveRoPEConfig", "apply_selective_rotary", "selective_frequencies"]
