"""Tests of Brain-Semantoks (ICLR 2026): MCR loss vs independent references, tokenizer locality,
curriculum, masking and crops, the scikit-learn embedder, the simulator, bad input."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from iclr26.multimodal.brain_semantoks import (BrainSemantoksEmbedder, NetworkTokenizer, SemantoksEncoder, SimDINO,
                                               coding_rate, crop_pair, mcr_loss, network_weight, slice_mask)
from iclr26.multimodal.brain_semantoks import experiment, simulator


def _unit(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return F.normalize(torch.randn(*shape, generator=g, dtype=torch.float64), dim=-1)


# ------------------------------------------------------------------ equations
def test_coding_rate_is_half_logdet():
    z = _unit(20, 6)
    m, p = z.shape
    ref = 0.5 * np.linalg.slogdet(np.eye(p) + p / (m * 0.05) * (z.numpy().T @ z.numpy()))[1]
    assert coding_rate(z, 0.05).item() == pytest.approx(ref, rel=1e-10)
    # eps enters as p / (m eps): a larger eps gives a smaller rate
    assert coding_rate(z, 0.5).item() < coding_rate(z, 0.05).item()


def test_mcr_loss_matches_loop_reference():
    s, t = _unit(2, 16, 5, seed=1), _unit(2, 16, 5, seed=2)
    v, m, p = s.shape
    comp = sum(float((s[j] * t[i]).sum(-1).mean()) for i in range(v) for j in range(v) if i != j) / (v * v - v)
    expa = 0.0
    for i in range(v):
        zz = ((s[i] + t[i]) / 2).numpy()
        expa += 0.5 * np.linalg.slogdet(np.eye(p) + p / (m * 0.05) * zz.T @ zz)[1]
    expa = expa / v * (p + m) / (p * m)
    assert mcr_loss(s, t, 0.05, coeff=1.0).item() == pytest.approx(-comp - expa, rel=1e-10)
    assert mcr_loss(s, t, 0.05, coeff=2.0).item() == pytest.approx(-2 * comp - expa, rel=1e-10)


def test_mcr_compression_ignores_same_view_pairs():
    # identical student/teacher per view but views unrelated: only i != j pairs count
    s = _unit(2, 32, 4, seed=3)
    t = s.clone()
    v_loss = mcr_loss(s, t, coeff=1.0) - mcr_loss(s, t, coeff=0.0)
    cross = 0.5 * ((s[0] * s[1]).sum(-1).mean() + (s[1] * s[0]).sum(-1).mean())
    assert v_loss.item() == pytest.approx(-cross.item(), rel=1e-9)


def test_mcr_rewards_aligned_and_spread_features():
    aligned = _unit(1, 64, 8, seed=4).expand(2, -1, -1)
    other = _unit(2, 64, 8, seed=5)
    assert mcr_loss(aligned, aligned).item() < mcr_loss(other, other).item()
    collapsed = F.normalize(torch.ones(2, 64, 8, dtype=torch.float64), dim=-1)
    assert mcr_loss(aligned, aligned).item() < mcr_loss(collapsed, collapsed).item()


def test_network_weight_cosine_curriculum():
    assert network_weight(0, 0.5, 5) == pytest.approx(0.5)
    assert network_weight(2.5, 0.5, 5) == pytest.approx(0.25)
    assert network_weight(5, 0.5, 5) == 0.0
    assert network_weight(7, 0.5, 5) == 0.0
    assert network_weight(1, 0.5, 0) == 0.0
    assert network_weight(1.0, 1.0, 4) == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))


# ------------------------------------------------------------------ tokenizer and encoder
def test_network_token_sees_only_its_rois():
    idx = np.array([0, 0, 1, 1, 1, 2])
    tok = NetworkTokenizer(idx, dim=8, patch_size=5)
    x = torch.randn(2, 6, 20)
    base = tok(x)
    assert base.shape == (2, 3, 4, 8)
    x2 = x.clone()
    x2[:, 2:5] += 3 * torch.randn(2, 3, 20)  # change network 1's ROIs only
    out = tok(x2)
    torch.testing.assert_close(out[:, 0], base[:, 0])
    torch.testing.assert_close(out[:, 2], base[:, 2])
    assert not torch.allclose(out[:, 1], base[:, 1])


def test_tokenizer_patch_pooling_matches_reference():
    tok = NetworkTokenizer(np.array([0, 1]), dim=3, patch_size=4)
    x = torch.randn(1, 2, 8)
    h = F.gelu(F.conv1d(x, tok.conv.weight * tok.weight_mask, tok.conv.bias, padding="same"))
    ref0 = F.layer_norm(h[0, :3, 4:8].mean(-1), (3,), tok.norm.weight, tok.norm.bias)  # network 0, patch 1
    torch.testing.assert_close(tok(x)[0, 0, 1], ref0)


def test_roi_tokens_are_one_network_per_roi():
    enc = SemantoksEncoder(np.arange(7), n_patches=2, dim=16, depth=1, patch_size=5)
    out = enc(torch.randn(3, 7, 10))
    assert out.shape == (3, 1 + 7 * 2, 16)
    assert SemantoksEncoder.cls_avg(out).shape == (3, 32)


def test_encoder_mask_replaces_tokens():
    torch.manual_seed(0)
    enc = SemantoksEncoder(np.repeat(np.arange(3), 2), n_patches=4, dim=16, depth=1, patch_size=5).eval()
    x = torch.randn(2, 6, 20)
    m = torch.zeros(2, 3, 4, dtype=torch.bool)
    torch.testing.assert_close(enc(x, m), enc(x))
    m[:, :, 1] = True
    x2 = x.clone()
    x2[:, :, 6:9] = 100.0  # inside the masked patch (kernel 3 reaches one TR across its edges)
    torch.testing.assert_close(enc(x2, m), enc(x, m))


def test_slice_mask_masks_whole_slices_with_bounds():
    g = torch.Generator().manual_seed(0)
    m = slice_mask(50, 4, 5, (0.65, 0.85), g)
    assert m.shape == (50, 4, 5)
    assert (m == m[:, :1]).all()  # every network masked at the same slices
    n = m[:, 0].sum(1)
    assert ((n >= 3) & (n <= 4)).all()
    assert slice_mask(5, 2, 2, (0.0, 0.0), g)[:, 0].sum(1).eq(1).all()  # at least one, at most P - 1


def test_crop_pair_distance_and_content():
    g = torch.Generator().manual_seed(1)
    x = torch.arange(100.0).view(1, 1, 100).expand(200, 3, 100).contiguous()
    a, b = crop_pair(x, 30, 10, g)
    s1, s2 = a[:, 0, 0], b[:, 0, 0]
    assert (torch.abs(s1 - s2) <= 10).all() and (s1 >= 0).all() and (s2 <= 70).all()
    torch.testing.assert_close(a[:, 0, 1:] - a[:, 0, :-1], torch.ones(200, 29))
    a0, b0 = crop_pair(x, 30, 0, g)
    torch.testing.assert_close(a0, b0)


def test_teacher_ema_update():
    enc = SemantoksEncoder(np.arange(3), n_patches=2, dim=16, depth=1, patch_size=5)
    model = SimDINO(enc, momentum=0.9)
    with torch.no_grad():
        for p in model.student.parameters():
            p.add_(1.0)
    t_before = [p.clone() for p in model.teacher.parameters()]
    model.update_teacher(0, 10)  # step 0: momentum = base 0.9
    for pb, pt, ps in zip(t_before, model.teacher.parameters(), model.student.parameters()):
        torch.testing.assert_close(pt, 0.9 * pb + 0.1 * ps)
    before = [p.clone() for p in model.teacher.parameters()]
    model.update_teacher(10, 10)  # last step: momentum 1, teacher frozen
    for pb, pt in zip(before, model.teacher.parameters()):
        torch.testing.assert_close(pt, pb)


def test_simdino_loss_reduces_to_cls_mcr_without_extra_terms():
    torch.manual_seed(0)
    enc = SemantoksEncoder(np.repeat(np.arange(3), 2), n_patches=2, dim=16, depth=1, patch_size=5)
    model = SimDINO(enc, network_loss_weight=0.0, mask_loss_weight=0.0)
    x1, x2 = torch.randn(8, 6, 10), torch.randn(8, 6, 10)
    g = torch.Generator().manual_seed(0)
    loss = model.loss(x1, x2, epoch=0, generator=g)
    masks = [slice_mask(8, 3, 2, model.mask_ratio, torch.Generator().manual_seed(0)) for _ in range(2)]
    g2 = torch.Generator().manual_seed(0)
    masks = [slice_mask(8, 3, 2, model.mask_ratio, g2) for _ in range(2)]
    s = torch.stack([model.head(enc(x, m)[:, 0]) for x, m in zip((x1, x2), masks)])
    with torch.no_grad():
        t = torch.stack([model.teacher_head(model.teacher(x)[:, 0]) for x in (x1, x2)])
    torch.testing.assert_close(loss, mcr_loss(s, t))
    # the network term is on at epoch 0 and changes the loss, and is off past the curriculum
    model.network_loss_weight = 0.5
    on = model.loss(x1, x2, 0, torch.Generator().manual_seed(0))
    off = model.loss(x1, x2, 10, torch.Generator().manual_seed(0))
    assert not torch.isclose(on, loss) and torch.isclose(off, loss)


# ------------------------------------------------------------------ estimator
def _data(n=24, seed=0):
    return simulator.simulate(n, np.random.default_rng(seed), T=40, rois_per_network=2)


def test_embedder_fit_transform_shapes_and_determinism():
    X, _ = _data()
    kw = dict(network_index=simulator.network_index(2), dim=16, depth=1, crop_length=20, patch_size=5,
              max_crop_distance=10, steps=3, batch_size=8, n_test_crops=2, random_state=3)
    F1 = BrainSemantoksEmbedder(**kw).fit_transform(X)
    F2 = BrainSemantoksEmbedder(**kw).fit(X).transform(X)
    assert F1.shape == (24, 32) and np.isfinite(F1).all()
    np.testing.assert_array_equal(F1, F2)
    for obj in ("masked_reconstruction",):
        e = BrainSemantoksEmbedder(**{**kw, "objective": obj}).fit(X)
        assert e.transform(X).shape == (24, 32) and len(e.loss_curve_) == 3


def test_embedder_steps_zero_is_untrained_and_training_changes_features():
    X, _ = _data()
    kw = dict(network_index=simulator.network_index(2), dim=16, depth=1, crop_length=20, patch_size=5,
              batch_size=8, n_test_crops=2, random_state=0, lr=3e-3)
    F0 = BrainSemantoksEmbedder(steps=0, **kw).fit_transform(X)
    F5 = BrainSemantoksEmbedder(steps=5, momentum=0.0, **kw).fit_transform(X)
    assert not np.allclose(F0, F5)


def test_embedder_sklearn_contract():
    from sklearn.base import clone
    e = BrainSemantoksEmbedder(steps=7, dim=32)
    c = clone(e)
    assert c.get_params()["steps"] == 7 and c.get_params()["dim"] == 32


def test_embedder_stops_at_nonfinite_loss(monkeypatch):
    X, _ = _data()
    real = SimDINO.loss
    monkeypatch.setattr(SimDINO, "loss", lambda self, *a, **k: real(self, *a, **k) * float("nan"))
    e = BrainSemantoksEmbedder(dim=16, depth=1, crop_length=20, patch_size=5, steps=2, batch_size=8)
    with pytest.raises(ValueError, match="non-finite loss"):
        e.fit(X)


@pytest.mark.parametrize("kw, match", [
    (dict(steps=-1), "steps"), (dict(batch_size=0), "batch_size"), (dict(crop_length=21), "multiple of patch_size"),
    (dict(crop_length=80), "exceeds"), (dict(lr=0.0), "lr"), (dict(max_crop_distance=-1), "max_crop_distance"),
    (dict(objective="mae"), "objective"), (dict(network_index=np.arange(3)), "network_index"),
    (dict(momentum=1.0), "momentum"), (dict(mask_loss_weight=-1.0), "mask_loss_weight"),
])
def test_embedder_rejects_bad_settings(kw, match):
    X, _ = _data()
    base = dict(dim=16, depth=1, crop_length=20, patch_size=5, steps=1, batch_size=8)
    with pytest.raises(ValueError, match=match):
        BrainSemantoksEmbedder(**{**base, **kw}).fit(X)


def test_embedder_rejects_bad_input():
    X, _ = _data()
    e = BrainSemantoksEmbedder()
    with pytest.raises(ValueError, match="X must be"):
        e.fit(X[0])
    bad = X.copy()
    bad[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        e.fit(bad)
    fitted = BrainSemantoksEmbedder(dim=16, depth=1, crop_length=20, patch_size=5, steps=0).fit(X)
    with pytest.raises(ValueError, match="ROIs"):
        fitted.transform(X[:, :5])


def test_component_rejections():
    with pytest.raises(ValueError, match="network_index"):
        NetworkTokenizer(np.array([0, 2]))
    with pytest.raises(ValueError, match="network_index"):
        NetworkTokenizer(np.array([0.5, 1.0]))
    with pytest.raises(ValueError, match="patch_size"):
        NetworkTokenizer(np.array([0, 1]), patch_size=0)
    with pytest.raises(ValueError, match="multiple of patch_size"):
        NetworkTokenizer(np.array([0, 1]), patch_size=4)(torch.randn(1, 2, 10))
    with pytest.raises(ValueError, match="eps"):
        coding_rate(torch.randn(4, 3), eps=0.0)
    with pytest.raises(ValueError, match="must match"):
        mcr_loss(_unit(2, 4, 3), _unit(2, 5, 3))
    with pytest.raises(ValueError, match="at least 2 views"):
        mcr_loss(_unit(1, 4, 3), _unit(1, 4, 3))
    nan = _unit(2, 4, 3)
    nan[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):
        mcr_loss(nan, _unit(2, 4, 3))
    with pytest.raises(ValueError, match="mask ratio"):
        slice_mask(2, 2, 2, (0.5, 1.0), torch.Generator())
    with pytest.raises(ValueError, match="crop length"):
        crop_pair(torch.randn(1, 2, 5), 6, 0, torch.Generator())


# ------------------------------------------------------------------ simulator and experiment
def test_simulator_phenotype_lives_in_network_coupling():
    X, y = simulator.simulate(300, np.random.default_rng(0), T=120, snr=5.0, effect=0.2)
    idx = simulator.network_index()
    m = np.stack([X[:, idx == k].mean(1) for k in range(9)], 1)
    c01 = np.array([np.corrcoef(a[0], a[1])[0, 1] for a in m])
    c23 = np.array([np.corrcoef(a[2], a[3])[0, 1] for a in m])
    assert c01[y == 1].mean() - c01[y == 0].mean() > 0.2
    assert abs(c23[y == 1].mean() - c23[y == 0].mean()) < 0.1
    assert X.shape == (300, 45, 120) and np.allclose(X.mean(2), 0, atol=1e-5)


def test_simulator_rejects_bad_input():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="snr"):
        simulator.simulate(5, rng, snr=0.0)
    with pytest.raises(ValueError, match="site"):
        simulator.simulate(5, rng, site=2)


def test_fc_features_and_probe():
    X, y = simulator.simulate(200, np.random.default_rng(1), T=120, effect=0.2)
    Fc = experiment.fc_features(X)
    assert Fc.shape == (200, 45 * 44 // 2)
    (acc,), C = experiment.probe(Fc[:150], y[:150], [(Fc[150:], y[150:])], 0)
    assert acc > 0.6 and C > 0


def test_experiment_smoke_arms():
    out = experiment.run("smoke", 0)
    arms = {"semantoks", "roi_tokens", "masked_recon", "random_init", "fc_logreg"}
    assert set(out["metrics"]["balanced_accuracy"]) == arms
    assert set(out["metrics"]["balanced_accuracy_site2"]) == arms
