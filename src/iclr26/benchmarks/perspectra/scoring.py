"""Multiple-choice answers from a causal language model by the log-likelihood of each option's
first answer token, one forward pass per batch (no generation).

The prompt is wrapped in the model's chat template (when it has one) and the next-token
log-probabilities after the assistant turn opens are compared over the options' tokens
(digits for counting, letters otherwise); every option label must be one token.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .tasks import POLARITY_LABELS, PROMPTS, option_labels, polarity_prompt


def chat_prompt(tokenizer, text: str) -> str:
    """``text`` as one user turn with the assistant turn opened (plain text if no chat template)."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                             add_generation_prompt=True)
    return text + "\nAnswer: "


def option_token_ids(tokenizer, labels: Sequence[str]) -> list[int]:
    ids = []
    for lab in labels:
        t = tokenizer.encode(lab, add_special_tokens=False)
        if len(t) != 1:
            raise ValueError(f"option label {lab!r} is {len(t)} tokens for this tokenizer; labels must be one token")
        ids.append(t[0])
    if len(set(ids)) != len(ids):
        raise ValueError(f"option labels {list(labels)} share a token")
    return ids


def score_options(model, tokenizer, prompts: Sequence[str], labels: Sequence[Sequence[str]],
                  batch_size: int = 4, chat: bool = True) -> list[np.ndarray]:
    """Log-probabilities (renormalised over the options) of each prompt's option labels as the first
    answer token. ``labels[i]`` are prompt ``i``'s labels. Left padding, one forward per batch."""
    import torch

    prompts = list(prompts)
    if isinstance(prompts, str) or not all(isinstance(p, str) and p for p in prompts):
        raise TypeError("prompts must be a sequence of non-empty strings")
    if len(labels) != len(prompts):
        raise ValueError(f"labels must give one label list per prompt, got {len(labels)} for {len(prompts)}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    texts = [chat_prompt(tokenizer, p) if chat else p for p in prompts]
    ids = [option_token_ids(tokenizer, lab) for lab in labels]
    device = next(model.parameters()).device
    old = tokenizer.padding_side
    tokenizer.padding_side = "left"
    out: list[np.ndarray] = []
    try:
        for s in range(0, len(texts), batch_size):
            enc = tokenizer(texts[s:s + batch_size], return_tensors="pt", padding=True, add_special_tokens=False)
            with torch.no_grad():
                logits = model(input_ids=enc["input_ids"].to(device),
                               attention_mask=enc["attention_mask"].to(device), use_cache=False).logits[:, -1, :]
            logp = torch.log_softmax(logits.float(), dim=-1)
            if not torch.all(torch.isfinite(logp)):
                raise FloatingPointError("non-finite next-token log-probabilities from the model")
            for j in range(logp.shape[0]):
                sel = logp[j, ids[s + j]]
                out.append(torch.log_softmax(sel, dim=-1).cpu().numpy().astype(np.float64))
    finally:
        tokenizer.padding_side = old
    return out


class LMChooser:
    """A ``predict_fn`` for :func:`~.tasks.evaluate` that answers every item by the most likely
    option token.

    ``swap_polarity`` (default True) also scores each polarity item with the two options listed in
    the other order and averages the two log-probabilities per label, so a preference for the letter
    "A" cannot decide the answer (without it a small model that always says "A" is right on exactly
    the supporting items, whatever the framing)."""

    def __init__(self, model, tokenizer, items: list[dict], batch_size: int = 4, chat: bool = True,
                 swap_polarity: bool = True):
        if not isinstance(items, list) or not items:
            raise ValueError("items must be a non-empty list of task items")
        self.model, self.tokenizer, self.items = model, tokenizer, items
        self.batch_size, self.chat, self.swap_polarity = batch_size, chat, bool(swap_polarity)
        self.logps: list[np.ndarray] | None = None

    def __call__(self, prompts):
        if len(prompts) != len(self.items):
            raise ValueError("LMChooser is bound to its items: call it with their prompts")
        labels = [option_labels(it) for it in self.items]
        logps = score_options(self.model, self.tokenizer, prompts, labels, batch_size=self.batch_size, chat=self.chat)
        pol = [i for i, it in enumerate(self.items) if it["task"] == "polarity"]
        if self.swap_polarity and pol:
            swapped = score_options(self.model, self.tokenizer, [polarity_prompt(self.items[i], swap=True) for i in pol],
                                    [labels[i] for i in pol], batch_size=self.batch_size, chat=self.chat)
            for i, lp in zip(pol, swapped):
                # in the swapped prompt letter A means "oppose": reverse to (support, oppose) order
                logps[i] = np.log(0.5 * (np.exp(logps[i]) + np.exp(lp[::-1])))
        self.logps = logps
        return [choice_from_logp(it, lp) for it, lp in zip(self.items, self.logps)]


def choice_from_logp(item: dict, logp: np.ndarray):
    """The task's answer value for the arg-max option."""
    j = int(np.argmax(logp))
    if item["task"] == "counting":
        return int(item["options"][j])
    if item["task"] == "polarity":
        return POLARITY_LABELS[j]
    return j


__all__ = ["chat_prompt", "option_token_ids", "score_options", "LMChooser", "choice_from_logp", "PROMPTS"]
