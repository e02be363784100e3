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


def _degrees(d, name: str = "degrees") -> int:
    """A yaw in degrees that is an exact multiple of 90 (``90.5`` or ``nan`` are rejected, not rounded)."""
    if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number of degrees, got {type(d).__name__}")
    if not np.isfinite(d) or float(d) != int(d) or int(d) % 90 != 0:
        raise ValueError(f"{name} must be a multiple of 90 degrees, got {d!r}")
    return int(d)


def _up_axes(up_axis) -> tuple[int, int]:
    if isinstance(up_axis, bool) or up_axis not in (0, 1, 2):
        raise ValueError(f"up_axis must be 0, 1 or 2 (the vertical axis of the grid), got {up_axis!r}")
    return tuple(a for a in (0, 1, 2) if a != up_axis)


def rotate_yaw(t: np.ndarray, degrees: int, up_axis: int = 1) -> np.ndarray:
    """Rotate a 3-D grid by ``degrees`` (a multiple of 90) about its vertical axis ``up_axis``
    (1: ``[x, y, z]`` with ``y`` up, Minecraft's axes; 2 for z-up grids such as ScanNet's). The
    rotation is ``np.rot90`` on the two horizontal axes in increasing order."""
    k = (_degrees(degrees) // 90) % 4
    a = np.asarray(t)
    if a.ndim != 3:
        raise ValueError(f"t must be a 3-D grid, got shape {a.shape}")
    return np.rot90(a, k=k, axes=_up_axes(up_axis))


# ---------------------------------------------------------------- fusion
def fuse_occupancy(frames, transforms, shape, ignore_index: int = IGNORE, prefer_occupied: bool = True) -> np.ndarray:
    """Fuse per-frame semantic occupancy grids into one scene grid by voting.

    ``frames[i]`` is a local label grid (``ignore_index`` = not seen by that frame) and
    ``transforms[i]`` a rigid 4 x 4 matrix mapping a local voxel index ``(i, j, k, 1)`` to world voxel
    coordinates (the camera extrinsics expressed in voxels; each local voxel is sent to the nearest
    world voxel, so a rotation that is not a multiple of 90 degrees can leave holes). Each
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
    shp = np.asarray(shape)
    if shp.shape != (3,) or shp.dtype.kind not in "iu" or shp.min() <= 0:
        raise ValueError(f"shape must be three positive integers, got {shape!r}")
    shape = tuple(int(v) for v in shp)
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
        Rm = T[:3, :3]
        if not np.allclose(T[3], [0, 0, 0, 1]) or not np.allclose(Rm.T @ Rm, np.eye(3), atol=1e-6) \
                or np.linalg.det(Rm) <= 0:
            raise ValueError(f"transforms[{i}] must be a rigid voxel-to-world transform (a rotation and a "
                             "translation, last row 0 0 0 1); scale metric extrinsics to voxels first")
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

    def __post_init__(self):
        self.centers = np.asarray(self.centers, dtype=float).reshape(-1, 3) if np.size(self.centers) == 0 \
            else np.asarray(self.centers, dtype=float)
        self.classes = np.asarray(self.classes)
        if self.centers.ndim != 2 or self.centers.shape[1] != 3:
            raise ValueError(f"Instances.centers must be an (n, 3) array, got shape {self.centers.shape}")
        if self.classes.ndim != 1 or len(self.classes) != len(self.centers):
            raise ValueError(f"Instances.classes must hold one label per centre ({len(self.centers)}), "
                             f"got shape {self.classes.shape}")
        if len(self.classes) and self.classes.dtype.kind not in "iu":
            raise TypeError(f"Instances.classes must be integer labels, got dtype {self.classes.dtype}")
        if not np.isfinite(self.centers).all():
            raise ValueError("Instances.centers holds non-finite values")

    def __len__(self) -> int:
        return len(self.classes)


def extract_instance_centers(occ, classes=None, kernel: int = 3, tau: float = 9, eps: float = 1.5,
                             min_samples: int = 4, ignore_index: int = IGNORE, binarize: str = "any") -> Instances:
    """Binarise, box-filter (``density``), keep voxels with ``D >= tau``, cluster the candidates of
    each class by DBSCAN (L2, radius ``eps``, ``min_samples``) and return one centroid per cluster
    (noise points dropped).

    ``binarize="any"`` (the paper's order): ``O_bin`` is 1 on a voxel of any of ``classes``, one
    density ``D = box3D * O_bin`` for all of them, and the candidates of class ``c`` are the class-``c``
    voxels with ``D >= tau``. ``binarize="class"``: the density of each class's own voxels.

    Defaults are this library's (the paper's values were not readable here): a 3^3 box
    (``kernel = 3``), ``tau = 9`` (a third of the box), ``eps = 1.5`` voxels (face and edge
    neighbours, not corner ones), ``min_samples = 4``.
    """
    from sklearn.cluster import DBSCAN

    occ = _grid(occ)
    if isinstance(kernel, bool) or not isinstance(kernel, (int, np.integer)) or kernel < 1 or kernel % 2 == 0:
        raise ValueError(f"kernel must be a positive odd integer, got {kernel!r}")
    if isinstance(tau, (bool, np.bool_)) or not isinstance(tau, (int, float, np.integer, np.floating)):
        raise TypeError(f"tau must be a number, got {type(tau).__name__}")
    if not np.isfinite(tau) or tau < 0 or tau > kernel ** 3:
        raise ValueError(f"tau must lie in [0, kernel^3 = {kernel ** 3}], got {tau!r}")
    if isinstance(eps, (bool, np.bool_)) or not isinstance(eps, (int, float, np.integer, np.floating)) \
            or not np.isfinite(eps) or eps <= 0:
        raise ValueError(f"eps must be a finite positive number, got {eps!r}")
    if binarize not in ("any", "class"):
        raise ValueError(f"binarize must be 'any' (all classes together, the paper's) or 'class', got {binarize!r}")
    if isinstance(min_samples, bool) or not isinstance(min_samples, (int, np.integer)) or min_samples < 1:
        raise ValueError(f"min_samples must be a positive integer, got {min_samples!r}")
    if classes is None:
        classes = [int(c) for c in np.unique(occ) if c not in (EMPTY, ignore_index)]
    else:
        classes = list(classes)
        if len(classes) == 0:
            raise ValueError("classes is empty")
        for c in classes:
            if isinstance(c, (bool, np.bool_)) or not isinstance(c, (int, np.integer)) or c in (EMPTY, ignore_index):
                raise ValueError(f"classes must be object labels (integers other than {EMPTY} and "
                                 f"{ignore_index}), got {c!r}")
        classes = [int(c) for c in classes]
    centers, cls, sizes = [], [], []
    d_any = density(np.isin(occ, classes), kernel) if binarize == "any" else None
    for c in classes:
        if d_any is None:
            pts = np.argwhere(density(occ == c, kernel) >= max(tau, 1e-9))
        else:
            pts = np.argwhere((d_any >= max(tau, 1e-9)) & (occ == c))
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
                  background=None, ignore_index: int = IGNORE, up_axis: int = 1) -> TemplateFit:
    """Snap each instance to its best template and yaw: ``(j*, delta*, t*) = argmax IoU(O_k,
    Rot(T_j, delta) placed at centre + t)``.

    ``O_k`` is the class-``c`` occupancy of ``occ`` inside a fixed window around the instance
    centre (the same window for every candidate, so IoUs are comparable); a candidate is placed with
    its voxel centroid at the centre, shifted by every integer ``t`` in ``[-search, search]^3`` (the
    translation search is this library's: the paper aligns on the centroid). Intersections over all
    shifts come from one correlation per (template, yaw). The snapped instances are written into
    ``background`` (default: an empty grid), later instances over earlier ones. Yaw turns about
    ``up_axis`` (templates and grid share it). A centre must lie inside the grid.
    """
    from scipy.signal import correlate

    occ = _grid(occ)
    lib = _check_library(library)
    rotations = tuple(_degrees(r, "rotations") for r in rotations)
    if len(rotations) == 0:
        raise ValueError("rotations is empty")
    _up_axes(up_axis)
    if isinstance(search, bool) or not isinstance(search, (int, np.integer)) or search < 0:
        raise ValueError(f"search must be a non-negative integer, got {search!r}")
    if not isinstance(instances, Instances):
        raise TypeError("instances must be the Instances returned by extract_instance_centers")
    instances.__post_init__()
    if len(instances) and (np.any(instances.centers < -0.5) or np.any(instances.centers > np.array(occ.shape) - 0.5)):
        raise ValueError(f"instances.centers must lie inside the grid of shape {occ.shape}")
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
                t = rotate_yaw(t0, r, up_axis)
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
        t = rotate_yaw(lib[int(c)][j], r, up_axis)
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
def _pair(pred, gt):
    p, g = _grid(pred, "pred"), _grid(gt, "gt")
    if p.shape != g.shape:
        raise ValueError(f"pred shape {p.shape} differs from gt shape {g.shape}")
    return p, g


def _classes(classes) -> list[int]:
    classes = list(classes)
    if len(classes) == 0:
        raise ValueError("classes is empty")
    for c in classes:
        if isinstance(c, (bool, np.bool_)) or not isinstance(c, (int, np.integer)):
            raise ValueError(f"classes must be integer labels, got {c!r}")
    return [int(c) for c in classes]


def _occ_counts(p, g, classes, ignore_index):
    valid = g != ignore_index
    if classes is None:
        po, go = (p != EMPTY) & (p != ignore_index), g != EMPTY
    else:
        cl = np.asarray(_classes(classes))
        po, go = np.isin(p, cl), np.isin(g, cl)
    po, go = po & valid, go & valid
    return int((po & go).sum()), int((po | go).sum())


def _class_counts(p, g, classes, ignore_index):
    valid = g != ignore_index
    inter, union = [], []
    for c in classes:
        pc, gc = (p == c) & valid, (g == c) & valid
        inter.append(int((pc & gc).sum()))
        union.append(int((pc | gc).sum()))
    return np.array(inter), np.array(union)


def _miou(inter, union, classes):
    per = {c: (float(i / u) if u else float("nan")) for c, i, u in zip(classes, inter, union)}
    vals = [v for v in per.values() if not np.isnan(v)]
    return (float(np.mean(vals)) if vals else float("nan")), per


def occupancy_iou(pred, gt, classes=None, ignore_index: int = IGNORE) -> float:
    """Scene-completion IoU of the occupied voxels of one grid (occupied = a label in ``classes``,
    default any non-empty label), over the voxels whose ground truth is observed
    (``gt != ignore_index``). NaN when neither grid has an occupied voxel. For a test set use
    :func:`dataset_iou`, which accumulates over scenes as the benchmarks (MonoScene, ISO) do."""
    p, g = _pair(pred, gt)
    i, u = _occ_counts(p, g, classes, ignore_index)
    return float(i / u) if u else float("nan")


def semantic_miou(pred, gt, classes, ignore_index: int = IGNORE) -> tuple[float, dict]:
    """Mean over ``classes`` of the per-class IoU of one grid on observed voxels; classes present in
    neither grid are left out of the mean (returned per-class as NaN), a class present only in the
    prediction counts as 0. Returns ``(miou, {class: iou})``. Averaging this over scenes is not the
    benchmarks' mIoU (a class absent from a scene's ground truth then scores 0 for any stray voxel);
    use :func:`dataset_miou` for a test set."""
    p, g = _pair(pred, gt)
    classes = _classes(classes)
    return _miou(*_class_counts(p, g, classes, ignore_index), classes)


def _pairs(preds, gts):
    preds, gts = list(preds), list(gts)
    if len(preds) == 0:
        raise ValueError("preds is empty")
    if len(preds) != len(gts):
        raise ValueError(f"preds and gts differ in length ({len(preds)} vs {len(gts)})")
    return [_pair(p, g) for p, g in zip(preds, gts)]


def dataset_iou(preds, gts, classes=None, ignore_index: int = IGNORE) -> float:
    """Scene-completion IoU over a set of scenes: intersections and unions of the occupied voxels
    summed over all scenes, then divided (the semantic scene completion convention, MonoScene /
    ISO). NaN when no scene has an occupied voxel."""
    i = u = 0
    for p, g in _pairs(preds, gts):
        a, b = _occ_counts(p, g, classes, ignore_index)
        i, u = i + a, u + b
    return float(i / u) if u else float("nan")


def dataset_miou(preds, gts, classes, ignore_index: int = IGNORE) -> tuple[float, dict]:
    """mIoU over a set of scenes as the semantic scene completion benchmarks compute it: per class,
    intersections and unions accumulated over all scenes, then the class IoUs averaged (classes
    absent from every scene and every prediction left out). Returns ``(miou, {class: iou})``."""
    classes = _classes(classes)
    inter, union = np.zeros(len(classes), np.int64), np.zeros(len(classes), np.int64)
    for p, g in _pairs(preds, gts):
        a, b = _class_counts(p, g, classes, ignore_index)
        inter, union = inter + a, union + b
    return _miou(inter, union, classes)


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
