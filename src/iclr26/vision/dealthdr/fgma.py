"""Flow-guided masked attention (FGMA) of DeAltHDR.

Paper: "DeAltHDR: Learning HDR Video Reconstruction from Degraded Alternating Exposure Sequences"
(ICLR 2026, OpenReview buzIPnGxA8; no arXiv id is given by the authors' pages). Official code:
https://github.com/zhang-shuohao/DeAltHDR (``basicsr/models/archs/dealthdr_arch.py``, class
``FlowGuidedMaskedAttention``; ``basicsr/models/dealthdr_model.py`` for the training schedule of s).

FGMA aligns a neighbour frame's features to the current frame. Optical flow warps the neighbour
everywhere; a forward-backward round trip of the current frame,

    D = | warp(warp(L_t -> t-1) -> t) - L_t |            (paper Eq. 3-4; mean over channels)
    M = 1[ s * D / 255 > 0.5 ]                            (paper Eq. 5; D in 0..255 units)

marks the pixels where the flow is unreliable, and cross-attention (queries from the current
frame, keys and values from the neighbour) runs only at those pixels. ``s`` is the sensitivity:
``s = 0`` is flow only, ``s = inf`` attention everywhere. The output is the concatenation of the
warped feature, the mask and the (masked) attention feature (paper Eq. 8).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

#: the 16 sensitivities of the "mixed" training mode (official ``dealthdr_model.py``,
#: ``get_sensitivity_for_sample``): 0, six points in (0, 1], six in (1, 100], 15, 100, inf
TRAINING_SENSITIVITIES = ((0.0,) + tuple(i / 6 for i in range(1, 7)) + tuple(1 + i * 99 / 6 for i in range(1, 7))
                          + (15.0, 100.0, math.inf))
#: shares of the training modes per batch: flow only (s = 0), attention only (s = inf), FGMA with a
#: sensitivity drawn from TRAINING_SENSITIVITIES (official ``get_training_mode_for_batch``: 30/30/40)
TRAINING_MODE_SHARES = (0.3, 0.3, 0.4)


def _check_image(name: str, x) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 4:
        raise ValueError(f"{name} must have shape (B, C, H, W), got {tuple(x.shape)}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {x.dtype}")
    if x.numel() == 0:
        raise ValueError(f"{name} is empty: shape {tuple(x.shape)}")
    if not torch.isfinite(x).all():
        raise ValueError(f"{name} holds non-finite values")


def _check_flow(name: str, flow, ref: torch.Tensor) -> None:
    _check_image(name, flow)
    if flow.shape[1] != 2 or flow.shape[0] != ref.shape[0] or flow.shape[-2:] != ref.shape[-2:]:
        raise ValueError(f"{name} must have shape ({ref.shape[0]}, 2, {ref.shape[2]}, {ref.shape[3]}), "
                         f"got {tuple(flow.shape)}")


def warp(x: torch.Tensor, flow: torch.Tensor) -> torch.Tensor:
    """Backward warp: ``out(p) = x(p + flow(p))`` with bilinear sampling and border padding.

    ``flow[:, 0]`` is the horizontal (x) and ``flow[:, 1]`` the vertical (y) displacement in pixels
    (the official ``warp``'s convention). An integer flow moves pixels exactly.
    """
    _check_image("x", x)
    _check_flow("flow", flow, x)
    B, _, H, W = x.shape
    yy, xx = torch.meshgrid(torch.arange(H, dtype=x.dtype, device=x.device),
                            torch.arange(W, dtype=x.dtype, device=x.device), indexing="ij")
    gx = xx + flow[:, 0].to(x.dtype)
    gy = yy + flow[:, 1].to(x.dtype)
    grid = torch.stack((2 * gx / max(W - 1, 1) - 1, 2 * gy / max(H - 1, 1) - 1), dim=-1)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=True)


def block_matching_flow(a: torch.Tensor, b: torch.Tensor, radius: int = 4, window: int = 5) -> torch.Tensor:
    """Integer optical flow from ``a`` to ``b`` by exhaustive block matching: for every pixel ``p``
    the displacement ``d`` with ``|d_x|, |d_y| <= radius`` that minimises the mean absolute
    difference between ``a`` and ``b(. + d)`` over a ``window x window`` box around ``p``
    (ties go to the smallest displacement). ``warp(b, flow)`` is then aligned with ``a``.

    A stand-in for the pretrained SpyNet of the paper (no weights can be loaded here): a flow that
    is right where the motion is small and textured and wrong beyond ``radius`` or at occlusions,
    which is the regime the consistency mask is for.
    """
    _check_image("a", a)
    _check_image("b", b)
    if a.shape != b.shape:
        raise ValueError(f"a and b must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    if not isinstance(radius, int) or radius < 0:
        raise ValueError(f"radius must be a non-negative integer, got {radius!r}")
    if not isinstance(window, int) or window < 1 or window % 2 == 0:
        raise ValueError(f"window must be a positive odd integer, got {window!r}")
    r = radius
    bp = F.pad(b, (r, r, r, r), mode="replicate")
    H, W = a.shape[-2:]
    shifts = [(dy, dx) for dy in range(-r, r + 1) for dx in range(-r, r + 1)]
    # smallest displacement first, so that argmin's first-index tie rule prefers it
    shifts.sort(key=lambda d: (d[0] ** 2 + d[1] ** 2, d))
    costs = torch.stack([(a - bp[..., r + dy:r + dy + H, r + dx:r + dx + W]).abs().mean(1)
                         for dy, dx in shifts], dim=1)                                 # (B, S, H, W)
    costs = F.avg_pool2d(F.pad(costs, (window // 2,) * 4, mode="replicate"), window, stride=1)
    best = costs.argmin(dim=1)                                                          # (B, H, W)
    table = torch.tensor(shifts, dtype=a.dtype, device=a.device)                        # (S, 2) as (dy, dx)
    d = table[best]                                                                     # (B, H, W, 2)
    return torch.stack((d[..., 1], d[..., 0]), dim=1)


def consistency_error(current: torch.Tensor, flow_nbr_to_cur: torch.Tensor, flow_cur_to_nbr: torch.Tensor,
                      data_range: float = 1.0) -> torch.Tensor:
    """The round-trip error ``D`` of paper Eq. 3-4, in 0..255 units, shape (B, 1, H, W).

    ``current`` (L_t) is first warped into the neighbour's coordinates with the neighbour-to-
    current flow (``warp(L_t, flow_nbr_to_cur)`` is aligned with the neighbour), then back with the
    current-to-neighbour flow; ``D`` is the absolute difference to ``L_t``, averaged over channels
    (as the official ``compute_flow_mask``) and scaled from ``data_range`` to 255.
    """
    _check_image("current", current)
    _check_flow("flow_nbr_to_cur", flow_nbr_to_cur, current)
    _check_flow("flow_cur_to_nbr", flow_cur_to_nbr, current)
    if not (isinstance(data_range, (int, float)) and math.isfinite(data_range) and data_range > 0):
        raise ValueError(f"data_range must be a positive finite number, got {data_range!r}")
    there = warp(current, flow_nbr_to_cur)
    back = warp(there, flow_cur_to_nbr)
    return (back - current).abs().mean(1, keepdim=True) * (255.0 / data_range)


def _sensitivity_tensor(s, batch: int, device) -> torch.Tensor:
    if isinstance(s, torch.Tensor):
        t = s.detach().to(device=device, dtype=torch.float64).reshape(-1)
    elif isinstance(s, (int, float)) and not isinstance(s, bool):
        t = torch.tensor([float(s)], dtype=torch.float64, device=device)
    else:
        raise TypeError(f"s must be a number or a tensor of per-sample sensitivities, got {type(s).__name__}")
    if t.numel() not in (1, batch):
        raise ValueError(f"s must hold 1 or {batch} sensitivities (one per sample), got {t.numel()}")
    if torch.isnan(t).any() or (t < 0).any():
        raise ValueError(f"s must be >= 0 (0: flow only, inf: attention everywhere), got {t.tolist()}")
    return t.expand(batch).clone()


def occlusion_mask(D: torch.Tensor, s) -> torch.Tensor:
    """``M = 1[s * D / 255 > 0.5]`` (paper Eq. 5), per sample when ``s`` is a tensor of shape (B,).

    ``s = 0`` gives an empty mask (flow only) and ``s = inf`` a full one (attention everywhere,
    also where ``D = 0``, which the paper's limit means and the formula leaves undefined).
    """
    _check_image("D", D)
    if D.shape[1] != 1:
        raise ValueError(f"D must have one channel, shape (B, 1, H, W), got {tuple(D.shape)}")
    if (D < 0).any():
        raise ValueError("D must be non-negative (an absolute difference)")
    st = _sensitivity_tensor(s, D.shape[0], D.device).view(-1, 1, 1, 1)
    finite = torch.isfinite(st)
    score = torch.where(finite, st, torch.zeros_like(st)) * D.double() / 255.0
    return torch.where(finite, (score > 0.5).double(), torch.ones_like(score)).to(D.dtype)


def sample_training_sensitivities(batch: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Per-sample sensitivities of the official "mixed" training mode: ``floor(0.3 B)`` samples at
    ``s = 0``, ``floor(0.3 B)`` at ``s = inf`` and the rest drawn uniformly from
    :data:`TRAINING_SENSITIVITIES`, in a random order."""
    if not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be a positive integer, got {batch!r}")
    n_flow = int(TRAINING_MODE_SHARES[0] * batch)
    n_attn = int(TRAINING_MODE_SHARES[1] * batch)
    n_mix = batch - n_flow - n_attn
    pts = torch.tensor(TRAINING_SENSITIVITIES, dtype=torch.float64)
    mix = pts[torch.randint(len(pts), (n_mix,), generator=generator)]
    s = torch.cat([torch.zeros(n_flow, dtype=torch.float64), torch.full((n_attn,), math.inf, dtype=torch.float64), mix])
    return s[torch.randperm(batch, generator=generator)]


class FlowGuidedMaskedAttention(nn.Module):
    """FGMA: flow warping everywhere, cross-attention only where the flow is unreliable.

    ``forward(feat_cur, feat_nbr, flow_cur_to_nbr, D, s)`` returns ``(out, mask)`` with ``out``
    the concatenation ``[warp(feat_nbr, flow_cur_to_nbr), M, A]`` of shape (B, 2C + 1, H, W)
    (paper Eq. 8) and ``mask`` M of shape (B, 1, H, W). ``A`` is zero outside the mask; inside it,
    ``A = W_o softmax(Q K^T / sqrt(d)) V`` with ``Q = W_q feat_cur`` at the masked pixels only and
    ``K = W_k feat_nbr``, ``V = W_v feat_nbr`` over all pixels of the neighbour (``window=None``)
    or over the ``(2 window + 1)^2`` neighbour pixels around the query's position (multi-head; a
    sparse set of queries: the cost grows with the number of masked pixels).

    ``D`` is the round-trip error of :func:`consistency_error` (computed once from the images, so
    the same network can be run at any ``s``); ``mask_override`` replaces M (for controls such as
    a random mask of the same size).
    """

    def __init__(self, dim: int, num_heads: int = 1, sensitivity: float = 15.0, window: int | None = None,
                 bias: bool = False, qk_norm: bool = False, temperature: float = 1.0):
        super().__init__()
        if not isinstance(dim, int) or dim < 1:
            raise ValueError(f"dim must be a positive integer, got {dim!r}")
        if not isinstance(num_heads, int) or num_heads < 1 or dim % num_heads:
            raise ValueError(f"num_heads must be a positive integer dividing dim={dim}, got {num_heads!r}")
        if window is not None and (not isinstance(window, int) or window < 0):
            raise ValueError(f"window must be None (global attention) or a non-negative integer radius, got {window!r}")
        if not isinstance(qk_norm, bool):
            raise TypeError(f"qk_norm must be a bool, got {type(qk_norm).__name__}")
        if not (isinstance(temperature, (int, float)) and not isinstance(temperature, bool)
                and math.isfinite(temperature) and temperature > 0):
            raise ValueError(f"temperature must be a positive finite number, got {temperature!r}")
        _sensitivity_tensor(sensitivity, 1, "cpu")
        self.dim, self.num_heads, self.sensitivity = dim, num_heads, float(sensitivity)  # s = 15: official default
        self.window = window
        self.q = nn.Conv2d(dim, dim, 1, bias=bias)
        self.kv = nn.Conv2d(dim, 2 * dim, 1, bias=bias)
        self.proj_out = nn.Conv2d(dim, dim, 1, bias=bias)
        # qk_norm: queries and keys L2-normalised over the channels of a head and their cosine scaled
        # by a learnable per-head temperature (official dealthdr_arch.py: F.normalize on q and k,
        # ``self.temperature`` initialised to ones); otherwise the fixed 1 / sqrt(d) scaling
        self.qk_norm = qk_norm
        self.temperature = nn.Parameter(torch.full((num_heads,), float(temperature))) if qk_norm else None

    def _logit_scale(self, q: torch.Tensor, k: torch.Tensor, d: int):
        """Queries and keys (head dimension at dim 1) brought to the logit scale."""
        if self.qk_norm:
            q = F.normalize(q, dim=1) * self.temperature.view(-1, *([1] * (q.dim() - 1))).to(q.dtype)
            return q, F.normalize(k, dim=1)
        return q / math.sqrt(d), k

    def attention_macs(self, n_queries: int, n_keys: int) -> int:
        """Multiply-accumulates of the attention part for ``n_queries`` masked pixels attending to
        ``n_keys`` neighbour pixels each (the whole frame, or the window): query and output
        projections per query, K and V projections per neighbour pixel (counted once per frame,
        ``n_keys`` of them for global attention), Q K^T and A V per query and key."""
        C = self.dim
        if n_queries == 0:
            return 0
        return 2 * n_queries * C * C + 2 * n_keys * C * C + 2 * n_queries * n_keys * C

    def keys_per_query(self, H: int, W: int) -> int:
        """Keys each query attends to: ``H W`` (global) or the (2 window + 1)^2 window."""
        return H * W if self.window is None else (2 * self.window + 1) ** 2

    def forward(self, feat_cur: torch.Tensor, feat_nbr: torch.Tensor, flow_cur_to_nbr: torch.Tensor,
                D: torch.Tensor, s=None, mask_override: torch.Tensor | None = None):
        _check_image("feat_cur", feat_cur)
        _check_image("feat_nbr", feat_nbr)
        if feat_cur.shape != feat_nbr.shape:
            raise ValueError(f"feat_cur and feat_nbr must have the same shape, got {tuple(feat_cur.shape)} "
                             f"and {tuple(feat_nbr.shape)}")
        B, C, H, W = feat_cur.shape
        if C != self.dim:
            raise ValueError(f"feat_cur has {C} channels, the module was built for dim={self.dim}")
        _check_flow("flow_cur_to_nbr", flow_cur_to_nbr, feat_cur)
        if mask_override is not None:
            _check_image("mask_override", mask_override)
            if mask_override.shape != (B, 1, H, W):
                raise ValueError(f"mask_override must have shape {(B, 1, H, W)}, got {tuple(mask_override.shape)}")
            mask = (mask_override > 0.5).to(feat_cur.dtype)
        else:
            if D is None or not isinstance(D, torch.Tensor) or D.shape != (B, 1, H, W):
                raise ValueError(f"D must be a tensor of shape {(B, 1, H, W)}, got "
                                 f"{None if D is None else tuple(getattr(D, 'shape', ()))}")
            mask = occlusion_mask(D.to(feat_cur.dtype), self.sensitivity if s is None else s)
        warped = warp(feat_nbr, flow_cur_to_nbr)
        h, d = self.num_heads, C // self.num_heads
        q_all = self.q(feat_cur).view(B, h, d, H * W)
        kv = self.kv(feat_nbr)
        w_out = self.proj_out.weight.view(C, C)
        flat_mask = mask.view(B, H * W) > 0.5
        if self.window is not None:
            r = self.window
            K2 = (2 * r + 1) ** 2
            kv_win = F.unfold(kv, 2 * r + 1, padding=r).view(B, 2, h, d, K2, H * W)
            valid = F.unfold(torch.ones(1, 1, H, W, dtype=kv.dtype, device=kv.device), 2 * r + 1,
                             padding=r).view(K2, H * W) > 0.5
        rows = []
        for b in range(B):                       # per sample: only its masked pixels become queries
            sel = flat_mask[b].nonzero(as_tuple=True)[0]
            row = feat_cur.new_zeros(C, H * W)
            if sel.numel():
                q = q_all[b][:, :, sel]                                          # (h, d, N)
                if self.window is None:
                    k, v = kv[b].view(2, h, d, H * W).unbind(0)
                    qs, ks = self._logit_scale(q, k, d)
                    logits = torch.einsum("hdn,hdk->hnk", qs, ks)
                    a = torch.einsum("hnk,hdk->hdn", logits.softmax(-1), v).reshape(C, -1)
                else:
                    k, v = kv_win[b][..., sel].unbind(0)                         # (h, d, K2, N)
                    qs, ks = self._logit_scale(q, k, d)
                    logits = torch.einsum("hdn,hdkn->hnk", qs, ks)
                    logits = logits.masked_fill(~valid[:, sel].T[None], float("-inf"))
                    a = torch.einsum("hnk,hdkn->hdn", logits.softmax(-1), v).reshape(C, -1)
                a = w_out @ a
                if self.proj_out.bias is not None:
                    a = a + self.proj_out.bias[:, None]
                row = row.index_copy(1, sel, a)
            rows.append(row)
        attn_out = torch.stack(rows).view(B, C, H, W)
        return torch.cat([warped, mask, attn_out], dim=1), mask

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, num_heads={self.num_heads}, sensitivity={self.sensitivity:g}, window={self.window}, "
                f"qk_norm={self.qk_norm}")
