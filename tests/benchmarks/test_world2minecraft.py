"""World2Minecraft: density against a loop, instance centres, the template fit against a
brute-force IoU search, fusion with a rotated frame, /setblock export, IoU / mIoU (per scene and
accumulated over scenes) against scikit-learn, the comparators, the experiment's wiring against a
reference of the protocol, rejections, and the smoke experiment."""
import itertools

import numpy as np
import pytest

from iclr26.benchmarks.world2minecraft import (IGNORE, Instances, corrupt, dataset_iou, dataset_miou, deform, density,
                                               extract_instance_centers, fit_templates, fuse_occupancy,
                                               load_occupancy_scene, majority_filter, make_room, morphological,
                                               observe, occupancy_iou, rotate_yaw, semantic_miou, template_library,
                                               to_setblock_commands)
from iclr26.benchmarks.world2minecraft import experiment as E
from iclr26.benchmarks.world2minecraft import minibench as MB
from iclr26.benchmarks.world2minecraft.minibench import FLOOR, WALL


# ---------------------------------------------------------------- references
def _ref_density(b, k):
    r = k // 2
    out = np.zeros(b.shape)
    X, Y, Z = b.shape
    for x, y, z in itertools.product(range(X), range(Y), range(Z)):
        out[x, y, z] = b[max(x - r, 0): x + r + 1, max(y - r, 0): y + r + 1, max(z - r, 0): z + r + 1].sum()
    return out


def _ref_best_iou(occ, c, center, lib, search, R):
    """Place every template / yaw / shift in a full-size grid and score IoU against the class-c
    voxels inside the fixed window, by plain set counting."""
    cr = np.rint(center).astype(int)
    win = np.zeros(occ.shape, bool)
    lo, hi = np.maximum(cr - R, 0), np.minimum(cr + R + 1, occ.shape)
    win[lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]] = True
    obs = (occ == c) & win
    best = -1.0
    for t0 in lib[c]:
        for r in (0, 90, 180, 270):
            t = rotate_yaw(t0, r)
            p0 = np.rint(center - np.argwhere(t).mean(0)).astype(int)
            for d in itertools.product(range(-search, search + 1), repeat=3):
                p = p0 + np.array(d)
                pts = np.argwhere(t) + p
                inside = np.all((pts >= 0) & (pts < occ.shape), axis=1)
                placed = np.zeros(occ.shape, bool)
                placed[tuple(pts[inside].T)] = True
                n_out = (~inside).sum()
                inter = (placed & obs).sum()
                union = (placed | obs).sum() + n_out
                best = max(best, inter / union)
    return best


# ---------------------------------------------------------------- equations
def test_density_matches_loop():
    rng = np.random.default_rng(0)
    b = rng.random((7, 6, 5)) < 0.4
    for k in (1, 3, 5):
        np.testing.assert_array_equal(density(b, k), _ref_density(b, k))


def test_rotate_yaw_is_a_quarter_turn_about_y():
    t = np.zeros((3, 2, 4), bool)
    t[2, 1, 0] = True
    r = rotate_yaw(t, 90)
    assert r.shape == (4, 2, 3)
    # world (x, z) -> (Z - 1 - z, x)
    assert r[4 - 1 - 0, 1, 2]
    np.testing.assert_array_equal(rotate_yaw(t, 360), t)
    np.testing.assert_array_equal(rotate_yaw(rotate_yaw(t, 90), 270), t)


def test_instance_centres_of_separated_blocks():
    from scipy.ndimage import center_of_mass, generate_binary_structure, label

    g = np.zeros((20, 10, 20), int)
    g[2:5, 1:4, 2:5] = 3            # centre (3, 2, 3)
    g[12:16, 2:4, 10:13] = 3        # centre (13.5, 2.5, 11)
    g[8:11, 4:7, 15:18] = 4         # centre (9, 5, 16)
    g[18, 8, 1] = 4                 # an isolated voxel: density 1 < tau
    inst = extract_instance_centers(g, tau=9, eps=1.5, min_samples=4, binarize="class")
    got = sorted((int(c), tuple(np.round(x, 9))) for c, x in zip(inst.classes, inst.centers))
    # reference: threshold the loop density, 18-connected components (eps 1.5), their centroids
    ref = []
    for c in (3, 4):
        cand = _ref_density(g == c, 3) >= 9
        lab, n = label(cand, generate_binary_structure(3, 2))
        ref += [(c, tuple(np.round(x, 9))) for x in center_of_mass(cand, lab, range(1, n + 1))]
    assert got == sorted(ref)
    # symmetric blocks away from the border: the centroid is the block centre
    assert got == [(3, (3.0, 2.0, 3.0)), (3, (13.5, 2.5, 11.0)), (4, (9.0, 5.0, 16.0))]
    # blocks of different classes far apart: both binarisations agree
    any_ = extract_instance_centers(g, tau=9, eps=1.5, min_samples=4)
    assert sorted((int(c), tuple(np.round(x, 9))) for c, x in zip(any_.classes, any_.centers)) == got


def test_density_binarised_over_all_classes():
    """The paper's order: O_bin = any object class, one density, candidates split by label."""
    from scipy.ndimage import center_of_mass, generate_binary_structure, label

    g = np.zeros((12, 8, 12), int)
    g[2:6, 1:4, 2:6] = 3
    g[6:7, 1:4, 2:6] = 4            # a thin class-4 slab glued to the class-3 block: density 9 only with its neighbours
    g[9:10, 1:4, 9:10] = 4          # an isolated class-4 column
    tau = 10
    d_any = _ref_density(np.isin(g, [3, 4]), 3)
    ref = []
    for c in (3, 4):
        cand = (d_any >= tau) & (g == c)
        lab, n = label(cand, generate_binary_structure(3, 2))
        ref += [(c, tuple(np.round(x, 9))) for x in center_of_mass(cand, lab, range(1, n + 1))]
    inst = extract_instance_centers(g, classes=[3, 4], tau=tau, eps=1.5, min_samples=1)
    got = sorted((int(c), tuple(np.round(x, 9))) for c, x in zip(inst.classes, inst.centers))
    assert got == sorted(ref)
    assert 4 in [c for c, _ in got]
    per_class = extract_instance_centers(g, classes=[3, 4], tau=tau, eps=1.5, min_samples=1, binarize="class")
    assert 4 not in per_class.classes.tolist()          # alone, the slab never reaches density 10


def test_tau_above_every_density_finds_nothing():
    g = np.zeros((6, 6, 6), int)
    g[1:3, 1:3, 1:3] = 5
    assert len(extract_instance_centers(g, tau=27)) == 0
    assert len(extract_instance_centers(g, tau=8, min_samples=1)) == 1


@pytest.mark.parametrize("rot", [0, 90, 180, 270])
@pytest.mark.parametrize("j", [0, 1])
def test_fit_recovers_a_clean_template(rot, j):
    lib = template_library()
    c = 6
    t = rotate_yaw(lib[c][j], rot)
    g = np.zeros((24, 10, 24), int)
    o = np.array([7, 1, 9])
    g[o[0]:o[0] + t.shape[0], o[1]:o[1] + t.shape[1], o[2]:o[2] + t.shape[2]][t] = c
    inst = Instances(np.argwhere(g == c).mean(0)[None] + 0.7, np.array([c]))   # an off-centre estimate
    fit = fit_templates(g, inst, lib, search=2)
    assert fit.iou[0] == pytest.approx(1.0)
    assert fit.template[0] == j and fit.rotation[0] == rot
    np.testing.assert_array_equal(fit.origin[0], o)
    np.testing.assert_array_equal(fit.grid, g)


def test_fit_iou_matches_brute_force_on_noisy_rooms():
    lib = template_library()
    rng = np.random.default_rng(3)
    g, _ = make_room(rng, size=24, variant=True)
    obs = corrupt(g, rng)
    inst = extract_instance_centers(obs, classes=[3, 4, 5, 6, 7], tau=6)
    assert len(inst) > 0
    fit = fit_templates(obs, inst, lib, search=1)
    R = max(max(t.shape) for ts in lib.values() for t in ts) + 1 + 1
    for i in range(min(len(inst), 3)):
        ref = _ref_best_iou(obs, int(inst.classes[i]), inst.centers[i], lib, 1, R)
        assert fit.iou[i] == pytest.approx(ref, abs=1e-12)


def test_fit_keeps_background_and_writes_into_a_copy():
    lib = template_library()
    g = np.zeros((16, 8, 16), int)
    g[:, 0, :] = 1
    bg = g.copy()
    t = lib[5][0]
    g[5:5 + t.shape[0], 1:1 + t.shape[1], 5:5 + t.shape[2]][t] = 5
    inst = extract_instance_centers(g, classes=[5], tau=3)
    fit = fit_templates(g, inst, lib, background=bg)
    np.testing.assert_array_equal(fit.grid, g)
    assert (bg == 5).sum() == 0


# ---------------------------------------------------------------- fusion
def test_fusion_identity_and_rotated_frame():
    rng = np.random.default_rng(1)
    g = rng.integers(0, 4, (6, 3, 5))
    np.testing.assert_array_equal(fuse_occupancy([g], [np.eye(4)], g.shape), g)
    Z = g.shape[2]
    T = np.array([[0, 0, 1, 0], [0, 1, 0, 0], [-1, 0, 0, Z - 1], [0, 0, 0, 1]], float)
    np.testing.assert_array_equal(fuse_occupancy([rotate_yaw(g, 90)], [T], g.shape), g)


def test_fusion_votes_ties_and_unseen():
    a = np.array([3, 3, 0, 4]).reshape(4, 1, 1)
    b = np.array([3, 0, 0, 5]).reshape(4, 1, 1)
    c = np.array([0, 0, 0, IGNORE]).reshape(4, 1, 1)
    out = fuse_occupancy([a, b, c], [np.eye(4)] * 3, (5, 1, 1))
    # voxel 0: 3,3,0 -> 3; voxel 1: 3,0,0 -> 0; voxel 2: empty; voxel 3: 4 vs 5 tie -> 4; voxel 4 unseen
    np.testing.assert_array_equal(out.ravel(), [3, 0, 0, 4, IGNORE])
    tie = fuse_occupancy([a[:2], c[:2]], [np.eye(4)] * 2, (2, 1, 1))
    np.testing.assert_array_equal(tie.ravel(), [3, 3])
    tie_empty = fuse_occupancy([a[:2], c[:2]], [np.eye(4)] * 2, (2, 1, 1), prefer_occupied=False)
    np.testing.assert_array_equal(tie_empty.ravel(), [0, 0])


def test_noiseless_observation_is_the_room():
    rng = np.random.default_rng(2)
    g, _ = make_room(rng, size=24)
    np.testing.assert_array_equal(observe(g, rng, dropout=0.0, spurious=0.0, jitter=0.0), g)


# ---------------------------------------------------------------- export and metrics
def test_setblock_commands():
    g = np.zeros((3, 2, 2), int)
    g[1, 0, 1] = 3
    g[2, 1, 0] = 1
    g[0, 0, 0] = IGNORE
    cmds = to_setblock_commands(g, {1: "minecraft:stone", 3: "minecraft:red_wool"}, origin=(10, 64, -5))
    assert cmds == ["/setblock 11 64 -4 minecraft:red_wool", "/setblock 12 65 -5 minecraft:stone"]


def test_iou_and_miou_match_sklearn():
    from sklearn.metrics import jaccard_score

    rng = np.random.default_rng(4)
    gt = rng.integers(0, 4, (8, 5, 6))
    pred = rng.integers(0, 4, (8, 5, 6))
    gt[0] = IGNORE
    valid = gt != IGNORE
    ref_occ = jaccard_score((gt[valid] != 0), (pred[valid] != 0))
    assert occupancy_iou(pred, gt) == pytest.approx(ref_occ)
    ref = jaccard_score(gt[valid], pred[valid], labels=[1, 2, 3], average=None)
    m, per = semantic_miou(pred, gt, [1, 2, 3])
    np.testing.assert_allclose([per[1], per[2], per[3]], ref)
    assert m == pytest.approx(ref.mean())
    assert occupancy_iou(pred, gt, classes=[2]) == pytest.approx(per[2])
    assert np.isnan(occupancy_iou(np.zeros((2, 2, 2), int), np.zeros((2, 2, 2), int)))
    m2, per2 = semantic_miou(gt, gt, [1, 2, 3, 9])
    assert m2 == 1.0 and np.isnan(per2[9])


# ---------------------------------------------------------------- reductions of the comparators
def test_comparators_reduce_to_raw():
    rng = np.random.default_rng(5)
    g, _ = make_room(rng, size=24)
    obs = corrupt(g, rng)
    np.testing.assert_array_equal(morphological(obs, 0, 0), obs)
    # majority filter on a clean room changes nothing but the labels of no voxel
    np.testing.assert_array_equal(majority_filter(g, 0), g)
    np.testing.assert_array_equal(corrupt(g, rng, dropout=0, spurious=0, jitter=0), g)


def test_library_shapes_are_not_yaw_symmetric():
    for c, ts in template_library().items():
        for t in ts:
            for r in (90, 180, 270):
                rt = rotate_yaw(t, r)
                assert rt.shape != t.shape or not np.array_equal(rt, t), (c, r)


# ---------------------------------------------------------------- loader
def test_loader_round_trip_and_errors(tmp_path):
    g = np.arange(24).reshape(2, 3, 4) % 5
    np.savez(tmp_path / "scene.npz", occupancy=g)
    np.testing.assert_array_equal(load_occupancy_scene(tmp_path / "scene.npz"), g)
    np.save(tmp_path / "scene.npy", g)
    np.testing.assert_array_equal(load_occupancy_scene(tmp_path / "scene.npy"), g)
    with pytest.raises(FileNotFoundError, match="MinecraftOcc"):
        load_occupancy_scene(tmp_path / "none.npz")
    np.savez(tmp_path / "other.npz", labels=g)
    with pytest.raises(KeyError, match="occupancy"):
        load_occupancy_scene(tmp_path / "other.npz")
    (tmp_path / "x.txt").write_text("1")
    with pytest.raises(ValueError, match="file type"):
        load_occupancy_scene(tmp_path / "x.txt")


# ---------------------------------------------------------------- rejections
def test_rejections():
    g = np.zeros((4, 4, 4), int)
    g[1:3, 1:3, 1:3] = 3
    lib = template_library()
    with pytest.raises(ValueError, match="3-D"):
        extract_instance_centers(np.zeros((4, 4)))
    with pytest.raises(ValueError, match="non-finite"):
        extract_instance_centers(np.full((2, 2, 2), np.nan))
    with pytest.raises(TypeError, match="occ"):
        extract_instance_centers("grid")
    with pytest.raises(ValueError, match="negative"):
        extract_instance_centers(-np.ones((2, 2, 2), int))
    with pytest.raises(ValueError, match="kernel"):
        extract_instance_centers(g, kernel=2)
    with pytest.raises(ValueError, match="tau"):
        extract_instance_centers(g, tau=-1)
    with pytest.raises(ValueError, match="tau"):
        extract_instance_centers(g, tau=float("nan"))
    with pytest.raises(ValueError, match="eps"):
        extract_instance_centers(g, eps=0)
    with pytest.raises(ValueError, match="min_samples"):
        extract_instance_centers(g, min_samples=0)
    inst = extract_instance_centers(g, tau=1, min_samples=1)
    with pytest.raises(ValueError, match="rotations"):
        fit_templates(g, inst, lib, rotations=(45,))
    with pytest.raises(ValueError, match="search"):
        fit_templates(g, inst, lib, search=-1)
    with pytest.raises(TypeError, match="library"):
        fit_templates(g, inst, {})
    with pytest.raises(ValueError, match="library"):
        fit_templates(g, inst, {3: []})
    with pytest.raises(ValueError, match="no template"):
        fit_templates(g, inst, {4: lib[4]})
    with pytest.raises(TypeError, match="instances"):
        fit_templates(g, [(1, 1, 1)], lib)
    with pytest.raises(ValueError, match="palette has no block"):
        to_setblock_commands(g, {1: "minecraft:stone"})
    with pytest.raises(ValueError, match="palette"):
        to_setblock_commands(g, {3: "minecraft:red wool"})
    with pytest.raises(ValueError, match="origin"):
        to_setblock_commands(g, {3: "minecraft:stone"}, origin=(0.5, 0, 0))
    with pytest.raises(ValueError, match="shape"):
        occupancy_iou(g, g[:2])
    with pytest.raises(ValueError, match="classes"):
        semantic_miou(g, g, [])
    with pytest.raises(ValueError, match="length"):
        fuse_occupancy([g, g], [np.eye(4)], g.shape)
    with pytest.raises(ValueError, match="transforms"):
        fuse_occupancy([g], [np.eye(3)], g.shape)
    with pytest.raises(ValueError, match="frames"):
        fuse_occupancy([], [], g.shape)
    with pytest.raises(ValueError, match="shape"):
        fuse_occupancy([g], [np.eye(4)], (4, 4))
    with pytest.raises(ValueError, match="degrees"):
        rotate_yaw(g, 30)


# ---------------------------------------------------------------- experiment
def test_smoke_experiment_is_deterministic_and_finite():
    a, b = E.run("smoke", 0), E.run("smoke", 0)
    assert a["metrics"] == b["metrics"]
    for metric, arms in a["metrics"].items():
        for arm, v in arms.items():
            assert np.isfinite(v), (metric, arm)
    assert set(a["metrics"]["iou_d30"]) == {"template", "closing", "majority", "raw"}


# ---------------------------------------------------------------- metrics over a test set
def test_dataset_metrics_accumulate_over_scenes():
    """IoU / mIoU over scenes = the per-scene voxels concatenated (SSC convention), not the mean
    of per-scene scores."""
    from sklearn.metrics import jaccard_score

    rng = np.random.default_rng(8)
    gts = [rng.integers(0, 4, (5, 4, 3)) for _ in range(3)]
    preds = [rng.integers(0, 4, (5, 4, 3)) for _ in range(3)]
    gts[1][0] = IGNORE
    gts[2][gts[2] == 3] = 0           # class 3 absent from one scene's ground truth
    gv = np.concatenate([g[g != IGNORE] for g in gts])
    pv = np.concatenate([p[g != IGNORE] for p, g in zip(preds, gts)])
    assert dataset_iou(preds, gts) == pytest.approx(jaccard_score(gv != 0, pv != 0))
    assert dataset_iou(preds, gts, [2, 3]) == pytest.approx(jaccard_score(np.isin(gv, [2, 3]), np.isin(pv, [2, 3])))
    ref = jaccard_score(gv, pv, labels=[1, 2, 3], average=None)
    m, per = dataset_miou(preds, gts, [1, 2, 3])
    np.testing.assert_allclose([per[1], per[2], per[3]], ref)
    assert m == pytest.approx(ref.mean())
    mean_of_scenes = np.mean([semantic_miou(p, g, [1, 2, 3])[0] for p, g in zip(preds, gts)])
    assert abs(m - mean_of_scenes) > 1e-3
    # one scene: the same as the per-scene metric
    assert dataset_miou(preds[:1], gts[:1], [1, 2, 3])[0] == pytest.approx(semantic_miou(preds[0], gts[0], [1, 2, 3])[0])
    # a stray voxel of a class absent from the ground truth costs a whole class per scene, not pooled
    g = np.zeros((4, 4, 4), int)
    g[:2] = 3
    p = g.copy()
    p[3, 3, 3] = 4
    assert semantic_miou(p, g, [3, 4])[0] == pytest.approx(0.5)
    big = np.zeros((4, 4, 4), int)
    big[2:] = 4
    assert dataset_miou([p, big], [g, big], [3, 4])[0] == pytest.approx((1 + 32 / 33) / 2)
    with pytest.raises(ValueError, match="length"):
        dataset_iou(preds, gts[:2])
    with pytest.raises(ValueError, match="empty"):
        dataset_miou([], [], [1])


# ---------------------------------------------------------------- comparators
def test_majority_filter_threshold_boundary():
    g = np.zeros((7, 7, 7), int)
    g[3, 3, 3] = 5
    g[2, 3, 3] = g[4, 3, 3] = 5                       # the centre has exactly 2 furniture neighbours
    assert majority_filter(g, 2)[3, 3, 3] == 5
    assert majority_filter(g, 3)[3, 3, 3] == 0
    # relabelling: an odd voxel inside a block takes the block's class
    b = np.zeros((5, 5, 5), int)
    b[1:4, 1:4, 1:4] = 4
    b[2, 2, 2] = 6
    out = majority_filter(b, 0)
    assert out[2, 2, 2] == 4 and (out[1:4, 1:4, 1:4] == 4).all()


def test_morphological_never_touches_floor_and_walls():
    rng = np.random.default_rng(9)
    g, _ = make_room(rng, size=20, variant=True)
    obs = corrupt(g, rng)
    struct = np.isin(obs, (FLOOR, WALL))
    for setting in E.MORPH_GRID:
        out = morphological(obs, *setting)
        np.testing.assert_array_equal(out[struct], obs[struct])
    # a one-voxel hole inside a block: closed by the cross and by the cube
    h = np.zeros((7, 7, 7), int)
    h[1:6, 1:6, 1:6] = 3
    h[3, 3, 3] = 0
    assert morphological(h, 1, 0, 1)[3, 3, 3] == 3 and morphological(h, 1, 0, 3)[3, 3, 3] == 3
    # the gap between two lone voxels: only the cube bridges it
    d = np.zeros((9, 9, 9), int)
    d[2, 3, 3] = d[4, 3, 3] = 3
    assert morphological(d, 1, 0, 3)[3, 3, 3] == 3
    assert morphological(d, 1, 0, 1)[3, 3, 3] == 0
    d[3, 3, 3] = WALL                                 # ... but never over a wall voxel
    assert morphological(d, 1, 0, 3)[3, 3, 3] == WALL


def test_deform_stretches_one_horizontal_axis_per_step():
    t = template_library()[3][0]
    for seed in range(20):
        for k in (0, 1, 2):
            d = deform(t, np.random.default_rng(seed), stretches=k)
            assert d.shape[1] == t.shape[1]
            assert d.shape[0] + d.shape[2] == t.shape[0] + t.shape[2] + k
            assert d.shape[0] >= t.shape[0] and d.shape[2] >= t.shape[2]


def test_observe_splits_the_room_between_two_overlapping_frames(monkeypatch):
    seen = {}

    def spy(frames, transforms, shape, **kw):
        seen["frames"], seen["transforms"] = frames, transforms
        return fuse_occupancy(frames, transforms, shape, **kw)

    monkeypatch.setattr(MB, "fuse_occupancy", spy)
    rng = np.random.default_rng(2)
    g, _ = make_room(rng, size=24)
    out = observe(g, rng, overlap=8, dropout=0.0, spurious=0.0, jitter=0.0)
    np.testing.assert_array_equal(out, g)
    a, b_local = seen["frames"]
    seen_a = (a != IGNORE).any(axis=(1, 2))
    np.testing.assert_array_equal(np.flatnonzero(seen_a), np.arange(16))          # x < (24 + 8) / 2
    b_world = fuse_occupancy([b_local], [seen["transforms"][1]], g.shape)
    np.testing.assert_array_equal(np.flatnonzero((b_world != IGNORE).any(axis=(1, 2))), np.arange(8, 24))


# ---------------------------------------------------------------- experiment wiring
def test_instance_scores_hand_case():
    from types import SimpleNamespace

    lib = template_library()
    shape = (20, 8, 20)

    def obj(cls, j, rot, lo):
        t = rotate_yaw(lib[cls][j], rot)
        m = np.zeros(shape, bool)
        m[lo[0]:lo[0] + t.shape[0], lo[1]:lo[1] + t.shape[1], lo[2]:lo[2] + t.shape[2]] = t
        return dict(cls=cls, template=j, rotation=rot, mask=m)

    objects = [obj(3, 0, 0, (2, 1, 2)), obj(5, 1, 90, (12, 1, 12)), obj(4, 0, 0, (12, 1, 2))]
    ctr = [np.argwhere(o["mask"]).mean(0) for o in objects]
    inst = Instances(np.array([ctr[0] + 0.5, ctr[1], ctr[2] + [0, 0, 4.0], [18.0, 3, 18]]), np.array([3, 6, 4, 5]))
    fit = SimpleNamespace(template=np.array([0, 0, 0, 0]), rotation=np.array([0, 90, 0, 0]))
    # matched: #0 (right class, near, right template and yaw); #1 wrong class; #2 too far (4 > 3); #3 nowhere
    assert E.instance_scores(inst, fit, objects, lib) == (1, 4, 3, 1)
    fit_wrong_yaw = SimpleNamespace(template=np.array([0, 0, 0, 0]), rotation=np.array([90, 90, 0, 0]))
    assert E.instance_scores(inst, fit_wrong_yaw, objects, lib) == (1, 4, 3, 0)
    fit_wrong_tpl = SimpleNamespace(template=np.array([1, 0, 0, 0]), rotation=np.array([0, 90, 0, 0]))
    assert E.instance_scores(inst, fit_wrong_tpl, objects, lib)[3] == 0
    near = Instances(np.array([ctr[1], ctr[2] + [0, 0, 2.0]]), np.array([5, 4]))
    fit2 = SimpleNamespace(template=np.array([1, 0]), rotation=np.array([90, 0]))
    assert E.instance_scores(near, fit2, objects, lib) == (2, 2, 3, 2)


def test_predict_runs_each_arms_component():
    lib = template_library()
    rng = np.random.default_rng(12)
    g, _ = make_room(rng, size=20, variant=True)
    o = observe(g, rng, dropout=0.3)
    bg = o.copy()
    bg[np.isin(bg, E.CLASSES)] = 0
    inst = extract_instance_centers(o, classes=E.CLASSES, tau=2)
    np.testing.assert_array_equal(E.predict("template", o, lib, 2), fit_templates(o, inst, lib, background=bg).grid)
    np.testing.assert_array_equal(E.predict("closing", o, lib, (1, 0, 3)), morphological(o, 1, 0, 3))
    np.testing.assert_array_equal(E.predict("majority", o, lib, 3), majority_filter(o, 3))
    assert E.predict("raw", o, lib, None) is o
    with pytest.raises(ValueError, match="arm"):
        E.predict("oracle", o, lib, None)
    assert E.tune([0.1, 0.5, 0.3, 0.5], "abcd") == "b"


def test_exact_zero_noise_condition_snaps_perfectly():
    lib = template_library()
    cond = dict(variant=False, stretches=0, noise=dict(dropout=0.0, spurious=0.0, jitter=0.0))
    r = E._condition(np.random.default_rng(5), dict(n_val=1, n_test=2, size=24), cond, lib)
    assert r["iou"]["template"] == 1.0 and r["iou"]["raw"] == 1.0 and r["miou"]["template"] == 1.0
    assert r["f1"] == 1.0 and r["rot"] == 1.0
    var = dict(cond, variant=True, stretches=1)
    rv = E._condition(np.random.default_rng(5), dict(n_val=1, n_test=2, size=24), var, lib)
    assert rv["iou"]["raw"] == 1.0 and rv["iou"]["template"] < 1.0


def test_conditions_are_the_declared_sweep():
    C = E.CONDITIONS
    assert [c["noise"]["dropout"] for c in C.values()] == [0.30, 0.20, 0.10, 0.20, 0.20]
    assert [c["variant"] for c in C.values()] == [True, True, True, True, False]
    assert [c["stretches"] for c in C.values()] == [1, 1, 1, 2, 0]
    assert all(c["noise"]["spurious"] == 0.05 and c["noise"]["jitter"] == 0.1 for c in C.values())
    assert all(len(E.GRIDS[a]) == 6 for a in ("template", "closing", "majority"))


def test_condition_matches_a_reference_of_the_protocol(monkeypatch):
    """Rebuild one condition from the components: the same rooms, every arm tuned on the
    validation rooms for each criterion, scored on the test rooms, the premises' counts."""
    lib = template_library()
    cfg = dict(n_val=2, n_test=2, size=20)
    cond = E.CONDITIONS["d30"]
    calls = []
    real_snap = E.snap
    monkeypatch.setattr(E, "snap", lambda o, lb, tau: (calls.append((o, tau)), real_snap(o, lb, tau))[1])
    res = E._condition(np.random.default_rng(21), cfg, cond, lib)
    monkeypatch.setattr(E, "snap", real_snap)

    rng = np.random.default_rng(21)
    rooms = []
    for _ in range(cfg["n_val"] + cfg["n_test"]):
        g, objs = make_room(rng, size=20, variant=True, library=lib, stretches=1)
        rooms.append((g, objs, observe(g, rng, dropout=0.30, spurious=0.05, jitter=0.1)))
    val, test = rooms[:2], rooms[2:]
    cl = [3, 4, 5, 6, 7]

    def grid(arm, o, s):
        if arm == "template":
            bg = np.where(np.isin(o, cl), 0, o)
            return fit_templates(o, extract_instance_centers(o, classes=cl, tau=s), lib, background=bg).grid
        if arm == "closing":
            return morphological(o, *s)
        if arm == "majority":
            return majority_filter(o, s)
        return o

    grids = {"template": (1, 2, 3, 4, 6, 9), "closing": E.MORPH_GRID, "majority": (0, 1, 2, 3, 4, 6), "raw": (None,)}
    for arm, settings in grids.items():
        vi = [dataset_iou([grid(arm, o, s) for _, _, o in val], [g for g, _, _ in val], cl) for s in settings]
        vm = [dataset_miou([grid(arm, o, s) for _, _, o in val], [g for g, _, _ in val], cl)[0] for s in settings]
        si, sm = settings[int(np.argmax(vi))], settings[int(np.argmax(vm))]
        assert res["iou"][arm] == pytest.approx(dataset_iou([grid(arm, o, si) for _, _, o in test],
                                                            [g for g, _, _ in test], cl)), arm
        assert res["miou"][arm] == pytest.approx(dataset_miou([grid(arm, o, sm) for _, _, o in test],
                                                              [g for g, _, _ in test], cl)[0]), arm
        if arm == "template":
            tau = si
    tp = npred = ngt = nrot = 0
    for g, objs, o in test:
        inst = extract_instance_centers(o, classes=cl, tau=tau)
        fit = fit_templates(o, inst, lib, background=np.where(np.isin(o, cl), 0, o))
        a, b, c, d = E.instance_scores(inst, fit, objs, lib)
        tp, npred, ngt, nrot = tp + a, npred + b, ngt + c, nrot + d
    f1 = 2 * tp / (npred + ngt)
    assert res["f1"] == pytest.approx(f1) and res["rot"] == pytest.approx(nrot / tp)
    assert res["settings"]["template"]["iou"] == tau
    # the premises are scored at the IoU-tuned tau: the last snap of each test room
    for _, _, o in test:
        assert [t for ob, t in calls if np.array_equal(ob, o)][-1] == tau


def test_run_reports_every_condition_per_arm():
    r = E.run("smoke", 0)
    for c in E.CONDITIONS:
        assert set(r["metrics"][f"iou_{c}"]) == set(E.ARMS)
        assert set(r["metrics"][f"miou_{c}"]) == set(E.ARMS)
        assert set(r["metrics"][f"instance_f1_{c}"]) == {"template"}
    # the arms differ: the metric of each arm is its own prediction's
    assert len({round(v, 9) for v in r["metrics"]["iou_d30"].values()}) == 4


# ---------------------------------------------------------------- bad input on the public API
def test_rejections_of_silent_wrong_answers():
    lib = template_library()
    g = np.zeros((16, 8, 16), int)
    t = lib[5][0]
    g[5:8, 1:5, 5:8][t] = 5
    with pytest.raises(ValueError, match="non-finite"):
        fit_templates(g, Instances(np.array([[np.nan] * 3]), np.array([5])), lib)
    with pytest.raises(ValueError, match="inside the grid"):
        fit_templates(g, Instances(np.array([[500.0, 3, 500]]), np.array([5])), lib)
    with pytest.raises(ValueError, match="one label per centre"):
        Instances(np.array([[6.0, 2, 6], [1.0, 1, 1]]), np.array([5]))
    with pytest.raises(ValueError, match=r"\(n, 3\)"):
        Instances(np.array([[6.0, 2]]), np.array([5]))
    with pytest.raises(ValueError, match="rotations"):
        fit_templates(g, extract_instance_centers(g, tau=3), lib, rotations=(90.5,))
    with pytest.raises(ValueError, match="up_axis"):
        fit_templates(g, extract_instance_centers(g, tau=3), lib, up_axis=3)
    with pytest.raises(ValueError, match="degrees"):
        rotate_yaw(t, 90.5)
    with pytest.raises(ValueError, match="degrees"):
        rotate_yaw(t, float("nan"))
    with pytest.raises(TypeError, match="tau"):
        extract_instance_centers(g, tau=True)
    with pytest.raises(ValueError, match="eps"):
        extract_instance_centers(g, eps=float("inf"))
    with pytest.raises(ValueError, match="classes"):
        extract_instance_centers(g, classes=[])
    with pytest.raises(ValueError, match="classes"):
        extract_instance_centers(g, classes=["bed"])
    with pytest.raises(ValueError, match="binarize"):
        extract_instance_centers(g, binarize="all")
    th = np.pi / 4
    rot45 = np.array([[np.cos(th), 0, np.sin(th), 0], [0, 1, 0, 0], [-np.sin(th), 0, np.cos(th), 0], [0, 0, 0, 1]])
    assert fuse_occupancy([g], [rot45], g.shape).shape == g.shape          # rigid: allowed (nearest voxel)
    with pytest.raises(ValueError, match="rigid"):
        fuse_occupancy([g], [np.zeros((4, 4))], g.shape)
    with pytest.raises(ValueError, match="rigid"):
        fuse_occupancy([g], [np.diag([2.0, 2, 2, 1])], g.shape)
    with pytest.raises(ValueError, match="rigid"):
        fuse_occupancy([g], [np.diag([-1.0, 1, 1, 1])], g.shape)          # a mirror, not a rotation
    with pytest.raises(ValueError, match="shape"):
        fuse_occupancy([g], [np.eye(4)], (16.7, 8, 16))
    with pytest.raises(ValueError, match="classes"):
        occupancy_iou(g, g, classes=["a"])
    room, _ = make_room(np.random.default_rng(0), size=24)
    rng = np.random.default_rng(1)
    for bad in (1.5, -0.3, float("nan")):
        with pytest.raises(ValueError, match="dropout"):
            corrupt(room, rng, dropout=bad)
    with pytest.raises(ValueError, match="spurious"):
        corrupt(room, rng, spurious=-0.1)
    with pytest.raises(ValueError, match="jitter"):
        observe(room, rng, jitter=2.0)
    with pytest.raises(ValueError, match="overlap"):
        observe(room, rng, overlap=-40)
    with pytest.raises(ValueError, match="close_iter"):
        morphological(room, -1, 0)
    with pytest.raises(ValueError, match="open_iter"):
        morphological(room, 0, 1.5)
    with pytest.raises(ValueError, match="connectivity"):
        morphological(room, 1, 0, 4)
    for bad in (-5, float("nan"), 27):
        with pytest.raises(ValueError, match="min_neighbours"):
            majority_filter(room, bad)
    with pytest.raises(ValueError, match="size"):
        make_room(rng, size=8)
    with pytest.raises(ValueError, match="stretches"):
        deform(t, rng, stretches=-1)


def test_up_axis_rotates_a_z_up_grid_like_the_y_up_one():
    rng = np.random.default_rng(13)
    t = rng.random((3, 4, 5)) < 0.5
    z_up = np.transpose(t, (0, 2, 1))                 # [x, y, z] y-up -> [x, z', y'] with axis 2 vertical
    for r in (0, 90, 180, 270):
        np.testing.assert_array_equal(rotate_yaw(z_up, r, up_axis=2), np.transpose(rotate_yaw(t, r), (0, 2, 1)))
    lib = template_library()
    lib_z = {c: [np.transpose(x, (0, 2, 1)) for x in ts] for c, ts in lib.items()}
    tt = rotate_yaw(lib[6][1], 90)
    g = np.zeros((20, 10, 20), int)
    g[6:6 + tt.shape[0], 1:1 + tt.shape[1], 4:4 + tt.shape[2]][tt] = 6
    gz = np.transpose(g, (0, 2, 1))
    inst = Instances(np.argwhere(gz == 6).mean(0)[None], np.array([6]))
    fit = fit_templates(gz, inst, lib_z, up_axis=2)
    assert fit.iou[0] == pytest.approx(1.0) and fit.template[0] == 1 and fit.rotation[0] == 90
    np.testing.assert_array_equal(fit.grid, gz)
