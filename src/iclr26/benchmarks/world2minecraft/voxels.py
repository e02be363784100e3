"""World2Minecraft's scene-construction stage: occupancy fusion, instance extraction, template
snapping, ``/setblock`` export, and the occupancy metrics (IoU, mIoU).

Paper: "World2Minecraft: Occupancy-Driven Simulated Scenes Construction", Zhang, Xu, Gong, Wang,
Xie, Tan, ICLR 2026, arXiv 2604.27578; project page https://world2minecraft.github.io/. No
official code was public (none found in the stored GitHub index; the project page promises it).
The steps follow the paper's method as summarised in this project's notes
(``shared/papers/world2minecraft.md``): per-frame semantic occupancy fused with the camera
extrinsics; a binarised grid filtered by a 3D box ``D = box3D * O_bin``; the voxels with
``D >= tau`` clustered per class by DBSCAN (L2, radius ``eps``); one centroid per cluster; per
instance the template and yaw ``(j*, delta*) = argmax_{j, delta} IoU(O_k, Rot(T_j, delta))``; one
``/setblock`` command per block. Numbers the notes do not give (``tau``, ``eps``,
``min_samples``, the translation search, the fusion's tie rule) are this library's and are said so
where they are set.

Grids are integer label arrays indexed ``[x, y, z]`` with ``y`` vertical, as Minecraft's
coordinates; label ``0`` is empty and ``ignore_index`` (default 255) unobserved.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

EMPTY = 0
IGNORE = 255
ROTATIONS = (0, 90, 180, 270)   # yaw in degrees about the vertical axis (notes, step 4)


# ---------------------------------------------------------------- validation helpers
def _grid(occ, name: str = "occ") -> np.ndarray:
    if isinstance(occ, (str, bytes)) or occ is None:
        raise TypeError(f"{name} must be a 3-D integer label array, got {type(occ).__name__}")
    a = np.asarray(occ)
    if a.ndim != 3:
        raise ValueError(f"{name} must be a 3-D label grid [x, y, z], got shape {a.shape}")
    if a.size == 0:
        raise ValueError(f"{name} is empty (shape {a.shape})")
    if a.dtype.kind == "f":
        if not np.isfinite(a).all():
            raise ValueError(f"{name} holds non-finite values")
        if not np.all(a == np.round(a)):
            raise ValueError(f"{name} must hold integer labels, got non-integer floats")
        a = a.astype(np.int64)
    elif a.dtype.kind == "b":
        a = a.astype(np.int64)
    elif a.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integer labels, got dtype {a.dtype}")
    if (a < 0).any():
        raise ValueError(f"{name} holds negative labels")
    return a


def rotate_yaw(t: np.ndarray, degrees: int) -> np.ndarray:
    """Rotate a ``[x, y, z]`` grid by ``degrees`` (a multiple of 90) about the vertical ``y`` axis."""
    if int(degrees) % 90 != 0:
        raise ValueError(f"degrees must be a multiple of 90, got {degrees!r}")
    return np.rot90(np.asarray(t), k=(int(degrees) // 90) % 4, axes=(0, 2))


# ---------------------------------------------------------------- fusion
def fuse_occupancy(frames, transforms, shape, ignore_index: int = IGNORE, prefer_occupied: bool = True) -> np.ndarray:
    """Fuse per-frame semantic occupancy grids into one scene grid by voting.

    ``frames[i]`` is a local label grid (``ignore_index`` = not seen by that frame) and
    ``transforms[i]`` a 4 x 4 matrix mapping a local voxel index ``(i, j, k, 1)`` to world voxel
    coordinates (the camera extrinsics expressed in voxels; rounded to the nearest voxel). Each
    world voxel takes the label with most votes; with ``prefer_occupied`` a tie between empty and
    an object label goes to the object (this library's tie rule; the paper does not state one),
    ties among object labels to the smallest label. Voxels no frame saw are ``ignore_index``.
    World voxels outside ``shape`` are dropped.
    """
    frames = list(frames)
    transforms = list(transforms)
    if len(frames) == 0:
        raise ValueError("frames is empty")
    if len(frames) != len(transforms):
        raise ValueError(f"frames and transforms differ in length ({len(frames)} vs {len(transforms)})")
    shape = tuple(int(s) for s in shape)
    if len(shape) != 3 or min(shape) <= 0:
        raise ValueError(f"shape must be three positive sizes, got {shape}")
    frames = [_grid(f, f"frames[{i}]") for i, f in enumerate(frames)]
    labels = np.unique(np.concatenate([np.unique(f) for f in frames]))
    labels = labels[labels != ignore_index]
    if EMPTY not in labels:
        labels = np.concatenate([[EMPTY], labels])
    lut = {int(v): i for i, v in enumerate(labels)}
    votes = np.zeros((len(labels),) + shape, dtype=np.int32)
    for i, (f, T) in enumerate(zip(frames, transforms)):
        T = np.asarray(T, dtype=float)
        if T.shape != (4, 4) or not np.isfinite(T).all():
            raise ValueError(f"transforms[{i}] must be a finite 4 x 4 matrix, got shape {T.shape}")
        idx = np.argwhere(f != ignore_index)
        if len(idx) == 0:
            continue
        w = np.rint(np.c_[idx, np.ones(len(idx))] @ T.T)[:, :3].astype(np.int64)
        ok = np.all((w >= 0) & (w < np.array(shape)), axis=1)
        lab = np.vectorize(lut.__getitem__, otypes=[np.int64])(f[tuple(idx[ok].T)]) if ok.any() else np.zeros(0, int)
        np.add.at(votes, (lab,) + tuple(w[ok].T), 1)
    seen = votes.sum(0) > 0
    if prefer_occupied and len(labels) > 1:
        best_obj = votes[1:].argmax(0) + 1
        obj_votes = np.take_along_axis(votes, best_obj[None], 0)[0]
        winner = np.where(obj_votes >= votes[0], best_obj, 0)
    else:
        winner = votes.argmax(0)
    out = labels[winner]
    out[~seen] = ignore_index
    return out


# ---------------------------------------------------------------- instance extraction
def density(occ_bin: np.ndarray, kernel: int = 3) -> np.ndarray:
    """``D = box3D * O_bin``: the count of occupied voxels in the ``kernel``^3 box around each voxel
    (zero padding at the border)."""
    from scipy.ndimage import uniform_filter

    b = np.asarray(occ_bin, dtype=np.float64)
    return np.rint(uniform_filter(b, size=kernel, mode="constant", cval=0.0) * kernel ** 3)


@dataclass
class Instances:
    """Instance centres: ``centers[n]`` (voxel coordinates, float) of class ``classes[n]``."""
    centers: np.ndarray
    classes: np.ndarray
    sizes: np.ndarray = field(default_factory=lambda: np.zeros(0, int))

    def __len__(self) -> int:
        return len(self.classes)


def extract_instance_centers(occ, classes=None, kernel: int = 3, tau: float = 9, eps: float = 1.5,
                             min_samples: int = 4, ignore_index: int = IGNORE) -> Instances:
    """Per class: binarise, box-filter (``density``), keep voxels with ``D >= tau``, cluster them by
    DBSCAN (L2, radius ``eps``, ``min_samples``) and return one centroid per cluster (noise points
    dropped).

    Defaults are this library's (the paper's values were not readable here): a 3^3 box
    (``kernel = 3``), ``tau = 9`` (a third of the box), ``eps = 1.5`` voxels (face and edge
    neighbours, not corner ones), ``min_samples = 4``.
    """
    from sklearn.cluster import DBSCAN

    occ = _grid(occ)
    if isinstance(kernel, bool) or not isinstance(kernel, (int, np.integer)) or kernel < 1 or kernel % 2 == 0:
        raise ValueError(f"kernel must be a positive odd integer, got {kernel!r}")
    if not np.isfinite(tau) or tau < 0 or tau > kernel ** 3:
        raise ValueError(f"tau must lie in [0, kernel^3 = {kernel ** 3}], got {tau!r}")
    if not np.isfinite(eps) or eps <= 0:
        raise ValueError(f"eps must be positive, got {eps!r}")
    if isinstance(min_samples, bool) or not isinstance(min_samples, (int, np.integer)) or min_samples < 1:
        raise ValueError(f"min_samples must be a positive integer, got {min_samples!r}")
    if classes is None:
        classes = [int(c) for c in np.unique(occ) if c not in (EMPTY, ignore_index)]
    centers, cls, sizes = [], [], []
    for c in classes:
        d = density(occ == int(c), kernel)
        pts = np.argwhere(d >= max(tau, 1e-9))
        if len(pts) == 0:
            continue
        lab = DBSCAN(eps=eps, min_samples=min_samples).fit_predict(pts)
        for k in np.unique(lab[lab >= 0]):
            p = pts[lab == k]
            centers.append(p.mean(0))
            cls.append(int(c))
            sizes.append(len(p))
    return Instances(np.asarray(centers, float).reshape(-1, 3), np.asarray(cls, int), np.asarray(sizes, int))


# ---------------------------------------------------------------- template fitting
@dataclass
class TemplateFit:
    """The snapped scene and, per instance, the chosen template index, yaw, origin and IoU."""
    grid: np.ndarray
    template: np.ndarray
    rotation: np.ndarray
    origin: np.ndarray
    iou: np.ndarray
    classes: np.ndarray


def _window(a: np.ndarray, lo: np.ndarray, size: np.ndarray) -> np.ndarray:
    """``a[lo : lo + size]`` with zeros outside ``a``."""
    out = np.zeros(tuple(size), dtype=a.dtype)
    src_lo = np.maximum(lo, 0)
    src_hi = np.minimum(lo + size, a.shape)
    if np.any(src_hi <= src_lo):
        return out
    dst_lo = src_lo - lo
    dst_hi = dst_lo + (src_hi - src_lo)
    out[tuple(slice(x, y) for x, y in zip(dst_lo, dst_hi))] = a[tuple(slice(x, y) for x, y in zip(src_lo, src_hi))]
    return out


def _check_library(library) -> dict:
    if not isinstance(library, dict) or len(library) == 0:
        raise TypeError("library must be a non-empty dict {class label: [boolean template grids]}")
    lib = {}
    for c, ts in library.items():
        if isinstance(ts, np.ndarray):
            ts = [ts]
        ts = [np.asarray(t, dtype=bool) for t in ts]
        if len(ts) == 0:
            raise ValueError(f"library[{c!r}] holds no template")
        for j, t in enumerate(ts):
            if t.ndim != 3 or not t.any():
                raise ValueError(f"library[{c!r}][{j}] must be a non-empty 3-D boolean grid, got shape {t.shape}")
        lib[int(c)] = ts
    return lib


def fit_templates(occ, instances: Instances, library, rotations=ROTATIONS, search: int = 2,
                  background=None, ignore_index: int = IGNORE) -> TemplateFit:
    """Snap each instance to its best template and yaw: ``(j*, delta*, t*) = argmax IoU(O_k,
    Rot(T_j, delta) placed at centre + t)``.

    ``O_k`` is the class-``c`` occupancy of ``occ`` inside a fixed window around the instance
    centre (the same window for every candidate, so IoUs are comparable); a candidate is placed with
    its voxel centroid at the centre, shifted by every integer ``t`` in ``[-search, search]^3`` (the
    translation search is this library's: the paper aligns on the centroid). Intersections over all
    shifts come from one correlation per (template, yaw). The snapped instances are written into
    ``background`` (default: an empty grid), later instances over earlier ones.
    """
    from scipy.signal import correlate

    occ = _grid(occ)
    lib = _check_library(library)
    rotations = tuple(int(r) for r in rotations)
    if len(rotations) == 0:
        raise ValueError("rotations is empty")
    for r in rotations:
        if r % 90 != 0:
            raise ValueError(f"rotations must be multiples of 90 degrees, got {r}")
    if isinstance(search, bool) or not isinstance(search, (int, np.integer)) or search < 0:
        raise ValueError(f"search must be a non-negative integer, got {search!r}")
    if not isinstance(instances, Instances):
        raise TypeError("instances must be the Instances returned by extract_instance_centers")
    grid = np.zeros_like(occ) if background is None else _grid(background, "background").copy()
    if grid.shape != occ.shape:
        raise ValueError(f"background shape {grid.shape} differs from occ shape {occ.shape}")
    ext = max(max(t.shape) for ts in lib.values() for t in ts)
    R = ext + search + 1
    shape = np.array(occ.shape)
    n = len(instances)
    tpl, rot, org, best_iou = (np.full(n, -1), np.full(n, -1), np.zeros((n, 3), int), np.zeros(n))
    for i, (ctr, c) in enumerate(zip(instances.centers, instances.classes)):
        if int(c) not in lib:
            raise ValueError(f"instance class {int(c)} has no template in library (classes {sorted(lib)})")
        cr = np.rint(ctr).astype(int)
        wlo = cr - R
        win = _window(occ == int(c), wlo, np.full(3, 2 * R + 1)).astype(np.float64)
        n_obs = win.sum()
        best = (-1.0, None)
        for j, t0 in enumerate(lib[int(c)]):
            for r in rotations:
                t = rotate_yaw(t0, r)
                g = np.argwhere(t).mean(0)
                p0 = np.rint(ctr - g).astype(int)
                sub_lo = p0 - search - wlo
                sub = win[tuple(slice(a, a + 2 * search + s) for a, s in zip(sub_lo, t.shape))]
                inter = np.rint(correlate(sub, t.astype(np.float64), mode="valid", method="direct"))
                iou = inter / (t.sum() + n_obs - inter)
                k = np.unravel_index(int(np.argmax(iou)), iou.shape)
                if iou[k] > best[0]:
                    best = (float(iou[k]), (j, r, p0 + np.array(k) - search))
        j, r, p = best[1]
        tpl[i], rot[i], org[i], best_iou[i] = j, r, p, best[0]
        t = rotate_yaw(lib[int(c)][j], r)
        lo, hi = np.maximum(p, 0), np.minimum(p + np.array(t.shape), shape)
        if np.all(hi > lo):
            tt = t[tuple(slice(a - q, b - q) for a, b, q in zip(lo, hi, p))]
            view = grid[tuple(slice(a, b) for a, b in zip(lo, hi))]
            view[tt] = int(c)
    return TemplateFit(grid, tpl, rot, org, best_iou, np.asarray(instances.classes, int))


# ---------------------------------------------------------------- Minecraft export
def to_setblock_commands(grid, palette, origin=(0, 0, 0), ignore_index: int = IGNORE) -> list[str]:
    """One ``/setblock x y z <block>`` command per non-empty voxel (``palette``: label -> block id,
    e.g. ``{3: "minecraft:red_bed"}``); voxel ``[x, y, z]`` goes to world ``origin + (x, y, z)``.
    Empty (0) and unobserved voxels get no command."""
    g = _grid(grid, "grid")
    if not isinstance(palette, dict):
        raise TypeError(f"palette must be a dict {{label: block id}}, got {type(palette).__name__}")
    o = np.asarray(origin)
    if o.shape != (3,) or o.dtype.kind not in "iu":
        raise ValueError(f"origin must be three integers, got {origin!r}")
    idx = np.argwhere((g != EMPTY) & (g != ignore_index))
    labels = g[tuple(idx.T)]
    missing = sorted(set(int(v) for v in np.unique(labels)) - set(int(k) for k in palette))
    if missing:
        raise ValueError(f"palette has no block for label(s) {missing}")
    for k, v in palette.items():
        if not isinstance(v, str) or not v or any(ch.isspace() for ch in v):
            raise ValueError(f"palette[{k!r}] must be a block id without spaces, got {v!r}")
    w = idx + o
    pal = {int(k): v for k, v in palette.items()}
    return [f"/setblock {x} {y} {z} {pal[int(l)]}" for (x, y, z), l in zip(w.tolist(), labels.tolist())]


# ---------------------------------------------------------------- metrics
def occupancy_iou(pred, gt, classes=None, ignore_index: int = IGNORE) -> float:
    """Scene-completion IoU of the occupied voxels (occupied = a label in ``classes``, default any
    non-empty label), over the voxels whose ground truth is observed (``gt != ignore_index``), as
    the semantic scene completion benchmarks (MonoScene, ISO) score IoU. NaN when neither grid has
    an occupied voxel."""
    p, g = _grid(pred, "pred"), _grid(gt, "gt")
    if p.shape != g.shape:
        raise ValueError(f"pred shape {p.shape} differs from gt shape {g.shape}")
    valid = g != ignore_index
    if classes is None:
        po, go = (p != EMPTY) & (p != ignore_index), g != EMPTY
    else:
        cl = np.asarray(list(classes))
        po, go = np.isin(p, cl), np.isin(g, cl)
    po, go = po & valid, go & valid
    union = (po | go).sum()
    return float((po & go).sum() / union) if union else float("nan")


def semantic_miou(pred, gt, classes, ignore_index: int = IGNORE) -> tuple[float, dict]:
    """Mean over ``classes`` of the per-class IoU on observed voxels; classes present in neither
    grid are left out of the mean (returned per-class as NaN). Returns ``(miou, {class: iou})``."""
    p, g = _grid(pred, "pred"), _grid(gt, "gt")
    if p.shape != g.shape:
        raise ValueError(f"pred shape {p.shape} differs from gt shape {g.shape}")
    classes = list(classes)
    if len(classes) == 0:
        raise ValueError("classes is empty")
    valid = g != ignore_index
    per = {}
    for c in classes:
        pc, gc = (p == c) & valid, (g == c) & valid
        u = (pc | gc).sum()
        per[int(c)] = float((pc & gc).sum() / u) if u else float("nan")
    vals = [v for v in per.values() if not np.isnan(v)]
    return (float(np.mean(vals)) if vals else float("nan")), per


def load_occupancy_scene(path, key: str = "occupancy") -> np.ndarray:
    """Load one scene's semantic occupancy grid from a ``.npy`` file or a ``.npz`` archive holding
    ``key`` (``[x, y, z]`` integer labels, 0 empty, 255 unobserved). MinecraftOcc had not been
    released when this was written; its file layout is assumed, so the loader checks the schema
    and says what is missing."""
    from pathlib import Path

    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"no occupancy file at {p}: expected a .npy grid or a .npz with key {key!r} "
                                "(MinecraftOcc is not bundled; download it from the authors' release)")
    if p.suffix == ".npy":
        a = np.load(p, allow_pickle=False)
    elif p.suffix == ".npz":
        with np.load(p, allow_pickle=False) as z:
            if key not in z.files:
                raise KeyError(f"{p} holds no array {key!r}; it holds {sorted(z.files)}")
            a = z[key]
    else:
        raise ValueError(f"unsupported occupancy file type {p.suffix!r} (want .npy or .npz)")
    return _grid(a, str(p))
