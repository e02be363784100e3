"""Tests of the shared diffusion / flow-matching substrate (iclr26.models.diffusion)."""
import math

import numpy as np
import pytest
import torch

from iclr26.models import diffusion as D


# ------------------------------------------------------------------------------------- data
def test_digits_splits_are_disjoint_stratified_and_scaled():
    Xa, ya = D.load_digits_8x8("all")
    parts = {s: D.load_digits_8x8(s) for s in ("train", "val", "test")}
    assert sum(len(p[0]) for p in parts.values()) == len(Xa) == 1797
    assert Xa.shape[1:] == (1, 8, 8) and Xa.dtype == np.float32
    assert Xa.min() == -1.0 and Xa.max() == 1.0
    rows = {s: {p[0][i].tobytes() + bytes([p[1][i]]) for i in range(len(p[0]))} for s, p in parts.items()}
    assert len(rows["val"] & rows["test"]) < 3                     # duplicates of identical images only
    for s, (X, y) in parts.items():
        frac = np.bincount(y, minlength=10) / len(y)
        assert np.all(np.abs(frac - 0.1) < 0.02), s
    assert len(parts["val"][0]) == len(parts["test"][0]) == 359
    np.testing.assert_array_equal(D.load_digits_8x8("val")[1], parts["val"][1])   # deterministic
    assert not np.array_equal(D.load_digits_8x8("val", seed=1)[1], parts["val"][1])


@pytest.mark.parametrize("kw", [dict(split="dev"), dict(val_frac=0.6, test_frac=0.5), dict(val_frac=0.0)])
def test_digits_rejects_bad_arguments(kw):
    with pytest.raises(ValueError, match="split|val_frac"):
        D.load_digits_8x8(**kw)


def test_mixture_score_matches_finite_differences_and_noising():
    rng = np.random.default_rng(0)
    g = D.GaussianMixture([[0.0, 1.0], [2.0, -1.0], [-1.5, 0.5]], std=[0.5, 1.0, 0.8], weights=[0.2, 0.5, 0.3])
    x = rng.standard_normal((5, 2))
    h = 1e-5
    fd = np.stack([(g.log_prob(x + h * e) - g.log_prob(x - h * e)) / (2 * h) for e in np.eye(2)], 1)
    np.testing.assert_allclose(g.score(x), fd, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g.score(x, component=1), (g.means[1] - x) / 1.0)
    np.testing.assert_allclose(g.posterior(x).sum(1), 1.0)
    # log_prob of a single Gaussian
    g1 = D.GaussianMixture([[1.0, 2.0]], std=2.0)
    ref = -0.5 * ((x - [1, 2]) ** 2).sum(1) / 4 - 2 * math.log(2) - math.log(2 * math.pi)
    np.testing.assert_allclose(g1.log_prob(x), ref)
    # noised law by Monte Carlo
    n = g.noised(0.6, 0.8)
    np.testing.assert_allclose(n.means, 0.6 * g.means)
    np.testing.assert_allclose(n.std, np.sqrt(0.36 * g.std**2 + 0.64))
    xs, lab = g.sample(200000, rng)
    z = 0.6 * xs + 0.8 * rng.standard_normal(xs.shape)
    xn, _ = n.sample(200000, rng)
    np.testing.assert_allclose(z.mean(0), xn.mean(0), atol=0.02)
    np.testing.assert_allclose(z.std(0), xn.std(0), atol=0.02)
    assert np.isclose((lab == 1).mean(), 0.5, atol=0.01)
    xc, lc = g.sample(10, rng, component=2)
    assert np.all(lc == 2)


def test_analytic_targets():
    r = D.ring_mixture(8, radius=4.0, std=0.5)
    np.testing.assert_allclose(np.linalg.norm(r.means, axis=1), 4.0)
    np.testing.assert_allclose(r.means[2], [0.0, 4.0], atol=1e-12)
    t = D.two_gaussians(9, std=0.7)
    np.testing.assert_allclose(t.means, np.stack([np.ones(9), -np.ones(9)]))
    assert t.dim == 9 and t.n_components == 2 and np.allclose(t.std, 0.7)


@pytest.mark.parametrize("call,match", [
    (lambda: D.GaussianMixture([[0.0]], std=-1.0), "std"),
    (lambda: D.GaussianMixture([[0.0], [1.0]], weights=[0.7, 0.7]), "weights"),
    (lambda: D.GaussianMixture([[0.0]]).noised(1.0, -0.1), "noise level"),
    (lambda: D.ring_mixture(0), "k must"),
    (lambda: D.two_gaussians(0), "d must"),
])
def test_mixture_rejections(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# -------------------------------------------------------------------------------- schedules
def test_cosine_schedule_reference_values():
    s = 0.008
    ref = lambda t: math.cos((t + s) / (1 + s) * math.pi / 2) ** 2 / math.cos(s / (1 + s) * math.pi / 2) ** 2
    for t in (0.0, 0.25, 0.5, 0.9):
        assert float(D.cosine_alpha_bar(t)) == pytest.approx(ref(t), rel=1e-5)
    assert float(D.cosine_alpha_bar(1.0)) == pytest.approx(1e-5)
    a, s_ = D.noise_coefficients(torch.tensor([0.3]), "eps")
    assert float(a**2 + s_**2) == pytest.approx(1.0)
    a, s_ = D.noise_coefficients(torch.tensor([0.3]), "flow")
    assert float(a) == pytest.approx(0.7) and float(s_) == pytest.approx(0.3)
    assert float(D.score_scale(0.25, "flow")) == pytest.approx(3.0)
    assert float(D.score_scale(0.5, "eps")) == pytest.approx(1 / math.sqrt(1 - ref(0.5)), rel=1e-5)
    with pytest.raises(ValueError, match="objective must be one of"):
        D.noise_coefficients(0.5, "v")


def test_timestep_embedding():
    e = D.timestep_embedding(torch.tensor([0.0, 0.5]), 7)
    assert e.shape == (2, 7)
    np.testing.assert_allclose(e[0, :3].numpy(), 1.0)              # cos(0)
    assert float(e[1, 3]) == pytest.approx(math.sin(500.0), abs=1e-4)
    assert float(e[0, 6]) == 0.0                                   # odd width: zero pad


# -------------------------------------------------------------------------------------- models
def test_tiny_dit_shapes_zero_init_and_state_dict_roundtrip():
    torch.manual_seed(0)
    m = D.TinyDiT(D.DiTConfig(depth=2, width=32, heads=4))
    x = torch.randn(3, 1, 8, 8)
    t, y = torch.rand(3), torch.tensor([0, 5, 10])
    out = m(x, t, y)
    assert out.shape == x.shape and torch.all(out == 0)            # adaLN-Zero output layer
    for p in m.parameters():
        torch.nn.init.normal_(p, std=0.1)
    out = m(x, t, y)
    assert out.abs().sum() > 0
    # labels change the output; patches map back to their place
    assert not torch.allclose(m(x, t, torch.tensor([1, 5, 10])), out)
    m2 = D.TinyDiT(D.DiTConfig(depth=2, width=32, heads=4))
    m2.load_state_dict(m.state_dict())
    torch.testing.assert_close(m2(x, t, y), out)
    with pytest.raises(ValueError, match="x must have shape"):
        m(torch.randn(3, 64), t, y)
    with pytest.raises(ValueError, match="labels must be in 0..10"):
        m(x, t, torch.tensor([0, 11, 1]))


def test_tiny_dit_patchify_is_local():
    torch.manual_seed(0)
    m = D.TinyDiT(D.DiTConfig(depth=1, width=16, heads=2))
    for p in m.parameters():
        torch.nn.init.normal_(p, std=0.1)
    m.blocks = torch.nn.ModuleList()                               # no mixing between tokens
    with torch.no_grad():
        m.pos.zero_()
    x = torch.randn(1, 1, 8, 8)
    x2 = x.clone()
    x2[0, 0, 0, 0] += 1.0                                          # a pixel of the first 2x2 patch
    t = torch.tensor([0.4])
    d = (m(x2, t, torch.tensor([3])) - m(x, t, torch.tensor([3]))).abs()[0, 0]
    assert d[:2, :2].sum() > 0 and d[2:].sum() == 0 and d[:, 2:].sum() == 0


@pytest.mark.parametrize("kw", [dict(patch=3), dict(width=30, heads=4), dict(depth=0)])
def test_dit_config_rejections(kw):
    with pytest.raises(ValueError):
        D.DiTConfig(**kw)


def test_conditional_mlp_contract():
    torch.manual_seed(0)
    m = D.ConditionalMLP(2, 3, width=16, depth=2)
    x = torch.randn(4, 2)
    out = m(x, torch.rand(4), torch.tensor([0, 1, 2, 3]))
    assert out.shape == (4, 2) and out.dtype == torch.float32
    with pytest.raises(ValueError, match=r"x must have shape \(B, 2\)"):
        m(torch.randn(4, 3), torch.rand(4), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError):
        D.ConditionalMLP(0, 3)


# ------------------------------------------------------------------------------------ training
class _Spy(torch.nn.Module):
    n_classes = 4

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(()))
        self.seen = []

    def forward(self, x, t, y):
        self.seen.append((x.clone(), t.clone(), y.clone()))
        return x * 0 + self.w


@pytest.mark.parametrize("objective", ["eps", "flow"])
def test_diffusion_loss_targets_and_label_dropout(objective):
    x0 = torch.randn(512, 2)
    y = torch.randint(0, 4, (512,))
    spy = _Spy()
    g = torch.Generator().manual_seed(0)
    loss = D.diffusion_loss(spy, x0, y, objective, p_uncond=0.25, generator=g)
    xt, t, yy = spy.seen[-1]
    g = torch.Generator().manual_seed(0)
    t_ref = torch.rand(512, generator=g)
    eps = torch.randn(x0.shape, generator=g)
    torch.testing.assert_close(t, t_ref)
    a, s = D.noise_coefficients(t_ref, objective)
    torch.testing.assert_close(xt, a[:, None] * x0 + s[:, None] * eps)
    target = eps if objective == "eps" else eps - x0
    assert float(loss) == pytest.approx(float((target**2).mean()), rel=1e-5)
    dropped = yy == 4
    assert 0.18 < dropped.float().mean() < 0.32
    assert torch.equal(yy[~dropped], y[~dropped])
    D.diffusion_loss(spy, x0, y, objective, p_uncond=0.0)
    assert not (spy.seen[-1][2] == 4).any()
    D.diffusion_loss(spy, x0, y, objective, p_uncond=1.0)
    assert (spy.seen[-1][2] == 4).all()
    with pytest.raises(ValueError, match="p_uncond"):
        D.diffusion_loss(spy, x0, y, objective, p_uncond=1.5)


def test_training_learns_a_mixture_and_ema():
    rng = np.random.default_rng(0)
    g = D.ring_mixture(4, radius=3.0, std=0.3)
    X, y = g.sample(2000, rng)
    torch.manual_seed(0)
    m = D.ConditionalMLP(2, 4, width=64, depth=2)
    losses = D.train_diffusion(m, X, y, "flow", steps=400, batch_size=128, lr=3e-3, seed=0, ema=None)
    assert np.mean(losses[-50:]) < 0.75 * np.mean(losses[:20])
    assert not m.training
    x = D.sample(m, torch.full((400,), 1), (2,), "flow", steps=30, generator=torch.Generator().manual_seed(1))
    assert np.linalg.norm(x.mean(0).numpy() - g.means[1]) < 0.5        # label 1 -> component 1
    torch.manual_seed(0)
    m2 = D.ConditionalMLP(2, 4, width=64, depth=2)
    D.train_diffusion(m2, X, y, "flow", steps=5, batch_size=16, seed=0, ema=0.5)
    with pytest.raises(ValueError, match="same length"):
        D.train_diffusion(m2, X, y[:-1], steps=1)
    with pytest.raises(ValueError, match="steps and batch_size"):
        D.train_diffusion(m2, X, y, steps=0)


def test_ema_replaces_weights_by_average():
    class Lin(torch.nn.Module):
        n_classes = 1

        def __init__(self):
            super().__init__()
            self.b = torch.nn.Parameter(torch.zeros(1))

        def forward(self, x, t, y):
            return x * 0 + self.b

    X, y = np.ones((8, 1), np.float32), np.zeros(8, np.int64)
    runs = {}
    for ema in (None, 0.9):
        m = Lin()
        D.train_diffusion(m, X, y, "flow", steps=20, batch_size=8, lr=0.1, seed=0, ema=ema)
        runs[ema] = float(m.b)
    assert runs[None] != pytest.approx(runs[0.9])
    assert abs(runs[0.9]) < abs(runs[None])                       # the average lags the iterate


# ------------------------------------------------------------------------------------ sampling
def test_cfg_callable():
    pc, pu = torch.tensor([1.0, 2.0]), torch.tensor([0.5, 3.0])
    torch.testing.assert_close(D.ClassifierFreeGuidance(2.0)(pc, pu, None), torch.tensor([2.0, 0.0]))
    torch.testing.assert_close(D.ClassifierFreeGuidance(0.0)(pc, pu, None), pc)
    with pytest.raises(ValueError, match="omega must be finite"):
        D.ClassifierFreeGuidance(float("nan"))


@pytest.mark.parametrize("objective", ["eps", "flow"])
def test_exact_model_score_scale_identity(objective):
    g = D.GaussianMixture([[2.0, 0.0], [-2.0, 1.0]], std=0.7)
    m = D.ExactMixtureModel(g, objective)
    x = torch.randn(6, 2, dtype=torch.float64)
    t = torch.full((6,), 0.4, dtype=torch.float64)
    pc, pu = m(x, t, torch.zeros(6, dtype=torch.long)), m(x, t, torch.full((6,), 2))
    a, s = (float(v) for v in D.noise_coefficients(0.4, objective))
    n = g.noised(a, s)
    ds = n.score(x.numpy(), 0) - n.score(x.numpy())
    c = float(D.score_scale(0.4, objective))
    np.testing.assert_allclose(ds, -c * (pc - pu).numpy(), rtol=1e-6, atol=1e-9)
    with pytest.raises(ValueError, match="labels must be in 0..2"):
        m(x, t, torch.full((6,), 3))


@pytest.mark.parametrize("objective,eta", [("eps", 0.0), ("eps", 1.0), ("flow", 0.0)])
def test_sampler_with_exact_scores_recovers_the_target(objective, eta):
    g = D.GaussianMixture([[3.0, 0.0], [-3.0, 0.0]], std=[0.5, 1.0], weights=[0.3, 0.7])
    m = D.ExactMixtureModel(g, objective)
    gen = torch.Generator().manual_seed(0)
    n = 4000
    x = D.sample(m, torch.full((n,), 2), (2,), objective, steps=200, eta=eta, generator=gen).numpy()
    share = (x[:, 0] > 0).mean()
    assert share == pytest.approx(0.3, abs=0.03)
    right = x[x[:, 0] > 0]
    assert right.mean(0) == pytest.approx([3.0, 0.0], abs=0.08)
    assert right.std(0) == pytest.approx([0.5, 0.5], abs=0.06)
    # conditional sampling picks the component, and omega = 0 guidance equals no guidance
    xc = D.sample(m, torch.full((n,), 1), (2,), objective, steps=100, eta=0.0, generator=torch.Generator().manual_seed(1))
    assert xc.numpy().mean(0) == pytest.approx([-3.0, 0.0], abs=0.08)
    assert xc.numpy().std(0) == pytest.approx([1.0, 1.0], abs=0.06)
    noise = torch.randn(50, 2, generator=torch.Generator().manual_seed(2))
    a = D.sample(m, torch.zeros(50, dtype=torch.long), (2,), objective, steps=20, noise=noise)
    b = D.sample(m, torch.zeros(50, dtype=torch.long), (2,), objective, steps=20, noise=noise,
                 guidance=D.ClassifierFreeGuidance(0.0))
    torch.testing.assert_close(a, b)
    c = D.sample(m, torch.zeros(50, dtype=torch.long), (2,), objective, steps=20, noise=noise,
                 guidance=D.ClassifierFreeGuidance(2.0))
    assert c[:, 0].mean() > a[:, 0].mean()                       # guidance pushes away from the other class


def test_sampler_clip_and_rejections():
    g = D.GaussianMixture([[3.0], [-3.0]], std=0.5)
    m = D.ExactMixtureModel(g, "eps")
    x = D.sample(m, torch.zeros(100, dtype=torch.long), (1,), "eps", steps=20, clip_x0=1.0,
                 generator=torch.Generator().manual_seed(0))
    assert x.abs().max() <= 1.0 and x.mean() > 0.95
    with pytest.raises(ValueError, match="steps must be"):
        D.sample(m, torch.zeros(2, dtype=torch.long), (1,), steps=0)
    with pytest.raises(ValueError, match="eta must be"):
        D.sample(m, torch.zeros(2, dtype=torch.long), (1,), eta=2.0)
    with pytest.raises(ValueError, match="objective"):
        D.ExactMixtureModel(g, "score")


# ---------------------------------------------------------------------------------- evaluation
def test_frechet_distance_closed_form():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4000, 3))
    b = a * np.array([1.0, 2.0, 0.5]) + np.array([1.0, 0.0, -1.0])
    Sa, Sb = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    w, V = np.linalg.eigh(Sa)
    ra = V @ np.diag(np.sqrt(w)) @ V.T
    w2 = np.linalg.eigvalsh(ra @ Sb @ ra)
    ref = np.sum((a.mean(0) - b.mean(0)) ** 2) + np.trace(Sa) + np.trace(Sb) - 2 * np.sum(np.sqrt(w2))
    assert D.frechet_distance(a, b) == pytest.approx(ref, rel=1e-6)
    assert D.frechet_distance(a, b) == pytest.approx(2 + 0 + 1 + 0.25, abs=0.15)
    assert D.frechet_distance(a, a) == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError, match="feature arrays"):
        D.frechet_distance(a, b[:, :2])


def test_knn_precision_recall():
    real = np.array([[0.0], [1.0], [2.0], [3.0]])
    fake = np.array([[0.5], [10.0]])
    # real 2-NN radii (k = 1): 1, 1, 1, 1 -> fake 0.5 inside, 10 outside
    p, r = D.knn_precision_recall(real, np.vstack([fake, [[11.0]]]), k=1)
    assert p == pytest.approx(2 / 3 * 0 + 1 / 3)
    # fake set {0.5, 10, 11}: radii 9.5, 1, 1 -> real points within 9.5 of 0.5: 0, 1, 2, 3 all
    assert r == pytest.approx(1.0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((200, 2))
    assert D.knn_precision_recall(x, x, k=3) == (1.0, 1.0)
    p, r = D.knn_precision_recall(x, x + 100.0, k=3)
    assert p == 0.0 and r == 0.0
    p, r = D.knn_precision_recall(x, 0.1 * rng.standard_normal((200, 2)), k=3)
    assert p > 0.9 and r < 0.5                                     # a collapsed sample: precise, no recall
    with pytest.raises(ValueError, match="k must be"):
        D.knn_precision_recall(x, x, k=0)
    with pytest.raises(ValueError, match="equal d"):
        D.knn_precision_recall(x, x[:, :1])


def test_feature_classifier_learns_digits():
    X, y = D.load_digits_8x8("train")
    Xt, yt = D.load_digits_8x8("test")
    fc = D.FeatureClassifier.fit(X, y, epochs=15, seed=0)
    assert (fc.predict(Xt) == yt).mean() > 0.9
    f = fc.features(Xt)
    assert f.shape == (len(Xt), 64) and f.dtype == np.float64
    assert D.frechet_distance(fc.features(X), f) < D.frechet_distance(fc.features(X), fc.features(-Xt))
    with pytest.raises(ValueError, match="64 features"):
        fc.features(np.zeros((2, 10)))
