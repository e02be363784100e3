"""World2Minecraft: density against a loop, instance centres, the template fit against a
brute-force IoU search, fusion with a rotated frame, /setblock export, IoU / mIoU against
scikit-learn, reductions of the comparators, rejections, and the smoke experiment."""
import itertools

import numpy as np
import pytest

from iclr26.benchmarks.world2minecraft import (IGNORE, Instances, corrupt, density, extract_instance_centers,
                                               fit_templates, fuse_occupancy, load_occupancy_scene, majority_filter,
                                               make_room, morphological, observe, occupancy_iou, rotate_yaw,
                                               semantic_miou, template_library, to_setblock_commands)
from iclr26.benchmarks.world2minecraft import experiment as E


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
    inst = extract_instance_centers(g, tau=9, eps=1.5, min_samples=4)
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
    assert set(a["metrics"]["iou"]) == {"template", "closing", "majority", "raw"}
