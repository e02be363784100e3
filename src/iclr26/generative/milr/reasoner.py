"""MILR: test-time policy gradient on the unified text and image latents of a frozen model.

"MILR: Improving Multimodal Image Generation via Test-Time Latent Reasoning", Mi, Li, Zhao, Li, Wu,
Ma, Zhu, Wu, Li (ICLR 2026; arXiv:2509.22761; code: https://github.com/spatigen/milr).

A unified autoregressive model writes reasoning text ``t`` and then image tokens ``v``. Let
``z = [z^(t); z^(v)]`` be the final-layer states just before the output heads (the state at
position ``i - 1`` gives the distribution of token ``i``). MILR keeps the weights frozen and
searches over the latents of the first ``lambda_t`` fraction of text tokens and the first
``lambda_v`` fraction of image tokens (Section 3): a token of the optimised prefix is drawn from
``softmax(head(z_i))``, the rest of the sequence is decoded autoregressively by the model, and the
critic scores the image. The latents follow REINFORCE with one sample per step (Section 3.2):

    z <- z + eta * R(v, c) * grad_z log p(t, v | z),

where only the optimised prefix depends on ``z``, so
``log p(t, v | z) = sum_{i in prefix} log softmax(head(z_i))[x_i]``. The loop stops as soon as the
critic's reward reaches the threshold (a correct image) or after ``max_steps`` updates; the output
is the best-scored sample seen. ``mode`` selects the text latents, the image latents, or both.

The model is anything exposing :class:`UnifiedLatentModel`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Protocol

import torch

MODES = ("text", "image", "both")


class UnifiedLatentModel(Protocol):
    """What :class:`LatentReasoner` needs from a unified text+image autoregressive model.

    ``n_text`` / ``n_image``: how many text (reasoning) and image tokens one sample holds.
    ``head(modality, z)``: the logits of the ``"text"`` or ``"image"`` output head on latents ``z``.
    ``continue_sequences(prompts, text_prefix, image_prefix, generator=None, temperature=1.0)``:
    sample the text after ``text_prefix`` (B, kt) to ``n_text`` tokens, then the image after
    ``image_prefix`` (B, kv) to ``n_image`` tokens; return ``(text, image, z_text, z_image)`` where
    ``z_text`` (B, n_text, d) and ``z_image`` (B, n_image, d) are the final-layer latents from which
    each token was predicted. Empty prefixes give the model's own sample (how MILR starts). A
    Janus-style model implements it with its language head, its image-generation head and a
    decode loop that accepts forced prefix tokens.
    """

    n_text: int
    n_image: int

    def head(self, modality: str, z: torch.Tensor) -> torch.Tensor: ...

    def continue_sequences(self, prompts, text_prefix, image_prefix, generator=None, temperature=1.0): ...


def n_optimised(ratio: float, length: int) -> int:
    """Number of leading tokens optimised: ``floor(ratio * length)``, at least one.

    The paper's ratios (``lambda_t = 0.2``, ``lambda_v = 0.02``) are for hundreds of tokens; on a
    short sequence the product rounds to zero, so at least one token is kept (a deviation).
    """
    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"ratio must lie in (0, 1], got {ratio!r}")
    if length < 1:
        raise ValueError(f"length must be a positive number of tokens, got {length!r}")
    return max(1, min(length, int(math.floor(ratio * length + 1e-9))))


def prefix_log_prob(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """``sum_i log softmax(logits_i / temperature)[tokens_i]`` over the prefix: (B, k, V), (B, k) -> (B,)."""
    logp = torch.log_softmax(logits / temperature, -1)
    return logp.gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1).sum(-1)


def reinforce_step(z: torch.Tensor, reward: torch.Tensor, log_prob: Callable[[torch.Tensor], torch.Tensor],
                   lr: float) -> torch.Tensor:
    """One REINFORCE ascent step ``z + lr * R * grad_z log p(x | z)`` per sample (Section 3.2).

    ``z`` (B, ...) holds one latent block per sample, ``reward`` (B,), ``log_prob(z) -> (B,)``.
    Samples are independent, so the gradient of ``sum_b R_b log p_b`` is each sample's own term.
    """
    z = z.detach().requires_grad_(True)
    with torch.enable_grad():
        (g,) = torch.autograd.grad((reward.detach().to(z.dtype) * log_prob(z)).sum(), z)
    return (z + lr * g).detach()


@dataclass
class MILRResult:
    """Output of :meth:`LatentReasoner.generate`, one row per prompt.

    ``text``/``image``: the best-scored sample; ``reward``: its reward; ``calls``: critic calls
    used; ``solved``: reward reached the threshold; ``rewards``: per-call rewards (list per prompt).
    """

    text: torch.Tensor
    image: torch.Tensor
    reward: torch.Tensor
    calls: torch.Tensor
    solved: torch.Tensor
    rewards: list = field(default_factory=list)


class LatentReasoner:
    """MILR test-time latent reasoning (arXiv:2509.22761, Section 3) for a :class:`UnifiedLatentModel`.

    Parameters (defaults with their source):
    ``reward_fn(prompts, text, image) -> (B,)`` the critic (higher is better);
    ``text_ratio = 0.2`` (lambda_t) and ``image_ratio = 0.02`` (lambda_v): the paper's values (the
    official README script uses 0.1 / 0.01); ``lr = 0.03`` (eta): the paper's value (README script:
    0.01); ``max_steps = 30``: the official README script (``max_*_steps=30``), so at most
    ``1 + max_steps`` critic calls; ``mode``: ``"text"``, ``"image"`` or ``"both"`` (paper default:
    both); ``reward_threshold = 0.0``: stop once a sample's reward reaches it (with
    :func:`~iclr26.generative.milr.scenes.scene_reward`, a correct scene); ``temperature = 1.0``: of
    every sampled token.
    """

    def __init__(self, model: UnifiedLatentModel, reward_fn: Callable, text_ratio: float = 0.2,
                 image_ratio: float = 0.02, lr: float = 0.03, max_steps: int = 30, mode: str = "both",
                 reward_threshold: float = 0.0, temperature: float = 1.0):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if not (isinstance(max_steps, int) and max_steps >= 0):
            raise ValueError(f"max_steps must be a non-negative integer, got {max_steps!r}")
        if not (lr >= 0.0 and math.isfinite(lr)):
            raise ValueError(f"lr must be a finite number >= 0, got {lr!r}")
        if not temperature > 0.0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        self.kt = n_optimised(text_ratio, model.n_text) if mode in ("text", "both") else 0
        self.kv = n_optimised(image_ratio, model.n_image) if mode in ("image", "both") else 0
        self.model, self.reward_fn, self.mode = model, reward_fn, mode
        self.text_ratio, self.image_ratio, self.lr, self.max_steps = text_ratio, image_ratio, lr, max_steps
        self.reward_threshold, self.temperature = reward_threshold, temperature

    def _log_prob(self, zt, zv, tt, tv):
        T, lp = self.temperature, 0.0
        if self.kt:
            lp = lp + prefix_log_prob(self.model.head("text", zt), tt, T)
        if self.kv:
            lp = lp + prefix_log_prob(self.model.head("image", zv), tv, T)
        return lp

    def _sample_prefix(self, modality, z, generator):
        probs = torch.softmax(self.model.head(modality, z) / self.temperature, -1)
        return torch.multinomial(probs.flatten(0, 1), 1, generator=generator).view(z.shape[:2])

    @torch.no_grad()
    def generate(self, prompts, generator: torch.Generator | None = None) -> MILRResult:
        """Run MILR on a batch of prompts (each prompt has its own latents, updates and stopping)."""
        m, kt, kv, T = self.model, self.kt, self.kv, self.temperature
        B = len(prompts)
        text, image, zt_all, zv_all = m.continue_sequences(prompts, torch.zeros(B, 0), torch.zeros(B, 0),
                                                           generator=generator, temperature=T)
        reward = torch.as_tensor(self.reward_fn(prompts, text, image), dtype=torch.float32).reshape(B)
        zt, zv = zt_all[:, :kt].clone(), zv_all[:, :kv].clone()
        fixed_text = text.clone()                       # image mode keeps the first reasoning text
        cur_t, cur_v, cur_r = text[:, :kt].clone(), image[:, :kv].clone(), reward.clone()
        best_t, best_i, best_r = text.clone(), image.clone(), reward.clone()
        calls = torch.ones(B, dtype=torch.long)
        history = [[float(r)] for r in reward]
        solved = reward >= self.reward_threshold
        for _ in range(self.max_steps):
            act = torch.nonzero(~solved).flatten()
            if len(act) == 0:
                break
            z = torch.cat([zt[act].flatten(1), zv[act].flatten(1)], 1)
            d = zt.shape[-1]

            def log_prob(zz, a=act):
                return self._log_prob(zz[:, :kt * d].view(len(a), kt, d), zz[:, kt * d:].view(len(a), kv, d),
                                      cur_t[a], cur_v[a])

            z = reinforce_step(z, cur_r[act], log_prob, self.lr)
            zt[act] = z[:, :kt * d].view(len(act), kt, d)
            zv[act] = z[:, kt * d:].view(len(act), kv, d)
            tp = self._sample_prefix("text", zt[act], generator) if kt else fixed_text[act]
            vp = self._sample_prefix("image", zv[act], generator) if kv else torch.zeros(len(act), 0)
            pa = [prompts[i] for i in act.tolist()] if isinstance(prompts, list) else prompts[act.numpy()]
            t_new, v_new, _, _ = m.continue_sequences(pa, tp, vp, generator=generator, temperature=T)
            r_new = torch.as_tensor(self.reward_fn(pa, t_new, v_new), dtype=torch.float32).reshape(len(act))
            calls[act] += 1
            cur_t[act], cur_v[act], cur_r[act] = t_new[:, :kt], v_new[:, :kv], r_new
            better = r_new > best_r[act]
            idx = act[better]
            best_t[idx], best_i[idx], best_r[idx] = t_new[better], v_new[better], r_new[better]
            for j, i in enumerate(act.tolist()):
                history[i].append(float(r_new[j]))
            solved[act] = r_new >= self.reward_threshold
        return MILRResult(best_t, best_i, best_r, calls, best_r >= self.reward_threshold, history)


@torch.no_grad()
def best_of_n(model: UnifiedLatentModel, reward_fn: Callable, prompts, n: int, temperature: float = 1.0,
              generator: torch.Generator | None = None, reward_threshold: float = 0.0) -> MILRResult:
    """Best-of-N: ``n`` independent samples per prompt, the best-scored one returned (``n`` critic calls;
    like MILR it stops at the first sample whose reward reaches ``reward_threshold``, which changes
    no outcome, only the calls counted)."""
    if not (isinstance(n, int) and n >= 1):
        raise ValueError(f"n must be a positive integer, got {n!r}")
    B = len(prompts)
    best_t = best_i = best_r = None
    calls = torch.zeros(B, dtype=torch.long)
    history = [[] for _ in range(B)]
    for _ in range(n):
        t, v, _, _ = model.continue_sequences(prompts, torch.zeros(B, 0), torch.zeros(B, 0),
                                              generator=generator, temperature=temperature)
        r = torch.as_tensor(reward_fn(prompts, t, v), dtype=torch.float32).reshape(B)
        if best_r is None:
            best_t, best_i, best_r, solved = t.clone(), v.clone(), r.clone(), torch.zeros(B, dtype=torch.bool)
        else:
            better = (r > best_r) & ~solved
            best_t[better], best_i[better], best_r[better] = t[better], v[better], r[better]
        calls += (~solved).long()
        for i in torch.nonzero(~solved).flatten().tolist():
            history[i].append(float(r[i]))
        solved = best_r >= reward_threshold
    return MILRResult(best_t, best_i, best_r, calls, solved, history)
