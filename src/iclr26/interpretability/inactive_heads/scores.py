"""Head-inactivity score functions and per-input head zeroing (arXiv:2504.03889, Sec. 3).

A head h of layer l, on one input of S tokens, has attention weights A in R^{S x S} (row i: the
distribution of query i over keys j <= i), value vectors v_j in R^{d} and outputs o_i = sum_j A_ij v_j
in R^{d} (the head's slice of the input of the output projection W_O). The paper's score functions
(Sec. 3, "A taxonomy of score functions"; names as in the paper):

====================  ==========================================  ==========================
key                   score                                       inactive when
====================  ==========================================  ==========================
``awft``              Avg Weight of First Token  mean_i A_{i,0}    score > tau (attention sink)
``aeqd``              Avg Entropy of Query Distributions          score < tau
                      mean_i H(A_{i,:})
``ftvvn``             First Token Value Vector Norm ||v_0||        score < tau
``avvn``              Avg Value Vector Norm  mean_j ||v_j||        score < tau
``lthon``             Last Token Head Output Norm ||o_{S-1}||      score < tau
``ahon``              Avg Head Output Norm  mean_i ||o_i||         score < tau
====================  ==========================================  ==========================

Each has a layer-normalised ("LN") variant ``<key>_ln``: the score divided by the mean of the same
score over the heads of its layer, on the same input (official code: ``layer_context``). Twelve
functions in all (``SCORES``). Means run over the non-padding tokens of each input only.

A threshold tau is set from the distribution of a score over calibration inputs (Sec. 4: the
p-quantile of the score CDF for "< tau" rules, the (1 - p)-quantile for "> tau" rules, so that a
share p of the calibration heads is flagged; the paper's grid is p in {0, 0.05, ..., 0.30}). Each
input then gets its own mask B in {0, 1}^{L x H} from its own scores, and the flagged heads are
zeroed at the input of W_O (:func:`zero_heads_per_input`, via :func:`iclr26.models.hooks.zero_heads`).
"""
from __future__ import annotations

import contextlib
from typing import Iterable, Sequence

import torch
from torch import nn

from iclr26.models.hooks import (attention_module, decoder_layers, head_layout, output_projection,
                                 record_activations, zero_heads)

__all__ = ["BASE_SCORES", "SCORES", "RULES", "head_scores", "threshold", "inactive_mask",
           "random_mask", "zero_heads_per_input", "layer_normalize"]

BASE_SCORES = ("awft", "aeqd", "ftvvn", "avvn", "lthon", "ahon")
SCORES = tuple(s for b in BASE_SCORES for s in (b, b + "_ln"))
#: direction of each rule: "greater" = inactive when the score exceeds tau (Sec. 3: only the
#: first-token attention weight flags heads from above), "less" = inactive when below tau.
RULES = {s: ("greater" if s.startswith("awft") else "less") for s in SCORES}

_ATTN_SCORES = ("awft", "aeqd")
_VALUE_SCORES = ("ftvvn", "avvn")


def _check_scores(scores) -> tuple[str, ...]:
    if scores is None:
        return SCORES
    if isinstance(scores, str):
        scores = (scores,)
    scores = tuple(scores)
    bad = [s for s in scores if s not in SCORES]
    if bad or not scores:
        raise ValueError(f"unknown score(s) {bad or scores!r}; allowed: {', '.join(SCORES)}")
    return scores


def layer_normalize(score: torch.Tensor) -> torch.Tensor:
    """The "LN" variant: each head's score divided by the mean over the heads of its layer.

    ``score``: ``[..., n_layers, n_heads]``; the mean runs over the last axis (official code:
    ``score / score.mean(dim=heads)``).
    """
    if score.dim() < 1:
        raise ValueError("score must have a heads axis (last dimension)")
    return score / score.mean(dim=-1, keepdim=True)


@contextlib.contextmanager
def _eager_attention(model: nn.Module):
    """Temporarily switch to eager attention so that the attention weights are returned."""
    cfg = model.config
    old = getattr(cfg, "_attn_implementation", None)
    if old != "eager":
        model.set_attn_implementation("eager")
    try:
        yield
    finally:
        if old is not None and old != "eager":
            model.set_attn_implementation(old)


def _masked_mean(x: torch.Tensor, valid: torch.Tensor, dim: int) -> torch.Tensor:
    w = valid.to(x.dtype)
    return (x * w).sum(dim) / w.sum(dim).clamp_min(1.0)


@torch.no_grad()
def head_scores(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                scores: Iterable[str] | str | None = None, return_logits: bool = False):
    """All requested score functions of every head on every input, from one forward pass.

    ``input_ids``: ``[B, S]`` (right padding; ``attention_mask`` ``[B, S]`` with 1 on real tokens, or
    None for unpadded inputs). Returns ``{score: Tensor[B, n_layers, n_heads]}`` (float32), plus the
    logits ``[B, S, V]`` as a second value when ``return_logits``. Value vectors of grouped-query
    attention are shared by the query heads of a group, as in the official code (``repeat_kv``).
    """
    scores = _check_scores(scores)
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.shape[1] < 1:
        raise ValueError(f"input_ids must be a [batch, seq_len] tensor, got {getattr(input_ids, 'shape', input_ids)!r}")
    B, S = input_ids.shape
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    if tuple(attention_mask.shape) != (B, S):
        raise ValueError(f"attention_mask must have the shape of input_ids {(B, S)}, got {tuple(attention_mask.shape)}")
    valid = attention_mask.bool()
    if not valid[:, 0].all():
        raise ValueError("inputs must be right-padded: attention_mask[:, 0] must be 1 for every input")
    lengths = valid.sum(1)
    if not torch.equal(valid, torch.arange(S)[None, :].to(valid.device) < lengths[:, None]):
        raise ValueError("inputs must be right-padded: attention_mask must be 1...1 0...0 on every row")
    n_layers, n_heads, head_dim = head_layout(model)
    layers = decoder_layers(model)
    bases = {s.removesuffix("_ln") for s in scores}
    need_attn = bool(bases & set(_ATTN_SCORES))
    need_v = bool(bases & set(_VALUE_SCORES))
    need_o = bool(bases & {"lthon", "ahon"})
    mods = {}
    if need_o:
        mods.update({f"o{li}": output_projection(attention_module(layer)) for li, layer in enumerate(layers)})
    vmods = {}
    if need_v:
        for li, layer in enumerate(layers):
            attn = attention_module(layer)
            vp = getattr(attn, "v_proj", None)
            if not isinstance(vp, nn.Module):
                raise ValueError(f"{type(attn).__name__} has no v_proj: value-vector scores need separate "
                                 f"q/k/v projections (allowed scores without it: awft, aeqd, lthon, ahon and _ln)")
            vmods[f"v{li}"] = vp
    ctx = _eager_attention(model) if need_attn else contextlib.nullcontext()
    with ctx, record_activations(model, mods, which="input") if mods else contextlib.nullcontext({}) as o_in, \
            record_activations(model, vmods, which="output") if vmods else contextlib.nullcontext({}) as v_out:
        out = model(input_ids=input_ids, attention_mask=attention_mask, output_attentions=need_attn)
    qvalid = valid[:, None, :]                                    # [B, 1, S]
    raw: dict[str, torch.Tensor] = {}
    if need_attn:
        att = torch.stack([a.float() for a in out.attentions], 1)  # [B, L, H, S, S]
        kv = valid[:, None, None, None, :]
        att = att * kv
        qv = valid[:, None, None, :]                               # queries
        raw["awft"] = _masked_mean(att[..., 0], qv, -1)
        plogp = torch.where(att > 0, att * torch.log(att.clamp_min(1e-30)), torch.zeros_like(att))
        raw["aeqd"] = _masked_mean(-plogp.sum(-1), qv, -1)
    if need_v:
        n_kv = None
        vs = []
        for li in range(n_layers):
            v = v_out[f"v{li}"][-1].float()                         # [B, S, n_kv * d]
            n_kv = v.shape[-1] // head_dim
            v = v.view(B, S, n_kv, head_dim).norm(dim=-1)             # [B, S, n_kv]
            vs.append(v.repeat_interleave(n_heads // n_kv, dim=-1))   # [B, S, H]
        vn = torch.stack(vs, 1)                                       # [B, L, S, H]
        raw["ftvvn"] = vn[:, :, 0, :]
        raw["avvn"] = _masked_mean(vn, valid[:, None, :, None], 2)
    if need_o:
        on = torch.stack([o_in[f"o{li}"][-1].float().view(B, S, n_heads, head_dim).norm(dim=-1)
                          for li in range(n_layers)], 1)              # [B, L, S, H]
        raw["ahon"] = _masked_mean(on, valid[:, None, :, None], 2)
        raw["lthon"] = on[torch.arange(B), :, lengths - 1, :]
    res = {}
    for s in scores:
        base = s.removesuffix("_ln")
        res[s] = layer_normalize(raw[base]) if s.endswith("_ln") else raw[base].clone()
    if return_logits:
        return res, out.logits
    return res


def threshold(values, quantile: float, score: str) -> float:
    """The threshold tau that flags a share ``quantile`` of the calibration heads (Sec. 4).

    ``values``: calibration scores of one score function (any shape, e.g. ``[N, L, H]``, pooled).
    For a "< tau" rule tau is the ``quantile``-quantile of the values; for the "> tau" rule of
    ``awft`` / ``awft_ln`` the (1 - ``quantile``)-quantile (official code: ``generate_all_thresholds``,
    linear interpolation of the empirical CDF).
    """
    if score not in SCORES:
        raise ValueError(f"unknown score {score!r}; allowed: {', '.join(SCORES)}")
    q = float(quantile)
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must lie in [0, 1], got {quantile!r}")
    v = torch.as_tensor(values, dtype=torch.float64).flatten()
    if v.numel() == 0 or not torch.isfinite(v).all():
        raise ValueError("calibration values must be a non-empty set of finite numbers")
    level = q if RULES[score] == "less" else 1.0 - q
    return float(torch.quantile(v, level))


def inactive_mask(score_values: torch.Tensor, tau: float, score: str) -> torch.Tensor:
    """Bool mask of inactive heads: ``score < tau`` (or ``> tau`` for ``awft`` / ``awft_ln``)."""
    if score not in SCORES:
        raise ValueError(f"unknown score {score!r}; allowed: {', '.join(SCORES)}")
    x = torch.as_tensor(score_values)
    return x > tau if RULES[score] == "greater" else x < tau


def random_mask(shape: Sequence[int], p: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """The paper's random control (``RandomHeads``): every head of every input is zeroed
    independently with probability ``p``."""
    if not 0.0 <= float(p) <= 1.0:
        raise ValueError(f"p must lie in [0, 1], got {p!r}")
    return torch.rand(tuple(shape), generator=generator) < float(p)


@contextlib.contextmanager
def zero_heads_per_input(model: nn.Module, mask: torch.Tensor):
    """Zero the flagged heads of one input: ``mask`` is a bool ``[n_layers, n_heads]`` (or
    ``[1, n_layers, n_heads]``), True = zero the head's output before the output projection (Sec. 4,
    "model interventions"). Run one input per forward pass inside the block; per-input masks of a
    batch need one block per input.
    """
    m = torch.as_tensor(mask)
    if m.dim() == 3:
        if m.shape[0] != 1:
            raise ValueError(f"one input at a time: mask must be [n_layers, n_heads] or [1, n_layers, n_heads], got {tuple(m.shape)}")
        m = m[0]
    if m.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor (True = zero the head), got {m.dtype}")
    with zero_heads(model, m) as applied:
        yield applied
