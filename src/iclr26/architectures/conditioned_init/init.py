"""Conditioned initialisation of attention weights, mimetic initialisation, and the attention
Jacobian condition number.

Paper: "Conditioned Initialization for Attention", ICLR 2026 (OpenReview cKNOCYPo2W).
Official code: not released ("TBD").

For one attention layer ``A(X) = softmax(X W_Q W_K^T X^T / sqrt(d)) X W_V`` the paper bounds the
condition number of the Jacobian dA/dX (Thm. 3.1):

    kappa(J) <= kappa(X)^3 kappa(Lambda(softmax(S))) kappa(W_V) (kappa(W_Q) + kappa(W_K))
                + kappa(X) kappa(softmax(S)),       Lambda(z) = Diag(z) - z z^T,

so initialising W_Q, W_K, W_V with condition number 1 gives the smallest bound (Prop. 3.2).
The recipe (Sec. 3.2): W_V a (rectangular) identity, each head's W_Q^(i), W_K^(i) semi-orthogonal
((W^(i))^T W^(i) = I_d), everything else left at its default.

Weights are in torch's layout (``out_features x in_features``, ``y = x W^T``): head i's query
block is rows ``i*d:(i+1)*d`` of W_Q, and "semi-orthogonal" means orthonormal rows there.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["AttentionWeights", "attention_weights", "conditioned_init_", "scale_matched_init_", "mimetic_init_",
           "attention_jacobian", "attention_jacobian_condition"]


@dataclass
class AttentionWeights:
    """Views of an attention module's projections (torch layout, out x in) and its head count."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    q_bias: torch.Tensor | None
    k_bias: torch.Tensor | None
    v_bias: torch.Tensor | None
    out: torch.Tensor | None
    num_heads: int


def _lin(m):
    return isinstance(m, nn.Linear)


def attention_weights(attn: nn.Module, num_heads: int | None = None) -> AttentionWeights:
    """Find W_Q, W_K, W_V (and W_O) of ``attn``: ``nn.MultiheadAttention`` or any module with
    Linear children ``q_proj/k_proj/v_proj`` (or ``query/key/value``; ``out_proj``/``o_proj``).
    ``num_heads`` defaults to ``attn.num_heads``."""
    heads = num_heads if num_heads is not None else getattr(attn, "num_heads", None)
    if heads is None:
        raise ValueError("num_heads is required: the module has no 'num_heads' attribute")
    if not isinstance(heads, int) or heads < 1:
        raise ValueError(f"num_heads must be a positive integer, got {heads!r}")
    if isinstance(attn, nn.MultiheadAttention):
        if attn.in_proj_weight is not None:
            q, k, v = attn.in_proj_weight.chunk(3, dim=0)
            qb, kb, vb = attn.in_proj_bias.chunk(3) if attn.in_proj_bias is not None else (None,) * 3
        else:
            q, k, v = attn.q_proj_weight, attn.k_proj_weight, attn.v_proj_weight
            qb, kb, vb = attn.in_proj_bias.chunk(3) if attn.in_proj_bias is not None else (None,) * 3
        out = attn.out_proj.weight
    else:
        names = None
        for cand in (("q_proj", "k_proj", "v_proj"), ("query", "key", "value")):
            if all(_lin(getattr(attn, n, None)) for n in cand):
                names = cand
                break
        if names is None:
            raise TypeError("unsupported attention module: expected nn.MultiheadAttention or Linear "
                            "children q_proj/k_proj/v_proj (or query/key/value), got "
                            f"{type(attn).__name__}")
        lq, lk, lv = (getattr(attn, n) for n in names)
        q, k, v, qb, kb, vb = lq.weight, lk.weight, lv.weight, lq.bias, lk.bias, lv.bias
        o = getattr(attn, "out_proj", None) or getattr(attn, "o_proj", None)
        out = o.weight if _lin(o) else None
    if q.shape[0] % heads or k.shape[0] % heads or v.shape[0] % heads:
        raise ValueError(f"num_heads={heads} does not divide the projection widths "
                         f"(q {q.shape[0]}, k {k.shape[0]}, v {v.shape[0]})")
    if q.shape[0] != k.shape[0]:
        raise ValueError(f"query and key widths differ ({q.shape[0]} vs {k.shape[0]})")
    return AttentionWeights(q, k, v, qb, kb, vb, out, heads)


def _semi_orthogonal_(w: torch.Tensor, generator: torch.Generator | None) -> None:
    """Fill ``w`` (r x c) with a random matrix of orthonormal rows (r <= c) or columns (r > c)."""
    r, c = w.shape
    a = torch.randn(max(r, c), min(r, c), generator=generator, dtype=torch.float64)
    qm, rm = torch.linalg.qr(a)
    qm = qm * torch.sign(torch.diagonal(rm))            # Haar-distributed (Mezzadri 2007)
    w.copy_((qm.T if r <= c else qm).to(w.dtype))


@torch.no_grad()
def conditioned_init_(attn: nn.Module, num_heads: int | None = None, *,
                      generator: torch.Generator | None = None) -> nn.Module:
    """Conditioned initialisation (paper Sec. 3.2), in place; returns ``attn``.

    W_V <- rectangular identity (``eye(out, in)``: head i reads coordinates i*d..(i+1)*d-1, so the
    heads together pass X through unchanged); for every head, W_Q^(i) and W_K^(i) <- independent
    random semi-orthogonal blocks (condition number 1). Biases and W_O keep their values.
    """
    w = attention_weights(attn, num_heads)
    d_q = w.q.shape[0] // w.num_heads
    for i in range(w.num_heads):
        _semi_orthogonal_(w.q[i * d_q:(i + 1) * d_q], generator)
        _semi_orthogonal_(w.k[i * d_q:(i + 1) * d_q], generator)
    w.v.copy_(torch.eye(*w.v.shape, dtype=w.v.dtype))
    return attn


@torch.no_grad()
def scale_matched_init_(attn: nn.Module, num_heads: int | None = None, *,
                        generator: torch.Generator | None = None) -> nn.Module:
    """Control arm of :func:`conditioned_init_`: the same per-matrix scale, no conditioning. In place.

    Every block that :func:`conditioned_init_` sets (each head's rows of W_Q and W_K, each head's
    rows of W_V) is drawn i.i.d. Gaussian and rescaled to the Frobenius norm the conditioned init
    gives it: ``sqrt(min(r, c))`` for an ``r x c`` semi-orthogonal block, the number of ones of the
    rectangular identity's rows for W_V. The singular values then have the conditioned init's mean
    square, but are spread (a Gaussian ``d x D`` block has condition number about
    ``(sqrt(D) + sqrt(d)) / (sqrt(D) - sqrt(d))``, 3 at ``D = 4 d``; a square W_V is singular in the
    limit). Separates the effect of conditioning from that of the weight scale, which for timm's
    trunc-normal(0.02) default is about ``0.02 sqrt(D)`` times smaller. Biases and W_O keep their values.
    """
    w = attention_weights(attn, num_heads)
    d_q = w.q.shape[0] // w.num_heads
    d_v = w.v.shape[0] // w.num_heads

    def fill_(block: torch.Tensor, frob: float) -> None:
        g = torch.randn(block.shape, generator=generator, dtype=torch.float64)
        block.copy_((g * (frob / g.norm())).to(block.dtype))

    n_in = w.v.shape[1]
    for i in range(w.num_heads):
        for mat in (w.q, w.k):
            blk = mat[i * d_q:(i + 1) * d_q]
            fill_(blk, math.sqrt(min(blk.shape)))
        ones = max(0, min((i + 1) * d_v, n_in) - i * d_v)      # ones of eye(out, in) in these rows
        fill_(w.v[i * d_v:(i + 1) * d_v], math.sqrt(ones))
    return attn


@torch.no_grad()
def mimetic_init_(attn: nn.Module, num_heads: int | None = None, *, alpha1: float = 0.7,
                  beta1: float = 0.7, alpha2: float = 0.4, beta2: float = 0.4,
                  generator: torch.Generator | None = None) -> nn.Module:
    """Mimetic initialisation (Trockman & Kolter, 2023), the paper's main baseline, in place.

    Per head: ``W_Q^(i) W_K^(i)T ~ alpha1 Z1 + beta1 I`` and (for the whole layer, when an output
    projection exists) ``W_V^T W_O^T ~ alpha2 Z2 - beta2 I``, with ``Z ~ N(0, 1/D)``, realised by
    the rank-d truncated SVD. Defaults (0.7, 0.7, 0.4, 0.4) are Trockman & Kolter's ViT values.
    """
    w = attention_weights(attn, num_heads)
    D = w.q.shape[1]
    d_q = w.q.shape[0] // w.num_heads

    def factor(m: torch.Tensor, rank: int):
        u, s, vh = torch.linalg.svd(m)
        root = s[:rank].sqrt()
        return u[:, :rank] * root, vh[:rank].T * root      # m ~ a @ b.T

    def z():
        return torch.randn(D, D, generator=generator, dtype=torch.float64) / math.sqrt(D)

    eye = torch.eye(D, dtype=torch.float64)
    if w.k.shape[1] != D:
        raise ValueError("mimetic_init_ needs equal query and key input widths (self-attention)")
    for i in range(w.num_heads):
        a, b = factor(alpha1 * z() + beta1 * eye, d_q)      # x W_Q^T (x W_K^T)^T = x a b^T x^T
        w.q[i * d_q:(i + 1) * d_q].copy_(a.T.to(w.q.dtype))
        w.k[i * d_q:(i + 1) * d_q].copy_(b.T.to(w.k.dtype))
    if w.out is not None and w.v.shape[1] == D and w.out.shape[0] == D and w.v.shape[0] == w.out.shape[1]:
        a, b = factor(alpha2 * z() - beta2 * eye, w.v.shape[0])   # x W_V^T W_O^T = x a b^T
        w.v.copy_(a.T.to(w.v.dtype))
        w.out.copy_(b.to(w.out.dtype))
    return attn


def _attention_fn(w: AttentionWeights, include_out_proj: bool, out_bias):
    H = w.num_heads
    d_q = w.q.shape[0] // H
    d_v = w.v.shape[0] // H

    def f(x):                                   # x: (N, D) one sequence
        q = x @ w.q.T + (w.q_bias if w.q_bias is not None else 0)
        k = x @ w.k.T + (w.k_bias if w.k_bias is not None else 0)
        v = x @ w.v.T + (w.v_bias if w.v_bias is not None else 0)
        n = x.shape[0]
        q, k = q.view(n, H, d_q).transpose(0, 1), k.view(n, H, d_q).transpose(0, 1)
        v = v.view(n, H, d_v).transpose(0, 1)
        a = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(d_q), -1) @ v
        a = a.transpose(0, 1).reshape(n, H * d_v)
        if include_out_proj and w.out is not None:
            a = a @ w.out.T + (out_bias if out_bias is not None else 0)
        return a
    return f


def attention_jacobian(attn: nn.Module, x: torch.Tensor, num_heads: int | None = None,
                       include_out_proj: bool = False) -> torch.Tensor:
    """Jacobian of the self-attention map X -> A(X) at one sequence ``x`` (N, D), as an
    (N*D_out, N*D) matrix. Without the output projection by default, as in the paper's A(X)."""
    if x.ndim != 2:
        raise ValueError(f"x must be one sequence of shape (N, D), got {tuple(x.shape)}")
    w = attention_weights(attn, num_heads)
    if x.shape[1] != w.q.shape[1]:
        raise ValueError(f"x has width {x.shape[1]}, the attention expects {w.q.shape[1]}")
    out_bias = None
    o = getattr(attn, "out_proj", None) or getattr(attn, "o_proj", None)
    if include_out_proj and _lin(o):
        out_bias = o.bias
    f = _attention_fn(AttentionWeights(*(t.detach() if isinstance(t, torch.Tensor) else t
                                         for t in (w.q, w.k, w.v, w.q_bias, w.k_bias, w.v_bias,
                                                   w.out)), w.num_heads),
                      include_out_proj, None if out_bias is None else out_bias.detach())
    jac = torch.autograd.functional.jacobian(f, x.detach())
    n, d_in = x.shape
    return jac.reshape(jac.shape[0] * jac.shape[1], n * d_in)


def attention_jacobian_condition(attn: nn.Module, x: torch.Tensor, num_heads: int | None = None,
                                 include_out_proj: bool = False) -> torch.Tensor:
    """kappa(J) = sigma_max / sigma_min of :func:`attention_jacobian`, for ``x`` of shape (N, D)
    or a batch (B, N, D) (one value per sequence)."""
    xs = x if x.ndim == 3 else x[None]
    out = []
    for seq in xs:
        s = torch.linalg.svdvals(attention_jacobian(attn, seq, num_heads, include_out_proj).double())
        out.append(s[0] / s[-1])
    vals = torch.stack(out)
    return vals if x.ndim == 3 else vals[0]
