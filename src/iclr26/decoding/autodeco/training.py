"""Teacher-forced features of a frozen LM and the head-training loop (paper Sec. 2.2).

The base model is frozen: its last hidden states along a training trace are computed once
(:func:`teacher_forced`), and its logits are recomputed from them with the model's own output
embedding inside each training step (so the vocabulary-sized logits are never stored).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from iclr26.common.training import train

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


@torch.no_grad()
def teacher_forced(model, tokenizer, prompts, completions, *, batch_size: int = 16) -> TracePositions:
    """Run ``prompt + completion`` through the frozen model and keep, for every completion token
    ``y_t``, the last hidden state that predicts it. Prompt and completion are tokenised
    separately (the completion without special tokens), which is the token path ``generate``
    follows after the prompt."""
    if len(prompts) != len(completions):
        raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    hs, ys, items, steps = [], [], [], []
    for start in range(0, len(prompts), batch_size):
        seqs, spans = [], []
        for p, c in zip(prompts[start : start + batch_size], completions[start : start + batch_size]):
            pi = tokenizer(p, add_special_tokens=True)["input_ids"]
            if not pi:
                raise ValueError(f"prompt {p!r} has no tokens: the first completion token is predicted from "
                                 "the prompt's last position, so each prompt needs at least one token")
            ci = tokenizer(c, add_special_tokens=False)["input_ids"]
            if not ci:
                raise ValueError(f"completion {c!r} tokenises to nothing")
            seqs.append(pi + ci)
            spans.append((len(pi), len(ci)))
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), pad, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for r, s in enumerate(seqs):  # left padding, as in generation
            ids[r, width - len(s) :] = torch.tensor(s)
            mask[r, width - len(s) :] = 1
        out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True, use_cache=False)
        last = out.hidden_states[-1]
        for r, (lp, lc) in enumerate(spans):
            off = width - len(seqs[r])
            pos = torch.arange(off + lp - 1, off + lp - 1 + lc)
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
):
    """Train ``heads`` on frozen-model positions with :func:`autodeco_loss` using the shared loop
    :func:`iclr26.common.training.train` (AdamW). ``weights`` (N,) are per-position multiplicities.
    Logits are recomputed from the stored hidden states with ``model.get_output_embeddings()``.
    Returns the :class:`~iclr26.common.training.TrainResult`."""
    n = data.hidden.shape[0]
    if n == 0:
        raise ValueError("no training positions (no accepted samples?)")
    lm_head = model.get_output_embeddings()
    g = torch.Generator().manual_seed(int(seed))
    w_all = torch.ones(n) if weights is None else weights.float()

    def stream():
        while True:
            perm = torch.randperm(n, generator=g)
            for i in range(0, max(n - batch_size + 1, 1), batch_size):
                yield perm[i : i + batch_size]

    def loss_fn(_heads, idx):
        h = data.hidden[idx]
        with torch.no_grad():
            logits = lm_head(h.to(lm_head.weight.dtype)).float()
        loss, _ = autodeco_loss(
            _heads, h, logits, data.labels[idx], alpha=alpha, easy_drop=easy_drop, weights=w_all[idx], generator=g
        )
        return loss

    opt = torch.optim.AdamW(heads.parameters(), lr=lr)
    return train(heads, opt, stream(), steps, loss_fn)
