"""Selective RoPE: input-dependent rotary position embedding.

Paper: "Selective Rotary Position Embedding", Movahedi, Carstensen, Afzal, Hutter, Orvieto,
Cevher, ICLR 2026, arXiv 2511.17388. Official code: https://github.com/timurcarstensen/selective-rope
(this is an independent re-implementation in pure torch; no Triton, no flash-linear-attention).

RoPE rotates the feature pair ``j`` of a query/key at position ``t`` by the fixed angle
``theta_{t,j} = omega_j * t``. Selective RoPE replaces ``t`` by a learned, input-dependent
cumulative phase (the paper's "Selective RoPE" method section; official `SelectiveRoPE` module):

    phi_t     = W_2 W_1 l2norm(x_t)                 (low-rank phase projection, per head)
    phi_t    <- causal_depthwise_conv(phi)_t         (short convolution, kernel 4; without it, the
                                                      official ``skip_conv`` first difference
                                                      phi_t - phi_{t-1}, so that Phi_t = W_2 W_1 l2norm(x_t))
    phi_t    <- phi_t * sigmoid(W_g x_t)             (optional phase gate)
    phi_t    <- phi_t + exp(b)                       (optional learned phase bias)
    Phi_t     = sum_{s<=t} phi_s                     (cumulative phase)
    theta_t,j = omega_j * Phi_t,j,  omega_j = temp_max / base^(2j/D)   ("rope" schedule)
                                    omega_j = temp_max tan(a_j/2) / tan(a_max/2),
                                    a_j = linspace(0, theta pi, D/2)  ("rfa" schedule of the
                                    official ``rotary_temperature``, theta in (0, 1))

and rotates ``[q0, q1] -> [q0 cos - q1 sin, q0 sin + q1 cos]``. Then
``<R(theta_t) q_t, R(theta_s) k_s>`` depends on ``Phi_t - Phi_s = sum_{s<r<=t} phi_r``: a
selective (input-gated) relative position. With ``phi_t == 1`` the phases are ``Phi_t = t + 1``
and the layer is RoPE (shifted by one position, which leaves every relative angle unchanged).
Composed with GLA's decay ``alpha_t`` this is the complex recurrence
``S_t = alpha_t e^{i theta_t} S_{t-1} + k_t v_t^T`` (paper, method section), implemented with the
"RoPE trick" of rotating ``q`` and ``k`` before a real-valued GLA.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from iclr26.common.tiny_attention import rope_frequencies, rotate_half_pairs


@dataclass
class SelectiveRoPEConfig:
    """Hyper-parameters of :class:`SelectiveRoPE`.

    Defaults follow the official code's ``SelectiveRoPE`` signature: ``phi_rank=16``,
    ``d_conv=4``, ``schedule="rope"`` with ``base=500000`` (``temp_type``, ``temp_theta``),
    ``temp_max=1.0``, no gate, no bias, frozen frequencies. The paper's synthetic-task configs use
    ``phi_rank=32``; the state-tracking config uses ``base=1`` (all frequencies ``temp_max``) with
    ``use_bias=True``; the copying config uses ``use_conv=False`` (``skip_conv``),
    ``schedule="rfa"``, ``base=0.9999`` and ``temp_max=0.25``. ``base`` is the official
    ``temp_theta``: ``>= 1`` for the "rope" schedule, in ``(0, 1)`` for "rfa".
    """

    head_dim: int
    model_dim: int
    num_heads: int = 1
    phi_rank: int = 16
    d_conv: int = 4
    use_conv: bool = True
    conv_activation: str | None = None  # None | "silu"
    base: float = 500000.0
    schedule: str = "rope"  # "rope" | "rfa"
    temp_max: float = 1.0
    train_frequencies: bool = False
    use_gate: bool = False
    use_bias: bool = False

    def __post_init__(self):
        for name in ("head_dim", "model_dim", "num_heads", "phi_rank", "d_conv"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even (features are rotated in pairs), got {self.head_dim}")
        if self.model_dim % self.num_heads:
            raise ValueError(f"model_dim ({self.model_dim}) must be divisible by num_heads ({self.num_heads})")
        if self.schedule not in ("rope", "rfa"):
            raise ValueError(f"schedule must be 'rope' or 'rfa', got {self.schedule!r}")
        if self.schedule == "rope" and not self.base >= 1.0:
            raise ValueError(f"base must be >= 1 for the 'rope' schedule, got {self.base}")
        if self.schedule == "rfa" and not 0.0 < self.base < 1.0:
            raise ValueError(f"base must lie in (0, 1) for the 'rfa' schedule, got {self.base}")
        if self.temp_max <= 0:
            raise ValueError(f"temp_max must be > 0, got {self.temp_max}")
        if self.conv_activation not in (None, "silu"):
            raise ValueError(f"conv_activation must be None or 'silu', got {self.conv_activation!r}")


def l2_normalize(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``x / ||x||_2`` over the last dimension."""
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)


def selective_frequencies(config: SelectiveRoPEConfig) -> torch.Tensor:
    """The ``D/2`` rotation frequencies ``omega_j`` of ``config`` in float32 (official
    ``rotary_temperature``): "rope" ``temp_max / base^(2j/D)``; "rfa" ``temp_max tan(a_j/2) /
    max_j tan(a_j/2)`` with ``a_j`` evenly spaced on ``[0, base * pi]`` (so ``omega_0 = 0``)."""
    c = config
    if c.schedule == "rope":
        return rope_frequencies(c.head_dim, c.base, c.temp_max)
    a = torch.linspace(0.0, c.base * torch.pi, c.head_dim // 2, dtype=torch.float64)
    t = torch.sqrt((1 - torch.cos(a)) / (1 + torch.cos(a)))
    return (c.temp_max * t / t.max()).to(torch.float32)


def apply_selective_rotary(q: torch.Tensor, k: torch.Tensor, phases: torch.Tensor, omega: torch.Tensor,
                           offset: torch.Tensor | None = None):
    """Rotate ``q``, ``k`` (``(B, H, T, D)``) by ``omega * cumsum(phases)``.

    ``phases``: ``(B, H, T, D/2)``; ``omega``: ``(D/2,)``; ``offset``: the carried cumulative
    phase ``(B, H, 1, D/2)`` for continuing a sequence. Returns ``(q, k, Phi)`` with
    ``Phi = offset + cumsum(phases)``.

    The cumulative phase and the angles are computed in at least float32 whatever the dtype of
    ``q`` (an angle near 1500 rounded to bfloat16 is off by up to 4 radians); ``q`` and ``k`` come
    back in their own dtype.
    """
    dt = torch.promote_types(torch.promote_types(phases.dtype, omega.dtype), torch.float32)
    Phi = torch.cumsum(phases.to(dt), dim=-2)
    if offset is not None:
        Phi = Phi + offset.to(dt)
    angles = omega.to(device=Phi.device, dtype=dt) * Phi
    return rotate_half_pairs(q, angles), rotate_half_pairs(k, angles), Phi


class SelectiveRoPE(nn.Module):
    """Input-dependent rotary embedding (a positional scheme for ``iclr26.common.tiny_attention``).

    ``forward(q, k, x, cache=None) -> (q, k, None)``; ``q``, ``k``: ``(B, H, T, head_dim)``,
    ``x``: the token mixer's input ``(B, T, model_dim)``. For step-wise decoding use
    :meth:`rotate` with a cache (the conv window and the cumulative phase).
    """

    def __init__(self, config: SelectiveRoPEConfig):
        super().__init__()
        self.config = c = config
        self.pe_dim = c.head_dim // 2
        width = c.num_heads * self.pe_dim
        self.phi_proj = nn.Sequential(nn.Linear(c.model_dim, c.phi_rank, bias=False),
                                      nn.Linear(c.phi_rank, width, bias=False))
        if c.use_conv:
            # depthwise causal conv, no bias (official ShortConvolution(bias=False))
            self.conv_weight = nn.Parameter(torch.empty(width, c.d_conv))
            nn.init.kaiming_uniform_(self.conv_weight.unsqueeze(1), a=5**0.5)
        if c.use_gate:
            self.gate_proj = nn.Linear(c.model_dim, c.num_heads, bias=True)
        if c.use_bias:
            self.phi_bias = nn.Parameter(torch.zeros(c.num_heads, self.pe_dim))
        self.omega = nn.Parameter(selective_frequencies(c), requires_grad=c.train_frequencies)

    def phases(self, x: torch.Tensor, conv_cache: torch.Tensor | None = None):
        """Per-step phases ``phi`` ``(B, H, T, D/2)`` and the new conv cache: the last ``d_conv - 1``
        projected phases ``(B, width, d_conv - 1)`` with the convolution, the last one
        ``(B, width, 1)`` without it (the first difference needs it).

        The whole phase path (projection, convolution, gate, bias) runs in at least float32, and
        ``phi`` and the cache come back in that precision, whatever the module's dtype: the
        phases are summed over the sequence, so a per-step rounding to bfloat16 (spacing 2^-7 near
        a bias of 1) accumulates into the angle (about 0.5 rad by position 1,500). In a float32 or
        float64 module nothing is cast."""
        c = self.config
        B, T, d = x.shape
        if d != c.model_dim:
            raise ValueError(f"x has {d} features, SelectiveRoPE expects model_dim={c.model_dim}")
        w1, w2 = self.phi_proj[0].weight, self.phi_proj[1].weight
        dt = torch.promote_types(w2.dtype, torch.float32)
        h = l2_normalize(x.to(dt).view(B, T, c.num_heads, d // c.num_heads)).reshape(B, T, d)
        phi = F.linear(F.linear(h, w1.to(dt)), w2.to(dt)).transpose(1, 2)  # (B, width, T)
        new_cache = None
        if c.use_conv:
            pad = conv_cache.to(dt) if conv_cache is not None else phi.new_zeros(B, phi.shape[1], c.d_conv - 1)
            full = torch.cat([pad, phi], dim=-1)
            new_cache = full[..., -(c.d_conv - 1):] if c.d_conv > 1 else full[..., :0]
            phi = F.conv1d(full, self.conv_weight.to(dt).unsqueeze(1), groups=phi.shape[1])
            if c.conv_activation == "silu":
                phi = F.silu(phi)
        else:
            # official skip_conv: phi_t - phi_{t-1} (phi_{-1} = 0), so cumsum gives back phi_t
            prev = conv_cache.to(dt) if conv_cache is not None else phi.new_zeros(B, phi.shape[1], 1)
            full = torch.cat([prev, phi], dim=-1)
            new_cache = full[..., -1:]
            phi = full[..., 1:] - full[..., :-1]
        phi = phi.view(B, c.num_heads, self.pe_dim, T).transpose(-1, -2)  # (B,H,T,D/2)
        if c.use_bias:
            phi = phi + torch.exp(self.phi_bias.to(dt))[None, :, None, :]
        if c.use_gate:
            g = self.gate_proj
            gate = torch.sigmoid(F.linear(h, g.weight.to(dt), g.bias.to(dt))).transpose(1, 2)  # (B,H,T)
            phi = phi * gate[..., None]
        return phi, new_cache

    def rotate(self, q, k, x, cache=None):
        """Rotate with a decoding cache ``(conv_cache, Phi_last)``; returns ``(q, k, new_cache)``."""
        if q.shape != k.shape or q.dim() != 4:
            raise ValueError(f"q and k must both be (B, H, T, D), got {tuple(q.shape)} and {tuple(k.shape)}")
        if q.shape[-1] != self.config.head_dim or q.shape[1] != self.config.num_heads:
            raise ValueError(f"q has {q.shape[1]} heads of dim {q.shape[-1]}, expected "
                             f"{self.config.num_heads} heads of dim {self.config.head_dim}")
        conv_cache, offset = cache if cache is not None else (None, None)
        phi, conv_cache = self.phases(x, conv_cache)
        omega = self.omega
        if torch.finfo(omega.dtype).bits < 32:  # module cast to half precision: frozen frequencies
            omega = omega.float() if self.config.train_frequencies else selective_frequencies(self.config)
        q2, k2, Phi = apply_selective_rotary(q, k, phi, omega, offset)
        return q2, k2, (conv_cache, Phi[..., -1:, :])

    def forward(self, q, k, x):
        q2, k2, _ = self.rotate(q, k, x)
        return q2, k2, None
