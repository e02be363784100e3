"""A toy video substrate shared by the video papers: moving 8x8 digits and a tiny video DiT.

No video diffusion checkpoint exists offline, so the video claim checks (Astraea, Many-for-Many)
train small ones. The model is the adaLN-Zero DiT of :mod:`iclr26.models.diffusion` with
spatio-temporal patches as tokens (the token layout of video DiTs such as OpenSora / Wan: every
frame is cut into ``patch x patch`` patches and all patches of all frames form one sequence with a
learned position per token).
"""
from __future__ import annotations

import numpy as np

from iclr26.models import diffusion as D


def moving_digits(n: int, frames: int = 4, size: int = 16, max_speed: int = 2, seed: int = 0,
                  split: str = "train"):
    """``n`` videos of one scikit-learn 8x8 digit moving at a constant integer velocity.

    Returns ``(X, y)``: ``X`` float32 ``(n, frames, 1, size, size)`` in ``[-1, 1]`` (background
    ``-1``), ``y`` the digit labels. The digit images come from ``split`` of
    :func:`iclr26.models.diffusion.load_digits_8x8`; start and velocity (each coordinate in
    ``-max_speed..max_speed``) are drawn so that the digit stays inside the canvas.
    """
    if frames < 1 or size < 8 or max_speed < 0:
        raise ValueError(f"need frames >= 1, size >= 8, max_speed >= 0; got {frames}, {size}, {max_speed}")
    if (size - 8) < max_speed * (frames - 1):
        raise ValueError(f"a canvas of {size} px cannot hold {frames} frames at speed {max_speed}")
    imgs, labels = D.load_digits_8x8(split)
    rng = np.random.default_rng(seed)
    pick = rng.integers(len(imgs), size=n)
    room = size - 8
    X = -np.ones((n, frames, 1, size, size), np.float32)
    for i, j in enumerate(pick):
        v = rng.integers(-max_speed, max_speed + 1, size=2)
        span = np.abs(v) * (frames - 1)
        lo = np.where(v < 0, span, 0)
        start = lo + rng.integers(0, room - span + 1)
        for f in range(frames):
            r, c = start + v * f
            X[i, f, 0, r:r + 8, c:c + 8] = imgs[j, 0]
    return X, labels[pick].astype(np.int64)


class TinyVideoDiT(D.TinyDiT):
    """Class-conditional video DiT: ``forward(x (B, F, C, H, W), t (B,), y (B,))``.

    Tokens are the ``patch x patch`` patches of every frame (``F * (H / patch)^2`` tokens, in the
    order frame, row, column); everything else is :class:`iclr26.models.diffusion.TinyDiT` (its
    input layers, adaLN-Zero blocks held in ``self.blocks`` and called as ``block(h, cond)``, so
    token-wise caches wrap them, and its output head).
    """

    def __init__(self, frames: int = 4, config: D.DiTConfig | None = None):
        c = config or D.DiTConfig(image_size=16, patch=4, width=64, depth=4, heads=4)
        if frames < 1:
            raise ValueError(f"frames must be >= 1, got {frames}")
        super().__init__(c, n_tokens=frames * (c.image_size // c.patch) ** 2)
        self.frames = frames

    @property
    def input_shape(self) -> tuple:
        c = self.config
        return (self.frames, c.channels, c.image_size, c.image_size)
