"""Astraea: token-wise acceleration of video diffusion transformers.

Liu, Cheng, Miao, Liu, Chen, Lin, Yao, Chen, Leng, Feng, Guo. "Astraea: A Token-wise Acceleration
Framework for Video Diffusion Transformers", ICLR 2026, arXiv:2506.05096 (project page
astraea-project.github.io; no official code was found).

At every denoising step and in every transformer block only the ``theta_t N`` most important
tokens are recomputed; the others reuse the block output cached when they were last computed.

* **Token score** (paper, token selection section): ``S_token = w_alpha S_sig + w_beta S_penalty``
  with ``S_sig = S_LSE * Delta`` and ``S_penalty = exp(n)``. ``S_LSE`` is the log-sum-exp of the
  token's attention logits (the softmax normaliser, a by-product of the attention kernel) saved when
  the token was last computed, ``Delta = ||h_t - h_last||_2`` the change of the token's block input
  since then, and ``n`` the number of consecutive steps the token has been skipped. Defaults
  ``w_alpha = 1``, ``w_beta = 0.5``.
* **Sparse block** (paper, sparse attention section): the selected tokens are the queries,
  keys and values come from all tokens, ``softmax(Q_sel K^T / sqrt(d)) V``; the MLP runs on the
  selected tokens only.
* **Budget search** (paper, search section): an evolutionary search over per-step budgets
  ``theta_t in {0, 0.1, ..., 1}`` (population 50, 30 generations, 30 children per generation,
  uniform and block crossover, mutation probability annealed from 0.1 to 0.01, a repair step keeping
  the mean budget within ``[0.9, 1.1]`` x target), minimising the error against the full-compute
  output.

:func:`apply_astraea` wraps the blocks of a transformer in place (in the style of diffusers'
``apply_first_block_cache`` / ``apply_pyramid_attention_broadcast`` hooks) and returns the
:class:`AstraeaCache` that owns the state; :func:`search_token_budget` runs the search on any
fitness callable. Blocks must follow the adaLN-Zero DiT layout of
:class:`iclr26.models.diffusion.TinyDiT` (``n1``, ``attn`` a batch-first
``torch.nn.MultiheadAttention``, ``n2``, ``mlp``, ``ada``; called as ``block(h, cond)``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

SELECTIONS = ("astraea", "random", "fixed")
_BLOCK_PARTS = ("n1", "attn", "n2", "mlp", "ada")
_MAX_SKIPS = 60.0          # exp(60) is finite in float32; a token skipped that long is chosen anyway


# ------------------------------------------------------------------------------- the token score


def token_scores(lse: torch.Tensor, delta: torch.Tensor, skips: torch.Tensor,
                 w_alpha: float = 1.0, w_beta: float = 0.5) -> torch.Tensor:
    """``S_token = w_alpha * S_LSE * Delta + w_beta * exp(n)`` (paper, token selection metric).

    ``lse``: the attention log-sum-exp of each token when it was last computed; ``delta``: the
    L2 change of its block input since then; ``skips``: consecutive skipped steps ``n`` (capped
    at 60 so that ``exp`` stays finite). All ``(B, N)`` and finite (a NaN raises ``ValueError``).
    ``w_alpha = 0`` leaves the penalty alone: a round-robin over the least recently computed tokens
    (the control arm of the claim check that isolates the significance term).
    """
    if not (lse.shape == delta.shape == skips.shape):
        raise ValueError(f"lse, delta and skips must have one shape, got {tuple(lse.shape)}, "
                         f"{tuple(delta.shape)}, {tuple(skips.shape)}")
    for name, v in (("lse", lse), ("delta", delta), ("skips", skips)):
        if not torch.isfinite(v).all():
            raise ValueError(f"{name} holds non-finite values")
    return w_alpha * lse * delta + w_beta * torch.exp(skips.to(lse.dtype).clamp(max=_MAX_SKIPS))


def _check_block(block):
    missing = [p for p in _BLOCK_PARTS if not hasattr(block, p)]
    if missing or not isinstance(block.attn, nn.MultiheadAttention) or not block.attn.batch_first:
        raise TypeError(f"{type(block).__name__} is not an adaLN-Zero DiT block: Astraea needs attributes "
                        f"{_BLOCK_PARTS} with attn a batch_first torch.nn.MultiheadAttention "
                        f"(missing: {missing or 'none'})")
    if not block.attn._qkv_same_embed_dim or block.attn.in_proj_bias is None:
        raise TypeError("the block's attention must use one packed in-projection with bias")


def sparse_block_forward(block: nn.Module, h: torch.Tensor, c: torch.Tensor, idx: torch.Tensor | None = None):
    """Run an adaLN-Zero DiT block on the tokens ``idx`` only (query-only sparse attention).

    ``h`` ``(B, N, w)`` block input of all tokens, ``c`` ``(B, w)`` conditioning, ``idx`` ``(B, k)``
    token indices per sample (``None``: all tokens). Returns ``(out, lse)``: the block output of the
    selected tokens ``(B, k, w)`` and the log-sum-exp of their attention logits, averaged over heads,
    ``(B, k)``. Keys and values are computed from every token, queries from the selected ones
    (paper: ``softmax(Q_sel K^T / sqrt(d)) V``); the MLP runs on the selected tokens. With
    ``idx = None`` the output equals ``block(h, c)``.
    """
    _check_block(block)
    B, N, w = h.shape
    a = block.attn
    H = a.num_heads
    dh = w // H
    s1, b1, g1, s2, b2, g2 = block.ada(c)[:, None].chunk(6, -1)
    u = block.n1(h) * (1 + s1) + b1
    Wq, Wk, Wv = a.in_proj_weight.chunk(3)
    bq, bk, bv = a.in_proj_bias.chunk(3)
    if idx is None:
        us, hs, k = u, h, N
    else:
        if idx.dim() != 2 or idx.shape[0] != B:
            raise ValueError(f"idx must have shape (B={B}, k), got {tuple(idx.shape)}")
        k = idx.shape[1]
        gidx = idx[..., None].expand(B, k, w)
        us, hs = u.gather(1, gidx), h.gather(1, gidx)
    q = F.linear(us, Wq, bq).view(B, k, H, dh).transpose(1, 2)
    kk = F.linear(u, Wk, bk).view(B, N, H, dh).transpose(1, 2)
    v = F.linear(u, Wv, bv).view(B, N, H, dh).transpose(1, 2)
    logits = q @ kk.transpose(-1, -2) / math.sqrt(dh)                      # (B, H, k, N)
    lse = torch.logsumexp(logits, -1)                                      # (B, H, k)
    att = (torch.exp(logits - lse[..., None]) @ v).transpose(1, 2).reshape(B, k, w)
    hs = hs + g1 * a.out_proj(att)
    out = hs + g2 * block.mlp(block.n2(hs) * (1 + s2) + b2)
    return out, lse.mean(1)


# ------------------------------------------------------------------------------ the block cache


@dataclass
class _BlockState:
    out: torch.Tensor            # cached block output of every token (B, N, w)
    last_in: torch.Tensor        # block input when each token was last computed
    lse: torch.Tensor            # attention log-sum-exp when each token was last computed (B, N)
    skips: torch.Tensor          # consecutive skipped steps (B, N)
    order: torch.Tensor | None = None   # "fixed" selection: the priority order, set once


class _AstraeaBlock(nn.Module):
    def __init__(self, block, cache, index):
        super().__init__()
        self.block, self.index = block, index
        self._cache = [cache]                # a list, so the cache is not registered as a submodule

    def forward(self, h, c):
        return self._cache[0]._block_forward(self.index, self.block, h, c)


class AstraeaCache:
    """The state of Astraea on one transformer; made by :func:`apply_astraea`.

    ``budget[t]`` is the fraction of tokens recomputed at denoising step ``t`` in every block
    (``len(budget)`` = number of model calls of one sampling run; the counter wraps around and the
    cache is cleared at the start of each run). ``budget[0]`` must be 1: the cache is empty.
    ``selection``: ``"astraea"`` (the paper's score), ``"random"`` (uniformly random tokens, a
    baseline), ``"fixed"`` (the paper's score ranks the tokens once, at the first reduced step, and
    that order is kept: the fixed-token ablation). The block count of computed tokens is in
    :attr:`computed_tokens` / :attr:`total_tokens`.
    """

    def __init__(self, budget: Sequence[float], w_alpha: float = 1.0, w_beta: float = 0.5,
                 selection: str = "astraea", seed: int = 0):
        b = np.asarray(budget, dtype=float)
        if b.ndim != 1 or len(b) < 1 or not np.all(np.isfinite(b)) or b.min() < 0 or b.max() > 1:
            raise ValueError(f"budget must be a non-empty sequence of fractions in [0, 1], got {budget!r}")
        if b[0] != 1.0:
            raise ValueError(f"budget[0] must be 1.0 (the cache is empty at the first step), got {b[0]}")
        if selection not in SELECTIONS:
            raise ValueError(f"selection must be one of {SELECTIONS}, got {selection!r}")
        if not (np.isfinite(w_alpha) and np.isfinite(w_beta)) or w_alpha < 0 or w_beta < 0:
            raise ValueError(f"w_alpha and w_beta must be finite and >= 0, got {w_alpha}, {w_beta}")
        self.budget, self.w_alpha, self.w_beta, self.selection = b, float(w_alpha), float(w_beta), selection
        self.generator = torch.Generator().manual_seed(int(seed))
        self.step = -1
        self.computed_tokens = 0
        self.total_tokens = 0
        self._states: dict[int, _BlockState] = {}
        self._model = None
        self._attr = None
        self._originals = None
        self._hook = None

    # -- attach / detach
    def _attach(self, model, blocks_attr):
        names = [blocks_attr] if blocks_attr else ["transformer_blocks", "blocks"]
        attr = next((n for n in names if isinstance(getattr(model, n, None), nn.ModuleList)), None)
        if attr is None:
            raise TypeError(f"{type(model).__name__} has no nn.ModuleList of blocks named {names}")
        blocks = getattr(model, attr)
        if any(isinstance(b, _AstraeaBlock) for b in blocks):
            raise RuntimeError("Astraea is already applied to this model; call remove() first")
        for blk in blocks:
            _check_block(blk)
        self._model, self._attr, self._originals = model, attr, list(blocks)
        setattr(model, attr, nn.ModuleList(_AstraeaBlock(b, self, i) for i, b in enumerate(blocks)))
        self._hook = model.register_forward_pre_hook(self._on_model_call)
        return self

    def remove(self):
        """Restore the original blocks and drop the forward hook."""
        if self._model is not None:
            setattr(self._model, self._attr, nn.ModuleList(self._originals))
            self._hook.remove()
            self._model = None
        self.reset()

    def reset(self):
        """Clear the cache and the step counter (the next model call is step 0)."""
        self.step = -1
        self._states.clear()

    def _on_model_call(self, module, args):
        self.step = (self.step + 1) % len(self.budget)
        if self.step == 0:
            self._states.clear()

    @property
    def token_fraction(self) -> float:
        """Computed token-block evaluations over all of them since the cache was made."""
        return self.computed_tokens / max(self.total_tokens, 1)

    # -- one block at one step
    def _select(self, st: _BlockState, h: torch.Tensor, k: int) -> torch.Tensor:
        B, N, _ = h.shape
        if self.selection == "random":
            return torch.rand(B, N, generator=self.generator).topk(k, dim=1).indices
        if self.selection == "fixed" and st.order is not None:
            return st.order[:, :k]
        delta = (h - st.last_in).norm(dim=-1)
        score = token_scores(st.lse, delta, st.skips, self.w_alpha, self.w_beta)
        if self.selection == "fixed":
            st.order = score.argsort(dim=1, descending=True)
            return st.order[:, :k]
        return score.topk(k, dim=1).indices

    def _block_forward(self, i, block, h, c):
        if self.step < 0:
            raise RuntimeError("the blocks were called outside a forward of the model Astraea was applied to")
        if not torch.isfinite(h).all():
            raise ValueError(f"the input of block {i} holds non-finite values at step {self.step}")
        B, N, w = h.shape
        st = self._states.get(i)
        if st is not None and st.out.shape != h.shape:
            raise RuntimeError(f"the batch changed within one sampling run ({tuple(st.out.shape)} -> "
                               f"{tuple(h.shape)}); call reset() between runs")
        k = N if st is None else int(round(self.budget[self.step] * N))
        self.total_tokens += B * N
        self.computed_tokens += B * k
        if st is None or k >= N:
            out, lse = sparse_block_forward(block, h, c)
            order = None if st is None else st.order
            self._states[i] = _BlockState(out, h.detach().clone(), lse, torch.zeros(B, N), order)
            return out
        if k == 0:
            st.skips += 1
            return st.out
        idx = self._select(st, h, k)
        out_sel, lse = sparse_block_forward(block, h, c, idx)
        gidx = idx[..., None].expand(B, k, w)
        st.out = st.out.scatter(1, gidx, out_sel)
        st.last_in = st.last_in.scatter(1, gidx, h.gather(1, gidx))
        st.lse = st.lse.scatter(1, idx, lse)
        st.skips = (st.skips + 1).scatter(1, idx, torch.zeros(B, k))
        return st.out


def apply_astraea(transformer: nn.Module, budget: Sequence[float], w_alpha: float = 1.0, w_beta: float = 0.5,
                  selection: str = "astraea", seed: int = 0, blocks_attr: str | None = None) -> AstraeaCache:
    """Wrap the blocks of ``transformer`` (``transformer_blocks`` or ``blocks``, or ``blocks_attr``)
    with Astraea's token cache; returns the :class:`AstraeaCache` (call ``.remove()`` to undo).

    Each forward of ``transformer`` is one denoising step; ``budget[t]`` is the fraction of tokens
    recomputed at step ``t`` (see :class:`AstraeaCache`). Defaults ``w_alpha = 1``, ``w_beta = 0.5``
    are the paper's weights of the significance and penalty terms.
    """
    return AstraeaCache(budget, w_alpha, w_beta, selection, seed)._attach(transformer, blocks_attr)


# --------------------------------------------------------------------------- step-level baseline


class StepSkip(nn.Module):
    """Step-level reuse (the paper's "timestep-level skipping" ablation; Delta-DiT / PAB style):
    at step ``t`` with ``compute[t]`` false the model is not called and its last output is reused.
    ``forward(x, t, y)`` like the wrapped model; the counter wraps every ``len(compute)`` calls."""

    def __init__(self, model: nn.Module, compute: Sequence[bool]):
        super().__init__()
        m = np.asarray(compute, dtype=bool)
        if m.ndim != 1 or len(m) < 1 or not m[0]:
            raise ValueError("compute must be a non-empty sequence of booleans with compute[0] true")
        self.model, self.compute = model, m
        self.n_classes = getattr(model, "n_classes", None)
        self.step, self._last = -1, None

    def forward(self, x, t, y):
        self.step = (self.step + 1) % len(self.compute)
        if self.compute[self.step] or self._last is None or self._last.shape != x.shape:
            self._last = self.model(x, t, y)
        return self._last


# ---------------------------------------------------------------------------------- budgets


def uniform_budget(n_steps: int, target: float, grid: float = 0.1, first_full: bool = True) -> np.ndarray:
    """The as-equal-as-possible schedule on the ``grid`` whose mean is ``target`` (rounded to the
    grid), with ``theta_0 = 1`` when ``first_full``; the extra grid units are spread evenly."""
    m, S, free, fixed = _units(n_steps, target, grid, first_full)
    rem = S - fixed * m
    base, extra = divmod(rem, free)
    if base > m or (base == m and extra):
        raise ValueError(f"target {target} is not reachable with {n_steps} steps")
    u = np.full(free, base)
    if extra:
        u[np.round(np.linspace(0, free - 1, extra)).astype(int)] += 1
    return np.concatenate([np.full(fixed, m), u]) / m


def _units(n_steps, target, grid, first_full):
    if n_steps < 1 + int(first_full):
        raise ValueError(f"n_steps must be >= {1 + int(first_full)}, got {n_steps}")
    if not 0 < grid <= 1 or abs(1 / grid - round(1 / grid)) > 1e-9:
        raise ValueError(f"grid must divide 1 (0.1, 0.05, ...), got {grid}")
    m = int(round(1 / grid))
    fixed = int(first_full)
    lo = fixed / n_steps
    if not lo <= target <= 1:
        raise ValueError(f"target must be in [{lo:g}, 1] for {n_steps} steps (first step full: {first_full}), got {target}")
    return m, int(round(target * n_steps * m)), n_steps - fixed, fixed


@dataclass
class BudgetSearchResult:
    """Outcome of :func:`search_token_budget`: the best ``budget``, its ``fitness``, the best fitness
    after each generation (``history``) and the number of distinct schedules evaluated."""

    budget: np.ndarray
    fitness: float
    history: list = field(default_factory=list)
    evaluations: int = 0


def search_token_budget(fitness: Callable[[np.ndarray], float], n_steps: int, target: float = 0.5, *,
                        population: int = 50, generations: int = 30, children: int = 30, grid: float = 0.1,
                        tolerance: float = 0.1, p_mutation: tuple[float, float] = (0.1, 0.01),
                        first_full: bool = True, seed: int = 0) -> BudgetSearchResult:
    """Evolutionary search of a per-step token budget (paper, budget search section).

    Genes are ``theta_t`` on the ``grid`` (``{0, 0.1, ..., 1}``); ``theta_0 = 1`` when
    ``first_full``. The population starts from :func:`uniform_budget` plus random schedules; each
    generation makes ``children`` children from binary-tournament parents by uniform or block
    (two-point) crossover (probability 1/2 each), mutates every free gene with a probability
    annealed linearly from ``p_mutation[0]`` to ``p_mutation[1]``, repairs the mean budget into
    ``[target (1 - tolerance), target (1 + tolerance)]`` (``tolerance = 0``: exactly ``target`` on the
    grid) one grid step at a time, and keeps the best ``population`` of parents and children.
    ``fitness(budget) -> float`` is minimised (the paper: MSE against the full-compute output).
    Defaults are the paper's (population 50, 30 generations, 30 children, tolerance 0.1).
    """
    if min(population, children) < 2 or generations < 0:
        raise ValueError(f"population and children must be >= 2 and generations >= 0, got "
                         f"{population}, {children}, {generations}")
    if not 0 <= tolerance < 1:
        raise ValueError(f"tolerance must be in [0, 1), got {tolerance}")
    p0, p1 = p_mutation
    if not (0 <= p0 <= 1 and 0 <= p1 <= 1):
        raise ValueError(f"p_mutation must be two probabilities, got {p_mutation}")
    m, S, free, fixed = _units(n_steps, target, grid, first_full)
    lo = max(int(math.ceil(S * (1 - tolerance) - 1e-9)), fixed * m)
    hi = min(int(math.floor(S * (1 + tolerance) + 1e-9)), n_steps * m)
    if lo > hi:
        raise ValueError(f"no schedule on the grid has a mean budget within {tolerance} of {target}")
    rng = np.random.default_rng(seed)
    cache: dict[tuple, float] = {}

    def repair(u):
        u = u.copy()
        u[:fixed] = m
        while u.sum() > hi:
            cand = np.flatnonzero(u[fixed:] > 0) + fixed
            u[rng.choice(cand)] -= 1
        while u.sum() < lo:
            cand = np.flatnonzero(u[fixed:] < m) + fixed
            u[rng.choice(cand)] += 1
        return u

    def evaluate(u):
        key = tuple(int(v) for v in u)
        if key not in cache:
            f = float(fitness(np.asarray(key, float) / m))
            if not math.isfinite(f):
                raise ValueError(f"fitness returned a non-finite value {f} for budget {np.asarray(key) / m}")
            cache[key] = f
        return cache[key]

    start = np.round(uniform_budget(n_steps, target, grid, first_full) * m).astype(int)
    pop = [repair(start)] + [repair(rng.integers(0, m + 1, n_steps)) for _ in range(population - 1)]
    fit = [evaluate(u) for u in pop]
    history = [min(fit)]
    for g in range(generations):
        pm = p0 + (p1 - p0) * (g / max(generations - 1, 1))
        kids = []
        for _ in range(children):
            a, b = (pop[min(rng.integers(len(pop), size=2), key=lambda j: fit[j])] for _ in range(2))
            if rng.random() < 0.5:
                child = np.where(rng.random(n_steps) < 0.5, a, b)
            else:
                i, j = np.sort(rng.choice(n_steps + 1, 2, replace=False))
                child = a.copy()
                child[i:j] = b[i:j]
            mut = rng.random(n_steps) < pm
            child = np.where(mut, rng.integers(0, m + 1, n_steps), child)
            kids.append(repair(child))
        allp = pop + kids
        allf = fit + [evaluate(u) for u in kids]
        keep = np.argsort(allf, kind="stable")[:population]
        pop, fit = [allp[j] for j in keep], [allf[j] for j in keep]
        history.append(fit[0])
    best = int(np.argmin(fit))
    return BudgetSearchResult(pop[best] / m, fit[best], history, len(cache))


# ---------------------------------------------------------------------------------- metric


def psnr(x: torch.Tensor, ref: torch.Tensor, data_range: float = 2.0) -> torch.Tensor:
    """Per-sample PSNR ``10 log10(range^2 / MSE)`` over all but the first dimension (dB); the MSE is
    floored at ``1e-10`` so identical samples give a finite value (about 106 dB for range 2)."""
    if x.shape != ref.shape:
        raise ValueError(f"x and ref must have one shape, got {tuple(x.shape)} and {tuple(ref.shape)}")
    if data_range <= 0:
        raise ValueError(f"data_range must be > 0, got {data_range}")
    if not (torch.isfinite(x).all() and torch.isfinite(ref).all()):
        raise ValueError("x and ref must be finite")
    mse = ((x - ref) ** 2).reshape(len(x), -1).mean(1).clamp(min=1e-10)
    return 10 * torch.log10(data_range**2 / mse)
