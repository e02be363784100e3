"""A minimal causal language model whose attention takes a pluggable positional scheme.

Shared by the position-encoding papers (``selective_rope``, ``bam``). Two token mixers:

- :class:`SoftmaxAttention`: causal multi-head softmax attention with optional Scalable-Softmax
  (SSMax, Nakanishi 2025: logits multiplied by ``s_h * log n_i`` where ``n_i`` is the number of
  visible keys of query ``i``).
- :class:`GatedLinearAttention`: gated linear attention (GLA, Yang et al. 2024, arXiv 2312.06635),
  recurrence ``S_t = diag(alpha_t) S_{t-1} + k_t v_t^T``, ``o_t = S_t^T q_t`` with a low-rank
  data-dependent gate ``log alpha_t = logsigmoid(W_a2 W_a1 x_t) / 16`` and a swish output gate,
  computed in its exact parallel (quadratic) form.

A positional scheme is an ``nn.Module`` with ``forward(q, k, x) -> (q, k, bias)``: ``q``, ``k``
have shape ``(batch, heads, T, head_dim)``, ``x`` is the attention input ``(batch, T, d_model)``,
and ``bias`` is ``None`` or an additive logit bias broadcastable to ``(batch, heads, T, T)``.
Rotation schemes return new ``q``/``k``; bias schemes return a bias. :class:`NoPE`,
:class:`RoPE` and :class:`ALiBi` live here; Selective RoPE and BAM's generalised-Gaussian prior
live in their paper folders and follow the same protocol.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn


# --------------------------------------------------------------------------------------------
# positional schemes
# --------------------------------------------------------------------------------------------
class NoPE(nn.Module):
    """No positional encoding: the causal mask alone carries order (Kazemnejad et al. 2023)."""

    def forward(self, q, k, x=None):
        return q, k, None


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """At least float32: half-precision inputs are computed in float32, float64 stays float64."""
    return torch.promote_types(dtype, torch.float32)


def _full_precision(buffer: torch.Tensor, make: Callable[[], torch.Tensor]) -> torch.Tensor:
    """``buffer`` if it is held in at least float32, else a fresh float32 copy from ``make()``.

    ``module.half()`` / ``.to(torch.bfloat16)`` cast every floating buffer; frequencies and slopes
    rounded to 8 significant bits would shift angles and biases at long distances.
    """
    if torch.finfo(buffer.dtype).bits >= 32:
        return buffer
    return make().to(buffer.device)


def rotate_half_pairs(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """Rotate feature pairs ``(x_j, x_{j+D/2})`` by ``angles[..., j]`` (the GPT-NeoX layout).

    ``x``: ``(..., T, D)``; ``angles``: broadcastable to ``(..., T, D/2)``.
    Returns ``[x0 cos - x1 sin, x0 sin + x1 cos]`` in ``x``'s dtype. The sines, cosines and the
    rotation are computed in at least float32 (in the angles' precision when that is higher): an
    angle ``t * omega`` rounded to bfloat16 is off by up to ``t / 256`` radians.
    """
    if x.shape[-1] % 2:
        raise ValueError(f"the last dimension of x must be even (feature pairs), got {x.shape[-1]}")
    half = x.shape[-1] // 2
    dt = torch.promote_types(_compute_dtype(x.dtype), angles.dtype)
    xc, a = x.to(dt), angles.to(device=x.device, dtype=dt)
    x0, x1 = xc[..., :half], xc[..., half:]
    cos, sin = torch.cos(a), torch.sin(a)
    return torch.cat([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).to(x.dtype)


def rope_frequencies(head_dim: int, base: float = 10000.0, scale: float = 1.0) -> torch.Tensor:
    """RoPE frequencies ``omega_j = scale / base^(2j/D)``, ``j = 0..D/2-1`` (Su et al. 2021, Eq. 15)."""
    if head_dim % 2:
        raise ValueError(f"head_dim must be even for rotary embeddings, got {head_dim}")
    if base < 1.0:
        raise ValueError(f"base must be >= 1, got {base}")
    return scale / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)


class RoPE(nn.Module):
    """Rotary position embedding with fixed angles ``theta_{t,j} = (t + offset) * omega_j``
    (Su et al. 2021, Eq. 34).

    Angles are computed in at least float32 whatever the input dtype (in bfloat16 the angle at
    ``t = 1500`` would be off by several radians); the output has the input's dtype and device.
    """

    def __init__(self, head_dim: int, base: float = 10000.0, offset: int = 0):
        super().__init__()
        self.head_dim, self.base = head_dim, base
        self.register_buffer("omega", rope_frequencies(head_dim, base), persistent=False)
        self.offset = offset

    def forward(self, q, k, x=None):
        T = q.shape[-2]
        omega = _full_precision(self.omega, lambda: rope_frequencies(self.head_dim, self.base))
        dt = torch.promote_types(_compute_dtype(q.dtype), omega.dtype)
        pos = torch.arange(T, dtype=dt, device=q.device) + self.offset
        angles = pos[:, None] * omega.to(device=q.device, dtype=dt)[None, :]
        return rotate_half_pairs(q, angles), rotate_half_pairs(k, angles), None


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """ALiBi head slopes (Press et al. 2022, Sec. 3): geometric ``2^(-8h/n)``, ``h = 1..n``.

    For a head count that is not a power of two, the paper's interleaving rule is used.
    """
    if n_heads < 1:
        raise ValueError(f"n_heads must be >= 1, got {n_heads}")

    def pow2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n_heads).is_integer():
        s = pow2(n_heads)
    else:
        c = 2 ** math.floor(math.log2(n_heads))
        s = pow2(c) + alibi_slopes(2 * c).tolist()[0::2][: n_heads - c]
    return torch.tensor(s, dtype=torch.float32)


def relative_distance(T_q: int, T_k: int | None = None, device=None) -> torch.Tensor:
    """``(T_q, T_k)`` matrix of ``j - i`` (key index minus query index), queries last-aligned."""
    T_k = T_q if T_k is None else T_k
    i = torch.arange(T_k - T_q, T_k, device=device, dtype=torch.float32)
    j = torch.arange(T_k, device=device, dtype=torch.float32)
    return j[None, :] - i[:, None]


class ALiBi(nn.Module):
    """Attention with Linear Biases: ``b_h(i, j) = -m_h |i - j|`` (Press et al. 2022, Eq. in Sec. 3)."""

    def __init__(self, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)

    def bias(self, T_q: int, T_k: int | None = None, device=None) -> torch.Tensor:
        """``(heads, T_q, T_k)`` bias in at least float32 (the slopes' dtype when higher)."""
        slopes = _full_precision(self.slopes, lambda: alibi_slopes(self.n_heads))
        d = relative_distance(T_q, T_k, device=device if device is not None else slopes.device)
        return -slopes.to(d.device)[:, None, None] * d.abs()[None]

    def forward(self, q, k, x=None):
        """The bias is returned in at least float32 (``-m |i - j|`` at long distances does not fit
        bfloat16's 8 significant bits); :class:`SoftmaxAttention` adds it in that precision."""
        b = self.bias(q.shape[-2], k.shape[-2], q.device)
        return q, k, b.to(torch.promote_types(_compute_dtype(q.dtype), b.dtype))


# --------------------------------------------------------------------------------------------
# blocks
# --------------------------------------------------------------------------------------------
class RMSNorm(nn.Module):
    """``x / sqrt(mean(x^2) + eps) * weight`` (Zhang & Sennrich 2019, Eq. 4); the normalisation is
    computed in at least float32 and returned in ``x``'s dtype."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xc = x.to(_compute_dtype(x.dtype))
        normed = (xc * torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)
        return normed * self.weight.to(x.dtype)


class SwiGLU(nn.Module):
    """``W2 (silu(W1 x) * W3 x)`` (Shazeer 2020, Eq. 6), no biases."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def ssmax_log_length(T_q: int, T_k: int | None = None, device=None) -> torch.Tensor:
    """``log n_i`` for each query row: ``n_i`` = number of keys query ``i`` sees under a causal mask."""
    T_k = T_q if T_k is None else T_k
    n = torch.arange(T_k - T_q + 1, T_k + 1, device=device, dtype=torch.float32)
    return torch.log(n)[:, None]


class SoftmaxAttention(nn.Module):
    """Causal multi-head softmax attention with a pluggable positional scheme.

    ``logits = q k^T / sqrt(D) + bias``; with ``ssmax=True`` the logits (bias included, the
    order of the BAM code's ``ssmax_prior``) are multiplied by ``s_h log n_i`` with a learnable
    per-head ``s_h`` initialised to 1.
    """

    def __init__(self, d_model: int, n_heads: int, positional: nn.Module | None = None, ssmax: bool = False):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)
        self.positional = positional if positional is not None else NoPE()
        self.ssmax = ssmax
        if ssmax:
            self.ssmax_scale = nn.Parameter(torch.ones(n_heads))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, bias = self.positional(q, k, x)
        # logits, bias, SSMax scale and softmax in at least float32; the output in v's dtype
        logits = ((q @ k.transpose(-1, -2)) / math.sqrt(self.head_dim)).to(_compute_dtype(q.dtype))
        if bias is not None:
            logits = logits + bias.to(logits.device)
        if self.ssmax:
            logits = logits * (self.ssmax_scale[:, None, None] * ssmax_log_length(T, T, x.device))
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        logits = logits.masked_fill(mask, float("-inf"))
        att = torch.softmax(logits, dim=-1).to(v.dtype)
        o = (att @ v).transpose(1, 2).reshape(B, T, -1)
        return self.out(o)


def gla_parallel(q, k, v, log_alpha):
    """Exact parallel form of the GLA recurrence (Yang et al. 2024, Eq. 3-4).

    ``o_t = sum_{s<=t} (q_t * exp(L_t - L_s)) . k_s  v_s`` with ``L = cumsum(log_alpha)``, which
    equals ``S_t = diag(alpha_t) S_{t-1} + k_t v_t^T``, ``o_t = S_t^T q_t``. Shapes:
    q, k, log_alpha ``(B, H, T, Dk)``, v ``(B, H, T, Dv)``. Memory ``O(B H T^2 Dk)``: for short
    sequences only (the synthetic tasks), which is what the experiments need. Computed in at
    least float32, returned in ``v``'s dtype.
    """
    out_dtype, dt = v.dtype, _compute_dtype(q.dtype)
    q, k, v, log_alpha = q.to(dt), k.to(dt), v.to(dt), log_alpha.to(dt)
    L = torch.cumsum(log_alpha, dim=-2)
    diff = L[..., :, None, :] - L[..., None, :, :]  # (B,H,T,T,Dk): L_t - L_s
    T = q.shape[-2]
    causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    decay = torch.where(causal[..., None], diff, torch.full_like(diff, float("-inf"))).exp()
    scores = torch.einsum("bhtd,bhsd,bhtsd->bhts", q, k, decay)
    return (scores @ v).to(out_dtype)


def gla_chunked(q, k, v, log_alpha, chunk: int = 32):
    """Chunk-wise form of the same recurrence (Yang et al. 2024, Sec. 4.2), built from matmuls.

    Within a chunk, ``q_t exp(L_t)`` and ``k_s exp(-L_s)`` use the cumulative log-decay ``L``
    counted from the chunk start; across chunks the ``(Dk, Dv)`` state is carried. Callers keep
    ``chunk * max|log_alpha|`` well below 80 so ``exp(-L)`` stays finite in float32 (the GLA
    block clamps ``log_alpha``). Computed in at least float32 (``exp(+-L)`` in bfloat16 would lose
    the decay ratios), returned in ``v``'s dtype.
    """
    out_dtype, dt = v.dtype, _compute_dtype(q.dtype)
    q, k, v, log_alpha = q.to(dt), k.to(dt), v.to(dt), log_alpha.to(dt)
    B, H, T, Dk = q.shape
    S = q.new_zeros(B, H, Dk, v.shape[-1])
    outs = []
    for c0 in range(0, T, chunk):
        qc, kc, vc = q[:, :, c0:c0 + chunk], k[:, :, c0:c0 + chunk], v[:, :, c0:c0 + chunk]
        L = torch.cumsum(log_alpha[:, :, c0:c0 + chunk], dim=-2)
        C = qc.shape[-2]
        qe, ke = qc * L.exp(), kc * (-L).exp()
        causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
        A = (qe @ ke.transpose(-1, -2)).masked_fill(~causal, 0.0)
        outs.append(A @ vc + qe @ S)
        last = L[:, :, -1:, :]
        S = last.transpose(-1, -2).exp() * S + (kc * (last - L).exp()).transpose(-1, -2) @ vc
    return torch.cat(outs, dim=2).to(out_dtype)


def gla_recurrent(q, k, v, log_alpha):
    """Step-by-step GLA recurrence (reference for tests; slow)."""
    B, H, T, Dk = q.shape
    S = q.new_zeros(B, H, Dk, v.shape[-1])
    outs = []
    for t in range(T):
        S = log_alpha[:, :, t, :, None].exp() * S + k[:, :, t, :, None] * v[:, :, t, None, :]
        outs.append(torch.einsum("bhd,bhde->bhe", q[:, :, t], S))
    return torch.stack(outs, dim=2)


class GatedLinearAttention(nn.Module):
    """GLA token mixer (Yang et al. 2024) with a pluggable *rotation* positional scheme.

    Defaults from the GLA paper / the Selective RoPE configs: gate low rank 16, gate logit
    normaliser 16, swish output gate, per-head RMSNorm of the output. ``log alpha`` is clamped
    at -4 (a gate below ``e^-4`` per step; the logit normaliser makes that ``sigmoid < e^-64``,
    which never binds in practice) so the chunked form stays finite. Rotations are applied to
    ``q``, ``k`` before the recurrence (the "RoPE trick" of the Selective RoPE paper, method section).
    """

    def __init__(self, d_model: int, n_heads: int, positional: nn.Module | None = None,
                 gate_rank: int = 16, gate_normalizer: float = 16.0, chunk: int = 16,
                 log_alpha_min: float = -4.0):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.gk_proj = nn.Sequential(nn.Linear(d_model, gate_rank, bias=False), nn.Linear(gate_rank, d_model, bias=True))
        self.g_proj = nn.Linear(d_model, d_model, bias=False)
        self.o_norm = RMSNorm(self.head_dim)
        self.o_proj = nn.Linear(d_model, d_model, bias=False)
        self.gate_normalizer = gate_normalizer
        self.chunk, self.log_alpha_min = chunk, log_alpha_min  # 16 * 4 = 64 < 80: exp stays finite
        self.positional = positional if positional is not None else NoPE()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        H, D = self.n_heads, self.head_dim

        def heads(t):
            return t.view(B, T, H, D).transpose(1, 2)

        q, k, v = heads(self.q_proj(x)), heads(self.k_proj(x)), heads(self.v_proj(x))
        q, k, bias = self.positional(q, k, x)
        if bias is not None:
            raise ValueError("GatedLinearAttention supports rotation schemes only, not additive biases")
        log_alpha = heads(F.logsigmoid(self.gk_proj(x)) / self.gate_normalizer).clamp_min(self.log_alpha_min)
        o = gla_chunked(q * D**-0.5, k, v, log_alpha, self.chunk)
        o = self.o_norm(o).transpose(1, 2).reshape(B, T, d)
        return self.o_proj(o * F.silu(self.g_proj(x)))


@dataclass
class TinyLMConfig:
    """Configuration of :class:`TinyLM`."""

    vocab_size: int
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    mlp_hidden: int = 128
    mixer: str = "softmax"  # "softmax" | "gla"
    ssmax: bool = False

    def __post_init__(self):
        if self.mixer not in ("softmax", "gla"):
            raise ValueError(f"mixer must be 'softmax' or 'gla', got {self.mixer!r}")
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "mlp_hidden"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if self.ssmax and self.mixer != "softmax":
            raise ValueError("ssmax applies to the softmax mixer only")


class TinyLM(nn.Module):
    """Pre-norm causal LM: embedding, ``n_layers`` x (mixer + SwiGLU), RMSNorm, linear head.

    ``positional``: a factory ``layer_index -> nn.Module`` (one scheme per layer), or one module
    shared by every layer (as the BAM code shares its prior), or ``None`` (NoPE).
    """

    def __init__(self, config: TinyLMConfig, positional: Callable[[int], nn.Module] | nn.Module | None = None):
        super().__init__()
        self.config = c = config
        self.embed = nn.Embedding(c.vocab_size, c.d_model)
        self.layers = nn.ModuleList()
        for i in range(c.n_layers):
            if positional is None:
                pos = NoPE()
            elif isinstance(positional, nn.Module):
                pos = positional
            else:
                pos = positional(i)
            if c.mixer == "softmax":
                mixer = SoftmaxAttention(c.d_model, c.n_heads, pos, ssmax=c.ssmax)
            else:
                mixer = GatedLinearAttention(c.d_model, c.n_heads, pos)
            self.layers.append(nn.ModuleDict(dict(norm1=RMSNorm(c.d_model), mixer=mixer,
                                                  norm2=RMSNorm(c.d_model), mlp=SwiGLU(c.d_model, c.mlp_hidden))))
        self.norm = RMSNorm(c.d_model)
        self.head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        for layer in self.layers:
            h = h + layer["mixer"](layer["norm1"](h))
            h = h + layer["mlp"](layer["norm2"](h))
        return self.head(self.norm(h))


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters (a module shared by several layers counts once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def lm_loss(model: nn.Module, batch) -> torch.Tensor:
    """Cross-entropy of ``model(x)`` against ``y`` (positions with ``y == -100`` ignored)."""
    x, y = batch
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=-100)


@torch.no_grad()
def masked_accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 64,
                    per_sequence: bool = False) -> torch.Tensor:
    """Argmax accuracy on positions where ``y != -100``.

    Returns per-sequence accuracies (fraction of scored positions right) or, with
    ``per_sequence=True``, per-sequence exact match (all scored positions right) as floats.
    """
    was = model.training
    model.eval()
    out = []
    for i in range(0, x.shape[0], batch_size):
        xb, yb = x[i : i + batch_size], y[i : i + batch_size]
        pred = model(xb).argmax(-1)
        m = yb != -100
        right = (pred == yb) & m
        if per_sequence:
            out.append((right.sum(-1) == m.sum(-1)).float())
        else:
            out.append(right.sum(-1).float() / m.sum(-1).clamp_min(1))
    model.train(was)
    return torch.cat(out)
