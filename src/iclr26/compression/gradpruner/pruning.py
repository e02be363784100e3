"""GradPruner: gradient-guided layer pruning during fine-tuning.

Huang, Cheng, Wang, "GradPruner: Gradient-guided Layer Pruning Enabling Efficient Fine-Tuning and
Inference for LLMs", ICLR 2026, arXiv:2601.19503; official code
https://github.com/secretflow/ACoLab/tree/main/PaperCode/GradPrune (its README only; no source was
readable offline).

Sec. 3 of the paper, as implemented here:

1. **Simulated gradient** (LoRA fine-tuning, step i <= t): for every adapted linear layer
   ``W (d_out x d_in)`` with LoRA factors ``A (r x d_in)``, ``B (d_out x r)``,
   ``grad_sim_i(W) = grad_B L_i @ grad_A L_i``  (:func:`simulated_gradients`).
2. **IGIA-Matrix** (Initial Gradient Information Accumulation):
   ``F_W = (1/t) sum_{i<=t} grad_sim_i(W) ** 2`` element-wise (:class:`IGIA`).
3. **Layer score** ``Layer_j = sum_{W in layer j} sum_{k,l} F_W[k, l]``; the lowest-scoring layers
   are pruned (:meth:`IGIA.layer_scores`, :func:`select_prune_layers`).
4. **Sparsify and merge**: each pruned layer's matrices keep their top ``keep`` fraction of entries by
   ``F_W`` (:func:`sparsify`) and are added into the same matrix of the nearest preceding kept layer,
   only where the two entries share their sign (:func:`same_sign_merge`, :func:`prune_layers`).

Everything works on any transformers decoder whose blocks :func:`iclr26.models.hooks.decoder_layers`
finds (Llama, Qwen2, Mistral, Gemma-3 ...) and on ``peft`` LoRA models of them.
"""
from __future__ import annotations

import operator
from typing import Iterable

import numpy as np
import torch
from torch import nn

from iclr26.models import hooks

__all__ = ["IGIA", "simulated_gradients", "select_prune_layers", "sparsify", "same_sign_merge", "prune_layers",
           "block_influence_scores"]


def _base(model: nn.Module) -> nn.Module:
    """The transformers model under a ``peft`` wrapper (the model itself otherwise)."""
    get = getattr(model, "get_base_model", None)
    return get() if callable(get) else model


def simulated_gradients(model: nn.Module, adapter: str = "default") -> dict:
    """Eq. (1): the simulated full-weight gradient ``grad_B @ grad_A`` of every LoRA-adapted linear
    layer of ``model`` (a ``peft`` model), read after ``backward`` and before the gradients are zeroed.

    Returns ``{(layer_index, name): tensor [d_out, d_in]}`` with ``name`` the module's name inside its
    decoder block (e.g. ``"self_attn.q_proj"``). LoRA layers whose factors have no gradient are skipped;
    a model without any LoRA gradient is an error.
    """
    out = {}
    found = False
    for i, layer in enumerate(hooks.decoder_layers(_base(model))):
        for name, mod in layer.named_modules():
            la, lb = getattr(mod, "lora_A", None), getattr(mod, "lora_B", None)
            if not isinstance(la, nn.ModuleDict) or adapter not in la:
                continue
            found = True
            ga, gb = la[adapter].weight.grad, lb[adapter].weight.grad
            if ga is None or gb is None:
                continue
            out[(i, name)] = gb.detach() @ ga.detach()
    if not found:
        raise ValueError(f"model has no LoRA adapter {adapter!r} on its decoder blocks: wrap it with "
                         "iclr26.models.lora.with_lora (peft) first")
    if not out:
        raise ValueError("no LoRA gradients found: call after loss.backward() and before zero_grad()")
    return out


class IGIA:
    """Accumulates the IGIA-Matrix (Eq. 2) over the first ``t`` fine-tuning steps.

    Call :meth:`update` once per optimisation step, after ``backward`` (and before ``zero_grad``);
    the paper accumulates over the first 1 % of the steps (Sec. 3; Sec. 4 setup).

    >>> igia = IGIA()                                     # doctest: +SKIP
    >>> for step, batch in enumerate(loader):             # doctest: +SKIP
    ...     loss = model(**batch).loss; loss.backward()
    ...     if step < t: igia.update(model)
    ...     opt.step(); opt.zero_grad()
    >>> scores = igia.layer_scores()                      # doctest: +SKIP
    """

    def __init__(self, adapter: str = "default"):
        self.adapter = adapter
        self.sum_: dict = {}
        self.steps_ = 0
        self.n_layers_ = 0

    def update(self, model: nn.Module) -> "IGIA":
        """Add the squared simulated gradients of the current step."""
        sims = simulated_gradients(model, self.adapter)
        self.n_layers_ = len(hooks.decoder_layers(_base(model)))
        for key, g in sims.items():
            sq = g.float() ** 2
            if key in self.sum_:
                self.sum_[key] += sq
            else:
                self.sum_[key] = sq
        self.steps_ += 1
        return self

    def _check(self):
        if self.steps_ == 0:
            raise RuntimeError("IGIA has no steps: call update(model) after backward on at least one step")

    def matrices(self) -> dict:
        """``F_W = (1/t) sum_i grad_sim_i(W)^2`` for every adapted matrix, keyed ``(layer, name)``."""
        self._check()
        return {k: v / self.steps_ for k, v in self.sum_.items()}

    def layer_scores(self) -> np.ndarray:
        """Eq. (3): ``Layer_j = sum over the matrices W of block j of sum(F_W)``; one float per block."""
        self._check()
        scores = np.zeros(self.n_layers_)
        for (i, _name), v in self.sum_.items():
            scores[i] += float(v.double().sum()) / self.steps_
        return scores


def select_prune_layers(scores, n_prune: int, protect: Iterable[int] = (0,)) -> list[int]:
    """The ``n_prune`` blocks with the lowest ``scores``, never one of ``protect`` (negative indices
    count from the end); ties go to the lower index. Returned sorted.

    ``protect`` defaults to block 0: a pruned block is merged into the nearest *preceding* kept block,
    and block 0 has none.
    """
    s = np.asarray(scores, dtype=float)
    if s.ndim != 1 or s.size == 0:
        raise ValueError(f"scores must be a non-empty 1-D sequence (one per block), got shape {s.shape}")
    if not np.isfinite(s).all():
        raise ValueError("scores must be finite")
    n = s.size
    prot = set()
    for p in protect:
        p = operator.index(p)
        if not -n <= p < n:
            raise ValueError(f"protected index {p} out of range for {n} blocks")
        prot.add(p % n)
    if isinstance(n_prune, bool) or not isinstance(n_prune, (int, np.integer)) or n_prune < 0:
        raise ValueError(f"n_prune must be a non-negative integer, got {n_prune!r}")
    free = [i for i in range(n) if i not in prot]
    if n_prune > len(free):
        raise ValueError(f"n_prune={n_prune} exceeds the {len(free)} unprotected blocks")
    order = sorted(free, key=lambda i: (s[i], i))
    return sorted(order[:n_prune])


def sparsify(weight: torch.Tensor, importance: torch.Tensor, keep: float) -> torch.Tensor:
    """Keep the ``round(keep * numel)`` entries of ``weight`` with the largest ``importance`` (the
    IGIA-Matrix of that weight), zero the rest (Sec. 3, sparsification of the pruned layers; sparsity
    ``1 - keep``). Returns a new tensor."""
    if weight.shape != importance.shape:
        raise ValueError(f"weight and importance must have the same shape, got {tuple(weight.shape)} "
                         f"and {tuple(importance.shape)}")
    if not 0.0 < keep <= 1.0:
        raise ValueError(f"keep must be in (0, 1] (the fraction of entries kept), got {keep!r}")
    k = int(round(keep * weight.numel()))
    flat = importance.reshape(-1)
    mask = torch.zeros(flat.numel(), dtype=torch.bool, device=weight.device)
    if k > 0:
        mask[torch.topk(flat, k).indices] = True
    return torch.where(mask.reshape(weight.shape), weight, torch.zeros_like(weight))


def same_sign_merge(target: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    """``target + source`` only where ``sign(source) == sign(target)`` (Sec. 3, sign-consistent merge);
    elsewhere ``target`` is unchanged. Returns a new tensor."""
    if target.shape != source.shape:
        raise ValueError(f"target and source must have the same shape, got {tuple(target.shape)} "
                         f"and {tuple(source.shape)}")
    agree = torch.sign(source) == torch.sign(target)
    return target + torch.where(agree, source, torch.zeros_like(source))


@torch.no_grad()
def prune_layers(model: nn.Module, layers: Iterable[int], *, importance: dict | None = None, keep: float = 0.1,
                 merge: bool = True) -> nn.Module:
    """Remove decoder blocks ``layers`` from ``model`` in place and return it.

    With ``merge=True`` (GradPruner) every 2-D weight of a pruned block that has an IGIA-Matrix in
    ``importance`` (keys ``(layer, name)`` as from :meth:`IGIA.matrices`) is sparsified to its top
    ``keep`` fraction by importance and merged with :func:`same_sign_merge` into the same matrix of the
    nearest preceding kept block (pruned blocks are processed in increasing order, so several pruned
    blocks can merge into one kept block in turn). ``merge=False`` drops the blocks (the paper's
    "w/o merge" ablation; also ShortGPT-style removal). The remaining blocks are renumbered
    (``self_attn.layer_idx``) and ``config.num_hidden_layers`` (and ``config.layer_types`` where it
    exists) updated, so generation with a KV cache keeps working.

    ``model`` must be a plain transformers model: fold LoRA adapters in first
    (``peft_model.merge_and_unload()``).
    """
    if hasattr(model, "peft_config"):
        raise TypeError("prune_layers needs a plain transformers model; fold the LoRA adapters in first "
                        "with merge_and_unload()")
    stack = hooks.decoder_layers(model)
    n = len(stack)
    idx = []
    for li in layers:
        if isinstance(li, bool) or not hasattr(li, "__index__"):
            raise ValueError(f"layer indices must be integers, got {li!r}")
        li = operator.index(li)
        if not -n <= li < n:
            raise ValueError(f"layer index {li} out of range for {n} decoder blocks")
        idx.append(li % n)
    if len(set(idx)) != len(idx):
        raise ValueError(f"duplicate layer indices in {idx}")
    if len(idx) >= n:
        raise ValueError(f"cannot prune all {n} decoder blocks")
    pruned = sorted(idx)
    kept = [i for i in range(n) if i not in pruned]
    if merge:
        if importance is None:
            raise ValueError("merge=True needs the IGIA matrices: importance=IGIA.matrices()")
        for j in pruned:
            before = [k for k in kept if k < j]
            if not before:
                raise ValueError(f"block {j} has no preceding kept block to merge into; protect block 0")
            target = stack[before[-1]]
            tmods = dict(target.named_modules())
            for name, mod in stack[j].named_modules():
                w = getattr(mod, "weight", None)
                if not isinstance(w, torch.Tensor) or w.dim() != 2 or (j, name) not in importance:
                    continue
                tw = tmods[name].weight
                src = sparsify(w.data, importance[(j, name)].to(w.device), keep)
                tw.data.copy_(same_sign_merge(tw.data, src.to(tw.dtype)))
    parent = _parent_of_stack(model, stack)
    new = nn.ModuleList([stack[i] for i in kept])
    for new_i, layer in enumerate(new):
        for mod in layer.modules():
            if hasattr(mod, "layer_idx"):
                mod.layer_idx = new_i
    parent[0].__setattr__(parent[1], new)
    cfg = getattr(model, "config", None)
    if cfg is not None:
        if getattr(cfg, "layer_types", None) is not None:
            cfg.layer_types = [cfg.layer_types[i] for i in kept]
        cfg.num_hidden_layers = len(kept)
    return model


def _parent_of_stack(model: nn.Module, stack: nn.ModuleList):
    for name, mod in model.named_modules():
        for child_name, child in mod.named_children():
            if child is stack:
                return mod, child_name
    raise ValueError("decoder stack not found among the model's modules")  # pragma: no cover


@torch.no_grad()
def block_influence_scores(model: nn.Module, input_ids: torch.Tensor,
                           attention_mask: torch.Tensor | None = None) -> np.ndarray:
    """ShortGPT Block Influence of every decoder block, the cosine baseline:
    ``BI_j = 1 - mean_tokens cos(x_j, y_j)`` with ``x_j``/``y_j`` the block's input/output hidden
    states over the (unpadded) calibration tokens. Low BI = the block changes little = pruned first."""
    base = _base(model)
    stack = hooks.decoder_layers(base)
    n = len(stack)
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be [batch, seq], got shape {tuple(input_ids.shape)}")
    mask = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    mods = {str(i): stack[i] for i in range(n)}
    with hooks.record_activations(base, mods, which="input") as ins, \
            hooks.record_activations(base, mods, which="output") as outs:
        get_decoder = getattr(base, "get_decoder", None)
        (get_decoder() if callable(get_decoder) else base)(input_ids=input_ids, attention_mask=mask.long())
    scores = np.zeros(n)
    for i in range(n):
        x, y = ins[str(i)][0][mask].double(), outs[str(i)][0][mask].double()
        scores[i] = float(1.0 - torch.nn.functional.cosine_similarity(x, y, dim=-1).mean())
    return scores
