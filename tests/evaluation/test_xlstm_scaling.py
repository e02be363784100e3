"""Tests of iclr26.evaluation.xlstm_scaling: the scaling-law fits against closed forms and scipy,
the model builders and their FLOP counts against hand counts, and rejections."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import optimize, special

from iclr26.evaluation.xlstm_scaling.fitting import (PAPER_INIT_GRID, fit_parametric_law, fit_power_law, huber,
                                                     huber_objective, isoflop_optimum, log_parametric_loss)
from iclr26.evaluation.xlstm_scaling.lm import ARCHS, build_lm, count_params, training_flops_per_token

TRUE = dict(a=6.0, b=8.0, e=0.5, alpha=0.35, beta=0.42)
SMALL_GRID = {"a": (0.0, 10.0), "b": (0.0, 10.0), "e": (0.0, 1.0), "alpha": (0.2, 0.5), "beta": (0.2, 0.5)}


def _runs(n=30, seed=0, noise=0.0, **params):
    rng = np.random.default_rng(seed)
    N = np.exp(rng.uniform(np.log(1e5), np.log(1e9), n))
    D = np.exp(rng.uniform(np.log(1e7), np.log(1e11), n))
    L = np.exp(log_parametric_loss(N, D, **(params or TRUE))) * np.exp(rng.normal(0, noise, n))
    return N, D, L


# ------------------------------------------------------------------ the law and the objective
@pytest.mark.parametrize("gamma", [1.0, 0.7, 1.6])
def test_log_law_is_the_closed_form(gamma):
    N, D = np.array([1e6, 3e8, 5e4]), np.array([1e9, 2e7, 1e12])
    A, B, E = math.exp(TRUE["a"]), math.exp(TRUE["b"]), math.exp(TRUE["e"])
    want = E + (A * N ** -TRUE["alpha"] + B * D ** -TRUE["beta"]) ** gamma
    got = np.exp(log_parametric_loss(N, D, **TRUE, gamma=gamma))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    lse = special.logsumexp([gamma * special.logsumexp([TRUE["a"] - TRUE["alpha"] * np.log(N),
                                                        TRUE["b"] - TRUE["beta"] * np.log(D)], axis=0),
                             np.full(3, TRUE["e"])], axis=0)
    np.testing.assert_allclose(np.log(got), lse, rtol=1e-12)


def test_huber_matches_scipy_and_rejects_bad_delta():
    r = np.linspace(-0.01, 0.01, 41)
    for delta in (1e-3, 5e-3):
        np.testing.assert_allclose(huber(r, delta), special.huber(delta, r), rtol=1e-12, atol=0)
    with pytest.raises(ValueError, match="delta"):
        huber(r, 0.0)


@pytest.mark.parametrize("fit_gamma", [False, True])
def test_objective_gradient_matches_finite_differences(fit_gamma):
    N, D, L = _runs(n=25, seed=3, noise=0.01)
    x = np.array([5.5, 8.3, 0.4, 0.3, 0.45] + ([1.2] if fit_gamma else []))
    for delta in (1e-3, 1.0):                     # the linear and the quadratic branch
        f = lambda z: huber_objective(z, np.log(N), np.log(D), np.log(L), delta, fit_gamma)[0]  # noqa: E731
        g = huber_objective(x, np.log(N), np.log(D), np.log(L), delta, fit_gamma)[1]
        num = optimize.approx_fprime(x, f, 1e-7)
        np.testing.assert_allclose(g, num, rtol=2e-4, atol=1e-8)
        r = np.log(L) - log_parametric_loss(N, D, *x[:5], gamma=x[5] if fit_gamma else 1.0)
        assert f(x) == pytest.approx(float(np.sum(huber(r, delta))), rel=1e-12)


# ------------------------------------------------------------------ fits
def test_parametric_fit_recovers_the_law():
    N, D, L = _runs()
    fit = fit_parametric_law(N, D, L, init_grid=SMALL_GRID)
    assert fit.n_inits == 32 and fit.gamma == 1.0
    for k, v in TRUE.items():
        assert getattr(fit, k) == pytest.approx(v, abs=2e-3), k
    assert fit.A == pytest.approx(math.exp(fit.a)) and fit.E == pytest.approx(math.exp(fit.e))
    np.testing.assert_allclose(fit.predict(N, D), L, rtol=1e-4)


def test_fit_with_gamma_recovers_gamma():
    N, D, L = _runs(n=40, seed=1, **TRUE, gamma=1.4)
    fit = fit_parametric_law(N, D, L, init_grid=SMALL_GRID, fit_gamma=True, gamma_grid=(1.0, 2.0))
    assert fit.n_inits == 64
    assert fit.gamma == pytest.approx(1.4, abs=0.02)
    np.testing.assert_allclose(fit.predict(N, D), L, rtol=1e-3)


def test_fit_keeps_the_best_start():
    N, D, L = _runs(noise=0.01)
    full = fit_parametric_law(N, D, L, init_grid=SMALL_GRID)
    one = fit_parametric_law(N, D, L, init_grid={k: v[:1] for k, v in SMALL_GRID.items()})
    assert full.objective <= one.objective + 1e-15
    assert len(PAPER_INIT_GRID["a"]) * len(PAPER_INIT_GRID["e"]) * len(PAPER_INIT_GRID["alpha"]) ** 2 * 5 == 2000


def test_compute_optimal_matches_the_chinchilla_closed_form():
    fit = fit_parametric_law(*_runs(), init_grid=SMALL_GRID)
    C = np.array([1e18, 1e20, 1e22])
    n_star, d_star = fit.compute_optimal(C, n_grid=np.logspace(4, 13, 200_000))
    a, b = fit.alpha, fit.beta
    G = (a * fit.A / (b * fit.B)) ** (1 / (a + b))
    want = G * (C / 6) ** (b / (a + b))
    np.testing.assert_allclose(n_star, want, rtol=1e-3)
    np.testing.assert_allclose(d_star * n_star * 6, C, rtol=1e-12)
    n8, _ = fit.compute_optimal(C, flops_per_param_token=8.0, n_grid=np.logspace(4, 13, 200_000))
    np.testing.assert_allclose(n8, G * (C / 8) ** (b / (a + b)), rtol=1e-3)


def test_isoflop_vertex_and_power_law():
    n = np.array([1e6, 3e6, 1e7, 3e7, 1e8])
    u = np.log10(n)
    loss = 0.3 * (u - 7.2) ** 2 + 2.5
    nstar, coef = isoflop_optimum(n, loss)
    assert nstar == pytest.approx(10 ** 7.2, rel=1e-9)
    np.testing.assert_allclose(coef, [0.3, -2 * 0.3 * 7.2, 0.3 * 7.2**2 + 2.5], rtol=1e-9)
    C = np.array([1e18, 1e19, 1e20, 1e21])
    pl = fit_power_law(C, 0.2 * C**0.47)
    assert pl.exponent == pytest.approx(0.47, rel=1e-9) and pl.coefficient == pytest.approx(0.2, rel=1e-6)
    assert pl.r2 == pytest.approx(1.0)
    np.testing.assert_allclose(pl.predict(C), 0.2 * C**0.47, rtol=1e-6)
    noisy = fit_power_law(C, 0.2 * C**0.47 * np.array([1.1, 0.9, 1.05, 0.97]))
    assert 0 < noisy.r2 < 1


def test_rejections():
    N, D, L = _runs(n=6)
    with pytest.raises(ValueError, match="positive"):
        fit_parametric_law(-N, D, L)
    with pytest.raises(ValueError, match="same length"):
        fit_parametric_law(N, D[:5], L)
    with pytest.raises(ValueError, match="at least 5 runs"):
        fit_parametric_law(N[:4], D[:4], L[:4])
    with pytest.raises(ValueError, match="at least 6 runs"):
        fit_parametric_law(N[:5], D[:5], L[:5], fit_gamma=True)
    with pytest.raises(ValueError, match="init_grid"):
        fit_parametric_law(N, D, L, init_grid={"a": (1.0,)})
    with pytest.raises(ValueError, match="huber_delta"):
        fit_parametric_law(N, D, L, huber_delta=0)
    with pytest.raises(ValueError, match="empty"):
        fit_parametric_law([], [], [])
    with pytest.raises(ValueError, match="no minimum"):
        isoflop_optimum([1e6, 1e7, 1e8], [2.0, 3.0, 2.0])
    with pytest.raises(ValueError, match="3 distinct"):
        isoflop_optimum([1e6, 1e6, 1e8], [2.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="same length"):
        isoflop_optimum([1e6, 1e7, 1e8], [2.0, 1.0])
    with pytest.raises(ValueError, match="finite"):
        isoflop_optimum([1e6, 1e7, 1e8], [2.0, np.nan, 2.0])
    with pytest.raises(ValueError, match="2 distinct"):
        fit_power_law([1e18, 1e18], [1.0, 2.0])
    with pytest.raises(ValueError, match="same length"):
        fit_power_law([1e18, 1e19], [1.0])
    fit = fit_parametric_law(*_runs(), init_grid=SMALL_GRID)
    with pytest.raises(ValueError, match="flops_per_param_token"):
        fit.compute_optimal([1e20], flops_per_param_token=0)


# ------------------------------------------------------------------ the two model families
@pytest.mark.parametrize("arch", ARCHS)
def test_models_build_train_and_count(arch):
    m = build_lm(arch, 32, 50, num_layers=2, num_heads=2, context_length=32, seed=0)
    assert count_params(m) == sum(p.numel() for p in m.parameters()) == m.num_parameters()
    ids = torch.randint(0, 50, (2, 32), generator=torch.Generator().manual_seed(1))
    out = m(input_ids=ids, labels=ids)
    assert out.logits.shape == (2, 32, 50) and torch.isfinite(out.loss)
    m2 = build_lm(arch, 32, 50, num_layers=2, num_heads=2, context_length=32, seed=0)
    m2.load_state_dict(m.state_dict())
    torch.testing.assert_close(m2(input_ids=ids).logits, m(input_ids=ids).logits)
    # the same feed-forward width in both families: 2.667 * 32 rounded up to a multiple of 8 = 88
    assert any(mod.out_features == 88 for mod in m.modules() if isinstance(mod, torch.nn.Linear))


def test_transformer_flops_are_the_hand_count():
    V, T, d, L = 40, 16, 32, 2
    m = build_lm("transformer", d, V, num_layers=L, context_length=T, seed=0)
    linear = sum(mod.weight.numel() for mod in m.modules() if isinstance(mod, torch.nn.Linear))
    full = 2 * linear + L * 2 * 2 * T * d         # projections + QK^T and AV (full T x T)
    assert training_flops_per_token(m, T, V, causal=False) == pytest.approx(3 * full, rel=1e-9)
    causal = 2 * linear + L * 2 * T * d           # the paper's count: half of the T x T products
    assert training_flops_per_token(m, T, V) == pytest.approx(3 * causal, rel=1e-9)


def test_xlstm_causal_discount_is_the_masked_half_of_the_chunk_products():
    V, T, d = 40, 32, 32
    m = build_lm("xlstm", d, V, num_layers=2, context_length=T, chunk_size=16, seed=0)
    full = training_flops_per_token(m, T, V, causal=False)
    # per token and layer the chunk products cost 2 x 16 x (d_qk + d_v) = 2 x 16 x 48 (QK^T and (QK^T)V);
    # the masked half of that, over 2 layers, forward and backward (x 3)
    assert full - training_flops_per_token(m, T, V) == pytest.approx(3 * 2 * 16 * 48, rel=1e-12)


def test_xlstm_flops_grow_linearly_with_context_and_transformer_faster():
    V = 40
    x = build_lm("xlstm", 32, V, context_length=128, seed=0)
    t = build_lm("transformer", 32, V, context_length=512, seed=0)
    fx = [training_flops_per_token(x, T, V) for T in (32, 128)]
    ft = [training_flops_per_token(t, T, V) for T in (32, 512)]
    assert fx[1] / fx[0] < 1.2                    # chunkwise mLSTM: per-token cost flat in T
    assert ft[1] / ft[0] > 1.5                    # attention: per-token cost grows with T
    assert training_flops_per_token(x, 32, V) > 0


def test_builder_rejections():
    with pytest.raises(ValueError, match="arch"):
        build_lm("mamba", 32, 50)
    with pytest.raises(ValueError, match="divisible"):
        build_lm("transformer", 30, 50, num_heads=4)
    with pytest.raises(ValueError, match="multiple of chunk_size"):
        build_lm("xlstm", 32, 50, context_length=40, chunk_size=16)
    with pytest.raises(ValueError, match="width"):
        build_lm("xlstm", 0, 50)


def test_isoflop_vertex_with_fallback_in_the_experiment():
    from iclr26.evaluation.xlstm_scaling.experiment import _nstar

    runs = [dict(n_params=n, loss=0.3 * (np.log10(n) - 4.6) ** 2 + 2) for n in (2e4, 3e4, 6e4, 1e5)]
    n, used = _nstar(runs)
    assert used and n == pytest.approx(10**4.6, rel=1e-9)
    edge = [dict(n_params=n, loss=0.3 * (np.log10(n) - 7.0) ** 2 + 2) for n in (2e4, 3e4, 6e4, 1e5)]
    n, used = _nstar(edge)                        # vertex far outside the grid: the best observed width
    assert not used and n == 1e5
    hump = [dict(n_params=n, loss=l) for n, l in zip((2e4, 3e4, 6e4, 1e5), (2.0, 2.5, 2.6, 2.1))]
    n, used = _nstar(hump)                        # no minimum: the best observed width
    assert not used and n == 2e4


def test_messages_name_the_bad_argument():
    N, D, L = _runs(n=8)
    for kw, name in ((dict(N=-N, D=D, loss=L), "N"), (dict(N=N, D=-D, loss=L), "D"), (dict(N=N, D=D, loss=-L), "loss")):
        with pytest.raises(ValueError, match=f"^{name} must hold finite positive numbers$"):
            fit_parametric_law(**kw, init_grid=SMALL_GRID)
    with pytest.raises(ValueError, match="^C must hold"):
        fit_power_law([-1.0, 2.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="^y must hold"):
        fit_power_law([1.0, 2.0], [1.0, np.inf])
    with pytest.raises(ValueError, match="^x must hold"):
        isoflop_optimum([0.0, 1e7, 1e8], [2.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="^loss must be finite$"):
        isoflop_optimum([1e6, 1e7, 1e8], [2.0, np.inf, 2.0])
    with pytest.raises(ValueError, match="^an IsoFLOP parabola needs at least 3 distinct sizes$"):
        isoflop_optimum([1e6, 1e6, 1e8], [2.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="^a power law needs at least 2 distinct budgets$"):
        fit_power_law([1e18, 1e18], [1.0, 2.0])
    with pytest.raises(ValueError, match=r"quadratic coefficient -1 <= 0"):
        isoflop_optimum([1e6, 1e7, 1e8], [1.0, 2.0, 1.0])
    fit = fit_parametric_law(*_runs(), init_grid=SMALL_GRID)
    with pytest.raises(ValueError, match="^C must hold"):
        fit.compute_optimal([0.0])
    with pytest.raises(ValueError, match="^n_grid must hold"):
        fit.compute_optimal([1e20], n_grid=[-1.0, 1e6])
    with pytest.raises(ValueError, match="^huber delta must be > 0"):
        huber([0.1], -1.0)


def test_boundaries_are_allowed():
    N, D, L = _runs(n=5)
    fit = fit_parametric_law(N, D, L, init_grid=SMALL_GRID)        # exactly as many runs as parameters
    assert fit.converged is True and np.isfinite(fit.objective)
    pl = fit_power_law([1e18, 1e19], [2.0, 4.0])                    # exactly two budgets
    assert pl.exponent == pytest.approx(np.log10(2.0)) and pl.r2 == 1.0
    flat = fit_power_law([1e18, 1e19, 1e20], [3.0, 3.0, 3.0])      # no spread: r2 defined as 1
    assert flat.r2 == 1.0 and flat.exponent == pytest.approx(0.0, abs=1e-12)
    np.testing.assert_allclose(flat.predict([1e18, 1e21]), [3.0, 3.0])
    assert fit.compute_optimal([1e20], flops_per_param_token=0.5)[0].shape == (1,)
    assert huber([1e-3], 1e-3)[0] == pytest.approx(0.5e-6)          # the quadratic branch at |x| = delta


def test_power_law_r2_matches_scipy():
    from scipy import stats

    C = np.array([1e18, 1e19, 1e20, 1e21])
    y = 0.2 * C**0.47 * np.array([1.1, 0.9, 1.05, 0.97])
    ref = stats.linregress(np.log(C), np.log(y))
    pl = fit_power_law(C, y)
    assert pl.r2 == pytest.approx(ref.rvalue**2, rel=1e-10)
    assert pl.exponent == pytest.approx(ref.slope, rel=1e-10)
    assert pl.coefficient == pytest.approx(np.exp(ref.intercept), rel=1e-10)


def test_default_grid_and_default_compute_grid(monkeypatch):
    import iclr26.evaluation.xlstm_scaling.fitting as fitting

    tiny = {"a": (6.0,), "b": (8.0,), "e": (0.5,), "alpha": (0.3, 0.4), "beta": (0.4,)}
    monkeypatch.setattr(fitting, "PAPER_INIT_GRID", tiny)
    fit = fitting.fit_parametric_law(*_runs())
    assert fit.n_inits == 2
    for k, v in TRUE.items():
        assert getattr(fit, k) == pytest.approx(v, abs=1e-2)
    n_star, _ = fit.compute_optimal([1e20])                      # default grid: 1e4..1e13 in 4,000 steps
    k = (np.log10(n_star[0]) - 4) * 3999 / 9
    assert k == pytest.approx(round(k), abs=1e-6)
    a, b = fit.alpha, fit.beta
    want = (a * fit.A / (b * fit.B)) ** (1 / (a + b)) * (1e20 / 6) ** (b / (a + b))
    assert n_star[0] == pytest.approx(want, rel=3e-3)


def test_builder_configs_and_seeding():
    t = build_lm("transformer", 32, 50, seed=3)
    assert t.config.max_position_embeddings == 128 and not t.config.tie_word_embeddings
    assert t.lm_head.weight.data_ptr() != t.model.embed_tokens.weight.data_ptr()
    assert t.config.num_key_value_heads == 2 and t.config.intermediate_size == 88
    t2, t3 = build_lm("transformer", 32, 50, seed=3), build_lm("transformer", 32, 50, seed=4)
    assert all(torch.equal(p, q) for p, q in zip(t.parameters(), t2.parameters()))
    assert not all(torch.equal(p, q) for p, q in zip(t.parameters(), t3.parameters()))
    x = build_lm("xlstm", 32, 50, num_layers=3, num_heads=2, seed=3)
    c = x.config
    assert (c.embedding_dim, c.num_blocks, c.num_heads, c.mode, c.autocast_kernel_dtype) == (32, 3, 2, "train", "float32")
    assert not c.tie_word_embeddings and c.ffn_round_up_to_multiple_of == 8
    x2 = build_lm("xlstm", 32, 50, num_layers=3, num_heads=2, seed=3)
    assert all(torch.equal(p, q) for p, q in zip(x.parameters(), x2.parameters()))
    assert count_params(build_lm("xlstm", 16, 50, num_layers=1, num_heads=1, context_length=16, chunk_size=16)) > 0
    with pytest.raises(ValueError, match=r"^width 30 must be divisible by 2 \* num_heads = 4$"):
        build_lm("transformer", 30, 50, num_heads=2)
    for name in ("vocab_size", "num_layers", "num_heads", "context_length", "chunk_size"):
        with pytest.raises(ValueError, match=f"^{name} must be a positive integer"):
            build_lm("xlstm", 32, **{"vocab_size": 50, name: 0})
    with pytest.raises(ValueError, match="^width must be a positive integer"):
        build_lm("xlstm", True, 50)


def test_flop_count_leaves_no_gradients():
    m = build_lm("transformer", 16, 30, num_layers=1, context_length=16, seed=0)
    training_flops_per_token(m, 16, 30)
    assert all(p.grad is None for p in m.parameters())
