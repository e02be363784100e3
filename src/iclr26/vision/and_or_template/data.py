"""Procedural compositions (a proxy for AVA/AADB themes) and their terminal responses.

Every image is a 36 x 36 grey canvas with Gaussian pixel noise and a few shapes (disk, square,
cross; 7 px). A *theme* fixes where its subject shapes go; each theme has alternative *variants*
(the OR branches a template should find), and every object is jittered:

- ``thirds``: a disk at one of the four rule-of-thirds points (12, 12), (24, 12), (12, 24), (24, 24);
- ``symmetry``: two squares mirrored about the vertical centre line, at x = 18 -+ 9 or 18 -+ 12
  and height y in {9, 18, 27} (6 variants);
- ``diagonal``: three crosses on the main or the anti-diagonal (2 variants).
Every image also holds ``n_distractors`` shapes of random kind at random places. The reference
(negative) class mixes random layouts (the theme's shapes at uniform random places) with near
misses (a theme layout with one subject shape displaced by 5-8 px): the "amateur" images.

Terminal responses (the template's r_j(I) in [0, 1]): for each shape kind a zero-mean matched
filter, normalised so that a noiseless shape gives 1, maximised over a local geometric search of
+-``search`` px around each anchor of a 3-px lattice (the geometric OR of the terminal) and clipped
to [0, 1]. Everything is drawn from ``numpy.random.Generator`` and is deterministic given the seed.
"""
from __future__ import annotations

import numpy as np
from scipy.ndimage import correlate, maximum_filter

__all__ = ["CANVAS", "SHAPES", "THEMES", "VARIANTS", "render", "sample_layout", "sample_reference",
           "make_task", "terminal_responses", "feature_table"]

CANVAS = 36
SHAPES = ("disk", "square", "cross")
SIZE = 7
THEMES = ("thirds", "symmetry", "diagonal")
SUBJECT = {"thirds": 0, "symmetry": 1, "diagonal": 2}
VARIANTS = {
    "thirds": [[(12, 12)], [(24, 12)], [(12, 24)], [(24, 24)]],
    "symmetry": [[(18 - dx, y), (18 + dx, y)] for dx in (9, 12) for y in (9, 18, 27)],
    "diagonal": [[(9, 9), (18, 18), (27, 27)], [(27, 9), (18, 18), (9, 27)]],
}
ANCHOR_STEP = 3


def _masks():
    r = SIZE // 2
    yy, xx = np.mgrid[-r:r + 1, -r:r + 1]
    disk = (xx ** 2 + yy ** 2 <= r * r + 0.5).astype(np.float64)
    square = np.ones((SIZE, SIZE))
    square[2:-2, 2:-2] = 0.0  # a hollow square: a 2-px frame
    cross = ((np.abs(xx) <= 1) | (np.abs(yy) <= 1)).astype(np.float64)
    return np.stack([disk, square, cross])


MASKS = _masks()


def render(objects, noise, rng):
    """Canvas with the objects ``[(kind, x, y), ...]`` (centres, rounded to pixels) plus N(0, noise^2) pixels."""
    img = np.zeros((CANVAS, CANVAS))
    r = SIZE // 2
    for kind, x, y in objects:
        cx, cy = int(round(x)), int(round(y))
        for dy in range(-r, r + 1):
            for dx in range(-r, r + 1):
                px, py = cx + dx, cy + dy
                if 0 <= px < CANVAS and 0 <= py < CANVAS and MASKS[kind, dy + r, dx + r] > 0:
                    img[py, px] = 1.0
    return img + noise * rng.standard_normal(img.shape)


def _clip(v):
    return float(np.clip(v, SIZE // 2, CANVAS - 1 - SIZE // 2))


def _distractors(n, rng):
    return [(int(rng.integers(3)), _clip(rng.uniform(0, CANVAS)), _clip(rng.uniform(0, CANVAS))) for _ in range(n)]


def sample_layout(theme, rng, variants=None, jitter=1.5, n_distractors=2):
    """A theme layout: (objects, variant). ``variants`` restricts the allowed variant ids."""
    allowed = list(range(len(VARIANTS[theme]))) if variants is None else list(variants)
    v = int(allowed[rng.integers(len(allowed))])
    kind = SUBJECT[theme]
    subj = [(kind, _clip(x + jitter * rng.standard_normal()), _clip(y + jitter * rng.standard_normal()))
            for x, y in VARIANTS[theme][v]]
    return subj + _distractors(n_distractors, rng), v, len(subj)


def sample_reference(theme, rng, jitter=1.5, n_distractors=2, near_miss=0.5):
    """A reference ("amateur") layout for the theme: a near miss with probability ``near_miss``, else random."""
    objs, v, n_subj = sample_layout(theme, rng, None, jitter, n_distractors)
    if rng.random() < near_miss:
        i = int(rng.integers(n_subj))
        ang = rng.uniform(0, 2 * np.pi)
        d = rng.uniform(5.0, 8.0)
        k, x, y = objs[i]
        objs[i] = (k, _clip(x + d * np.cos(ang)), _clip(y + d * np.sin(ang)))
        return objs
    kind = SUBJECT[theme]
    return [(kind, _clip(rng.uniform(0, CANVAS)), _clip(rng.uniform(0, CANVAS))) for _ in range(n_subj)] + \
        objs[n_subj:]


def make_task(theme, n_pos, n_neg, rng, variants=None, noise=0.35, jitter=1.5, n_distractors=2, near_miss=0.5):
    """Images (n, 36, 36), labels (1 = theme), layouts and variant ids (-1 for the reference), shuffled."""
    if theme not in THEMES:
        raise ValueError(f"theme must be one of {THEMES}, got {theme!r}")
    layouts, labels, var = [], [], []
    for _ in range(n_pos):
        objs, v, _ = sample_layout(theme, rng, variants, jitter, n_distractors)
        layouts.append(objs)
        labels.append(1)
        var.append(v)
    for _ in range(n_neg):
        layouts.append(sample_reference(theme, rng, jitter, n_distractors, near_miss))
        labels.append(0)
        var.append(-1)
    order = rng.permutation(len(layouts))
    layouts = [layouts[i] for i in order]
    images = np.stack([render(o, noise, rng) for o in layouts]) if layouts else np.zeros((0, CANVAS, CANVAS))
    return images, np.asarray(labels)[order], layouts, np.asarray(var)[order]


def feature_table():
    """(D, 3) array of (shape kind, x, y) of every terminal, in the column order of ``terminal_responses``."""
    anchors = np.arange(ANCHOR_STEP, CANVAS - 1, ANCHOR_STEP)
    return np.array([(k, x, y) for k in range(len(SHAPES)) for y in anchors for x in anchors], dtype=np.float64)


def terminal_responses(images, search=2):
    """Matched-filter responses r_j(I) in [0, 1] at every (shape, anchor), maximised over +-search px."""
    images = np.asarray(images, dtype=np.float64)
    if images.ndim != 3 or images.shape[1:] != (CANVAS, CANVAS):
        raise ValueError(f"images must have shape (n, {CANVAS}, {CANVAS}), got {images.shape}")
    anchors = np.arange(ANCHOR_STEP, CANVAS - 1, ANCHOR_STEP)
    out = []
    for k in range(len(SHAPES)):
        t = MASKS[k] - MASKS[k].mean()
        norm = float((t * MASKS[k]).sum())
        resp = np.stack([correlate(im, t, mode="constant") for im in images]) / norm
        resp = maximum_filter(resp, size=(1, 2 * search + 1, 2 * search + 1), mode="constant")
        out.append(resp[:, anchors][:, :, anchors].reshape(len(images), -1))
    return np.clip(np.concatenate(out, axis=1), 0.0, 1.0)
