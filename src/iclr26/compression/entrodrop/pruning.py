"""EntroDrop: entropy-based block pruning (Yang et al., arXiv:2504.03794, ICLR 2026).

A block ``f_l`` maps the hidden state ``Z^{l-1}`` to ``Z^l = Z^{l-1} + f_l(Z^{l-1})``. Its score is the
entropy increase (Sec. 3, Eq. "entropy increase criterion")

    dH_l = H(Z^l) - H(Z^{l-1}),

estimated on calibration text and averaged over calibration sequences; the blocks with the smallest
``dH_l`` carry the least new information and are dropped first. Blocks in the first, entropy-
decreasing stage are never dropped (Sec. 3.2, two-stage framework); the official code protects the
first two blocks and the last one, which is the default here.

Entropy estimators (Sec. 3.1 and the official code's defaults):
* ``"knn"`` (Kozachenko-Leonenko): ``H = d * mean_i log r_{i,k} + (d/2) log(pi) - log Gamma(d/2+1)
  + log n - log k`` over the ``n`` token vectors of one sequence in ``R^d``, with ``r_{i,k}`` the
  Euclidean distance from token ``i`` to its ``k``-th nearest other token, ``k = 25``;
* ``"bucket"``: the sum over hidden dimensions of the Shannon entropy (nats) of a histogram with
  ``n_bins`` equal-width bins between the dimension's min and max over the sequence, ``n_bins = 20``.

Granularity ``"attention"`` scores the attention sub-block (``Z^{l-1}`` = the block input,
``Z^l`` = the residual stream after the attention sum, before the MLP), ``"layer"`` the whole block.

The cosine baseline (ShortGPT's Block Influence; LLMDrop for attention sub-blocks) scores a block by
``BI_l = 1 - mean_tokens cos(Z^{l-1}, Z^l)`` and drops the smallest first.
"""
from __future__ import annotations

import contextlib
import math
from typing import Iterable, Sequence

import numpy as np
import torch

from iclr26.models import hooks

__all__ = ["knn_entropy", "bucket_entropy", "block_influence", "block_scores", "EntroDrop", "heldout_nll"]

_GRANULARITIES = ("attention", "layer")
_CRITERIA = ("entropy", "cosine")
_ESTIMATORS = ("knn", "bucket")


def _tokens(x: torch.Tensor, name: str = "x") -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or x.dim() < 2:
        raise ValueError(f"{name} must be a tensor of token vectors [..., n_tokens, d], got "
                         f"{getattr(x, 'shape', type(x).__name__)}")
    x = x.reshape(-1, x.shape[-1]).double()
    if not torch.isfinite(x).all():
        raise ValueError(f"{name} has non-finite entries")
    return x


def knn_entropy(x: torch.Tensor, k: int = 25, eps: float = 1e-10) -> float:
    """Kozachenko-Leonenko differential entropy (nats) of the token vectors ``x [..., n, d]``.

    ``H = d * mean_i log r_{i,k} + (d/2) log pi - lgamma(d/2 + 1) + log n - log k``, the form of the
    official code (its default ``k = 25``), with ``r_{i,k}`` the distance to the ``k``-th nearest
    neighbour other than the point itself, plus ``eps`` (official code: 1e-10) so that duplicate
    vectors give a large negative but finite log. All leading dimensions are flattened into one sample.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    z = _tokens(x)
    n, d = z.shape
    if n <= k:
        raise ValueError(f"knn_entropy needs more than k={k} token vectors, got n={n}")
    dist = torch.cdist(z, z)
    dist.fill_diagonal_(float("inf"))
    r_k = torch.topk(dist, k, dim=1, largest=False).values[:, -1]
    # + eps as in the official code: repeated tokens have identical embeddings (block 0's input)
    return float(d * torch.log(r_k + eps).mean() + 0.5 * d * math.log(math.pi) - math.lgamma(0.5 * d + 1)
                 + math.log(n) - math.log(k))


def bucket_entropy(x: torch.Tensor, n_bins: int = 20) -> float:
    """Sum over dimensions of the histogram entropy (nats) of ``x [..., n, d]`` with ``n_bins``
    equal-width bins spanning each dimension's [min, max] (official code's ``num_bins = 20`` for the
    information gain). A constant dimension has entropy 0."""
    if isinstance(n_bins, bool) or not isinstance(n_bins, int) or n_bins < 2:
        raise ValueError(f"n_bins must be an integer >= 2, got {n_bins!r}")
    z = _tokens(x)
    lo, hi = z.min(0).values, z.max(0).values
    width = (hi - lo).clamp_min(1e-300)
    idx = ((z - lo) / width * n_bins).floor().clamp(0, n_bins - 1).long()  # max falls in the last bin
    counts = torch.zeros(n_bins, z.shape[1], dtype=torch.float64).scatter_add_(
        0, idx, torch.ones_like(z))
    p = counts / z.shape[0]
    h = -(torch.where(p > 0, p * torch.log(p), torch.zeros_like(p))).sum(0)
    h = torch.where(hi > lo, h, torch.zeros_like(h))
    return float(h.sum())


def block_influence(x: torch.Tensor, y: torch.Tensor) -> float:
    """ShortGPT Block Influence ``1 - mean_tokens cos(x_t, y_t)`` of a block with input ``x`` and
    output ``y`` (same shape ``[..., n, d]``)."""
    a, b = _tokens(x, "x"), _tokens(y, "y")
    if a.shape != b.shape:
        raise ValueError(f"x and y must have the same shape, got {tuple(x.shape)} and {tuple(y.shape)}")
    return float(1.0 - torch.nn.functional.cosine_similarity(a, b, dim=-1).mean())


def _after_attention_module(layer):
    """The module whose input is the residual stream right after the attention sum: Gemma-style
    blocks normalise before the MLP with ``pre_feedforward_layernorm``, Llama/Qwen/Mistral with
    ``post_attention_layernorm``."""
    for name in ("pre_feedforward_layernorm", "post_attention_layernorm", "ln_2"):
        mod = getattr(layer, name, None)
        if isinstance(mod, torch.nn.Module):
            return mod
    raise ValueError(f"{type(layer).__name__}: cannot find the residual stream after attention "
                     "(looked for pre_feedforward_layernorm, post_attention_layernorm, ln_2)")


def _batches(batches) -> list[dict]:
    if isinstance(batches, torch.Tensor):
        batches = [batches]
    out = []
    for b in batches:
        if isinstance(b, torch.Tensor):
            b = {"input_ids": b}
        if not isinstance(b, dict) or "input_ids" not in b:
            raise ValueError("calibration batches must be tensors of token ids [batch, seq] or dicts with input_ids")
        if b["input_ids"].dim() != 2:
            raise ValueError(f"input_ids must be [batch, seq], got shape {tuple(b['input_ids'].shape)}")
        out.append(b)
    if not out:
        raise ValueError("no calibration batches given")
    return out


@torch.no_grad()
def block_scores(model, batches, *, criterion: str = "entropy", granularity: str = "attention",
                 estimator: str = "knn", k: int = 25, n_bins: int = 20) -> np.ndarray:
    """Score every decoder block of ``model`` on calibration ``batches`` (token-id tensors
    ``[batch, seq]`` or dicts with ``input_ids`` and an optional ``attention_mask``).

    ``criterion="entropy"``: ``dH_l = H(Z^l) - H(Z^{l-1})`` with the chosen ``estimator``, computed
    per calibration sequence (its tokens are the sample, as the official code with batch size 1) and
    averaged over sequences. ``criterion="cosine"``: Block Influence, averaged the same way.
    Returns a float array of length ``n_layers``.
    """
    if criterion not in _CRITERIA:
        raise ValueError(f"criterion must be one of {_CRITERIA}, got {criterion!r}")
    if granularity not in _GRANULARITIES:
        raise ValueError(f"granularity must be one of {_GRANULARITIES}, got {granularity!r}")
    if estimator not in _ESTIMATORS:
        raise ValueError(f"estimator must be one of {_ESTIMATORS}, got {estimator!r}")
    layers = hooks.decoder_layers(model)
    n_layers = len(layers)
    ins = {f"in{i}": layers[i] for i in range(n_layers)}
    if granularity == "attention":
        outs = {f"out{i}": _after_attention_module(layers[i]) for i in range(n_layers)}
        out_which = "input"
    else:
        outs = {f"out{i}": layers[i] for i in range(n_layers)}
        out_which = "output"
    # run the decoder stack only (a causal LM's ``.model``), not the unused LM head
    inner = getattr(model, "model", None)
    runner = inner if isinstance(inner, torch.nn.Module) and any(m is layers for m in inner.modules()) else model
    ent = (lambda z: knn_entropy(z, k)) if estimator == "knn" else (lambda z: bucket_entropy(z, n_bins))
    total = np.zeros(n_layers)
    n_seq = 0
    for b in _batches(batches):
        mask = b.get("attention_mask")
        with hooks.record_activations(model, ins, which="input") as xin, \
                hooks.record_activations(model, outs, which=out_which) as xout:
            runner(**{key: v for key, v in b.items() if key in ("input_ids", "attention_mask")}, use_cache=False)
        for i in range(n_layers):
            x, y = xin[f"in{i}"][0], xout[f"out{i}"][0]
            for s in range(x.shape[0]):
                keep = slice(None) if mask is None else mask[s].bool()
                xs, ys = x[s][keep], y[s][keep]
                if criterion == "cosine":
                    total[i] += block_influence(xs, ys)
                else:
                    total[i] += ent(ys) - ent(xs)
        n_seq += b["input_ids"].shape[0]
    return total / n_seq


class EntroDrop:
    """Rank decoder blocks by entropy increase and drop the lowest-ranked ones.

    Parameters (defaults from the official code): ``estimator="knn"`` with ``k=25`` (``"bucket"``
    with ``n_bins=20`` is the paper's other recommended estimator), ``granularity="attention"``,
    ``protect=(0, 1, -1)``: blocks never dropped (the official code sets their score to +inf; the
    paper's rule is not to prune in the entropy-decreasing first stage). ``criterion="cosine"``
    gives the Block-Influence (ShortGPT / LLMDrop) baseline with the same protection and interface.

    >>> pruner = EntroDrop().fit(model, calib_batches)            # doctest: +SKIP
    >>> with pruner.prune(model, 8):                                # doctest: +SKIP
    ...     loss = model(ids, labels=ids).loss
    """

    def __init__(self, estimator: str = "knn", k: int = 25, n_bins: int = 20, granularity: str = "attention",
                 protect: Sequence[int] = (0, 1, -1), criterion: str = "entropy"):
        if criterion not in _CRITERIA:
            raise ValueError(f"criterion must be one of {_CRITERIA}, got {criterion!r}")
        if estimator not in _ESTIMATORS:
            raise ValueError(f"estimator must be one of {_ESTIMATORS}, got {estimator!r}")
        if granularity not in _GRANULARITIES:
            raise ValueError(f"granularity must be one of {_GRANULARITIES}, got {granularity!r}")
        self.estimator, self.k, self.n_bins = estimator, k, n_bins
        self.granularity, self.protect, self.criterion = granularity, tuple(int(p) for p in protect), criterion

    def fit(self, model, batches) -> "EntroDrop":
        """Score the blocks on calibration ``batches``; sets ``scores_`` (per block) and ``order_``
        (droppable blocks, first to drop first: ascending score, ties by index)."""
        scores = block_scores(model, batches, criterion=self.criterion, granularity=self.granularity,
                              estimator=self.estimator, k=self.k, n_bins=self.n_bins)
        n = len(scores)
        for p in self.protect:
            if not -n <= p < n:
                raise ValueError(f"protected block {p} out of range for {n} blocks")
        protected = {p % n for p in self.protect}
        self.scores_ = scores
        self.protected_ = sorted(protected)
        self.order_ = [i for i in sorted(range(n), key=lambda i: (scores[i], i)) if i not in protected]
        return self

    def selection(self, n_blocks: int) -> list[int]:
        """The ``n_blocks`` blocks to drop (sorted indices)."""
        if not hasattr(self, "order_"):
            raise RuntimeError("call fit(model, batches) before selection/prune")
        if isinstance(n_blocks, bool) or not isinstance(n_blocks, (int, np.integer)) or n_blocks < 0:
            raise ValueError(f"n_blocks must be a non-negative integer, got {n_blocks!r}")
        if n_blocks > len(self.order_):
            raise ValueError(f"n_blocks={n_blocks} exceeds the {len(self.order_)} droppable blocks "
                             f"(protected: {self.protected_})")
        return sorted(self.order_[:n_blocks])

    def prune(self, model, n_blocks: int):
        """Context manager: ``model`` with the ``n_blocks`` selected blocks (or their attention
        sub-blocks) dropped, restored on exit."""
        return hooks.drop_blocks(model, self.selection(n_blocks), part=self.granularity)


@torch.no_grad()
def heldout_nll(model, batches) -> float:
    """Mean next-token negative log-likelihood (nats per predicted token) over ``batches`` (token-id
    tensors ``[batch, seq]``): the log of the held-out perplexity."""
    total, count = 0.0, 0
    for b in _batches(batches):
        ids = b["input_ids"]
        logits = model(input_ids=ids, use_cache=False).logits[:, :-1].float()
        nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1),
                                                reduction="sum")
        total += float(nll)
        count += ids[:, 1:].numel()
    return total / count
