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
"""
from __future__ import annotations

import math
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
    "PositionOnlyAttention",
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
            g = _gamma(torch.full((d, d), float(dirichlet_alpha), dtype=torch.float64), self.generator)
            pi = g / g.sum(1, keepdim=True)
        pi = torch.as_tensor(pi, dtype=torch.float64)
        if pi.shape != (d, d) or (pi < 0).any() or not torch.allclose(pi.sum(1), torch.ones(d, dtype=pi.dtype)):
            raise ValueError(f"pi must be a ({d}, {d}) row-stochastic matrix")
        self.pi = pi.clamp_min(1e-12) / pi.clamp_min(1e-12).sum(1, keepdim=True)

    def sample(self, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Return (x, parents): x (batch, L+1, H) long; parents (batch, H) long, parents[:, 0] = -1,
        parents[:, h] in {0, ..., h-1} (0-based positions)."""
        g, d, H, L = self.generator, self.d, self.H, self.L
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


def _gamma(alpha: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Gamma(alpha, 1) draws reproducible under ``generator`` (Marsaglia-Tsang with boost for alpha < 1)."""
    a = alpha + (alpha < 1).to(alpha.dtype)
    dd = a - 1.0 / 3
    c = 1.0 / torch.sqrt(9 * dd)
    out = torch.empty_like(alpha)
    todo = torch.ones_like(alpha, dtype=torch.bool)
    while todo.any():
        z = torch.randn(alpha.shape, generator=generator, dtype=alpha.dtype)
        u = torch.rand(alpha.shape, generator=generator, dtype=alpha.dtype)
        v = (1 + c * z) ** 3
        ok = (v > 0) & (torch.log(u.clamp_min(1e-300)) < 0.5 * z * z + dd - dd * v + dd * torch.log(v.clamp_min(1e-300)))
        take = todo & ok
        out[take] = (dd * v)[take]
        todo &= ~ok
    boost = torch.rand(alpha.shape, generator=generator, dtype=alpha.dtype) ** (1.0 / alpha)
    return torch.where(alpha < 1, out * boost, out)


def bma_posterior(x: torch.Tensor, pi: torch.Tensor) -> torch.Tensor:
    """P(pa(h) = h' | the L examples), shape (batch, H, H) over [h, h']; row 0 is all zeros.

    log-score(h, h') = sum_{l <= L} log pi(x_h^l | x_{h'}^l) for h' < h, uniform prior, softmax over h'.
    """
    logpi = torch.log(pi)
    ctx = x[:, :-1]  # (B, L, H)
    # score[b, h, h'] = sum_l logpi[x[b,l,h'], x[b,l,h]]
    score = logpi[ctx.unsqueeze(2), ctx.unsqueeze(3)].sum(1)  # index [parent=h', child=h] -> (B, H, H')
    H = x.shape[-1]
    mask = torch.ones(H, H, dtype=torch.bool).tril(-1)
    post = torch.softmax(score.masked_fill(~mask, float("-inf")), -1)
    return torch.nan_to_num(post, nan=0.0)


def bma_predict(x: torch.Tensor, pi: torch.Tensor) -> torch.Tensor:
    """BMA predictive p(x_h^q = v), shape (batch, H, d); position 0 (no parent) gets the uniform law."""
    post = bma_posterior(x, pi)  # (B, H, H')
    q = x[:, -1]  # (B, H)
    trans = pi[q]  # (B, H', d): pi(. | x_{h'}^q)
    p = torch.einsum("bhg,bgv->bhv", post, trans)
    p[:, 0] = 1.0 / pi.shape[0]
    return p


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
        for name, val, low in (("d", self.d, 2), ("H", self.H, 2), ("L", self.L, 1)):
            if not isinstance(val, int) or val < low:
                raise ValueError(f"{name} must be an int >= {low}, got {val!r}")
        if self.n_heads is None:
            self.n_heads = self.L
        if not isinstance(self.n_heads, int) or self.n_heads < 1:
            raise ValueError(f"n_heads must be a positive int, got {self.n_heads!r}")
        if not self.init_std >= 0:
            raise ValueError(f"init_std must be >= 0, got {self.init_std!r}")


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
        self.last_attention: torch.Tensor | None = None

    def _check(self, x):
        c = self.config
        if x.ndim != 3 or x.shape[1:] != (c.L + 1, c.H):
            raise ValueError(f"x must have shape (batch, {c.L + 1}, {c.H}), got {tuple(x.shape)}")

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
        mask = torch.ones(c.H, c.H, dtype=torch.bool).tril(-1)
        att = torch.nan_to_num(torch.softmax(score.masked_fill(~mask, float("-inf")), -1), nan=0.0)
        self.last_attention = att.detach()
        q = nn.functional.one_hot(x[:, -1], c.d).to(self.W.dtype)
        mixed = torch.einsum("bhg,bgd->bhd", att, q)
        probs = mixed @ torch.softmax(self.V, -1)
        probs[:, 0] = 1.0 / c.d
        return torch.log(probs.clamp_min(1e-30))

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


class PositionOnlyAttention(nn.Module):
    """One-layer baseline: attention over the query's own earlier positions with learned
    relative-position logits only (no access to the examples), same readout. It can learn the
    prior over parents and pi but cannot infer the context's parent graph."""

    def __init__(self, d: int, H: int):
        super().__init__()
        self.d, self.H = d, H
        self.rpe = nn.Parameter(torch.zeros(H, H))
        self.V = nn.Parameter(torch.zeros(d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = torch.ones(self.H, self.H, dtype=torch.bool).tril(-1)
        att = torch.nan_to_num(torch.softmax(self.rpe.masked_fill(~mask, float("-inf")), -1), nan=0.0)
        q = nn.functional.one_hot(x[:, -1], self.d).to(self.V.dtype)
        probs = torch.einsum("hg,bgd->bhd", att, q) @ torch.softmax(self.V, -1)
        probs[:, 0] = 1.0 / self.d
        return torch.log(probs.clamp_min(1e-30))


def identifiable_softmax_error(W, pi) -> dict:
    """Prop. 1: the layer-2 scores are unchanged by W[child, :] += a[child] (a constant per child row
    sums to a constant over candidate parents). So only the softmax over the parent index of each
    child row is identified; compare it with the same softmax of log pi^T. Returns the mean absolute
    error of that identified softmax and of the other (non-identified) one for contrast."""
    ident, other = softmax_abs_errors(W, pi)
    return {"identified": float(ident.mean()), "non_identified": float(other.mean())}


def softmax_abs_errors(W, pi) -> tuple[torch.Tensor, torch.Tensor]:
    """Entrywise |softmax(W) - softmax(log pi^T)| along the identified axis (over parents, for
    each child) and along the other axis (over children, for each parent); two (d, d) tensors."""
    W = torch.as_tensor(W, dtype=torch.float64)
    target = torch.log(torch.as_tensor(pi, dtype=torch.float64)).T  # [child, parent]
    ident = (torch.softmax(W, 1) - torch.softmax(target, 1)).abs()
    other = (torch.softmax(W, 0) - torch.softmax(target, 0)).abs()
    return ident, other
