"""Gradient-attribution token importance (arXiv:2505.19653, Section 4.2, Eq. 5-6).

For a sequence with token embeddings ``e_0 .. e_{L-1}`` the attribution target is the largest logit
at the final position (Eq. 5), ``L_target = max_v z_{L-1, v}``, and the importance of token ``i`` is the
L1 norm of the gradient of that target with respect to the token's embedding (Eq. 6),
``I_i = || d L_target / d e_i ||_1``. One extra forward and backward pass per batch (Appendix D.1);
the weights are treated as constants (no gradient flows through them into the loss).
"""
from __future__ import annotations

import torch

__all__ = ["token_importance", "last_positions"]


def last_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Index of the last attended token of each row (works for left, right or no padding)."""
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() != 2:
        raise ValueError("attention_mask must be a 2-D (batch, tokens) tensor")
    m = (attention_mask > 0).long()
    if torch.any(m.sum(dim=1) == 0):
        raise ValueError("every row of attention_mask needs at least one attended token")
    idx = torch.arange(m.shape[1], device=m.device).expand_as(m)
    return (idx * m).argmax(dim=1)


def _parts(model):
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    for name in ("get_input_embeddings", "get_decoder", "get_output_embeddings"):
        if not hasattr(base, name):
            raise TypeError(f"token_importance needs a transformers causal LM (with {name}()), got "
                            f"{type(base).__name__}")
    decoder, head = base.get_decoder(), base.get_output_embeddings()
    if decoder is None or head is None:
        raise TypeError(f"{type(base).__name__} has no decoder / output head; pass a causal LM")
    return base.get_input_embeddings(), decoder, head


def token_importance(model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """``I_i = || grad_{e_i} max_v z_{T-1, v} ||_1`` for every token of every row (Eq. 5-6).

    ``model``: a transformers causal LM (a ``peft`` model is unwrapped; its adapters stay active).
    ``input_ids``: (n, L) long; ``attention_mask``: (n, L), default all ones. ``T - 1`` is each row's
    last attended position. Returns (n, L) float32, 0 on padding. No parameter gradient is touched.
    """
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.is_floating_point():
        raise ValueError("input_ids must be a 2-D integer tensor (batch, tokens)")
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    if attention_mask.shape != input_ids.shape:
        raise ValueError(f"attention_mask has shape {tuple(attention_mask.shape)}; input_ids has "
                         f"{tuple(input_ids.shape)}")
    embed, decoder, head = _parts(model)
    last = last_positions(attention_mask)
    with torch.enable_grad():
        e = embed(input_ids).detach().requires_grad_(True)
        # positions count attended tokens, so left padding gives the same positions as none
        pos = (attention_mask.long().cumsum(dim=1) - 1).clamp_min(0)
        h = decoder(inputs_embeds=e, attention_mask=attention_mask, position_ids=pos, use_cache=False)
        h = h.last_hidden_state if hasattr(h, "last_hidden_state") else h[0]
        z = head(h[torch.arange(h.shape[0], device=h.device), last])      # (n, V): final-position logits
        target = z.max(dim=-1).values.sum()        # rows are independent: one backward for the batch
        (g,) = torch.autograd.grad(target, e)
    return (g.abs().sum(dim=-1) * (attention_mask > 0)).float().detach()
