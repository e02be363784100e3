"""BAM: positional encoding as a prior over relative positions; the generalised-Gaussian prior.

Paper: "Bayesian Attention Mechanism: A Probabilistic Framework for Positional Encoding and
Context Length Extrapolation", Bianchessi, Aguirre, Barros, Kupssinskue, ICLR 2026,
arXiv 2505.22842. Official code: https://github.com/ArthurSBianchessi/BAM (this is an independent
re-implementation).

BAM (Sec. 2, Theorem 1) reads an additive attention score ``f_cont(q_i, k_j) + g_pos(i, j)`` as
``log p(content) + log p(position)``: the positional term is a log-prior over relative positions.
NoPE is the uniform prior (Lemma 1); ALiBi is a Laplace prior ``-m_h |j - i|`` (Lemma 2). GGD-BAM
(Sec. 2.3) uses a generalised Gaussian per head,

    g_h(i, j) = -exp(s_h) * (|j - i - mu_h| + eps) ** beta_h,

with a learnable log-scale ``s_h`` initialised to the ALiBi slopes (``exp(s_h) = m_h``), a
learnable shape ``beta_h`` initialised to 1 (so training starts from ALiBi) and allowed to
become <= 0 (``beta < 0`` puts less prior mass near the query: "retrieval" heads), location
``mu_h = 0`` fixed, and ``eps = 1e-5`` keeping ``0 ** beta`` finite. This parametrisation (scale
outside the power) and these initial values are those of the official code's ``AttentionPrior``.
Special cases: ``beta = 1`` -> ALiBi (plus a per-head constant ``-m_h eps``, which softmax
ignores); ``beta = 0`` -> the constant ``-exp(s_h)``, i.e. NoPE.

Allowed values: ``eps > 0`` (finite): at distance 0, ``eps = 0`` gives ``0 ** beta = inf`` for
``beta < 0``, a ``-inf`` prior on the diagonal and NaN attention at the first query (whose only key
is itself), and ``d/dbeta 0 ** beta = NaN`` for any ``beta``. The shape may be any real number
for which the prior is finite: ``exp(s_h) z ** beta_h`` must not overflow for the distances
``z`` in ``[eps, T_k - 1 + |mu_h| + eps]``, i.e. ``beta_h > (log(max) - s_h) / log(eps)`` (for
``eps < 1``; ``max`` the largest float of the prior's dtype, e.g. about -7.7 for eps = 1e-5
and an ALiBi slope) and ``beta_h < (log(max) - s_h) / log(z_max)``. ``GGDPriorConfig`` checks
the initial shape at distance 0 and :meth:`GGDPositionalBias.bias` raises a ``ValueError``,
naming the heads and their allowed range, whenever a learned (or loaded) parameter makes the prior
non-finite, instead of letting NaN reach the attention.

With SSMax (Nakanishi 2025, used by the paper's best models, Sec. 3), the logits including the
prior are multiplied by ``s'_h log n_i`` (``n_i`` = visible keys), see
``iclr26.common.tiny_attention.SoftmaxAttention(ssmax=True)``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from iclr26.common.tiny_attention import alibi_slopes, relative_distance

_LOG_MAX32 = math.log(torch.finfo(torch.float32).max)


@dataclass
class GGDPriorConfig:
    """Hyper-parameters of :class:`GGDPositionalBias` (defaults from the official code)."""

    n_heads: int
    scale_init: str | float = "alibi"  # "alibi": exp(s_h) = ALiBi slope m_h; a float a > 0: exp(s_h) = 1/a
    shape_init: float = 1.0
    loc_init: float = 0.0
    train_scale: bool = True
    train_shape: bool = True
    train_loc: bool = False
    eps: float = 1e-5

    def __post_init__(self):
        if not isinstance(self.n_heads, int) or self.n_heads < 1:
            raise ValueError(f"n_heads must be a positive integer, got {self.n_heads!r}")
        if isinstance(self.scale_init, str):
            if self.scale_init != "alibi":
                raise ValueError(f"scale_init must be 'alibi' or a positive float, got {self.scale_init!r}")
        elif not (self.scale_init > 0 and math.isfinite(self.scale_init)):
            raise ValueError(f"scale_init must be 'alibi' or a positive float, got {self.scale_init!r}")
        if not (self.eps > 0 and math.isfinite(self.eps)):
            raise ValueError(f"eps must be a finite number > 0 (it keeps the prior (|j - i - mu| + eps) ** beta and "
                             f"its gradient in beta finite at distance 0), got {self.eps!r}")
        if not math.isfinite(self.shape_init):
            raise ValueError(f"shape_init must be finite, got {self.shape_init!r}")
        # at distance 0 the prior is eps ** beta: finite in float32 iff beta * log(eps) < log(max)
        bound = _LOG_MAX32 / math.log(self.eps) if self.eps != 1.0 else None
        if bound is not None and not (self.shape_init > bound if self.eps < 1 else self.shape_init < bound):
            side = ">" if self.eps < 1 else "<"
            raise ValueError(f"shape_init must be finite and keep eps ** shape_init finite in float32: with "
                             f"eps={self.eps!r}, shape_init must be {side} {bound:.4g}, got {self.shape_init!r}")
        if not math.isfinite(self.loc_init):
            raise ValueError(f"loc_init must be finite, got {self.loc_init!r}")


class GGDPositionalBias(nn.Module):
    """Generalised-Gaussian positional prior as an additive attention bias.

    ``bias(T_q, T_k)`` returns ``(n_heads, T_q, T_k)`` log-prior values ``g_h(i, j)`` (queries
    aligned to the last ``T_q`` keys); add it to the attention logits, or pass it (plus the causal
    ``-inf`` mask) as ``attn_mask`` to ``F.scaled_dot_product_attention``. ``forward(q, k, x)``
    is the positional-scheme protocol of ``iclr26.common.tiny_attention``.
    """

    def __init__(self, config: GGDPriorConfig):
        super().__init__()
        self.config = c = config
        if c.scale_init == "alibi":
            scale = alibi_slopes(c.n_heads)
        else:
            scale = torch.full((c.n_heads,), 1.0 / float(c.scale_init))
        self.log_scale = nn.Parameter(scale.log(), requires_grad=c.train_scale)
        self.shape = nn.Parameter(torch.full((c.n_heads,), float(c.shape_init)), requires_grad=c.train_shape)
        self.loc = nn.Parameter(torch.full((c.n_heads,), float(c.loc_init)), requires_grad=c.train_loc)

    def bias(self, T_q: int, T_k: int | None = None, device=None) -> torch.Tensor:
        if T_q < 1 or (T_k is not None and T_k < T_q):
            raise ValueError(f"need 1 <= T_q <= T_k, got T_q={T_q}, T_k={T_k}")
        eps = self.config.eps
        if not (eps > 0 and math.isfinite(eps)):
            raise ValueError(f"config.eps must be a finite number > 0, got {eps!r}")
        d = relative_distance(T_q, T_k, device=device if device is not None else self.shape.device)
        z = (d[None] - self.loc[:, None, None]).abs() + eps
        out = -torch.exp(self.log_scale)[:, None, None] * z ** self.shape[:, None, None]
        self._check_finite(out, z)
        return out

    def _check_finite(self, out: torch.Tensor, z: torch.Tensor) -> None:
        """Raise if the prior ``out`` (``(H, T_q, T_k)``, distances ``z``) has a non-finite entry:
        an overflowing ``exp(s) z ** beta`` (or a NaN parameter) would give ``-inf`` rows and NaN
        attention, or NaN gradients, without an error. Tensors without data (the meta device)
        are not checked."""
        if out.device.type == "meta":
            return
        finite = torch.isfinite(out).flatten(1).all(1)
        if bool(finite.all()):
            return
        with torch.no_grad():
            heads = (~finite).nonzero().flatten().tolist()
            log_max = math.log(torch.finfo(out.dtype).max)
            zs = z.flatten(1)
            parts = []
            for h in heads:
                s_h, b_h, mu_h = float(self.log_scale[h]), float(self.shape[h]), float(self.loc[h])
                lo_z, hi_z = float(zs[h].min()), float(zs[h].max())
                lo = (log_max - s_h) / math.log(lo_z) if 0 < lo_z < 1 else -math.inf
                hi = (log_max - s_h) / math.log(hi_z) if hi_z > 1 else math.inf
                parts.append(f"head {h}: shape {b_h:.4g}, log-scale {s_h:.4g}, loc {mu_h:.4g} "
                             f"(allowed shapes here: ({lo:.4g}, {hi:.4g}))")
        raise ValueError(
            f"the GGD prior -exp(s) (|j - i - mu| + eps) ** beta is not finite in {out.dtype} for distances "
            f"up to {float(zs.max()):.4g} (eps={self.config.eps!r}); the shape must keep exp(s) z ** beta finite "
            f"for every distance z (and every parameter must be finite): " + "; ".join(parts))

    def forward(self, q, k, x=None):
        b = self.bias(q.shape[-2], k.shape[-2], q.device)
        if b.dtype != q.dtype:
            cast = b.to(q.dtype)
            if cast.device.type != "meta" and not bool(torch.isfinite(cast).all()):
                raise ValueError(f"the GGD prior overflows in the queries' dtype {q.dtype} (most negative entry "
                                 f"{float(b.detach().min()):.4g}); compute attention in a wider dtype or keep the shape "
                                 f"and scale smaller")
            return q, k, cast
        return q, k, b

    def extra_repr(self) -> str:
        return f"n_heads={self.config.n_heads}, eps={self.config.eps}"
