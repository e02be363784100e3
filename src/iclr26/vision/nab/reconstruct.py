"""Self-supervised sparse-view CT reconstruction with an INR (the paper's pipeline):

    coordinates c -> encoding f_E(c) -> MLP -> attenuation X_c ;  loss = mean (A X - Y)^2

with ``X`` laid out as an image, ``X[row, col]`` at ``pixel_grid(N)[row, col] = (x, y)`` (x along the
columns, y along the rows: the image is never transposed),

where ``A`` is the differentiable parallel-beam projector and ``Y`` the measured sinogram; the MLP
and (for NAB) the bin parameters are trained together with Adam on the whole pixel grid each step.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from .encoding import CoordinateINR, NABEncoding, RFFEncoding, pixel_grid
from .projector import ParallelBeamProjector, _check_angles

ENCODINGS = ("nab", "nab_frozen", "rff")


class NonFiniteTrainingError(FloatingPointError):
    """A reconstruction step produced a non-finite loss or gradient."""


@dataclass
class Reconstruction:
    """What :func:`reconstruct` returns."""

    image: np.ndarray                      # (N, N) attenuation at the pixel centres
    model: nn.Module                       # the trained INR
    losses: list[float] = field(default_factory=list)  # sinogram MSE per step

    @property
    def final_loss(self) -> float:
        return self.losses[-1] if self.losses else float("nan")


def build_inr(encoding: str | nn.Module = "nab", *, n_features: int = 456, hidden: int = 256, layers: int = 7,
              sigma: float = 4.0, k_scales=(150.0, 200.0), rotation: bool = True, output: str = "sigmoid",
              generator: torch.Generator | None = None) -> CoordinateINR:
    """An INR with the named encoding (``"nab"``, ``"nab_frozen"``: NAB with its bin geometry frozen
    at initialisation, ``"rff"``) or a given encoding module, and the same MLP in every case."""
    if isinstance(encoding, nn.Module):
        enc = encoding
    elif encoding in ("nab", "nab_frozen"):
        enc = NABEncoding(n_features, k_scales=k_scales, rotation=rotation, learn_bins=encoding == "nab",
                          generator=generator)
    elif encoding == "rff":
        enc = RFFEncoding(n_features, sigma=sigma, generator=generator)
    else:
        raise ValueError(f"encoding must be one of {ENCODINGS} or an nn.Module, got {encoding!r}")
    return CoordinateINR(enc, hidden=hidden, layers=layers, output=output)


def _check_finite(model: nn.Module, loss: torch.Tensor, step: int) -> None:
    if not torch.isfinite(loss):
        raise NonFiniteTrainingError(f"non-finite loss {float(loss)} at step {step}")
    for name, p in model.named_parameters():
        if p.grad is not None and not torch.isfinite(p.grad).all():
            raise NonFiniteTrainingError(f"non-finite gradient of {name} at step {step}")


def reconstruct(sinogram, angles, encoding: str | nn.Module = "nab", *, steps: int = 1500, lr: float = 1e-3,
                seed: int = 0, n_features: int = 456, hidden: int = 256, layers: int = 7, sigma: float = 4.0,
                k_scales=(150.0, 200.0), rotation: bool = True, center: float | None = None,
                output: str = "sigmoid", callback=None) -> Reconstruction:
    """Fit an INR to a parallel-beam ``sinogram`` ``(N, n_angles)`` (skimage's layout, angles in
    degrees) and return the reconstructed ``N x N`` image.

    Args:
        encoding: ``"nab"`` (the paper's method), ``"nab_frozen"`` (control), ``"rff"`` (the
            random-Fourier INR baseline) or any encoding module with ``out_features``.
        steps: Adam steps on the full pixel grid (default 1500: our CPU budget; the paper trains
            about 3e4 iterations).
        lr: Adam learning rate (default 1e-3, NeRP's rate for its random-Fourier INR; Adam betas
            ``(0.9, 0.999)``, no weight decay, as NeRP's ``train_ct_recon.py``; tune it per encoding).
        seed: seeds the initial draw (bins or Fourier matrix, MLP weights).
        n_features, hidden, layers, sigma, k_scales, rotation: see :func:`build_inr`.
        output: the MLP's output, ``"sigmoid"`` (NeRP's, default) or ``"linear"``.
        center: the projector's rotation centre (default ``N // 2``, skimage's).
        callback: optional ``callback(step, model, loss)`` after each step.

    Raises:
        NonFiniteTrainingError: a step produced a non-finite loss or gradient.
    """
    sino = np.asarray(sinogram, dtype=np.float64) if not isinstance(sinogram, torch.Tensor) \
        else sinogram.detach().double().cpu().numpy()
    a = _check_angles(angles)
    if sino.ndim != 2 or sino.shape[1] != a.size:
        raise ValueError(f"sinogram must have shape (n_det, len(angles)) = (n_det, {a.size}), got {sino.shape}")
    if sino.shape[0] < 2:
        raise ValueError(f"sinogram needs at least 2 detector bins, got {sino.shape[0]}")
    if not np.isfinite(sino).all():
        raise ValueError("sinogram contains NaN or inf")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be a non-negative integer, got {steps!r}")
    lr_f = float(lr) if isinstance(lr, (int, float)) and not isinstance(lr, bool) else float("nan")
    if not math.isfinite(lr_f) or lr_f <= 0:
        raise ValueError(f"lr must be a positive finite number, got {lr!r}")
    n = sino.shape[0]
    gen = torch.Generator().manual_seed(int(seed))
    torch.manual_seed(int(seed))
    model = build_inr(encoding, n_features=n_features, hidden=hidden, layers=layers, sigma=sigma,
                      k_scales=k_scales, rotation=rotation, output=output, generator=gen)
    proj = ParallelBeamProjector(n, a, center)
    coords = pixel_grid(n)
    target = torch.tensor(sino, dtype=torch.float32)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=lr_f, betas=(0.9, 0.999), weight_decay=0.0)
    losses: list[float] = []
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = ((proj(model(coords)) - target) ** 2).mean()
        if not torch.isfinite(loss):
            raise NonFiniteTrainingError(f"non-finite loss {float(loss)} at step {step}")
        loss.backward()
        _check_finite(model, loss, step)
        opt.step()
        losses.append(float(loss.detach()))
        if callback is not None:
            callback(step, model, losses[-1])
    with torch.no_grad():
        image = model(coords).double().numpy()
    return Reconstruction(image=image, model=model, losses=losses)


def psnr(image, reference, data_range: float | None = None) -> float:
    """Peak signal-to-noise ratio in dB, ``10 log10(range^2 / MSE)`` (range: that of ``reference``
    unless given)."""
    x, r = np.asarray(image, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    if x.shape != r.shape:
        raise ValueError(f"image and reference must have the same shape, got {x.shape} and {r.shape}")
    if not (np.isfinite(x).all() and np.isfinite(r).all()):
        raise ValueError("image or reference contains NaN or inf")
    rng = float(r.max() - r.min()) if data_range is None else float(data_range)
    if not rng > 0:
        raise ValueError(f"data_range must be positive, got {rng}")
    mse = float(np.mean((x - r) ** 2))
    return float("inf") if mse == 0 else 10 * math.log10(rng ** 2 / mse)
