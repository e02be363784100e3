"""Soft Thinking and Stochastic (Gumbel-Softmax) Soft Thinking on any transformers causal LM.

Paper: Junhong Wu et al., "LLMs are Single-threaded Reasoners: Demystifying the Working Mechanism of
Soft Thinking", arXiv:2508.03440 (ICLR 2026). No official code of this paper was found; written from
the paper's description (Sec. 2 soft thinking, Sec. 4 probes, Sec. 5 stochastic soft thinking).

During the thinking phase the next input is not a sampled token but a *soft token*
``s_t = sum_i w_i E[i]`` (``E`` = input embedding matrix):
- vanilla soft thinking: ``w = p~``, the next-token distribution ``softmax(l_t / T)`` truncated to
  its top-k / top-p support and renormalised;
- Gumbel-Softmax soft thinking: ``w = softmax((log p~ + g) / tau)``, ``g_i ~ Gumbel(0, 1)`` i.i.d.
  As ``tau -> 0`` ``w`` becomes one-hot at ``argmax(log p~ + g)``, which is an exact sample from
  ``p~`` (Gumbel-max trick); ``tau`` controls how soft the randomised token is (paper default 0.5).
When the thinking phase ends (the top token of ``p~`` is an end-of-thinking token, or
``max_think_tokens`` is reached), decoding switches back to discrete tokens for the answer.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from iclr26.models.generation import forward_with_cache

__all__ = ["soft_token_weights", "gumbel_softmax_weights", "SoftThinkingOutput", "soft_thinking_generate"]

MODES = ("vanilla", "gumbel", "discrete")


def _truncate(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """``p~``: ``softmax(l / T)`` restricted to the top-k tokens, then to the top-p nucleus among
    them (top token always kept), renormalised."""
    p = torch.softmax(logits.float() / temperature, dim=-1)
    k = min(top_k, p.shape[-1])
    vals, idx = p.topk(k, dim=-1)
    before = vals.cumsum(-1) - vals
    vals = torch.where(before < top_p, vals, torch.zeros_like(vals))
    vals[..., 0] = torch.where(vals[..., 0] > 0, vals[..., 0], p.gather(-1, idx[..., :1]).squeeze(-1))
    out = torch.zeros_like(p).scatter(-1, idx, vals)
    return out / out.sum(-1, keepdim=True)


def gumbel_softmax_weights(p_tilde: torch.Tensor, tau: float, generator: torch.Generator | None = None,
                           gumbel: torch.Tensor | None = None) -> torch.Tensor:
    """``softmax((log p~ + g) / tau)`` with ``g ~ Gumbel(0, 1)`` (paper Sec. 5, Gumbel-Softmax trick).
    Tokens outside the support of ``p~`` keep weight 0. ``gumbel`` supplies the noise explicitly."""
    if not tau > 0 or tau == float("inf"):
        raise ValueError(f"tau must be a finite number > 0, got {tau!r}")
    if torch.isnan(p_tilde).any() or torch.any(p_tilde < 0) or torch.isinf(p_tilde).any():
        raise ValueError("p_tilde must hold finite non-negative probabilities (a NaN would get weight 0 "
                         "silently)")
    if not torch.any(p_tilde > 0, dim=-1).all():
        raise ValueError("p_tilde needs at least one positive probability in every row")
    if gumbel is not None and (gumbel.shape != p_tilde.shape or torch.isnan(gumbel).any()):
        raise ValueError(f"gumbel must be a NaN-free tensor of p_tilde's shape {tuple(p_tilde.shape)}")
    if gumbel is None:
        u = torch.rand(p_tilde.shape, generator=generator, dtype=torch.float32, device=p_tilde.device)
        gumbel = -torch.log(-torch.log(u.clamp(1e-20, 1.0 - 1e-7)))
    logp = torch.where(p_tilde > 0, p_tilde.clamp_min(1e-30).log(), torch.full_like(p_tilde, float("-inf")))
    return torch.softmax((logp + gumbel) / tau, dim=-1)


def soft_token_weights(logits: torch.Tensor, *, mode: str = "vanilla", temperature: float = 1.0, top_k: int = 15,
                       top_p: float = 0.95, tau: float = 0.5, generator: torch.Generator | None = None):
    """Mixture weights over the vocabulary for the next soft token; returns ``(w, p~)``.

    ``mode``: ``"vanilla"`` (``w = p~``), ``"gumbel"`` (Gumbel-Softmax of ``p~``) or ``"discrete"``
    (one-hot at ``argmax p~``: ordinary greedy decoding expressed as a soft token).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    if not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k must be a positive integer, got {top_k!r}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
    p_tilde = _truncate(logits, temperature, top_k, top_p)
    if mode == "vanilla":
        return p_tilde, p_tilde
    if mode == "gumbel":
        return gumbel_softmax_weights(p_tilde, tau, generator), p_tilde
    return torch.zeros_like(p_tilde).scatter(-1, p_tilde.argmax(-1, keepdim=True), 1.0), p_tilde


@dataclass
class SoftThinkingOutput:
    """Per prompt: ``answers`` (decoded discrete answer, prefix excluded), ``think_ids`` (top token
    of each soft token, for reading the thought), ``think_weights`` (per soft step: ``(ids, w)``
    of the support), and ``probe_logits`` (next-token logits after the soft steps in ``probe_steps``)."""

    answers: list[str]
    think_ids: list[list[int]]
    think_weights: list[list[tuple[torch.Tensor, torch.Tensor]]] = field(default_factory=list)
    probe_logits: list[dict[int, torch.Tensor]] = field(default_factory=list)


@torch.no_grad()
def soft_thinking_generate(
    model,
    tokenizer,
    prompts,
    *,
    mode: str = "vanilla",
    max_think_tokens: int = 32,
    think_end_ids=(),
    answer_prefix: str = "",
    max_answer_tokens: int = 8,
    answer_stop_ids=(),
    temperature: float = 1.0,
    top_k: int = 15,
    top_p: float = 0.95,
    tau: float = 0.5,
    seed: int | None = None,
    batch_size: int = 8,
    probe_steps=(),
    probe_max_top1: float | None = None,
    max_probes: int | None = None,
) -> SoftThinkingOutput:
    """Think with soft tokens, then answer with greedy discrete tokens.

    Thinking ends for a row when the top token of ``p~`` is in ``think_end_ids`` (that token is not
    fed) or after ``max_think_tokens`` soft tokens. Then the tokens of ``answer_prefix`` are fed
    (discrete) and up to ``max_answer_tokens`` tokens are decoded greedily, stopping at
    ``answer_stop_ids`` or the tokenizer's eos. Prompts are left-padded and batched with the KV
    cache; position ids follow the attention mask as in ``generate``.

    Probes (paper Sec. 4): the next-token logits after soft step ``k`` (1-based) are kept in
    ``probe_logits`` when ``k`` is in ``probe_steps``, or when ``probe_max_top1`` is given and the
    largest weight of soft token ``k`` is at most ``probe_max_top1`` (a genuinely mixed soft token,
    where "the top token dominates" is not automatic). ``max_probes`` caps the kept steps per row
    (the earliest are kept).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if isinstance(prompts, str):
        prompts = [prompts]
    prompts = list(prompts)
    if not prompts:
        raise ValueError("prompts is empty: give at least one prompt")
    for i, p in enumerate(prompts):
        if not isinstance(p, str):
            raise TypeError(f"prompt {i} must be a string, got {type(p).__name__}")
        if not tokenizer(p, add_special_tokens=True)["input_ids"]:
            raise ValueError(f"prompt {i} is empty ({p!r} has no tokens): each prompt needs at least one token")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
    if mode == "gumbel" and (not tau > 0 or tau == float("inf")):
        raise ValueError(f"tau must be a finite number > 0, got {tau!r}")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    if not isinstance(max_think_tokens, int) or max_think_tokens < 0:
        raise ValueError(f"max_think_tokens must be a non-negative integer, got {max_think_tokens!r}")
    if not isinstance(max_answer_tokens, int) or max_answer_tokens < 0:
        raise ValueError(f"max_answer_tokens must be a non-negative integer, got {max_answer_tokens!r}")
    if probe_max_top1 is not None and not 0 < probe_max_top1 <= 1:
        raise ValueError(f"probe_max_top1 must be None or in (0, 1], got {probe_max_top1!r}")
    if max_probes is not None and (not isinstance(max_probes, int) or max_probes < 1):
        raise ValueError(f"max_probes must be None or a positive integer, got {max_probes!r}")
    gen = torch.Generator().manual_seed(int(seed)) if seed is not None else None
    emb = model.get_input_embeddings()
    E = emb.weight
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    prefix_ids = tokenizer(answer_prefix, add_special_tokens=False)["input_ids"] if answer_prefix else []
    end_set = set(int(i) for i in think_end_ids)
    stop_set = set(int(i) for i in answer_stop_ids)
    if tokenizer.eos_token_id is not None:
        stop_set.add(int(tokenizer.eos_token_id))
    probe_steps = set(int(s) for s in probe_steps)
    out = SoftThinkingOutput([], [], [], [])
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start : start + batch_size]
        enc = [tokenizer(p, add_special_tokens=True)["input_ids"] for p in chunk]
        B, width = len(enc), max(len(e) for e in enc)
        ids = torch.full((B, width), pad, dtype=torch.long)
        mask = torch.zeros((B, width), dtype=torch.long)
        for r, e in enumerate(enc):
            ids[r, width - len(e) :] = torch.tensor(e)
            mask[r, width - len(e) :] = 1
        pos = (mask.cumsum(-1) - 1).clamp_min(0)
        res, past = forward_with_cache(model, None, input_ids=ids, attention_mask=mask, position_ids=pos)
        logits = res.logits[:, -1, :].float()
        phase = [0] * B  # 0 think, 1 answer, 2 done
        n_think = [0] * B
        queue: list[list[int]] = [[] for _ in range(B)]
        answers: list[list[int]] = [[] for _ in range(B)]
        think_ids: list[list[int]] = [[] for _ in range(B)]
        think_w: list[list] = [[] for _ in range(B)]
        probes: list[dict] = [{} for _ in range(B)]
        max_steps = max_think_tokens + len(prefix_ids) + max_answer_tokens + 1
        for _ in range(max_steps):
            # per row: decide the next input
            w_all, p_all = soft_token_weights(logits, mode=mode, temperature=temperature, top_k=top_k, top_p=top_p,
                                              tau=tau, generator=gen)
            inputs = torch.zeros(B, E.shape[1], dtype=E.dtype)
            live = torch.zeros(B, dtype=torch.long)
            for r in range(B):
                if phase[r] == 0:
                    top = int(p_all[r].argmax())
                    if top in end_set or n_think[r] >= max_think_tokens:
                        phase[r] = 1
                        queue[r] = list(prefix_ids)
                    else:
                        w = w_all[r]
                        nz = w.nonzero().squeeze(-1)
                        inputs[r] = (w[nz].to(E.dtype) @ E[nz])
                        think_ids[r].append(int(w.argmax()))
                        think_w[r].append((nz.clone(), w[nz].clone()))
                        n_think[r] += 1
                        live[r] = 1
                        continue
                if phase[r] == 1:
                    if queue[r]:
                        t = queue[r].pop(0)
                    else:
                        t = int(logits[r].argmax())
                        if t in stop_set or len(answers[r]) >= max_answer_tokens:
                            phase[r] = 2
                            continue
                        answers[r].append(t)
                    inputs[r] = E[t]
                    live[r] = 1
            if all(ph == 2 for ph in phase):
                break
            mask = torch.cat([mask, live[:, None]], dim=1)
            pos = (mask.sum(-1, keepdim=True) - 1).clamp_min(0)
            res, past = forward_with_cache(model, past, inputs_embeds=inputs[:, None, :], attention_mask=mask,
                                           position_ids=pos)
            logits = res.logits[:, -1, :].float()
            for r in range(B):
                if phase[r] != 0 or not live[r] or (max_probes is not None and len(probes[r]) >= max_probes):
                    continue
                mixed = probe_max_top1 is not None and float(think_w[r][-1][1].max()) <= probe_max_top1
                if n_think[r] in probe_steps or mixed:
                    probes[r][n_think[r]] = logits[r].clone()
        # answers of rows that ran out of steps
        for r in range(B):
            out.answers.append(tokenizer.decode(answers[r], skip_special_tokens=True))
            out.think_ids.append(think_ids[r])
            out.think_weights.append(think_w[r])
            out.probe_logits.append(probes[r])
    return out
