"""A differentiable 2-D parallel-beam projector (Radon transform) in torch, and filtered
back-projection (FBP) in numpy, with scikit-image's conventions.

Conventions (those of ``skimage.transform.radon`` / ``iradon`` with ``circle=True``): an ``N x N``
image, angles in degrees, a sinogram of shape ``(N, n_angles)`` whose row ``t`` is the detector
position ``t - center`` in pixels (``center = N // 2`` by default). The projection at angle ``a``
samples the image on the grid rotated by ``a`` about ``(center, center)`` with bilinear
interpolation (zero outside) and sums over rows:

    p(t, a) = sum_s f(col = center + cos(a) t + sin(a) s,  row = center - sin(a) t + cos(a) s)

so at ``a = 0`` it is the column sums. Line integrals are in pixel units (a full column of ones
sums to ``N``). The image is assumed zero outside the inscribed circle, as ``circle=True`` assumes.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

FILTERS = ("ramp", "shepp-logan", "cosine", "hamming", "hann", None)


def _check_angles(angles) -> np.ndarray:
    a = np.asarray(angles, dtype=np.float64)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"angles must be a non-empty 1-D sequence of degrees, got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError("angles contains NaN or inf")
    return a


def _check_size(size) -> int:
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 2:
        raise ValueError(f"size must be an integer >= 2, got {size!r}")
    return int(size)


class ParallelBeamProjector(nn.Module):
    """``A``: images ``(..., N, N)`` -> sinograms ``(..., N, n_angles)``, differentiable in the image.

    Args:
        size: the image side ``N``.
        angles: projection angles in degrees (``skimage``'s ``theta``).
        center: rotation centre in pixel indices (default ``size // 2``, skimage's choice).
    """

    def __init__(self, size: int, angles, center: float | None = None):
        super().__init__()
        size = _check_size(size)
        a = _check_angles(angles)
        c = size // 2 if center is None else float(center)
        if not math.isfinite(c):
            raise ValueError(f"center must be finite, got {center!r}")
        self.size, self.center, self.n_angles = size, c, a.size
        self.register_buffer("angles", torch.tensor(a, dtype=torch.float64))
        rad = np.deg2rad(a)[:, None, None]
        idx = np.arange(size, dtype=np.float64) - c
        s, t = np.meshgrid(idx, idx, indexing="ij")  # s: output row offset, t: output column offset
        col = c + np.cos(rad) * t + np.sin(rad) * s
        row = c - np.sin(rad) * t + np.cos(rad) * s
        # grid_sample(align_corners=True): -1 / +1 are the centres of the first / last pixel
        grid = np.stack([col / (size - 1) * 2 - 1, row / (size - 1) * 2 - 1], axis=-1)
        self.register_buffer("grid", torch.tensor(grid, dtype=torch.float32))  # (A, N, N, 2)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        if not isinstance(image, torch.Tensor):
            raise TypeError(f"image must be a torch.Tensor, got {type(image).__name__}")
        if image.ndim < 2 or tuple(image.shape[-2:]) != (self.size, self.size):
            raise ValueError(f"image must have shape (..., {self.size}, {self.size}), got {tuple(image.shape)}")
        lead = image.shape[:-2]
        x = image.reshape(1, -1, self.size, self.size)
        A = self.n_angles
        grid = self.grid.to(dtype=image.dtype, device=image.device)
        rot = F.grid_sample(x.expand(A, -1, -1, -1), grid, mode="bilinear", padding_mode="zeros",
                            align_corners=True)  # (A, B, N, N)
        sino = rot.sum(dim=2)  # sum over rows -> (A, B, N)
        return sino.permute(1, 2, 0).reshape(*lead, self.size, A)


def radon(image, angles, center: float | None = None) -> np.ndarray:
    """Numpy convenience wrapper of :class:`ParallelBeamProjector`: ``(N, N) -> (N, n_angles)``."""
    img = np.asarray(image, dtype=np.float64)
    if img.ndim != 2 or img.shape[0] != img.shape[1]:
        raise ValueError(f"image must be a square 2-D array, got shape {img.shape}")
    if not np.isfinite(img).all():
        raise ValueError("image contains NaN or inf")
    proj = ParallelBeamProjector(img.shape[0], angles, center)
    with torch.no_grad():
        return proj(torch.tensor(img, dtype=torch.float32)).double().numpy()


def ramp_filter(n_det: int, filter_name: str | None = "ramp") -> np.ndarray:
    """The Fourier-domain FBP filter on ``max(64, next_pow2(2 n_det))`` frequencies: the band-limited
    ramp built from its spatial kernel (Kak & Slaney, Eq. 61: ``h[0] = 1/4``, ``h[n] = -1/(pi n)^2``
    for odd ``n``, 0 for even), times the named window (those of ``skimage.transform.iradon``)."""
    if filter_name not in FILTERS:
        raise ValueError(f"filter_name must be one of {FILTERS}, got {filter_name!r}")
    size = max(64, int(2 ** math.ceil(math.log2(2 * n_det))))
    if filter_name is None:
        return np.ones(size)
    n = np.concatenate([np.arange(1, size // 2 + 1, 2), np.arange(size // 2 - 1, 0, -2)])
    h = np.zeros(size)
    h[0] = 0.25
    h[1::2] = -1.0 / (np.pi * n) ** 2
    filt = 2 * np.real(np.fft.fft(h))
    if filter_name == "shepp-logan":
        omega = np.pi * np.fft.fftfreq(size)[1:]
        filt[1:] *= np.sin(omega) / omega
    elif filter_name == "cosine":
        filt *= np.fft.fftshift(np.sin(np.linspace(0, np.pi, size, endpoint=False)))
    elif filter_name == "hamming":
        filt *= np.fft.fftshift(np.hamming(size))
    elif filter_name == "hann":
        filt *= np.fft.fftshift(np.hanning(size))
    return filt


def fbp(sinogram, angles, filter_name: str | None = "ramp", center: float | None = None) -> np.ndarray:
    """Filtered back-projection of a ``(N, n_angles)`` sinogram to an ``N x N`` image (the algorithm
    of ``skimage.transform.iradon`` with ``circle=True``, linear interpolation; zero outside the
    inscribed circle)."""
    sino = np.asarray(sinogram, dtype=np.float64)
    a = _check_angles(angles)
    if sino.ndim != 2 or sino.shape[1] != a.size:
        raise ValueError(f"sinogram must have shape (n_det, len(angles)) = (n_det, {a.size}), got {sino.shape}")
    if not np.isfinite(sino).all():
        raise ValueError("sinogram contains NaN or inf")
    n = sino.shape[0]
    filt = ramp_filter(n, filter_name)
    padded = np.zeros((filt.size, a.size))
    padded[:n] = sino
    filtered = np.real(np.fft.ifft(np.fft.fft(padded, axis=0) * filt[:, None], axis=0))[:n]
    c = n // 2 if center is None else float(center)
    idx = np.arange(n, dtype=np.float64) - c
    rr, cc = np.meshgrid(idx, idx, indexing="ij")
    out = np.zeros((n, n))
    det = np.arange(n, dtype=np.float64) - c
    for j, ang in enumerate(np.deg2rad(a)):
        t = cc * np.cos(ang) - rr * np.sin(ang)
        out += np.interp(t, det, filtered[:, j], left=0.0, right=0.0)
    out *= np.pi / (2 * a.size)
    out[rr ** 2 + cc ** 2 > (n // 2) ** 2] = 0.0
    return out
