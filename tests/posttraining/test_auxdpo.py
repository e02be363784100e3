"""Tests for iclr26.posttraining.auxdpo (arXiv:2510.20413)."""
import copy

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from iclr26.posttraining.auxdpo import (LinearSoftmaxBandit, PreferenceCounts, auxdpo_loss, dpo_loss, fit_auxdpo,
                                        fit_bt_reward, fit_dpo, fit_ipo, ipo_loss, null_space_basis, random_bandit,
                                        rlhf_local_solution, rlhf_solution, sample_preferences, three_arm_example)
from iclr26.posttraining.auxdpo.experiment import SCALES, run, three_arm_sampled, three_arm_values


def logsig_ref(x):
    return -np.logaddexp(0.0, -np.asarray(x, float))


def batch(n=6, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, generator=g, dtype=dtype) * 3 - 5 for _ in range(4)]


# ----------------------------------------------------------------------------- the three-arm example
def test_three_arm_example_matches_the_paper():
    v = three_arm_values()
    assert v["base"] == pytest.approx(1.0, abs=1e-12)
    assert v["dpo"] == pytest.approx(0.895, abs=1e-3)          # paper: DPO 0.895
    assert v["ipo"] == pytest.approx(0.969, abs=1e-3)          # paper: IPO 0.969
    assert v["auxdpo"] == pytest.approx(1.199, abs=1e-3)       # paper: AuxDPO 1.199
    assert v["rlhf_local"] == pytest.approx(v["auxdpo"], abs=1e-6)
    assert v["dpo"] < v["base"] < v["auxdpo"]


def test_three_arm_closed_forms():
    b, r, data = three_arm_example()
    th_dpo, th_aux = fit_dpo(b, data, 1.0)[0], fit_auxdpo(b, data, 1.0, 0.0)[0]
    # DPO stationarity written out: sum_ij n_ij d_ij (sigmoid(u d_ij) - p*_ij) = 0, d = phi_i - phi_j
    d = np.array([2.0, 1.0, -1.0])
    p = 1 / (1 + np.exp(-np.array([-1.0, 1.0, 2.0])))
    n = np.array([1.0, 10.0, 1.0])
    assert np.sum(n * d * (1 / (1 + np.exp(-th_dpo * d)) - p)) == pytest.approx(0.0, abs=1e-5)
    assert th_aux == pytest.approx(-0.5, abs=1e-5)            # theta0 + F^-1 A r* / beta = -(1/3)/(2/3)
    assert rlhf_local_solution(b, r, 1.0)[0] == pytest.approx(-0.5, abs=1e-12)
    pi = b.policy(np.array([th_dpo]))[0]
    assert pi[0] > pi[1]                                       # DPO reverses the order of arms 1 and 2
    assert r[0, 1] > r[0, 0]
    # IPO closed form: u = (1/(2 tau)) sum n d (2p - 1) / sum n d^2
    assert fit_ipo(b, data, 1.0)[0] == pytest.approx(0.5 * np.sum(n * d * (2 * p - 1)) / np.sum(n * d * d), abs=1e-6)
    # the exact RLHF optimum: stationarity of E r - KL at theta (the score is phi - E phi)
    th = rlhf_solution(b, r, 1.0)
    pol = b.policy(th)[0]
    f = r[0] - np.log(pol / b.policy(b.theta0)[0])
    assert np.sum(pol * (b.phi[0, :, 0] - pol @ b.phi[0, :, 0]) * f) == pytest.approx(0.0, abs=1e-7)


def test_three_arm_sampled_is_near_population():
    vals = [three_arm_sampled(np.random.default_rng(i), 20000) for i in range(3)]
    assert np.mean([v["dpo"] for v in vals]) == pytest.approx(0.8956, abs=0.01)
    assert np.mean([v["auxdpo"] for v in vals]) == pytest.approx(1.1993, abs=0.01)


# ----------------------------------------------------------------------------- the loss
def test_auxdpo_reduces_to_dpo_with_zero_offsets():
    pw, pl, rw, rl = batch()
    z = torch.zeros(6, dtype=torch.float64)
    for beta in (0.1, 1.0, 2.5):
        ref = -logsig_ref(beta * ((pw - rw) - (pl - rl)).numpy()).mean()
        assert auxdpo_loss(pw, pl, rw, rl, z, z, beta).item() == pytest.approx(ref, rel=1e-12)
        assert auxdpo_loss(pw, pl, rw, rl, z, z, beta, lambda_amp=3.0, lambda_null=2.0, A_chosen=torch.ones(2, 6,
                           dtype=torch.float64), A_rejected=torch.ones(2, 6, dtype=torch.float64)).item() == \
            pytest.approx(ref, rel=1e-12)
        assert dpo_loss(pw, pl, rw, rl, beta).mean().item() == pytest.approx(ref, rel=1e-12)


def test_auxdpo_loss_formula_with_offsets_and_penalties():
    pw, pl, rw, rl = batch(seed=1)
    g = torch.Generator().manual_seed(3)
    dw, dl = torch.randn(6, generator=g, dtype=torch.float64), torch.randn(6, generator=g, dtype=torch.float64)
    Aw, Al = torch.randn(3, 6, generator=g, dtype=torch.float64), torch.randn(3, 6, generator=g, dtype=torch.float64)
    beta, ln, la = 0.7, 0.3, 0.05
    h = ((pw - rw) - (pl - rl)).numpy()
    pref = -logsig_ref(beta * h + dw.numpy() - dl.numpy())
    A = np.concatenate([Aw.numpy(), Al.numpy()], 1)
    dB = np.concatenate([dw.numpy(), dl.numpy()])
    ref = pref.mean() + ln * np.sum((A @ dB) ** 2) + la * np.sum(dB ** 2)
    got = auxdpo_loss(pw, pl, rw, rl, dw, dl, beta, A_chosen=Aw, A_rejected=Al, lambda_null=ln, lambda_amp=la)
    assert got.item() == pytest.approx(ref, rel=1e-12)
    per = auxdpo_loss(pw, pl, rw, rl, dw, dl, beta, reduction="none")
    np.testing.assert_allclose(per.numpy(), pref, rtol=1e-12)
    # only the offset difference enters the preference term
    np.testing.assert_allclose(auxdpo_loss(pw, pl, rw, rl, dw + 1.5, dl + 1.5, beta, reduction="none").numpy(),
                               pref, rtol=1e-12)


def test_ipo_loss_formula():
    pw, pl, rw, rl = batch(seed=2)
    h = ((pw - rw) - (pl - rl)).numpy()
    np.testing.assert_allclose(ipo_loss(pw, pl, rw, rl, tau=0.4).numpy(), (h - 1 / 0.8) ** 2, rtol=1e-12)


def test_auxdpo_loss_gradients_and_dtypes():
    for dtype in (torch.float32, torch.float64):
        pw, pl, rw, rl = batch(dtype=dtype)
        pw.requires_grad_(True)
        dw = torch.zeros(6, dtype=dtype, requires_grad=True)
        dl = torch.zeros(6, dtype=dtype)
        loss = auxdpo_loss(pw, pl, rw, rl, dw, dl, 0.5)
        assert loss.dtype == dtype
        loss.backward()
        # d/d delta_w = d/d(beta h) = (1/beta) d/d pw
        torch.testing.assert_close(dw.grad, pw.grad / 0.5)
        assert torch.all(dw.grad < 0)


@pytest.mark.parametrize("kw,match", [
    (dict(beta=0.0), "beta"), (dict(beta=-1.0), "beta"), (dict(lambda_amp=-0.1), "lambda_amp"),
    (dict(lambda_null=-1.0), "lambda_null"), (dict(lambda_null=1.0), "A_chosen"),
    (dict(lambda_null=1.0, A_chosen=torch.ones(2, 5), A_rejected=torch.ones(2, 6)), "A_chosen"),
    (dict(reduction="sum"), "reduction"),
])
def test_auxdpo_loss_rejects_bad_arguments(kw, match):
    pw, pl, rw, rl = batch(dtype=torch.float32)
    z = torch.zeros(6)
    args = dict(beta=0.1)
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        auxdpo_loss(pw, pl, rw, rl, z, z, **args)


def test_loss_rejects_bad_shapes_and_types():
    pw, pl, rw, rl = batch(dtype=torch.float32)
    with pytest.raises(ValueError, match="delta_rejected"):
        auxdpo_loss(pw, pl, rw, rl, torch.zeros(6), torch.zeros(5), 0.1)
    with pytest.raises(ValueError, match="1-D"):
        dpo_loss(pw[None], pl[None], rw[None], rl[None], 0.1)
    with pytest.raises(TypeError, match="torch.Tensor"):
        ipo_loss(pw.numpy(), pl, rw, rl, 0.1)
    with pytest.raises(ValueError, match="tau"):
        ipo_loss(pw, pl, rw, rl, tau=0)
    with pytest.raises(ValueError, match="beta"):
        dpo_loss(pw, pl, rw, rl, float("inf"))


# ----------------------------------------------------------------------------- bandit geometry
@pytest.fixture(scope="module")
def inst():
    return random_bandit(np.random.default_rng(7), S=2, K=5, d=2)


def test_score_A_and_fisher(inst):
    b, r, _ = inst
    eps = 1e-6
    num = np.stack([(b.logpi(b.theta0 + eps * e) - b.logpi(b.theta0 - eps * e)) / (2 * eps) for e in np.eye(b.d)], -1)
    np.testing.assert_allclose(b.score(), num, atol=1e-7)
    w = b.rho[:, None] * b.policy(b.theta0)
    A = b.A_matrix()
    assert A.shape == (b.d, b.S * b.K)
    np.testing.assert_allclose(A[:, 3], w[0, 3] * num[0, 3], atol=1e-8)
    np.testing.assert_allclose(A[:, b.K + 1], w[1, 1] * num[1, 1], atol=1e-8)
    F = sum(w[s, a] * np.outer(num[s, a], num[s, a]) for s in range(b.S) for a in range(b.K))
    np.testing.assert_allclose(b.fisher(), F, atol=1e-7)
    assert b.expected_reward(b.theta0, r) == pytest.approx(float(b.rho @ (b.policy(b.theta0) * r).sum(1)))
    assert b.kl(b.theta0, b.theta0) == pytest.approx(0.0, abs=1e-14)
    assert b.kl(b.theta0 + 1.0, b.theta0) > 0
    np.testing.assert_allclose(b.implicit_reward(b.theta0 + 0.3, 2.0), 2 * (b.logpi(b.theta0 + 0.3) - b.logpi(b.theta0)))
    t = torch.tensor(b.theta0 + 0.2, dtype=torch.float64)
    np.testing.assert_allclose(b.logpi(t).numpy(), b.logpi(b.theta0 + 0.2), atol=1e-12)


def test_null_space_basis(inst):
    b, _, _ = inst
    A = b.A_matrix()
    G = null_space_basis(A)
    assert G.shape == (b.S * b.K, b.S * b.K - np.linalg.matrix_rank(A))
    np.testing.assert_allclose(A @ G, 0, atol=1e-12)
    np.testing.assert_allclose(G.T @ G, np.eye(G.shape[1]), atol=1e-12)
    with pytest.raises(ValueError, match="2-D"):
        null_space_basis(np.ones(3))


def test_rlhf_local_solution_is_the_small_step_limit(inst):
    b, r, _ = inst
    beta = 200.0
    step = beta * (rlhf_solution(b, r, beta) - b.theta0)
    np.testing.assert_allclose(step, np.linalg.solve(b.fisher(), b.A_matrix() @ r.reshape(-1)), rtol=0.03, atol=1e-3)
    np.testing.assert_allclose(beta * (rlhf_local_solution(b, r, beta) - b.theta0),
                               np.linalg.solve(b.fisher(), b.A_matrix() @ r.reshape(-1)), rtol=1e-8)


def population(b, r):
    S, K = b.S, b.K
    ia, ib = np.triu_indices(K, 1)
    s = np.repeat(np.arange(S), ia.size)
    a, c = np.tile(ia, S), np.tile(ib, S)
    n = np.random.default_rng(1).uniform(0.2, 3.0, s.size)
    p = 1 / (1 + np.exp(-(r[s, a] - r[s, c])))
    return PreferenceCounts(s, a, c, n * p, n * (1 - p))


def test_dpo_is_the_weighted_kl_projection(inst):
    """Proposition 1: DPO = argmin_theta sum n KL(p_BTL(r*) || p_BTL(r_theta^beta))."""
    b, r, _ = inst
    data = population(b, r)
    beta = 0.8
    n, pa = data.wins_a + data.wins_b, data.wins_a / (data.wins_a + data.wins_b)

    def kl_obj(th):
        ri = b.implicit_reward(th, beta)
        q = 1 / (1 + np.exp(-(ri[data.s, data.a] - ri[data.s, data.b])))
        return np.sum(n * (pa * np.log(pa / q) + (1 - pa) * np.log((1 - pa) / (1 - q))))

    ref = minimize(kl_obj, b.theta0, method="BFGS", options={"gtol": 1e-10}).x
    np.testing.assert_allclose(fit_dpo(b, data, beta), ref, atol=1e-5)


def test_auxdpo_small_step_recovers_rlhf_local(inst):
    b, r, _ = inst
    data = population(b, r)
    beta = 50.0
    th, delta = fit_auxdpo(b, data, beta, 0.0, return_delta=True)
    target = np.linalg.pinv(b.fisher()) @ b.A_matrix() @ r.reshape(-1)
    np.testing.assert_allclose(beta * (th - b.theta0), target, rtol=0.05, atol=2e-3)
    np.testing.assert_allclose(b.A_matrix() @ delta.reshape(-1), 0, atol=1e-10)
    # DPO does not (misspecified): its step differs
    err_dpo = np.linalg.norm(beta * (fit_dpo(b, data, beta) - b.theta0) - target)
    err_aux = np.linalg.norm(beta * (th - b.theta0) - target)
    assert err_dpo > 0.05 * np.linalg.norm(target)
    assert err_aux < 0.5 * err_dpo
    # a large amplitude penalty shrinks delta to zero and AuxDPO to DPO
    np.testing.assert_allclose(fit_auxdpo(b, data, 1.0, 1e6), fit_dpo(b, data, 1.0), atol=1e-4)


def test_bt_reward_recovers_differences(inst):
    b, r, _ = inst
    rh = fit_bt_reward(b, population(b, r), ridge=1e-9)
    np.testing.assert_allclose(rh - rh.mean(1, keepdims=True), r - r.mean(1, keepdims=True), atol=1e-3)


def test_regularised_objective_formula(inst):
    b, r, _ = inst
    th = b.theta0 + 0.3
    pi, pi0 = b.policy(th), b.policy(b.theta0)
    rr = np.asarray(r, float).reshape(b.S, b.K)
    ref = sum(b.rho[s] * (pi[s] @ rr[s] - 0.7 * (pi[s] @ (np.log(pi[s]) - np.log(pi0[s])))) for s in range(b.S))
    assert b.regularised_objective(th, r, 0.7) == pytest.approx(ref, rel=1e-10)
    assert b.regularised_objective(b.theta0, r, 5.0) == pytest.approx(b.expected_reward(b.theta0, r), rel=1e-12)
    with pytest.raises(ValueError, match="beta"):
        b.regularised_objective(th, r, -1.0)


def test_ipo_matched_kl_hits_the_target(inst):
    from iclr26.posttraining.auxdpo.bandit import fit_ipo, fit_ipo_matched_kl

    b, r, pp = inst
    dt = sample_preferences(b, r, pp, 500, np.random.default_rng(3))
    target = b.kl(fit_ipo(b, dt, 0.5), b.theta0)
    th, tau = fit_ipo_matched_kl(b, dt, target, iters=30)
    assert tau == pytest.approx(0.5, rel=0.05)
    assert b.kl(th, b.theta0) == pytest.approx(target, rel=0.02)
    # unreachable targets return the range ends
    assert fit_ipo_matched_kl(b, dt, 0.0, tau_range=(1e-2, 10.0))[1] == 10.0
    assert fit_ipo_matched_kl(b, dt, 1e6, tau_range=(1e-2, 10.0))[1] == 1e-2
    for kw, match in ((dict(target_kl=float("nan")), "target_kl"), (dict(target_kl=-1.0), "target_kl"),
                      (dict(target_kl=0.1, tau_range=(1.0, 0.5)), "tau_range"),
                      (dict(target_kl=0.1, iters=0), "iters")):
        with pytest.raises(ValueError, match=match):
            fit_ipo_matched_kl(b, dt, **kw)


def test_sample_preferences():
    b, r, pairs = random_bandit(np.random.default_rng(3), S=2, K=4, d=2)
    d = sample_preferences(b, r, pairs, 500, np.random.default_rng(0))
    assert (d.wins_a + d.wins_b).sum() == 500
    assert np.all(d.a < d.b) and np.all(d.s < 2)
    big = sample_preferences(b, r, pairs, 200000, np.random.default_rng(1))
    p = 1 / (1 + np.exp(-(r[big.s, big.a] - r[big.s, big.b])))
    frac = big.wins_a / (big.wins_a + big.wins_b)
    heavy = (big.wins_a + big.wins_b) > 5000
    np.testing.assert_allclose(frac[heavy], p[heavy], atol=0.02)
    with pytest.raises(ValueError, match="pair_probs"):
        sample_preferences(b, r, pairs[:, :3], 10, np.random.default_rng(0))


def test_bandit_rejects_bad_input():
    with pytest.raises(ValueError, match="phi"):
        LinearSoftmaxBandit(np.ones((3, 2)), np.zeros(2))
    with pytest.raises(ValueError, match="theta0"):
        LinearSoftmaxBandit(np.ones((1, 3, 2)), np.zeros(3))
    with pytest.raises(ValueError, match="at least 2 actions"):
        LinearSoftmaxBandit(np.ones((1, 1, 2)), np.zeros(2))
    with pytest.raises(ValueError, match="rho"):
        LinearSoftmaxBandit(np.ones((2, 3, 2)), np.zeros(2), rho=[0.7, 0.7])
    with pytest.raises(ValueError, match="non-negative"):
        PreferenceCounts([0], [0], [1], [-1], [2])
    with pytest.raises(ValueError, match="one length"):
        PreferenceCounts([0, 0], [0], [1], [1], [2])


# ----------------------------------------------------------------------------- the experiment
def test_experiment_smoke_is_deterministic(monkeypatch):
    from iclr26.posttraining.auxdpo import experiment as ex

    # the bandit part twice; the language-model part (SmolLM2) is exercised by the contract smoke run
    monkeypatch.setattr(ex, "lm_trial", lambda cfg, seed: ({"dpo": [1.0], "auxdpo": [0.0]}, {}))
    a, b = run("smoke", 0), run("smoke", 0)
    assert a["metrics"] == b["metrics"]
    m = a["metrics"]
    assert set(m["true_reward"]) == {"base", "dpo", "ipo", "auxdpo", "rlhf"}
    assert len(m["true_reward"]["dpo"]) == SCALES["smoke"]["n_eval"]
    assert len(m["three_arm_reward"]["dpo"]) == SCALES["smoke"]["n_three"]
    assert all(v >= 0 for v in m["kl_from_rlhf"]["auxdpo"])
    assert a["info"]["lambda_amp"] in SCALES["smoke"]["lambda_grid"]


def test_bandit_trial_metrics_are_wired_as_the_claims_read_them():
    from iclr26.posttraining.auxdpo import experiment as ex

    cfg = dict(SCALES["smoke"], n_eval=4)
    m, info = ex._bandit_trial(cfg, np.random.default_rng(5))
    kl, loc = m["kl_from_rlhf"], m["kl_from_rlhf_local"]
    gaps = np.asarray(kl["auxdpo"]) - np.asarray(kl["dpo"])
    assert m["kl_gap_rlhf_median"]["auxdpo"] == pytest.approx(np.median(gaps), abs=1e-12)
    assert m["kl_gap_rlhf_mean"]["auxdpo"] == pytest.approx(np.mean(gaps), abs=1e-12)
    gl = np.asarray(loc["auxdpo"]) - np.asarray(loc["dpo"])
    assert m["kl_gap_local_median"]["auxdpo"] == pytest.approx(np.median(gl), abs=1e-12)
    assert not np.allclose(loc["auxdpo"], kl["auxdpo"])           # the local target is not the full one
    assert m["auxdpo_nearer_than_dpo"]["auxdpo"] == [float(g < 0) for g in gaps]
    # IPO matched to AuxDPO's own KL from the base, bandit by bandit
    assert info["kl_to_base"]["ipo_kl_matched"] == pytest.approx(info["kl_to_base"]["auxdpo"], rel=0.05)
    base = np.asarray(m["true_reward"]["base"])
    np.testing.assert_allclose(m["reward_gain"]["auxdpo"], np.asarray(m["true_reward"]["auxdpo"]) - base)


def test_tune_picks_the_best_value_on_validation():
    from iclr26.posttraining.auxdpo import experiment as ex
    from iclr26.posttraining.auxdpo.bandit import fit_auxdpo, fit_ipo

    rng = np.random.default_rng(11)
    cfg = dict(SCALES["smoke"], lambda_grid=(1e-4, 0.1, 10.0), tau_grid=(0.01, 0.3, 10.0))
    val = []
    for _ in range(2):
        b, r, dt = ex._draw(rng, cfg)
        val.append((b, r, dt, null_space_basis(b.A_matrix())))
    t = ex._tune(cfg, val)
    rew = {lam: np.mean([b.expected_reward(fit_auxdpo(b, dt, 1.0, lam, Gamma=G), r) for b, r, dt, G in val])
           for lam in cfg["lambda_grid"]}
    obj = {tau: np.mean([b.regularised_objective(fit_ipo(b, dt, tau), r, 1.0) for b, r, dt, _ in val])
           for tau in cfg["tau_grid"]}
    assert t["lambda_reward"] == max(rew, key=rew.get)
    assert t["tau_objective"] == max(obj, key=obj.get)
    assert len(set(np.round(list(obj.values()), 9))) == 3       # the grid values differ: the pick means something


def test_bandit_inputs_are_validated(inst):
    b, r, _ = inst
    with pytest.raises(ValueError, match="NaN or inf"):
        PreferenceCounts([0], [0], [1], [float("nan")], [2])
    with pytest.raises(ValueError, match="integer"):
        PreferenceCounts([0], [0.5], [1], [1], [2])
    with pytest.raises(ValueError, match="different actions"):
        PreferenceCounts([0], [1], [1], [1], [2])
    with pytest.raises(ValueError, match="finite"):
        LinearSoftmaxBandit(np.full((2, 3, 2), np.nan), np.zeros(2))
    data = PreferenceCounts([0, 1], [0, 1], [1, 2], [3, 1], [1, 2])
    with pytest.raises(ValueError, match="null"):
        fit_auxdpo(b, data, 1.0, 0.1, Gamma=np.eye(b.S * b.K)[:, :2])


# ----------------------------------------------------------------------------- the TRL trainer
@pytest.fixture(scope="module")
def trl_setup(tmp_path_factory):
    pytest.importorskip("trl")
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    from iclr26.models.tiny import SimpleTokenizer, TinyLMConfig, build_tiny_lm
    from iclr26.posttraining.auxdpo import AuxDPOTrainer

    rows = [dict(prompt=f"q{i % 5}:", chosen=" yes" + "a" * (i % 3), rejected=" no" + "b" * (i % 2)) for i in range(8)]
    tok = SimpleTokenizer.from_texts([r["prompt"] + r["chosen"] + r["rejected"] for r in rows])
    torch.manual_seed(0)
    # initializer_range 0.3: a non-uniform next-token distribution
    model = build_tiny_lm(TinyLMConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                       num_key_value_heads=1, intermediate_size=64, initializer_range=0.3),
                          vocab_size=tok.vocab_size, pad_token_id=tok.pad_token_id,
                          bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    out = str(tmp_path_factory.mktemp("auxdpo"))

    def cfg(**kw):
        base = dict(output_dir=out, per_device_train_batch_size=4, max_steps=2, learning_rate=1e-2,
                    precompute_ref_log_probs=True, report_to=[], save_strategy="no", use_cpu=True, beta=0.5)
        base.update(kw)
        return DPOConfig(**base)

    ds = Dataset.from_list(rows)
    m1, m2 = copy.deepcopy(model), copy.deepcopy(model)
    dpo = DPOTrainer(model=m1, args=cfg(), train_dataset=ds, processing_class=tok)
    aux = AuxDPOTrainer(model=m2, args=cfg(), train_dataset=ds, processing_class=tok, lambda_null=1.0,
                        lambda_amp=0.1)
    return dict(dpo=dpo, aux=aux, m1=m1, m2=m2, cfg=cfg, ds=ds, tok=tok, model=model, AuxDPOTrainer=AuxDPOTrainer)


def test_trainer_reduces_to_dpo_trainer(trl_setup):
    s = trl_setup
    dpo, aux, m1, m2 = s["dpo"], s["aux"], s["m1"], s["m2"]
    b = next(iter(dpo.get_train_dataloader()))
    ba = next(iter(aux.get_train_dataloader()))
    assert "aux_index" in ba and "aux_index" not in b
    m1.train()
    m2.train()
    ref = dpo.compute_loss(m1, b).item()
    assert aux.compute_loss(m2, ba).item() == pytest.approx(ref, rel=1e-6)
    # the library loss on the same batch (delta = 0) is TRL's DPO sigmoid loss
    with torch.no_grad():
        lp = aux._sequence_logps(m2, ba)
    pw, pl = lp.double().chunk(2)
    z = torch.zeros_like(pw)
    mine = auxdpo_loss(pw, pl, ba["ref_chosen_logps"].double(), ba["ref_rejected_logps"].double(), z, z, 0.5)
    assert mine.item() == pytest.approx(ref, rel=1e-5)
    # offsets change the loss exactly as the formula says
    with torch.no_grad():
        aux.aux_delta.copy_(torch.linspace(-1, 1, aux.aux_delta.numel()).reshape(aux.aux_delta.shape))
    d = aux.aux_delta[ba["aux_index"]].detach().double()
    K = aux.null_space_gram(m2, ba).double()
    dB = torch.cat([d[:, 0], d[:, 1]])
    pref_amp = auxdpo_loss(pw, pl, ba["ref_chosen_logps"].double(), ba["ref_rejected_logps"].double(), d[:, 0],
                           d[:, 1], 0.5, lambda_amp=0.1).item()
    aux.lambda_null = 0.0                      # the preference and amplitude terms alone
    try:
        assert aux.compute_loss(m2, ba).item() == pytest.approx(pref_amp, rel=1e-5)
    finally:
        aux.lambda_null = 1.0
    want = pref_amp + 1.0 * (dB @ K @ dB).item()
    assert aux.compute_loss(m2, ba).item() == pytest.approx(want, rel=1e-4)
    m2.eval()
    assert aux.compute_loss(m2, ba).item() == pytest.approx(dpo.compute_loss(m2, b).item(), rel=1e-6)
    m2.train()
    with torch.no_grad():
        aux.aux_delta.zero_()


def test_null_space_gram_matches_per_example_gradients(trl_setup):
    s = trl_setup
    aux, m2 = s["aux"], s["m2"]
    ba = next(iter(aux.get_train_dataloader()))
    K = aux.null_space_gram(m2, ba)
    params = [p for p in m2.parameters() if p.requires_grad]
    lp = aux._sequence_logps(m2, ba)
    g0 = torch.cat([g.reshape(-1) for g in torch.autograd.grad(lp[0], params, retain_graph=True)])
    g2 = torch.cat([g.reshape(-1) for g in torch.autograd.grad(lp[2], params)])
    assert K.shape == (lp.shape[0], lp.shape[0])
    assert K[0, 2].item() == pytest.approx((g0 @ g2).item(), rel=1e-4)
    assert K[0, 0].item() == pytest.approx((g0 @ g0).item(), rel=1e-4)


def test_null_space_penalty_value_and_gradient(trl_setup):
    # the one-backward penalty equals d^T K d with K from the per-sequence gradients, and its
    # gradient with respect to d is 2 K d (K held constant)
    s = trl_setup
    aux, m2 = s["aux"], s["m2"]
    ba = next(iter(aux.get_train_dataloader()))
    ba = {k: v for k, v in ba.items() if k != "aux_index"}
    K = aux.null_space_gram(m2, ba).double()
    n = K.shape[0]
    d = torch.linspace(-0.7, 0.9, n).float().requires_grad_(True)
    pen = aux.null_space_penalty(m2, ba, d)
    ref = d.detach().double() @ K @ d.detach().double()
    assert pen.item() == pytest.approx(ref.item(), rel=1e-4)
    (gd,) = torch.autograd.grad(pen, d)
    torch.testing.assert_close(gd.double(), 2 * K @ d.detach().double(), rtol=1e-4, atol=1e-6)
    assert not all(p.grad is not None and p.grad.abs().sum() > 0 for p in m2.parameters() if p.requires_grad)
    with pytest.raises(ValueError, match="d_b has shape"):
        aux.null_space_penalty(m2, ba, torch.zeros(n + 1))


def test_one_epoch_auxdpo_equals_dpo(trl_setup):
    # with a per-pair offset table each offset is still zero at its pair's first visit, so within
    # one epoch (every pair seen once) the policy update equals DPO's exactly
    s = trl_setup
    ma, md = copy.deepcopy(s["model"]), copy.deepcopy(s["model"])
    cfg = s["cfg"](max_steps=2, per_device_train_batch_size=4)  # 8 rows: one epoch
    aux = s["AuxDPOTrainer"](model=ma, args=cfg, train_dataset=s["ds"], processing_class=s["tok"],
                             lambda_null=1.0, lambda_amp=0.01, delta_lr=0.5)
    from trl import DPOTrainer

    dpo = DPOTrainer(model=md, args=s["cfg"](max_steps=2, per_device_train_batch_size=4), train_dataset=s["ds"],
                     processing_class=s["tok"])
    aux.train()
    dpo.train()
    assert aux.aux_delta.abs().sum().item() > 0
    for a, b in zip(ma.parameters(), md.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_trainer_trains_policy_and_offsets(trl_setup):
    s = trl_setup
    model = copy.deepcopy(s["model"])
    before = [p.detach().clone() for p in model.parameters()]
    tr = s["AuxDPOTrainer"](model=model, args=s["cfg"](), train_dataset=s["ds"], processing_class=s["tok"],
                            lambda_null=0.5, lambda_amp=0.01, delta_lr=0.05)
    tr.train()
    assert tr.state.global_step == 2
    assert tr.aux_delta.abs().sum().item() > 0
    assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters()))
    assert any(g.get("lr") == 0.05 or g.get("initial_lr") == 0.05 for g in tr.optimizer.param_groups)
    assert all(np.isfinite(h["loss"]) for h in tr.state.log_history if "loss" in h)
    # state_dict round trip of the trained policy
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    m3 = copy.deepcopy(s["model"])
    m3.load_state_dict(sd)
    for k, v in m3.state_dict().items():
        torch.testing.assert_close(v, sd[k])


def test_trainer_rejects_bad_configs(trl_setup):
    s = trl_setup
    T = s["AuxDPOTrainer"]
    kw = dict(model=copy.deepcopy(s["model"]), train_dataset=s["ds"], processing_class=s["tok"])
    with pytest.raises(ValueError, match="precompute_ref_log_probs"):
        T(args=s["cfg"](precompute_ref_log_probs=False), **kw)
    with pytest.raises(ValueError, match="loss_type"):
        T(args=s["cfg"](loss_type=["ipo"]), **kw)
    with pytest.raises(ValueError, match="lambda_amp"):
        T(args=s["cfg"](), lambda_amp=-1.0, **kw)
    with pytest.raises(ValueError, match="lambda_null"):
        T(args=s["cfg"](), lambda_null=-1.0, **kw)
    with pytest.raises(ValueError, match="delta_lr"):
        T(args=s["cfg"](), delta_lr=0.0, **kw)
    with pytest.raises(ValueError, match="train_dataset"):
        T(args=s["cfg"](), model=kw["model"], processing_class=s["tok"])
