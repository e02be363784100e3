"""Teacher-forced features of a frozen LM and the head-training loop (paper Sec. 2.2).

The base model is frozen: its last hidden states along a training trace are computed once
(:func:`teacher_forced`), and its logits are recomputed from them with the model's own output
embedding inside each training step (so the vocabulary-sized logits are never stored).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from iclr26.common.training import train
from iclr26.models.generation import forward_with_cache

from .heads import AutoDecoHeads, autodeco_loss

__all__ = ["TracePositions", "teacher_forced", "train_heads"]


@dataclass
class TracePositions:
    """Positions of completion tokens: ``hidden (N, H)``, ``labels (N,)``, ``item (N,)`` (which
    sequence each position belongs to) and ``step (N,)`` (index inside the completion)."""

    hidden: torch.Tensor
    labels: torch.Tensor
    item: torch.Tensor
    step: torch.Tensor


def _common_prefix_length(seqs) -> int:
    """Length of the longest token prefix shared by all of ``seqs``."""
    first = seqs[0]
    n = min(len(q) for q in seqs)
    for q in seqs[1:]:
        i = 0
        while i < n and q[i] == first[i]:
            i += 1
        n = i
    return n


@torch.no_grad()
def teacher_forced(model, tokenizer, prompts, completions, *, batch_size: int = 16,
                   share_prefix: bool = True) -> TracePositions:
    """Run ``prompt + completion`` through the frozen model and keep, for every completion token
    ``y_t``, the last hidden state that predicts it. Prompt and completion are tokenised
    separately (the completion without special tokens), which is the token path ``generate``
    follows after the prompt.

    ``share_prefix``: the tokens all prompts share (e.g. a few-shot chat header) are run once and
    their KV cache is reused by every batch, whose own tokens follow it with right padding (so
    every real token keeps its position); the hidden states equal those of separate forwards up to
    float rounding. Without it (or with no shared tokens) sequences are left-padded as in generation.
    """
    if len(prompts) != len(completions):
        raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    toks = []
    for p, c in zip(prompts, completions):
        pi = tokenizer(p, add_special_tokens=True)["input_ids"]
        if not pi:
            raise ValueError(f"prompt {p!r} has no tokens: the first completion token is predicted from "
                             "the prompt's last position, so each prompt needs at least one token")
        ci = tokenizer(c, add_special_tokens=False)["input_ids"]
        if not ci:
            raise ValueError(f"completion {c!r} tokenises to nothing")
        toks.append((pi, ci))
    hs, ys, items, steps = [], [], [], []
    if not toks:
        raise ValueError("no prompts given")
    # shared tokens; each prompt keeps at least its last token (it predicts the first completion token)
    n_pre = min(_common_prefix_length([pi for pi, _ in toks]), min(len(pi) for pi, _ in toks) - 1) \
        if share_prefix else 0
    cache = None
    if n_pre > 0:
        _, cache = forward_with_cache(model, None, input_ids=torch.tensor([toks[0][0][:n_pre]]))
    for start in range(0, len(toks), batch_size):
        seqs, spans = [], []
        for pi, ci in toks[start : start + batch_size]:
            seqs.append(pi[n_pre:] + ci)
            spans.append((len(pi) - n_pre, len(ci)))
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), pad, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        offs = []
        for r, s in enumerate(seqs):
            off = 0 if n_pre > 0 else width - len(s)  # right padding after a shared prefix, else left
            ids[r, off : off + len(s)] = torch.tensor(s)
            mask[r, off : off + len(s)] = 1
            offs.append(off)
        if n_pre > 0:
            past = copy.deepcopy(cache)
            past.batch_repeat_interleave(len(seqs))
            full_mask = torch.cat([torch.ones((len(seqs), n_pre), dtype=torch.long), mask], dim=1)
            out, _ = forward_with_cache(model, past, input_ids=ids, attention_mask=full_mask,
                                        output_hidden_states=True)
        else:
            out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True, use_cache=False)
        last = out.hidden_states[-1]
        for r, (lp, lc) in enumerate(spans):
            pos = torch.arange(offs[r] + lp - 1, offs[r] + lp - 1 + lc)
            hs.append(last[r, pos].float())
            ys.append(ids[r, pos + 1])
            items.append(torch.full((lc,), start + r, dtype=torch.long))
            steps.append(torch.arange(lc))
    return TracePositions(torch.cat(hs), torch.cat(ys), torch.cat(items), torch.cat(steps))


def train_heads(
    heads: AutoDecoHeads,
    model,
    data: TracePositions,
    *,
    steps: int = 400,
    batch_size: int = 64,
    lr: float = 1e-3,
    weights: torch.Tensor | None = None,
    alpha: float = 30.0,
    easy_drop: float = 0.6,
    seed: int = 0,
    presort: bool = False,
):
    """Train ``heads`` on frozen-model positions with :func:`autodeco_loss` using the shared loop
    :func:`iclr26.common.training.train` (AdamW). ``weights`` (N,) are per-position multiplicities.
    Logits are recomputed from the stored hidden states with ``model.get_output_embeddings()``.

    ``presort=True`` computes every position's logits once (in the output embedding's dtype, which
    is what the frozen model produces), sorts them descending and trains on the sorted rows with
    labels replaced by their ranks (``autodeco_loss(presorted=True)``): the same loss without a
    vocabulary sort per step, at the memory of ``N x V`` stored logits.
    Returns the :class:`~iclr26.common.training.TrainResult`."""
    n = data.hidden.shape[0]
    if n == 0:
        raise ValueError("no training positions (no accepted samples?)")
    lm_head = model.get_output_embeddings()
    g = torch.Generator().manual_seed(int(seed))
    w_all = torch.ones(n) if weights is None else weights.float()
    sorted_logits = ranks = None
    if presort:
        rows, rk = [], []
        with torch.no_grad():
            for s in range(0, n, 64):
                lg = lm_head(data.hidden[s : s + 64].to(lm_head.weight.dtype))
                srt, order = lg.sort(dim=-1, descending=True, stable=True)
                rows.append(srt)
                rk.append((order == data.labels[s : s + 64, None]).int().argmax(-1))
        sorted_logits, ranks = torch.cat(rows), torch.cat(rk)

    def stream():
        while True:
            perm = torch.randperm(n, generator=g)
            for i in range(0, max(n - batch_size + 1, 1), batch_size):
                yield perm[i : i + batch_size]

    def loss_fn(_heads, idx):
        h = data.hidden[idx]
        if presort:
            logits, labels = sorted_logits[idx].float(), ranks[idx]
        else:
            with torch.no_grad():
                logits = lm_head(h.to(lm_head.weight.dtype)).float()
            labels = data.labels[idx]
        loss, _ = autodeco_loss(
            _heads, h, logits, labels, alpha=alpha, easy_drop=easy_drop, weights=w_all[idx], generator=g,
            presorted=presort,
        )
        return loss

    opt = torch.optim.AdamW(heads.parameters(), lr=lr)
    return train(heads, opt, stream(), steps, loss_fn)
