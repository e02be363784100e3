"""Procedural 3D shapes as point clouds: surface samples of primitives (sphere, box, torus, cylinder)
and unions of two of them, randomly scaled per axis, rotated and normalised into the unit ball.

A shape is a parameter record; :func:`sample_surface` draws any number of independent surface points
from it, so the ground truth of an evaluation can be an independent sample of the same surface as the
encoder's input. This generator is this library's proxy for the paper's mesh-sampled objects and
fused-depth scenes (nothing of SCRREAM or GSO is available offline).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PRIMITIVES = ("sphere", "box", "torus", "cylinder")
#: the largest point norm after normalisation (keeps clouds inside the flow's noise cube [-1, 1]^3)
RADIUS = 0.9


@dataclass(frozen=True)
class Shape:
    parts: tuple            # ((primitive, params dict, offset (3,)), ...)
    axis_scale: tuple       # (3,) per-axis scale
    rotation: tuple         # 3x3 rotation, row-major
    center: tuple           # (3,) centroid removed after transform
    norm: float             # divisor that puts the largest norm at RADIUS


def _primitive(kind: str, n: int, rng: np.random.Generator, p: dict) -> np.ndarray:
    if kind == "sphere":
        x = rng.normal(size=(n, 3))
        return x / np.linalg.norm(x, axis=1, keepdims=True)
    if kind == "box":
        a = np.array([p["a"], p["b"], p["c"]])          # half extents
        areas = np.array([a[1] * a[2], a[0] * a[2], a[0] * a[1]]).repeat(2)
        face = rng.choice(6, size=n, p=areas / areas.sum())
        u = rng.uniform(-1, 1, size=(n, 3)) * a
        axis, sign = face // 2, np.where(face % 2 == 0, 1.0, -1.0)
        u[np.arange(n), axis] = sign * a[axis]
        return u
    if kind == "torus":
        R, r = 1.0, p["r"]
        out = np.empty((0, 3))
        while len(out) < n:                     # area element (R + r cos v): rejection sampling
            u = rng.uniform(0, 2 * np.pi, 2 * n)
            v = rng.uniform(0, 2 * np.pi, 2 * n)
            keep = rng.uniform(0, R + r, 2 * n) < R + r * np.cos(v)
            u, v = u[keep], v[keep]
            pts = np.stack([(R + r * np.cos(v)) * np.cos(u), (R + r * np.cos(v)) * np.sin(u), r * np.sin(v)], 1)
            out = np.concatenate([out, pts])
        return out[:n]
    if kind == "cylinder":
        r, h = p["r"], p["h"]                   # radius, half height
        side, cap = 2 * np.pi * r * 2 * h, np.pi * r ** 2
        on_side = rng.uniform(size=n) < side / (side + 2 * cap)
        th = rng.uniform(0, 2 * np.pi, n)
        z = rng.uniform(-h, h, n)
        rad = np.where(on_side, r, r * np.sqrt(rng.uniform(size=n)))
        z = np.where(on_side, z, np.where(rng.uniform(size=n) < 0.5, h, -h))
        return np.stack([rad * np.cos(th), rad * np.sin(th), z], 1)
    raise ValueError(f"unknown primitive {kind!r}; allowed: {', '.join(PRIMITIVES)}")


def _params(kind: str, rng: np.random.Generator) -> dict:
    if kind == "box":
        return dict(a=rng.uniform(0.4, 1.0), b=rng.uniform(0.4, 1.0), c=rng.uniform(0.4, 1.0))
    if kind == "torus":
        return dict(r=rng.uniform(0.2, 0.45))
    if kind == "cylinder":
        return dict(r=rng.uniform(0.4, 0.9), h=rng.uniform(0.4, 1.0))
    return {}


def _rotation(rng: np.random.Generator) -> np.ndarray:
    q, r = np.linalg.qr(rng.normal(size=(3, 3)))
    q = q * np.sign(np.diag(r))
    if np.linalg.det(q) < 0:
        q[:, 0] = -q[:, 0]
    return q


def random_shape(rng: np.random.Generator, union_prob: float = 0.3) -> Shape:
    """One random shape: a primitive, or with probability ``union_prob`` a union of two primitives
    offset from each other; per-axis scales in [0.6, 1], a uniform random rotation."""
    if not 0 <= union_prob <= 1:
        raise ValueError(f"union_prob must lie in [0, 1], got {union_prob}")
    n_parts = 2 if rng.uniform() < union_prob else 1
    parts = []
    for k in range(n_parts):
        kind = PRIMITIVES[rng.integers(len(PRIMITIVES))]
        off = np.zeros(3) if k == 0 else rng.normal(size=3) / np.sqrt(3) * 1.2
        parts.append((kind, _params(kind, rng), tuple(off)))
    shape = Shape(tuple(parts), tuple(rng.uniform(0.6, 1.0, 3)), tuple(_rotation(rng).ravel()), (0.0, 0.0, 0.0), 1.0)
    ref = _raw(shape, 4096, np.random.default_rng(rng.integers(2 ** 31)))
    c = ref.mean(0)
    norm = np.linalg.norm(ref - c, axis=1).max() / RADIUS
    return Shape(shape.parts, shape.axis_scale, shape.rotation, tuple(c), float(norm))


def _raw(shape: Shape, n: int, rng: np.random.Generator) -> np.ndarray:
    k = len(shape.parts)
    counts = rng.multinomial(n, [1 / k] * k)
    pts = np.concatenate([_primitive(kind, c, rng, p) + np.array(off)
                          for (kind, p, off), c in zip(shape.parts, counts)])
    pts = pts * np.array(shape.axis_scale)
    return pts @ np.array(shape.rotation).reshape(3, 3).T


def sample_surface(shape: Shape, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` independent surface points of ``shape`` (float32, (n, 3)), in random order."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    pts = (_raw(shape, int(n), rng) - np.array(shape.center)) / shape.norm
    return pts[rng.permutation(len(pts))].astype(np.float32)


def visible_part(points: np.ndarray, direction: np.ndarray) -> np.ndarray:
    """Boolean mask of the points on the viewer's side: ``(p - centroid) . direction > 0``, a
    half-space cut through the centroid standing in for what one camera along ``direction`` sees."""
    d = np.asarray(direction, dtype=float)
    if d.shape != (3,) or not np.isfinite(d).all() or np.linalg.norm(d) == 0:
        raise ValueError(f"direction must be a finite non-zero 3-vector, got {direction!r}")
    return (points - points.mean(0)) @ d > 0
