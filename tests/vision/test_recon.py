"""RECON: the robust circular mean against a brute-force reference, the natural pose, the IE-AE's
exact invariance / equivariance under quarter turns, the circular W1, and rejections."""
import math

import numpy as np
import pytest
import torch

from iclr26.vision.recon import (POSE_FAMILIES, RECON, CanonicalCodeEncoder, IEAutoencoder, InvariantPoseEncoder,
                                 NonFiniteTrainingError, TestTimeCanonicalizer, circular_mask, circular_w1,
                                 class_frechet_means, class_restricted_recon, encode, load_mnist_images, rotated, robust_frechet_mean, rotate, sample_poses,
                                 train_ieae, wrap_angle)


# ---------------------------------------------------------------- independent references
def _ref_rho(d, estimator, c):
    """The M-estimator losses written from their textbook definitions."""
    if estimator == "mean":
        return d ** 2
    if estimator == "median":
        return d
    if estimator == "huber":
        return np.where(d <= c, d ** 2 / 2, c * d - c ** 2 / 2)
    if estimator == "tukey":
        return np.where(d <= c, c ** 2 / 6 * (1 - (1 - (d / c) ** 2) ** 3), c ** 2 / 6)
    raise AssertionError(estimator)


def _ref_mean(theta, estimator, c=math.pi / 2, w=None):
    """Grid search of argmin_mu sum_j w_j rho(d(mu, theta_j)) with the arc distance, then a fine grid."""
    theta = np.asarray(theta, dtype=float)
    w = np.ones_like(theta) if w is None else np.asarray(w, dtype=float)

    def obj(mu):
        d = np.abs((theta[None, :] - mu[:, None] + math.pi) % (2 * math.pi) - math.pi)
        return (w * _ref_rho(d, estimator, c)).sum(1)

    grid = np.linspace(-math.pi, math.pi, 20001)
    m0 = grid[obj(grid).argmin()]
    fine = np.linspace(m0 - 1e-3, m0 + 1e-3, 2001)
    o = obj(fine)
    return fine[o.argmin()], o.min(), obj


def _arc(a, b):
    return abs((a - b + math.pi) % (2 * math.pi) - math.pi)


# ---------------------------------------------------------------- robust Frechet mean
@pytest.mark.parametrize("estimator", ["mean", "median", "huber", "tukey"])
def test_robust_mean_matches_brute_force(estimator):
    rng = np.random.default_rng(0)
    for trial in range(6):
        centre = rng.uniform(-math.pi, math.pi)
        theta = centre + rng.normal(0, 0.4, 9)
        theta[:2] = rng.uniform(-math.pi, math.pi, 2)          # outliers
        got = float(robust_frechet_mean(torch.tensor(theta), estimator, c=1.0))
        ref, ref_obj, obj = _ref_mean(theta, estimator, c=1.0)
        # same minimiser, or (near-ties) the same objective value
        assert _arc(got, ref) < 2e-3 or obj(np.array([got]))[0] <= ref_obj + 1e-6, (estimator, trial, got, ref)


def test_mean_wraps_across_pi():
    theta = torch.tensor([math.pi - 0.1, -math.pi + 0.1, math.pi - 0.05, -math.pi + 0.05])
    for est in ("mean", "tukey", "huber", "median"):
        m = float(robust_frechet_mean(theta, est))
        assert _arc(m, math.pi) < 0.06, (est, m)


def test_tukey_ignores_far_mode_mean_does_not():
    # 6 points near 0.2, 4 points near 0.2 + pi: the biweight locks onto the larger mode
    theta = torch.tensor([0.2] * 6 + [0.2 + math.pi] * 4) + torch.linspace(-0.02, 0.02, 10)
    assert _arc(float(robust_frechet_mean(theta, "tukey")), 0.2) < 0.02
    ref, _, _ = _ref_mean(theta.numpy(), "mean")
    assert _arc(float(robust_frechet_mean(theta, "mean")), ref) < 2e-3
    assert _arc(ref, 0.2) > 0.3  # the plain Frechet mean is pulled away


def test_weights_drop_points_and_batch_rows_are_independent():
    theta = torch.tensor([[0.1, 0.2, 3.0], [1.0, 1.1, 1.2]])
    w = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    m = robust_frechet_mean(theta, "mean", weights=w)
    assert m.shape == (2,)
    assert abs(float(m[0]) - 0.15) < 1e-6 and abs(float(m[1]) - 1.1) < 1e-6


def test_reductions_identical_and_single():
    assert abs(float(robust_frechet_mean(torch.full((7,), 0.7), "tukey")) - 0.7) < 1e-6
    assert abs(float(robust_frechet_mean(torch.tensor([-2.5]), "huber")) + 2.5) < 1e-6


def test_robust_mean_equivariant_to_shifts():
    rng = np.random.default_rng(1)
    theta = torch.tensor(rng.normal(0.3, 0.5, 15))
    for est in ("tukey", "huber", "median", "mean"):
        a = float(robust_frechet_mean(theta, est))
        b = float(robust_frechet_mean(wrap_angle(theta + 2.0), est))
        assert _arc(b, a + 2.0) < 1e-4, est


# ---------------------------------------------------------------- RECON
def test_recon_natural_pose_is_relative_to_neighbourhood_mean():
    # two clusters in z; cluster A has arbitrary offset 1.0, cluster B offset -2.0
    rng = np.random.default_rng(2)
    true = rng.normal(0, 0.2, 60)
    z = np.concatenate([rng.normal(0, 0.01, (30, 3)), rng.normal(5, 0.01, (30, 3))])
    off = np.r_[np.full(30, 1.0), np.full(30, -2.0)]
    g = torch.tensor(true + off)
    r = RECON(k=10, estimator="mean").fit(torch.tensor(z), g)
    gn = r(torch.tensor(z), g, exclude_self=True)
    idx = r.neighbours(torch.tensor(z), exclude_self=True).numpy()
    for i in (0, 45):
        ref, _, _ = _ref_mean(g.numpy()[idx[i]], "mean")
        assert _arc(float(gn[i]), float(g[i]) - ref) < 2e-3
        assert i not in idx[i] and len(set(idx[i])) == 10
        assert (idx[i] < 30).all() == (i < 30)
    # the offsets are gone: natural poses track the true ones
    assert np.mean(np.abs(wrap_angle(gn - torch.tensor(true)).numpy())) < 0.1


def test_recon_single_neighbour_is_relative_pose():
    z = torch.tensor([[0.0], [1.0], [10.0]])
    g = torch.tensor([0.5, -1.0, 2.0])
    r = RECON(k=1).fit(z, g)
    gn = r(torch.tensor([[0.9], [9.0]]), torch.tensor([0.0, 0.0]))
    assert torch.allclose(gn, torch.tensor([1.0, -2.0]))
    # with exclude_self the single neighbour is the other point
    gs = r(z[:2], g[:2], exclude_self=True)
    assert torch.allclose(gs, wrap_angle(torch.tensor([0.5 + 1.0, -1.0 - 0.5])))


def test_recon_identical_poses_give_identity_and_state_dict_roundtrip():
    z = torch.randn(30, 4)
    g = torch.full((30,), 1.3)
    r = RECON(k=5).fit(z, g)
    assert torch.allclose(r(z, g), torch.zeros(30), atol=1e-6)
    r2 = RECON(k=5)
    r2.load_state_dict(r.state_dict())
    q = torch.randn(4, 4)
    assert torch.allclose(r2(q, torch.zeros(4)), r(q, torch.zeros(4)))


def test_recon_rejections():
    with pytest.raises(ValueError, match="k"):
        RECON(k=0)
    with pytest.raises(ValueError, match="estimator"):
        RECON(estimator="winsorized")
    with pytest.raises(ValueError, match="c must"):
        RECON(c=-1.0)
    r = RECON(k=3)
    with pytest.raises(RuntimeError, match="not fitted"):
        r(torch.zeros(2, 2), torch.zeros(2))
    with pytest.raises(ValueError, match="fewer than k"):
        r.fit(torch.zeros(2, 2), torch.zeros(2))
    with pytest.raises(ValueError, match="NaN"):
        r.fit(torch.tensor([[float("nan"), 0.0]] * 4), torch.zeros(4))
    with pytest.raises(ValueError, match="g_hat"):
        r.fit(torch.zeros(4, 2), torch.zeros(3))
    r.fit(torch.randn(5, 2), torch.zeros(5))
    with pytest.raises(ValueError, match="z must be"):
        r(torch.zeros(2, 3), torch.zeros(2))
    with pytest.raises(ValueError, match="NaN"):
        r(torch.zeros(2, 2), torch.tensor([0.0, float("inf")]))
    with pytest.raises(ValueError, match="empty"):
        robust_frechet_mean(torch.empty(0))
    with pytest.raises(ValueError, match="weights"):
        robust_frechet_mean(torch.zeros(3), weights=torch.tensor([1.0, -1.0, 1.0]))


# ---------------------------------------------------------------- backbone
def _digit_like(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.zeros(3, 1, 16, 16)
    x[:, :, 4:12, 6:10] = torch.rand(3, 1, 8, 4, generator=g)
    x[:, :, 4:6, 6:12] = 1.0
    return x


def test_rotate_quarter_turn_is_rot90_and_inverse():
    x = torch.rand(2, 1, 16, 16)
    assert torch.allclose(rotate(x, math.pi / 2), torch.rot90(x, 1, (-2, -1)), atol=1e-5)
    yy, xx = torch.meshgrid(torch.arange(16.0), torch.arange(16.0), indexing="ij")
    blob = torch.exp(-((yy - 5) ** 2 + (xx - 9) ** 2) / 8).reshape(1, 1, 16, 16)
    assert (rotate(rotate(blob, 0.7), -0.7) - blob).abs().max() < 0.1
    # counter-clockwise: a blob above the centre moves to the left
    top = torch.exp(-((yy - 3) ** 2 + (xx - 7.5) ** 2) / 2).reshape(1, 1, 16, 16)
    moved = rotate(top, 0.5)[0, 0]
    assert moved.sum(0).argmax() < 7
    with pytest.raises(ValueError, match="theta"):
        rotate(x, torch.zeros(3))


@pytest.mark.parametrize("q", [1, 2, 3])
def test_encoder_exactly_invariant_and_equivariant_on_quarter_turns(q):
    torch.manual_seed(0)
    enc = InvariantPoseEncoder(size=16, z_dim=6, n_rot=8, width=4).eval()
    x = _digit_like() * enc.mask
    with torch.no_grad():
        z, g = enc(x)
        z2, g2 = enc(torch.rot90(x, q, (-2, -1)))
    assert torch.allclose(z, z2, atol=1e-4)
    assert torch.allclose(wrap_angle(g2 - g - q * math.pi / 2), torch.zeros(3), atol=1e-4)


def test_ieae_reconstruction_shape_and_training_step_and_nonfinite():
    torch.manual_seed(0)
    m = IEAutoencoder(size=16, z_dim=4, n_rot=4, width=4, hidden=16)
    x = _digit_like()
    rec, z, g = m(x)
    assert rec.shape == x.shape and z.shape == (3, 4) and g.shape == (3,)
    losses = train_ieae(m, x, steps=3, batch_size=2, lr=1e-3)
    assert len(losses) == 3 and all(math.isfinite(v) for v in losses)
    with torch.no_grad():
        m.decoder[0].weight.fill_(float("nan"))
    with pytest.raises(NonFiniteTrainingError):
        train_ieae(m, x, steps=1)
    with pytest.raises(ValueError, match="n_rot"):
        InvariantPoseEncoder(n_rot=6)
    with pytest.raises(ValueError, match="x must be"):
        m.encoder(torch.zeros(2, 1, 8, 8))
    with pytest.raises(ValueError, match="lr"):
        train_ieae(m, x, steps=1, lr=-1.0)


def test_test_time_canonicalizer_undoes_quarter_turns():
    torch.manual_seed(0)
    enc = InvariantPoseEncoder(size=16, z_dim=6, n_rot=8, width=4).eval()
    x = _digit_like() * enc.mask
    with torch.no_grad():
        z, g = enc(x)
    r = RECON(k=1).fit(z, g)
    ttc = TestTimeCanonicalizer(enc, r, torch.nn.Flatten(), mask=enc.mask)
    with torch.no_grad():
        a = ttc(x)
        b = ttc(torch.rot90(x, 1, (-2, -1)))
    assert torch.allclose(a, b, atol=1e-3)  # the canonical input does not depend on the rotation


# ---------------------------------------------------------------- metrics and labels
def test_circular_w1_reference_values():
    assert abs(circular_w1([0.0], [1.0]) - 1.0) < 1e-12
    assert abs(circular_w1([0.1], [-0.1]) - 0.2) < 1e-12          # across 0
    assert abs(circular_w1([3.0], [-3.0]) - (2 * math.pi - 6.0)) < 1e-9  # across pi
    assert circular_w1([0.3, 1.2, 2.0], [1.2, 2.0, 0.3]) < 1e-12
    # uniform on the circle vs a point mass: the mean arc distance, pi / 2
    u = np.linspace(-math.pi, math.pi, 4000, endpoint=False)
    assert abs(circular_w1(u, [0.4]) - math.pi / 2) < 1e-3
    # shift of a sample by s moves W1 by |s| (for small s)
    rng = np.random.default_rng(0)
    a = rng.normal(0, 0.3, 200)
    assert abs(circular_w1(a, a + 0.25) - 0.25) < 1e-9
    with pytest.raises(ValueError, match="NaN"):
        circular_w1([float("nan")], [0.0])
    with pytest.raises(ValueError, match="empty"):
        circular_w1([], [0.0])


def test_circular_w1_matches_grid_reference():
    rng = np.random.default_rng(3)
    a, b = rng.uniform(-3, 3, 7), rng.uniform(-3, 3, 5)
    t = np.linspace(0, 2 * math.pi, 200001)[:-1]
    F = (np.mod(a, 2 * math.pi)[None, :] <= t[:, None]).mean(1) - (np.mod(b, 2 * math.pi)[None, :] <= t[:, None]).mean(1)
    ref = min(np.abs(F - mu).mean() * 2 * math.pi for mu in np.linspace(-1, 1, 2001))
    assert abs(circular_w1(a, b) - ref) < 2e-3


def test_class_means():
    g = torch.tensor([0.1, 0.2, 0.3, 2.0, 2.1])
    m = class_frechet_means(g, torch.tensor([0, 0, 0, 1, 1]), estimator="mean")
    assert abs(m[0] - 0.2) < 1e-6 and abs(m[1] - 2.05) < 1e-6


# ---------------------------------------------------------------- canonical-form code, MNIST, pose families
@pytest.mark.parametrize("q", [1, 2, 3])
def test_canonical_code_exactly_invariant_on_quarter_turns(q):
    torch.manual_seed(1)
    enc = InvariantPoseEncoder(size=16, z_dim=6, n_rot=8, width=4).eval()
    ce = CanonicalCodeEncoder(enc).eval()
    x = _digit_like(3) * enc.mask
    with torch.no_grad():
        c, g = ce(x)
        c2, g2 = ce(torch.rot90(x, q, (-2, -1)))
    assert c.shape == (3, 256)
    assert torch.allclose(wrap_angle(g2 - g - q * math.pi / 2), torch.zeros(3), atol=1e-4)
    assert torch.allclose(c, c2, atol=1e-4)
    # the code is the input rotated back by its own pose
    with torch.no_grad():
        ref = (rotate(x, -g) * enc.mask).flatten(1)
    assert (c - ref).abs().max() < 1e-3


def test_canonical_code_resizes_and_is_approximately_invariant_to_any_angle():
    torch.manual_seed(2)
    enc = InvariantPoseEncoder(size=16, z_dim=6, n_rot=8, width=4).eval()
    ce = CanonicalCodeEncoder(enc).eval()
    yy, xx = torch.meshgrid(torch.arange(28.0), torch.arange(28.0), indexing="ij")
    blob = (torch.exp(-((yy - 9) ** 2 + (xx - 15) ** 2) / 6) + torch.exp(-((yy - 17) ** 2 + (xx - 11) ** 2) / 12))
    x = blob.reshape(1, 1, 28, 28) * circular_mask(28)
    with torch.no_grad():
        c, g = ce(x)
        c2, g2 = ce(torch.rot90(x, 1, (-2, -1)))
    assert c.shape == (1, 256)
    assert torch.allclose(c, c2, atol=1e-4)
    with pytest.raises(ValueError, match="x must be"):
        ce(torch.zeros(2, 3, 28, 28))


def test_tta_layer_with_canonical_code_undoes_quarter_turns_at_28():
    torch.manual_seed(0)
    enc = InvariantPoseEncoder(size=16, z_dim=6, n_rot=8, width=4).eval()
    ce = CanonicalCodeEncoder(enc).eval()
    x = torch.nn.functional.interpolate(_digit_like(), size=(28, 28), mode="bilinear") * circular_mask(28)
    with torch.no_grad():
        z, g = ce(x)
    r = RECON(k=1, standardize=False).fit(z, g)
    ttc = TestTimeCanonicalizer(ce, r, torch.nn.Flatten(), mask=circular_mask(28))
    with torch.no_grad():
        a, b = ttc(x), ttc(torch.rot90(x, 1, (-2, -1)))
    assert torch.allclose(a, b, atol=1e-3)
    assert torch.allclose(a, x.flatten(1), atol=1e-3)   # its own reference: natural pose 0


def test_mnist_loader():
    x, y = load_mnist_images(28)
    assert x.shape == (5000, 1, 28, 28) and y.shape == (5000,)
    assert np.bincount(y).tolist() == [500] * 10
    assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0
    assert float(x[:, :, 0, 0].abs().max()) == 0.0           # outside the disc
    xs, _ = load_mnist_images(16)
    assert xs.shape == (5000, 1, 16, 16)


def test_pose_families_are_spread_and_centred_on_upright():
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(10), 4000)
    t = sample_poses(labels, rng)
    assert np.all((t >= -math.pi) & (t < math.pi))
    for c, (fam, p) in POSE_FAMILIES.items():
        tc = t[labels == c]
        # no class is upright by construction: the identity pose is off by a real amount (the
        # near-upright class, sd 10 degrees, by about 8 degrees)
        assert np.mean(np.abs(tc)) > 0.1, (c, fam)
        if fam == "interval":
            assert np.abs(tc).max() <= p + 1e-9 and abs(np.mean(tc)) < 0.05
            assert abs(np.mean(np.abs(tc)) - p / 2) < 0.03
        elif fam == "normal":
            assert abs(np.std(tc) - p) < 0.03 and abs(np.mean(tc)) < 0.05
        elif fam == "bimodal":
            near_pi = np.abs(np.abs(tc) - math.pi) < 6 * p
            assert abs(near_pi.mean() - 0.5) < 0.03 and (near_pi | (np.abs(tc) < 6 * p)).all()
        elif fam == "uniform":
            assert abs(circular_w1(tc, np.linspace(-math.pi, math.pi, 1000, endpoint=False))) < 0.05
    with pytest.raises(ValueError, match="family"):
        sample_poses(np.array([0]), rng, {0: ("spiral", 1.0)})


# ---------------------------------------------------------------- trimmed mean, supervised RECON, experiment wiring
def _ref_trimmed(theta, trim):
    """Grid search of the trimmed Frechet objective: the squared arc distances of the
    n - floor(trim n) points nearest to mu, summed."""
    grid = np.linspace(-math.pi, math.pi, 40001)
    d = np.abs((theta[None, :] - grid[:, None] + math.pi) % (2 * math.pi) - math.pi)
    h = len(theta) - int(np.floor(trim * len(theta)))
    obj = (np.sort(d, 1)[:, :h] ** 2).sum(1)
    return grid[obj.argmin()], obj.min()


def test_trimmed_mean_matches_grid_reference_and_ignores_the_trimmed_share():
    rng = np.random.default_rng(1)
    for _ in range(20):
        n = int(rng.integers(5, 30))
        theta = rng.uniform(-3, 3) + rng.normal(0, 0.5, n)
        k = int(rng.integers(0, n // 2 + 1))
        theta[:k] = rng.uniform(-math.pi, math.pi, k)
        got = float(robust_frechet_mean(torch.tensor(theta), "trimmed", trim=0.2))
        _, ref_obj = _ref_trimmed(theta, 0.2)
        d = np.abs((theta - got + math.pi) % (2 * math.pi) - math.pi)
        h = n - int(np.floor(0.2 * n))
        assert (np.sort(d)[:h] ** 2).sum() <= ref_obj + 1e-9
    # 8 inliers around 1.0 and 2 far points: a 20 % trimmed mean is the inliers' mean
    inl = 1.0 + np.linspace(-0.1, 0.1, 8)
    theta = torch.tensor(np.concatenate([inl, [-2.0, -2.2]]))
    assert abs(float(robust_frechet_mean(theta, "trimmed", trim=0.2)) - inl.mean()) < 1e-6
    # trim = 0 is the plain Frechet mean
    theta = torch.tensor(rng.normal(0.3, 0.4, 12))
    assert abs(float(robust_frechet_mean(theta, "trimmed", trim=0.0)) - float(robust_frechet_mean(theta, "mean"))) < 1e-6
    for bad in (0.5, -0.1, float("nan")):
        with pytest.raises(ValueError, match="trim"):
            robust_frechet_mean(theta, "trimmed", trim=bad)
        with pytest.raises(ValueError, match="trim"):
            RECON(estimator="trimmed", trim=bad)


def test_class_restricted_recon_uses_only_same_label_references():
    # class-1 references sit right on the class-0 queries but carry another pose: unrestricted
    # RECON follows them, the class-restricted one does not
    z_ref = torch.tensor([[0.0], [0.1], [0.2], [5.0], [5.1], [5.2]])
    g_ref = torch.tensor([1.0, 1.0, 1.0, 0.2, 0.2, 0.2])
    y_ref = torch.tensor([1, 1, 1, 0, 0, 0])
    z, g, y = torch.tensor([[0.05], [5.05]]), torch.tensor([1.5, 0.5]), torch.tensor([0, 1])
    got = class_restricted_recon(z_ref, g_ref, y_ref, z, g, y, k=3, standardize=False)
    assert torch.allclose(got, torch.tensor([1.3, -0.5]), atol=1e-5)
    free = RECON(k=3, standardize=False).fit(z_ref, g_ref)(z, g)
    assert torch.allclose(free, torch.tensor([0.5, 0.3]), atol=1e-5)
    with pytest.raises(ValueError, match="no reference"):
        class_restricted_recon(z_ref, g_ref, y_ref, z, g, torch.tensor([0, 2]), k=3)


def test_rotate_rejects_nonfinite_angles_and_train_accepts_integer_lr():
    x = torch.rand(2, 1, 8, 8)
    for bad in (float("nan"), float("inf"), torch.tensor([0.0, float("nan")])):
        with pytest.raises(ValueError, match="theta"):
            rotate(x, bad)
    model = IEAutoencoder(size=8, z_dim=4, n_rot=4, width=2)
    assert len(train_ieae(model, torch.rand(8, 1, 8, 8), steps=1, batch_size=8, lr=1)) == 1
    for bad in (True, 0, -1e-3, float("nan")):
        with pytest.raises(ValueError, match="lr"):
            train_ieae(model, torch.rand(8, 1, 8, 8), steps=1, batch_size=8, lr=bad)


@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
@pytest.mark.parametrize("standardize", [False, True])
def test_recon_buffers_on_the_input_device(device, standardize):
    z, g = torch.randn(20, 3, device=device), torch.rand(20, device=device)
    r = RECON(k=3, standardize=standardize).fit(z, g)
    assert {b.device.type for b in r.buffers()} == {device}
    assert r(z[:4], g[:4]).device.type == device


def _upright_classifier(n=1500):
    from iclr26.vision.recon.experiment import _classifier
    x, y = load_mnist_images(28)
    idx = np.random.default_rng(0).permutation(len(y))
    tr, te = idx[:n], idx[n:n + 300]
    clf, _ = _classifier(x[tr], y[tr], (0.1,), 0)
    return clf, x[te], y[te]


def test_experiment_unrotates_by_minus_the_pose():
    """The experiment's arms classify rho(-pose) x: with the true rotation as the pose the frozen
    upright classifier is about as accurate as on upright digits, with the sign flipped it is not."""
    from iclr26.vision.recon.experiment import canonicalised_correct
    clf, x, y = _upright_classifier()
    a = torch.tensor(np.random.default_rng(2).uniform(0.6, 1.4, len(y)) * np.random.default_rng(3).choice([-1, 1], len(y)),
                     dtype=torch.float32)
    xr = rotated(x, a.numpy())
    upright = canonicalised_correct(clf, x, torch.zeros(len(y)), y).mean()
    right = canonicalised_correct(clf, xr, a, y).mean()
    wrong = canonicalised_correct(clf, xr, -a, y).mean()
    assert upright > 0.8 and right > upright - 0.1 and wrong < right - 0.4, (upright, right, wrong)


def test_tta_layer_equals_the_manual_path():
    """TestTimeCanonicalizer (the recon arm) and the path the other arms take give the same logits."""
    torch.manual_seed(0)
    enc = IEAutoencoder(size=16, z_dim=4, n_rot=4, width=2).encoder.eval()
    coder = CanonicalCodeEncoder(enc).eval()
    x = rotated(torch.rand(40, 1, 28, 28) * circular_mask(28), np.random.default_rng(0).uniform(-3, 3, 40))
    z, g = encode(coder, x)
    recon = RECON(k=5, standardize=False).fit(z, g)
    clf = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(28 * 28, 10)).eval()
    layer = TestTimeCanonicalizer(coder, recon, clf, mask=circular_mask(28)).eval()
    with torch.no_grad():
        manual = clf(rotated(x, (-recon(z, g)).numpy()))
        assert torch.allclose(layer(x), manual, atol=1e-5)


def test_experiment_smoke_wiring():
    from iclr26.vision.recon import experiment
    out = experiment.run("smoke", 0)
    m, info = out["metrics"], out["info"]
    assert info["ttc_matches_manual_path"] == 1.0
    # on upright digits the identity pose and the true pose are the same arm
    assert m["accuracy_upright"]["none"] == m["accuracy_upright"]["true"] == info["upright_accuracy"]
    # un-rotating by the true rotation recovers most of the upright accuracy on both rotated sets
    for key in ("accuracy", "accuracy_family"):
        assert m[key]["true"] > info["upright_accuracy"] - 0.1, key
    assert set(info["w1_recon_minus_none"]["per_family"]) == {f for f, _ in POSE_FAMILIES.values()}
