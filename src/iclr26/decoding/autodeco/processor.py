"""AutoDeco at decoding time as a transformers ``LogitsProcessor``.

transformers' ``generate`` does not hand hidden states to logits processors, so the processor
registers a forward pre-hook on the model's output embedding (``lm_head``): the tensor entering
``lm_head`` is exactly the last hidden state the heads read (paper Sec. 2.1/2.3). At each step the
processor reads the last position's hidden state, predicts ``(T_t, P_t)`` and returns
``l / T_t`` with ``-inf`` outside the top-``P_t`` nucleus; ``generate(do_sample=True,
temperature=1, top_p=1, top_k=0)`` then samples from it.
"""
from __future__ import annotations

import torch
from transformers import LogitsProcessor

from .heads import AutoDecoHeads, autodeco_step

__all__ = ["AutoDecoLogitsProcessor"]


class AutoDecoLogitsProcessor(LogitsProcessor):
    """Per-token temperature and top-p from :class:`AutoDecoHeads`.

    Use as ``model.generate(..., do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
    logits_processor=LogitsProcessorList([proc]))`` (or ``iclr26.models.generation.generate(...,
    do_sample=True, logits_processor=proc)``). The hook stays on the model until :meth:`remove`
    is called; the processor is also a context manager that removes it on exit.

    ``record=True`` keeps the predicted ``(T, P)`` of every step in ``self.history``.
    Each step is :func:`~.heads.autodeco_step`: one log-softmax of ``l / T`` for the top-p head's
    features and the nucleus, and the nucleus searched among the ``candidates`` most probable
    tokens (a full sort only for rows whose nucleus is wider).
    """

    def __init__(self, model, heads: AutoDecoHeads, *, record: bool = False, candidates: int = 256):
        if not isinstance(heads, AutoDecoHeads):
            raise TypeError(f"heads must be AutoDecoHeads, got {type(heads).__name__}")
        if not isinstance(candidates, int) or candidates < 1:
            raise ValueError(f"candidates must be a positive integer, got {candidates!r}")
        self.candidates = candidates
        out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        if out is None:
            raise ValueError("model has no output embedding (lm_head); AutoDeco needs a causal LM head")
        self.heads = heads
        self.record = record
        self.history: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._hidden: torch.Tensor | None = None
        self._handle = out.register_forward_pre_hook(self._capture)

    def _capture(self, module, args):
        self._hidden = args[0][:, -1, :].detach()

    def remove(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()

    @torch.no_grad()
    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self._hidden is None:
            raise RuntimeError("AutoDecoLogitsProcessor saw no hidden state: was the hook removed before generate?")
        if self._hidden.shape[0] != scores.shape[0]:
            raise RuntimeError(
                f"captured hidden batch {self._hidden.shape[0]} != scores batch {scores.shape[0]} "
                "(beam search and other batch-expanding modes are not supported)"
            )
        hidden = self._hidden.to(device=scores.device)
        warped, temp, top_p = autodeco_step(self.heads, hidden, scores, candidates=self.candidates)
        if self.record:
            self.history.append((temp.cpu(), top_p.cpu()))
        return warped.to(scores.dtype)
