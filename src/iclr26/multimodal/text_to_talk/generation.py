"""Generation for TtT (block-wise diffusion of audio inside AR text decoding) and the AR baseline.

:func:`block_diffusion_generate` follows the paper's inference: text is decoded greedily, token by
token, until the model emits ``<SOA>``; then a block of ``block_size`` ``[MASK]`` tokens is appended
and unmasked over ``steps`` rounds, each round committing the most confident still-masked positions
(``block_size / steps`` per round); when a committed block holds ``<EOA>`` the span is cut right after
it and text decoding resumes, otherwise another block follows (up to ``max_audio_len`` audio tokens).
Every forward uses the modality-aware mask, so the span under construction is bidirectional.
Inside an audio span only audio tokens and ``<EOA>`` are allowed; outside one, only non-audio tokens.

:func:`ar_generate` is greedy next-token decoding with the same vocabulary rules (the pure-AR arm).
Both work on one sequence at a time (a list of prompts is decoded one by one) and recompute the full
forward each step (no KV cache: the bidirectional span changes earlier positions' states).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .objective import audio_span_ids, modality_aware_mask


@dataclass
class GenerationResult:
    sequences: list[torch.Tensor]     # generated ids after each prompt
    forward_passes: list[int]         # model calls per prompt


def _check(model, prompts, block_size, steps, max_new_tokens, max_audio_len):
    if not callable(model):
        raise TypeError("model must be a callable causal LM returning .logits")
    if isinstance(prompts, torch.Tensor):
        prompts = [prompts] if prompts.ndim == 1 else list(prompts)
    if not prompts:
        raise ValueError("prompts must hold at least one sequence")
    for p in prompts:
        if not isinstance(p, torch.Tensor) or p.ndim != 1 or p.numel() == 0 or p.dtype.is_floating_point:
            raise ValueError("each prompt must be a non-empty 1-D integer tensor")
    for name, v in (("block_size", block_size), ("steps", steps), ("max_new_tokens", max_new_tokens),
                    ("max_audio_len", max_audio_len)):
        if not isinstance(v, int) or v <= 0:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if steps > block_size:
        raise ValueError(f"steps ({steps}) must not exceed block_size ({block_size})")
    return prompts


def _allowed(vocab_size, audio_ids, eoa_id, mask_token_id, device):
    audio = torch.zeros(vocab_size, dtype=torch.bool, device=device)
    audio[audio_ids] = True
    in_audio = audio.clone()
    in_audio[eoa_id] = True
    text = ~audio
    text[mask_token_id] = False
    text[eoa_id] = False
    return in_audio, text


def _open_span(prompt, soa_id, eoa_id) -> bool:
    return bool(audio_span_ids(prompt[None], soa_id, eoa_id)[0, -1] >= 0) and int(prompt[-1]) != eoa_id


@torch.no_grad()
def block_diffusion_generate(model, prompts, *, soa_id: int, eoa_id: int, mask_token_id: int, eos_token_id: int,
                             audio_token_ids, block_size: int = 8, steps: int = 4, max_new_tokens: int = 64,
                             max_audio_len: int = 32) -> GenerationResult:
    """TtT inference: AR text, block-wise confidence-ordered unmasking of audio spans (see module doc)."""
    prompts = _check(model, prompts, block_size, steps, max_new_tokens, max_audio_len)
    out, nfe = [], []
    for prompt in prompts:
        dev = prompt.device
        seq = prompt.clone()
        calls = 0
        in_audio = text_ok = None
        # a prompt that ends inside an open audio span (e.g. with <SOA>) starts with audio
        start_in_span = _open_span(prompt, soa_id, eoa_id)
        while seq.numel() - prompt.numel() < max_new_tokens:
            if not start_in_span:
                ids = seq[None]
                logits = model(input_ids=ids, attention_mask=modality_aware_mask(audio_span_ids(ids, soa_id, eoa_id))).logits[0, -1]
                calls += 1
                if in_audio is None:
                    in_audio, text_ok = _allowed(logits.shape[-1], audio_token_ids, eoa_id, mask_token_id, dev)
                nxt = int(logits.masked_fill(~text_ok, float("-inf")).argmax())
                seq = torch.cat([seq, seq.new_tensor([nxt])])
                if nxt == eos_token_id:
                    break
                if nxt != soa_id:
                    continue
            start_in_span = False
            # ---- an audio span: blocks of masks until <EOA>
            n_audio = 0
            while True:
                start = seq.numel()
                seq = torch.cat([seq, seq.new_full((block_size,), mask_token_id)])
                per_step = [block_size // steps + (i < block_size % steps) for i in range(steps)]
                for k in per_step:
                    ids = seq[None]
                    lg = model(input_ids=ids, attention_mask=modality_aware_mask(audio_span_ids(ids, soa_id, eoa_id))).logits[0]
                    calls += 1
                    if in_audio is None:
                        in_audio, text_ok = _allowed(lg.shape[-1], audio_token_ids, eoa_id, mask_token_id, dev)
                    # logits at position i - 1 predict token i
                    block_logits = lg[start - 1: start - 1 + block_size].masked_fill(~in_audio, float("-inf"))
                    prob, tok = block_logits.softmax(-1).max(-1)
                    still = seq[start:] == mask_token_id
                    prob = prob.masked_fill(~still, -1.0)
                    k = min(k, int(still.sum()))
                    if k == 0:
                        break
                    pick = prob.topk(k).indices
                    seq[start + pick] = tok[pick]
                block = seq[start:]
                hit = (block == eoa_id).nonzero()
                if hit.numel():
                    end = start + int(hit[0]) + 1
                    n_audio += int(hit[0])
                    seq = seq[:end]
                    break
                n_audio += block_size
                if n_audio >= max_audio_len:
                    seq = torch.cat([seq[: start + block_size - (n_audio - max_audio_len)], seq.new_tensor([eoa_id])])
                    break
        out.append(seq[prompt.numel():][:max_new_tokens + max_audio_len])
        nfe.append(calls)
    return GenerationResult(out, nfe)


@torch.no_grad()
def ar_generate(model, prompts, *, soa_id: int, eoa_id: int, mask_token_id: int, eos_token_id: int,
                audio_token_ids, max_new_tokens: int = 64, max_audio_len: int = 32,
                bidirectional_input_audio: bool = False) -> GenerationResult:
    """Greedy AR decoding; audio tokens one per step. ``bidirectional_input_audio``: spans closed in
    the prompt keep the modality-aware mask (the AR control arm trained that way)."""
    prompts = _check(model, prompts, 1, 1, max_new_tokens, max_audio_len)
    out, nfe = [], []
    for prompt in prompts:
        dev = prompt.device
        seq = prompt.clone()
        n_prompt = prompt.numel()
        in_span, n_audio, calls = _open_span(prompt, soa_id, eoa_id), 0, 0
        in_audio = text_ok = None
        while seq.numel() - n_prompt < max_new_tokens + max_audio_len:
            ids = seq[None]
            if bidirectional_input_audio:
                spans = audio_span_ids(ids, soa_id, eoa_id)
                spans = torch.where(torch.arange(ids.shape[1], device=dev)[None] < n_prompt, spans, -1)
                mask = modality_aware_mask(spans)
            else:
                mask = modality_aware_mask(torch.full_like(ids, -1))
            logits = model(input_ids=ids, attention_mask=mask).logits[0, -1]
            calls += 1
            if in_audio is None:
                in_audio, text_ok = _allowed(logits.shape[-1], audio_token_ids, eoa_id, mask_token_id, dev)
            if in_span and n_audio >= max_audio_len:
                nxt = eoa_id
            else:
                nxt = int(logits.masked_fill(~(in_audio if in_span else text_ok), float("-inf")).argmax())
            seq = torch.cat([seq, seq.new_tensor([nxt])])
            if in_span:
                if nxt == eoa_id:
                    in_span = False
                else:
                    n_audio += 1
            elif nxt == soa_id:
                in_span, n_audio = True, 0
            elif nxt == eos_token_id:
                break
        out.append(seq[n_prompt:])
        nfe.append(calls)
    return GenerationResult(out, nfe)
