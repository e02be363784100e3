"""MILR: test-time policy gradient on the unified text and image latents of a frozen model.

"MILR: Improving Multimodal Image Generation via Test-Time Latent Reasoning", Mi, Li, Zhao, Li, Wu,
Ma, Zhu, Wu, Li (ICLR 2026; arXiv:2509.22761; code: https://github.com/spatigen/milr).

A unified autoregressive model writes reasoning text ``t`` and then image tokens ``v``. Let
``z = [z^(t); z^(v)]`` be the final-layer states just before the output heads (the state at
position ``i - 1`` gives the distribution of token ``i``). MILR keeps the weights frozen and
searches over the latents of the first ``lambda_t`` fraction of text tokens and the first
``lambda_v`` fraction of image tokens (Section 3): a token of the optimised prefix is read from
``softmax(head(z_i))``, the rest of the sequence is decoded autoregressively by the model, and the
critic scores the image. The latents follow the policy gradient of the critic's reward (Section 3.2),

    z <- z + eta * R(v, c) * grad_z log p(t, v | z),

where only the optimised prefix depends on ``z``, so
``log p(t, v | z) = sum_{i in prefix} log softmax(head(z_i))[x_i]``. As in the official code
(https://github.com/miyapeng/MILR, src/opt_generation_janus.py), the default takes Adam steps on
the loss ``-R log p`` and scores / decodes the argmax tokens of the current latents, with greedy
reasoning text; the plain step and fully sampled REINFORCE are options (``optimizer="sgd"``,
``decoding="sample"``). The loop stops as soon as the critic's reward reaches the threshold or
after ``max_steps`` updates; the output is the best-scored sample seen. ``mode`` selects the text
latents, the image latents, or both.

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
    ``continue_sequences(prompts, text_prefix, image_prefix, generator=None, temperature=1.0,
    greedy_text=False)``: decode the text after ``text_prefix`` (B, kt) to ``n_text`` tokens (sampled,
    or argmax tokens when ``greedy_text``), then sample the image after
    ``image_prefix`` (B, kv) to ``n_image`` tokens; return ``(text, image, z_text, z_image)`` where
    ``z_text`` (B, n_text, d) and ``z_image`` (B, n_image, d) are the final-layer latents from which
    each token was predicted. Empty prefixes give the model's own sample (how MILR starts). A
    Janus-style model implements it with its language head, its image-generation head and a
    decode loop that accepts forced prefix tokens.
    """

    n_text: int
    n_image: int

    def head(self, modality: str, z: torch.Tensor) -> torch.Tensor: ...

    def continue_sequences(self, prompts, text_prefix, image_prefix, generator=None, temperature=1.0,
                           greedy_text=False): ...


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


def policy_gradient(z: torch.Tensor, reward: torch.Tensor, log_prob: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """``R * grad_z log p(x | z)`` per sample (Section 3.2), the ascent direction of every update.

    ``z`` (B, ...) holds one latent block per sample, ``reward`` (B,), ``log_prob(z) -> (B,)``.
    Samples are independent, so the gradient of ``sum_b R_b log p_b`` is each sample's own term.
    """
    z = z.detach().requires_grad_(True)
    with torch.enable_grad():
        (g,) = torch.autograd.grad((reward.detach().to(z.dtype) * log_prob(z)).sum(), z)
    return g


def reinforce_step(z: torch.Tensor, reward: torch.Tensor, log_prob: Callable[[torch.Tensor], torch.Tensor],
                   lr: float) -> torch.Tensor:
    """One plain REINFORCE ascent step ``z + lr * R * grad_z log p(x | z)`` per sample (Section 3.2)."""
    return (z.detach() + lr * policy_gradient(z, reward, log_prob)).detach()


@dataclass
class MILRResult:
    """Output of :meth:`LatentReasoner.generate`, one row per prompt.

    ``text``/``image``: the best-scored sample; ``reward``: its reward; ``calls``: critic calls
    used; ``solved``: reward reached the threshold; ``rewards``: per-call rewards (list per prompt);
    ``moves``: per update, the total variation between the optimised prefix distributions before and
    after it (mean over prefix tokens; list per prompt), how far one update moves the policy.
    """

    text: torch.Tensor
    image: torch.Tensor
    reward: torch.Tensor
    calls: torch.Tensor
    solved: torch.Tensor
    rewards: list = field(default_factory=list)
    moves: list = field(default_factory=list)


OPTIMIZERS = ("adam", "sgd")
DECODINGS = ("argmax", "sample")
# official code, https://github.com/miyapeng/MILR (the code of spatigen/milr), src/opt_generation_janus.py at
# commit d71fd713: ``torch.optim.Adam([optimized_states], lr=lr)`` (text branch l.188; image and joint
# branches the same), PyTorch's default betas and eps
ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8


def check_prompts(prompts) -> int:
    """Number of prompts; a clear error for an empty batch (nothing to decode, no reward to read)."""
    try:
        n = len(prompts)
    except TypeError:
        raise ValueError(f"prompts must be a non-empty sequence or array, got {type(prompts).__name__}") from None
    if n == 0:
        raise ValueError("prompts must be a non-empty batch (got 0 prompts)")
    return n


def check_rewards(reward, n: int) -> torch.Tensor:
    """The critic's output as a (n,) float32 tensor; NaN / inf or a wrong shape is an error.

    A NaN reward would silently freeze the latents (Adam turns a NaN gradient into NaN latents) or
    never stop the loop, so it is rejected where it appears.
    """
    r = torch.as_tensor(reward, dtype=torch.float32)
    if r.numel() != n:
        raise ValueError(f"reward_fn must return one reward per prompt ({n}), got shape {tuple(r.shape)}")
    r = r.reshape(n)
    if not torch.isfinite(r).all():
        bad = torch.nonzero(~torch.isfinite(r)).flatten()[:5].tolist()
        raise ValueError(f"reward_fn returned non-finite rewards (NaN or inf) for prompts {bad}")
    return r


class RowAdam:
    """Adam on a (B, D) block of latents with one step counter per row.

    The update is PyTorch's ``torch.optim.Adam`` (no weight decay, no amsgrad) minimising the
    official loss ``-R * log pi`` (opt_generation_janus.py, text branch ``loss = - current_reward *
    log_pi.sum()``), i.e. ascending ``R log pi``. Each prompt owns its row; prompts stop at
    different steps, so the bias corrections use each row's own count (a single
    ``torch.optim.Adam`` over the batch would advance the count of stopped rows too).
    """

    def __init__(self, shape, lr: float, betas=ADAM_BETAS, eps: float = ADAM_EPS, dtype=torch.float32):
        self.lr, self.betas, self.eps = lr, betas, eps
        self.m = torch.zeros(shape, dtype=dtype)
        self.v = torch.zeros(shape, dtype=dtype)
        self.t = torch.zeros(shape[0], dtype=torch.long)

    def step(self, z: torch.Tensor, ascent_grad: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """New values of ``z`` (the rows ``rows`` of the block) after one step along ``ascent_grad``."""
        b1, b2 = self.betas
        g = -ascent_grad.to(self.m.dtype)                       # gradient of the loss -R log pi
        self.t[rows] += 1
        t = self.t[rows].to(self.m.dtype).unsqueeze(1)
        m = self.m[rows] * b1 + (1 - b1) * g
        v = self.v[rows] * b2 + (1 - b2) * g * g
        self.m[rows], self.v[rows] = m, v
        denom = (v.sqrt() / (1 - b2 ** t).sqrt()) + self.eps
        return (z - (self.lr / (1 - b1 ** t)) * m / denom).detach()


class LatentReasoner:
    """MILR test-time latent reasoning (arXiv:2509.22761, Section 3) for a :class:`UnifiedLatentModel`.

    Parameters (defaults with their source; "official" is src/opt_generation_janus.py and
    src/main_janus.py of https://github.com/miyapeng/MILR, the code of spatigen/milr, at commits
    d71fd713 / e04cfd86):

    ``reward_fn(prompts, text, image) -> (B,)`` the critic (higher is better; must be finite);
    ``text_ratio = 0.2`` (lambda_t) and ``image_ratio = 0.02`` (lambda_v): the paper's values
    (official defaults ``text_k = 0.1``, ``image_k = 0.01``, opt_generation_janus.py l.112-113);
    ``lr = 0.03`` (eta): the paper's value (official default 0.01, opt_generation_janus.py l.110,
    main_janus.py l.31); ``max_steps = 30``: the official README script (``max_*_steps=30``), so at
    most ``1 + max_steps`` critic calls; ``mode``: ``"text"``, ``"image"`` or ``"both"`` (paper
    default: both); ``reward_threshold = 0.0``: stop once a sample's reward reaches it (official:
    ``if current_reward > reward_threshold: break`` with -0.1, l.196; with
    :func:`~iclr26.generative.milr.scenes.scene_reward` 0 is a correct scene); ``temperature = 1.0``:
    of every sampled token (official ``temperature = 1.0``, l.120).

    ``optimizer = "adam"`` (default): ``torch.optim.Adam([optimized_states], lr=lr)`` as the
    official code (l.188 text branch; the image and joint branches likewise; PyTorch's default
    betas (0.9, 0.999) and eps 1e-8), one state per prompt (:class:`RowAdam`); ``"sgd"``: the plain
    step ``z + lr * R * grad log p`` as Section 3.2 writes it (:func:`reinforce_step`).

    ``decoding = "argmax"`` (default), as the official code: the log-probability in the loss is
    that of the argmax token of the current latents (``next_token_ids = torch.argmax(probs)``,
    l.203, image branch likewise); the text prefix is the argmax of the updated latents (l.219)
    and the rest of the text is decoded greedily (l.233; the first reasoning text is greedy too,
    ori_generation_janus.py); the image prefix is sampled from the updated latents and the rest of
    the image is sampled (``torch.multinomial``, image branch), as is the first image.
    ``"sample"``: every token is sampled and the loss uses the sampled prefix tokens (REINFORCE as
    Section 3.2 writes it).
    """

    def __init__(self, model: UnifiedLatentModel, reward_fn: Callable, text_ratio: float = 0.2,
                 image_ratio: float = 0.02, lr: float = 0.03, max_steps: int = 30, mode: str = "both",
                 reward_threshold: float = 0.0, temperature: float = 1.0, optimizer: str = "adam",
                 decoding: str = "argmax"):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
        if decoding not in DECODINGS:
            raise ValueError(f"decoding must be one of {DECODINGS}, got {decoding!r}")
        if not (isinstance(max_steps, int) and max_steps >= 0):
            raise ValueError(f"max_steps must be a non-negative integer, got {max_steps!r}")
        if not (lr >= 0.0 and math.isfinite(lr)):
            raise ValueError(f"lr must be a finite number >= 0, got {lr!r}")
        if not temperature > 0.0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        if not math.isfinite(reward_threshold):
            raise ValueError(f"reward_threshold must be finite, got {reward_threshold!r}")
        self.kt = n_optimised(text_ratio, model.n_text) if mode in ("text", "both") else 0
        self.kv = n_optimised(image_ratio, model.n_image) if mode in ("image", "both") else 0
        self.model, self.reward_fn, self.mode = model, reward_fn, mode
        self.text_ratio, self.image_ratio, self.lr, self.max_steps = text_ratio, image_ratio, lr, max_steps
        self.reward_threshold, self.temperature = reward_threshold, temperature
        self.optimizer, self.decoding = optimizer, decoding

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

    def _argmax_prefix(self, modality, z):
        return self.model.head(modality, z).argmax(-1)

    def _prefix_probs(self, zt, zv):
        out = []
        if self.kt:
            out.append(torch.softmax(self.model.head("text", zt) / self.temperature, -1))
        if self.kv:
            out.append(torch.softmax(self.model.head("image", zv) / self.temperature, -1))
        return out

    @torch.no_grad()
    def generate(self, prompts, generator: torch.Generator | None = None) -> MILRResult:
        """Run MILR on a batch of prompts (each prompt has its own latents, updates and stopping)."""
        m, kt, kv, T = self.model, self.kt, self.kv, self.temperature
        B = check_prompts(prompts)
        greedy = self.decoding == "argmax"
        text, image, zt_all, zv_all = m.continue_sequences(prompts, torch.zeros(B, 0), torch.zeros(B, 0),
                                                           generator=generator, temperature=T, greedy_text=greedy)
        reward = check_rewards(self.reward_fn(prompts, text, image), B)
        zt, zv = zt_all[:, :kt].clone(), zv_all[:, :kv].clone()
        d = zt.shape[-1]
        adam = RowAdam((B, (kt + kv) * d), self.lr, dtype=zt.dtype) if self.optimizer == "adam" else None
        fixed_text = text.clone()                       # image mode keeps the first reasoning text
        cur_t, cur_v, cur_r = text[:, :kt].clone(), image[:, :kv].clone(), reward.clone()
        best_t, best_i, best_r = text.clone(), image.clone(), reward.clone()
        calls = torch.ones(B, dtype=torch.long)
        history = [[float(r)] for r in reward]
        moves = [[] for _ in range(B)]
        solved = reward >= self.reward_threshold
        for _ in range(self.max_steps):
            act = torch.nonzero(~solved).flatten()
            if len(act) == 0:
                break
            z = torch.cat([zt[act].flatten(1), zv[act].flatten(1)], 1)
            if greedy:                                  # the loss scores the argmax tokens of the current latents
                tok_t = self._argmax_prefix("text", zt[act]) if kt else cur_t[act]
                tok_v = self._argmax_prefix("image", zv[act]) if kv else cur_v[act]
            else:                                       # REINFORCE: the tokens that were sampled
                tok_t, tok_v = cur_t[act], cur_v[act]
            before = self._prefix_probs(zt[act], zv[act])

            def log_prob(zz, a=act, tt=tok_t, tv=tok_v):
                return self._log_prob(zz[:, :kt * d].view(len(a), kt, d), zz[:, kt * d:].view(len(a), kv, d), tt, tv)

            if adam is None:
                z = reinforce_step(z, cur_r[act], log_prob, self.lr)
            else:
                z = adam.step(z, policy_gradient(z, cur_r[act], log_prob), act)
            zt[act] = z[:, :kt * d].view(len(act), kt, d)
            zv[act] = z[:, kt * d:].view(len(act), kv, d)
            after = self._prefix_probs(zt[act], zv[act])
            tv_moved = torch.stack([0.5 * (a - b).abs().sum(-1).mean(-1) for a, b in zip(after, before)]).mean(0)
            if kt:
                tp = self._argmax_prefix("text", zt[act]) if greedy else self._sample_prefix("text", zt[act], generator)
            else:
                tp = fixed_text[act]
            vp = self._sample_prefix("image", zv[act], generator) if kv else torch.zeros(len(act), 0)
            pa = [prompts[i] for i in act.tolist()] if isinstance(prompts, list) else prompts[act.numpy()]
            t_new, v_new, _, _ = m.continue_sequences(pa, tp, vp, generator=generator, temperature=T,
                                                      greedy_text=greedy)
            r_new = check_rewards(self.reward_fn(pa, t_new, v_new), len(act))
            calls[act] += 1
            cur_t[act], cur_v[act], cur_r[act] = t_new[:, :kt], v_new[:, :kv], r_new
            better = r_new > best_r[act]
            idx = act[better]
            best_t[idx], best_i[idx], best_r[idx] = t_new[better], v_new[better], r_new[better]
            for j, i in enumerate(act.tolist()):
                history[i].append(float(r_new[j]))
                moves[i].append(float(tv_moved[j]))
            solved[act] = r_new >= self.reward_threshold
        return MILRResult(best_t, best_i, best_r, calls, best_r >= self.reward_threshold, history, moves)


@torch.no_grad()
def best_of_n(model: UnifiedLatentModel, reward_fn: Callable, prompts, n: int, temperature: float = 1.0,
              generator: torch.Generator | None = None, reward_threshold: float = 0.0,
              greedy_text: bool = False) -> MILRResult:
    """Best-of-N: ``n`` independent samples per prompt, the best-scored one returned (``n`` critic calls;
    like MILR it stops at the first sample whose reward reaches ``reward_threshold``, which changes
    no outcome, only the calls counted). ``greedy_text``: decode the reasoning text greedily (as MILR's
    argmax mode starts) and sample only the image."""
    if not (isinstance(n, int) and n >= 1):
        raise ValueError(f"n must be a positive integer, got {n!r}")
    if not temperature > 0.0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    B = check_prompts(prompts)
    best_t = best_i = best_r = None
    calls = torch.zeros(B, dtype=torch.long)
    history = [[] for _ in range(B)]
    for _ in range(n):
        t, v, _, _ = model.continue_sequences(prompts, torch.zeros(B, 0), torch.zeros(B, 0),
                                              generator=generator, temperature=temperature, greedy_text=greedy_text)
        r = check_rewards(reward_fn(prompts, t, v), B)
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
