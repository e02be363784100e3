"""Parallel Token Prediction (Draxler, Will, Marouf Sofian, Karaletsos, Singh, Mandt; ICLR 2026,
arXiv:2512.21323, OpenReview AGJomYSrUG; official code github.com/mandt-lab/ptp).

Sampling a token from P_i = P(. | t_<i) with an auxiliary uniform u_i ~ U[0, 1] is the inverse CDF
(paper, Sec. 2, "Pick")

    t_i = Pick(u_i, P_i) = min { j : sum_{l <= j} P_il > u_i }.

Given u_i, t_i is a deterministic function of the context, so t_k is a deterministic function
f(t_<i; u_i, ..., u_k) of the context and the auxiliaries (Theorem 1, O-PTP). A PTP model reads the
context tokens followed by K auxiliary slots whose input embeddings encode u_i, ..., u_{i+K-1}; the
output of slot j predicts t_{i+j} (argmax: one-hot PTP, O-PTP) in the same, single forward call.

Training (Sec. 3): the student minimises cross-entropy on tokens whose auxiliaries are consistent
with the teacher, u_j ~ U[F_j(t_j - 1), F_j(t_j)) where F_j is the teacher's CDF at position j
(:func:`sample_auxiliaries`; on teacher-sampled text this is distillation, on data text the
inverse-autoregressive training of Sec. 3.2 with the teacher's distribution).

Exact decoding (Sec. 4, speculative use): the PTP proposal d_0..d_{K-1} is verified in one teacher
call by recomputing t_j = Pick(u_j, P_teacher(. | seq, d_<j)) with the same u; the longest prefix
with d_j = t_j is accepted plus the teacher's own token at the first mismatch (or after the last
draft). Every output token is Pick(u_n, P_teacher(. | all earlier outputs)), so the output equals
token for token plain autoregressive inverse-CDF sampling of the teacher with the same u stream
(:func:`ar_sample`), i.e. it is distributed exactly as the teacher's samples.

Architecture defaults follow the official code (``src/ptp/transformer.py``, ``MixedTransformerModel``
and ``src/ptp/auxiliary_embed.py``): auxiliary embedding = linear interpolation between 3 learned
anchor vectors (``LinearInterpolationEmbedding(num_embeddings=3)``, the default adapter), auxiliary
slot j placed at position id T - 1 + j (``shift_positions=True``).
"""
from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from iclr26.models.speculative import SpecStats, target_forward

__all__ = [
    "pick", "token_intervals", "sample_auxiliaries", "AuxiliaryEmbedding", "PTPConfig", "PTPForCausalLM",
    "ptp_loss", "train_ptp", "ar_sample", "verify_ptp", "ptp_generate",
]


# --------------------------------------------------------------------------------------------------
# the sampling map
# --------------------------------------------------------------------------------------------------
def _check_probs(probs: torch.Tensor) -> torch.Tensor:
    if not torch.is_tensor(probs) or probs.dim() < 1 or probs.shape[-1] < 1:
        raise ValueError("probs must be a tensor (..., V) of probabilities over V >= 1 tokens")
    if not torch.isfinite(probs).all() or (probs < 0).any():
        raise ValueError("probs must be finite and non-negative")
    return probs


def _check_u(u: torch.Tensor, name: str = "u") -> torch.Tensor:
    u = torch.as_tensor(u)
    if not u.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor of values in [0, 1), got dtype {u.dtype}")
    if not torch.isfinite(u).all() or (u < 0).any() or (u >= 1).any():
        raise ValueError(f"{name} must lie in [0, 1) (auxiliary uniforms), got values outside it")
    return u


def pick(u: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
    """Pick(u, P) = min{j : sum_{l<=j} P_l > u} (paper, Sec. 2): the inverse CDF of the categorical
    ``probs`` (..., V) at ``u`` (...) in [0, 1). ``probs`` need not be normalised (it is divided by
    its sum). Returns a LongTensor of the shape of ``u``."""
    probs = _check_probs(probs)
    u = _check_u(u)
    if u.shape != probs.shape[:-1]:
        raise ValueError(f"u must have shape probs.shape[:-1] = {tuple(probs.shape[:-1])}, got {tuple(u.shape)}")
    p = probs.double()
    cdf = p.cumsum(-1)
    total = cdf[..., -1:]
    if (total <= 0).any():
        raise ValueError("probs must have a positive sum over the last axis")
    idx = torch.searchsorted((cdf / total).contiguous(), u.double()[..., None].contiguous(), right=True)[..., 0]
    return idx.clamp(max=probs.shape[-1] - 1)


def token_intervals(probs: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The interval [F(t - 1), F(t)) of u that Pick maps to ``tokens`` under ``probs`` (..., V)."""
    probs = _check_probs(probs)
    tokens = torch.as_tensor(tokens, dtype=torch.long)
    if tokens.shape != probs.shape[:-1]:
        raise ValueError(f"tokens must have shape probs.shape[:-1] = {tuple(probs.shape[:-1])}, got {tuple(tokens.shape)}")
    if (tokens < 0).any() or (tokens >= probs.shape[-1]).any():
        raise ValueError(f"tokens must be ids in [0, {probs.shape[-1]})")
    p = probs.double()
    cdf = p.cumsum(-1) / p.sum(-1, keepdim=True)
    hi = cdf.gather(-1, tokens[..., None])[..., 0]
    lo = hi - (p / p.sum(-1, keepdim=True)).gather(-1, tokens[..., None])[..., 0]
    return lo.clamp(min=0.0), hi.clamp(max=1.0)


def sample_auxiliaries(probs: torch.Tensor, tokens: torch.Tensor, generator: torch.Generator | None = None,
                       concentration: float | None = None) -> torch.Tensor:
    """u = F(t - 1) + r (F(t) - F(t - 1)): auxiliaries consistent with ``tokens`` under ``probs`` (paper,
    Sec. 3.2; official code ``sample_auxiliaries`` in ``src/ptp/lit.py``), so that Pick(u, probs) = tokens.

    ``concentration=None``: r ~ U[0, 1) (the official evaluation draw). ``concentration=a``:
    r ~ Beta(a, a), which puts the auxiliaries near the edges of each token's interval (the official
    training draw uses a = 0.3); drawn as the Beta inverse CDF of the generator's uniforms, so a seeded
    generator gives the same auxiliaries. float64; values of zero-probability tokens are the left edge
    of their (empty) interval."""
    lo, hi = token_intervals(probs, tokens)
    r = torch.rand(lo.shape, generator=generator, dtype=torch.float64)
    if concentration is not None:
        if isinstance(concentration, bool) or not isinstance(concentration, (int, float)) \
                or not 0 < concentration < float("inf"):
            raise ValueError(f"concentration must be a finite number > 0 or None, got {concentration!r}")
        from scipy.special import betaincinv

        r = torch.from_numpy(betaincinv(float(concentration), float(concentration), r.numpy()))
    u = lo + r * (hi - lo)
    # keep u strictly inside [lo, hi) and inside [0, 1) despite rounding
    return torch.minimum(u, torch.nextafter(hi, torch.zeros_like(hi))).clamp(0.0, 1.0 - 1e-12)


# --------------------------------------------------------------------------------------------------
# the model
# --------------------------------------------------------------------------------------------------
class AuxiliaryEmbedding(nn.Module):
    """Embeds u in [0, 1] as a hidden-size vector. ``kind="linear"``: linear interpolation between
    ``num_anchors`` learned vectors placed at u = 0, 1/(n-1), ..., 1 (official code
    ``LinearInterpolationEmbedding``, its default adapter, 3 anchors). ``kind="cos"``: a linear map of
    the features cos(pi f u), f = 1..``num_anchors`` (official code ``QuarterCosEmbedding``, 32
    frequencies). ``kind="bins"``: one learned vector per bin [b/n, (b+1)/n) of u (official code
    ``RoundingEmbedding``, 32 bins)."""

    def __init__(self, hidden_size: int, num_anchors: int = 3, kind: str = "linear"):
        super().__init__()
        for k, v in (("hidden_size", hidden_size), ("num_anchors", num_anchors)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{k} must be a positive integer, got {v!r}")
        if kind not in ("linear", "cos", "bins"):
            raise ValueError(f"kind must be 'linear', 'cos' or 'bins', got {kind!r}")
        self.kind = kind
        self.anchors = nn.Embedding(num_anchors, hidden_size)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        n = self.anchors.num_embeddings
        if not torch.is_tensor(u) or not u.is_floating_point():
            raise ValueError("u must be a floating-point tensor")
        if not torch.isfinite(u).all() or (u < 0).any() or (u > 1).any():
            raise ValueError("u must lie in [0, 1]")
        w = self.anchors.weight
        if self.kind == "bins":
            idx = (u.to(torch.float64) * n).floor().long().clamp(max=n - 1)
            return self.anchors(idx)
        if self.kind == "cos":
            f = torch.arange(1, n + 1, dtype=w.dtype, device=w.device)
            return torch.cos(math.pi * f * u.to(w.dtype)[..., None]) @ w
        if n == 1:
            return w[0].expand(*u.shape, -1)
        s = u.to(w.dtype) * (n - 1)
        lower = s.floor().long().clamp(max=n - 1)
        upper = (lower + 1).clamp(max=n - 1)
        frac = (s - lower.to(s.dtype))[..., None]
        return self.anchors(lower) * (1 - frac) + self.anchors(upper) * frac


@dataclass
class PTPConfig:
    """``num_anchors``, ``embedding``: size and kind of :class:`AuxiliaryEmbedding` (official default:
    linear interpolation, 3 anchors).
    ``independent``: the control without auxiliary inputs (the slots receive the embedding of a
    constant u = 1/2, so each slot can only learn the marginal P(t_{i+j} | t_<i), as independent
    multi-token heads do); its proposals are Pick(u_j, marginal_j) instead of the argmax."""

    num_anchors: int = 3
    independent: bool = False
    embedding: str = "linear"

    def __post_init__(self):
        if isinstance(self.num_anchors, bool) or not isinstance(self.num_anchors, int) or self.num_anchors < 1:
            raise ValueError(f"PTPConfig.num_anchors must be a positive integer, got {self.num_anchors!r}")
        if self.embedding not in ("linear", "cos", "bins"):
            raise ValueError(f"PTPConfig.embedding must be 'linear', 'cos' or 'bins', got {self.embedding!r}")
        if not isinstance(self.independent, bool):
            raise ValueError(f"PTPConfig.independent must be a bool, got {self.independent!r}")


class PTPForCausalLM(nn.Module):
    """A transformers causal LM turned into a parallel token predictor (O-PTP).

    ``forward(input_ids, u)`` runs the context ``input_ids`` (B, T) followed by K = u.shape[1]
    auxiliary slots embedded from ``u`` (B, K) in one call and returns the slot logits (B, K, V):
    slot j predicts t_{T+j}. ``generate_parallel`` turns them into K tokens. The wrapped ``model``
    (e.g. a copy of the teacher, as the paper's distilled students are) is owned and trained; its
    ``state_dict`` holds ``model.*`` and ``aux_embed.*``."""

    def __init__(self, model, config: PTPConfig | None = None):
        super().__init__()
        if not (hasattr(model, "get_input_embeddings") and hasattr(model, "config")):
            raise TypeError(f"model must be a transformers causal LM, got {type(model).__name__}")
        self.model = model
        self.config = config or PTPConfig()
        self.aux_embed = AuxiliaryEmbedding(model.config.hidden_size, self.config.num_anchors, self.config.embedding)
        with torch.no_grad():   # start the anchors at the scale of the token embeddings
            std = float(model.get_input_embeddings().weight.std())
            std = std if std > 0 else 0.02
            if self.config.embedding == "cos":   # sum of num_anchors features of size ~1/sqrt(2)
                std = std * math.sqrt(2.0 / self.config.num_anchors)
            self.aux_embed.anchors.weight.normal_(0.0, std)

    @classmethod
    def from_teacher(cls, teacher, config: PTPConfig | None = None) -> "PTPForCausalLM":
        """A student initialised as a copy of ``teacher`` (the teacher itself is not modified)."""
        return cls(copy.deepcopy(teacher), config)

    def forward(self, input_ids: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        if input_ids.dim() != 2 or input_ids.shape[1] < 1:
            raise ValueError(f"input_ids must be (batch, length >= 1), got shape {tuple(input_ids.shape)}")
        if u.dim() != 2 or u.shape[0] != input_ids.shape[0] or u.shape[1] < 1:
            raise ValueError(f"u must be (batch, K >= 1) with the batch of input_ids {input_ids.shape[0]}, "
                             f"got shape {tuple(u.shape)}")
        B, T = input_ids.shape
        K = u.shape[1]
        if self.config.independent:
            u = torch.full_like(u, 0.5)
        tok = self.model.get_input_embeddings()(input_ids)
        aux = self.aux_embed(u).to(tok.dtype)
        pos = torch.cat([torch.arange(T), T - 1 + torch.arange(K)]).to(input_ids.device)[None].expand(B, -1)
        # an explicit all-ones mask: without one, transformers reads the repeated position id T - 1
        # as the start of a packed sequence and would hide the context from the slots
        mask = torch.ones(B, T + K, dtype=torch.long, device=input_ids.device)
        out = self.model(inputs_embeds=torch.cat([tok, aux], 1), position_ids=pos, attention_mask=mask,
                         use_cache=False)
        return out.logits[:, T:]

    @torch.no_grad()
    def generate_parallel(self, input_ids: torch.Tensor, num_tokens: int | None = None, u: torch.Tensor | None = None,
                          generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``num_tokens`` future tokens after each row of ``input_ids`` (B, T) in one forward call.
        ``u`` (B, K): the auxiliaries (drawn from ``generator`` when None). Returns ``(tokens, u)``.
        O-PTP: tokens = argmax of the slot logits; the independent control: Pick(u_j, softmax)."""
        ids = torch.as_tensor(input_ids, dtype=torch.long)
        if ids.dim() == 1:
            ids = ids[None]
        if u is None:
            if isinstance(num_tokens, bool) or not isinstance(num_tokens, int) or num_tokens < 1:
                raise ValueError(f"num_tokens must be a positive integer, got {num_tokens!r}")
            u = torch.rand(ids.shape[0], num_tokens, generator=generator, dtype=torch.float64)
        u = _check_u(u).reshape(ids.shape[0], -1)
        if num_tokens is not None and u.shape[1] != num_tokens:
            raise ValueError(f"u has {u.shape[1]} columns but num_tokens = {num_tokens}")
        logits = self(ids, u).float()
        if self.config.independent:
            return pick(u, torch.softmax(logits, -1)), u
        return logits.argmax(-1), u


# --------------------------------------------------------------------------------------------------
# training
# --------------------------------------------------------------------------------------------------
def ptp_loss(ptp: PTPForCausalLM, sequences: torch.Tensor, u: torch.Tensor, start: int, k: int) -> torch.Tensor:
    """O-PTP training loss (paper, Sec. 3): the mean cross-entropy of the K = ``k`` slot predictions
    after the context ``sequences[:, :start]`` against the tokens ``sequences[:, start:start+k]``,
    given their auxiliaries ``u[:, start:start+k]`` (consistent with the teacher, see
    :func:`sample_auxiliaries`)."""
    B, L = sequences.shape
    if u.shape != sequences.shape:
        raise ValueError(f"u must have the shape of sequences {tuple(sequences.shape)}, got {tuple(u.shape)}")
    if not 1 <= start or not 1 <= k or start + k > L:
        raise ValueError(f"need 1 <= start, 1 <= k and start + k <= length ({L}); got start={start}, k={k}")
    logits = ptp(sequences[:, :start], u[:, start:start + k])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), sequences[:, start:start + k].reshape(-1))


@torch.no_grad()
def _teacher_probs(teacher, sequences: torch.Tensor, batch_size: int = 64, temperature: float = 1.0) -> torch.Tensor:
    """P_teacher(t_n | t_<n) for n >= 1 of every row (N, L, V); row position 0 is a placeholder."""
    out = []
    for i in range(0, len(sequences), batch_size):
        _, lg = target_forward(teacher, sequences[i: i + batch_size])
        p = torch.softmax(lg.float() / temperature, -1)
        out.append(torch.cat([torch.full_like(p[:, :1], 1.0 / p.shape[-1]), p[:, :-1]], 1))
    return torch.cat(out)


def train_ptp(ptp: PTPForCausalLM, teacher, sequences: torch.Tensor, steps: int, *, k: int = 8, batch_size: int = 32,
              lr: float = 1e-3, min_context: int = 2, seed: int = 0, temperature: float = 1.0,
              clip_grad: float | None = 1.0, aux_concentration: float | None = None) -> list[float]:
    """Train ``ptp`` (AdamW, ``steps`` steps) with :func:`ptp_loss` on ``sequences`` (N, L): each step
    draws ``batch_size`` rows and a context length ``start`` in [min_context, L - k]; the auxiliaries
    are drawn inside the teacher's CDF interval of each token (u = F(t-1) + r (F(t) - F(t-1)), fresh
    every step), so the student learns the teacher's Pick map. ``aux_concentration=None`` (default)
    draws r uniformly; ``aux_concentration=a`` draws r ~ Beta(a, a), and 0.3 is the official training
    step (``src/ptp/lit.py``, ``sample_auxiliaries`` with ``eval=False``). The default stays uniform:
    with Beta(0.3, 0.3) draws a small student learns the interior of each bin, where the uniform
    evaluation draws fall, more slowly (0.54 against above 0.6 held-out slot accuracy after 240 steps
    on the test teacher). Batches, starts and auxiliaries come from a
    generator seeded by ``seed`` (arms trained with one seed see the same data). Returns the losses."""
    for name, v in (("steps", steps), ("k", k), ("batch_size", batch_size), ("min_context", min_context)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if sequences.dim() != 2 or sequences.shape[1] < min_context + k:
        raise ValueError(f"sequences must be (N, L) with L >= min_context + k = {min_context + k}, "
                         f"got shape {tuple(sequences.shape)}")
    probs = _teacher_probs(teacher, sequences, temperature=temperature)
    g = torch.Generator().manual_seed(seed)
    params = [p for p in ptp.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr)
    L = sequences.shape[1]
    losses = []
    ptp.train()
    for _ in range(steps):
        idx = torch.randint(0, len(sequences), (batch_size,), generator=g)
        start = int(torch.randint(min_context, L - k + 1, (1,), generator=g))
        seq = sequences[idx, : start + k]
        u = torch.zeros(seq.shape, dtype=torch.float64)
        u[:, start:] = sample_auxiliaries(probs[idx, start: start + k], seq[:, start:], generator=g,
                                          concentration=aux_concentration)
        loss = ptp_loss(ptp, seq, u, start, k)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip_grad is not None:
            nn.utils.clip_grad_norm_(params, clip_grad)
        opt.step()
        losses.append(float(loss.detach()))
    ptp.eval()
    return losses


# --------------------------------------------------------------------------------------------------
# decoding
# --------------------------------------------------------------------------------------------------
def _prompt(ids) -> torch.Tensor:
    t = torch.as_tensor(ids, dtype=torch.long)
    if t.dim() == 2 and t.shape[0] == 1:
        t = t[0]
    if t.dim() != 1 or t.numel() < 1:
        raise ValueError(f"the prompt must be a non-empty 1-D sequence of token ids, got shape {tuple(t.shape)}")
    return t


def _n(v, name):
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")
    return v


@torch.no_grad()
def ar_sample(teacher, ids: torch.Tensor, u: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Autoregressive inverse-CDF sampling: t_n = Pick(u_n, P_teacher(. | prompt, t_<n)), one teacher
    call per token (the reference that PTP decoding reproduces). ``ids`` (B, T) or (T,), ``u``
    (B, N) or (N,) with values in [0, 1). Returns (B, N) (or (N,))."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    squeeze = torch.as_tensor(ids).dim() == 1
    ids = torch.as_tensor(ids, dtype=torch.long).reshape(-1, torch.as_tensor(ids).shape[-1])
    u = _check_u(u).reshape(ids.shape[0], -1)
    seq = ids
    for n in range(u.shape[1]):
        _, lg = target_forward(teacher, seq)
        t = pick(u[:, n], torch.softmax(lg[:, -1].float() / temperature, -1))
        seq = torch.cat([seq, t[:, None]], 1)
    out = seq[:, ids.shape[1]:]
    return out[0] if squeeze else out


def verify_ptp(teacher_probs: torch.Tensor, draft: torch.Tensor, u: torch.Tensor) -> tuple[int, list[int]]:
    """Exact verification of a PTP proposal (paper, Sec. 4). ``teacher_probs`` (K+1, V): the teacher's
    distributions at the K drafted positions and after them (one call on prompt + draft); ``draft``
    (K,); ``u`` (K+1,) the auxiliaries of these K+1 positions. t_j = Pick(u_j, P_j); the longest
    prefix with draft_j = t_j is accepted, followed by t at the first mismatch (or t_K if all
    match). Returns ``(n_accepted, tokens)``, ``len(tokens) = n_accepted + 1``."""
    K = draft.shape[0]
    if teacher_probs.dim() != 2 or teacher_probs.shape[0] != K + 1 or u.shape != (K + 1,):
        raise ValueError(f"need teacher_probs (K+1, V) and u (K+1,) for K={K} draft tokens; got "
                         f"{tuple(teacher_probs.shape)} and {tuple(u.shape)}")
    t = pick(u, teacher_probs).tolist()
    out: list[int] = []
    for j in range(K):
        out.append(int(t[j]))
        if int(draft[j]) != t[j]:
            return j, out
    out.append(int(t[K]))
    return K, out


@torch.no_grad()
def ptp_generate(teacher, ptp: PTPForCausalLM, ids, max_new_tokens: int, *, k: int = 8, u: torch.Tensor | None = None,
                 generator: torch.Generator | None = None, temperature: float = 1.0,
                 eos_token_id: int | None = None) -> tuple[list[int], SpecStats]:
    """Sample ``max_new_tokens`` tokens of ``teacher`` after the prompt ``ids`` with PTP proposals of
    ``k`` tokens verified exactly (:func:`verify_ptp`). Output token n uses the auxiliary u[n]
    (drawn from ``generator`` when ``u`` is None), so the output equals ``ar_sample(teacher, ids,
    u[:max_new_tokens])``. Each cycle costs one PTP call and one teacher call. Returns
    ``(tokens, stats)`` with ``stats.accepted`` (accepted drafts per teacher call),
    ``stats.target_calls`` (teacher calls) and ``stats.draft_steps`` (PTP calls)."""
    max_new_tokens = _n(max_new_tokens, "max_new_tokens")
    k = _n(k, "k")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    seq = _prompt(ids)
    if u is None:
        u = torch.rand(max_new_tokens + k + 1, generator=generator, dtype=torch.float64)
    u = _check_u(u).reshape(-1)
    if u.numel() < max_new_tokens + k + 1:
        u = torch.cat([u, torch.rand(max_new_tokens + k + 1 - u.numel(), generator=generator, dtype=torch.float64)])
    t0 = time.perf_counter()
    stats = SpecStats()
    out: list[int] = []
    while len(out) < max_new_tokens and not (eos_token_id is not None and out and out[-1] == eos_token_id):
        n = len(out)
        uk = u[n: n + k + 1]
        draft, _ = ptp.generate_parallel(seq[None], k, u=uk[None, :k])
        stats.draft_steps += 1
        stats.drafted += k
        _, lg = target_forward(teacher, torch.cat([seq, draft[0]])[None])
        stats.target_calls += 1
        p = torch.softmax(lg[0, len(seq) - 1:].float() / temperature, -1)
        acc, toks = verify_ptp(p, draft[0], uk)
        stats.accepted.append(acc)
        if eos_token_id is not None and eos_token_id in toks:
            toks = toks[: toks.index(eos_token_id) + 1]
        toks = toks[: max_new_tokens - n]
        out.extend(toks)
        seq = torch.cat([seq, seq.new_tensor(toks)])
        stats.new_tokens += len(toks)
    stats.wall_s = time.perf_counter() - t0
    return out, stats
