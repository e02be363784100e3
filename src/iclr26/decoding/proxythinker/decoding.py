"""ProxyThinker: logit-difference guidance of a large base model by small reasoners.

Paper: Xiao, Koo, Ouyang, Hernandez, Meng, Ordonez, "ProxyThinker: Test-Time Guidance through
Small Visual Reasoners", ICLR 2026, arXiv:2505.24872. Official code:
https://github.com/MrZilinXiao/ProxyThinker (this module is an independent implementation).

At every decoding step t the large base model's next-token logits are shifted by the difference
between a small RFT "expert" and its same-size "amateur" (the expert's base model), Sec. 3:

    z_t = z_base(x_<t) + alpha * (z_expert(x_<t) - z_amateur(x_<t))          (ProxyThinker, Eq. 1)

and the next token is drawn from softmax(z_t) (greedy: its argmax). The three models share a
tokenizer; each runs incrementally with its own KV cache. Leaving out the amateur gives the
paper's ablation ``z_base + alpha * z_expert``.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
from transformers import LogitsProcessor

from iclr26.models.generation import forward_with_cache

__all__ = [
    "ProxyThinkerLogitsProcessor",
    "proxythinker_generate",
    "check_same_tokenizer",
    "DEFAULT_ALPHA",
]

#: alpha = 0.5 is the paper's setting (Sec. 4, implementation details; the official code's
#: default argument is 1.0).
DEFAULT_ALPHA = 0.5


def check_same_tokenizer(tokenizer_a, tokenizer_b, names=("base", "expert")) -> None:
    """Raise ``ValueError`` unless the two tokenizers map the same strings to the same ids.

    ProxyThinker adds logits position by position, so the vocabularies must be identical.
    """
    if tokenizer_a is tokenizer_b:
        return
    va, vb = tokenizer_a.get_vocab(), tokenizer_b.get_vocab()
    if va != vb:
        only_a = len(set(va) - set(vb))
        only_b = len(set(vb) - set(va))
        moved = sum(1 for k, v in va.items() if k in vb and vb[k] != v)
        raise ValueError(
            f"ProxyThinker needs one shared tokenizer: the {names[0]} and {names[1]} tokenizers "
            f"differ ({len(va)} vs {len(vb)} tokens; {only_a} only in {names[0]}, {only_b} only in "
            f"{names[1]}, {moved} with different ids). Use models of one family that share a "
            "tokenizer (e.g. Qwen2.5-Coder-0.5B/1.5B)."
        )


def _validate_alpha(alpha) -> float:
    try:
        a = float(alpha)
    except (TypeError, ValueError):
        raise TypeError(f"alpha must be a real number, got {alpha!r}") from None
    if not torch.isfinite(torch.tensor(a)):
        raise ValueError(f"alpha must be finite, got {alpha!r}")
    return a


def _validate_sampling(temperature, top_p) -> None:
    """temperature must be a finite number > 0 and top_p lie in (0, 1] (NaN fails both)."""
    try:
        t, p = float(temperature), float(top_p)
    except (TypeError, ValueError):
        raise TypeError(f"temperature and top_p must be real numbers, got {temperature!r}, {top_p!r}") from None
    if not (t > 0 and t != float("inf")):
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")
    if not 0 < p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")


def _validate_prompts(tokenizer, prompts) -> list[str]:
    if isinstance(prompts, str):
        raise TypeError("prompts must be a sequence of strings, not a single string")
    prompts = list(prompts)
    if not prompts:
        raise ValueError("prompts is empty: give at least one prompt")
    for i, p in enumerate(prompts):
        if not isinstance(p, str):
            raise TypeError(f"prompt {i} must be a string, got {type(p).__name__}")
        if not tokenizer(p)["input_ids"]:
            raise ValueError(f"prompt {i} is empty ({p!r} has no tokens): each prompt needs at least one token")
    return prompts


class _IncrementalLM:
    """Runs a causal LM step by step on a growing batch of ids, with its own KV cache."""

    def __init__(self, model, name: str):
        if not hasattr(model, "forward") or not hasattr(model, "config"):
            raise TypeError(f"{name} must be a transformers causal LM, got {type(model).__name__}")
        self.model = model
        self.name = name
        self.reset()

    def reset(self):
        self.past = None
        self.n_seen = 0
        self.mask = None
        self.ids = None

    def continues(self, input_ids) -> bool:
        """True when ``input_ids`` extends the sequence already in the cache."""
        return (self.past is not None and input_ids.shape[0] == self.ids.shape[0]
                and input_ids.shape[1] > self.n_seen
                and torch.equal(input_ids[:, :self.n_seen].to(self.ids.device), self.ids))

    @torch.no_grad()
    def next_logits(self, input_ids: torch.LongTensor, prompt_mask: Optional[torch.Tensor]):
        """Logits for the position after ``input_ids[:, -1]``, feeding only the unseen suffix."""
        bsz, length = input_ids.shape
        if self.past is not None and not self.continues(input_ids):
            self.reset()  # a new generation started with this processor: start over
        device = next(self.model.parameters()).device
        if self.past is None:
            if prompt_mask is not None:
                mask = prompt_mask.to(device=device, dtype=torch.long)
            else:
                mask = torch.ones_like(input_ids, device=device)
            new_ids = input_ids.to(device)
        else:
            new = length - self.n_seen
            mask = torch.cat([self.mask, self.mask.new_ones(bsz, new)], dim=1)
            new_ids = input_ids[:, self.n_seen:].to(device)
        # positions count real (unpadded) tokens, as in transformers' own generate
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, -new_ids.shape[1]:]
        out, self.past = forward_with_cache(self.model, self.past, input_ids=new_ids, attention_mask=mask,
                                            position_ids=positions)
        self.mask = mask
        self.n_seen = length
        self.ids = input_ids.to(device)
        return out.logits[:, -1, :].float()


class ProxyThinkerLogitsProcessor(LogitsProcessor):
    """``transformers.LogitsProcessor`` applying ProxyThinker's Eq. 1 to the base model's logits.

    Pass it to ``base.generate(..., logits_processor=LogitsProcessorList([proc]))``; the base model
    is stepped by ``generate`` itself, the expert and the amateur are stepped here with their own
    KV caches on the same ids.

    Parameters
    ----------
    expert : the small reasoning-tuned model (transformers causal LM).
    amateur : the small model the expert was tuned from, or ``None`` for the paper's
        "expert only" ablation ``z_base + alpha * z_expert``.
    alpha : guidance weight (paper: 0.5).
    prompt_attention_mask : the attention mask of the (left-padded) prompts of the next
        ``generate`` call; or give ``pad_token_id`` and the mask is read off the prompts'
        leading pad tokens (left padding) each time a new batch starts.
    """

    def __init__(self, expert, amateur=None, alpha: float = DEFAULT_ALPHA,
                 prompt_attention_mask: Optional[torch.Tensor] = None,
                 pad_token_id: Optional[int] = None):
        self.alpha = _validate_alpha(alpha)
        if prompt_attention_mask is None and pad_token_id is None:
            raise ValueError("ProxyThinkerLogitsProcessor needs the prompts' padding: give "
                             "prompt_attention_mask (the mask of the next generate call) or pad_token_id "
                             "(left padding read off the prompts); neither was given")
        self.expert = _IncrementalLM(expert, "expert")
        self.amateur = None if amateur is None else _IncrementalLM(amateur, "amateur")
        self.prompt_attention_mask = prompt_attention_mask
        self.pad_token_id = pad_token_id

    def _prompt_mask(self, input_ids):
        m = self.prompt_attention_mask
        if m is not None and m.shape == input_ids.shape:
            return m
        if self.pad_token_id is not None:  # left padding: mask the leading pad tokens only
            return ((input_ids != self.pad_token_id).long().cumsum(-1) > 0).long()
        raise ValueError(f"prompt_attention_mask has shape {tuple(m.shape)} but the prompts have shape "
                         f"{tuple(input_ids.shape)}; they must match (or give pad_token_id instead)")

    def reset(self):
        """Forget the small models' caches (done automatically when a new prompt batch starts)."""
        self.expert.reset()
        if self.amateur is not None:
            self.amateur.reset()

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        pm = self._prompt_mask(input_ids) if self.expert.past is None or not self.expert.continues(input_ids) else None
        z_exp = self.expert.next_logits(input_ids, pm)
        delta = z_exp
        if self.amateur is not None:
            z_ama = self.amateur.next_logits(input_ids, pm)
            v = min(z_exp.shape[-1], z_ama.shape[-1])
            delta = z_exp[:, :v] - z_ama[:, :v]
        # truncate to the common vocabulary (padding rows of embedding matrices differ)
        v = min(scores.shape[-1], delta.shape[-1])
        out = scores.clone()
        out[:, :v] = scores[:, :v] + self.alpha * delta[:, :v].to(scores.device, scores.dtype)
        if scores.shape[-1] > v:  # ids only the base can emit are not in the shared vocabulary
            out[:, v:] = float("-inf")
        return out


def proxythinker_generate(
    base,
    expert,
    amateur,
    tokenizer,
    prompts: Sequence[str],
    max_new_tokens: int = 256,
    *,
    alpha: float = DEFAULT_ALPHA,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_p: float = 1.0,
    seed: Optional[int] = None,
    batch_size: int = 8,
    expert_tokenizer=None,
    amateur_tokenizer=None,
    **generate_kwargs,
) -> list[str]:
    """Generate completions of ``prompts`` with ProxyThinker (Eq. 1) and return the decoded text.

    ``base`` is stepped by ``base.generate``; ``expert`` and ``amateur`` (``None``: the
    expert-only ablation) by :class:`ProxyThinkerLogitsProcessor`. If the small models come
    with their own tokenizers, pass them: they are checked to be identical to ``tokenizer``.
    ``alpha=0`` reproduces the base model's own decoding. Extra keyword arguments go to
    ``model.generate`` (e.g. ``min_new_tokens``).
    """
    alpha = _validate_alpha(alpha)
    _validate_sampling(temperature, top_p)
    prompts = _validate_prompts(tokenizer, prompts)
    if int(max_new_tokens) < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if int(batch_size) < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if expert_tokenizer is not None:
        check_same_tokenizer(tokenizer, expert_tokenizer, ("base", "expert"))
    if amateur_tokenizer is not None:
        check_same_tokenizer(tokenizer, amateur_tokenizer, ("base", "amateur"))
    n_base = base.get_output_embeddings().weight.shape[0]
    for name, m in (("expert", expert), ("amateur", amateur)):
        if m is None:
            continue
        n = m.get_output_embeddings().weight.shape[0]
        if min(n, n_base) < len(tokenizer):
            raise ValueError(
                f"ProxyThinker needs one shared tokenizer: the {name} model has {n} output logits "
                f"and the base {n_base}, fewer than the tokenizer's {len(tokenizer)} tokens"
            )
    from iclr26.models.generation import generate

    pad_id = tokenizer.pad_token_id
    if pad_id is None:
        raise ValueError("the tokenizer needs a pad token (left padding of prompt batches); "
                         "set tokenizer.pad_token = tokenizer.eos_token")
    proc = ProxyThinkerLogitsProcessor(expert, amateur, alpha, pad_token_id=pad_id)
    return generate(base, tokenizer, list(prompts), int(max_new_tokens), do_sample=do_sample,
                    temperature=temperature, top_p=top_p, seed=seed, batch_size=int(batch_size),
                    logits_processor=[proc], **generate_kwargs)
