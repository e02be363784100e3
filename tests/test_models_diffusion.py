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


# ------------------------------------------------------------------- public DiT pieces / video DiT
def test_dit_pieces_compose_to_the_forward_and_keep_the_state_dict_layout():
    torch.manual_seed(0)
    m = D.TinyDiT(D.DiTConfig(image_size=12, patch=3, channels=2, width=16, depth=2, heads=2))
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.2)
    x, t, y = torch.randn(3, 2, 12, 12), torch.rand(3), torch.tensor([0, 4, 10])
    h, cond = m.embed(x), m.condition(t, y)
    assert h.shape == (3, 16, 16) and cond.shape == (3, 16)
    for blk in m.blocks:
        h = blk(h, cond)
    torch.testing.assert_close(m.head(h, cond, x.shape), m(x, t, y))
    # the parameter set of the earlier layout (names and shapes), so earlier state dicts load
    assert {k: tuple(v.shape) for k, v in m.state_dict().items()} == {
        "pos": (1, 16, 16), "patch_in.weight": (16, 18), "patch_in.bias": (16,),
        "cond.label.weight": (11, 16), "cond.time.0.weight": (16, 16), "cond.time.0.bias": (16,),
        "cond.time.2.weight": (16, 16), "cond.time.2.bias": (16,),
        **{f"blocks.{i}.{k}": s for i in range(2) for k, s in {
            "attn.in_proj_weight": (48, 16), "attn.in_proj_bias": (48,), "attn.out_proj.weight": (16, 16),
            "attn.out_proj.bias": (16,), "mlp.0.weight": (64, 16), "mlp.0.bias": (64,), "mlp.2.weight": (16, 64),
            "mlp.2.bias": (16,), "ada.1.weight": (96, 16), "ada.1.bias": (96,)}.items()},
        "ada_out.1.weight": (32, 16), "ada_out.1.bias": (32,), "out.weight": (18, 16), "out.bias": (18,)}
    assert D._DiTBlock is D.DiTBlock and D._CondEmbed is D.CondEmbed


def test_seeded_initialisation_is_unchanged():
    """Values of the seeded default TinyDiT / TinyVideoDiT (recorded before the pieces were made
    public): the layers are created in the same order, so seeded runs keep their numbers."""
    from iclr26.models.video import TinyVideoDiT

    torch.manual_seed(0)
    m = D.TinyDiT()
    got = [float(m.pos.sum()), float(m.blocks[0].attn.in_proj_weight.sum()), float(m.cond.label.weight.sum()),
           float(m.blocks[-1].mlp[2].weight.sum())]
    assert got == pytest.approx([0.893902063369751, 8.56075668334961, -18.99164390563965, -3.2516095638275146],
                                rel=1e-6)
    torch.manual_seed(0)
    v = TinyVideoDiT()
    assert [float(v.pos.sum()), float(v.blocks[-1].mlp[2].weight.sum())] == pytest.approx(
        [-1.592711091041565, -4.178110599517822], rel=1e-6)


def test_patchify_token_order_and_round_trip():
    x = torch.arange(2 * 3 * 2 * 4 * 4, dtype=torch.float32).reshape(2, 3, 2, 4, 4)    # (B, F, C, H, W)
    tok = D.patchify(x, 2)
    assert tok.shape == (2, 3 * 4, 2 * 4)
    # token (frame 1, row 0, column 1): channel-major 2x2 patch
    want = x[0, 1, :, 0:2, 2:4].reshape(-1)
    torch.testing.assert_close(tok[0, 1 * 4 + 0 * 2 + 1], want)
    torch.testing.assert_close(D.unpatchify(tok, x.shape, 2), x)
    img = x[:, 0]
    torch.testing.assert_close(D.patchify(img, 2), tok[:, :4])                        # frame 0 = the image
    torch.testing.assert_close(D.unpatchify(D.patchify(img, 4), img.shape, 4), img)


def test_dit_block_per_token_condition_equals_broadcast_per_sample_condition():
    torch.manual_seed(0)
    blk = D.DiTBlock(8, 2)
    with torch.no_grad():
        blk.ada[1].weight.normal_(0, 0.5)
        blk.ada[1].bias.normal_(0, 0.5)
    h, c = torch.randn(2, 5, 8), torch.randn(2, 8)
    torch.testing.assert_close(blk(h, c), blk(h, c[:, None].expand(2, 5, 8)))
    c_tok = c[:, None].repeat(1, 5, 1)
    c_tok[:, 2] += 1.0                                   # another condition for token 2 only
    out, base = blk(h, c_tok), blk(h, c)
    assert not torch.allclose(out, base)
    # the first modulation of every other token is untouched: their pre-attention input is the same
    s1, b1 = blk.ada(c_tok).chunk(6, -1)[:2]
    u = blk.n1(h) * (1 + s1) + b1
    u0 = blk.n1(h) * (1 + blk.ada(c)[:, None].chunk(6, -1)[0]) + blk.ada(c)[:, None].chunk(6, -1)[1]
    keep = [0, 1, 3, 4]
    torch.testing.assert_close(u[:, keep], u0[:, keep])
    assert not torch.allclose(u[:, 2], u0[:, 2])


def test_final_layer_reference_and_zero_init():
    torch.manual_seed(1)
    cfg = D.DiTConfig(image_size=4, patch=2, channels=3, width=8, heads=2)
    norm, ada, out = D.output_layers(cfg)
    assert out.out_features == 12 and torch.all(ada[1].weight == 0) and torch.all(out.weight == 0)
    h, c = torch.randn(2, 4, 8), torch.randn(2, 8)
    assert torch.all(D.final_layer(h, c, norm, ada, out) == 0)
    with torch.no_grad():
        for p in (*ada.parameters(), *out.parameters()):
            p.normal_(0, 0.3)
    mod = (c * torch.sigmoid(c)) @ ada[1].weight.T + ada[1].bias
    sh, sc = mod[:, None].split(8, -1)
    ln = (h - h.mean(-1, keepdim=True)) / torch.sqrt(h.var(-1, unbiased=False, keepdim=True) + 1e-6)
    torch.testing.assert_close(D.final_layer(h, c, norm, ada, out), (ln * (1 + sc) + sh) @ out.weight.T + out.bias)
    proj, pos = D.input_layers(cfg, 7)
    assert (proj.in_features, proj.out_features, tuple(pos.shape)) == (12, 8, (1, 7, 8))


def test_check_dit_sizes_messages():
    with pytest.raises(ValueError, match="^image_size 9 must be divisible by patch 2$"):
        D.check_dit_sizes(9, 2, 8, 2, a=1)
    with pytest.raises(ValueError, match=r"^width 30 must be even and divisible by heads 4$"):
        D.check_dit_sizes(8, 2, 30, 4, a=1)
    with pytest.raises(ValueError, match="^a, b and c must be >= 1$"):
        D.check_dit_sizes(8, 2, 8, 2, a=1, b=0, c=2)
    with pytest.raises(ValueError, match="^channels, depth, heads and n_classes must be >= 1$"):
        D.DiTConfig(n_classes=0)
    with pytest.raises(ValueError, match="n_tokens must be >= 1"):
        D.TinyDiT(n_tokens=0)
    D.check_dit_sizes(4, 1, 2, 1, a=1)


def test_video_dit_is_the_dit_on_frame_tokens():
    from iclr26.models.video import TinyVideoDiT

    cfg = D.DiTConfig(image_size=8, patch=4, width=16, depth=1, heads=2)
    torch.manual_seed(0)
    v = TinyVideoDiT(3, cfg)
    assert isinstance(v, D.TinyDiT) and v.n_tokens == 12 and v.input_shape == (3, 1, 8, 8)
    with torch.no_grad():
        for p in v.parameters():
            p.normal_(0, 0.2)
    x, t, y = torch.randn(2, 3, 1, 8, 8), torch.rand(2), torch.tensor([1, 10])
    out = v(x, t, y)
    assert out.shape == x.shape
    # a 1-frame video DiT with the same weights (first 4 positions) is the image DiT
    img = D.TinyDiT(cfg)
    state = dict(v.state_dict(), pos=v.pos[:, :4].detach().clone())
    img.load_state_dict(state)
    v1 = TinyVideoDiT(1, cfg)
    v1.load_state_dict(state)
    torch.testing.assert_close(v1(x[:, :1], t, y)[:, 0], img(x[:, 0], t, y))
    with pytest.raises(ValueError, match=r"x must have shape \(B, 3, 1, 8, 8\)"):
        v(torch.randn(2, 1, 8, 8), t, y)
    with pytest.raises(ValueError, match="frames must be >= 1"):
        TinyVideoDiT(0, cfg)


# ---------------------------------------------------------------------- train_diffusion options
def _mlp(seed=0):
    torch.manual_seed(seed)
    return D.ConditionalMLP(2, 4, width=16, depth=1)


def _ring():
    return D.ring_mixture(4, radius=3.0, std=0.3).sample(300, np.random.default_rng(0))


@pytest.mark.parametrize("objective,ema", [("eps", 0.9), ("flow", None)])
def test_loss_callable_with_the_default_loss_is_the_default_path(objective, ema):
    X, y = _ring()
    a, b = _mlp(), _mlp()
    la = D.train_diffusion(a, X, y, objective, steps=15, batch_size=16, lr=3e-3, p_uncond=0.2, seed=3, ema=ema)
    lb = D.train_diffusion(b, X, y, objective, steps=15, batch_size=16, lr=3e-3, p_uncond=0.2, seed=3, ema=ema,
                           loss_fn=lambda m, x0, yb, g: D.diffusion_loss(m, x0, yb, objective, 0.2, g))
    assert la == lb
    for k, v in a.state_dict().items():
        assert torch.equal(v, b.state_dict()[k]), k
    c = _mlp()
    lc = D.train_diffusion(c, X, y, objective, steps=15, batch_size=16, lr=3e-3, p_uncond=0.2, seed=3, ema=ema,
                           loss_fn=lambda m, x0, yb, g: 2 * D.diffusion_loss(m, x0, yb, objective, 0.2, g))
    assert lc != la


def test_loss_callable_gets_the_batch_its_extra_rows_and_logs():
    X, y = _ring()
    extra = torch.arange(len(X)) * 10
    seen, hist = [], {}

    def loss_fn(m, x0, yb, g, extra):
        seen.append((x0.clone(), yb.clone(), extra.clone()))
        loss = D.diffusion_loss(m, x0, yb, "flow", 0.1, g)
        return loss, {"twice": 2 * float(loss)}

    losses = D.train_diffusion(_mlp(), X, y, "flow", steps=4, batch_size=8, seed=1, loss_fn=loss_fn, extra=extra,
                               history=hist)
    assert len(seen) == 4 and hist["twice"] == pytest.approx([2 * v for v in losses])
    Xt = torch.as_tensor(X, dtype=torch.float32)
    for x0, yb, ex in seen:
        idx = ex // 10                                           # the rows drawn this step
        torch.testing.assert_close(x0, Xt[idx])
        assert torch.equal(yb, torch.as_tensor(y)[idx])
    # same batches as the default path draws (the callable is called after the batch indices)
    g = torch.Generator().manual_seed(1)
    first = torch.randint(len(X), (8,), generator=g)
    assert torch.equal(seen[0][2] // 10, first)
    # without a history the logs are dropped
    D.train_diffusion(_mlp(), X, y, "flow", steps=2, batch_size=8, loss_fn=lambda m, x, yy, g, extra: (
        D.diffusion_loss(m, x, yy, "flow", 0.1, g), {"a": 1.0}), extra=extra)


class _Scalar(torch.nn.Module):
    n_classes = 1

    def __init__(self):
        super().__init__()
        self.b = torch.nn.Parameter(torch.zeros(()))


def test_constant_schedule_extra_params_and_checkpoints():
    X, y = _ring()
    # a loss whose gradient sign never changes: each AdamW step moves b by about the step's lr
    moved = {}
    for sched in ("constant", "cosine"):
        m = _Scalar()
        D.train_diffusion(m, X, y, steps=6, batch_size=4, lr=0.01, ema=None, lr_schedule=sched,
                          loss_fn=lambda mm, x0, yb, g: (mm.b - 100.0) ** 2)
        moved[sched] = float(m.b)
    assert moved["constant"] == pytest.approx(0.06, rel=1e-3)
    cosine = sum(0.01 * (1 + math.cos(math.pi * k / 6)) / 2 for k in range(6))
    assert moved["cosine"] == pytest.approx(cosine, rel=1e-3)
    # checkpoints see the averaged weights in eval mode, training is undisturbed, final = last average
    snaps = {}

    def snap(step, model):
        assert not model.training
        snaps[step] = {k: v.clone() for k, v in model.state_dict().items()}
    a, b = _mlp(), _mlp()
    D.train_diffusion(a, X, y, "flow", steps=6, batch_size=8, ema=0.5, checkpoints=(3, 6), on_checkpoint=snap)
    D.train_diffusion(b, X, y, "flow", steps=6, batch_size=8, ema=0.5)
    for k, v in a.state_dict().items():
        assert torch.equal(v, b.state_dict()[k])
        assert torch.equal(snaps[6][k], v)
    assert any(not torch.equal(snaps[3][k], snaps[6][k]) for k in snaps[3])
    # constant vs cosine schedules give different weights
    c, d = _mlp(), _mlp()
    D.train_diffusion(c, X, y, "flow", steps=6, batch_size=8, lr=1e-2, ema=None, lr_schedule="constant")
    D.train_diffusion(d, X, y, "flow", steps=6, batch_size=8, lr=1e-2, ema=None)
    assert any(not torch.equal(c.state_dict()[k], v) for k, v in d.state_dict().items())
    # extra parameters are optimised with the model but not averaged into it
    w = torch.nn.Parameter(torch.ones(()))
    e = _mlp()
    D.train_diffusion(e, X, y, "flow", steps=3, batch_size=8, ema=0.5, extra_params=[w],
                      loss_fn=lambda m, x0, yb, g: D.diffusion_loss(m, x0, yb, "flow", 0.1, g) + w ** 2)
    assert float(w) < 1.0


def test_train_diffusion_option_rejections():
    X, y = _ring()
    m = _mlp()
    with pytest.raises(ValueError, match=r"^lr_schedule must be one of \('cosine', 'constant'\), got 'step'$"):
        D.train_diffusion(m, X, y, steps=2, lr_schedule="step")
    with pytest.raises(ValueError, match=r"^checkpoints must lie in 1..2, got \[3\]$"):
        D.train_diffusion(m, X, y, steps=2, checkpoints=(3,))
    with pytest.raises(ValueError, match=r"^checkpoints must lie in 1..2, got \[0\]$"):
        D.train_diffusion(m, X, y, steps=2, checkpoints=(0, 2))
    with pytest.raises(ValueError, match=r"^extra must have one row per example of X \(300\), got 5$"):
        D.train_diffusion(m, X, y, steps=2, extra=np.zeros(5), loss_fn=lambda *a, **k: None)
