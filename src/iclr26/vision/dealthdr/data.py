"""Procedural HDR video triplets with alternating exposures, noise, motion blur and occlusion.

A stand-in for the paper's synthetic paired dataset (which is not public): each sample is a
three-frame window ``(t-1, t, t+1)`` of a scene rendered in continuous coordinates, with a
textured background that pans with a small integer velocity (camera motion) and one or two
textured foreground objects that move faster (so they occlude and disocclude the background,
and part of their motion lies beyond the flow's search radius). Radiance lies in [0, 1] with
bright light blobs. Exposures alternate (the centre frame is short or long at random, its
neighbours the other one); short frames carry signal-dependent Gaussian noise (shot + read), long
frames are motion-blurred (the mean of sub-frame renders over the exposure) and saturate. The
camera response is the gamma curve ``LDR = clip(H e)^(1/2.2)``, quantised to 8 bits (paper,
input linearisation by the inverse gamma 2.2).
"""
from __future__ import annotations

import math

import numpy as np

GAMMA = 2.2                  # camera response (paper: inverse-gamma linearisation)
MU = 5000.0                  # mu-law tone-mapping constant (paper: loss in the mu-law domain, mu = 5000)
EXPOSURE_RATIO = 4.0         # long / short exposure (two stops; HDR video benchmarks use 2 or 3 stops)
SHOT_NOISE = (2e-3, 2e-4)    # variance per unit signal: short, long frame (linear domain)
READ_NOISE = (1e-4, 1e-5)    # signal-independent variance: short, long frame
BLUR_SPAN = 0.5              # a long frame integrates the motion over half a frame interval
BLUR_SUBFRAMES = 5


def mu_law(h, mu: float = MU):
    """``log(1 + mu h) / log(1 + mu)`` for radiance ``h`` in [0, 1] (numpy or torch)."""
    if isinstance(h, np.ndarray):
        return np.log1p(mu * np.clip(h, 0, None)) / math.log1p(mu)
    import torch

    return torch.log1p(mu * h.clamp_min(0)) / math.log1p(mu)


def _texture(rng, n_waves: int):
    """Random sum of oriented sinusoids (its own frequencies, phases, colour weights)."""
    freq = rng.uniform(0.15, 0.9, size=(n_waves, 2)) * rng.choice([-1, 1], size=(n_waves, 2))
    phase = rng.uniform(0, 2 * math.pi, size=n_waves)
    amp = rng.uniform(0.3, 1.0, size=n_waves)
    colour = rng.uniform(0.3, 1.0, size=(n_waves, 3))
    return freq, phase, amp, colour


def _eval_texture(tex, x, y):
    freq, phase, amp, colour = tex
    arg = x[None] * freq[:, 0, None, None] + y[None] * freq[:, 1, None, None] + phase[:, None, None]
    waves = amp[:, None, None] * (0.5 + 0.5 * np.sin(arg))                   # (K, H, W)
    img = np.einsum("khw,kc->chw", waves, colour) / amp.sum()
    return img                                                                # (3, H, W) in [0, 1]


class _Scene:
    def __init__(self, rng: np.random.Generator, size: int, fg_speed: tuple[float, float],
                 fg_level: tuple[float, float] = (0.05, 0.6), fg_texture: float = 1.0):
        self.size = size
        self.bg_tex = _texture(rng, 6)
        self.bg_level = rng.uniform(0.02, 0.12)
        self.bg_vel = rng.integers(-2, 3, size=2).astype(float)
        n_lights = rng.integers(1, 3)
        self.lights = [(rng.uniform(0, size, 2), rng.uniform(2.0, 5.0), rng.uniform(0.4, 1.0)) for _ in range(n_lights)]
        self.fg_texture = fg_texture
        self.objects = []
        for _ in range(rng.integers(1, 3)):
            w, h = rng.uniform(0.25, 0.45, 2) * size
            speed = rng.uniform(*fg_speed)
            ang = rng.uniform(0, 2 * math.pi)
            vel = np.round(speed * np.array([math.cos(ang), math.sin(ang)]))
            centre = rng.uniform(0.3, 0.7, 2) * size
            self.objects.append(dict(w=w, h=h, vel=vel, centre=centre, tex=_texture(rng, 4),
                                     level=rng.uniform(*fg_level)))

    def radiance(self, tau: float) -> np.ndarray:
        S = self.size
        yy, xx = np.meshgrid(np.arange(S, dtype=float), np.arange(S, dtype=float), indexing="ij")
        bx, by = xx - self.bg_vel[0] * tau, yy - self.bg_vel[1] * tau
        img = self.bg_level * (0.2 + _eval_texture(self.bg_tex, bx, by))
        for (cx, cy), r, peak in self.lights:
            img = img + peak * np.exp(-((bx - cx) ** 2 + (by - cy) ** 2) / (2 * r * r))[None]
        for o in self.objects:
            cx, cy = o["centre"] + o["vel"] * tau
            ox, oy = xx - cx, yy - cy
            inside = (np.abs(ox) <= o["w"] / 2) & (np.abs(oy) <= o["h"] / 2)
            t = self.fg_texture
            obj = o["level"] * (0.25 + t * _eval_texture(o["tex"], ox, oy) + (1 - t) * 0.5)
            img = np.where(inside[None], obj, img)
        return np.clip(img, 0.0, 1.0)


def make_triplets(n: int, rng: np.random.Generator, *, size: int = 32, fg_speed: tuple[float, float] = (2.0, 7.0),
                  fg_level: tuple[float, float] = (0.05, 0.6), exposure_ratio: float = EXPOSURE_RATIO,
                  fg_texture: float = 1.0):
    """``n`` three-frame windows. Returns a dict of float32 arrays:

    - ``ldr`` (n, 3, 3, size, size): the 8-bit LDR frames t-1, t, t+1 in [0, 1];
    - ``exposure`` (n, 3): each frame's exposure (1 short, EXPOSURE_RATIO long);
    - ``hdr`` (n, 3, size, size): the clean radiance of frame t in [0, 1] (the target).
    """
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    if not isinstance(size, (int, np.integer)) or size < 8:
        raise ValueError(f"size must be an integer >= 8, got {size!r}")
    lo, hi = fg_speed
    if not (0 <= lo <= hi):
        raise ValueError(f"fg_speed must be (low, high) with 0 <= low <= high, got {fg_speed!r}")
    if not (len(fg_level) == 2 and 0 <= fg_level[0] <= fg_level[1] <= 1):
        raise ValueError(f"fg_level must be (low, high) with 0 <= low <= high <= 1, got {fg_level!r}")
    if not (isinstance(exposure_ratio, (int, float)) and math.isfinite(exposure_ratio) and exposure_ratio >= 1):
        raise ValueError(f"exposure_ratio must be a finite number >= 1, got {exposure_ratio!r}")
    if not (isinstance(fg_texture, (int, float)) and 0 <= fg_texture <= 1):
        raise ValueError(f"fg_texture must be a number in [0, 1], got {fg_texture!r}")
    ldr = np.zeros((n, 3, 3, size, size), np.float32)
    expo = np.zeros((n, 3), np.float32)
    hdr = np.zeros((n, 3, size, size), np.float32)
    offsets = np.linspace(-BLUR_SPAN / 2, BLUR_SPAN / 2, BLUR_SUBFRAMES)
    for i in range(n):
        scene = _Scene(rng, size, (lo, hi), tuple(fg_level), float(fg_texture))
        centre_long = bool(rng.integers(2))
        hdr[i] = scene.radiance(0.0)
        for j, tau in enumerate((-1.0, 0.0, 1.0)):
            is_long = centre_long if j == 1 else not centre_long
            e = float(exposure_ratio) if is_long else 1.0
            if is_long:
                h = np.mean([scene.radiance(tau + d) for d in offsets], axis=0)
            else:
                h = hdr[i] if j == 1 else scene.radiance(tau)
            x = h * e
            k = 1 if is_long else 0
            x = x + rng.normal(size=x.shape) * np.sqrt(SHOT_NOISE[k] * x + READ_NOISE[k])
            ldr[i, j] = np.round(np.clip(x, 0, 1) ** (1 / GAMMA) * 255) / 255
            expo[i, j] = e
    return {"ldr": ldr, "exposure": expo, "hdr": hdr}
