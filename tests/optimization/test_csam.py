"""Tests for iclr26.optimization.csam (SAM, CSAM, calibration metrics)."""
import copy
import math
from functools import lru_cache

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from iclr26.optimization.csam import (CSAM, SAM, adaptive_ece, brier_score, csam_loss,
                                      expected_calibration_error, nll)


@lru_cache(maxsize=None)
def _trained_state():
    """A small tanh MLP trained on a linear-teacher task until most samples are confident
    (true-class probability well above 1/2) while some are not: CSAM's two branches both matter."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(48, 5, generator=g)
    teacher = torch.randn(5, 3, generator=g)
    y = (x @ teacher).argmax(1)
    y[:6] = (y[:6] + 1) % 3                  # a few flipped labels stay unconfident
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(60):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return copy.deepcopy(model.state_dict()), x, y


def _toy(dtype=torch.float32):
    state, x, y = _trained_state()
    model = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 3))
    model.load_state_dict(state)
    return model.to(dtype), x.to(dtype), y


def test_fixture_is_confident_but_not_everywhere():
    model, x, y = _toy()
    p = F.softmax(model(x), -1).gather(1, y[:, None]).squeeze(1)
    assert 0.5 < (p > 0.5).float().mean() < 1.0
    assert p.max() > 0.9


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


def _forward(ps, x):
    """The fixture's MLP written out by hand: tanh(x W0^T + b0) W1^T + b1."""
    return torch.tanh(x @ ps[0].T + ps[1]) @ ps[2].T + ps[3]


def _csam_logit_grad(logits, y, gamma, threshold=0.5):
    """Closed-form d/dlogits of the per-sample CSAM loss (paper Sec. 4), independent of csam_loss:
    l = -w(p) log p with w = (1 + p)^-gamma if p > threshold else 1, p = softmax_y;
    dl/dz = (onehot - softmax) * (-w + [p > threshold] * gamma p (1 + p)^(-gamma - 1) log p)."""
    s = torch.softmax(logits, -1)
    p = s.gather(1, y[:, None]).squeeze(1)
    onehot = F.one_hot(y, logits.shape[1]).to(logits.dtype)
    conf = p > threshold
    w = torch.where(conf, (1 + p) ** -gamma, torch.ones_like(p))
    coef = -w + torch.where(conf, gamma * p * (1 + p) ** (-gamma - 1) * torch.log(p), torch.zeros_like(p))
    return (onehot - s) * coef[:, None]


# ---------------------------------------------------------------- equation tests (CSAM loss)
def test_csam_loss_piecewise_hand_values():
    # p_y = 0.8 > 1/2: loss = -(1 + 0.8)^(-gamma) log 0.8 ; p_y = 0.3 <= 1/2: loss = -log 0.3
    logits = torch.log(torch.tensor([[0.8, 0.1, 0.1], [0.3, 0.5, 0.2]]))
    y = torch.tensor([0, 0])
    for gamma in (0.5, 1.0, 2.0):
        got = csam_loss(logits, y, gamma=gamma, reduction="none")
        want = [-(1.8 ** -gamma) * math.log(0.8), -math.log(0.3)]
        assert got.tolist() == pytest.approx(want, rel=1e-5)


def test_csam_loss_threshold_and_reductions():
    logits = torch.log(torch.tensor([[0.8, 0.1, 0.1], [0.3, 0.5, 0.2], [0.6, 0.2, 0.2]]))
    y = torch.tensor([0, 0, 0])
    per = [-(1.8 ** -1.0) * math.log(0.8), -math.log(0.3), -(1.6 ** -1.0) * math.log(0.6)]
    assert csam_loss(logits, y, gamma=1.0, reduction="none").tolist() == pytest.approx(per, rel=1e-5)
    assert csam_loss(logits, y, gamma=1.0).item() == pytest.approx(sum(per) / 3, rel=1e-5)
    assert csam_loss(logits, y, gamma=1.0, reduction="sum").item() == pytest.approx(sum(per), rel=1e-5)
    # threshold 0.7: only p = 0.8 counts as confident
    got = csam_loss(logits, y, gamma=1.0, threshold=0.7, reduction="none").tolist()
    assert got == pytest.approx([per[0], -math.log(0.3), -math.log(0.6)], rel=1e-5)


@pytest.mark.filterwarnings("error")
def test_csam_loss_defaults_and_threshold_is_strict():
    torch.manual_seed(3)
    z, t = torch.randn(20, 4, dtype=torch.float64) * 3, torch.randint(0, 4, (20,))
    assert torch.equal(csam_loss(z, t), csam_loss(z, t, gamma=1.0, threshold=0.5, reduction="mean"))
    # p exactly at the threshold is not confident: plain cross-entropy
    p0 = F.softmax(z, -1)[0, t[0]].item()
    got = csam_loss(z[:1], t[:1], gamma=2.0, threshold=p0, reduction="none")
    assert torch.equal(got, F.cross_entropy(z[:1], t[:1], reduction="none"))


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


@pytest.mark.parametrize("gamma", [0.5, 1.0, 2.0])
def test_csam_loss_gradient_differentiates_the_weight(gamma):
    # the weight (1 + p)^-gamma is part of the loss: its derivative enters the gradient (a
    # detached weight would give only the -w (onehot - softmax) part)
    torch.manual_seed(2)
    logits = (torch.randn(64, 4, dtype=torch.float64) * 3).requires_grad_()
    y = torch.randint(0, 4, (64,))
    csam_loss(logits, y, gamma=gamma, reduction="sum").backward()
    want = _csam_logit_grad(logits.detach(), y, gamma)
    assert torch.allclose(logits.grad, want, atol=1e-10)
    p = F.softmax(logits.detach(), -1).gather(1, y[:, None]).squeeze(1)
    assert (p > 0.5).any() and (p <= 0.5).any()


# ---------------------------------------------------------------- SAM / CSAM mechanics
def test_sam_first_step_moves_by_rho_along_gradient_and_second_step_returns():
    model, x, y = _toy()
    opt = SAM(model.parameters(), torch.optim.SGD, rho=0.1, lr=0.0)
    before = _params(model)
    F.cross_entropy(model(x), y).backward()
    g = torch.cat([p.grad.flatten() for p in model.parameters()])
    opt.first_step()
    assert all(p.grad is None for p in model.parameters())
    delta = _params(model) - before
    assert delta.norm().item() == pytest.approx(0.1, rel=1e-4)
    assert torch.allclose(delta, 0.1 * g / g.norm(), atol=1e-6)
    F.cross_entropy(model(x), y).backward()
    opt.second_step()                      # lr = 0: back to theta exactly
    assert torch.equal(_params(model), before)
    assert all(p.grad is None for p in model.parameters())
    assert all("old_p" not in s for s in opt.state.values())


def test_first_and_second_step_can_keep_gradients():
    model, x, y = _toy()
    opt = SAM(model.parameters(), torch.optim.SGD, rho=0.1, lr=0.1)
    F.cross_entropy(model(x), y).backward()
    opt.first_step(zero_grad=False)
    assert all(p.grad is not None for p in model.parameters())
    opt.second_step(zero_grad=False)
    assert all(p.grad is not None for p in model.parameters())


def test_adaptive_first_step_matches_asam():
    # ASAM (Kwon et al. 2021): e = rho * T^2 g / ||T g||, T = |theta| elementwise
    model, x, y = _toy()
    opt = SAM(model.parameters(), torch.optim.SGD, rho=0.5, adaptive=True, lr=0.1)
    before = [p.detach().clone() for p in model.parameters()]
    F.cross_entropy(model(x), y).backward()
    grads = [p.grad.detach().clone() for p in model.parameters()]
    opt.first_step()
    norm = torch.cat([(w.abs() * g).flatten() for w, g in zip(before, grads)]).norm()
    for p, w, g in zip(model.parameters(), before, grads):
        assert torch.allclose(p.detach() - w, 0.5 * w ** 2 * g / norm, atol=1e-6)


def test_first_step_skips_parameters_without_gradient():
    model, x, y = _toy()
    extra = nn.Parameter(torch.ones(3))
    opt = SAM([*model.parameters(), extra], torch.optim.SGD, rho=0.1, lr=0.1)
    F.cross_entropy(model(x), y).backward()
    opt.first_step()
    assert torch.equal(extra.detach(), torch.ones(3))
    opt.zero_grad()
    opt.first_step()                       # no gradient anywhere: nothing moves, nothing fails
    F.cross_entropy(model(x), y).backward()
    opt.second_step()


def test_sam_step_uses_gradient_at_perturbed_point():
    model, x, y = _toy()
    ref = copy.deepcopy(model)
    opt = SAM(model.parameters(), torch.optim.SGD, rho=0.05, lr=0.5)
    loss = opt.step(_sam_closure(model, x, y))
    ps = [p.detach().clone().requires_grad_() for p in ref.parameters()]
    ce = F.cross_entropy(_forward(ps, x), y)
    assert loss.item() == pytest.approx(ce.item(), rel=1e-6)          # the loss at theta
    grads = torch.autograd.grad(ce, ps)
    gn = torch.cat([g.flatten() for g in grads]).norm()
    pert = [(p.detach() + 0.05 * g / gn).requires_grad_() for p, g in zip(ps, grads)]
    g2 = torch.autograd.grad(F.cross_entropy(_forward(pert, x), y), pert)
    want = torch.cat([(p.detach() - 0.5 * g).flatten() for p, g in zip(ps, g2)])
    assert torch.allclose(_params(model), want, atol=1e-6)
    assert all(p.grad is None for p in model.parameters())        # step leaves no gradients


@pytest.mark.parametrize("gamma", [1.0, 2.0])
def test_csam_step_matches_independent_reference(gamma):
    # ascent with the cross-entropy gradient, descent with the closed-form CSAM gradient at theta~
    model, x, y = _toy(torch.float64)
    ref = copy.deepcopy(model)
    opt = CSAM(model.parameters(), torch.optim.SGD, rho=0.2, gamma=gamma, lr=0.5)
    loss = opt.step(_csam_closure(model, x, y))
    ps = [p.detach().clone().requires_grad_() for p in ref.parameters()]
    ce = F.cross_entropy(_forward(ps, x), y)
    assert loss.item() == pytest.approx(ce.item(), rel=1e-9)          # CE at theta
    grads = torch.autograd.grad(ce, ps)
    gn = torch.cat([g.flatten() for g in grads]).norm()
    pert = [(p.detach() + 0.2 * g / gn).requires_grad_() for p, g in zip(ps, grads)]
    z = _forward(pert, x)
    dz = _csam_logit_grad(z.detach(), y, gamma) / len(y)
    g2 = torch.autograd.grad(z, pert, grad_outputs=dz)
    want = torch.cat([(p.detach() - 0.5 * g).flatten() for p, g in zip(ps, g2)])
    assert torch.allclose(_params(model), want, atol=1e-10)


def test_csam_ascent_uses_cross_entropy_and_descent_uses_csam_loss():
    model, x, y = _toy()
    opt = CSAM(model.parameters(), torch.optim.SGD, rho=0.05, gamma=2.0, lr=0.1)
    seen = []

    def closure(loss_fn):
        seen.append(loss_fn)
        loss = loss_fn(model(x), y)
        loss.backward()
        return loss
    opt.step(closure)
    assert seen[0] is F.cross_entropy
    assert len(seen) == 2 and seen[1] is not F.cross_entropy
    z = torch.randn(6, 3) * 3
    t = torch.randint(0, 3, (6,))
    assert torch.equal(seen[1](z, t), csam_loss(z, t, gamma=2.0))
    assert all(p.grad is None for p in model.parameters())        # step leaves no gradients
    opt9 = CSAM(model.parameters(), torch.optim.SGD, rho=0.05, gamma=2.0, threshold=0.9, lr=0.1)
    z = torch.log(torch.tensor([[0.7, 0.2, 0.1], [0.95, 0.03, 0.02]]))
    t = torch.tensor([0, 0])
    want = torch.tensor([-math.log(0.7), -(1.95 ** -2.0) * math.log(0.95)]).mean()
    assert opt9.descent_loss(z, t).item() == pytest.approx(want.item(), rel=1e-5)


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


def test_csam_differs_from_sam_on_confident_model():
    model, x, y = _toy()
    twin = copy.deepcopy(model)
    csam = CSAM(model.parameters(), torch.optim.SGD, rho=0.05, gamma=2.0, lr=0.5)
    sam = SAM(twin.parameters(), torch.optim.SGD, rho=0.05, lr=0.5)
    csam.step(_csam_closure(model, x, y))
    sam.step(_sam_closure(twin, x, y))
    assert (_params(model) - _params(twin)).abs().max() > 1e-3


# ---------------------------------------------------------------- contract tests
@pytest.mark.parametrize("cls,closure,extra", [(SAM, _sam_closure, {}),
                                               (CSAM, _csam_closure, {"gamma": 2.0, "threshold": 0.5})])
def test_state_dict_has_torch_optim_layout(cls, closure, extra):
    model, x, y = _toy()
    opt = cls(model.parameters(), torch.optim.SGD, rho=0.05, lr=0.1, momentum=0.9, **extra)
    opt.step(closure(model, x, y))
    sd = opt.state_dict()
    assert set(sd) == {"state", "param_groups"}
    (group,) = sd["param_groups"]
    assert group["params"] == [0, 1, 2, 3]
    assert group["rho"] == 0.05 and group["adaptive"] is False
    assert group["lr"] == 0.1 and group["momentum"] == 0.9
    for k, v in extra.items():
        assert group[k] == v
    assert set(sd["state"]) == {0, 1, 2, 3}
    for i, p in enumerate(model.parameters()):
        assert set(sd["state"][i]) == {"momentum_buffer"}
        assert sd["state"][i]["momentum_buffer"].shape == p.shape
    # a plain torch.optim.SGD reads it
    sgd = torch.optim.SGD(copy.deepcopy(model).parameters(), lr=1.0, momentum=0.0)
    sgd.load_state_dict(copy.deepcopy(sd))
    assert sgd.param_groups[0]["momentum"] == 0.9
    bufs = [s["momentum_buffer"] for s in sgd.state.values()]
    assert all(torch.equal(a, b) for a, b in zip(bufs, [opt.state[p]["momentum_buffer"] for p in model.parameters()]))


@pytest.mark.parametrize("cls,closure", [(SAM, _sam_closure), (CSAM, _csam_closure)])
def test_state_dict_round_trip(cls, closure):
    model, x, y = _toy()
    opt = cls(model.parameters(), torch.optim.SGD, rho=0.05, lr=0.1, momentum=0.9)
    for _ in range(3):
        opt.step(closure(model, x, y))
    twin = copy.deepcopy(model)
    opt2 = cls(twin.parameters(), torch.optim.SGD, rho=0.3, lr=0.7, momentum=0.5)
    opt2.load_state_dict(copy.deepcopy(opt.state_dict()))
    assert opt2.param_groups[0]["rho"] == 0.05 and opt2.param_groups[0]["lr"] == 0.1
    assert opt2.base_optimizer.param_groups is opt2.param_groups
    assert opt2.base_optimizer.state is opt2.state
    for _ in range(3):
        opt.step(closure(model, x, y))
        opt2.step(closure(twin, x, y))
    assert torch.allclose(_params(model), _params(twin), atol=1e-7)


def test_csam_state_dict_restores_gamma_and_threshold():
    model, x, y = _toy()
    opt = CSAM(model.parameters(), rho=0.05, gamma=2.0, threshold=0.6, lr=0.1)
    opt2 = CSAM(copy.deepcopy(model).parameters(), rho=0.05, gamma=0.5, lr=0.1)
    opt2.load_state_dict(opt.state_dict())
    assert (opt2.gamma, opt2.threshold) == (2.0, 0.6)
    assert opt2.defaults["gamma"] == 0.5      # defaults are the constructor's, groups what was loaded


def test_scheduler_drives_base_optimizer():
    model, x, y = _toy()
    opt = SAM(model.parameters(), torch.optim.SGD, rho=0.05, lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    opt.step(_sam_closure(model, x, y))
    sched.step()
    assert opt.base_optimizer.param_groups[0]["lr"] == pytest.approx(0.5)


def test_works_with_adamw_base_and_float64():
    model, x, y = _toy(torch.float64)
    opt = CSAM(model.parameters(), torch.optim.AdamW, rho=0.2, gamma=1.0, lr=1e-2)
    first = F.cross_entropy(model(x), y).item()
    for _ in range(30):
        opt.step(_csam_closure(model, x, y))
    assert F.cross_entropy(model(x), y).item() < first
    assert all(p.dtype == torch.float64 for p in model.parameters())
    assert set(opt.state_dict()["state"][0]) == {"step", "exp_avg", "exp_avg_sq"}


def test_defaults_include_base_optimizer_defaults():
    model, _, _ = _toy()
    sam = SAM(model.parameters(), lr=0.1)
    assert sam.param_groups[0]["rho"] == 0.05 and isinstance(sam.base_optimizer, torch.optim.SGD)
    csam = CSAM(model.parameters(), lr=0.1)
    assert (csam.param_groups[0]["rho"], csam.gamma, csam.threshold) == (0.05, 1.0, 0.5)
    assert csam.param_groups[0]["adaptive"] is False
    assert CSAM(model.parameters(), lr=0.1, adaptive=True).param_groups[0]["adaptive"] is True
    opt = CSAM(model.parameters(), torch.optim.SGD, rho=0.1, gamma=1.0, lr=0.3, momentum=0.9)
    assert opt.defaults["lr"] == 0.3 and opt.defaults["rho"] == 0.1 and opt.defaults["gamma"] == 1.0
    assert opt.defaults["threshold"] == 0.5 and "nesterov" in opt.defaults


# ---------------------------------------------------------------- rejection tests
@pytest.mark.parametrize("kwargs,match", [
    (dict(rho=-0.1), r"^rho must be a finite number >= 0"),
    (dict(rho=float("inf")), r"^rho must be a finite number >= 0"),
    (dict(rho=float("nan")), r"^rho must be a finite number >= 0"),
    (dict(rho=True), r"^rho must be a finite number >= 0"),
    (dict(rho="0.1"), r"^rho must be a finite number >= 0"),
    (dict(base_optimizer=object), r"^base_optimizer must be a torch.optim.Optimizer subclass"),
    (dict(base_optimizer=torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)),
     r"^base_optimizer must be a torch.optim.Optimizer subclass"),
    (dict(adaptive="yes"), r"^adaptive must be a bool"),
])
def test_sam_rejects_bad_hyperparameters(kwargs, match):
    model, _, _ = _toy()
    with pytest.raises((ValueError, TypeError), match=match):
        SAM(model.parameters(), **{"lr": 0.1, **kwargs})


def test_sam_rejects_bad_rho_in_a_param_group():
    model, _, _ = _toy()
    with pytest.raises(ValueError, match=r"^rho must be a finite number >= 0"):
        SAM([{"params": list(model.parameters()), "rho": float("inf")}], lr=0.1)


@pytest.mark.parametrize("kwargs,match", [
    (dict(gamma=-1.0), r"^gamma must be a finite number >= 0"),
    (dict(gamma=float("inf")), r"^gamma must be a finite number >= 0"),
    (dict(gamma=None), r"^gamma must be a finite number >= 0"),
    (dict(threshold=0.0), r"^threshold must be a number in \(0, 1\)"),
    (dict(threshold=1.0), r"^threshold must be a number in \(0, 1\)"),
    (dict(threshold="half"), r"^threshold must be a number in \(0, 1\)"),
])
def test_csam_rejects_bad_gamma_and_threshold(kwargs, match):
    model, _, _ = _toy()
    with pytest.raises(ValueError, match=match):
        CSAM(model.parameters(), lr=0.1, **kwargs)


def test_csam_rejects_groups_with_different_gamma():
    model, _, _ = _toy()
    ps = list(model.parameters())
    with pytest.raises(ValueError, match=r"^all param groups must share one gamma"):
        CSAM([{"params": ps[:2], "gamma": 2.0}, {"params": ps[2:]}], lr=0.1, gamma=1.0)
    with pytest.raises(ValueError, match=r"^all param groups must share one threshold"):
        CSAM([{"params": ps[:2], "threshold": 0.7}, {"params": ps[2:]}], lr=0.1)
    opt = CSAM([{"params": ps[:2]}, {"params": ps[2:]}], lr=0.1)
    sd = opt.state_dict()
    sd["param_groups"][1]["gamma"] = 0.5
    with pytest.raises(ValueError, match=r"^all param groups must share one gamma"):
        opt.load_state_dict(sd)


def test_rejects_missing_closure():
    model, _, _ = _toy()
    with pytest.raises(ValueError, match=r"^CSAM needs a closure: step\(closure\) calls closure\(loss_fn\) twice; "
                                         r"closure must compute loss_fn\(logits, target\), call backward\(\) and return it$"):
        CSAM(model.parameters(), lr=0.1).step()
    with pytest.raises(ValueError, match=r"^SAM needs a closure: step\(closure\) evaluates the loss twice "
                                         r"\(at theta and at the perturbed theta\); closure\(\) must call backward\(\)$"):
        SAM(model.parameters(), lr=0.1).step()


def test_load_state_dict_rejects_foreign_layouts():
    model, _, _ = _toy()
    opt = SAM(model.parameters(), lr=0.1)
    layout = (r"^state_dict must have the torch.optim layout: a dict with keys 'state' and 'param_groups' "
              r"\(as returned by state_dict\(\)\)$")
    with pytest.raises(ValueError, match=layout):
        opt.load_state_dict({"sam": {}, "base": {}})
    with pytest.raises(ValueError, match=layout):
        opt.load_state_dict([1, 2])
    with pytest.raises(ValueError, match=layout):
        CSAM(model.parameters(), lr=0.1).load_state_dict([1, 2])
    plain = torch.optim.SGD(model.parameters(), lr=0.1).state_dict()
    with pytest.raises(ValueError, match=r"^state_dict param_groups lack 'rho': it does not come from SAM/CSAM$"):
        opt.load_state_dict(plain)
    sd = opt.state_dict()
    sd["param_groups"][0]["rho"] = float("inf")
    with pytest.raises(ValueError, match=r"^rho must be a finite number >= 0"):
        opt.load_state_dict(sd)


def test_csam_loss_rejects_bad_input():
    z, t = torch.randn(4, 3), torch.tensor([0, 1, 2, 0])
    with pytest.raises(ValueError, match=r"^logits must have shape \(N, C\)"):
        csam_loss(z[0], t)
    with pytest.raises(ValueError, match=r"^target must have shape \(4,\)"):
        csam_loss(z, t[:3])
    with pytest.raises(ValueError, match=r"^target must have shape \(4,\)"):
        csam_loss(z, t[:, None])
    with pytest.raises(ValueError, match=r"^gamma must be a finite number >= 0"):
        csam_loss(z, t, gamma=-0.5)
    with pytest.raises(ValueError, match=r"^threshold must be a number in \(0, 1\)"):
        csam_loss(z, t, threshold=1.5)
    with pytest.raises(ValueError, match=r"^reduction must be 'mean', 'sum' or 'none'"):
        csam_loss(z, t, reduction="max")


def test_non_finite_and_empty_inputs_raise():
    with pytest.raises(ValueError, match="NaN or inf"):
        csam_loss(torch.tensor([[float("nan"), 0.0]]), torch.tensor([0]))
    with pytest.raises(ValueError, match="empty"):
        csam_loss(torch.zeros(0, 3), torch.zeros(0, dtype=torch.long))
    model, x, y = _toy()
    opt = SAM(model.parameters(), torch.optim.SGD, rho=0.1, lr=0.1)

    def nan_closure():
        loss = F.cross_entropy(model(x), y) * float("nan")
        loss.backward()
        return loss
    with pytest.raises(FloatingPointError, match="non-finite loss"):
        opt.step(nan_closure)
    copt = CSAM(model.parameters(), torch.optim.SGD, rho=0.1, lr=0.1)
    with pytest.raises(FloatingPointError, match="non-finite loss"):
        copt.step(lambda loss_fn: nan_closure())
    with pytest.raises(TypeError, match="loss_fn"):
        copt.step(lambda: F.cross_entropy(model(x), y))
    model.zero_grad()
    F.cross_entropy(model(x), y).backward()
    next(model.parameters()).grad[0] = float("inf")
    with pytest.raises(FloatingPointError, match="gradient norm"):
        opt.first_step()


def test_numpy_scalars_are_accepted():
    model, _, _ = _toy()
    opt = CSAM(model.parameters(), torch.optim.SGD, rho=np.float32(0.1), gamma=np.float64(0.5), lr=0.1)
    assert opt.param_groups[0]["rho"] == pytest.approx(0.1) and opt.param_groups[0]["gamma"] == 0.5


def test_metrics_reject_bad_input():
    with pytest.raises(ValueError, match=r"^probs must be probabilities: non-negative rows that sum to 1 "
                                         r"\(apply softmax to logits first\)$"):
        expected_calibration_error(np.array([[2.0, -1.0]]), np.array([0]))
    with pytest.raises(ValueError, match=r"^probs must be probabilities"):
        nll(np.array([[0.5, 0.6]]), np.array([0]))
    with pytest.raises(ValueError, match=r"^labels must be integers in \[0, 1\]"):
        expected_calibration_error(np.array([[0.5, 0.5]]), np.array([3]))
    with pytest.raises(ValueError, match=r"^labels must be integers in \[0, 1\]"):
        brier_score(np.array([[0.5, 0.5]]), np.array([-1]))
    with pytest.raises(ValueError, match=r"^labels must be integers in \[0, 1\]"):
        nll(np.array([[0.5, 0.5]]), np.array([2]))
    with pytest.raises(ValueError, match=r"^labels must be integers in \[0, 1\]"):
        brier_score(np.array([[0.5, 0.5]]), np.array([0.0]))
    with pytest.raises(ValueError, match=r"^n_bins must be a positive integer"):
        expected_calibration_error(np.array([[0.5, 0.5]]), np.array([0]), n_bins=0)
    with pytest.raises(ValueError, match=r"^n_bins must be a positive integer"):
        adaptive_ece(np.array([[0.5, 0.5]]), np.array([0]), n_bins=2.0)
    with pytest.raises(ValueError, match=r"^probs must have shape \(n, n_classes\)"):
        adaptive_ece(np.array([0.5, 0.5]), np.array([0]))
    with pytest.raises(ValueError, match=r"^labels must have shape \(1,\)"):
        nll(np.array([[0.5, 0.5]]), np.array([0, 1]))
    with pytest.raises(ValueError, match=r"^probs is empty"):
        brier_score(np.zeros((0, 2)), np.zeros(0, dtype=int))


# ---------------------------------------------------------------- calibration metric equations
def test_ece_hand_computed():
    # 15 bins. confidences 0.95 (correct), 0.95 (wrong), 0.6 (correct), 0.55 (wrong)
    probs = np.array([[0.95, 0.05], [0.95, 0.05], [0.6, 0.4], [0.45, 0.55]])
    labels = np.array([0, 1, 0, 0])
    # bins: 0.95 -> (14/15, 1]; 0.6 -> (8/15, 9/15]; 0.55 -> (8/15, 9/15]
    # bin (14/15,1]: acc 0.5, conf 0.95 -> gap 0.45, weight 2/4
    # bin (8/15,9/15]: acc 0.5, conf 0.575 -> gap 0.075, weight 2/4
    assert expected_calibration_error(probs, labels) == pytest.approx(0.5 * 0.45 + 0.5 * 0.075)
    # 2 bins: (0, 1/2], (1/2, 1]: all four in the upper bin: |2/4 - 0.7625|
    assert expected_calibration_error(probs, labels, n_bins=2) == pytest.approx(abs(0.5 - 0.7625))


def test_metrics_accept_roundoff_and_one_bin():
    # float32 softmax rows: tiny negative entries and sums off by < 1e-4 are probabilities
    probs = np.array([[1.0 + 1e-8, -1e-8], [0.30003, 0.70003]])
    labels = np.array([0, 1])
    assert nll(probs, labels) == pytest.approx(-(math.log(1.0 + 1e-8) + math.log(0.70003)) / 2)
    # one bin: |accuracy - mean confidence|
    probs = np.array([[0.9, 0.1], [0.6, 0.4], [0.2, 0.8]])
    labels = np.array([0, 1, 1])
    assert expected_calibration_error(probs, labels, n_bins=1) == pytest.approx(abs(2 / 3 - (0.9 + 0.6 + 0.8) / 3))
    assert adaptive_ece(probs, labels, n_bins=1) == pytest.approx(abs(2 / 3 - (0.9 + 0.6 + 0.8) / 3))


def test_ece_lowest_and_highest_bins():
    # 20 classes: top-1 confidences below 1/15 fall in the first bin
    k = 20
    def row(top, cls):
        r = np.full(k, (1 - top) / (k - 1))
        r[cls] = top
        return r
    probs = np.array([row(0.06, 0), row(0.1, 1), row(0.9, 2), row(0.95, 3), row(1.0, 4)])
    labels = np.array([0, 5, 2, 7, 4])
    # bins: 0.06 -> 1st, 0.1 -> 2nd, 0.9 -> 14th (13/15, 14/15], 0.95 and 1.0 -> 15th
    want = (abs(1 - 0.06) + abs(0 - 0.1) + abs(1 - 0.9) + 2 * abs(0.5 - 0.975)) / 5
    assert expected_calibration_error(probs, labels) == pytest.approx(want)
    # a row summing to slightly above 1 (within the tolerance) stays in the top bin
    probs = np.array([[1.00005, 0.0], [0.95, 0.05]])
    assert expected_calibration_error(probs, np.array([1, 0])) == pytest.approx(abs(0.5 - 0.975025))


def test_adaptive_ece_breaks_ties_by_sample_order():
    n = 1000
    probs = np.tile([0.8, 0.2], (n, 1))
    labels = np.r_[np.zeros(n // 2, int), np.ones(n // 2, int)]    # first half right, second wrong
    assert adaptive_ece(probs, labels, n_bins=2) == pytest.approx(0.5 * 0.2 + 0.5 * 0.8)
    # many ties among many samples: equal-mass bins of the stable (index-order) sort
    rng = np.random.default_rng(0)
    conf = rng.choice([0.6, 0.7, 0.8], 5000)
    probs = np.column_stack([conf, 1 - conf])
    correct = (rng.random(5000) < conf).astype(float)             # calibrated: gaps of both signs
    labels = np.where(correct == 1, 0, 1)
    order = np.argsort(conf, kind="mergesort")
    want = sum(len(ch) * abs(correct[ch].mean() - conf[ch].mean()) for ch in np.array_split(order, 7)) / 5000
    assert adaptive_ece(probs, labels, n_bins=7) == pytest.approx(want, rel=1e-12)


def test_ece_bin_edges_are_right_closed():
    # conf exactly 0.6 with 5 bins lies in (0.4, 0.6], not (0.6, 0.8]
    probs = np.array([[0.6, 0.4], [0.7, 0.3]])
    labels = np.array([0, 1])
    # bin (0.4,0.6]: acc 1, conf 0.6 -> 0.4 ; bin (0.6,0.8]: acc 0, conf 0.7 -> 0.7
    assert expected_calibration_error(probs, labels, n_bins=5) == pytest.approx((0.4 + 0.7) / 2)


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
    # a zero true-class probability is clipped at eps, not infinite
    assert nll(np.array([[1.0, 0.0]]), np.array([1]), eps=1e-6) == pytest.approx(-math.log(1e-6))


def _softmax_probs(seed, n=500, k=5, scale=3.0):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, k)) * scale
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    labels = np.where(rng.random(n) < 0.7, probs.argmax(1), rng.integers(0, k, n))
    return probs, labels


def test_ece_against_independent_loop():
    probs, labels = _softmax_probs(0)
    conf, pred = probs.max(1), probs.argmax(1)
    edges = np.linspace(0, 1, 16)
    want = 0.0
    for lo, hi in zip(edges[:-1], edges[1:]):
        m = (conf > lo) & (conf <= hi)
        if m.any():
            want += m.mean() * abs((pred[m] == labels[m]).mean() - conf[m].mean())
    assert expected_calibration_error(probs, labels) == pytest.approx(want)


def test_adaptive_ece_against_independent_loop():
    probs, labels = _softmax_probs(1, n=450)
    conf, correct = probs.max(1), (probs.argmax(1) == labels).astype(float)
    order = np.argsort(conf)
    want = 0.0
    for b in range(15):                      # 450 / 15 = 30 samples per bin
        idx = order[30 * b: 30 * (b + 1)]
        want += 30 / 450 * abs(correct[idx].mean() - conf[idx].mean())
    assert adaptive_ece(probs, labels) == pytest.approx(want)
    # more bins than samples: one sample per bin
    assert adaptive_ece(probs[:4], labels[:4], n_bins=10) == pytest.approx(
        np.mean(np.abs(correct[:4] - conf[:4])))


# ---------------------------------------------------------------- experiment: tuning and smoke
def _recorder(table):
    """evaluate(v) for search(): looks the record up in ``table`` and logs the order of calls."""
    calls = []

    def evaluate(v):
        calls.append(v)
        return table(v)
    return evaluate, calls


def _rank_by_value(tried):
    return sorted(tried, key=lambda v: tried[v])


def test_search_refines_towards_the_better_neighbour_of_an_interior_best():
    from iclr26.optimization.csam.experiment import search
    # best 0.2 (interior); neighbours 0.1 (score 2) and 0.4 (score 3): the 4th point is sqrt(0.2 * 0.1)
    ev, calls = _recorder(lambda v: {0.1: 2.0, 0.2: 1.0, 0.4: 3.0}.get(round(v, 6), 0.5))
    best, tried, at_edge = search(ev, (0.1, 0.2, 0.4), _rank_by_value, budget=4)
    assert calls[:3] == [0.1, 0.2, 0.4]
    assert calls[3] == pytest.approx(math.sqrt(0.02))
    assert best == pytest.approx(math.sqrt(0.02)) and not at_edge


def test_search_bisects_the_wider_gap_next_to_the_best():
    from iclr26.optimization.csam.experiment import search
    # scores fall towards 0.5, but 0.8 collapses: outward to 0.8, then the tie (gaps 2 and 2) goes to
    # the better neighbour 0.2, then the wider gap (0.4 -> 0.8) is bisected
    ev, calls = _recorder(lambda v: 9.0 if abs(v - 0.8) < 1e-9 else abs(math.log(v / 0.5)))
    best, tried, at_edge = search(ev, (0.1, 0.2, 0.4), _rank_by_value, budget=6)
    assert calls[:4] == [0.1, 0.2, 0.4, 0.8]
    assert calls[4] == pytest.approx(math.sqrt(0.08))
    assert calls[5] == pytest.approx(math.sqrt(0.32))
    assert best == pytest.approx(math.sqrt(0.32)) and not at_edge


def test_arms_train_with_the_declared_knobs(monkeypatch):
    # the control is the CSAM loss without the perturbation (rho = 0); CSAM runs at the rho it is given
    from iclr26.optimization.csam import experiment as ex
    seen = []

    class Recorder(ex.CSAM):
        def __init__(self, params, base, **kw):
            seen.append((kw["rho"], kw["gamma"]))
            super().__init__(params, base, **kw)

    monkeypatch.setattr(ex, "CSAM", Recorder)
    cfg = dict(ex.SCALES["smoke"], steps=2)
    torch.manual_seed(0)
    init, x, y = ex._mlp(8), torch.randn(16, 64), torch.randint(0, 10, (16,))
    ex._fit("reweight", 2.0, init, x, y, cfg, 0)
    ex._fit("csam", 0.5, init, x, y, cfg, 0, rho=0.3)
    assert seen == [(0.0, 2.0), (0.3, 0.5)]
    with pytest.raises(ValueError, match="rho"):
        ex._fit("csam", 0.5, init, x, y, cfg, 0)


def test_search_widens_beyond_an_edge_and_flags_a_best_still_at_the_edge():
    from iclr26.optimization.csam.experiment import search
    ev, calls = _recorder(lambda v: -v)               # larger is always better
    best, tried, at_edge = search(ev, (1.0, 2.0, 4.0), _rank_by_value, budget=5)
    assert calls == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert best == 16.0 and at_edge
    ev, calls = _recorder(lambda v: v)                # smaller is always better
    best, tried, at_edge = search(ev, (1.0, 2.0, 4.0), _rank_by_value, budget=4)
    assert calls[3] == 0.5 and best == 0.5 and at_edge
    ev, calls = _recorder(lambda v: abs(math.log(v / 6.0)))   # optimum beyond the grid, then inside
    best, tried, at_edge = search(ev, (1.0, 2.0, 4.0), _rank_by_value, budget=4)
    assert calls[3] == 8.0 and best in (4.0, 8.0) and at_edge == (best == 8.0)


@pytest.mark.parametrize("grid,budget,match", [((0.1, 0.2), 4, "three positive"),
                                               ((0.1, -0.2, 0.4), 4, "three positive"),
                                               ((0.1, 0.2, 0.3), 4, "geometric"),
                                               ((0.4, 0.2, 0.1), 4, "increasing"),
                                               ((0.1, 0.2, 0.4), 2, "budget"),
                                               ((0.1, 0.2, 0.4), True, "budget")])
def test_search_rejects_bad_grids(grid, budget, match):
    from iclr26.optimization.csam.experiment import search
    with pytest.raises(ValueError, match=match):
        search(lambda v: v, grid, _rank_by_value, budget=budget)


def test_rank_by_calibration_guards_accuracy_and_puts_diverged_last():
    from iclr26.optimization.csam.experiment import rank_by_calibration
    tried = {0.1: {"accuracy": 0.80, "log_ece": -2.0, "nll": 0.9},
             0.2: {"accuracy": 0.795, "log_ece": -2.5, "nll": 0.8},     # within 1 point: eligible
             0.4: {"accuracy": 0.11, "log_ece": -5.0, "nll": 2.3},      # calibrated at chance
             0.8: None}                                                 # diverged
    assert rank_by_calibration(tried) == [0.2, 0.1, 0.4, 0.8]
    # tol = 0: only the most accurate is eligible; the others follow by ECE, whatever their accuracy
    assert rank_by_calibration(tried, tol=0.0) == [0.1, 0.4, 0.2, 0.8]
    ties = {1.0: {"accuracy": 0.8, "log_ece": -2.0, "nll": 0.9}, 2.0: {"accuracy": 0.8, "log_ece": -2.0, "nll": 0.7}}
    assert rank_by_calibration(ties) == [2.0, 1.0]
    with pytest.raises(FloatingPointError, match="diverged"):
        rank_by_calibration({0.1: None})
    with pytest.raises(ValueError, match="at least one"):
        rank_by_calibration({})


def test_training_raises_on_non_finite_loss_or_parameters():
    from iclr26.optimization.csam.experiment import _check_finite
    model = nn.Linear(2, 2)
    _check_finite(model, torch.tensor(1.0), "sgd", 1)
    with pytest.raises(FloatingPointError, match="non-finite loss"):
        _check_finite(model, torch.tensor(float("nan")), "sgd", 3)
    with torch.no_grad():
        model.weight[0, 0] = float("inf")
    with pytest.raises(FloatingPointError, match="non-finite parameters"):
        _check_finite(model, torch.tensor(1.0), "sam (rho = 0.1)", 7)


def test_run_rejects_bad_scale_and_seed():
    from iclr26.optimization.csam.experiment import run
    with pytest.raises(ValueError, match="scale"):
        run("huge", 0)
    for seed in (-1, 1.5, True):
        with pytest.raises(ValueError, match="seed"):
            run("smoke", seed)


def test_experiment_smoke():
    from iclr26.optimization.csam.experiment import ARMS, BASE, KNOBS, run
    out = run("smoke", 0)
    for metric in ("ece", "accuracy", "nll", "brier", "confidence"):
        assert set(out["metrics"][metric]) == set(ARMS) | set(BASE.values())
        assert all(np.isfinite(v) for v in out["metrics"][metric].values())
    from iclr26.optimization.csam.experiment import BUDGET
    assert out["info"]["search"]["csam"]["rho"] == out["metrics"]["tuned_value"]["sam"]
    for arm in ARMS:
        search = out["info"]["search"][arm]
        assert len(search["val"]) == BUDGET == 6            # the same budget for every arm
        assert out["metrics"]["tuned_value"][arm] == search["chosen"]
        assert out["metrics"]["tuned_at_edge"][arm] in (0.0, 1.0)
        assert search["knob"] == KNOBS[arm][0]
