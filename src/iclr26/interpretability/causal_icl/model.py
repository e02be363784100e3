"""In-context causal-structure task, its Bayesian-model-averaging oracle, and a two-layer
attention-only transformer with relative position embeddings.

Paper: "How Transformers Learn Causal Structures In-Context: Explainable Mechanism Meets
Theoretical Guarantee" (ICLR 2026, OpenReview bpF8zgSt41; official code: "TBD").

Task (Section 2): a context holds L + 1 sequences of length H over d symbols. A parent map
pa(h) ~ Unif{1, ..., h-1} (h = 2..H) is drawn once per context and shared by its sequences;
x_1 ~ Unif, x_h ~ pi(. | x_{pa(h)}) with a fixed transition matrix pi. The last sequence is the
query: its token at h must be predicted from its own prefix and the L full examples.

BMA (Section 3): P(pa(h) = h' | context) = softmax_{h' < h}( sum_{l <= L} log pi(x_h^l | x_{h'}^l) ),
p_BMA(x_h^q = v) = sum_{h'} P(pa(h) = h') pi(v | x_{h'}^q).

Transformer (Thm 1's construction, disentangled, attention only):
- layer 1: K heads with relative position embeddings over example offsets; head k at position h
  returns sum_j softmax(r_k)_j e(x_h^{L+1-j}) (copying, ideally, the same-position token of the
  j-th earlier example);
- layer 2: bilinear score s(h, h') = beta sum_k Z_k(h)^T W_k Z_k(h') over h' < h (W_k = log pi^T
  in the construction), softmax over h', value e(x_{h'}^q);
- readout: a row-stochastic matrix softmax(V) (= pi in the construction) applied to the attended
  one-hot, so the output is a probability vector (a mixture, as BMA's is).

One-layer ablation (`OneLayerRPETransformer`): a single attention layer over the whole context (every
token of the L examples and the query's own prefix) with relative position embeddings over (example
offset, position offset) and a content term, and the same kind of readout. It sees the examples but
cannot score a candidate parent by how well the pair of columns (h', h) fits pi across the examples,
which needs layer 1's copies (Thm 1).

Masks and index tables are buffers, so they follow the module to any device; `bma_posterior` builds
its mask on the input's device.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

__all__ = [
    "RandomParentMarkovTask",
    "bma_posterior",
    "bma_predict",
    "TwoLayerRPEConfig",
    "TwoLayerRPETransformer",
    "OneLayerRPEConfig",
    "OneLayerRPETransformer",
    "identifiable_softmax_error",
    "softmax_abs_errors",
]


class RandomParentMarkovTask:
    """Sampler of contexts for the random-parent Markov chain task.

    d: vocabulary size; H: sequence length; L: number of in-context examples (the query is
    sequence L + 1); pi: (d, d) row-stochastic transition matrix pi[parent, child]; when omitted
    its rows are drawn from Dirichlet(dirichlet_alpha) with ``generator``.
    """

    def __init__(self, d: int, H: int, L: int, pi=None, dirichlet_alpha: float = 0.5,
                 generator: torch.Generator | None = None):
        for name, val, low in (("d", d, 2), ("H", H, 2), ("L", L, 1)):
            if not isinstance(val, int) or val < low:
                raise ValueError(f"{name} must be an int >= {low}, got {val!r}")
        self.d, self.H, self.L = d, H, L
        self.generator = generator if generator is not None else torch.Generator().manual_seed(0)
        if pi is None:
            if not dirichlet_alpha > 0:
                raise ValueError(f"dirichlet_alpha must be > 0, got {dirichlet_alpha!r}")
            # rows ~ Dirichlet(alpha), drawn by numpy from a seed taken off ``generator`` (reproducible)
            rng = np.random.default_rng(int(torch.randint(0, 2**62, (1,), generator=self.generator)))
            pi = torch.from_numpy(rng.dirichlet(np.full(d, float(dirichlet_alpha)), size=d))
        pi = torch.as_tensor(pi, dtype=torch.float64)
        if pi.shape != (d, d) or (pi < 0).any() or not torch.allclose(pi.sum(1), torch.ones(d, dtype=pi.dtype)):
            raise ValueError(f"pi must be a ({d}, {d}) row-stochastic matrix")
        self.pi = pi.clamp_min(1e-12) / pi.clamp_min(1e-12).sum(1, keepdim=True)

    def sample(self, batch: int, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Return (x, parents): x (batch, L+1, H) long; parents (batch, H) long, parents[:, 0] = -1,
        parents[:, h] in {0, ..., h-1} (0-based positions). ``generator`` (default: the task's own)
        draws the contexts, so separate streams (training, validation, test) can share one pi."""
        if not isinstance(batch, int) or batch < 1:
            raise ValueError(f"batch must be a positive int, got {batch!r}")
        g = self.generator if generator is None else generator
        d, H, L = self.d, self.H, self.L
        h = torch.arange(H)
        u = torch.rand(batch, H, generator=g)
        parents = torch.where(h > 0, (u * h.clamp_min(1)).long(), torch.full_like(h, -1))
        x = torch.empty(batch, L + 1, H, dtype=torch.long)
        x[:, :, 0] = torch.randint(0, d, (batch, L + 1), generator=g)
        cdf = self.pi.cumsum(1)
        for j in range(1, H):
            par = x.gather(2, parents[:, j].view(batch, 1, 1).expand(batch, L + 1, 1)).squeeze(2)
            r = torch.rand(batch, L + 1, 1, generator=g, dtype=torch.float64)
            x[:, :, j] = (r > cdf[par]).sum(-1).clamp_max(d - 1)
        return x, parents


def bma_posterior(x: torch.Tensor, pi: torch.Tensor) -> torch.Tensor:
    """P(pa(h) = h' | the L examples), shape (batch, H, H) over [h, h']; row 0 is all zeros.

    log-score(h, h') = sum_{l <= L} log pi(x_h^l | x_{h'}^l) for h' < h, uniform prior, softmax over h'.
    """
    logpi = torch.log(pi.to(x.device))
    ctx = x[:, :-1]  # (B, L, H)
    # score[b, h, h'] = sum_l logpi[x[b,l,h'], x[b,l,h]]
    score = logpi[ctx.unsqueeze(2), ctx.unsqueeze(3)].sum(1)  # index [parent=h', child=h] -> (B, H, H')
    H = x.shape[-1]
    mask = torch.ones(H, H, dtype=torch.bool, device=x.device).tril(-1)
    post = torch.softmax(score.masked_fill(~mask, float("-inf")), -1)
    return torch.nan_to_num(post, nan=0.0)


def bma_predict(x: torch.Tensor, pi: torch.Tensor) -> torch.Tensor:
    """BMA predictive p(x_h^q = v), shape (batch, H, d); position 0 (no parent) gets the uniform law."""
    pi = pi.to(x.device)
    post = bma_posterior(x, pi)  # (B, H, H')
    q = x[:, -1]  # (B, H)
    trans = pi[q]  # (B, H', d): pi(. | x_{h'}^q)
    p = torch.einsum("bhg,bgv->bhv", post, trans)
    p[:, 0] = 1.0 / pi.shape[0]
    return p


def _check_dims(cfg) -> None:
    for name, val, low in (("d", cfg.d, 2), ("H", cfg.H, 2), ("L", cfg.L, 1)):
        if not isinstance(val, int) or val < low:
            raise ValueError(f"{name} must be an int >= {low}, got {val!r}")
    if not isinstance(cfg.n_heads, int) or cfg.n_heads < 1:
        raise ValueError(f"n_heads must be a positive int, got {cfg.n_heads!r}")
    if not cfg.init_std >= 0:
        raise ValueError(f"init_std must be >= 0, got {cfg.init_std!r}")


@dataclass
class TwoLayerRPEConfig:
    """d: vocabulary; H: sequence length; L: examples per context (the RPE range of layer 1);
    n_heads: K layer-1 heads (the construction uses K = L); init_std: scale of the random
    initial RPE logits, which break the symmetry between heads (value ours)."""

    d: int
    H: int
    L: int
    n_heads: int | None = None
    init_std: float = 1.0

    def __post_init__(self):
        if self.n_heads is None:
            self.n_heads = self.L  # Thm 1: one layer-1 head per example offset
        _check_dims(self)


class TwoLayerRPETransformer(nn.Module):
    """Disentangled two-layer attention-only transformer with relative position embeddings.

    forward(x) with x (batch, L+1, H) long returns log-probabilities (batch, H, d) for the query
    sequence; ``last_attention`` holds the layer-2 attention (batch, H, H) over candidate parents.
    """

    def __init__(self, config: TwoLayerRPEConfig, generator: torch.Generator | None = None):
        super().__init__()
        self.config = c = config
        K = c.n_heads
        self.rpe = nn.Parameter(torch.randn(K, c.L, generator=generator) * c.init_std)  # layer 1, offsets 1..L
        self.W = nn.Parameter(torch.zeros(K, c.d, c.d))                                  # layer 2 bilinear
        self.V = nn.Parameter(torch.zeros(c.d, c.d))                                     # readout logits
        # candidate parents h' < h of position h (a buffer: it follows the module's device)
        self.register_buffer("parent_mask", torch.ones(c.H, c.H, dtype=torch.bool).tril(-1), persistent=False)
        self.last_attention: torch.Tensor | None = None

    def _check(self, x):
        _check_input(x, self.config)

    def layer1(self, x: torch.Tensor) -> torch.Tensor:
        """Z (batch, H, K, d): head k mixes the same-position tokens of the L examples by RPE offset."""
        c = self.config
        onehot = nn.functional.one_hot(x[:, :-1].flip(1), c.d).to(self.W.dtype)  # offset j=1..L first
        a1 = torch.softmax(self.rpe, -1)  # (K, L)
        return torch.einsum("kj,bjhd->bhkd", a1, onehot)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check(x)
        c = self.config
        z = self.layer1(x)
        score = torch.einsum("bhkd,kde,bgke->bhg", z, self.W, z)
        att = torch.nan_to_num(torch.softmax(score.masked_fill(~self.parent_mask, float("-inf")), -1), nan=0.0)
        self.last_attention = att.detach()
        q = nn.functional.one_hot(x[:, -1], c.d).to(self.W.dtype)
        mixed = torch.einsum("bhg,bgd->bhd", att, q)
        return _log_probs(mixed @ torch.softmax(self.V, -1), c.d)

    @classmethod
    def from_construction(cls, pi: torch.Tensor, H: int, L: int, sharpness: float = 60.0):
        """Thm 1's weights: head k copies example offset k (one-hot RPE), W_k = log pi^T, softmax(V) = pi.
        With ``sharpness`` large the model computes BMA exactly."""
        d = pi.shape[0]
        model = cls(TwoLayerRPEConfig(d, H, L, n_heads=L, init_std=0.0))
        with torch.no_grad():
            model.rpe.copy_(torch.eye(L) * sharpness)
            model.W.copy_(torch.log(pi).T.expand(L, d, d).to(model.W.dtype))
            model.V.copy_(torch.log(pi).to(model.V.dtype))
        return model


def _check_input(x: torch.Tensor, c) -> None:
    if x.ndim != 3 or x.shape[1:] != (c.L + 1, c.H):
        raise ValueError(f"x must have shape (batch, {c.L + 1}, {c.H}), got {tuple(x.shape)}")
    if x.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        raise ValueError(f"x must hold integer token ids, got dtype {x.dtype}")


def _log_probs(probs: torch.Tensor, d: int) -> torch.Tensor:
    """Log of a (batch, H, d) probability tensor; position 0 (no candidate parent) gets the uniform law,
    as in ``bma_predict``."""
    first = torch.full_like(probs[:, :1], 1.0 / d)
    return torch.log(torch.cat([first, probs[:, 1:]], 1).clamp_min(1e-30))


@dataclass
class OneLayerRPEConfig:
    """d, H, L as in :class:`TwoLayerRPEConfig`; n_heads: K attention heads of the single layer (value
    ours: 2, enough for one head on the examples and one on the query prefix); init_std: scale of the
    random initial RPE logits (value ours)."""

    d: int
    H: int
    L: int
    n_heads: int = 2
    init_std: float = 1.0

    def __post_init__(self):
        _check_dims(self)


class OneLayerRPETransformer(nn.Module):
    """One-layer ablation of :class:`TwoLayerRPETransformer`: one attention layer over the whole context.

    The query position h (whose own token is the target) attends, per head k, over every token of the
    L examples (all positions) and over its own prefix h' < h, with score
    ``rpe_k[j, h - h'] + e(x_{h-1}^q)^T U_k e(x_{h'}^{(j)})`` (j = example offset, 0 for the query itself;
    the content term uses the last visible query token, as an autoregressive layer would). Head k's
    attended one-hot goes through its own row-stochastic readout softmax(V_k); heads are mixed with
    weights softmax(g). The output is a probability vector, as for the two-layer model.

    One layer can weigh each token by where it is and what it is, but not by how well a pair of
    columns (h', h) of the examples fits pi, which BMA's parent posterior needs (Thm 1 builds it from
    layer 1's copies).
    """

    def __init__(self, config: OneLayerRPEConfig, generator: torch.Generator | None = None):
        super().__init__()
        self.config = c = config
        K, J, H = c.n_heads, c.L + 1, c.H
        self.rpe = nn.Parameter(torch.randn(K, J, 2 * H - 1, generator=generator) * c.init_std)
        self.U = nn.Parameter(torch.zeros(K, c.d, c.d))     # content term: previous query token x key token
        self.V = nn.Parameter(torch.zeros(K, c.d, c.d))     # per-head readout logits
        self.gate = nn.Parameter(torch.zeros(K))             # head mixture logits
        h = torch.arange(H)
        # rel[h, h'] = h - h' + H - 1 indexes the position-offset axis of rpe
        self.register_buffer("rel", h.view(H, 1) - h.view(1, H) + H - 1, persistent=False)
        visible = torch.ones(H, J, H, dtype=torch.bool)      # [h, j, h']: examples whole, query prefix h' < h
        visible[:, 0] = h.view(1, H) < h.view(H, 1)
        self.register_buffer("visible", visible, persistent=False)
        self.last_attention: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_input(x, self.config)
        c = self.config
        B, K, J, H, d = x.shape[0], c.n_heads, c.L + 1, c.H, c.d
        dtype = self.V.dtype
        seqs = nn.functional.one_hot(x.flip(1), d).to(dtype)              # (B, J, H, d), j = 0 the query
        pos = self.rpe[:, :, self.rel].permute(2, 0, 1, 3)                # (h, K, J, h')
        q = x[:, -1]
        prev = nn.functional.one_hot(q[:, :-1], d).to(dtype)              # x_{h-1}^q for h = 1..H-1
        prev = torch.cat([torch.zeros_like(prev[:, :1]), prev], 1)        # (B, H, d); none at h = 0
        content = torch.einsum("bhd,kde,bjge->bhkjg", prev, self.U, seqs)
        score = (pos.unsqueeze(0) + content).masked_fill(~self.visible.view(1, H, 1, J, H), float("-inf"))
        att = torch.softmax(score.reshape(B, H, K, J * H), -1)
        self.last_attention = att.detach().view(B, H, K, J, H)
        read = torch.einsum("bhkn,bnd->bhkd", att, seqs.reshape(B, J * H, d))
        probs = torch.einsum("bhkd,kde,k->bhe", read, torch.softmax(self.V, -1), torch.softmax(self.gate, -1))
        return _log_probs(probs, d)


def identifiable_softmax_error(W, pi) -> dict:
    """Prop. 1 / Sec. 5 parameter analysis: the layer-2 scores are unchanged by W[child, :] += a[child]
    (a constant per child row adds a constant over candidate parents), so only the softmax over the
    parent index of each child row is identified. Returns the paper's error (1/d) ||softmax(W) -
    softmax(log pi^T)||_1 (entrywise sum) along the identified axis and along the other axis (the
    paper: 0.0278 vs 0.350 at d = 20, H = 50, L = 3)."""
    ident, other = softmax_abs_errors(W, pi)
    d = ident.shape[0]
    return {"identified": float(ident.sum() / d), "non_identified": float(other.sum() / d)}


def softmax_abs_errors(W, pi) -> tuple[torch.Tensor, torch.Tensor]:
    """Entrywise |softmax(W) - softmax(log pi^T)| along the identified axis (over parents, for
    each child) and along the other axis (over children, for each parent); two (d, d) tensors.
    W is indexed [child, parent] (the construction's W = log pi^T); pi is [parent, child]."""
    W = torch.as_tensor(W, dtype=torch.float64)
    pi = torch.as_tensor(pi, dtype=torch.float64)
    if W.ndim != 2 or W.shape[0] != W.shape[1] or pi.shape != W.shape:
        raise ValueError(f"W and pi must both be (d, d) matrices, got {tuple(W.shape)} and {tuple(pi.shape)}")
    target = torch.log(pi).T  # [child, parent]
    ident = (torch.softmax(W, 1) - torch.softmax(target, 1)).abs()
    other = (torch.softmax(W, 0) - torch.softmax(target, 0)).abs()
    return ident, other
