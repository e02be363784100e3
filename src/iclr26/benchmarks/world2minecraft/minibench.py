"""A procedural voxel mini benchmark in World2Minecraft's grid schema: rooms with furniture
instances drawn from a template library, rotated by yaw, then corrupted as a predicted and fused
occupancy would be (missed voxels, spurious voxels, one-voxel jitter), seen by two frames.

Everything here is this library's (the paper's scenes and MinecraftOcc are not available): the
class list, the templates (asymmetric so that yaw matters), the corruption model (independent
per-voxel dropout, default 20 %; 5 % spurious voxels; 10 % jitter; rates from the planning notes)
and the ``variant`` deformation that makes the library inexact (each object is a template stretched
by one voxel along a horizontal axis, ``stretches`` times, one in three also with a column removed;
the library holds only the undeformed shapes). The dropout and the number of stretches decide
whether snapping beats the raw grid; the experiment sweeps them.
"""
from __future__ import annotations

import numpy as np

from .voxels import EMPTY, IGNORE, fuse_occupancy, rotate_yaw

FLOOR, WALL = 1, 2
FURNITURE = {3: "bed", 4: "table", 5: "chair", 6: "sofa", 7: "cabinet"}
#: vanilla Minecraft block ids for each label (for ``to_setblock_commands``)
PALETTE = {FLOOR: "minecraft:oak_planks", WALL: "minecraft:white_concrete", 3: "minecraft:red_wool",
           4: "minecraft:spruce_planks", 5: "minecraft:birch_planks", 6: "minecraft:blue_wool",
           7: "minecraft:dark_oak_planks"}


def _box(shape, *parts):
    t = np.zeros(shape, bool)
    for sl in parts:
        t[sl] = True
    return t


def template_library() -> dict[int, list[np.ndarray]]:
    """Two templates per furniture class, ``[x, y, z]`` with ``y`` up; none is yaw-symmetric."""
    s = slice
    bed1 = _box((5, 3, 8), (s(None), s(0, 1), s(None)), (s(None), s(1, 2), s(1, None)), (s(None), s(0, 3), s(0, 1)))
    bed2 = _box((4, 3, 7), (s(None), s(0, 2), s(None)), (s(None), s(2, 3), s(0, 1)), (s(0, 1), s(2, 3), s(0, 3)))
    tab1 = _box((5, 3, 4), (s(None), s(2, 3), s(None)), (s(0, 1), s(0, 2), s(0, 1)), (s(4, 5), s(0, 2), s(0, 1)),
                (s(0, 1), s(0, 2), s(3, 4)), (s(4, 5), s(0, 2), s(3, 4)), (s(0, 2), s(0, 2), s(0, 1)))
    tab2 = _box((6, 3, 3), (s(None), s(2, 3), s(None)), (s(0, 1), s(0, 2), s(1, 2)), (s(5, 6), s(0, 2), s(1, 2)),
                (s(0, 3), s(1, 2), s(1, 2)))
    ch1 = _box((3, 4, 3), (s(None), s(1, 2), s(None)), (s(None), s(1, 4), s(0, 1)), (s(0, 1), s(0, 1), s(0, 1)),
               (s(2, 3), s(0, 1), s(2, 3)))
    ch2 = _box((3, 3, 3), (s(None), s(0, 2), s(None)), (s(None), s(2, 3), s(0, 1)), (s(0, 1), s(2, 3), s(0, 2)))
    so1 = _box((7, 3, 3), (s(None), s(0, 1), s(None)), (s(None), s(1, 3), s(0, 1)), (s(0, 1), s(1, 2), s(None)),
               (s(6, 7), s(1, 2), s(None)))
    so2 = _box((6, 3, 5), (s(None), s(0, 1), s(0, 3)), (s(None), s(1, 3), s(0, 1)), (s(0, 2), s(0, 1), s(3, 5)),
               (s(0, 1), s(1, 2), s(None)))
    ca1 = _box((3, 5, 2), (s(None), s(None), s(0, 1)), (s(0, 1), s(None), s(1, 2)), (s(None), s(0, 1), s(1, 2)),
               (s(None), s(4, 5), s(1, 2)))
    ca2 = _box((4, 3, 2), (s(None), s(None), s(0, 1)), (s(None), s(0, 1), s(1, 2)), (s(0, 2), s(1, 3), s(1, 2)))
    return {3: [bed1, bed2], 4: [tab1, tab2], 5: [ch1, ch2], 6: [so1, so2], 7: [ca1, ca2]}


def _int(v, name, lo, hi=None):
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < lo or (hi is not None and v > hi):
        rng_txt = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ValueError(f"{name} must be an integer {rng_txt}, got {v!r}")
    return int(v)


def _rate(v, name):
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)) \
            or not np.isfinite(v) or not 0 <= v <= 1:
        raise ValueError(f"{name} must be a rate in [0, 1], got {v!r}")
    return float(v)


def deform(t: np.ndarray, rng: np.random.Generator, stretches: int = 1) -> np.ndarray:
    """An object that is not exactly a library shape: the template stretched ``stretches`` times by
    one voxel along x or z (each a duplicated interior slice, axis drawn each time), and, for one
    object in three, with one random occupied voxel column removed as well."""
    _int(stretches, "stretches", 0)
    for _ in range(stretches):
        axis = int(rng.choice([0, 2]))
        n = t.shape[axis]
        i = int(rng.integers(1, n - 1)) if n > 2 else 0
        t = np.insert(t, i, np.take(t, i, axis=axis), axis=axis)
    if rng.random() < 1 / 3:
        occ = np.argwhere(t.any(1))
        x, z = occ[int(rng.integers(len(occ)))]
        t = t.copy()
        t[x, :, z] = False
        if not t.any():
            t[x, 0, z] = True
    return t


def make_room(rng: np.random.Generator, size: int = 32, n_objects=(3, 8), variant: bool = False, library=None,
              gap: int = 2, height: int = 12, stretches: int = 1):
    """One room: floor, two walls, and 3-8 furniture instances with a random template and yaw,
    on the floor, ``gap`` empty voxels apart (``variant``: each object deformed by :func:`deform`
    with ``stretches``). Returns ``(grid, objects)``; each object is a dict with ``cls``,
    ``template``, ``rotation``, ``origin``, ``mask`` (the voxels it occupies). Fewer objects than
    drawn are placed when the room has no space left."""
    lib = template_library() if library is None else library
    _int(gap, "gap", 0)
    _int(stretches, "stretches", 0)
    ext = max(max(t.shape) for ts in lib.values() for t in ts) + (stretches if variant else 0)
    _int(size, "size", ext + 2 * gap + 2)
    _int(height, "height", max(t.shape[1] for ts in lib.values() for t in ts) + 1)
    if len(n_objects) != 2 or _int(n_objects[0], "n_objects[0]", 0) > _int(n_objects[1], "n_objects[1]", 0):
        raise ValueError(f"n_objects must be (min, max) with 0 <= min <= max, got {n_objects!r}")
    g = np.zeros((size, height, size), np.int64)
    g[:, 0, :] = FLOOR
    g[0, 1:, :] = WALL
    g[:, 1:, 0] = WALL
    taken = np.zeros((size, size), bool)
    taken[: 1 + gap, :] = True
    taken[:, : 1 + gap] = True
    objects = []
    k = int(rng.integers(n_objects[0], n_objects[1] + 1))
    tries = 0
    while len(objects) < k and tries < 400:
        tries += 1
        c = int(rng.choice(sorted(lib)))
        j = int(rng.integers(len(lib[c])))
        r = int(rng.choice([0, 90, 180, 270]))
        t0 = deform(lib[c][j], rng, stretches) if variant else lib[c][j]
        t = rotate_yaw(t0, r)
        sx, sy, sz = t.shape
        if sx + gap >= size or sz + gap >= size:
            continue
        x = int(rng.integers(1 + gap, size - sx - gap))
        z = int(rng.integers(1 + gap, size - sz - gap))
        if taken[x - gap: x + sx + gap, z - gap: z + sz + gap].any():
            continue
        taken[x: x + sx, z: z + sz] = True
        view = g[x: x + sx, 1: 1 + sy, z: z + sz]
        view[t] = c
        mask = np.zeros_like(g, bool)
        mask[x: x + sx, 1: 1 + sy, z: z + sz] = t
        objects.append(dict(cls=c, template=j, rotation=r, origin=(x, 1, z), mask=mask))
    return g, objects


def corrupt(g: np.ndarray, rng: np.random.Generator, dropout: float = 0.2, spurious: float = 0.05,
            jitter: float = 0.1, classes=tuple(FURNITURE)) -> np.ndarray:
    """A predicted occupancy of ``g``: furniture voxels missed with probability ``dropout``,
    ``jitter`` of the kept ones moved by one voxel along a random axis, and ``spurious`` x (number
    of furniture voxels) wrong voxels of a random furniture class in empty space above the floor."""
    dropout, spurious, jitter = _rate(dropout, "dropout"), _rate(spurious, "spurious"), _rate(jitter, "jitter")
    g = np.asarray(g)
    if g.ndim != 3:
        raise ValueError(f"g must be a 3-D label grid, got shape {g.shape}")
    out = g.copy()
    fur = np.isin(g, classes)
    idx = np.argwhere(fur)
    out[fur] = EMPTY
    keep = idx[rng.random(len(idx)) >= dropout]
    lab = g[tuple(keep.T)]
    move = rng.random(len(keep)) < jitter
    step = np.zeros_like(keep)
    step[np.arange(len(keep)), rng.integers(0, 3, len(keep))] = rng.choice([-1, 1], len(keep))
    dest = np.where(move[:, None], keep + step, keep)
    dest = np.clip(dest, 0, np.array(g.shape) - 1)
    ok = ~np.isin(g[tuple(dest.T)], (FLOOR, WALL))
    dest = np.where(ok[:, None], dest, keep)
    out[tuple(dest.T)] = lab
    n_sp = int(round(spurious * len(idx)))
    free = np.argwhere((out == EMPTY) & (np.arange(g.shape[1])[None, :, None] >= 1))
    if n_sp and len(free):
        pick = free[rng.choice(len(free), size=min(n_sp, len(free)), replace=False)]
        out[tuple(pick.T)] = rng.choice(list(classes), len(pick))
    return out


def observe(g: np.ndarray, rng: np.random.Generator, overlap: int = 8, **noise) -> np.ndarray:
    """The fused prediction of two frames: frame A sees ``x < (X + overlap) / 2``, frame B the rest
    with ``overlap`` voxels in common, stored in B's own yaw-rotated local coordinates; each frame's
    prediction is corrupted independently and the two are fused by :func:`fuse_occupancy`."""
    g = np.asarray(g)
    if g.ndim != 3:
        raise ValueError(f"g must be a 3-D label grid, got shape {g.shape}")
    X = g.shape[0]
    _int(overlap, "overlap", 0, X)
    cut_a, cut_b = (X + overlap) // 2, (X - overlap) // 2
    a = corrupt(g, rng, **noise)
    a[cut_a:] = IGNORE
    b = corrupt(g, rng, **noise)
    b[:cut_b] = IGNORE
    b_local = rotate_yaw(b, 90)                 # B's local grid: world rotated +90 deg about y
    # local (i, j, k) of B maps back to world: rot90 k=1 on axes (0, 2) sends world (x, z) to
    # local (Z - 1 - z, x); the inverse is x = k, z = Z - 1 - i
    Z = g.shape[2]
    T_b = np.array([[0, 0, 1, 0], [0, 1, 0, 0], [-1, 0, 0, Z - 1], [0, 0, 0, 1]], float)
    return fuse_occupancy([a, b_local], [np.eye(4), T_b], g.shape)


def morphological(occ: np.ndarray, close_iter: int, open_iter: int, connectivity: int = 1,
                  classes=tuple(FURNITURE)) -> np.ndarray:
    """The morphological comparator: per furniture class, binary closing (``close_iter``
    iterations) then opening (``open_iter``) with the 3-D structuring element of ``connectivity``
    (1: the 6-connected cross, 2: 18-connected, 3: the full 3^3 cube); a voxel claimed by several
    classes keeps its observed label if that is one of them, else the smallest; floor and walls as
    observed (never overwritten). ``(0, 0)`` is the raw grid."""
    from scipy.ndimage import binary_closing, binary_opening, generate_binary_structure

    close_iter, open_iter = _int(close_iter, "close_iter", 0), _int(open_iter, "open_iter", 0)
    st = generate_binary_structure(3, _int(connectivity, "connectivity", 1, 3))
    occ = np.asarray(occ)
    out = occ.copy()
    out[np.isin(occ, classes)] = EMPTY
    masks = {}
    for c in classes:
        m = occ == c
        if close_iter:
            m = binary_closing(m, st, iterations=close_iter, border_value=0)
        if open_iter:
            m = binary_opening(m, st, iterations=open_iter, border_value=0)
        masks[c] = m & ~np.isin(occ, (FLOOR, WALL))
    for c in sorted(classes, reverse=True):
        out[masks[c]] = c
    for c in classes:
        out[masks[c] & (occ == c)] = c
    return out


def majority_filter(occ: np.ndarray, min_neighbours: int, classes=tuple(FURNITURE)) -> np.ndarray:
    """The label-cleaning comparator: a furniture voxel with fewer than ``min_neighbours``
    furniture voxels in its 3^3 neighbourhood is removed, every other one takes the most frequent
    furniture class of its neighbourhood (itself included; ties to the smaller label). ``0`` only
    relabels."""
    from scipy.ndimage import uniform_filter

    _int(min_neighbours, "min_neighbours", 0, 26)
    occ = np.asarray(occ)
    cl = list(classes)
    fur = np.isin(occ, cl)
    counts = np.stack([np.rint(uniform_filter((occ == c).astype(float), 3, mode="constant") * 27) for c in cl])
    n_nb = counts.sum(0) - fur
    out = occ.copy()
    best = np.asarray(cl)[counts.argmax(0)]
    out[fur] = best[fur]
    out[fur & (n_nb < min_neighbours)] = EMPTY
    return out
