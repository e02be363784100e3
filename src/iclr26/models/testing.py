"""Test fixtures for code that works on transformers models: a tiny Llama whose weights are drawn
wide enough, and structured enough, that its next-token distributions are far from uniform and its
layers and heads differ from one another (random default inits give near-uniform outputs, against
which shifted positions, flipped signs or wrong layers go unnoticed)."""
from __future__ import annotations

from typing import Callable

__all__ = ["wide_llama", "widen_"]


def _default_scale(layer: int, part: str) -> float:
    return {"q_proj": 0.6, "k_proj": 0.6}.get(part, 0.35)


def wide_llama(*, vocab_size: int = 40, hidden_size: int = 24, intermediate_size: int = 48, num_layers: int = 3,
               num_heads: int = 4, num_kv_heads: int = 2, seed: int = 0,
               scale: Callable[[int, str], float] = _default_scale, attn_implementation: str | None = None,
               post_layer: Callable | None = None):
    """A ``LlamaForCausalLM`` in eval mode with a wide, layer-specific initialisation.

    After the default init (seeded with ``seed``), every block's matrices are redrawn as
    ``scale(layer_index, name) * N(0, 1)`` (``name`` is the module's name, e.g. ``"q_proj"``),
    every norm weight as ``1 + 0.3 N(0, 1)``, the embeddings as ``N(0, 1)`` and the output layer as
    ``0.5 N(0, 1)``, all from one generator seeded with ``seed + 1``. ``post_layer(i, layer)`` may
    edit block ``i`` in place right after it is drawn (under ``torch.no_grad``)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=intermediate_size,
                      num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
                      max_position_embeddings=64, tie_word_embeddings=False)
    if attn_implementation is not None:
        cfg._attn_implementation = attn_implementation
    model = LlamaForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for i, layer in enumerate(model.model.layers):
            for name, p in layer.named_parameters():
                if p.dim() < 2:
                    p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g))
                    continue
                p.copy_(scale(i, name.split(".")[-2]) * torch.randn(p.shape, generator=g))
            if post_layer is not None:
                post_layer(i, layer)
        model.model.embed_tokens.weight.copy_(torch.randn(model.model.embed_tokens.weight.shape, generator=g))
        model.lm_head.weight.copy_(0.5 * torch.randn(model.lm_head.weight.shape, generator=g))
    return model


def widen_(model, std: float = 0.4, seed: int = 0):
    """Redraw every weight matrix (parameters of 2+ dimensions, in ``parameters()`` order) of
    ``model`` in place as ``N(0, std^2)`` from a generator seeded with ``seed`` (the usual init is
    std 0.02, whose next-token distributions are near-uniform); returns ``model``."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, std, generator=g)
    return model
