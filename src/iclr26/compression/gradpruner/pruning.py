"""GradPruner: gradient-guided layer pruning during fine-tuning.

Huang, Cheng, Wang, "GradPruner: Gradient-guided Layer Pruning Enabling Efficient Fine-Tuning and
Inference for LLMs", ICLR 2026, arXiv:2601.19503; official code
https://github.com/secretflow/ACoLab/tree/main/PaperCode/GradPrune (``layer_important.py``,
``layer_prune/process_important.py``, ``trainer.py``; read for the details the paper leaves open).

Sec. 3 of the paper, as implemented here:

1. **Simulated gradient** (LoRA fine-tuning, step i <= t): for every adapted linear layer
   ``W (d_out x d_in)`` with LoRA factors ``A (r x d_in)``, ``B (d_out x r)``,
   ``grad_sim_i(W) = grad_B L_i @ grad_A L_i``  (:func:`simulated_gradients`).
2. **IGIA-Matrix** (Initial Gradient Information Accumulation):
   ``F_W = (1/t) sum_{i<=t} grad_sim_i(W) ** 2`` element-wise (:class:`IGIA`).
3. **Layer score**: the official ``layer_important.py`` sums, over the steps and the adapted
   matrices of block j, the Frobenius norm ``||grad_sim_i(W)||_F`` (:meth:`IGIA.layer_scores`,
   ``norm="frobenius"``, the default); the paper's Eq. (3), the sum of the IGIA entries, is
   ``norm="squared"``. The pruned blocks form one contiguous run of low score (Llama-3.1-8B: blocks
   18-30 of 32 in ``process_important.py``; :func:`select_prune_run`); :func:`select_prune_layers`
   picks the lowest blocks individually.
4. **Sparsify and merge** (``process_important.py``): only some blocks of the run are merged, by
   default its first two and its last (18, 19 and 30 there; :func:`official_merge_layers`), all into
   the block just before the run (17). Each merged matrix keeps the top ``keep = 0.2`` of its entries
   by ``F_W`` (the official ``spars``; :func:`sparsify`) AND only the entries whose sign agrees with
   the *original* target weight (:func:`same_sign_merge`); all merged blocks are added at once
   (:func:`prune_layers`). Norm weights are not merged. The run is then dropped and the smaller
   model fine-tuned afresh.

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

__all__ = ["IGIA", "simulated_gradients", "select_prune_layers", "select_prune_run", "official_merge_layers",
           "sparsify", "same_sign_merge", "prune_layers", "block_influence_scores", "GradPrunerCallback"]

#: kept fraction of a merged matrix: ``k = int(numel * 0.2)`` in the official ``spars``
#: (``layer_prune/process_important.py``); the paper's sweep puts the optimum in 50-90 % sparsity
KEEP = 0.2
#: gradient-collection steps of the official pipeline (``layer_important.py`` loops over 40 steps)
OFFICIAL_STEPS = 40


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
        self.norm_sum_: dict = {}
        self.steps_ = 0
        self.n_layers_ = 0

    def update(self, model: nn.Module) -> "IGIA":
        """Add the squared simulated gradients of the current step."""
        sims = simulated_gradients(model, self.adapter)
        self.n_layers_ = len(hooks.decoder_layers(_base(model)))
        for key, g in sims.items():
            if not torch.isfinite(g).all():
                raise FloatingPointError(f"non-finite LoRA gradient in block {key[0]} {key[1]!r}: stop "
                                         "training (the IGIA-Matrix would be meaningless)")
        for key, g in sims.items():
            self.norm_sum_[key[0]] = self.norm_sum_.get(key[0], 0.0) + float(torch.linalg.norm(g.double()))
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

    def layer_scores(self, norm: str = "frobenius") -> np.ndarray:
        """One score per block, low = pruned first.

        ``norm="frobenius"`` (default, the official ``layer_important.py``): ``sum_i sum_{W in block j}
        ||grad_sim_i(W)||_F``, divided by t. ``norm="squared"``: the paper's Eq. (3), ``sum_{W in block j}
        sum(F_W)``. Blocks without an adapted matrix score 0."""
        self._check()
        scores = np.zeros(self.n_layers_)
        if norm == "frobenius":
            for i, v in self.norm_sum_.items():
                scores[i] = v / self.steps_
        elif norm == "squared":
            for (i, _name), v in self.sum_.items():
                scores[i] += float(v.double().sum()) / self.steps_
        else:
            raise ValueError(f"norm must be 'frobenius' or 'squared', got {norm!r}")
        return scores


def select_prune_layers(scores, n_prune: int, protect: Iterable[int] = (0,)) -> list[int]:
    """The ``n_prune`` blocks with the lowest ``scores``, never one of ``protect`` (negative indices
    count from the end); ties go to the lower index. Returned sorted.

    ``protect`` defaults to block 0: a pruned block is merged into the nearest *preceding* kept block,
    and block 0 has none.
    """
    s = _check_scores(scores)
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


def _check_scores(scores) -> np.ndarray:
    s = np.asarray(scores, dtype=float)
    if s.ndim != 1 or s.size == 0:
        raise ValueError(f"scores must be a non-empty 1-D sequence (one per block), got shape {s.shape}")
    if not np.isfinite(s).all():
        raise ValueError("scores must be finite")
    return s


def select_prune_run(scores, n_prune: int, protect_first: int = 1, protect_last: int = 1) -> list[int]:
    """The contiguous run of ``n_prune`` blocks with the lowest total score, never one of the first
    ``protect_first`` or the last ``protect_last`` blocks; ties go to the earlier run.

    The official pipeline prunes one run (blocks 18-30 of Llama-3.1-8B's 32, ``process_important.py``),
    which keeps the first block (the merge target needs a block before the run) and the last."""
    s = _check_scores(scores)
    for name, v in (("n_prune", n_prune), ("protect_first", protect_first), ("protect_last", protect_last)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {v!r}")
    if protect_first < 1:
        raise ValueError("protect_first must be >= 1: the run merges into the block before it")
    lo, hi = protect_first, s.size - protect_last
    if n_prune > hi - lo:
        raise ValueError(f"n_prune={n_prune} exceeds the {max(hi - lo, 0)} unprotected blocks")
    if n_prune == 0:
        return []
    best = min(range(lo, hi - n_prune + 1), key=lambda a: (float(s[a:a + n_prune].sum()), a))
    return list(range(best, best + n_prune))


def official_merge_layers(run) -> list[int]:
    """The blocks of a pruned run that are merged: its first two and its last, as the official
    ``process_important.py`` merges blocks 18, 19 and 30 of the run 18-30 (fewer for a run of < 3)."""
    run = sorted(operator.index(i) for i in run)
    return sorted(set(run[:2] + run[-1:]))


def sparsify(weight: torch.Tensor, importance: torch.Tensor, keep: float) -> torch.Tensor:
    """Keep the ``int(keep * numel)`` entries of ``weight`` with the largest ``importance`` (the
    IGIA-Matrix of that weight), zero the rest (Sec. 3; the official ``spars`` with ``keep = 0.2``,
    sparsity ``1 - keep``). Returns a new tensor."""
    if weight.shape != importance.shape:
        raise ValueError(f"weight and importance must have the same shape, got {tuple(weight.shape)} "
                         f"and {tuple(importance.shape)}")
    if isinstance(keep, bool) or not isinstance(keep, (int, float)) or not 0.0 < keep <= 1.0:
        raise ValueError(f"keep must be in (0, 1] (the fraction of entries kept), got {keep!r}")
    if not torch.isfinite(importance).all() or not torch.isfinite(weight).all():
        raise ValueError("weight and importance must be finite")
    k = int(keep * weight.numel())
    flat = importance.reshape(-1)
    mask = torch.zeros(flat.numel(), dtype=torch.bool, device=weight.device)
    if k > 0:
        mask[torch.topk(flat, k).indices] = True
    return torch.where(mask.reshape(weight.shape), weight, torch.zeros_like(weight))


def same_sign_merge(target: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    """``target + source`` only where ``source * target > 0`` (Sec. 3, sign-consistent merge; the
    official ``(param1 * param2) > 0``); elsewhere ``target`` is unchanged. Returns a new tensor."""
    if target.shape != source.shape:
        raise ValueError(f"target and source must have the same shape, got {tuple(target.shape)} "
                         f"and {tuple(source.shape)}")
    agree = (source * target) > 0
    return target + torch.where(agree, source, torch.zeros_like(source))


@torch.no_grad()
def prune_layers(model: nn.Module, layers: Iterable[int], *, importance: dict | None = None, keep: float = KEEP,
                 merge: bool = True, merge_layers: Iterable[int] | None = None) -> nn.Module:
    """Remove decoder blocks ``layers`` from ``model`` in place and return it.

    With ``merge=True`` (GradPruner, ``process_important.py``) the blocks ``merge_layers`` (a subset
    of ``layers``; default :func:`official_merge_layers` of each contiguous run in ``layers``: its
    first two and its last) are merged into the nearest preceding kept block: every 2-D weight ``W_j``
    of a merged block is masked to its top ``keep`` fraction by its IGIA-Matrix ``importance[(j,
    name)]`` (:func:`sparsify`) and to the entries whose sign agrees with the target's *original*
    weight ``W_t``; ``W_t <- W_t + sum_j mask_j * W_j`` (all merged blocks at once, as the official
    code adds them in one sum). Norm weights (1-D) are not merged. ``merge=False`` drops the blocks
    (the paper's "w/o merge" ablation; also ShortGPT-style removal). The remaining blocks are
    renumbered (``self_attn.layer_idx``) and ``config.num_hidden_layers`` (and ``config.layer_types``)
    updated, so generation with a KV cache keeps working.

    ``model`` must be a plain transformers model: fold LoRA adapters in first
    (``peft_model.merge_and_unload()``).
    """
    if hasattr(model, "peft_config"):
        raise TypeError("prune_layers needs a plain transformers model; fold the LoRA adapters in first "
                        "with merge_and_unload()")
    stack = hooks.decoder_layers(model)
    n = len(stack)

    def _indices(seq, what):
        out = []
        for li in seq:
            if isinstance(li, bool) or not hasattr(li, "__index__"):
                raise ValueError(f"{what} indices must be integers, got {li!r}")
            li = operator.index(li)
            if not -n <= li < n:
                raise ValueError(f"{what} index {li} out of range for {n} decoder blocks")
            out.append(li % n)
        if len(set(out)) != len(out):
            raise ValueError(f"duplicate {what} indices in {out}")
        return out

    idx = _indices(layers, "layer")
    if len(idx) >= n:
        raise ValueError(f"cannot prune all {n} decoder blocks")
    pruned = sorted(idx)
    kept = [i for i in range(n) if i not in pruned]
    if merge:
        if importance is None:
            raise ValueError("merge=True needs the IGIA matrices: importance=IGIA.matrices()")
        if merge_layers is None:
            runs, cur = [], []
            for j in pruned:
                if cur and j != cur[-1] + 1:
                    runs.append(cur)
                    cur = []
                cur.append(j)
            if cur:
                runs.append(cur)
            to_merge = sorted(j for r in runs for j in official_merge_layers(r))
        else:
            to_merge = sorted(_indices(merge_layers, "merge_layers"))
            stray = [j for j in to_merge if j not in pruned]
            if stray:
                raise ValueError(f"merge_layers {stray} are not among the pruned layers {pruned}")
        updates: dict = {}
        for j in to_merge:
            before = [k for k in kept if k < j]
            if not before:
                raise ValueError(f"block {j} has no preceding kept block to merge into; protect block 0")
            t = before[-1]
            tmods = dict(stack[t].named_modules())
            for name, mod in stack[j].named_modules():
                w = getattr(mod, "weight", None)
                if not isinstance(w, torch.Tensor) or w.dim() != 2:
                    continue
                if (j, name) not in importance:
                    raise ValueError(f"importance has no IGIA-Matrix for block {j} {name!r}: adapt every "
                                     "linear layer (target_modules all-linear) during the warm-up")
                tw = tmods[name].weight
                src = sparsify(w.data, importance[(j, name)].to(w.device), keep).to(tw.dtype)
                delta = torch.where(src * tw.data > 0, src, torch.zeros_like(src))   # vs the original target
                key = (t, name)
                updates[key] = updates[key] + delta if key in updates else delta
        for (t, name), delta in updates.items():
            w = dict(stack[t].named_modules())[name].weight
            w.data.add_(delta)
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


try:  # transformers is a dependency of every model this module prunes; the callback needs it
    from transformers import TrainerCallback as _TrainerCallback
except ImportError:  # pragma: no cover
    _TrainerCallback = object


class GradPrunerCallback(_TrainerCallback):
    """``transformers.Trainer`` callback that accumulates the IGIA-Matrix over the first ``steps``
    optimisation steps of a LoRA fine-tune (the official pipeline patches ``Trainer`` to save the LoRA
    gradients of its first 40 steps, ``trainer.py``; here ``on_pre_optimizer_step`` reads them before
    the optimiser step). With ``stop=True`` (default) training stops after them, so the run is the
    official gradient-collection run. Afterwards: ``cb.igia.layer_scores()``, ``cb.igia.matrices()``.

    >>> cb = GradPrunerCallback(steps=40)                                   # doctest: +SKIP
    >>> Trainer(model=peft_model, args=args, train_dataset=ds, callbacks=[cb]).train()  # doctest: +SKIP
    >>> run = select_prune_run(cb.igia.layer_scores(), n_prune=13)            # doctest: +SKIP
    """

    def __init__(self, steps: int = OFFICIAL_STEPS, stop: bool = True, adapter: str = "default"):
        if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
            raise ValueError(f"steps must be a positive integer, got {steps!r}")
        self.steps = int(steps)
        self.stop = bool(stop)
        self.igia = IGIA(adapter)

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        if model is None:
            raise ValueError("GradPrunerCallback needs the model (the Trainer passes it as model=)")
        if self.igia.steps_ < self.steps:
            self.igia.update(model)
        return control

    def on_step_end(self, args, state, control, **kwargs):
        if self.stop and self.igia.steps_ >= self.steps:
            control.should_training_stop = True
        return control
