"""Building a same-family "small base" (amateur) when none ships.

ProxyThinker (arXiv:2505.24872, Sec. 3) needs a small expert *and* the small model it was tuned
from. Offline we have one small model of the Qwen2.5-Coder family, so the amateur is made from the
expert itself by depth truncation: the first ``n_keep`` decoder layers followed by the model's own
final norm and output head. The copy shares every weight tensor with the expert (no extra memory),
is deterministic, and shares its tokenizer by construction. This is a deliberate deviation from the
paper (its amateur is the pre-RFT checkpoint); see the README.
"""
from __future__ import annotations

import copy

import torch

__all__ = ["layer_pruned_copy"]


def _decoder(model):
    inner = getattr(model, "model", None)
    if inner is None or not isinstance(getattr(inner, "layers", None), torch.nn.ModuleList):
        raise TypeError(
            f"layer_pruned_copy needs a decoder-only transformers model with `.model.layers` "
            f"(Llama/Qwen2/Gemma style), got {type(model).__name__}")
    return inner


def layer_pruned_copy(model, n_keep: int):
    """Return a causal LM that runs only the first ``n_keep`` decoder layers of ``model``.

    Weights are shared (not copied); the original model is left unchanged.
    """
    inner = _decoder(model)
    n = len(inner.layers)
    if not isinstance(n_keep, int) or isinstance(n_keep, bool) or not 1 <= n_keep <= n:
        raise ValueError(f"n_keep must be an integer in [1, {n}] (the model's layer count), "
                         f"got {n_keep!r}")
    new = copy.copy(model)
    new_inner = copy.copy(inner)
    # nn.Module keeps children in _modules: give the copies their own dicts before replacing
    new._modules = dict(model._modules)
    new_inner._modules = dict(inner._modules)
    new_inner.layers = torch.nn.ModuleList(list(inner.layers[:n_keep]))
    new.model = new_inner
    cfg = copy.deepcopy(model.config)
    cfg.num_hidden_layers = n_keep
    if getattr(cfg, "layer_types", None) is not None:
        cfg.layer_types = list(cfg.layer_types[:n_keep])
    new.config = cfg
    new_inner.config = cfg
    return new
