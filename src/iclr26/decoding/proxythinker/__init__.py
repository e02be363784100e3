"""ProxyThinker (arXiv:2505.24872): large base + alpha * (small expert - small amateur) logits."""
from .amateur import layer_pruned_copy
from .decoding import (
    DEFAULT_ALPHA,
    ProxyThinkerLogitsProcessor,
    check_same_tokenizer,
    proxythinker_generate,
)

__all__ = [
    "DEFAULT_ALPHA",
    "ProxyThinkerLogitsProcessor",
    "check_same_tokenizer",
    "layer_pruned_copy",
    "proxythinker_generate",
]
