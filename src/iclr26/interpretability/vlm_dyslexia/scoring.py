"""Scoring a VLM's answers by teacher forcing: an item is correct when greedy decoding would write
exactly the reference answer followed by ``<end_of_utterance>`` (the format the tiny VLM was
trained on), i.e. when, fed the reference prefix, the argmax at every answer position is the
reference token. One forward pass per item instead of a ``generate`` loop."""
from __future__ import annotations

import torch

from iclr26.models.vlm_train import answer_batch

__all__ = ["greedy_exact"]


@torch.no_grad()
def greedy_exact(model, processor, items, *, batch_size: int = 16) -> list[int]:
    """1/0 per item: would greedy decoding answer ``item.answer`` exactly (then stop)?"""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    items = list(items)
    if not items:
        raise ValueError("items is empty")
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    out: list[int] = []
    for i in range(0, len(items), batch_size):
        batch, mask = answer_batch(processor, items[i:i + batch_size])
        logits = base(**batch).logits
        if not torch.isfinite(logits).all():
            raise FloatingPointError("non-finite logits while scoring")
        pred = logits[:, :-1].argmax(-1)
        tgt = batch["input_ids"][:, 1:]
        pos = mask[:, 1:]
        ok = ((pred == tgt) | ~pos).all(1)
        out.extend(int(v) for v in ok)
    return out
