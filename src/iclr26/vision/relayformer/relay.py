"""RelayFormer: local-global relay attention over fixed-size tiles, a gated query mask decoder and
the BCE + edge-BCE loss, at toy size (trained from scratch here).

Paper: "RelayFormer: A Unified Local-Global Attention Framework for Scalable Image and Video
Manipulation Localization", Huang et al., arXiv 2508.09459 (ICLR 2026). Official code:
https://github.com/WenOOI/RelayFormer (``models/RelayFormer.py``, ``models/GLoRA_vit.py``; read, not
copied). The official model is a pretrained timm ViT-B/16 whose blocks are swapped for LoRA + 4D-RoPE
blocks; here the same layout is written as a small ViT trained from scratch (see the README's
deviations).

Layout of one forward pass (image of any size ``H x W``):

1. :func:`split_tiles` cuts the (zero-padded) image into ``tile x tile`` sub-images with stride
   ``tile - 2 * overlap`` (official ``divide_patches``: stride = patch_size - 2 * overlap).
2. Each tile is patch-embedded; ``n_relay`` learned relay (GLR) tokens are prepended:
   ``[T_i; X_i]`` (official: CLS + ``tokens_per_patch - 1`` ViT register tokens).
3. Every layer ``l``: local attention, block ``l`` over ``[T_i; X_i]`` inside each tile; then
   relay-global attention over the relay tokens of all tiles of one image, computed with block
   ``l + 1``'s weights plus a global LoRA adapter and axial RoPE on (relay index, tile row, tile
   column) (official ``forward_features``: the next block with ``use_lora=1`` and 4D RoPE over
   (frame, token id, row, col); the frame axis is absent for still images). The last layer has no
   global step (official: ``if i + 1 < len(blocks)``).
4. :func:`merge_tiles` averages the overlapping tile feature maps back into one map (official
   ``reconstruct_from_overlap_patches``: fold and divide by the count).
5. :class:`GatedMaskDecoder`: ``n_queries`` learned queries cross-attend to the map, then
   ``mask = sum_q sigmoid(g(q)) <q, P(F)>`` (official ``GatedMaskDecoder``, 8 queries).
6. :func:`relay_loss`: ``BCE(mask) + lambda * BCE_w(mask)`` with weights on the mask's edges,
   ``lambda = 20`` (official ``edge_lambda = 20``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["RelayConfig", "RelayFormer", "RelayBlock", "GatedMaskDecoder", "LoRA", "split_tiles", "merge_tiles",
           "axial_rope", "edge_weight_map", "relay_loss", "pixel_f1", "NonFiniteLossError"]


class NonFiniteLossError(FloatingPointError):
    """Training produced a NaN or infinite loss; raised instead of continuing on garbage."""


# ------------------------------------------------------------------------------------ tiling
def _check_int(name: str, value, low: int = 1):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")


def _grid(size: int, tile: int, overlap: int) -> tuple[int, int]:
    """Tiles along one axis and the padded length: n * stride + 2 * overlap >= size."""
    stride = tile - 2 * overlap
    n = max(1, math.ceil((size - 2 * overlap) / stride))
    return n, n * stride + 2 * overlap


def split_tiles(x: torch.Tensor, tile: int, overlap: int = 0):
    """Cut ``x`` (B, C, H, W) into overlapping ``tile x tile`` sub-images.

    The image is zero-padded at the bottom / right to ``n * (tile - 2 overlap) + 2 overlap`` per axis
    (nothing is resized). Returns ``(tiles, grid)``: tiles (B, n_h * n_w, C, tile, tile) in row-major
    order and ``grid = (n_h, n_w)``.
    """
    if not isinstance(x, torch.Tensor) or x.ndim != 4:
        raise ValueError(f"x must be a (B, C, H, W) tensor, got {getattr(x, 'shape', type(x))}")
    _check_int("tile", tile)
    _check_int("overlap", overlap, 0)
    if tile - 2 * overlap < 1:
        raise ValueError(f"overlap must be < tile / 2, got tile={tile}, overlap={overlap}")
    B, C, H, W = x.shape
    (nh, Hp), (nw, Wp) = _grid(H, tile, overlap), _grid(W, tile, overlap)
    x = F.pad(x, (0, Wp - W, 0, Hp - H))
    stride = tile - 2 * overlap
    cols = F.unfold(x, kernel_size=tile, stride=stride)  # (B, C*tile*tile, n)
    tiles = cols.transpose(1, 2).reshape(B, nh * nw, C, tile, tile)
    return tiles, (nh, nw)


def merge_tiles(tiles: torch.Tensor, grid: tuple[int, int], out_hw: tuple[int, int], overlap: int = 0):
    """Inverse of :func:`split_tiles`: overlapping tiles (B, n, C, t, t) averaged into (B, C, H, W).

    Every output pixel is the mean of the tiles that cover it; the padding is cropped away.
    """
    if not isinstance(tiles, torch.Tensor) or tiles.ndim != 5 or tiles.shape[-1] != tiles.shape[-2]:
        raise ValueError(f"tiles must be (B, n, C, t, t), got {getattr(tiles, 'shape', type(tiles))}")
    nh, nw = grid
    B, n, C, t, _ = tiles.shape
    if n != nh * nw:
        raise ValueError(f"grid {grid} holds {nh * nw} tiles, tiles has {n}")
    _check_int("overlap", overlap, 0)
    stride = t - 2 * overlap
    if stride < 1:
        raise ValueError(f"overlap must be < tile / 2, got tile={t}, overlap={overlap}")
    Hp, Wp = nh * stride + 2 * overlap, nw * stride + 2 * overlap
    H, W = out_hw
    if H > Hp or W > Wp:
        raise ValueError(f"out_hw {out_hw} exceeds the tiled extent {(Hp, Wp)}")
    cols = tiles.reshape(B, n, C * t * t).transpose(1, 2)
    summed = F.fold(cols, (Hp, Wp), kernel_size=t, stride=stride)
    ones = torch.ones(1, t * t, n, dtype=tiles.dtype, device=tiles.device)
    count = F.fold(ones, (Hp, Wp), kernel_size=t, stride=stride)
    return (summed / count)[:, :, :H, :W]


# ------------------------------------------------------------------------------------ RoPE
def axial_rope(x: torch.Tensor, pos: torch.Tensor, dims: tuple[int, ...], base: float = 10000.0):
    """Rotary embedding along several axes: the first ``dims[0]`` channels of ``x`` rotate with
    ``pos[..., 0]``, the next ``dims[1]`` with ``pos[..., 1]``, and so on; the rest pass through.

    ``x`` (..., L, D), ``pos`` (L, A) integers. Within each axis chunk of size ``d`` the pairs
    ``(x_j, x_{j + d/2})`` rotate by ``p * base^(-j / (d/2))`` (official ``apply_rope`` /
    ``apply_4d_rope``, ``GLoRA_vit.py``, with the half-split rotation). A pure rotation, so
    ``<R(p) q, R(p') k>`` depends only on ``p - p'``.
    """
    if pos.ndim != 2 or pos.shape[1] != len(dims):
        raise ValueError(f"pos must be (L, {len(dims)}), got {tuple(pos.shape)}")
    if any(d % 2 or d < 0 for d in dims) or sum(dims) > x.shape[-1]:
        raise ValueError(f"dims {dims} must be even and sum to <= {x.shape[-1]}")
    out, start = [], 0
    for a, d in enumerate(dims):
        chunk = x[..., start:start + d]
        half = d // 2
        freqs = base ** (-torch.arange(half, dtype=torch.float32, device=x.device) / max(half, 1))
        theta = pos[:, a].to(torch.float32)[:, None] * freqs[None]  # (L, half)
        cos = torch.cat([theta.cos(), theta.cos()], -1).to(x.dtype)
        sin = torch.cat([theta.sin(), theta.sin()], -1).to(x.dtype)
        rot = torch.cat([-chunk[..., half:], chunk[..., :half]], -1)
        out.append(chunk * cos + rot * sin)
        start += d
    out.append(x[..., start:])
    return torch.cat(out, -1)


# ------------------------------------------------------------------------------------ blocks
class LoRA(nn.Module):
    """Low-rank adapter ``x A B * alpha / r``, B zero-initialised (official ``LoRALayer``: rank 8,
    alpha 16, A ~ 0.01 N(0, 1))."""

    def __init__(self, d_in: int, d_out: int, rank: int = 8, alpha: float = 16.0):
        super().__init__()
        _check_int("rank", rank)
        self.A = nn.Parameter(torch.randn(d_in, rank) * 0.01)
        self.B = nn.Parameter(torch.zeros(rank, d_out))
        self.scale = alpha / rank

    def forward(self, x):
        return (x @ self.A @ self.B) * self.scale


class RelayBlock(nn.Module):
    """A pre-norm transformer block whose attention and MLP carry a global LoRA branch.

    ``forward(x, use_global=False)`` is the plain (local) block; ``use_global=True`` adds the LoRA
    deltas and applies ``rope`` (a callable on q and k) - the official block's ``use_lora=1`` path.
    """

    def __init__(self, dim: int, heads: int, mlp_ratio: float = 4.0, lora_rank: int = 8):
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim ({dim}) must be divisible by heads ({heads})")
        self.heads = heads
        hidden = int(dim * mlp_ratio)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)
        self.lora_qkv, self.lora_proj = LoRA(dim, 3 * dim, lora_rank), LoRA(dim, dim, lora_rank)
        self.lora_fc1, self.lora_fc2 = LoRA(dim, hidden, lora_rank), LoRA(hidden, dim, lora_rank)

    def forward(self, x, use_global: bool = False, rope=None):
        B, L, D = x.shape
        h = self.norm1(x)
        qkv = self.qkv(h) + (self.lora_qkv(h) if use_global else 0)
        q, k, v = qkv.view(B, L, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        if rope is not None:
            q, k = rope(q), rope(k)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, L, D)
        x = x + self.proj(a) + (self.lora_proj(a) if use_global else 0)
        h = self.norm2(x)
        z = F.gelu(self.fc1(h) + (self.lora_fc1(h) if use_global else 0))
        return x + self.fc2(z) + (self.lora_fc2(z) if use_global else 0)


class GatedMaskDecoder(nn.Module):
    """Query-based gated mask decoder (official ``GatedMaskDecoder``).

    ``P = conv3x3(F)``; ``n_queries`` learned queries pass ``layers`` rounds of cross-attention to
    ``P``, self-attention and an FFN (post-norm); logits ``sum_q sigmoid(w^T q + b) <q, P(x)>``, then
    a 3x3 conv (official ``final_conv``).
    """

    def __init__(self, in_dim: int, hidden: int = 64, n_queries: int = 8, heads: int = 4, layers: int = 1):
        super().__init__()
        _check_int("n_queries", n_queries)
        self.proj = nn.Conv2d(in_dim, hidden, 3, padding=1)
        self.queries = nn.Parameter(torch.randn(n_queries, hidden) * 0.02)
        self.cross = nn.ModuleList(nn.MultiheadAttention(hidden, heads, batch_first=True) for _ in range(layers))
        self.selfa = nn.ModuleList(nn.MultiheadAttention(hidden, heads, batch_first=True) for _ in range(layers))
        self.ffn = nn.ModuleList(nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden))
                                 for _ in range(layers))
        self.norms = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(3 * layers))
        self.gate = nn.Linear(hidden, 1)
        self.final = nn.Conv2d(1, 1, 3, padding=1)

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        B = feats.shape[0]
        P = self.proj(feats)
        kv = P.flatten(2).transpose(1, 2)
        q = self.queries.unsqueeze(0).expand(B, -1, -1)
        for i, (ca, sa, ffn) in enumerate(zip(self.cross, self.selfa, self.ffn)):
            q = self.norms[3 * i](q + ca(q, kv, kv, need_weights=False)[0])
            q = self.norms[3 * i + 1](q + sa(q, q, q, need_weights=False)[0])
            q = self.norms[3 * i + 2](q + ffn(q))
        logits = torch.einsum("bqd,bdhw->bqhw", q, P)
        gates = torch.sigmoid(self.gate(q))[..., None]  # (B, Q, 1, 1)
        return self.final((logits * gates).sum(1, keepdim=True))


# ------------------------------------------------------------------------------------ model
@dataclass
class RelayConfig:
    """Sizes of a :class:`RelayFormer`. Defaults are this library's toy sizes; the official values
    (ViT-B/16 at 1024 px: ``tile=528, overlap=16, patch=16, dim=768, depth=12, heads=12``,
    ``tokens_per_patch=3`` in ``models/RelayFormer.py``; m = 2 best in the paper's ablation as read
    from the planning notes) are in :data:`OFFICIAL`."""

    in_chans: int = 3
    tile: int = 32
    overlap: int = 0
    patch: int = 4
    dim: int = 64
    depth: int = 3
    heads: int = 4
    mlp_ratio: float = 4.0
    n_relay: int = 2
    global_attention: bool = True
    lora_rank: int = 8
    n_queries: int = 8          # official: 8
    decoder_dim: int = 64       # official: 256
    decoder_layers: int = 1     # official: 3
    rope_dims: tuple[int, int, int] = (4, 4, 4)  # (relay id, row, col) channels per head; official 8 each


OFFICIAL = RelayConfig(tile=528, overlap=16, patch=16, dim=768, depth=12, heads=12, n_relay=3, n_queries=8,
                       decoder_dim=256, decoder_layers=3, rope_dims=(8, 8, 8))


class RelayFormer(nn.Module):
    """Manipulation localiser: ``forward(images) -> mask logits`` (B, 1, H, W) at the input size.

    ``n_relay = 0`` gives the local-only tiled ViT (no exchange between tiles); ``n_relay > 0`` with
    ``global_attention=False`` keeps the relay tokens inside each tile (a control: the extra tokens
    without their relay). Images of one batch share one size; sizes vary freely between batches.
    """

    def __init__(self, config: RelayConfig | None = None, **overrides):
        super().__init__()
        cfg = config if config is not None else RelayConfig()
        if overrides:
            cfg = RelayConfig(**{**cfg.__dict__, **overrides})
        for name in ("in_chans", "tile", "patch", "dim", "depth", "heads", "n_queries", "decoder_dim",
                     "decoder_layers", "lora_rank"):
            _check_int(name, getattr(cfg, name))
        _check_int("n_relay", cfg.n_relay, 0)
        _check_int("overlap", cfg.overlap, 0)
        if cfg.tile % cfg.patch or cfg.overlap % cfg.patch:
            raise ValueError(f"tile ({cfg.tile}) and overlap ({cfg.overlap}) must be multiples of patch ({cfg.patch})")
        if cfg.tile - 2 * cfg.overlap < cfg.patch:
            raise ValueError(f"overlap must be < tile / 2 by at least one patch, got tile={cfg.tile}, overlap={cfg.overlap}")
        if cfg.dim % cfg.heads:
            raise ValueError(f"dim ({cfg.dim}) must be divisible by heads ({cfg.heads})")
        if sum(cfg.rope_dims) > cfg.dim // cfg.heads or any(d % 2 for d in cfg.rope_dims):
            raise ValueError(f"rope_dims {cfg.rope_dims} must be even and fit the head dim {cfg.dim // cfg.heads}")
        self.config = cfg
        g = cfg.tile // cfg.patch
        self.patch_embed = nn.Conv2d(cfg.in_chans, cfg.dim, cfg.patch, stride=cfg.patch)
        self.pos = nn.Parameter(torch.randn(g * g, cfg.dim) * 0.02)
        self.relay = nn.Parameter(torch.randn(cfg.n_relay, cfg.dim) * 0.02)
        self.blocks = nn.ModuleList(RelayBlock(cfg.dim, cfg.heads, cfg.mlp_ratio, cfg.lora_rank) for _ in range(cfg.depth))
        self.norm = nn.LayerNorm(cfg.dim)
        self.decoder = GatedMaskDecoder(cfg.dim, cfg.decoder_dim, cfg.n_queries, 4 if cfg.decoder_dim % 4 == 0 else 1,
                                        cfg.decoder_layers)

    def _relay_pos(self, grid, device):
        m, (nh, nw) = self.config.n_relay, grid
        r = torch.arange(nh, device=device).repeat_interleave(nw).repeat_interleave(m)
        c = torch.arange(nw, device=device).repeat(nh).repeat_interleave(m)
        k = torch.arange(m, device=device).repeat(nh * nw)
        return torch.stack([k, r, c], 1)  # (n*m, 3), tile-major like the official layout

    def features(self, images: torch.Tensor) -> torch.Tensor:
        """Merged feature map (B, dim, H / patch, W / patch) (rounded up) before the decoder."""
        cfg = self.config
        if not isinstance(images, torch.Tensor) or images.ndim != 4 or images.shape[1] != cfg.in_chans:
            raise ValueError(f"images must be (B, {cfg.in_chans}, H, W), got {getattr(images, 'shape', type(images))}")
        B, _, H, W = images.shape
        tiles, grid = split_tiles(images, cfg.tile, cfg.overlap)
        n = tiles.shape[1]
        x = self.patch_embed(tiles.flatten(0, 1)).flatten(2).transpose(1, 2) + self.pos  # (B*n, N, d)
        m = cfg.n_relay
        if m:
            x = torch.cat([self.relay.expand(B * n, -1, -1), x], 1)
        pos = self._relay_pos(grid, images.device)
        rope = lambda t: axial_rope(t, pos, cfg.rope_dims)  # noqa: E731
        for i, blk in enumerate(self.blocks):
            x = blk(x)
            if m and cfg.global_attention and i + 1 < len(self.blocks):
                relay = x[:, :m].reshape(B, n * m, cfg.dim)
                relay = self.blocks[i + 1](relay, use_global=True, rope=rope)
                x = torch.cat([relay.reshape(B * n, m, cfg.dim), x[:, m:]], 1)
        x = self.norm(x[:, m:])
        g = cfg.tile // cfg.patch
        fmap = x.transpose(1, 2).reshape(B, n, cfg.dim, g, g)
        hf, wf = math.ceil(H / cfg.patch), math.ceil(W / cfg.patch)
        return merge_tiles(fmap, grid, (hf, wf), cfg.overlap // cfg.patch)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        H, W = images.shape[-2:]
        logits = self.decoder(self.features(images))
        return F.interpolate(logits, size=(H, W), mode="bilinear", align_corners=False)


# ------------------------------------------------------------------------------------ loss, metric
def edge_weight_map(mask: torch.Tensor, width: int = 1) -> torch.Tensor:
    """1 on pixels within ``width`` of the mask's boundary (dilation minus erosion), else 0."""
    if mask.ndim != 4:
        raise ValueError(f"mask must be (B, 1, H, W), got {tuple(mask.shape)}")
    _check_int("width", width)
    k = 2 * width + 1
    m = mask.float()
    dil = F.max_pool2d(m, k, stride=1, padding=width)
    ero = -F.max_pool2d(-m, k, stride=1, padding=width)
    return (dil - ero).clamp(0, 1)


def relay_loss(logits: torch.Tensor, mask: torch.Tensor, edge: torch.Tensor | None = None,
               edge_lambda: float = 20.0) -> torch.Tensor:
    """``BCE(logits, mask) + edge_lambda * mean(edge * bce)`` (official ``forward``: BCEWithLogits plus
    ``binary_cross_entropy_with_logits(weight=edge_mask) * edge_lambda``, ``edge_lambda = 20``)."""
    if logits.shape != mask.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and mask {tuple(mask.shape)} must have one shape")
    if edge_lambda < 0:
        raise ValueError(f"edge_lambda must be >= 0, got {edge_lambda}")
    loss = F.binary_cross_entropy_with_logits(logits, mask.float())
    if edge is not None and edge_lambda:
        loss = loss + edge_lambda * F.binary_cross_entropy_with_logits(logits, mask.float(), weight=edge)
    if not torch.isfinite(loss):
        raise NonFiniteLossError(f"non-finite loss {loss.item()}")
    return loss


def pixel_f1(pred: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-image pixel F1 of binary predictions (B, 1, H, W) against binary masks: ``2 TP / (2 TP + FP +
    FN)``; 1 when both are empty (IMDLBenCo-style per-image F1, averaged over images by the caller)."""
    if pred.shape != mask.shape:
        raise ValueError(f"pred {tuple(pred.shape)} and mask {tuple(mask.shape)} must have one shape")
    p, t = pred.bool().flatten(1), mask.bool().flatten(1)
    tp = (p & t).sum(1).double()
    denom = 2 * tp + (p & ~t).sum(1) + (~p & t).sum(1)
    return torch.where(denom > 0, 2 * tp / denom.clamp(min=1), torch.ones_like(tp))
