"""Synthetic splices of the two photos scikit-learn bundles (``load_sample_images``: china, flower),
at varied resolutions and aspect ratios, whose only forensic trace is a sensor-noise mismatch.

A host crop and a donor crop (either photo, anywhere) are taken at the sample's size; a random
ellipse or rectangle of the donor (``area`` of the image) is pasted into the host. The host gets
Gaussian noise of a random level ``sigma_h`` (log-uniform), the donor region ``sigma_h * r`` with
``r`` = ``ratio`` or ``1 / ratio`` at random. Because ``sigma_h`` varies from image to image over a
wider range than ``ratio``, a tile that lies wholly inside one region cannot tell from its own noise
level whether it is host or donor: only a comparison across the image (the region with the
minority of the area is the donor) decides it. That is the global cue RelayFormer's relay tokens are
meant to carry.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

__all__ = ["load_photos", "make_splice", "make_batch"]


@lru_cache(maxsize=1)
def load_photos() -> tuple[np.ndarray, ...]:
    """The bundled photos as float32 (H, W, 3) arrays in [0, 1]."""
    from sklearn.datasets import load_sample_images

    return tuple(np.asarray(im, dtype=np.float32) / 255.0 for im in load_sample_images().images)


def _crop(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """A random ``h x w`` view of one photo, taken at half size and upsampled 2x (nearest then a
    2x2 box filter), so that the content is smooth at the pixel scale and the added sensor noise is
    the only fine-grained texture, as in high-resolution photos."""
    photos = load_photos()
    im = photos[rng.integers(len(photos))]
    hh, ww = (h + 1) // 2 + 1, (w + 1) // 2 + 1
    y, x = rng.integers(im.shape[0] - hh + 1), rng.integers(im.shape[1] - ww + 1)
    small = im[y:y + hh, x:x + ww]
    up = small.repeat(2, 0).repeat(2, 1)
    up = (up[:-1, :-1] + up[1:, :-1] + up[:-1, 1:] + up[1:, 1:]) / 4
    out = up[:h, :w]
    if rng.random() < 0.5:
        out = out[:, ::-1]
    return out


def _region(rng: np.random.Generator, h: int, w: int, area: tuple[float, float]) -> np.ndarray:
    frac = rng.uniform(*area)
    aspect = np.exp(rng.uniform(-0.5, 0.5))
    rh = min(h, max(4, int(round(np.sqrt(frac * h * w * aspect)))))
    rw = min(w, max(4, int(round(frac * h * w / rh))))
    y0, x0 = rng.integers(h - rh + 1), rng.integers(w - rw + 1)
    yy, xx = np.mgrid[:h, :w]
    if rng.random() < 0.5:
        cy, cx = y0 + rh / 2, x0 + rw / 2
        m = ((yy + 0.5 - cy) / (rh / 2)) ** 2 + ((xx + 0.5 - cx) / (rw / 2)) ** 2 <= 1
    else:
        m = (yy >= y0) & (yy < y0 + rh) & (xx >= x0) & (xx < x0 + rw)
    return m


def make_splice(rng: np.random.Generator, h: int, w: int, *, sigma: tuple[float, float] = (0.015, 0.12),
                ratio: float = 3.0, area: tuple[float, float] = (0.12, 0.4)):
    """One spliced image (3, h, w) float32 and its mask (1, h, w) in {0, 1}.

    ``sigma``: range of the host noise s.d. (log-uniform, in [0, 1] intensity units); ``ratio``: the
    donor's noise is ``ratio`` times larger or smaller; ``area``: range of the donor's area fraction.
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy Generator, got {type(rng).__name__}")
    photos = load_photos()
    max_h, max_w = min(p.shape[0] for p in photos), min(p.shape[1] for p in photos)
    if not (8 <= h <= max_h and 8 <= w <= max_w):
        raise ValueError(f"h, w must lie in [8, {max_h}] x [8, {max_w}], got {h} x {w}")
    if not 0 < sigma[0] <= sigma[1]:
        raise ValueError(f"sigma must be a range 0 < lo <= hi, got {sigma}")
    if not ratio > 1:
        raise ValueError(f"ratio must be > 1, got {ratio}")
    if not 0 < area[0] <= area[1] < 0.5:
        raise ValueError(f"area must be a range in (0, 0.5), got {area}")
    host, donor = _crop(rng, h, w), _crop(rng, h, w)
    m = _region(rng, h, w, area)
    s_h = float(np.exp(rng.uniform(np.log(sigma[0]), np.log(sigma[1]))))
    s_d = s_h * (ratio if rng.random() < 0.5 else 1.0 / ratio)
    noise = rng.standard_normal((h, w, 3)).astype(np.float32)
    img = np.where(m[..., None], donor + s_d * noise, host + s_h * noise)
    img = np.clip(img, 0.0, 1.0)
    return img.transpose(2, 0, 1).astype(np.float32), m[None].astype(np.float32)


def make_batch(rng: np.random.Generator, n: int, h: int, w: int, **kw):
    """``n`` splices of one size, as tensors ``(images (n, 3, h, w), masks (n, 1, h, w))``; images are
    standardised to roughly zero mean and unit s.d. (``(x - 0.5) / 0.25``)."""
    xs, ms = zip(*(make_splice(rng, h, w, **kw) for _ in range(n)))
    return (torch.from_numpy((np.stack(xs) - 0.5) / 0.25), torch.from_numpy(np.stack(ms)))
