"""Speculative decoding: chain and tree drafting, exact greedy and sampling verification, acceptance
accounting, and EAGLE-style draft heads that read a target's hidden states.

Shared by the speculative-decoding papers (``iclr26.decoding.repspec``, ``gto``, ``ptp``). Everything
works on any transformers causal LM whose ``get_decoder()`` returns the final (post-norm) hidden
states and whose ``get_output_embeddings()`` maps them to logits (Llama, Qwen2, SmolLM2 and the tiny
Llama of :mod:`iclr26.models.tiny`).

Sources:
- speculative sampling: Leviathan, Kalman, Matias, "Fast Inference from Transformers via
  Speculative Decoding", ICML 2023 (arXiv:2211.17192), Algorithm 1 and Theorem 3.8; Chen et al.,
  "Accelerating LLM Decoding with Speculative Sampling" (arXiv:2302.01318), Algorithm 2;
- draft heads on target features: Li, Wei, Zhang, Zhang, "EAGLE: Speculative Sampling Requires
  Rethinking Feature Uncertainty", ICML 2024 (arXiv:2401.15077), Sec. 4 (input = target feature of
  position t concatenated with the embedding of token t+1, an FC layer 2d -> d, one decoder layer,
  the target's frozen LM head; loss = SmoothL1 regression of the next feature + w_cls * CE);
- dynamic draft trees: Li et al., "EAGLE-2" (arXiv:2406.16858), Sec. 4 (expand the top-k nodes of
  each layer by global path score = product of draft probabilities, then rerank all drafted nodes
  and keep the top ``total_tokens``).

Design choices (stated, hardware-independent):
- Every forward recomputes the whole sequence (no KV cache): exactness is easier to see, and the
  sizes here (tiny targets, SmolLM2-135M, contexts of a few hundred tokens) make it cheap.
- A draft tree is verified in one target call by batching its root-to-leaf paths (one row per
  leaf, right-padded; with a causal mask the padding never affects a real position). This gives
  the same accepted tokens as tree attention; it costs more FLOPs, which the cost model, counting
  target calls, does not charge.
- The accounting follows EAGLE's convention: ``tau`` (mean accepted length) is the number of tokens
  produced per verification call, i.e. accepted draft tokens + the target's own (bonus) token.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

import torch
from torch import nn
from torch.nn import functional as F

__all__ = [
    "SpecStats", "DraftTree", "Drafter", "LMDrafter", "EagleDrafter", "DraftHeadConfig", "EagleDraftHead",
    "target_forward", "greedy_decode", "draft_tree", "draft_chain", "verify_greedy", "verify_sampling",
    "residual_distribution", "speculative_generate", "expected_speedup", "expected_tokens_per_call",
    "target_features", "draft_head_loss", "train_draft_head", "markov_target", "acceptance_profile",
]


# --------------------------------------------------------------------------------------------------
# target access
# --------------------------------------------------------------------------------------------------
def target_forward(target, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(hidden, logits)`` of ``target`` on ``ids`` (B, T): the final post-norm hidden states
    (B, T, d) and the logits (B, T, V) = LM head(hidden). No KV cache; causal attention, so
    right-padding never changes an earlier position."""
    if ids.dim() != 2:
        raise ValueError(f"ids must be a (batch, length) LongTensor, got shape {tuple(ids.shape)}")
    hidden = target.get_decoder()(input_ids=ids).last_hidden_state
    logits = target.get_output_embeddings()(hidden)
    return hidden, logits


@torch.no_grad()
def greedy_decode(target, ids: Sequence[int] | torch.Tensor, max_new_tokens: int,
                  eos_token_id: int | None = None) -> list[int]:
    """Plain greedy decoding, one target call per token (the reference that exact speculative
    verification must reproduce token by token)."""
    seq = _as_ids(ids)
    out: list[int] = []
    for _ in range(_positive_int(max_new_tokens, "max_new_tokens")):
        _, logits = target_forward(target, seq[None])
        t = int(logits[0, -1].argmax())
        out.append(t)
        seq = torch.cat([seq, seq.new_tensor([t])])
        if eos_token_id is not None and t == eos_token_id:
            break
    return out


def _as_ids(ids) -> torch.Tensor:
    t = torch.as_tensor(ids, dtype=torch.long)
    if t.dim() == 2 and t.shape[0] == 1:
        t = t[0]
    if t.dim() != 1 or t.numel() < 1:
        raise ValueError(f"ids must be a non-empty 1-D sequence of token ids (or shape (1, T)), got shape {tuple(t.shape)}")
    return t


def _positive_int(v, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")
    return v


# --------------------------------------------------------------------------------------------------
# drafters
# --------------------------------------------------------------------------------------------------
class Drafter(Protocol):
    """What the tree builder needs from a draft model.

    ``start(ids, feats)`` opens a drafting cycle after the verified sequence ``ids`` (T,), with the
    target's hidden states ``feats`` (T-1, d) of all its positions but the last (the target has not
    processed the last, freshly verified token yet). ``expand(paths, states)`` returns the draft's
    next-token log-probabilities (B, V) after each drafted path (B, m) and the states of the
    extended nodes (passed back when their children are expanded)."""

    needs_features: bool

    def start(self, ids: torch.Tensor, feats: torch.Tensor | None) -> None: ...

    def expand(self, paths: torch.Tensor, states) -> tuple[torch.Tensor, object]: ...


class LMDrafter:
    """A separate draft LM with the target's vocabulary (the classic speculative-decoding draft)."""

    needs_features = False

    def __init__(self, model, temperature: float = 1.0):
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        self.model = model
        self.temperature = float(temperature)
        self._ids = None

    def start(self, ids, feats=None):
        self._ids = ids

    @torch.no_grad()
    def expand(self, paths, states=None):
        rows = torch.cat([self._ids[None].expand(paths.shape[0], -1), paths], dim=1)
        logits = self.model(input_ids=rows).logits[:, -1].float()
        return torch.log_softmax(logits / self.temperature, -1), None


@dataclass
class DraftHeadConfig:
    """Shape of an EAGLE-style draft head (EAGLE-1, Sec. 4: one decoder layer)."""

    hidden_size: int
    num_attention_heads: int = 4
    intermediate_size: int | None = None      # default 4 * hidden_size // 2 (SwiGLU, Llama-style)
    num_layers: int = 1
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6

    def __post_init__(self):
        for k in ("hidden_size", "num_attention_heads", "num_layers"):
            _positive_int(getattr(self, k), f"DraftHeadConfig.{k}")
        if self.hidden_size % self.num_attention_heads or (self.hidden_size // self.num_attention_heads) % 2:
            raise ValueError(f"hidden_size ({self.hidden_size}) must be divisible by num_attention_heads "
                             f"({self.num_attention_heads}) into an even head dimension")
        if self.intermediate_size is None:
            self.intermediate_size = 2 * self.hidden_size
        _positive_int(self.intermediate_size, "DraftHeadConfig.intermediate_size")


class _RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def _rope(x: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary position embedding (rotate-half convention, as in Llama) over the length axis -2."""
    T, hd = x.shape[-2], x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float32, device=x.device) / hd)
    ang = torch.arange(T, dtype=torch.float32, device=x.device)[:, None] * inv[None]
    cos, sin = torch.cat([ang.cos()] * 2, -1).to(x.dtype), torch.cat([ang.sin()] * 2, -1).to(x.dtype)
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class DraftBlock(nn.Module):
    """One Llama-style decoder layer (pre-RMSNorm, causal multi-head attention with RoPE, SwiGLU MLP).
    Its linear maps are plain ``nn.Linear`` attributes named as in transformers' Llama
    (q/k/v/o_proj, gate/up/down_proj), so layer-rewriting methods (re-parameterisation, LoRA) find
    them by name."""

    def __init__(self, cfg: DraftHeadConfig):
        super().__init__()
        d, f = cfg.hidden_size, cfg.intermediate_size
        self.cfg = cfg
        self.input_norm = _RMSNorm(d, cfg.rms_norm_eps)
        self.post_norm = _RMSNorm(d, cfg.rms_norm_eps)
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.gate_proj, self.up_proj = nn.Linear(d, f, bias=False), nn.Linear(d, f, bias=False)
        self.down_proj = nn.Linear(f, d, bias=False)

    def forward(self, x):
        B, T, d = x.shape
        H = self.cfg.num_attention_heads
        h = self.input_norm(x)
        q, k, v = (p(h).view(B, T, H, d // H).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        q, k = _rope(q, self.cfg.rope_theta), _rope(k, self.cfg.rope_theta)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, d)
        x = x + self.o_proj(a)
        h = self.post_norm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class EagleDraftHead(nn.Module):
    """EAGLE draft head (EAGLE-1, Sec. 4): at position t the input is the target feature f_t
    concatenated with the embedding of token x_{t+1}; ``fc`` (2d -> d) and ``num_layers`` decoder
    layers give g_t, the prediction of f_{t+1}; the target's own (frozen) LM head turns g_t into
    the distribution of x_{t+2}.

    The target's embedding and LM head are used but not owned: they are not parameters of the head
    and not in its ``state_dict`` (build with :meth:`from_target`)."""

    def __init__(self, config: DraftHeadConfig, embed: nn.Module, lm_head: nn.Module):
        super().__init__()
        self.config = config
        d = config.hidden_size
        self.fc = nn.Linear(2 * d, d, bias=True)
        self.layers = nn.ModuleList(DraftBlock(config) for _ in range(config.num_layers))
        self._frozen = (embed, lm_head)   # a tuple: not registered as submodules

    @classmethod
    def from_target(cls, target, **config) -> "EagleDraftHead":
        d = target.config.hidden_size
        cfg = DraftHeadConfig(hidden_size=d, **config)
        return cls(cfg, target.get_input_embeddings(), target.get_output_embeddings())

    def embed(self, tokens):
        with torch.no_grad():
            return self._frozen[0](tokens)

    def lm_head(self, g):
        return self._frozen[1](g)

    def forward(self, feats: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """``feats`` (B, T, d), ``tokens`` (B, T): the pairs (f_t, x_{t+1}); returns g (B, T, d)."""
        if feats.dim() != 3 or tokens.shape != feats.shape[:2]:
            raise ValueError(f"feats must be (B, T, d) and tokens (B, T) with the same B, T; got "
                             f"{tuple(feats.shape)} and {tuple(tokens.shape)}")
        if feats.shape[-1] != self.config.hidden_size:
            raise ValueError(f"feature size {feats.shape[-1]} != the head's hidden_size {self.config.hidden_size}")
        x = self.fc(torch.cat([feats, self.embed(tokens).to(feats.dtype)], -1))
        for layer in self.layers:
            x = layer(x)
        return x


class EagleDrafter:
    """Drafting with an :class:`EagleDraftHead`: the verified positions use the target's features,
    the drafted positions the head's own predicted features (EAGLE-1, Sec. 4, Fig. 6)."""

    needs_features = True

    def __init__(self, head: EagleDraftHead, temperature: float = 1.0):
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        self.head = head
        self.temperature = float(temperature)

    def start(self, ids, feats):
        if feats is None or feats.shape[0] != ids.shape[0] - 1:
            raise ValueError("EagleDrafter needs the target features of all verified positions but the last")
        self._tok = ids[1:]
        self._feats = feats

    @torch.no_grad()
    def expand(self, paths, states):
        B, m = paths.shape
        if states is None:
            states = self._feats.new_zeros(B, 0, self._feats.shape[-1])
        feats = torch.cat([self._feats[None].expand(B, -1, -1), states], 1)
        toks = torch.cat([self._tok[None].expand(B, -1), paths], 1)
        g = self.head(feats, toks)[:, -1]
        logits = self.head.lm_head(g).float()
        return torch.log_softmax(logits / self.temperature, -1), torch.cat([states, g[:, None]], 1)


# --------------------------------------------------------------------------------------------------
# drafting
# --------------------------------------------------------------------------------------------------
@dataclass
class DraftTree:
    """Drafted tokens as a tree: node i holds ``tokens[i]``, its ``parents[i]`` (-1 = the root, i.e.
    the verified sequence), ``depths[i]`` (1 = a child of the root) and ``scores[i]`` (the sum of the
    draft log-probabilities along its path). Nodes are ordered parents first. ``q[i]`` holds the
    draft distribution the node was drawn from (chain sampling only)."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    depths: list[int] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    q: list[torch.Tensor] | None = None
    steps: int = 0                     # sequential draft forwards used to build it

    def __len__(self):
        return len(self.tokens)

    def path(self, i: int) -> list[int]:
        out = []
        while i >= 0:
            out.append(self.tokens[i])
            i = self.parents[i]
        return out[::-1]

    def leaves(self) -> list[int]:
        has_child = set(p for p in self.parents if p >= 0)
        return [i for i in range(len(self)) if i not in has_child]

    def paths(self) -> list[list[int]]:
        """Root-to-leaf token paths (every drafted node lies on at least one)."""
        return [self.path(i) for i in self.leaves()]


def draft_tree(drafter: Drafter, ids: torch.Tensor, feats: torch.Tensor | None, depth: int, topk: int,
               total_tokens: int) -> DraftTree:
    """EAGLE-2 dynamic draft tree (Sec. 4.1-4.2 of arXiv:2406.16858).

    Expansion: layer 1 holds the top-``topk`` children of the root; at every later layer the
    ``topk`` nodes of the previous layer with the highest global score (sum of draft
    log-probabilities along the path) are expanded, each into its top-``topk`` children, in one
    batched draft forward. Reranking: of all drafted nodes the ``total_tokens`` with the highest
    score are kept (ties: shallower first, so every kept node's parent is kept: a child's score never
    exceeds its parent's). ``topk=1, total_tokens=depth`` is a greedy chain.
    """
    depth, topk, total_tokens = (_positive_int(depth, "depth"), _positive_int(topk, "topk"),
                                 _positive_int(total_tokens, "total_tokens"))
    drafter.start(ids, feats)
    cand_tok, cand_par, cand_dep, cand_score = [], [], [], []
    frontier = [-1]                       # node indices (-1 = root)
    f_paths = ids.new_zeros(1, 0)
    f_states = None
    f_scores = torch.zeros(1)
    steps = 0
    for d in range(1, depth + 1):
        logp, states = drafter.expand(f_paths, f_states)
        steps += 1
        k = min(topk, logp.shape[-1])
        top = logp.topk(k, dim=-1)
        child_scores = (f_scores[:, None] + top.values.cpu()).reshape(-1)
        base = len(cand_tok)
        for r, parent in enumerate(frontier):
            for j in range(k):
                cand_tok.append(int(top.indices[r, j]))
                cand_par.append(parent)
                cand_dep.append(d)
                cand_score.append(float(child_scores[r * k + j]))
        if d == depth:
            break
        nxt = torch.argsort(-child_scores, stable=True)[:topk]
        frontier = [base + int(i) for i in nxt]
        rows = nxt // k
        f_paths = torch.cat([f_paths[rows], top.indices.reshape(-1)[nxt][:, None].to(ids)], 1)
        f_states = states[rows] if states is not None else None
        f_scores = child_scores[nxt]
    order = sorted(range(len(cand_tok)), key=lambda i: (-cand_score[i], cand_dep[i], i))
    kept: list[int] = []
    kept_set = set()
    for i in order:
        if len(kept) == total_tokens:
            break
        if cand_par[i] == -1 or cand_par[i] in kept_set:
            kept.append(i)
            kept_set.add(i)
    kept.sort(key=lambda i: (cand_dep[i], i))
    remap = {old: new for new, old in enumerate(kept)}
    tree = DraftTree(steps=steps)
    for i in kept:
        tree.tokens.append(cand_tok[i])
        tree.parents.append(-1 if cand_par[i] == -1 else remap[cand_par[i]])
        tree.depths.append(cand_dep[i])
        tree.scores.append(cand_score[i])
    return tree


def draft_chain(drafter: Drafter, ids: torch.Tensor, feats: torch.Tensor | None, depth: int, *,
                sample: bool = False, generator: torch.Generator | None = None) -> DraftTree:
    """A chain of ``depth`` draft tokens: greedy (argmax) or sampled from the draft distribution
    (whose rows are kept in ``tree.q`` for speculative sampling)."""
    depth = _positive_int(depth, "depth")
    drafter.start(ids, feats)
    tree = DraftTree(q=[] if sample else None)
    paths, states, score = ids.new_zeros(1, 0), None, 0.0
    for d in range(depth):
        logp, states = drafter.expand(paths, states)
        tree.steps += 1
        if sample:
            p = logp[0].exp()
            t = int(torch.multinomial(p, 1, generator=generator))
            tree.q.append(p)
        else:
            t = int(logp[0].argmax())
        score += float(logp[0, t])
        tree.tokens.append(t)
        tree.parents.append(d - 1)
        tree.depths.append(d + 1)
        tree.scores.append(score)
        paths = torch.cat([paths, paths.new_tensor([[t]])], 1)
    return tree


# --------------------------------------------------------------------------------------------------
# verification
# --------------------------------------------------------------------------------------------------
def verify_greedy(logits_rows: torch.Tensor, paths: torch.Tensor, lengths: Sequence[int]) -> tuple[int, int, list[int]]:
    """Exact greedy verification of drafted paths.

    ``logits_rows`` (R, m+1, V): the target's logits at the last verified position and at each
    drafted position of row r; ``paths`` (R, m) the drafted tokens (right-padded), ``lengths`` the
    true path lengths. A drafted token is accepted while it equals the target's argmax at its
    position. Returns ``(row, n_accepted, tokens)``: the row with the longest accepted prefix (the
    first one on ties), the number of accepted draft tokens, and the tokens to append: the
    accepted ones followed by the target's own argmax after them (the bonus token)."""
    if logits_rows.dim() != 3 or paths.dim() != 2 or logits_rows.shape[:2] != (paths.shape[0], paths.shape[1] + 1):
        raise ValueError(f"logits_rows must be (R, m+1, V) for paths (R, m); got {tuple(logits_rows.shape)} "
                         f"and {tuple(paths.shape)}")
    greedy = logits_rows.argmax(-1)                              # (R, m+1)
    best_row, best_n = 0, -1
    for r in range(paths.shape[0]):
        n = 0
        while n < lengths[r] and int(paths[r, n]) == int(greedy[r, n]):
            n += 1
        if n > best_n:
            best_row, best_n = r, n
    toks = [int(t) for t in paths[best_row, :best_n]] + [int(greedy[best_row, best_n])]
    return best_row, best_n, toks


def residual_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)) (Leviathan et al. 2023, Algorithm 1), the distribution a rejected draft
    token is replaced from; equals p where the residual mass is zero (p == q)."""
    r = (p - q).clamp_min(0)
    s = r.sum(-1, keepdim=True)
    return torch.where(s > 0, r / s.clamp_min(1e-30), p)


def verify_sampling(p: torch.Tensor, q: torch.Tensor, draft: Sequence[int],
                    generator: torch.Generator | None = None) -> tuple[int, list[int]]:
    """Speculative sampling (Leviathan et al. 2023, Algorithm 1; Chen et al. 2023, Algorithm 2).

    ``p`` (m+1, V): target distributions at the m drafted positions and after them; ``q`` (m, V):
    the draft distributions the m ``draft`` tokens were sampled from. Token x_i is accepted with
    probability min(1, p_i(x_i) / q_i(x_i)); at the first rejection a token is drawn from
    norm(max(0, p_i - q_i)) and drafting stops; if all are accepted one more token is drawn from
    p_m. The output is distributed exactly as sampling from p token by token. Returns
    ``(n_accepted, tokens)``."""
    m = len(draft)
    if p.shape[0] != m + 1 or q.shape[0] != m or p.shape[-1] != q.shape[-1]:
        raise ValueError(f"need p of shape (m+1, V) and q of shape (m, V) for m={m} draft tokens; "
                         f"got {tuple(p.shape)} and {tuple(q.shape)}")
    out: list[int] = []
    for i, x in enumerate(draft):
        u = float(torch.rand((), generator=generator))
        px, qx = float(p[i, x]), float(q[i, x])
        if qx > 0 and u < min(1.0, px / qx):
            out.append(int(x))
            continue
        r = residual_distribution(p[i], q[i])
        out.append(int(torch.multinomial(r, 1, generator=generator)))
        return i, out
    out.append(int(torch.multinomial(p[m], 1, generator=generator)))
    return m, out


# --------------------------------------------------------------------------------------------------
# the decoding loop and its accounting
# --------------------------------------------------------------------------------------------------
@dataclass
class SpecStats:
    """Acceptance accounting of one or more speculative generations.

    ``accepted[i]``: draft tokens accepted by verification call i; ``target_calls`` counts every
    target forward including the prefill (which yields one token); ``draft_steps``: sequential
    draft forwards (a batched expansion of one tree layer counts once)."""

    accepted: list[int] = field(default_factory=list)
    target_calls: int = 0
    draft_steps: int = 0
    new_tokens: int = 0
    drafted: int = 0                   # draft tokens submitted for verification
    wall_s: float = 0.0

    @property
    def cycles(self) -> int:
        return len(self.accepted)

    @property
    def mean_accepted_length(self) -> float:
        """tau (EAGLE convention): tokens produced per verification call = accepted draft tokens + 1."""
        return 1.0 + sum(self.accepted) / self.cycles if self.cycles else float("nan")

    @property
    def tokens_per_target_forward(self) -> float:
        """Generated tokens per target forward, prefill included (plain decoding gives 1)."""
        return self.new_tokens / self.target_calls if self.target_calls else float("nan")

    @property
    def acceptance_rate(self) -> float:
        """Accepted / drafted draft tokens."""
        return sum(self.accepted) / self.drafted if self.drafted else float("nan")

    def merge(self, other: "SpecStats") -> "SpecStats":
        return SpecStats(self.accepted + other.accepted, self.target_calls + other.target_calls,
                         self.draft_steps + other.draft_steps, self.new_tokens + other.new_tokens,
                         self.drafted + other.drafted, self.wall_s + other.wall_s)

    def expected_speedup(self, cost_ratio: float) -> float:
        """Expected speed-up over plain decoding under the cost model of :func:`expected_speedup`,
        with this run's tau and its mean number of sequential draft forwards per call."""
        steps = self.draft_steps / self.cycles if self.cycles else 0.0
        return expected_speedup(self.mean_accepted_length, steps, cost_ratio)


def expected_speedup(tokens_per_call: float, draft_steps_per_call: float, cost_ratio: float) -> float:
    """Expected wall-time speed-up over plain decoding (Leviathan et al. 2023, Theorem 3.8):
    tokens per verification call / (1 + c * draft forwards per call), where c is the cost of one
    draft forward relative to one target forward, and a verification call (of any width) costs one
    target forward (the memory-bound regime the method is built for)."""
    if cost_ratio < 0:
        raise ValueError(f"cost_ratio must be >= 0, got {cost_ratio!r}")
    if draft_steps_per_call < 0 or not tokens_per_call >= 1:
        raise ValueError("tokens_per_call must be >= 1 and draft_steps_per_call >= 0, got "
                         f"{tokens_per_call!r} and {draft_steps_per_call!r}")
    return tokens_per_call / (1.0 + cost_ratio * draft_steps_per_call)


def expected_tokens_per_call(alpha: float, gamma: int) -> float:
    """E[tokens per call] = (1 - alpha^(gamma+1)) / (1 - alpha) for i.i.d. acceptance rate alpha and
    gamma drafted tokens (Leviathan et al. 2023, Eq. 1)."""
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be in [0, 1], got {alpha!r}")
    gamma = _positive_int(gamma, "gamma") if gamma != 0 else 0
    return float(gamma + 1) if alpha == 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)


@torch.no_grad()
def speculative_generate(target, drafter: Drafter, ids, max_new_tokens: int, *, depth: int = 4,
                         topk: int = 1, total_tokens: int | None = None, do_sample: bool = False,
                         temperature: float = 1.0, generator: torch.Generator | None = None,
                         eos_token_id: int | None = None, pad_token_id: int = 0) -> tuple[list[int], SpecStats]:
    """Generate up to ``max_new_tokens`` tokens after ``ids`` with speculative decoding.

    Greedy (``do_sample=False``): each cycle drafts a tree (:func:`draft_tree`; ``topk=1`` and
    ``total_tokens=depth`` give a chain), verifies all its root-to-leaf paths in one batched target
    forward and keeps the longest prefix that equals the target's argmax, plus the target's next
    token: the output is token for token the target's greedy decoding. Sampling: a sampled chain of
    ``depth`` tokens verified by :func:`verify_sampling` at ``temperature`` (tree sampling is not
    implemented). Returns ``(new_tokens, stats)``."""
    max_new_tokens = _positive_int(max_new_tokens, "max_new_tokens")
    if do_sample and topk != 1:
        raise ValueError("sampling verification is implemented for chains only: use topk=1 with do_sample=True")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    total_tokens = depth if total_tokens is None else total_tokens
    t0 = time.perf_counter()
    stats = SpecStats()
    seq = _as_ids(ids)
    hidden, logits = target_forward(target, seq[None])
    stats.target_calls += 1
    if do_sample:
        first = int(torch.multinomial(torch.softmax(logits[0, -1].float() / temperature, -1), 1, generator=generator))
    else:
        first = int(logits[0, -1].argmax())
    out = [first]
    feats = hidden[0]                                   # features of seq; seq + [first] is verified
    seq = torch.cat([seq, seq.new_tensor([first])])
    stats.new_tokens += 1
    while len(out) < max_new_tokens and not (eos_token_id is not None and out[-1] == eos_token_id):
        f = feats if drafter.needs_features else None
        if do_sample:
            tree = draft_chain(drafter, seq, f, depth, sample=True, generator=generator)
        else:
            tree = draft_tree(drafter, seq, f, depth, topk, total_tokens)
        stats.draft_steps += tree.steps
        stats.drafted += len(tree)
        paths = tree.paths()
        m = max(len(p) for p in paths)
        rows = torch.full((len(paths), len(seq) + m), pad_token_id, dtype=torch.long)
        rows[:, : len(seq)] = seq
        for r, p in enumerate(paths):
            rows[r, len(seq): len(seq) + len(p)] = torch.tensor(p)
        hid, lg = target_forward(target, rows)
        stats.target_calls += 1
        lg = lg[:, len(seq) - 1:]
        if do_sample:
            p_rows = torch.softmax(lg[0].float() / temperature, -1)
            n, toks = verify_sampling(p_rows, torch.stack(tree.q), paths[0], generator=generator)
            row = 0
        else:
            row, n, toks = verify_greedy(lg, rows[:, len(seq):], [len(p) for p in paths])
        stats.accepted.append(n)
        if eos_token_id is not None and eos_token_id in toks:
            toks = toks[: toks.index(eos_token_id) + 1]
        toks = toks[: max_new_tokens - len(out)]
        feats = hid[row, : len(seq) + len(toks) - 1]
        seq = torch.cat([seq, seq.new_tensor(toks)])
        out.extend(toks)
        stats.new_tokens += len(toks)
    stats.wall_s = time.perf_counter() - t0
    return out, stats


# --------------------------------------------------------------------------------------------------
# training draft heads
# --------------------------------------------------------------------------------------------------
@torch.no_grad()
def target_features(target, sequences: torch.Tensor, batch_size: int = 16) -> torch.Tensor:
    """The target's final hidden states (N, T, d) on ``sequences`` (N, T), in batches."""
    if sequences.dim() != 2:
        raise ValueError(f"sequences must be (N, T), got shape {tuple(sequences.shape)}")
    return torch.cat([target_forward(target, sequences[i: i + batch_size])[0]
                      for i in range(0, len(sequences), batch_size)])


def draft_head_loss(head: EagleDraftHead, feats: torch.Tensor, tokens: torch.Tensor, *, w_reg: float = 1.0,
                    w_cls: float = 0.1) -> tuple[torch.Tensor, dict]:
    """EAGLE-1 training loss (Sec. 4.2): w_reg * SmoothL1(g_t, f_{t+1}) + w_cls * CE(p_{t+2}, p^_{t+2}),
    where p_{t+2} = softmax(LM head(f_{t+1})) is the target's distribution (soft labels) and
    p^_{t+2} = softmax(LM head(g_t)) the draft's. ``feats`` (B, T, d) are target features of
    ``tokens`` (B, T). Defaults w_reg = 1, w_cls = 0.1: EAGLE-1, Sec. 4.2. Returns the loss and
    its parts."""
    g = head(feats[:, :-1], tokens[:, 1:])
    target_f = feats[:, 1:]
    reg = F.smooth_l1_loss(g, target_f)
    with torch.no_grad():
        p = torch.softmax(head.lm_head(target_f).float(), -1)
    logq = torch.log_softmax(head.lm_head(g).float(), -1)
    cls = -(p * logq).sum(-1).mean()
    return w_reg * reg + w_cls * cls, {"reg": float(reg.detach()), "cls": float(cls.detach())}


def train_draft_head(head: EagleDraftHead, feats: torch.Tensor, tokens: torch.Tensor, steps: int, *,
                     batch_size: int = 16, lr: float = 3e-3, weight_decay: float = 0.0, w_reg: float = 1.0,
                     w_cls: float = 0.1, seed: int = 0, extra_loss: Callable | None = None,
                     clip_grad: float | None = 0.5) -> list[float]:
    """Train ``head`` with :func:`draft_head_loss` (AdamW) on target features ``feats`` (N, T, d) of
    ``tokens`` (N, T). Batches are drawn with a generator seeded by ``seed``, so two heads trained
    with the same seed see the same batches. ``extra_loss(head, feats_b, tokens_b) -> Tensor`` is
    added to the loss (objectives built on top of EAGLE training). Returns the losses."""
    steps = _positive_int(steps, "steps")
    if feats.shape[:2] != tokens.shape:
        raise ValueError(f"feats (N, T, d) and tokens (N, T) disagree: {tuple(feats.shape)} vs {tuple(tokens.shape)}")
    g = torch.Generator().manual_seed(seed)
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    losses = []
    head.train()
    for _ in range(steps):
        idx = torch.randint(0, len(tokens), (batch_size,), generator=g)
        fb, tb = feats[idx], tokens[idx]
        loss, _ = draft_head_loss(head, fb, tb, w_reg=w_reg, w_cls=w_cls)
        if extra_loss is not None:
            loss = loss + extra_loss(head, fb, tb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip_grad is not None:
            nn.utils.clip_grad_norm_(params, clip_grad)
        opt.step()
        losses.append(float(loss.detach()))
    head.eval()
    return losses


def acceptance_profile(target, drafter: Drafter, prompts: Sequence, max_new_tokens: int, **kw) -> SpecStats:
    """Speculative greedy generation over several prompts; the merged :class:`SpecStats`, with
    ``per_prompt`` (tau per prompt) attached for clustered statistics."""
    total, per = SpecStats(), []
    for p in prompts:
        _, s = speculative_generate(target, drafter, p, max_new_tokens, **kw)
        per.append(s.mean_accepted_length)
        total = total.merge(s)
    total.per_prompt = per
    return total


# --------------------------------------------------------------------------------------------------
# a tiny target trained here
# --------------------------------------------------------------------------------------------------
def markov_target(seed: int, *, n_tokens: int = 32, concentration: float = 0.3, hidden_size: int = 64,
                  num_hidden_layers: int = 2, seq_len: int = 64, n_train: int = 2048, steps: int = 300,
                  batch_size: int = 32, lr: float = 3e-3, language_seed: int = 0):
    """A tiny Llama (:func:`iclr26.models.tiny.build_tiny_lm`) trained from scratch (seeded by
    ``seed``) on text of a fixed order-2 Markov language over ``n_tokens`` symbols
    (:func:`iclr26.common.synthetic_tasks.markov_language`, Dirichlet(``concentration``) rows,
    drawn with ``language_seed``). Ids ``n_tokens..n_tokens+2`` are pad/bos/eos and never occur.

    Returns ``(model, text)``: the model in eval mode and a sampler ``text(n, length, rng)`` of
    fresh sequences from the same language (prompts and draft-training data)."""
    import numpy as np

    from iclr26.common.synthetic_tasks import markov_language, markov_text

    from .tiny import TinyLMConfig, build_tiny_lm

    P = markov_language(n_tokens, concentration, language_seed)

    def text(n, length, rng):
        return torch.as_tensor(markov_text(n, length, P, rng))

    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    cfg = TinyLMConfig(hidden_size=hidden_size, num_hidden_layers=num_hidden_layers,
                       intermediate_size=2 * hidden_size, max_position_embeddings=max(256, 4 * seq_len))
    model = build_tiny_lm(cfg, n_tokens + 3, pad_token_id=n_tokens, bos_token_id=n_tokens + 1,
                          eos_token_id=n_tokens + 2)
    data = text(n_train, seq_len, np.random.default_rng(seed))
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20) * max(0.05, 1 - s / steps))
    model.train()
    for _ in range(steps):
        b = data[torch.randint(0, n_train, (batch_size,), generator=g)]
        loss = F.cross_entropy(model(input_ids=b).logits[:, :-1].reshape(-1, n_tokens + 3), b[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
    model.eval()
    model.train_loss = float(loss.detach())
    return model, text
