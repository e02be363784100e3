"""DART: equation tests against independent float64 references, reductions, rejection, smoke run."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from iclr26.multimodal.dart import (DARTLoss, DualEncoder, InfoNCELoss, IOTLoss, feature_cost,
                                    feature_transport_plan, info_nce_loss, iot_loss, reliability_scores,
                                    retrieval_metrics, uwd_loss)


def _pair(n=8, d=6, seed=0, noise=0.5, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, d, generator=g, dtype=dtype)
    b = a + noise * torch.randn(n, d, generator=g, dtype=dtype)
    return a, b


# ------------------------------------------------------------------ independent references
def ref_sinkhorn(C, eps, n_iter):
    """Plain-probability Sinkhorn between uniform marginals, float64, written from the definition."""
    n, m = C.shape
    a, b = np.full(n, 1 / n), np.full(m, 1 / m)
    K = np.exp(-C / eps)
    v = np.ones(m)
    for _ in range(n_iter):
        u = a / (K @ v)
        v = b / (K.T @ u)
    u = a / (K @ v)
    return u[:, None] * K * v[None, :]


def ref_unbalanced(C, a, b, reg, reg_m, n_iter=5000):
    """min <C,P> + reg KL(P || a b^T) + reg_m (KL(P1 || a) + KL(P^T1 || b)): Chizat et al. 2018 scaling."""
    K = np.outer(a, b) * np.exp(-C / reg)
    f = reg_m / (reg_m + reg)
    u, v = np.ones(len(a)), np.ones(len(b))
    for _ in range(n_iter):
        u = (a / (K @ v)) ** f
        v = (b / (K.T @ u)) ** f
    return u[:, None] * K * v[None, :]


# ---------------------------------------------------------------------------------- equations
def test_iot_loss_matches_reference_kl():
    a, b = _pair()
    A, B = a.numpy(), b.numpy()
    C = np.sqrt(((A[:, None, :] - B[None, :, :]) ** 2).sum(-1))  # Euclidean, as m-LTM (sqrt)
    C = C / C.max()
    # eps = 0.1 keeps the plain-probability reference well conditioned in float64
    P = ref_sinkhorn(C, 0.1, 400)
    n = len(A)
    kl = np.sum((1 / n) * np.log((1 / n) / np.diag(P)))  # KL(I/n || P)
    got = float(iot_loss(a, b, eps=0.1, n_iter=400))
    assert got == pytest.approx(kl, rel=1e-6, abs=1e-8)


def test_iot_loss_zero_for_perfect_well_separated_matching_and_positive_otherwise():
    a = torch.eye(6, dtype=torch.float64) * 10
    assert float(iot_loss(a, a.clone(), eps=0.03)) == pytest.approx(0.0, abs=1e-6)
    a, b = _pair(noise=2.0)
    assert float(iot_loss(a, b)) > 0.05


def test_iot_loss_is_differentiable_through_sinkhorn():
    a, b = _pair()
    a.requires_grad_(True)
    iot_loss(a, b).backward()
    assert a.grad is not None and torch.isfinite(a.grad).all() and a.grad.abs().sum() > 0


def test_info_nce_matches_manual_formula():
    a, b = _pair()
    an = a / a.norm(dim=1, keepdim=True)
    bn = b / b.norm(dim=1, keepdim=True)
    S = (an @ bn.T).numpy() / 0.1
    row = -np.mean(np.diag(S) - np.log(np.exp(S).sum(1)))
    col = -np.mean(np.diag(S) - np.log(np.exp(S).sum(0)))
    assert float(info_nce_loss(a, b, 0.1)) == pytest.approx(0.5 * (row + col), rel=1e-10)
    assert float(InfoNCELoss(0.1)(a, b)) == pytest.approx(0.5 * (row + col), rel=1e-10)


def test_reliability_scores_match_scipy_statistics():
    a, b = _pair(n=20, d=5, seed=3)
    A, B = a.numpy(), b.numpy()
    corr = np.array([stats.pearsonr(A[:, j], B[:, j])[0] for j in range(5)])
    var = 0.5 * (A.var(0) + B.var(0))
    kurt = 0.5 * (stats.kurtosis(A, axis=0, fisher=True, bias=True) + stats.kurtosis(B, axis=0, fisher=True, bias=True))
    expected = 1 / (1 + np.exp(-(corr - var - kurt)))
    np.testing.assert_allclose(reliability_scores(a, b).numpy(), expected, rtol=1e-10)


def test_reliability_prefers_consistent_light_tailed_channels():
    g = torch.Generator().manual_seed(0)
    z = 0.3 * torch.randn(256, 1, generator=g, dtype=torch.float64)  # embedding-scale variance ~0.09
    good = torch.cat([z, z + 0.03 * torch.randn(256, 1, generator=g, dtype=torch.float64)], 1)
    u = torch.cat([good[:, :1], torch.randn(256, 1, generator=g, dtype=torch.float64) ** 3], 1)
    v = torch.cat([good[:, 1:], torch.randn(256, 1, generator=g, dtype=torch.float64) ** 3], 1)
    r = reliability_scores(u, v)
    assert r[0] > 0.6 and r[1] < 0.1  # correlated Gaussian channel vs independent heavy-tailed one


def test_feature_cost_is_column_distance():
    a, b = _pair(n=7, d=4)
    C = feature_cost(a, b)
    for i in range(4):
        for j in range(4):
            assert float(C[i, j]) == pytest.approx(float(torch.linalg.norm(a[:, i] - b[:, j])), rel=1e-10)


def test_unbalanced_plan_matches_reference_and_pot_scaling():
    a, b = _pair(n=10, d=5, seed=1)
    C = feature_cost(a, b)
    u = torch.tensor([0.1, 0.3, 0.2, 0.25, 0.15], dtype=torch.float64)
    P = feature_transport_plan(C, u, u, reg=0.1, reg_m=0.5, n_iter=5000)
    Cn = (C / C.max()).numpy()
    np.testing.assert_allclose(P.numpy(), ref_unbalanced(Cn, u.numpy(), u.numpy(), 0.1, 0.5), rtol=1e-5, atol=1e-9)
    assert not P.requires_grad
    assert float(P.sum()) < 1.0  # unbalanced: some mass is destroyed


def test_uwd_gradient_is_that_of_a_fixed_plan():
    a, b = _pair(n=10, d=5, seed=2)
    a1 = a.clone().requires_grad_(True)
    uwd_loss(a1, b, reg=0.1, reg_m=1.0, n_iter=2000).backward()
    u = torch.full((5,), 0.2, dtype=torch.float64)
    P = feature_transport_plan(feature_cost(a, b), u, u, reg=0.1, reg_m=1.0, n_iter=2000)
    a2 = a.clone().requires_grad_(True)
    (feature_cost(a2, b) * P).sum().backward()
    torch.testing.assert_close(a1.grad, a2.grad)


# --------------------------------------------------------------------------------- reductions
def test_dart_with_lambda_zero_is_iot():
    a, b = _pair()
    assert float(DARTLoss(lam=0.0, eps=0.05)(a, b)) == pytest.approx(float(IOTLoss(eps=0.05)(a, b)), rel=1e-12)


def test_dart_is_iot_plus_lambda_uwd_with_ema_marginals():
    a1, b1 = _pair(seed=4)
    a2, b2 = _pair(seed=5)
    loss = DARTLoss(lam=0.5, eps=0.05, reg=0.1, reg_m=1.0, ema=0.9, uot_iter=3000)
    loss(a1, b1)
    total = loss(a2, b2)
    r = 0.9 * reliability_scores(a1, b1) + 0.1 * reliability_scores(a2, b2)
    torch.testing.assert_close(loss.reliability, r)
    m = r / r.sum()
    expected = iot_loss(a2, b2, eps=0.05) + 0.5 * uwd_loss(a2, b2, m, m, reg=0.1, reg_m=1.0, n_iter=3000)
    assert float(total) == pytest.approx(float(expected), rel=1e-9)


def test_uniform_marginals_control_uses_one_over_d():
    a, b = _pair()
    loss = DARTLoss(lam=0.5, marginals="uniform", reg=0.1, uot_iter=500)
    expected = iot_loss(a, b) + 0.5 * uwd_loss(a, b, reg=0.1, n_iter=500)
    assert float(loss(a, b)) == pytest.approx(float(expected), rel=1e-9)


def test_ema_frozen_in_eval_mode():
    a1, b1 = _pair(seed=4)
    a2, b2 = _pair(seed=5)
    loss = DARTLoss(lam=0.5)
    loss(a1, b1)
    before = loss.reliability.clone()
    loss.eval()
    loss(a2, b2)
    torch.testing.assert_close(loss.reliability, before)
    assert "reliability" in loss.state_dict()


def test_float32_and_batch_of_two_work():
    a, b = _pair(n=2, d=4, dtype=torch.float32)
    out = DARTLoss(lam=0.1)(a, b)
    assert out.dtype == torch.float32 and torch.isfinite(out)


# ----------------------------------------------------------------------------------- metrics
def test_retrieval_metrics_hand_example():
    a = torch.eye(4, dtype=torch.float64)
    b = a[[0, 1, 3, 2]]  # rows 2 and 3 swapped: half the queries miss at rank 1, all hit by rank 2
    m = retrieval_metrics(a, b, ks=(1, 2))
    assert m["a2b_R@1"] == 50.0 and m["a2b_R@2"] == 50.0  # a 0-similarity tie counts against the match
    m = retrieval_metrics(a, a.clone(), ks=(1, 5, 10))
    assert m["rsum"] == 600.0 and m["mean_R@1"] == 100.0


def test_retrieval_metrics_directions_differ():
    a = torch.tensor([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0]])
    b = torch.tensor([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0]])
    m = retrieval_metrics(a, b, ks=(1,))
    sim = torch.nn.functional.normalize(a, dim=1) @ torch.nn.functional.normalize(b, dim=1).T
    a2b = 100 * float((sim.argmax(1) == torch.arange(3)).double().mean())
    b2a = 100 * float((sim.argmax(0) == torch.arange(3)).double().mean())
    assert m["a2b_R@1"] == pytest.approx(a2b) and m["b2a_R@1"] == pytest.approx(b2a)


# ---------------------------------------------------------------------------------- rejection
@pytest.mark.parametrize("fn", [iot_loss, info_nce_loss, reliability_scores, uwd_loss])
def test_rejects_nan_wrong_shape_and_mismatch(fn):
    a, b = _pair()
    bad = a.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        fn(bad, b)
    with pytest.raises(ValueError, match="2-d"):
        fn(a[0], b[0])
    with pytest.raises(ValueError, match="same batch size"):
        fn(a, b[:-1])
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        fn(a.numpy(), b)


def test_rejects_bad_hyperparameters():
    a, b = _pair()
    with pytest.raises(ValueError, match="temperature"):
        info_nce_loss(a, b, temperature=0.0)
    with pytest.raises(ValueError, match="eps"):
        iot_loss(a, b, eps=-1.0)
    with pytest.raises(ValueError, match="n_iter"):
        iot_loss(a, b, n_iter=0)
    with pytest.raises(ValueError, match="lam"):
        DARTLoss(lam=-0.1)
    with pytest.raises(ValueError, match="lam"):
        DARTLoss(lam=float("nan"))
    with pytest.raises(ValueError, match="ema"):
        DARTLoss(ema=1.0)
    with pytest.raises(ValueError, match="marginals"):
        DARTLoss(marginals="learned")
    with pytest.raises(ValueError, match="reg_m"):
        DARTLoss(reg_m=0)
    with pytest.raises(TypeError, match="reg"):
        DARTLoss(reg="0.1")
    with pytest.raises(ValueError, match="equal embedding widths"):
        DARTLoss()(a, b[:, :-1])
    with pytest.raises(ValueError, match="u must be"):
        feature_transport_plan(feature_cost(a, b), -torch.ones(6), torch.ones(6))
    with pytest.raises(ValueError, match="d_a"):
        DualEncoder(0, 3)


def test_nonfinite_loss_is_loud():
    a = torch.full((4, 3), 1e30)
    with pytest.raises((FloatingPointError, ValueError)):
        iot_loss(a * 1e10, a)  # inf after scaling is rejected as non-finite input


# ------------------------------------------------------------------------------ experiment
def test_dual_encoder_learns_with_dart():
    torch.manual_seed(0)
    x = torch.randn(64, 10)
    y = x @ torch.randn(10, 12)
    model = DualEncoder(10, 12, dim=8, hidden=16)
    crit = DARTLoss(lam=0.1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for step in range(60):
        idx = torch.randperm(64)[:16]
        loss = crit(*model(x[idx], y[idx]))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:5])


def test_smoke_run_deterministic_and_complete():
    from iclr26.multimodal.dart import experiment as E

    out = E.run("smoke", 0)
    again = E.run("smoke", 0)
    assert out["metrics"] == again["metrics"]
    m = out["metrics"]
    assert set(m["n40_mean_R@1"]) == {"untrained", *E.ARMS}
    assert all(math.isfinite(v) for arms in m.values() for v in arms.values())
    assert m["n40_marginal_tv"]["dart"] > 0


def test_corrupt_rate_and_derangement():
    from iclr26.multimodal.dart.experiment import corrupt

    b = torch.arange(100, dtype=torch.float32)[:, None]
    out, noisy = corrupt(b, 0.4, np.random.default_rng(0))
    assert noisy.sum() == 40
    assert (out[noisy] != b[noisy]).all() and (out[~noisy] == b[~noisy]).all()


def test_iot_cost_is_euclidean_not_squared():
    """m-LTM takes the square root of the distance: the two costs give different losses."""
    a, b = _pair(noise=1.0)
    A, B = a.numpy(), b.numpy()
    sq = ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1)
    for C, same in ((np.sqrt(sq), True), (sq, False)):
        P = ref_sinkhorn(C / C.max(), 0.1, 400)
        kl = float(np.mean(np.log((1 / len(A)) / np.diag(P))))
        assert (float(iot_loss(a, b, eps=0.1, n_iter=400)) == pytest.approx(kl, rel=1e-6)) is same


def test_iot_gradient_finite_at_zero_distance():
    a, _ = _pair()
    a.requires_grad_(True)
    iot_loss(a, a.detach().clone(), eps=0.1).backward()
    assert torch.isfinite(a.grad).all()


# --------------------------------------------------------------------------- experiment wiring
def test_make_loss_wires_arms():
    from iclr26.multimodal.dart.experiment import make_loss

    ctrl = make_loss("dart_uniform", {"lam": 0.3}, 0.1)
    dart = make_loss("dart", {"lam": 1.0}, 0.3)
    assert isinstance(ctrl, DARTLoss) and ctrl.marginals == "uniform" and ctrl.eps == 0.1 and ctrl.lam == 0.3
    assert isinstance(dart, DARTLoss) and dart.marginals == "reliability" and dart.eps == 0.3 and dart.lam == 1.0
    assert isinstance(make_loss("iot", {"eps": 0.1}, 0.03), IOTLoss) and make_loss("iot", {"eps": 0.1}, 0.03).eps == 0.1
    t = make_loss("infonce", {"temperature": 0.56}, 0.03)
    assert isinstance(t, InfoNCELoss) and t.temperature == 0.56


def test_infonce_grid_reaches_above_the_old_edge():
    from iclr26.multimodal.dart import experiment as E

    temps = [p["temperature"] for p in E.GRIDS["infonce"][: E.grid_size("infonce", E.SCALES["quick"])]]
    assert max(temps) >= 0.56
    assert all(E.grid_size(a, E.SCALES["quick"]) == 3 for a in ("iot", "dart", "dart_uniform"))


def test_run_wiring_eps_noise_and_metric_per_arm(monkeypatch):
    """run() with fit/evaluate replaced: DART arms get IOT's chosen eps, the 40 % noise reaches the
    training partners (and only them), and each arm's test metric comes from its own chosen model."""
    from types import SimpleNamespace

    from iclr26.multimodal.dart import experiment as E

    monkeypatch.setitem(E.SCALES, "wiring", dict(n_train=200, n_val=50, n_test=60, steps=1, batch=8,
                                                  noise=(0.0, 0.4), grid=3))
    calls = []
    # validation score per arm and config: IOT prefers eps 0.3 (neither the default nor the first)
    pref = {"iot": {"eps": 0.3}, "infonce": {"temperature": 0.14}, "dart": {"lam": 0.3}, "dart_uniform": {"lam": 1.0}}

    def fake_fit(arm, params, data, cfg, seed, iot_eps=0.03):
        calls.append(dict(arm=arm, params=params, data=data, iot_eps=iot_eps))
        model = SimpleNamespace(arm=arm, params=params, eval=lambda: None)
        crit = SimpleNamespace(reliability=torch.tensor([1.0, 2.0, 3.0, 4.0]))
        return model, SimpleNamespace(final_loss=0.5), crit

    tags = {"iot": 1, "infonce": 2, "dart": 3, "dart_uniform": 4}
    real_evaluate = E.evaluate

    def fake_evaluate(model, pair):
        if not isinstance(model, SimpleNamespace):
            return real_evaluate(model, pair)  # the untrained floor
        best = pref[model.arm] == model.params
        return {"rsum": 10.0 if best else 1.0, "mean_R@1": 100.0 * tags[model.arm] + (1 if best else 0)}

    monkeypatch.setattr(E, "fit", fake_fit)
    monkeypatch.setattr(E, "evaluate", fake_evaluate)
    out = E.run("wiring", 0)
    m, chosen = out["metrics"], out["info"]["chosen"]
    for tag in ("n0", "n40"):
        assert chosen[tag]["iot"] == {"eps": 0.3}
        for arm, t in tags.items():
            assert m[f"{tag}_mean_R@1"][arm] == 100.0 * t + 1  # the chosen model of that very arm
    for c in calls:
        if c["arm"].startswith("dart"):
            assert c["iot_eps"] == 0.3
    assert sum(c["arm"] == "infonce" for c in calls) == 8  # 4 temperatures x 2 noise levels
    by_noise = {}
    for c in calls:
        by_noise.setdefault(id(c["data"][0][1]), c["data"])
    assert len(by_noise) == 2  # one training set per noise level
    d0, d40 = list(by_noise.values())
    assert torch.equal(d0[0][0], d40[0][0])  # the first view is never corrupted
    assert torch.equal(d0[1][1], d40[1][1]) and torch.equal(d0[2][1], d40[2][1])  # val / test clean
    changed = (d0[0][1] != d40[0][1]).any(1).float().mean().item()
    assert changed == pytest.approx(0.4, abs=0.01)
    assert m["n40_marginal_tv"]["dart"] == pytest.approx(0.5 * float((torch.tensor([1, 2, 3, 4.0]) / 10 - 0.25).abs().sum()))
