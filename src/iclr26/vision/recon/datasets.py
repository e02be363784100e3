"""Digits with known per-class pose distributions (the paper's MNIST protocol, on scikit-learn's
bundled 8x8 digits, offline).

Each class draws its instances' true rotations from its own distribution, every one centred on the
upright orientation (so the data's natural canonical is upright): some classes stay near upright,
some are spread over an interval, some are bimodal (upright or upside down), one is uniform over
the circle. ``POSE_FAMILIES`` lists them; :func:`sample_poses` draws from them.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from .backbone import circular_mask
from .canonicalizer import rotate, wrap_angle

DEG = math.pi / 180
# class -> (family, parameter): "upright" (wrapped normal, sd), "interval" (uniform +-half width),
# "bimodal" (0 or 180 degrees with probability 1/2, plus a wrapped normal of sd), "uniform" (circle)
POSE_FAMILIES = {
    0: ("uniform", 0.0),
    1: ("interval", 60 * DEG),
    2: ("upright", 10 * DEG),
    3: ("bimodal", 10 * DEG),
    4: ("interval", 90 * DEG),
    5: ("upright", 10 * DEG),
    6: ("upright", 10 * DEG),
    7: ("interval", 45 * DEG),
    8: ("bimodal", 10 * DEG),
    9: ("upright", 10 * DEG),
}


def sample_poses(labels: np.ndarray, rng: np.random.Generator, families: dict | None = None) -> np.ndarray:
    """One true rotation (radians, ``[-pi, pi)``) per label from its class's family."""
    families = POSE_FAMILIES if families is None else families
    out = np.empty(len(labels))
    for i, y in enumerate(labels):
        fam, p = families[int(y)]
        if fam == "upright":
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


def load_digit_images(size: int = 16, digit_size: int = 12) -> tuple[torch.Tensor, np.ndarray]:
    """scikit-learn's 1,797 digits, bilinearly resized to ``digit_size`` and centred in a
    ``size x size`` canvas inside the circular mask, scaled to ``[0, 1]``: ``(images (n, 1, S, S),
    labels (n,))``."""
    from sklearn.datasets import load_digits

    if digit_size > size:
        raise ValueError(f"digit_size {digit_size} exceeds size {size}")
    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    x = F.interpolate(x, size=(digit_size, digit_size), mode="bilinear", align_corners=False)
    pad = (size - digit_size) // 2
    x = F.pad(x, (pad, size - digit_size - pad, pad, size - digit_size - pad))
    return x * circular_mask(size), d.target.astype(np.int64)


def rotated(images: torch.Tensor, poses: np.ndarray) -> torch.Tensor:
    """``rho(pose) x`` per image, inside the circular mask."""
    return rotate(images, torch.as_tensor(poses, dtype=images.dtype)) * circular_mask(images.shape[-1])
