"""NOVA3R's stage-1 point-set autoencoder: FPS queries plus learnable tokens, one cross-attention and
self-attention layers into M latent scene tokens, and a transformer flow-matching point decoder.

Paper: "NOVA3R: Non-pixel-aligned Visual Transformer for Amodal 3D Reconstruction", Chen, Zheng,
Zhang, Vedaldi, Cremers, ICLR 2026, arXiv 2603.04179. Official code: wrchen530/nova3r (read here from
its public fork VyHong/nova3r at commit b2818ea: ``nova3r/heads/pts3d_decoder/
flowm_decoder_point_joint_v2.py``, ``nova3r/inference.py``, ``nova3r/flow_matching/path/scheduler``).

- Encoder (paper Sec. 3, stage 1): ``M`` farthest-point queries ``q`` of the input cloud, embedded,
  concatenated with ``M`` learnable tokens ``t0`` and projected to ``U0``; one cross-attention from
  ``U0`` to the embedded input points, then ``self_depth`` self-attention blocks (8 in the paper) give
  the latent ``Z`` (M x C).
- Decoder (official ``PointJointFMDecoderV2``): Fourier features of the noisy points (8 frequencies,
  times pi, plus the input), a linear embedding; per layer, the latents attend to the points (the
  context modulated by the time embedding), the latents self-attend, then the points cross-attend to
  the latents under adaLN shift/scale/gate from the time embedding; a linear head gives the velocity.
- Flow matching (official ``AffineProbPath(CosineScheduler())``): ``x_t = sin(pi t / 2) x_1 +
  cos(pi t / 2) x_0``, target velocity ``dx_t/dt = pi/2 (cos(pi t / 2) x_1 - sin(pi t / 2) x_0)``,
  noise ``x_0 ~ U[-1, 1]^3`` (official ``inference.py``: ``torch.rand(...) * 2 - 1``), ``t`` from 0
  (noise) to 1 (data), Euler steps on ``linspace(0, 1, steps)``. ``scheduler="linear"`` gives the
  rectified path ``x_t = t x_1 + (1 - t) x_0``, target ``x_1 - x_0``.
- Chamfer baseline (the paper's ablation): the same network, the decoder evaluated once at ``t = 0`` on
  noise points, its output taken as the points and trained with the Chamfer loss.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .points import _check_cloud, chamfer_loss, farthest_point_sample, gather_points


class NonFiniteTrainingError(RuntimeError):
    """A loss or gradient became NaN or infinite during training."""


@dataclass
class PointAEConfig:
    num_latents: int = 768      # M (paper: 768 FPS queries)
    dim: int = 512              # C, token width (library default; not stated in what was read)
    heads: int = 8              # official decoder: num_heads = 8
    self_depth: int = 8         # encoder self-attention layers (paper: 8)
    decoder_depth: int = 3      # official decoder default cross_depth = self_depth = 3
    num_freqs: int = 8          # official FourierEmbedder(num_freqs=8, include_pi=True)
    time_freq_dim: int = 256    # official TimestepEmbedder frequency_embedding_size
    mlp_ratio: float = 4.0      # official mlp_ratio
    scheduler: str = "cosine"   # official AffineProbPath(CosineScheduler())
    fm_loss: str = "l2"         # official train criterion FMVelocity(L21): mean Euclidean norm of the velocity error

    def __post_init__(self):
        for name in ("num_latents", "dim", "heads", "self_depth", "decoder_depth", "num_freqs", "time_freq_dim"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"{name} must be an int, got {type(v).__name__}")
            if v < (0 if name == "self_depth" else 1):
                raise ValueError(f"{name} must be positive, got {v}")
        if self.dim % self.heads:
            raise ValueError(f"dim ({self.dim}) must be divisible by heads ({self.heads})")
        if self.time_freq_dim % 2:
            raise ValueError(f"time_freq_dim must be even, got {self.time_freq_dim}")
        if not self.mlp_ratio > 0:
            raise ValueError(f"mlp_ratio must be positive, got {self.mlp_ratio}")
        if self.scheduler not in ("cosine", "linear"):
            raise ValueError(f"scheduler must be 'cosine' or 'linear', got {self.scheduler!r}")
        if self.fm_loss not in ("l2", "mse"):
            raise ValueError(f"fm_loss must be 'l2' or 'mse', got {self.fm_loss!r}")


def fourier_features(x: torch.Tensor, num_freqs: int) -> torch.Tensor:
    """``[x, sin(pi 2^k x), cos(pi 2^k x)]`` for k = 0..num_freqs-1, per coordinate (the official
    ``FourierEmbedder(include_pi=True)``, frequencies ``2^k``): (..., 3 (2 num_freqs + 1))."""
    freqs = math.pi * 2.0 ** torch.arange(num_freqs, dtype=x.dtype, device=x.device)
    xf = (x[..., None] * freqs).flatten(-2)
    return torch.cat([x, xf.sin(), xf.cos()], dim=-1)


def timestep_embedding(t: torch.Tensor, dim: int, max_period: float = 10000.0) -> torch.Tensor:
    """Sinusoidal embedding ``[cos(t w_k), sin(t w_k)]``, ``w_k = max_period^(-k / (dim/2))`` (the
    official ``TimestepEmbedder.timestep_embedding``, from GLIDE)."""
    half = dim // 2
    w = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    a = t.float()[..., None] * w
    return torch.cat([a.cos(), a.sin()], dim=-1)


def _modulate(x, shift, scale):
    return x * (1 + scale) + shift


class _MLP(nn.Sequential):
    def __init__(self, dim, ratio):
        super().__init__(nn.Linear(dim, int(dim * ratio)), nn.GELU(approximate="tanh"), nn.Linear(int(dim * ratio), dim))


class _Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x, context=None):
        context = x if context is None else context
        B, N, C = x.shape
        h = self.heads
        q = self.q(x).view(B, N, h, C // h).transpose(1, 2)
        k, v = self.kv(context).chunk(2, dim=-1)
        k = k.reshape(B, -1, h, C // h).transpose(1, 2)
        v = v.reshape(B, -1, h, C // h).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v)
        return self.out(y.transpose(1, 2).reshape(B, N, C))


class _SelfBlock(nn.Module):
    def __init__(self, dim, heads, ratio):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6), nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.attn, self.mlp = _Attention(dim, heads), _MLP(dim, ratio)

    def forward(self, x):
        x = x + self.attn(self.n1(x))
        return x + self.mlp(self.n2(x))


class _CrossBlock(nn.Module):
    """``x`` attends to ``context``; with ``time_dim``, adaLN shift/scale/gate of ``x`` (official
    ``CrossAttnBlock``), or only shift/scale of the context (``modulate_context``, official
    ``CrossAttnContextBlock``)."""

    def __init__(self, dim, heads, ratio, time_dim=None, modulate_context=False):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6), nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.nc = nn.LayerNorm(dim)
        self.attn, self.mlp = _Attention(dim, heads), _MLP(dim, ratio)
        self.modulate_context = modulate_context
        self.ada = None
        if time_dim is not None:
            self.ada = nn.Sequential(nn.Linear(time_dim, dim), nn.SiLU(), nn.Linear(dim, (2 if modulate_context else 6) * dim))

    def forward(self, x, context, temb=None):
        c = self.nc(context)
        if self.ada is None or temb is None:
            x = x + self.attn(self.n1(x), c)
            return x + self.mlp(self.n2(x))
        if self.modulate_context:
            shift, scale = self.ada(temb).chunk(2, dim=-1)
            x = x + self.attn(self.n1(x), _modulate(c, shift, scale))
            return x + self.mlp(self.n2(x))
        s1, sc1, g1, s2, sc2, g2 = self.ada(temb).chunk(6, dim=-1)
        x = x + g1 * self.attn(_modulate(self.n1(x), s1, sc1), c)
        return x + g2 * self.mlp(_modulate(self.n2(x), s2, sc2))


class PointSetEncoder(nn.Module):
    """Point cloud (B, N, 3) -> latent scene tokens Z (B, M, C)."""

    def __init__(self, cfg: PointAEConfig):
        super().__init__()
        self.cfg = cfg
        fdim = 3 * (2 * cfg.num_freqs + 1)
        self.point_embed = nn.Linear(fdim, cfg.dim)
        self.query_embed = nn.Linear(fdim, cfg.dim)
        self.tokens = nn.Parameter(torch.randn(1, cfg.num_latents, cfg.dim) * 0.02)
        self.init_proj = nn.Linear(2 * cfg.dim, cfg.dim)
        self.cross = _CrossBlock(cfg.dim, cfg.heads, cfg.mlp_ratio)
        self.blocks = nn.ModuleList(_SelfBlock(cfg.dim, cfg.heads, cfg.mlp_ratio) for _ in range(cfg.self_depth))
        self.norm = nn.LayerNorm(cfg.dim)

    def forward(self, points: torch.Tensor) -> torch.Tensor:
        _check_cloud(points, "points")
        M = self.cfg.num_latents
        if points.shape[1] < M:
            raise ValueError(f"points must hold at least num_latents = {M} points per cloud, got {points.shape[1]}")
        q = gather_points(points, farthest_point_sample(points.detach(), M))
        B = points.shape[0]
        u = self.init_proj(torch.cat([self.query_embed(fourier_features(q, self.cfg.num_freqs)),
                                      self.tokens.expand(B, -1, -1)], dim=-1))
        u = self.cross(u, self.point_embed(fourier_features(points, self.cfg.num_freqs)))
        for blk in self.blocks:
            u = blk(u)
        return self.norm(u)


class FlowPointDecoder(nn.Module):
    """Velocity field ``v(x_t, t | Z)``: points (B, N, 3), times (B,) or (B, N), latents (B, M, C) ->
    (B, N, 3)."""

    def __init__(self, cfg: PointAEConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.dim
        self.point_embed = nn.Linear(3 * (2 * cfg.num_freqs + 1), d)
        self.t_mlp = nn.Sequential(nn.Linear(cfg.time_freq_dim, d), nn.SiLU(), nn.Linear(d, d))
        self.latent2point = nn.ModuleList(_CrossBlock(d, cfg.heads, cfg.mlp_ratio, d, modulate_context=True)
                                          for _ in range(cfg.decoder_depth))
        self.latent_self = nn.ModuleList(_SelfBlock(d, cfg.heads, cfg.mlp_ratio) for _ in range(cfg.decoder_depth))
        self.point2latent = nn.ModuleList(_CrossBlock(d, cfg.heads, cfg.mlp_ratio, d) for _ in range(cfg.decoder_depth))
        self.out = nn.Linear(d, 3)

    def forward(self, x: torch.Tensor, t: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        B, N, _ = x.shape
        if t.ndim == 1:          # one time per cloud: embed once, broadcast over the points
            t = t[:, None]
        if t.shape not in ((B, 1), (B, N)):
            raise ValueError(f"t must have shape (B,), (B, 1) or (B, N), got {tuple(t.shape)}")
        temb = self.t_mlp(timestep_embedding(t, self.cfg.time_freq_dim))     # (B, 1 or N, d)
        h = self.point_embed(fourier_features(x, self.cfg.num_freqs))
        lat = z
        for a, s, b in zip(self.latent2point, self.latent_self, self.point2latent):
            lat = a(lat, h, temb)          # latents read the points; context modulated per point by t
            lat = s(lat)
            h = b(h, lat, temb)            # points read the latents under adaLN(t)
        return self.out(h)


def path_coefficients(t: torch.Tensor, scheduler: str):
    """``(alpha_t, sigma_t, d alpha_t, d sigma_t)`` of the affine path ``x_t = alpha_t x_1 + sigma_t x_0``."""
    if scheduler == "cosine":
        h = math.pi / 2
        return torch.sin(h * t), torch.cos(h * t), h * torch.cos(h * t), -h * torch.sin(h * t)
    if scheduler == "linear":
        return t, 1 - t, torch.ones_like(t), -torch.ones_like(t)
    raise ValueError(f"scheduler must be 'cosine' or 'linear', got {scheduler!r}")


def uniform_noise(shape, generator: torch.Generator | None = None, device=None) -> torch.Tensor:
    """Noise ``x_0 ~ U[-1, 1]^3`` (official inference)."""
    return torch.rand(shape, generator=generator, device=device) * 2 - 1


class PointSetAutoencoder(nn.Module):
    """Encoder + flow-matching decoder. ``flow_matching_loss`` trains it the paper's way,
    ``chamfer_regression_loss`` the ablation's way; ``sample`` (ODE) and ``regress`` (one pass)
    decode a latent into points."""

    def __init__(self, cfg: PointAEConfig | None = None, **kwargs):
        super().__init__()
        if cfg is not None and kwargs:
            raise TypeError("give either cfg or keyword arguments, not both")
        self.cfg = cfg if cfg is not None else PointAEConfig(**kwargs)
        self.encoder = PointSetEncoder(self.cfg)
        self.decoder = FlowPointDecoder(self.cfg)

    def encode(self, points: torch.Tensor) -> torch.Tensor:
        return self.encoder(points)

    def velocity(self, x_t: torch.Tensor, t: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return self.decoder(x_t, t, z)

    def flow_matching_loss(self, inputs: torch.Tensor, targets: torch.Tensor | None = None,
                           generator: torch.Generator | None = None) -> torch.Tensor:
        """``E_{t, x_0} || v(x_t, t | E(inputs)) - dx_t/dt ||`` per point (``fm_loss="l2"``, the official
        ``FMVelocity(L21)``), or its square averaged over coordinates (``fm_loss="mse"``), with ``x_1``
        the ``targets`` (the complete cloud; ``inputs`` itself by default), one ``t ~ U(0, 1)`` per cloud
        (official training step: ``t = torch.rand(B)``, ``x_0 = torch.rand_like(x_1) * 2 - 1``)."""
        targets = inputs if targets is None else targets
        _check_cloud(targets, "targets")
        z = self.encode(inputs)
        if targets.shape[0] != z.shape[0]:
            raise ValueError(f"inputs and targets must have the same batch size, got {z.shape[0]} and {targets.shape[0]}")
        B = targets.shape[0]
        t = torch.rand(B, generator=generator, device=targets.device)
        x0 = uniform_noise(targets.shape, generator, targets.device)
        a, s, da, ds = (c[:, None, None] for c in path_coefficients(t, self.cfg.scheduler))
        x_t = a * targets + s * x0
        err = self.velocity(x_t, t, z) - (da * targets + ds * x0)
        if self.cfg.fm_loss == "mse":
            return err.pow(2).mean()
        return err.pow(2).sum(-1).add(1e-12).sqrt().mean()

    def regress(self, z: torch.Tensor, n_points: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """One decoder pass at ``t = 0`` on noise points; its output taken as the points (Chamfer arm)."""
        _check_n(n_points)
        x0 = uniform_noise((z.shape[0], n_points, 3), generator, z.device)
        return self.velocity(x0, torch.zeros(z.shape[0], device=z.device), z)

    def chamfer_regression_loss(self, inputs: torch.Tensor, targets: torch.Tensor | None = None,
                                generator: torch.Generator | None = None) -> torch.Tensor:
        targets = inputs if targets is None else targets
        _check_cloud(targets, "targets")
        return chamfer_loss(self.regress(self.encode(inputs), targets.shape[1], generator), targets)

    @torch.no_grad()
    def sample(self, z: torch.Tensor, n_points: int, steps: int = 20, generator: torch.Generator | None = None) -> torch.Tensor:
        """Euler integration of ``dx/dt = v(x, t | z)`` from ``x_0 ~ U[-1, 1]^3`` over
        ``linspace(0, 1, steps + 1)`` (``steps`` velocity evaluations)."""
        _check_n(n_points)
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"steps must be a positive int, got {steps!r}")
        x = uniform_noise((z.shape[0], n_points, 3), generator, z.device)
        ts = torch.linspace(0, 1, steps + 1, device=z.device)
        for i in range(steps):
            t = ts[i].expand(z.shape[0])
            x = x + (ts[i + 1] - ts[i]) * self.velocity(x, t, z)
        return x


def _check_n(n):
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n_points must be a positive int, got {n!r}")


def train_autoencoder(model: PointSetAutoencoder, inputs: torch.Tensor, targets: torch.Tensor, *, loss: str,
                      steps: int, lr: float, batch_size: int, weight_decay: float = 0.01, seed: int = 0,
                      clip_grad: float = 1.0, warmup: float = 0.05, schedule: str = "cosine") -> list[float]:
    """AdamW (paper: lr 3e-4) on ``loss`` in {"flow", "chamfer"}; ``inputs[i]`` encodes to ``targets[i]``.

    Learning rate per step (official ``croco/utils/misc.py`` ``adjust_learning_rate``, here per step
    instead of per epoch, ``min_lr = 0``): linear warm-up over the first ``warmup`` share of the steps,
    then a half-cycle cosine to 0 (``schedule="cosine"``), or constant after warm-up
    (``schedule="constant"``). Weight decay only on weights of two or more dimensions (official
    ``get_parameter_groups``: biases, norms and 1-D parameters in a no-decay group).
    Raises :class:`NonFiniteTrainingError` on a non-finite loss or gradient norm."""
    if loss not in ("flow", "chamfer"):
        raise ValueError(f"loss must be 'flow' or 'chamfer', got {loss!r}")
    if not (isinstance(lr, (int, float)) and lr > 0 and math.isfinite(lr)):
        raise ValueError(f"lr must be a positive finite number, got {lr!r}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be a non-negative int, got {steps!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    if not (isinstance(warmup, (int, float)) and not isinstance(warmup, bool) and 0 <= warmup < 1):
        raise ValueError(f"warmup must be a share of the steps in [0, 1), got {warmup!r}")
    if schedule not in ("cosine", "constant"):
        raise ValueError(f"schedule must be 'cosine' or 'constant', got {schedule!r}")
    _check_cloud(inputs, "inputs")
    _check_cloud(targets, "targets")
    if inputs.shape[0] != targets.shape[0]:
        raise ValueError(f"inputs and targets must hold the same number of clouds, got {inputs.shape[0]} and {targets.shape[0]}")
    from iclr26.common.training import batches

    g = torch.Generator().manual_seed(seed)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW([{"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
                             {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}], lr=lr)
    it = batches(inputs, targets, batch_size, g)
    fn = model.flow_matching_loss if loss == "flow" else model.chamfer_regression_loss
    losses = []
    model.train()
    for step in range(steps):
        x, y = next(it)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, lr, warmup, schedule)
        opt.zero_grad(set_to_none=True)
        value = fn(x, y, generator=g)
        if not torch.isfinite(value):
            raise NonFiniteTrainingError(f"non-finite {loss} loss {float(value)} at step {step}")
        value.backward()
        norm = nn.utils.clip_grad_norm_(model.parameters(), clip_grad)
        if not torch.isfinite(norm):
            raise NonFiniteTrainingError(f"non-finite gradient norm at step {step}")
        opt.step()
        losses.append(float(value.detach()))
    model.eval()
    return losses


def lr_at(step: int, steps: int, lr: float, warmup: float = 0.05, schedule: str = "cosine") -> float:
    """Learning rate at ``step`` of ``steps``: ``lr (step + 1) / w`` for the first ``w = ceil(warmup
    steps)`` steps, then ``lr`` (constant) or ``lr (1 + cos(pi (step - w) / (steps - w))) / 2``
    (cosine; official ``adjust_learning_rate`` with ``min_lr = 0``)."""
    w = math.ceil(warmup * steps)
    if step < w:
        return lr * (step + 1) / w
    if schedule == "constant" or steps <= w:
        return lr
    return lr * 0.5 * (1 + math.cos(math.pi * (step - w) / (steps - w)))
