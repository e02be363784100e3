"""NOVA3R: point-cloud metrics against brute-force references, farthest point sampling, the
flow-matching path and loss, Euler sampling, the decoder's permutation equivariance, the shape
generator, the experiment at smoke scale, and rejection of bad input."""
import math

import numpy as np
import pytest
import torch
from scipy.spatial import cKDTree

from iclr26.vision.nova3r import (NonFiniteTrainingError, PointAEConfig, PointSetAutoencoder, chamfer_distance,
                                  chamfer_loss, farthest_point_sample, fourier_features, fscore, gather_points,
                                  hole_ratio, path_coefficients, random_shape, sample_surface, timestep_embedding,
                                  train_autoencoder, visible_part)
from iclr26.vision.nova3r import experiment as exp
from iclr26.vision.nova3r.shapes import RADIUS


def _tiny(**kw):
    cfg = dict(num_latents=4, dim=8, heads=2, self_depth=1, decoder_depth=1, time_freq_dim=8)
    cfg.update(kw)
    return PointSetAutoencoder(**cfg)


def _clouds(b=3, n=17, m=11, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(b, n, 3, generator=g), torch.rand(b, m, 3, generator=g)


# ---------------------------------------------------------------- metrics vs independent references
def _ref_nn(a, b):
    return cKDTree(b).query(a)[0]


def test_chamfer_matches_kdtree_reference():
    p, g = _clouds()
    ref = [(_ref_nn(p[i].numpy(), g[i].numpy()).mean() + _ref_nn(g[i].numpy(), p[i].numpy()).mean()) / 2
           for i in range(3)]
    np.testing.assert_allclose(chamfer_distance(p, g).numpy(), ref, rtol=1e-5)


def test_chamfer_loss_is_squared_sum_of_directions():
    p, g = _clouds()
    ref = np.mean([(_ref_nn(p[i].numpy(), g[i].numpy()) ** 2).mean() + (_ref_nn(g[i].numpy(), p[i].numpy()) ** 2).mean()
                   for i in range(3)])
    assert float(chamfer_loss(p, g)) == pytest.approx(ref, rel=1e-5)


@pytest.mark.parametrize("tau", [0.05, 0.2, 0.5])
def test_fscore_and_hole_ratio_match_reference(tau):
    p, g = _clouds(seed=1)
    for i in range(3):
        dp, dg = _ref_nn(p[i].numpy(), g[i].numpy()), _ref_nn(g[i].numpy(), p[i].numpy())
        P, R = (dp < tau).mean(), (dg < tau).mean()
        f = 0.0 if P + R == 0 else 2 * P * R / (P + R)
        assert float(fscore(p, g, tau)[i]) == pytest.approx(f, abs=1e-6)
        assert float(hole_ratio(p, g, tau)[i]) == pytest.approx((dg > tau).mean(), abs=1e-6)


def test_metrics_identity_and_far_clouds():
    p, _ = _clouds()
    assert torch.allclose(chamfer_distance(p, p), torch.zeros(3))
    assert torch.all(fscore(p, p, 0.01) == 1)
    assert torch.all(hole_ratio(p, p, 0.01) == 0)
    assert torch.all(fscore(p, p + 10, 0.5) == 0)          # both P and R zero -> 0, not NaN
    assert torch.all(hole_ratio(p, p + 10, 0.5) == 1)


# ---------------------------------------------------------------- farthest point sampling
def _ref_fps(x, m):
    chosen = [0]
    d = np.full(len(x), np.inf)
    for _ in range(m - 1):
        d = np.minimum(d, ((x - x[chosen[-1]]) ** 2).sum(1))
        chosen.append(int(d.argmax()))
    return chosen


def test_fps_matches_reference_and_gathers():
    p, _ = _clouds(n=40)
    idx = farthest_point_sample(p, 7)
    for i in range(3):
        assert idx[i].tolist() == _ref_fps(p[i].numpy(), 7)
    q = gather_points(p, idx)
    assert torch.equal(q[1, 3], p[1, idx[1, 3]])


def test_fps_full_set_is_a_permutation():
    p, _ = _clouds(n=12)
    idx = farthest_point_sample(p, 12)
    for i in range(3):
        assert sorted(idx[i].tolist()) == list(range(12))


# ---------------------------------------------------------------- embeddings and the flow path
def test_fourier_features_values():
    x = torch.tensor([[0.25, -0.5, 1.0]])
    f = fourier_features(x, 2)
    assert f.shape == (1, 3 * 5)
    assert torch.allclose(f[0, :3], x[0])
    freqs = [math.pi, 2 * math.pi]
    sins = [math.sin(v * w) for v in x[0].tolist() for w in freqs]
    coss = [math.cos(v * w) for v in x[0].tolist() for w in freqs]
    assert torch.allclose(f[0, 3:9], torch.tensor(sins), atol=1e-6)
    assert torch.allclose(f[0, 9:], torch.tensor(coss), atol=1e-6)


def test_timestep_embedding_at_zero_and_frequencies():
    e = timestep_embedding(torch.tensor([0.0, 1.0]), 8)
    assert torch.allclose(e[0], torch.tensor([1.0] * 4 + [0.0] * 4))
    w = torch.tensor([10000 ** (-k / 4) for k in range(4)])
    assert torch.allclose(e[1], torch.cat([w.cos(), w.sin()]), atol=1e-6)


@pytest.mark.parametrize("scheduler", ["cosine", "linear"])
def test_path_endpoints_and_derivatives(scheduler):
    t = torch.tensor([0.0, 0.3, 0.7, 1.0], dtype=torch.float64)
    a, s, da, ds = path_coefficients(t, scheduler)
    assert float(a[0]) == pytest.approx(0) and float(s[0]) == pytest.approx(1)
    assert float(a[-1]) == pytest.approx(1) and float(s[-1]) == pytest.approx(0, abs=1e-12)
    h = 1e-6
    ap, sp, _, _ = path_coefficients(t + h, scheduler)
    am, sm, _, _ = path_coefficients(t - h, scheduler)
    assert torch.allclose(da, (ap - am) / (2 * h), atol=1e-6)
    assert torch.allclose(ds, (sp - sm) / (2 * h), atol=1e-6)
    if scheduler == "cosine":
        assert torch.allclose(a, torch.sin(math.pi / 2 * t)) and torch.allclose(s, torch.cos(math.pi / 2 * t))


def _zero_velocity(model, monkeypatch):
    monkeypatch.setattr(model, "velocity", lambda x, t, z: torch.zeros_like(x))


@pytest.mark.parametrize("fm_loss", ["l2", "mse"])
@pytest.mark.parametrize("scheduler", ["cosine", "linear"])
def test_flow_matching_loss_equals_manual_target(monkeypatch, scheduler, fm_loss):
    """With a zero velocity the loss is the mean Euclidean norm of the target velocity per point
    (official FMVelocity(L21)), or its mean squared coordinate ("mse"), computed here by hand from the
    same draws (t first, then x_0, on one generator)."""
    m = _tiny(scheduler=scheduler, fm_loss=fm_loss)
    _zero_velocity(m, monkeypatch)
    x1, _ = _clouds(b=2, n=8)
    loss = m.flow_matching_loss(x1, generator=torch.Generator().manual_seed(5))
    g = torch.Generator().manual_seed(5)
    t = torch.rand(2, generator=g)
    x0 = torch.rand(x1.shape, generator=g) * 2 - 1
    if scheduler == "cosine":
        target = math.pi / 2 * (torch.cos(math.pi / 2 * t)[:, None, None] * x1 - torch.sin(math.pi / 2 * t)[:, None, None] * x0)
    else:
        target = x1 - x0          # rectified flow: the reduction of the affine path to a straight line
    want = target.pow(2).mean() if fm_loss == "mse" else torch.linalg.vector_norm(target, dim=-1).mean()
    assert float(loss) == pytest.approx(float(want), rel=1e-5)


def test_lr_schedule_warmup_then_half_cosine():
    from iclr26.vision.nova3r.model import lr_at
    lrs = [lr_at(s, 100, 1.0, warmup=0.1) for s in range(100)]
    assert lrs[:10] == pytest.approx([(s + 1) / 10 for s in range(10)])          # linear warm-up to lr
    assert lrs[10] == pytest.approx(1.0)
    assert lrs[55] == pytest.approx(0.5 * (1 + math.cos(math.pi * 45 / 90)))     # half-cycle cosine
    assert lrs[-1] == pytest.approx(0.5 * (1 + math.cos(math.pi * 89 / 90)))
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))
    # degenerate settings: no warm-up and a constant schedule give the plain constant rate
    assert [lr_at(s, 50, 3e-3, warmup=0, schedule="constant") for s in range(50)] == [3e-3] * 50
    assert lr_at(0, 50, 2.0, warmup=0) == pytest.approx(2.0)


def test_weight_decay_spares_one_dimensional_parameters():
    """A zero learning rate leaves every weight, and AdamW's decoupled decay (lr * wd) with it;
    with lr > 0 but gradients zeroed, only weights of >= 2 dims shrink (official no-decay group)."""
    torch.manual_seed(0)
    m = _tiny()
    x, _ = _clouds(b=2, n=8)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    for p in m.parameters():
        p.register_hook(lambda g: torch.zeros_like(g))
    train_autoencoder(m, x, x, loss="flow", steps=3, lr=1e-2, batch_size=2, weight_decay=0.5, warmup=0,
                      schedule="constant")
    for name, p in m.named_parameters():
        if p.ndim >= 2:
            assert torch.allclose(p, before[name] * (1 - 1e-2 * 0.5) ** 3, atol=1e-6), name
        else:
            assert torch.equal(p, before[name]), name


def test_euler_sampler_with_constant_velocity(monkeypatch):
    m = _tiny()
    c = torch.tensor([0.1, -0.2, 0.3])
    monkeypatch.setattr(m, "velocity", lambda x, t, z: c.expand_as(x))
    z = torch.zeros(2, 4, 8)
    out = m.sample(z, 5, steps=7, generator=torch.Generator().manual_seed(3))
    x0 = torch.rand((2, 5, 3), generator=torch.Generator().manual_seed(3)) * 2 - 1
    assert torch.allclose(out, x0 + c, atol=1e-6)


def test_euler_sampler_transports_to_target_on_exact_field(monkeypatch):
    """On the linear path the exact conditional field toward a point y is (y - x) / (1 - t): Euler lands
    on y at t = 1 (the last step has 1 - t = dt)."""
    m = _tiny(scheduler="linear")
    y = torch.tensor([0.4, 0.1, -0.3])
    monkeypatch.setattr(m, "velocity", lambda x, t, z: (y - x) / (1 - t[:, None, None]))
    out = m.sample(torch.zeros(1, 4, 8), 6, steps=5)
    assert torch.allclose(out, y.expand_as(out), atol=1e-5)


def test_regress_is_one_decoder_pass_at_time_zero(monkeypatch):
    m = _tiny()
    seen = {}

    def v(x, t, z):
        seen["t"] = t
        return x * 2

    monkeypatch.setattr(m, "velocity", v)
    out = m.regress(torch.zeros(2, 4, 8), 5, generator=torch.Generator().manual_seed(1))
    x0 = torch.rand((2, 5, 3), generator=torch.Generator().manual_seed(1)) * 2 - 1
    assert torch.allclose(out, 2 * x0) and torch.all(seen["t"] == 0)


# ---------------------------------------------------------------- the network
def test_decoder_permutation_equivariant_and_encoder_shapes():
    torch.manual_seed(0)
    m = _tiny().eval()
    x, _ = _clouds(b=2, n=10)
    z = m.encode(x)
    assert z.shape == (2, 4, 8)
    pts = torch.rand(2, 9, 3)
    t = torch.tensor([0.2, 0.8])
    perm = torch.randperm(9)
    v = m.velocity(pts, t, z)
    assert v.shape == pts.shape
    assert torch.allclose(m.velocity(pts[:, perm], t, z), v[:, perm], atol=1e-5)
    # per-point times equal to the per-cloud time give the same field
    assert torch.allclose(m.velocity(pts, t[:, None].expand(2, 9), z), v, atol=1e-5)


def test_latents_condition_the_decoder():
    torch.manual_seed(0)
    m = _tiny().eval()
    x, _ = _clouds(b=2, n=10)
    pts, t = torch.rand(2, 9, 3), torch.tensor([0.5, 0.5])
    z = m.encode(x)
    assert not torch.allclose(m.velocity(pts, t, z), m.velocity(pts, t, z.flip(0)))


def test_state_dict_round_trip_and_training_lowers_loss():
    torch.manual_seed(0)
    x = torch.tensor(np.stack([sample_surface(random_shape(np.random.default_rng(i)), 32, np.random.default_rng(i))
                               for i in range(8)]))
    for loss in ("flow", "chamfer"):
        torch.manual_seed(1)
        m = _tiny(num_latents=8, dim=16)
        losses = train_autoencoder(m, x, x, loss=loss, steps=60, lr=3e-3, batch_size=8, seed=0)
        assert np.mean(losses[-10:]) < np.mean(losses[:10])
        m2 = _tiny(num_latents=8, dim=16)
        m2.load_state_dict(m.state_dict())
        assert torch.allclose(m2.encode(x), m.encode(x))


def test_non_finite_loss_stops_training(monkeypatch):
    m = _tiny()
    x, _ = _clouds(b=2, n=8)
    monkeypatch.setattr(m, "flow_matching_loss", lambda a, b, generator=None: torch.tensor(float("nan"), requires_grad=True))
    with pytest.raises(NonFiniteTrainingError, match="non-finite flow loss"):
        train_autoencoder(m, x, x, loss="flow", steps=2, lr=1e-3, batch_size=2)


# ---------------------------------------------------------------- shapes
def test_shapes_inside_radius_and_independent_samples():
    rng = np.random.default_rng(0)
    for _ in range(10):
        s = random_shape(rng)
        a, b = sample_surface(s, 300, rng), sample_surface(s, 300, rng)
        assert a.shape == (300, 3) and a.dtype == np.float32
        assert np.linalg.norm(a, axis=1).max() <= RADIUS * 1.05
        assert not np.allclose(a, b)


def test_visible_part_is_a_half_space():
    pts = np.random.default_rng(0).normal(size=(200, 3))
    m = visible_part(pts, np.array([1.0, 0, 0]))
    assert np.all(pts[m, 0] - pts[:, 0].mean() > 0) and np.all(pts[~m, 0] - pts[:, 0].mean() <= 0)


# ---------------------------------------------------------------- experiment
def test_experiment_smoke_is_deterministic_and_complete():
    a, b = exp.run("smoke", 0), exp.run("smoke", 0)
    assert a["metrics"] == b["metrics"]
    for k, arms in {"fscore": {"fm", "cd", "fm_1step", "oracle", "noise"},
                    "hole_ratio": {"amodal_fm", "amodal_cd", "visible", "oracle"}}.items():
        assert arms <= set(a["metrics"][k])
    for k, d in a["metrics"].items():
        assert all(math.isfinite(v) for v in d.values()), k


def test_visible_split_keeps_half_and_hidden_mask():
    rng = np.random.default_rng(0)
    x = torch.tensor(np.stack([sample_surface(random_shape(rng), 40, rng) for _ in range(3)]))
    v = exp._visible(x, rng)
    assert v.shape == (3, 20, 3)
    h = exp._hidden_mask(x, x, v)
    assert h.float().mean() == pytest.approx(0.5)       # ground truth = input: exactly the other half


# ---------------------------------------------------------------- rejections
@pytest.mark.parametrize("bad, match", [
    (torch.rand(4, 3), "shape"), (torch.rand(2, 5, 2), "shape"), (torch.rand(2, 0, 3), "at least one"),
    (torch.tensor([[[float("nan"), 0, 0]]]), "non-finite"),
])
def test_metrics_reject_bad_clouds(bad, match):
    with pytest.raises(ValueError, match=match):
        fscore(bad, torch.rand(1, 4, 3) if bad.ndim == 3 and bad.shape[0] == 1 else bad, 0.1)


def test_metrics_reject_bad_tau_and_types():
    p, g = _clouds()
    for tau in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="tau"):
            fscore(p, g, tau)
    with pytest.raises(TypeError, match="tau"):
        hole_ratio(p, g, "0.1")
    with pytest.raises(TypeError, match="pred"):
        chamfer_distance(p.numpy(), g)
    with pytest.raises(ValueError, match="batch size"):
        chamfer_distance(p, g[:2])


def test_fps_and_config_rejections():
    p, _ = _clouds(n=5)
    with pytest.raises(ValueError, match="m must"):
        farthest_point_sample(p, 6)
    with pytest.raises(TypeError, match="m must"):
        farthest_point_sample(p, 2.0)
    with pytest.raises(ValueError, match="divisible"):
        PointAEConfig(dim=10, heads=4)
    with pytest.raises(ValueError, match="scheduler"):
        PointAEConfig(scheduler="sigmoid")
    with pytest.raises(ValueError, match="fm_loss"):
        PointAEConfig(fm_loss="l1")
    with pytest.raises(ValueError, match="num_latents"):
        PointAEConfig(num_latents=0)
    with pytest.raises(ValueError, match="num_latents"):
        _tiny(num_latents=20).encode(p)


def test_training_and_sampling_rejections():
    m = _tiny()
    x, _ = _clouds(b=2, n=8)
    with pytest.raises(ValueError, match="lr"):
        train_autoencoder(m, x, x, loss="flow", steps=1, lr=float("nan"), batch_size=2)
    with pytest.raises(ValueError, match="loss"):
        train_autoencoder(m, x, x, loss="l1", steps=1, lr=1e-3, batch_size=2)
    with pytest.raises(ValueError, match="same number"):
        train_autoencoder(m, x, x[:1], loss="flow", steps=1, lr=1e-3, batch_size=2)
    with pytest.raises(ValueError, match="batch_size"):
        train_autoencoder(m, x, x, loss="flow", steps=1, lr=1e-3, batch_size=0)
    with pytest.raises(ValueError, match="warmup"):
        train_autoencoder(m, x, x, loss="flow", steps=1, lr=1e-3, batch_size=2, warmup=1.0)
    with pytest.raises(ValueError, match="schedule"):
        train_autoencoder(m, x, x, loss="flow", steps=1, lr=1e-3, batch_size=2, schedule="step")
    with pytest.raises(ValueError, match="steps"):
        m.sample(torch.zeros(1, 4, 8), 3, steps=0)
    with pytest.raises(ValueError, match="n_points"):
        m.regress(torch.zeros(1, 4, 8), 0)
    with pytest.raises(ValueError, match="t must"):
        m.velocity(torch.rand(2, 5, 3), torch.rand(2, 4), torch.zeros(2, 4, 8))
    with pytest.raises(ValueError, match="direction"):
        visible_part(np.zeros((4, 3)), np.zeros(3))
    with pytest.raises(ValueError, match="n must"):
        sample_surface(random_shape(np.random.default_rng(0)), 0, np.random.default_rng(0))
