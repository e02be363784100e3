"""A small invariant-equivariant autoencoder (IE-AE) for SO(2): the class-pose decomposition RECON
corrects.

Encoder (:class:`InvariantPoseEncoder`): the input is lifted to its orbit under ``n_rot`` discrete
rotations, ``x_r = rho(-alpha_r) x`` with ``alpha_r = 2 pi r / n_rot``, and one shared CNN maps
each copy to features ``h_r`` and a scalar score ``s_r``. Rotating the input by ``alpha_q``
permutes the orbit cyclically (``x_r -> x_{r-q}``), so

- the invariant code is the group pool ``z = mean_r h_r`` (exactly invariant to the discrete
  rotations, approximately to the others), and
- the pose is the argument of the first circular harmonic of the scores,
  ``g_hat = arg sum_r s_r e^{i alpha_r}``, which shifts by ``alpha_q`` (exactly equivariant to the
  discrete rotations, interpolating in between).

The discrete rotations that are multiples of 90 degrees are done with ``torch.rot90`` (pixel
permutations), the remainder with :func:`.canonicalizer.rotate`, so invariance and equivariance
are exact, up to float round-off, for rotations by multiples of 90 degrees (``n_rot`` must be a
multiple of 4).

Decoder: an MLP maps ``z`` to a canonical image ``c(z)``; the reconstruction is
``rho(g_hat) c(z)`` and training minimises its squared error to ``x`` inside the circular mask
(the IE-AE objective of class-pose decompositions; the canonical ``c(z)`` is whatever the training
run settles on, which is the arbitrariness RECON removes).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .canonicalizer import rotate, wrap_angle


class NonFiniteTrainingError(FloatingPointError):
    """A training step produced a non-finite loss or gradient."""


def check_finite_step(model: nn.Module, loss: torch.Tensor, where: str, step: int) -> None:
    """Raise :class:`NonFiniteTrainingError` if ``loss`` or any gradient of ``model`` is NaN/inf."""
    if not torch.isfinite(loss).all():
        raise NonFiniteTrainingError(f"{where}: non-finite loss {float(loss.detach())} at step {step}")
    for name, p in model.named_parameters():
        if p.grad is not None and not torch.isfinite(p.grad).all():
            raise NonFiniteTrainingError(f"{where}: non-finite gradient of {name} at step {step}")


def circular_mask(size: int) -> torch.Tensor:
    """``(size, size)`` 0/1 disc inscribed in the image (rotations keep its content)."""
    c = (size - 1) / 2
    yy, xx = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
    return (((yy - c) ** 2 + (xx - c) ** 2) <= (size / 2) ** 2).float()


class InvariantPoseEncoder(nn.Module):
    """``x (B, 1, S, S) -> (z (B, z_dim), g_hat (B,) radians)`` by group pooling over ``n_rot``
    rotations (see the module docstring)."""

    def __init__(self, size: int = 16, z_dim: int = 32, n_rot: int = 8, width: int = 16):
        super().__init__()
        for name, v in (("size", size), ("z_dim", z_dim), ("n_rot", n_rot), ("width", width)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if n_rot % 4:
            raise ValueError(f"n_rot must be a multiple of 4, got {n_rot}")
        if size % 4:
            raise ValueError(f"size must be a multiple of 4, got {size}")
        self.size, self.z_dim, self.n_rot = size, z_dim, n_rot
        self.cnn = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1), nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(2 * width, 2 * width, 3, stride=2, padding=1), nn.ReLU(),
            nn.Flatten(), nn.Linear(2 * width * (size // 4) ** 2, 128), nn.ReLU(),
            nn.Linear(128, z_dim + 1),
        )
        alphas = torch.arange(n_rot, dtype=torch.float32) * (2 * math.pi / n_rot)
        self.register_buffer("alphas", alphas)
        self.register_buffer("mask", circular_mask(size))

    def orbit(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, n_rot, 1, S, S)``: ``x_r = rho(-alpha_r) x``, quarter turns by ``rot90``."""
        per_q = self.n_rot // 4
        fine = [rotate(x, -float(self.alphas[b])) if b else x for b in range(per_q)]  # -beta_b
        out = []
        for r in range(self.n_rot):
            q, b = divmod(r, per_q)
            out.append(torch.rot90(fine[b], -q, dims=(-2, -1)))
        return torch.stack(out, 1) * self.mask

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if x.dim() != 4 or x.shape[1:] != (1, self.size, self.size):
            raise ValueError(f"x must be (B, 1, {self.size}, {self.size}), got {tuple(x.shape)}")
        if not torch.isfinite(x).all():
            raise ValueError("x contains NaN or inf")
        B = x.shape[0]
        o = self.orbit(x).reshape(B * self.n_rot, 1, self.size, self.size)
        h = self.cnn(o).reshape(B, self.n_rot, self.z_dim + 1)
        z = h[..., :-1].mean(1)
        s = h[..., -1]
        vx = (s * torch.cos(self.alphas)).sum(1)
        vy = (s * torch.sin(self.alphas)).sum(1)
        return z, torch.atan2(vy, vx)


class IEAutoencoder(nn.Module):
    """Invariant encoder + pose, MLP decoder to a canonical image, rotated back by the pose."""

    def __init__(self, size: int = 16, z_dim: int = 32, n_rot: int = 8, width: int = 16, hidden: int = 256):
        super().__init__()
        self.encoder = InvariantPoseEncoder(size, z_dim, n_rot, width)
        self.size = size
        self.decoder = nn.Sequential(nn.Linear(z_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                     nn.Linear(hidden, size * size), nn.Sigmoid())

    def canonical(self, z: torch.Tensor) -> torch.Tensor:
        """The decoder's canonical image ``c(z)`` ``(B, 1, S, S)``."""
        return self.decoder(z).reshape(-1, 1, self.size, self.size) * self.encoder.mask

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(reconstruction rho(g_hat) c(z), z, g_hat)``."""
        z, g = self.encoder(x)
        return rotate(self.canonical(z), g) * self.encoder.mask, z, g

    def loss(self, x: torch.Tensor) -> torch.Tensor:
        rec, _, _ = self(x)
        return ((rec - x * self.encoder.mask) ** 2).sum((1, 2, 3)).mean()


def train_ieae(model: IEAutoencoder, x: torch.Tensor, *, steps: int = 600, batch_size: int = 64,
               lr: float = 1e-3, seed: int = 0) -> list[float]:
    """Adam on the reconstruction loss over shuffled minibatches of ``x`` (unlabelled); raises
    :class:`NonFiniteTrainingError` on a non-finite loss or gradient. Returns the loss per step."""
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    if isinstance(lr, bool) or not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be a positive number, got {lr!r}")
    lr = float(lr)
    if not torch.isfinite(x).all():
        raise ValueError("x contains NaN or inf")
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses, n, step = [], x.shape[0], 0
    model.train()
    while step < steps:
        perm = torch.randperm(n, generator=gen)
        for i in range(0, max(n - batch_size + 1, 1), batch_size):
            if step >= steps:
                break
            opt.zero_grad(set_to_none=True)
            loss = model.loss(x[perm[i:i + batch_size]])
            loss.backward()
            check_finite_step(model, loss, "IE-AE", step)
            opt.step()
            losses.append(loss.item())
            step += 1
    model.eval()
    return losses


@torch.no_grad()
def encode(encoder: nn.Module, x: torch.Tensor, batch_size: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """``(z, g_hat)`` of ``x`` in batches, without gradients."""
    zs, gs = [], []
    for i in range(0, x.shape[0], batch_size):
        z, g = encoder(x[i:i + batch_size])
        zs.append(z)
        gs.append(g)
    return torch.cat(zs), wrap_angle(torch.cat(gs))


class CanonicalCodeEncoder(nn.Module):
    """``x (B, 1, S_in, S_in) -> (code (B, S^2), g_hat (B,))``: the invariant as the canonical form.

    The input is resized to the pose encoder's resolution ``S`` (``encoder.size``; antialiased
    bilinear), the encoder gives ``g_hat``, and the invariant code is the resized input rotated
    back by its own pose, ``c(x) = rho(g_hat(x))^{-1} x`` inside the disc, flattened. If ``g_hat`` is
    equivariant, ``g_hat(rho(a) x) = g_hat(x) + a``, then ``c(rho(a) x) = c(x)``: an exact
    invariant for quarter turns (where the encoder is exactly equivariant and the rotation is a
    pixel permutation) and an approximate one in between. This is the class part of the
    canonicalisation view of a class-pose decomposition; RECON only needs some invariant code
    whose neighbours are inputs of the same kind.
    """

    def __init__(self, encoder: InvariantPoseEncoder):
        super().__init__()
        self.encoder = encoder

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if x.dim() != 4 or x.shape[1] != 1 or x.shape[-1] != x.shape[-2]:
            raise ValueError(f"x must be (B, 1, S, S), got {tuple(x.shape)}")
        size = self.encoder.size
        if x.shape[-1] != size:
            x = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear", align_corners=False,
                                                antialias=True)
        _, g = self.encoder(x)
        g = wrap_angle(g)
        xc = self._unrotate(x, g) * self.encoder.mask
        return xc.flatten(1), g

    @staticmethod
    def _unrotate(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        # the quarter-turn part by rot90 (exact), the remainder (|r| <= pi/4) by interpolation
        q = torch.round(g / (math.pi / 2))
        r = g - q * (math.pi / 2)
        out = rotate(x, -r)
        qi = torch.remainder(q, 4).long()
        res = out.clone()
        for k in (1, 2, 3):
            sel = qi == k
            if sel.any():
                res[sel] = torch.rot90(out[sel], -k, dims=(-2, -1))
        return res
