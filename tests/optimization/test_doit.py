"""Tests for iclr26.optimization.doit (DOIT, ICLR 2026)."""
import io
import math

import numpy as np
import pytest
import torch

from iclr26.optimization.doit import (DOIT, SWATS, Interleaver, RandomInterleaving, stage_reward, stage_reward_rate,
                                     state_features)

torch.set_num_threads(1)
SGD = torch.optim.SGD


def problem(seed=0, n=64, d=5):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g)
    w = torch.randn(d, 1, generator=g)
    y = X @ w + 0.1 * torch.randn(n, 1, generator=g)
    return X, y


def model(seed=0, d=5):
    torch.manual_seed(seed)
    return torch.nn.Linear(d, 1)


def train(opt_fn, steps=40, seed=0):
    X, y = problem(seed)
    m = model(seed)
    opt = opt_fn(m.parameters())
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = ((m(X) - y) ** 2).mean()
        loss.backward()
        if hasattr(opt, "observe"):
            opt.observe(loss)
        opt.step()
        losses.append(loss.item())
    return m, opt, losses


CANDS = {"sgd": (SGD, dict(lr=0.05, momentum=0.9)), "adam": (torch.optim.Adam, dict(lr=0.05)),
         "frozen": (SGD, dict(lr=0.0))}


# ----------------------------------------------------------------------------- equations
def test_stage_reward_is_relative_fall():
    losses = [10.0, 10, 10, 10, 10, 5, 5, 5, 5, 5]
    assert stage_reward(losses) == pytest.approx(0.5)
    assert stage_reward([4.0, 2.0]) == pytest.approx(0.5)                   # k = 1
    assert stage_reward([4.0, 4.0, 1.0, 2.0]) == pytest.approx((4 - 1.5) / 4)   # k = 2
    assert stage_reward([2.0, 3.0]) == pytest.approx(-0.5)
    with pytest.raises(ValueError, match="at least two observed losses"):
        stage_reward([1.0])


def test_small_losses_and_grad_norm():
    assert stage_reward([0.5, 0.25]) == pytest.approx(0.5)
    assert state_features(0.0, [0.5] * 10, 0.5)[1] == pytest.approx(math.log(0.5))
    assert state_features(0.0, [0.5] * 10, 0.5)[3] == pytest.approx(math.log(0.5))
    m = model()
    opt = DOIT(m.parameters(), CANDS)
    X, y = problem()
    ((m(X) - y) ** 2).mean().backward()
    ref = math.sqrt(sum(float(p.grad.pow(2).sum()) for p in m.parameters()))
    assert opt._grad_norm() == pytest.approx(ref, rel=1e-6)
    assert m.bias.grad.abs().sum() > 0 and m.weight.grad.abs().sum() > 0


def test_surrogate_is_an_ard_gp_with_noise():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(8, 4))
    y = X[:, 0] - 0.5 * X[:, 1]
    gp = doit_with_history(HIST).surrogate("a", X, y)
    k = gp.kernel_
    assert type(k).__name__ == "Sum" and type(k.k2).__name__ == "WhiteKernel"
    assert np.shape(k.k1.k2.length_scale) == (4,)
    assert gp.predict(X[:2]) == pytest.approx(y[:2], abs=0.3)


def test_state_features_by_hand():
    losses = [8.0] * 5 + [4.0] * 5
    f = state_features(0.25, losses, 3.0)
    np.testing.assert_allclose(f, [0.25, math.log(4.0), -0.5, math.log(3.0)])
    f0 = state_features(0.0, [1.0, 1.0], 0.0)
    assert f0[2] == 0 and f0[3] == pytest.approx(math.log(1e-12))


# ----------------------------------------------------------------------------- reductions
def test_identical_stateless_candidates_reduce_to_sgd():
    m1, _, l1 = train(lambda p: DOIT(p, {"a": (SGD, dict(lr=0.05)), "b": (SGD, dict(lr=0.05))}, stage_len=5,
                                     total_steps=40))
    m2, _, l2 = train(lambda p: SGD(p, lr=0.05))
    for p, q in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(p, q)
    assert l1 == pytest.approx(l2)


def test_stages_run_the_chosen_optimizer():
    """Initial exploration runs the candidates in order; a frozen (lr = 0) stage leaves the weights."""
    X, y = problem()
    m = model()
    opt = DOIT(m.parameters(), CANDS, stage_len=4, total_steps=40, explore_frac=None)
    snaps = []
    for t in range(12):
        opt.zero_grad()
        loss = ((m(X) - y) ** 2).mean()
        loss.backward()
        opt.observe(loss)
        if t % 4 == 0:
            snaps.append(m.weight.detach().clone())
        opt.step()
    assert opt.schedule[:3] == ["sgd", "adam", "frozen"]
    assert [h[0] for h in opt.history] == ["sgd", "adam", "frozen"]
    assert not torch.equal(snaps[0], snaps[1]) and not torch.equal(snaps[1], snaps[2])
    torch.testing.assert_close(m.weight.detach(), snaps[2])                 # the frozen stage changed nothing
    assert opt.history[2][2] == pytest.approx(0.0, abs=1e-12)
    assert opt.steps == 12 and len(opt.schedule) == 4


def test_doit_learns_and_prefers_the_working_optimizer():
    _, opt, losses = train(lambda p: DOIT(p, CANDS, stage_len=5, total_steps=120), steps=120)
    assert losses[-1] < 0.1 * losses[0]
    later = opt.schedule[3:]
    assert later.count("frozen") <= len(later) // 3


# ----------------------------------------------------------------------------- acquisition
def doit_with_history(history, active="a", steps=0, total=100, **kw):
    m = model()
    opt = DOIT(m.parameters(), {"a": (SGD, dict(lr=0.1)), "b": (SGD, dict(lr=0.1))}, stage_len=5,
               total_steps=total, **kw)
    opt.history = [(n, np.asarray(f, float), r) for n, f, r in history]
    opt.active, opt.steps = active, steps
    return opt


HIST = [("a", [0.0, 1.0, 0.0, 0.0], 0.1), ("a", [0.1, 0.9, -0.1, 0.1], 0.12), ("a", [0.2, 0.8, -0.1, 0.0], 0.09),
        ("b", [0.05, 1.0, 0.0, 0.1], 0.5), ("b", [0.15, 0.85, -0.1, 0.0], 0.55), ("b", [0.25, 0.75, 0.0, 0.1], 0.45)]


def test_acquisition_prefers_the_higher_predicted_reward():
    opt = doit_with_history(HIST, active="a", kappa=0.0, beta=0.0)
    x = np.array([0.2, 0.8, -0.05, 0.05])
    s = opt.acquisition(x)
    assert s["b"] > s["a"]
    assert opt.choose(x) == "b" and opt.last_scores == s


def test_transferability_penalty_by_hand():
    """beta only lowers the non-running candidate, by beta * (1 - exp(-d^2/2)), d its nearest
    standardised distance."""
    x = np.array([0.12, 0.88, -0.05, 0.04])              # near b's states: 0 < 1 - T < 1
    s0 = doit_with_history(HIST, active="a", kappa=0.0, beta=0.0).acquisition(x)
    s1 = doit_with_history(HIST, active="a", kappa=0.0, beta=0.7).acquisition(x)
    X = np.array([f for _, f, _ in HIST])
    mu, sd = X.mean(0), X.std(0) + 1e-8
    d = np.min(np.linalg.norm((X[3:] - mu) / sd - (x - mu) / sd, axis=1))
    assert s1["a"] == pytest.approx(s0["a"])
    assert s0["b"] - s1["b"] == pytest.approx(0.7 * (1 - math.exp(-d * d / 2)), rel=1e-6)
    assert 0.01 < s0["b"] - s1["b"] < 0.69


def test_exploration_bonus_shrinks_with_progress():
    x = np.array([0.2, 0.8, -0.05, 0.05])
    base = doit_with_history(HIST, kappa=0.0, beta=0.0, steps=50).acquisition(x)
    early = doit_with_history(HIST, kappa=2.0, beta=0.0, steps=50).acquisition(x)
    done = doit_with_history(HIST, kappa=2.0, beta=0.0, steps=100).acquisition(x)
    late_base = doit_with_history(HIST, kappa=0.0, beta=0.0, steps=100).acquisition(x)
    assert done == pytest.approx(late_base)                                 # kappa_t = kappa (1 - 1) = 0
    for n in "ab":
        assert early[n] > base[n]
    # kappa_t = 2 * (1 - 0.5) = 1: the bonus is one predictive standard deviation
    opt = doit_with_history(HIST, kappa=1.0, beta=0.0, steps=0)
    assert opt.acquisition(x) == pytest.approx(early)


def test_untried_candidates_come_first_and_n_init():
    opt = doit_with_history(HIST[:3], active="a", n_init=1)
    assert opt.choose(np.zeros(4)) == "b" and opt.last_scores == {}
    opt = doit_with_history(HIST, active="a", n_init=4)
    assert opt.choose(np.zeros(4)) == "a"
    opt = doit_with_history(HIST, active="a", n_init=3)
    opt.choose(np.zeros(4))
    assert set(opt.last_scores) == {"a", "b"}


def test_defaults():
    ps = list(model().parameters())
    d = DOIT(ps, CANDS)
    assert (d.kappa, d.beta, d.n_init, d.stage_len, d.total_steps) == (2.0, 0.5, 1, 50, None)
    assert d.active == "sgd" and d.schedule == ["sgd"]
    g = SWATS(ps).defaults
    assert (g["lr"], g["betas"], g["eps"], g["switch_eps"], g["weight_decay"]) == (1e-3, (0.9, 0.999), 1e-8, 1e-9, 0.0)


def test_progress_without_total_steps_is_zero():
    m = model()
    opt = DOIT(m.parameters(), CANDS, stage_len=5)
    opt.steps = 10**6
    assert opt._progress() == 0.0
    opt2 = DOIT(m.parameters(), CANDS, stage_len=5, total_steps=10)
    opt2.steps = 30
    assert opt2._progress() == 1.0


# ----------------------------------------------------------------------------- torch contract
def test_closure_is_observed_and_returned():
    X, y = problem()
    m = model()
    opt = DOIT(m.parameters(), CANDS, stage_len=3)

    def closure():
        opt.zero_grad()
        loss = ((m(X) - y) ** 2).mean()
        loss.backward()
        return loss

    out = opt.step(closure)
    assert out.item() == opt.stage_losses[0] and opt.steps == 1


def test_zero_grad_clears_grads():
    X, y = problem()
    m = model()
    opt = DOIT(m.parameters(), CANDS, stage_len=3)
    ((m(X) - y) ** 2).mean().backward()
    opt.zero_grad()
    assert all(p.grad is None for p in m.parameters())
    ((m(X) - y) ** 2).mean().backward()
    opt.zero_grad(set_to_none=False)
    assert all(torch.count_nonzero(p.grad) == 0 for p in m.parameters())


def test_state_dict_round_trip_continues_identically():
    X, y = problem()

    def run(m, opt, n):
        for _ in range(n):
            opt.zero_grad()
            loss = ((m(X) - y) ** 2).mean()
            loss.backward()
            opt.observe(loss)
            opt.step()

    make = lambda p: DOIT(p, CANDS, stage_len=4, total_steps=60, explore_frac=None, seed=3)
    m1 = model()
    o1 = make(m1.parameters())
    run(m1, o1, 22)
    buf = io.BytesIO()
    torch.save(o1.state_dict(), buf)                       # the usual route: a saved checkpoint
    buf.seek(0)
    sd = torch.load(buf)
    m2 = model(5)
    m2.load_state_dict(m1.state_dict())
    o2 = make(m2.parameters())
    o2.load_state_dict(sd)
    assert o2.active == o1.active and o2.steps == 22 and o2.schedule == o1.schedule
    run(m1, o1, 2)
    assert o1.steps % 4 == 0 and o1.state_dict()["doit"]["stage_start"] is None    # at a stage boundary
    run(m2, o2, 2)
    run(m1, o1, 20)
    run(m2, o2, 20)
    for p, q in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(p, q)
    assert o1.schedule == o2.schedule
    with pytest.raises(ValueError, match=r"state_dict holds optimizers \['a'\], this one"):
        o2.load_state_dict({"optimizers": {"a": {}}, "doit": {}})


def test_random_interleaving_is_seeded_and_uniform():
    def sched(seed):
        _, opt, _ = train(lambda p: RandomInterleaving(p, CANDS, stage_len=2, seed=seed), steps=120)
        return opt.schedule

    a, b, c = sched(1), sched(1), sched(2)
    assert a == b and a != c
    counts = {n: a.count(n) for n in CANDS}
    assert all(c >= 8 for c in counts.values())


def test_interleaver_rejects_bad_arguments():
    ps = list(model().parameters())
    with pytest.raises(ValueError, match=r"^candidates must be a dict of at least two \{name: \(optimizer class, kwargs\)\}$"):
        DOIT(ps, {"sgd": CANDS["sgd"]})
    with pytest.raises(ValueError, match="at least two"):
        DOIT(ps, [CANDS["sgd"], CANDS["adam"]])
    with pytest.raises(ValueError, match=r"candidate 'x' must be \(torch.optim.Optimizer subclass, kwargs dict\)"):
        DOIT(ps, {"sgd": CANDS["sgd"], "x": (torch.nn.Linear, {})})
    with pytest.raises(ValueError, match=r"candidate 'x' must be"):
        DOIT(ps, {"sgd": CANDS["sgd"], "x": (SGD, [])})
    with pytest.raises(ValueError, match=r"candidate 'x' must be"):
        DOIT(ps, {"sgd": CANDS["sgd"], "x": SGD})
    with pytest.raises(ValueError, match="stage_len must be an integer >= 2, got 1"):
        DOIT(ps, CANDS, stage_len=1)
    with pytest.raises(ValueError, match="total_steps must be None or an integer >= stage_len, got 3"):
        DOIT(ps, CANDS, stage_len=5, total_steps=3)
    with pytest.raises(ValueError, match="kappa must be a finite number >= 0"):
        DOIT(ps, CANDS, kappa=-1)
    with pytest.raises(ValueError, match="beta must be a finite number >= 0"):
        DOIT(ps, CANDS, beta=-0.1)
    for bad in (float("inf"), float("nan")):
        with pytest.raises(ValueError, match="kappa must be a finite number"):
            DOIT(ps, CANDS, kappa=bad)
        with pytest.raises(ValueError, match="beta must be a finite number"):
            DOIT(ps, CANDS, beta=bad)
    with pytest.raises(ValueError, match="n_init must be an integer >= 1"):
        DOIT(ps, CANDS, n_init=0)
    opt = DOIT(ps, CANDS)
    with pytest.raises(ValueError, match="observed loss must be finite, got nan"):
        opt.observe(float("nan"))
    with pytest.raises(RuntimeError, match=r"call observe\(loss\) before every step\(\)"):
        opt.step()
    with pytest.raises(NotImplementedError):
        Interleaver(ps, CANDS).choose(np.zeros(4))


def test_choose_must_return_a_candidate():
    class Bad(Interleaver):
        def choose(self, feats):
            return "nope"

    with pytest.raises(RuntimeError, match="choose\\(\\) returned 'nope'; allowed: sgd, adam, frozen"):
        train(lambda p: Bad(p, CANDS, stage_len=2), steps=2)


# ----------------------------------------------------------------------------- SWATS
def test_swats_is_adam_before_the_switch():
    m1, o1, _ = train(lambda p: SWATS(p, lr=0.01, switch_eps=1e-30), steps=25)
    m2, _, _ = train(lambda p: torch.optim.Adam(p, lr=0.01), steps=25)
    assert not o1.switched
    for p, q in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_swats_switches_to_sgd_with_the_estimated_rate():
    m, opt, losses = train(lambda p: SWATS(p, lr=0.01, switch_eps=1e9), steps=3)
    g = opt.param_groups[0]
    assert opt.switched and g["switched_at"] == 2 and g["sgd_lr"] > 0
    assert g["sgd_lr"] == pytest.approx(g["lam"] / (1 - 0.999 ** 2))
    # after the switch: v <- beta1 v + g, w <- w - (1 - beta1) * lr_sgd * v
    X, y = problem()
    before = [p.detach().clone() for p in m.parameters()]
    v = [opt.state[p]["v"].clone() for p in m.parameters()]
    opt.zero_grad()
    ((m(X) - y) ** 2).mean().backward()
    grads = [p.grad.clone() for p in m.parameters()]
    opt.step()
    for p, b, vv, gr in zip(m.parameters(), before, v, grads):
        torch.testing.assert_close(p.detach(), b - 0.1 * g["sgd_lr"] * (0.9 * vv + gr))


def test_swats_weight_decay_and_rejections():
    m1, _, _ = train(lambda p: SWATS(p, lr=0.01, weight_decay=0.1, switch_eps=1e-30), steps=5)
    m2, _, _ = train(lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=0.1), steps=5)
    for p, q in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    ps = list(model().parameters())
    for ok in ((0.0, 0.5), (0.9, 0.0)):
        g = SWATS(ps, betas=ok).param_groups[0]
        assert g["sgd_lr"] is None and g["phase"] == "adam" and g["k"] == 0 and g["lam"] == 0.0
    for bad in ((1.0, 0.9), (1.5, 0.9), (0.9, -0.1), (0.9, 1.5)):
        with pytest.raises(ValueError, match=r"betas must lie in \[0, 1\)"):
            SWATS(ps, betas=bad)
    with pytest.raises(ValueError, match="lr must be > 0, got 0"):
        SWATS(ps, lr=0)
    with pytest.raises(ValueError, match=r"betas must lie in \[0, 1\)"):
        SWATS(ps, betas=(0.9, 1.0))
    with pytest.raises(ValueError, match=r"betas must lie in \[0, 1\)"):
        SWATS(ps, betas=(-0.1, 0.9))
    with pytest.raises(ValueError, match="switch_eps must be > 0"):
        SWATS(ps, switch_eps=0)


# ----------------------------------------------------------------------------- experiment
def test_experiment_smoke():
    from iclr26.optimization.doit.experiment import make_optimizer, run
    out = run("smoke", 0)
    m = out["metrics"]
    assert set(m["log_steps_to_target"]) == {"doit", "best_single", "worst_single", "swats", "random", "sgd",
                                             "adam", "rmsprop", "adagrad"}
    assert all(math.isfinite(v) for v in m["log_steps_to_target"].values())
    info = out["info"]
    assert info["best_single"] in ("sgd", "adam", "rmsprop", "adagrad")
    assert info["worst_single"] in ("sgd", "adam", "rmsprop", "adagrad") and info["worst_single"] != info["best_single"]
    assert m["log_steps_to_target"]["best_single"] == m["log_steps_to_target"][info["best_single"]]
    assert m["log_steps_to_target"]["worst_single"] == m["log_steps_to_target"][info["worst_single"]]
    tb, tw = info["tuning"][info["best_single"]], info["tuning"][info["worst_single"]]
    assert all(tb <= v <= tw for v in info["tuning"].values())          # validation picks best and worst
    with pytest.raises(ValueError, match="unknown arm 'x'"):
        make_optimizer("x", [], {}, {}, 0)


def test_experiment_doit_arm_probes_a_tenth_of_the_run():
    from iclr26.optimization.doit.experiment import LR_GRIDS, SCALES, make_optimizer
    cfg = SCALES["quick"]
    opt = make_optimizer("doit", list(model(d=64).parameters()), {n: 0.01 for n in LR_GRIDS}, cfg, 0)
    assert opt.probe_len * len(LR_GRIDS) == int(0.1 * cfg["steps"]) and opt.stage_len == cfg["stage_len"]


def test_experiment_stops_when_training_diverges():
    from iclr26.optimization.doit.experiment import SCALES, load_split, train
    cfg = dict(SCALES["smoke"], steps=10, eval_every=5)
    r = train("sgd", {"sgd": 1e30}, load_split(0), cfg, 0)            # diverges at once
    assert r["steps_te"] == cfg["steps"] + cfg["eval_every"] and r["val_loss"] == math.inf


def test_stage_reward_and_slope_windows_exactly():
    losses = [float(v) for v in range(12, 0, -1)]          # 12 .. 1: windows of 5 at both ends
    assert stage_reward(losses) == pytest.approx((10.0 - 3.0) / 10.0)
    with pytest.raises(ValueError, match="^a stage needs at least two observed losses$"):
        stage_reward([1.0])
    f = state_features(0.3, [0.5] * 5 + [0.25] * 5, 1.0)   # a start loss below 1 is not floored
    assert f[2] == pytest.approx(-0.5)


def test_interleaver_settings_seed_and_state_bookkeeping():
    ps = list(model().parameters())
    base = Interleaver(ps, CANDS)
    assert base.stage_len == 50 and base.param_groups[0]["stage_len"] == 50
    assert base.rng.getstate() == __import__("random").Random(0).getstate()
    assert base.prev_losses == [] and base.stage_losses == []
    assert Interleaver(ps, CANDS, stage_len=7).param_groups[0]["stage_len"] == 7
    assert Interleaver(ps, CANDS, stage_len=5, total_steps=5).total_steps == 5    # total_steps = stage_len is allowed
    d = DOIT(ps, CANDS)
    assert d.rng.getstate() == __import__("random").Random(0).getstate() and d.last_scores == {}
    assert DOIT(ps, CANDS, seed=5).rng.getstate() == __import__("random").Random(5).getstate()
    X, y = problem()
    m = model()
    opt = DOIT(m.parameters(), CANDS, stage_len=4, total_steps=40)
    loss = ((m(X) - y) ** 2).mean()
    loss.backward()
    opt.observe(loss)
    assert opt.step() is None                              # no closure: nothing to return
    with pytest.raises(RuntimeError, match=r"^call observe\(loss\) before every step\(\) \(or pass a closure\)$"):
        opt.step()
    sd = opt.state_dict()                                  # mid-stage: the stage's start state is kept
    np.testing.assert_array_equal(sd["doit"]["stage_start"], opt.stage_start.tolist())
    other = DOIT(model(1).parameters(), CANDS, stage_len=4, total_steps=40)
    other.load_state_dict(sd)
    np.testing.assert_array_equal(other.stage_start, opt.stage_start)
    fresh = DOIT(model(1).parameters(), CANDS, stage_len=4, total_steps=40)
    other.load_state_dict(fresh.state_dict())
    assert other.stage_start is None
    with pytest.raises(ValueError, match=r"^state_dict holds optimizers \[\], this one"):
        other.load_state_dict({})


def test_surrogate_specification():
    gp = doit_with_history(HIST).surrogate("a", np.zeros((3, 4)) + np.arange(3)[:, None], np.array([0.0, 1.0, -1.0]))
    assert gp.normalize_y is False and gp.random_state == 0
    p = gp.kernel.get_params()
    assert (p["k1__k1__constant_value"], p["k1__k1__constant_value_bounds"]) == (1.0, (1e-2, 1e2))
    np.testing.assert_array_equal(p["k1__k2__length_scale"], np.ones(4))
    assert p["k1__k2__length_scale_bounds"] == (1e-2, 1e2)
    assert (p["k2__noise_level"], p["k2__noise_level_bounds"]) == (0.1, (1e-4, 1.0))


def test_acquisition_formula_by_hand():
    x = np.array([0.12, 0.88, -0.05, 0.04])
    opt = doit_with_history(HIST, active="a", kappa=1.5, beta=0.3, steps=20)
    s = opt.acquisition(x)
    X = np.array([f for _, f, _ in HIST])
    r = np.array([v for _, _, v in HIST])
    mu_x, sd_x = X.mean(0), X.std(0) + 1e-8
    y = (r - r.mean()) / r.std()
    xs = ((x - mu_x) / sd_x)[None, :]
    kappa_t = 1.5 * (1 - 20 / 100)
    for n, idx in (("a", [0, 1, 2]), ("b", [3, 4, 5])):
        Xn = (X[idx] - mu_x) / sd_x
        mu, sd = opt.surrogate(n, Xn, y[idx]).predict(xs, return_std=True)
        dist = np.min(np.linalg.norm(Xn - xs, axis=1))
        T = 1.0 if n == "a" else math.exp(-dist ** 2 / 2)
        assert s[n] == pytest.approx(mu[0] + kappa_t * sd[0] - 0.3 * (1 - T), rel=1e-6, abs=1e-9)


def test_choose_takes_the_best_score_first_name_on_ties():
    opt = doit_with_history(HIST, active="a")
    opt.acquisition = lambda feats: {"a": 1.0, "b": 0.0}
    assert opt.choose(np.zeros(4)) == "a"
    opt.acquisition = lambda feats: {"a": 1.0, "b": 1.0}
    assert opt.choose(np.zeros(4)) == "a"
    opt.acquisition = lambda feats: {"a": 0.0, "b": 1.0}
    assert opt.choose(np.zeros(4)) == "b"


# ------------------------------------------------------ exploration scaled to the run, rewards per step
def test_stage_reward_rate_is_per_step_between_window_centres():
    assert stage_reward_rate([10.0] * 5 + [5.0] * 5) == pytest.approx(0.5 / 5)      # k = 5, 5 steps apart
    assert stage_reward_rate([4.0, 2.0]) == pytest.approx(0.5)                      # k = 1, 1 step apart
    assert stage_reward_rate([4.0, 4.0, 1.0, 2.0, 2.0]) == pytest.approx(stage_reward([4.0, 4.0, 1.0, 2.0, 2.0]) / 3)
    # a linear fall has one rate whatever the stage length
    lin = lambda n: [100.0 - s for s in range(n)]
    assert stage_reward_rate(lin(5)) * 100 == pytest.approx(stage_reward_rate(lin(10)) * 100, rel=0.05)
    with pytest.raises(ValueError, match="at least two observed losses"):
        stage_reward_rate([1.0])


def test_probe_length_scales_with_the_run():
    ps = list(model().parameters())
    four = dict(CANDS, other=(SGD, dict(lr=0.01)))
    assert DOIT(ps, four, stage_len=10, total_steps=200).probe_len == 5            # 10 % of 200 over 4
    assert DOIT(ps, four, stage_len=10, total_steps=200, explore_frac=0.2).probe_len == 10   # capped at stage_len
    assert DOIT(ps, four, stage_len=10, total_steps=200, explore_frac=0.01).probe_len == 2   # at least 2
    assert DOIT(ps, four, stage_len=10, total_steps=200, n_init=2).probe_len == 2
    assert DOIT(ps, four, stage_len=10, total_steps=400).probe_len == 10
    assert DOIT(ps, four, stage_len=10, total_steps=200, explore_frac=None).probe_len == 10
    assert DOIT(ps, four, stage_len=10).probe_len == 10                             # no total_steps: full stages
    assert DOIT(ps, four).explore_frac == 0.1
    for bad in (0, 1.5, -0.1, "a"):
        with pytest.raises(ValueError, match="explore_frac must be None or a number in"):
            DOIT(ps, four, explore_frac=bad)


def test_probes_are_short_then_stages_are_full():
    X, y = problem()
    m = model()
    opt = DOIT(m.parameters(), CANDS, stage_len=6, total_steps=60)                  # 6 // 3 = 2-step probes
    assert opt.probe_len == 2
    ends = []
    for t in range(1, 19):
        opt.zero_grad()
        loss = ((m(X) - y) ** 2).mean()
        loss.backward()
        opt.observe(loss)
        n = len(opt.history)
        opt.step()
        if len(opt.history) > n:
            ends.append(t)
    assert ends == [2, 4, 6, 12, 18]
    assert [h[0] for h in opt.history[:3]] == ["sgd", "adam", "frozen"]
    assert opt.history[2][2] == pytest.approx(0.0, abs=1e-12)


# ------------------------------------------------------------------ learning-rate schedulers
def _sched_run(make_sched, steps=6):
    X, y = problem()
    m = model()
    opt = DOIT(m.parameters(), {"a": (SGD, dict(lr=0.1)), "b": (SGD, dict(lr=0.02))}, stage_len=3)
    sched = make_sched(opt)
    seen = []
    for _ in range(steps):
        opt.zero_grad()
        loss = ((m(X) - y) ** 2).mean()
        loss.backward()
        opt.observe(loss)
        before = [p.detach().clone() for p in m.parameters()]
        grads = [p.grad.detach().clone() for p in m.parameters()]
        active, scale = opt.active, opt.param_groups[0]["lr"]
        opt.step()
        base = {"a": 0.1, "b": 0.02}[active]
        for p, q, g in zip(m.parameters(), before, grads):             # plain SGD: p - lr * scale * g
            torch.testing.assert_close(p.detach(), q - base * scale * g)
        assert opt.optimizers[active].param_groups[0]["lr"] == pytest.approx(base * scale)
        seen.append(scale)
        sched.step()
    return seen


def test_param_groups_carry_lr_and_step_lr_scales_every_candidate():
    assert DOIT(list(model().parameters()), CANDS).param_groups[0]["lr"] == 1.0
    seen = _sched_run(lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5))
    assert seen == pytest.approx([1.0, 1.0, 0.5, 0.5, 0.25, 0.25])


def test_cosine_annealing_scales_every_candidate():
    seen = _sched_run(lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=5))
    assert seen == pytest.approx([0.5 * (1 + math.cos(math.pi * e / 5)) for e in range(6)], abs=1e-9)


def test_lr_scale_survives_state_dict_and_bad_scales_raise():
    X, y = problem()
    m = model()
    opt = DOIT(m.parameters(), CANDS, stage_len=3)
    opt.param_groups[0]["lr"] = 0.25
    other = DOIT(model().parameters(), CANDS, stage_len=3)
    other.load_state_dict(opt.state_dict())
    assert other.param_groups[0]["lr"] == 0.25
    for bad in (float("nan"), -1.0):
        opt.param_groups[0]["lr"] = bad
        opt.zero_grad()
        loss = ((m(X) - y) ** 2).mean()
        loss.backward()
        opt.observe(loss)
        with pytest.raises(ValueError, match="param group 'lr'"):
            opt.step()
        opt.stage_losses.clear()


def test_non_finite_gradient_stops_training():
    m = model()
    opt = DOIT(m.parameters(), CANDS, stage_len=3)
    X, y = problem()
    ((m(X) - y) ** 2).mean().backward()
    m.weight.grad[0, 0] = float("nan")
    opt.observe(1.0)
    with pytest.raises(FloatingPointError, match="non-finite gradient"):
        opt.step()
    with pytest.raises(ValueError, match="observed loss must be finite"):
        opt.observe(float("nan"))


def test_experiment_standardisation_keeps_train_constant_features_bounded():
    """A pixel constant (or nearly) on the training split must not become +-1e6 on validation/test
    (it was ``sd + 1e-6``): the scale is floored at one grey level."""
    from iclr26.optimization.doit.experiment import load_split
    worst = 0.0
    for seed in range(12):
        (Xtr, _), (Xva, _), (Xte, _) = load_split(seed)
        worst = max(worst, float(Xva.abs().max()), float(Xte.abs().max()))
        const = Xtr.std(0) == 0
        assert bool((Xtr[:, const] == 0).all())
    assert worst <= 16.0
