"""Procedural test objects and their simulated sparse-view scans.

- :func:`industrial_phantom`: a union of rotated rectangles of different attenuations with
  rectangular holes (the paper's premise: man-made objects are mostly rectangular; its CaCO3 data).
- :func:`shepp_logan_like`: the modified Shepp-Logan ellipses with every ellipse's centre, axes,
  angle and intensity jittered (a curved, medical-like object, where the premise is weaker).
- :func:`simulate_scan`: renders the object area-averaged at ``supersample^2`` samples per pixel and
  projects that pixel image with the reconstruction's own projector (consistent data; optional
  Gaussian noise).

Objects are described as shape lists on ``[-1, 1]^2`` (x rightwards, y downwards), so they can be
rendered at any resolution; every object lies inside the radius-0.85 disc.
"""
from __future__ import annotations

import numpy as np

from .projector import ParallelBeamProjector

import torch

# modified Shepp-Logan (Toft): intensity, a, b, x0, y0, angle (degrees)
_SHEPP_LOGAN = np.array([
    [1.0, 0.69, 0.92, 0.0, 0.0, 0.0],
    [-0.8, 0.6624, 0.874, 0.0, -0.0184, 0.0],
    [-0.2, 0.11, 0.31, 0.22, 0.0, -18.0],
    [-0.2, 0.16, 0.41, -0.22, 0.0, 18.0],
    [0.1, 0.21, 0.25, 0.0, 0.35, 0.0],
    [0.1, 0.046, 0.046, 0.0, 0.1, 0.0],
    [0.1, 0.046, 0.046, 0.0, -0.1, 0.0],
    [0.1, 0.046, 0.023, -0.08, -0.605, 0.0],
    [0.1, 0.023, 0.023, 0.0, -0.606, 0.0],
    [0.1, 0.023, 0.046, 0.06, -0.605, 0.0],
])


def _rng(rng) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy Generator, got {type(rng).__name__}")
    return rng


def industrial_phantom(rng: np.random.Generator, n_parts: tuple[int, int] = (2, 4),
                       n_holes: tuple[int, int] = (1, 3)) -> list[tuple]:
    """Shapes ``("rect", value, cx, cy, half_w, half_h, angle_rad, mode)`` of a random industrial
    part: ``n_parts`` rotated blocks (attenuation 0.4-1.0, later blocks overwrite earlier ones) and
    ``n_holes`` rotated rectangular holes (value 0) inside them."""
    rng = _rng(rng)
    shapes = []
    base_angle = rng.uniform(-np.pi / 4, np.pi / 4)
    k = int(rng.integers(n_parts[0], n_parts[1] + 1))
    for i in range(k):
        for _ in range(100):
            hw, hh = rng.uniform(0.12, 0.45), rng.uniform(0.08, 0.3)
            ang = base_angle + (rng.choice([0.0, np.pi / 2]) if i else 0.0) + rng.normal(0, 0.05) * (i > 0)
            cx, cy = rng.uniform(-0.4, 0.4, size=2)
            if np.hypot(abs(cx) + np.hypot(hw, hh), abs(cy)) < 0.85 and np.hypot(cx, abs(cy) + np.hypot(hw, hh)) < 0.85 \
                    and np.hypot(cx, cy) + np.hypot(hw, hh) < 0.85:
                break
        shapes.append(("rect", float(rng.uniform(0.4, 1.0)), cx, cy, hw, hh, ang, "set"))
    parts = list(shapes)
    for _ in range(int(rng.integers(n_holes[0], n_holes[1] + 1))):
        p = parts[int(rng.integers(len(parts)))]
        _, _, cx, cy, hw, hh, ang, _ = p
        fx, fy = rng.uniform(0.2, 0.5), rng.uniform(0.2, 0.5)
        ox, oy = rng.uniform(-1, 1) * hw * (1 - fx), rng.uniform(-1, 1) * hh * (1 - fy)
        c, s = np.cos(ang), np.sin(ang)
        shapes.append(("rect", 0.0, cx + c * ox - s * oy, cy + s * ox + c * oy, hw * fx, hh * fy, ang, "set"))
    return shapes


def shepp_logan_like(rng: np.random.Generator, jitter: float = 0.1) -> list[tuple]:
    """Shapes ``("ellipse", value, x0, y0, a, b, angle_rad, "add")`` of a jittered modified
    Shepp-Logan phantom (axes, centres and angles jittered by ``jitter``, intensities by 20 %),
    shrunk by 0.85 so it stays inside the scanned disc."""
    rng = _rng(rng)
    out = []
    skull = 1 + rng.uniform(-jitter / 4, jitter / 4, size=2)  # the two outer ellipses scale together
    for i, (val, a, b, x0, y0, ang) in enumerate(_SHEPP_LOGAN):
        j = jitter
        if i > 1:
            a2, b2 = a * (1 + rng.uniform(-j, j)), b * (1 + rng.uniform(-j, j))
        else:
            a2, b2 = a * skull[0], b * skull[1]
        x2, y2 = x0 + rng.uniform(-j, j) * 0.3 * (i > 1), y0 + rng.uniform(-j, j) * 0.3 * (i > 1)
        v2 = val * (1 + rng.uniform(-0.2, 0.2)) if i > 1 else val
        out.append(("ellipse", float(v2), 0.85 * x2, -0.85 * y2, 0.85 * a2, 0.85 * b2,
                    np.deg2rad(ang + rng.uniform(-20, 20) * j * 10 * (i > 1)), "add"))
    return out


def render(shapes: list[tuple], size: int, supersample: int = 4) -> np.ndarray:
    """Area-averaged ``size x size`` image of ``shapes`` (``supersample^2`` samples per pixel)."""
    if not isinstance(size, int) or size < 2:
        raise ValueError(f"size must be an integer >= 2, got {size!r}")
    if not isinstance(supersample, int) or supersample < 1:
        raise ValueError(f"supersample must be a positive integer, got {supersample!r}")
    n = size * supersample
    t = (np.arange(n) + 0.5) / n * 2 - 1
    y, x = np.meshgrid(t, t, indexing="ij")
    img = np.zeros((n, n))
    for kind, val, cx, cy, p, q, ang, mode in shapes:
        c, s = np.cos(ang), np.sin(ang)
        xr = c * (x - cx) + s * (y - cy)
        yr = -s * (x - cx) + c * (y - cy)
        if kind == "rect":
            inside = (np.abs(xr) <= p) & (np.abs(yr) <= q)
        elif kind == "ellipse":
            inside = (xr / p) ** 2 + (yr / q) ** 2 <= 1
        else:
            raise ValueError(f"unknown shape kind {kind!r}")
        if mode == "set":
            img[inside] = val
        else:
            img[inside] += val
    return img.reshape(size, supersample, size, supersample).mean(axis=(1, 3))


def simulate_scan(shapes: list[tuple], size: int, angles, supersample: int = 4, noise: float = 0.0,
                  rng: np.random.Generator | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(ground_truth (size, size), sinogram (size, n_angles))``: the object rendered with
    ``supersample^2`` samples per pixel (area-averaged), and its sinogram computed by the very
    projector the reconstruction uses, :class:`ParallelBeamProjector` (consistent data: the
    reconstruction's forward model can reproduce the measurement exactly). ``noise > 0`` adds
    Gaussian noise of standard deviation ``noise * max(sinogram)`` (drawn from ``rng``)."""
    gt = render(shapes, size, supersample)
    with torch.no_grad():
        sino = ParallelBeamProjector(size, angles)(torch.tensor(gt, dtype=torch.float64)).numpy()
    if noise < 0 or not np.isfinite(noise):
        raise ValueError(f"noise must be a non-negative finite number, got {noise!r}")
    if noise > 0:
        sino = sino + _rng(rng).normal(0.0, noise * float(np.abs(sino).max()), size=sino.shape)
    return gt, sino
