"""Tests for iclr26.optimization.csam (SAM, CSAM, calibration metrics)."""
import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from iclr26.optimization.csam import (CSAM, SAM, adaptive_ece, brier_score, csam_loss,
                                      expected_calibration_error, nll)


def _toy(seed=0):
    torch.manual_seed(seed)
    x = torch.randn(32, 5)
    y = torch.randint(0, 3, (32,))
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
    return model, x, y


def _sam_closure(model, x, y):
    def closure():
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        return loss
    return closure


def _csam_closure(model, x, y):
    def closure(loss_fn):
        loss = loss_fn(model(x), y)
        loss.backward()
        return loss
    return closure


def _params(m):
    return torch.cat([p.detach().flatten() for p in m.parameters()])


# ---------------------------------------------------------------- equation tests (CSAM loss)
def test_csam_loss_piecewise_hand_values():
    # p_y = 0.8 > 1/2: loss = -(1 + 0.8)^(-gamma) log 0.8 ; p_y = 0.3 <= 1/2: loss = -log 0.3
    logits = torch.log(torch.tensor([[0.8, 0.1, 0.1], [0.3, 0.5, 0.2]]))
    y = torch.tensor([0, 0])
    for gamma in (0.5, 1.0, 2.0):
        got = csam_loss(logits, y, gamma=gamma, reduction="none")
        want = [-(1.8 ** -gamma) * math.log(0.8), -math.log(0.3)]
        assert got.tolist() == pytest.approx(want, rel=1e-5)


def test_csam_loss_gamma_zero_is_cross_entropy():
    torch.manual_seed(0)
    logits, y = torch.randn(50, 4) * 3, torch.randint(0, 4, (50,))
    assert torch.allclose(csam_loss(logits, y, gamma=0.0), F.cross_entropy(logits, y), atol=1e-6)


def test_csam_loss_downweights_only_confident():
    torch.manual_seed(1)
    logits, y = torch.randn(200, 3) * 4, torch.randint(0, 3, (200,))
    ce = F.cross_entropy(logits, y, reduction="none")
    cs = csam_loss(logits, y, gamma=1.0, reduction="none")
    p = F.softmax(logits, -1).gather(1, y[:, None]).squeeze(1)
    assert torch.allclose(cs[p <= 0.5], ce[p <= 0.5])
    assert torch.all(cs[p > 0.5] < ce[p > 0.5])


# ---------------------------------------------------------------- SAM mechanics
def test_sam_first_step_moves_by_rho_along_gradient():
    model, x, y = _toy()
    opt = SAM(model.parameters(), torch.optim.SGD, rho=0.1, lr=0.1)
    before = _params(model)
    F.cross_entropy(model(x), y).backward()
    g = torch.cat([p.grad.flatten() for p in model.parameters()])
    opt.first_step()
    delta = _params(model) - before
    assert delta.norm().item() == pytest.approx(0.1, rel=1e-4)
    assert torch.allclose(delta, 0.1 * g / g.norm(), atol=1e-6)
    F.cross_entropy(model(x), y).backward()
    opt.second_step()


def test_sam_step_uses_gradient_at_perturbed_point():
    model, x, y = _toy()
    ref = copy.deepcopy(model)
    opt = SAM(model.parameters(), torch.optim.SGD, rho=0.05, lr=0.5)
    opt.step(_sam_closure(model, x, y))
    # independent reference: theta - lr * grad L(theta + rho g/|g|)
    loss = F.cross_entropy(ref(x), y)
    grads = torch.autograd.grad(loss, list(ref.parameters()))
    gn = torch.cat([g.flatten() for g in grads]).norm()
    pert = [p.detach() + 0.05 * g / gn for p, g in zip(ref.parameters(), grads)]
    pert = [p.requires_grad_() for p in pert]
    h = torch.tanh(x @ pert[0].T + pert[1])
    g2 = torch.autograd.grad(F.cross_entropy(h @ pert[2].T + pert[3], y), pert)
    want = torch.cat([(p.detach() - 0.5 * g).flatten() for p, g in zip(ref.parameters(), g2)])
    assert torch.allclose(_params(model), want, atol=1e-6)


# ---------------------------------------------------------------- reduction tests
def test_sam_rho_zero_equals_base_sgd():
    model, x, y = _toy()
    twin = copy.deepcopy(model)
    sam = SAM(model.parameters(), torch.optim.SGD, rho=0.0, lr=0.1, momentum=0.9)
    sgd = torch.optim.SGD(twin.parameters(), lr=0.1, momentum=0.9)
    for _ in range(5):
        sam.step(_sam_closure(model, x, y))
        sgd.zero_grad()
        F.cross_entropy(twin(x), y).backward()
        sgd.step()
    assert torch.allclose(_params(model), _params(twin), atol=1e-6)


def test_csam_gamma_zero_equals_sam():
    model, x, y = _toy()
    twin = copy.deepcopy(model)
    csam = CSAM(model.parameters(), torch.optim.SGD, rho=0.05, gamma=0.0, lr=0.5, momentum=0.9)
    sam = SAM(twin.parameters(), torch.optim.SGD, rho=0.05, lr=0.5, momentum=0.9)
    for _ in range(20):
        csam.step(_csam_closure(model, x, y))
        sam.step(_sam_closure(twin, x, y))
    assert torch.allclose(_params(model), _params(twin), atol=1e-6)


def test_csam_differs_from_sam_once_confident():
    model, x, y = _toy()
    twin = copy.deepcopy(model)
    csam = CSAM(model.parameters(), torch.optim.SGD, rho=0.05, gamma=2.0, lr=0.5)
    sam = SAM(twin.parameters(), torch.optim.SGD, rho=0.05, lr=0.5)
    for _ in range(40):
        csam.step(_csam_closure(model, x, y))
        sam.step(_sam_closure(twin, x, y))
    assert not torch.allclose(_params(model), _params(twin), atol=1e-4)


# ---------------------------------------------------------------- contract tests
@pytest.mark.parametrize("cls,closure", [(SAM, _sam_closure), (CSAM, _csam_closure)])
def test_state_dict_round_trip(cls, closure):
    model, x, y = _toy()
    opt = cls(model.parameters(), torch.optim.SGD, rho=0.05, lr=0.1, momentum=0.9)
    for _ in range(3):
        opt.step(closure(model, x, y))
    twin = copy.deepcopy(model)
    opt2 = cls(twin.parameters(), torch.optim.SGD, rho=0.05, lr=0.1, momentum=0.9)
    opt2.load_state_dict(copy.deepcopy(opt.state_dict()))
    for _ in range(3):
        opt.step(closure(model, x, y))
        opt2.step(closure(twin, x, y))
    assert torch.allclose(_params(model), _params(twin), atol=1e-7)
    assert opt2.base_optimizer.param_groups is opt2.param_groups


def test_scheduler_drives_base_optimizer():
    model, x, y = _toy()
    opt = SAM(model.parameters(), torch.optim.SGD, rho=0.05, lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    opt.step(_sam_closure(model, x, y))
    sched.step()
    assert opt.base_optimizer.param_groups[0]["lr"] == pytest.approx(0.5)


def test_works_with_adamw_base():
    model, x, y = _toy()
    opt = CSAM(model.parameters(), torch.optim.AdamW, rho=0.2, gamma=1.0, lr=1e-2)
    first = F.cross_entropy(model(x), y).item()
    for _ in range(30):
        opt.step(_csam_closure(model, x, y))
    assert F.cross_entropy(model(x), y).item() < first


# ---------------------------------------------------------------- rejection tests
@pytest.mark.parametrize("kwargs,match", [
    (dict(rho=-0.1), "rho"),
    (dict(base_optimizer=object), "base_optimizer"),
    (dict(adaptive="yes"), "adaptive"),
])
def test_sam_rejects_bad_hyperparameters(kwargs, match):
    model, _, _ = _toy()
    with pytest.raises((ValueError, TypeError), match=match):
        SAM(model.parameters(), **{"lr": 0.1, **kwargs})


def test_csam_rejects_bad_gamma_and_missing_closure():
    model, _, _ = _toy()
    with pytest.raises(ValueError, match="gamma"):
        CSAM(model.parameters(), lr=0.1, gamma=-1.0)
    with pytest.raises(ValueError, match="closure"):
        CSAM(model.parameters(), lr=0.1).step()
    with pytest.raises(ValueError, match="closure"):
        SAM(model.parameters(), lr=0.1).step()


def test_metrics_reject_bad_input():
    with pytest.raises(ValueError, match="probabilities"):
        expected_calibration_error(np.array([[2.0, -1.0]]), np.array([0]))
    with pytest.raises(ValueError, match="labels"):
        expected_calibration_error(np.array([[0.5, 0.5]]), np.array([3]))
    with pytest.raises(ValueError, match="n_bins"):
        expected_calibration_error(np.array([[0.5, 0.5]]), np.array([0]), n_bins=0)


# ---------------------------------------------------------------- calibration metric equations
def test_ece_hand_computed():
    # 15 bins. confidences 0.95 (correct), 0.95 (wrong), 0.6 (correct), 0.55 (wrong)
    probs = np.array([[0.95, 0.05], [0.95, 0.05], [0.6, 0.4], [0.45, 0.55]])
    labels = np.array([0, 1, 0, 0])
    # bins: 0.95 -> (14/15, 1]; 0.6 -> (8/15, 9/15]; 0.55 -> (8/15, 9/15]
    # bin (14/15,1]: acc 0.5, conf 0.95 -> gap 0.45, weight 2/4
    # bin (8/15,9/15]: acc 0.5, conf 0.575 -> gap 0.075, weight 2/4
    assert expected_calibration_error(probs, labels) == pytest.approx(0.5 * 0.45 + 0.5 * 0.075)


def test_ece_zero_for_perfectly_calibrated_bins_and_adaece():
    probs = np.array([[0.5, 0.5]] * 4 + [[1.0, 0.0]] * 2)
    labels = np.array([0, 1, 0, 1, 0, 0])
    assert expected_calibration_error(probs, labels) == pytest.approx(0.0)
    assert adaptive_ece(probs, labels, n_bins=3) == pytest.approx(0.0)


def test_nll_and_brier_hand_computed():
    probs = np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]])
    labels = np.array([0, 1])
    assert nll(probs, labels) == pytest.approx(-(math.log(0.7) + math.log(0.1)) / 2)
    b1 = 0.3 ** 2 + 0.2 ** 2 + 0.1 ** 2
    b2 = 0.1 ** 2 + 0.9 ** 2 + 0.8 ** 2
    assert brier_score(probs, labels) == pytest.approx((b1 + b2) / 2)


def test_ece_against_independent_loop():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(500, 5)) * 3
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    labels = rng.integers(0, 5, 500)
    conf, pred = probs.max(1), probs.argmax(1)
    edges = np.linspace(0, 1, 16)
    want = 0.0
    for lo, hi in zip(edges[:-1], edges[1:]):
        m = (conf > lo) & (conf <= hi)
        if m.any():
            want += m.mean() * abs((pred[m] == labels[m]).mean() - conf[m].mean())
    assert expected_calibration_error(probs, labels) == pytest.approx(want)


# ---------------------------------------------------------------- experiment smoke
def test_experiment_smoke():
    from iclr26.optimization.csam.experiment import run
    out = run("smoke", 0)
    for metric in ("ece", "accuracy", "nll", "brier"):
        assert set(out["metrics"][metric]) == {"sgd", "sam", "csam"}
        assert all(np.isfinite(v) for v in out["metrics"][metric].values())
