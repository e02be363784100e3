"""Tests of Astraea, token-wise acceleration of video DiTs (src/iclr26/compression/astraea)."""
import math

import numpy as np
import pytest
import torch

from iclr26.compression.astraea import (AstraeaCache, StepSkip, TinyVideoDiT, apply_astraea, moving_digits, psnr,
                                        search_token_budget, sparse_block_forward, token_scores, uniform_budget)
from iclr26.compression.astraea.acceleration import _BlockState
from iclr26.models import diffusion as D

FRAMES = 3


def _model(seed=0, depth=2):
    """A video DiT with non-degenerate weights: adaLN modulation and the output layer are drawn
    (the zero init would make every block the identity) and the attention logits are scaled up so
    that the attention is far from uniform."""
    torch.manual_seed(seed)
    m = TinyVideoDiT(FRAMES, D.DiTConfig(image_size=16, patch=4, width=32, depth=depth, heads=4))
    with torch.no_grad():
        for b in m.blocks:
            b.ada[1].weight.normal_(0, 0.3)
            b.ada[1].bias.normal_(0, 0.3)
            b.attn.in_proj_weight.mul_(3.0)
            b.attn.in_proj_bias.normal_(0, 0.5)             # nn.MultiheadAttention starts it at zero
        m.ada_out[1].weight.normal_(0, 0.3)
        m.out.weight.normal_(0, 0.3)
        m.pos.normal_(0, 1.0)
    return m.eval()


def _inputs(model, B=3, seed=1):
    g = torch.Generator().manual_seed(seed)
    X, y = moving_digits(B, frames=FRAMES, seed=seed)
    x = torch.from_numpy(X) + 0.3 * torch.randn(X.shape, generator=g)
    return x, torch.rand(B, generator=g), torch.from_numpy(y)


def _block_io(model, B=2, N=None, seed=3):
    g = torch.Generator().manual_seed(seed)
    N = N or model.n_tokens
    w = model.config.width
    return torch.randn(B, N, w, generator=g), torch.randn(B, w, generator=g)


# ----------------------------------------------------------------------------- equations


def test_token_score_equation():
    g = torch.Generator().manual_seed(0)
    lse, delta = torch.rand(2, 7, generator=g) * 5, torch.rand(2, 7, generator=g)
    skips = torch.randint(0, 4, (2, 7), generator=g).float()
    s = token_scores(lse, delta, skips, w_alpha=0.7, w_beta=0.25).numpy()
    ref = 0.7 * lse.numpy() * delta.numpy() + 0.25 * np.exp(skips.numpy())
    np.testing.assert_allclose(s, ref, rtol=1e-6)
    # the defaults are the paper's w_alpha = 1, w_beta = 0.5
    np.testing.assert_allclose(token_scores(lse, delta, skips).numpy(),
                               lse.numpy() * delta.numpy() + 0.5 * np.exp(skips.numpy()), rtol=1e-6)
    # the penalty is capped so that it stays finite
    assert torch.isfinite(token_scores(lse[:, :1], delta[:, :1], torch.full((2, 1), 500.0))).all()


def test_sparse_block_full_equals_the_block():
    m = _model()
    h, c = _block_io(m)
    for blk in m.blocks:
        out, lse = sparse_block_forward(blk, h, c)
        torch.testing.assert_close(out, blk(h, c), atol=5e-5, rtol=1e-4)
        assert lse.shape == h.shape[:2]


def test_sparse_block_selected_tokens_equal_full_and_lse_reference():
    m = _model()
    blk = m.blocks[0]
    h, c = _block_io(m)
    B, N, w = h.shape
    idx = torch.tensor([[0, 7, 3, 40], [5, 1, 47, 2]])
    out, lse = sparse_block_forward(blk, h, c, idx)
    full = blk(h, c)
    for b in range(B):
        torch.testing.assert_close(out[b], full[b, idx[b]], atol=5e-5, rtol=1e-4)
    # independent reference of the LSE: per head, log(sum_j exp(q_i k_j / sqrt(d))) with numpy
    hd = h.double().numpy()
    mod = blk.ada[1](torch.nn.functional.silu(c)).double().detach().numpy()
    s1, b1 = mod[:, :w], mod[:, w:2 * w]
    mu, var = hd.mean(-1, keepdims=True), hd.var(-1, keepdims=True)
    u = (hd - mu) / np.sqrt(var + 1e-6) * (1 + s1[:, None]) + b1[:, None]
    W = blk.attn.in_proj_weight.double().detach().numpy()
    bias = blk.attn.in_proj_bias.double().detach().numpy()
    q, k = u @ W[:w].T + bias[:w], u @ W[w:2 * w].T + bias[w:2 * w]
    H, dh = blk.attn.num_heads, w // blk.attn.num_heads
    for b in range(B):
        ref = []
        for i in idx[b].tolist():
            per_head = []
            for hh in range(H):
                sl = slice(hh * dh, (hh + 1) * dh)
                z = k[b, :, sl] @ q[b, i, sl] / math.sqrt(dh)
                per_head.append(z.max() + np.log(np.exp(z - z.max()).sum()))
            ref.append(np.mean(per_head))
        np.testing.assert_allclose(lse[b].detach().numpy(), ref, rtol=1e-4, atol=1e-4)


def test_psnr_equation():
    g = torch.Generator().manual_seed(0)
    ref = torch.rand(3, 2, 4, generator=g) * 2 - 1
    x = ref + 0.1 * torch.randn(ref.shape, generator=g)
    mse = ((x - ref) ** 2).reshape(3, -1).mean(1).numpy()
    np.testing.assert_allclose(psnr(x, ref).numpy(), 10 * np.log10(4.0 / mse), rtol=1e-5)
    np.testing.assert_allclose(psnr(x, ref, data_range=1.0).numpy(), 10 * np.log10(1.0 / mse), rtol=1e-5)
    assert torch.isfinite(psnr(ref, ref)).all() and float(psnr(ref, ref)[0]) == pytest.approx(106.02, abs=0.01)


# ------------------------------------------------------------------------ the token cache


def test_full_budget_reproduces_the_model_and_remove_restores_it():
    m = _model()
    x, _, y = _inputs(m)
    shape = tuple(x.shape[1:])
    noise = torch.randn((3,) + shape, generator=torch.Generator().manual_seed(5))
    ref = D.sample(m, y, shape, "flow", steps=4, noise=noise)
    originals = list(m.blocks)
    keys = set(m.state_dict())
    acc = apply_astraea(m, [1.0] * 4)
    out = D.sample(m, y, shape, "flow", steps=4, noise=noise)
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
    assert acc.token_fraction == 1.0
    acc.remove()
    assert list(m.blocks) == originals and set(m.state_dict()) == keys
    torch.testing.assert_close(D.sample(m, y, shape, "flow", steps=4, noise=noise), ref)


def _record_block_outputs(model):
    rec = []
    hooks = [b.register_forward_hook(lambda mod, a, o, i=i: rec.append((i, a[0].clone(), o.clone())))
             for i, b in enumerate(model.blocks)]
    return rec, hooks


def test_partial_step_updates_selected_tokens_and_reuses_the_rest():
    m = _model()
    x, t, y = _inputs(m)
    acc = apply_astraea(m, [1.0, 0.25, 0.0])
    rec, hooks = _record_block_outputs(m)
    with torch.no_grad():
        m(x, t, y)
        m(x + 0.5 * torch.randn_like(x), t * 0.5, y)
        m(x - 0.5, t * 0.25, y)
    for h in hooks:
        h.remove()
    wrapped = [b.block for b in m.blocks]
    N = m.n_tokens
    k = int(round(0.25 * N))
    for i, blk in enumerate(wrapped):
        (_, h0, o0), (_, h1, o1), (_, h2, o2) = [r for r in rec if r[0] == i]
        with torch.no_grad():
            cond1 = m.cond(t * 0.5, y)
            full1 = blk(h1, cond1)
        changed = ~torch.isclose(o1, o0, atol=0, rtol=0).all(-1)          # (B, N)
        assert (changed.sum(1) <= k).all() and (changed.sum(1) >= k - 1).all()
        same = torch.isclose(o1, full1, atol=1e-5, rtol=1e-5).all(-1)
        assert same[changed].all()                       # the recomputed tokens are exact
        assert not same[~changed].all()                  # the others are stale cache entries
        torch.testing.assert_close(o2, o1)               # budget 0: every token from the cache
    assert acc.token_fraction == pytest.approx((1 + k / N + 0) / 3)
    acc.remove()


def test_selection_follows_the_score():
    acc = AstraeaCache([1.0, 0.5], w_alpha=1.0, w_beta=0.5)
    B, N, w = 1, 6, 4
    st = _BlockState(out=torch.zeros(B, N, w), last_in=torch.zeros(B, N, w), lse=torch.ones(B, N),
                     skips=torch.zeros(B, N))
    h = torch.zeros(B, N, w)
    h[0, :, 0] = torch.tensor([0.1, 5.0, 0.2, 3.0, 4.0, 0.3])          # Delta = |h_0|
    assert sorted(acc._select(st, h, 3)[0].tolist()) == [1, 3, 4]
    st.lse = torch.tensor([[1.0, 0.01, 1.0, 1.0, 1.0, 1.0]])          # S_LSE scales Delta
    assert sorted(acc._select(st, h, 3)[0].tolist()) == [3, 4, 5]
    st.lse = torch.ones(B, N)
    st.skips = torch.tensor([[0.0, 0, 6, 0, 0, 0]])                   # a long-skipped token is forced in
    assert 2 in acc._select(st, h, 3)[0].tolist()
    assert 2 not in AstraeaCache([1.0, 0.5], w_beta=0.0)._select(st, h, 3)[0].tolist()


def test_fixed_selection_keeps_its_order_and_random_is_seeded():
    m = _model()
    x, t, y = _inputs(m)
    acc = apply_astraea(m, [1.0, 0.5, 0.5, 0.25], selection="fixed")
    with torch.no_grad():
        for s in range(4):
            m(x + 0.2 * s * torch.randn_like(x), t, y)
    orders = [st.order.clone() for st in acc._states.values()]
    assert all(o is not None and o.shape == (3, m.n_tokens) for o in orders)
    acc.remove()

    def run_random(seed):
        acc = apply_astraea(m, [1.0, 0.5, 0.5], selection="random", seed=seed)
        with torch.no_grad():
            outs = [m(x + 0.3 * s, t, y) for s in range(3)]
        acc.remove()
        return torch.stack(outs)

    torch.testing.assert_close(run_random(1), run_random(1))
    assert not torch.allclose(run_random(1), run_random(2))


def test_counter_wraps_and_clears_the_cache():
    m = _model()
    x, t, y = _inputs(m)
    acc = apply_astraea(m, [1.0, 0.5])
    with torch.no_grad():
        a = m(x, t, y)
        m(x + 1, t, y)
        b = m(x, t, y)                       # step 0 of a new run: full compute again
    torch.testing.assert_close(a, b)
    assert acc.step == 0
    acc.remove()


def test_speeds_up_the_token_work():
    """Fewer kept tokens do less work: the sampler with 25 % of tokens is not slower than the full one."""
    import time
    m = _model(depth=2)
    x, _, y = _inputs(m, B=8)
    shape = tuple(x.shape[1:])

    def t(b):
        acc = apply_astraea(m, b)
        best = 1e9
        for _ in range(3):
            s = time.process_time()
            D.sample(m, y, shape, "flow", steps=len(b), noise=x)
            best = min(best, time.process_time() - s)
        acc.remove()
        return best
    assert t([1.0] + [0.1] * 7) < 1.1 * t([1.0] * 8)


# ---------------------------------------------------------------------------- step skipping


def test_step_skip_reuses_outputs():
    m = _model()
    x, t, y = _inputs(m)
    ss = StepSkip(m, [True, False, True])
    with torch.no_grad():
        a = ss(x, t, y)
        b = ss(x + 1, t * 0.5, y)
        c = ss(x + 1, t * 0.5, y)
    assert b is a
    torch.testing.assert_close(c, m(x + 1, t * 0.5, y), atol=1e-4, rtol=1e-4)
    assert ss.n_classes == m.n_classes


# --------------------------------------------------------------------------------- budgets


def test_uniform_budget():
    b = uniform_budget(20, 0.5)
    assert b[0] == 1.0 and b.mean() == pytest.approx(0.5) and len(b) == 20
    assert np.allclose(b * 10, np.round(b * 10)) and b[1:].max() - b[1:].min() <= 0.1 + 1e-12
    b = uniform_budget(5, 0.6, first_full=False)
    np.testing.assert_allclose(b, [0.6] * 5)


def test_search_finds_a_known_optimum_under_the_budget_constraint():
    T = 8
    opt = np.array([1.0, 0.9, 0.8, 0.5, 0.3, 0.2, 0.2, 0.1])           # mean 0.5
    fit = lambda b: float(((b - opt) ** 2).sum())
    res = search_token_budget(fit, T, 0.5, population=16, generations=40, children=16, tolerance=0.0, seed=0)
    assert res.budget[0] == 1.0 and res.budget.mean() == pytest.approx(0.5)
    assert res.fitness <= 0.02 + 1e-9
    assert res.fitness < fit(uniform_budget(T, 0.5))
    assert all(a >= b for a, b in zip(res.history, res.history[1:]))         # elitist
    again = search_token_budget(fit, T, 0.5, population=16, generations=40, children=16, tolerance=0.0, seed=0)
    np.testing.assert_array_equal(res.budget, again.budget)


def test_search_repair_keeps_the_mean_within_tolerance():
    seen = []

    def fit(b):
        seen.append(b.copy())
        return float(-b[3])                                              # wants one step as large as possible

    res = search_token_budget(fit, 10, 0.4, population=6, generations=3, children=6, tolerance=0.1, seed=1)
    for b in seen:
        assert b[0] == 1.0 and 0.36 - 1e-9 <= b.mean() <= 0.44 + 1e-9
        assert np.allclose(b * 10, np.round(b * 10))
    assert res.fitness == min(-b[3] for b in seen) == -res.budget[3] and res.evaluations == len(seen)


# ------------------------------------------------------------------------ data and the model


def test_moving_digits_move_at_constant_velocity():
    X, y = moving_digits(20, frames=4, size=16, max_speed=2, seed=3)
    assert X.shape == (20, 4, 1, 16, 16) and X.min() == -1 and X.max() <= 1 and set(y) <= set(range(10))
    for v in X:
        mass = [np.argwhere(f[0] > -1).mean(0) for f in v]
        steps = np.diff(mass, axis=0)
        np.testing.assert_allclose(steps, np.repeat(steps[:1], len(steps), 0), atol=1e-9)


def test_video_dit_state_dict_round_trip_and_token_layout():
    m = _model()
    x, t, y = _inputs(m)
    m2 = TinyVideoDiT(FRAMES, m.config)
    m2.load_state_dict(m.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(m2(x, t, y), m(x, t, y))
    assert m.n_tokens == FRAMES * 16
    out = m(x.double().float(), t, y)
    assert out.shape == x.shape and out.dtype == torch.float32


# ------------------------------------------------------------------------------- rejections


def test_rejections():
    m = _model()
    x, t, y = _inputs(m)
    with pytest.raises(ValueError, match=r"budget\[0\] must be 1.0"):
        apply_astraea(m, [0.5, 0.5])
    with pytest.raises(ValueError, match="fractions in \\[0, 1\\]"):
        AstraeaCache([1.0, 1.5])
    with pytest.raises(ValueError, match="selection must be one of"):
        AstraeaCache([1.0], selection="topk")
    with pytest.raises(ValueError, match="w_alpha and w_beta"):
        AstraeaCache([1.0], w_beta=-1)
    with pytest.raises(TypeError, match="no nn.ModuleList of blocks"):
        apply_astraea(torch.nn.Linear(2, 2), [1.0])
    with pytest.raises(TypeError, match="not an adaLN-Zero DiT block"):
        sparse_block_forward(torch.nn.Linear(2, 2), torch.zeros(1, 2, 2), torch.zeros(1, 2))
    with pytest.raises(ValueError, match="idx must have shape"):
        sparse_block_forward(m.blocks[0], *_block_io(m), idx=torch.zeros(5, dtype=torch.long))
    acc = apply_astraea(m, [1.0, 0.5])
    with pytest.raises(RuntimeError, match="already applied"):
        apply_astraea(m, [1.0])
    with torch.no_grad():
        m(x, t, y)
        with pytest.raises(RuntimeError, match="batch changed"):
            m(x[:2], t[:2], y[:2])
    acc.remove()
    with pytest.raises(RuntimeError, match="outside a forward"):
        AstraeaCache([1.0])._block_forward(0, m.blocks[0], *_block_io(m))
    with pytest.raises(ValueError, match="compute\\[0\\] true"):
        StepSkip(m, [False, True])
    with pytest.raises(ValueError, match="target must be in"):
        uniform_budget(10, 0.05)
    with pytest.raises(ValueError, match="grid must divide 1"):
        uniform_budget(10, 0.5, grid=0.3)
    with pytest.raises(ValueError, match="n_steps must be"):
        uniform_budget(1, 1.0)
    with pytest.raises(ValueError, match="population and children"):
        search_token_budget(lambda b: 0.0, 5, 0.5, population=1)
    with pytest.raises(ValueError, match="tolerance must be"):
        search_token_budget(lambda b: 0.0, 5, 0.5, tolerance=1.5)
    with pytest.raises(ValueError, match="p_mutation"):
        search_token_budget(lambda b: 0.0, 5, 0.5, p_mutation=(2.0, 0.1))
    with pytest.raises(ValueError, match="non-finite"):
        search_token_budget(lambda b: float("nan"), 5, 0.6, population=2, generations=0, children=2)
    with pytest.raises(ValueError, match="one shape"):
        psnr(torch.zeros(2, 3), torch.zeros(3, 2))
    with pytest.raises(ValueError, match="data_range"):
        psnr(torch.zeros(2, 3), torch.zeros(2, 3), data_range=0)
    with pytest.raises(ValueError, match="one shape"):
        token_scores(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(3, 2))
    with pytest.raises(ValueError, match="cannot hold"):
        moving_digits(2, frames=6, size=16, max_speed=2)
    with pytest.raises(ValueError, match="x must have shape"):
        m(torch.zeros(2, FRAMES, 1, 8, 8), t[:2], y[:2])
    with pytest.raises(ValueError, match="frames must be"):
        TinyVideoDiT(0)


# ------------------------------------------------------------------------- the claim check


@pytest.mark.slow
def test_quick_scale_one_seed_runs():
    from iclr26.compression.astraea import experiment as E

    r = E.run("quick", 0)
    ps = r["metrics"]["psnr"]
    assert np.mean(ps["astraea"]) > np.mean(ps["independent"])


# ------------------------------------------------------------------------ more contracts


def test_block_layout_rejections():
    m = _model()
    h, c = _block_io(m)
    blk = m.blocks[0]
    blk.attn.batch_first = False
    with pytest.raises(TypeError, match="batch_first"):
        sparse_block_forward(blk, h, c)
    blk.attn.batch_first = True
    other = torch.nn.MultiheadAttention(32, 4, batch_first=True, kdim=16, vdim=16)
    keep = blk.attn
    blk.attn = other
    with pytest.raises(TypeError, match="packed in-projection"):
        sparse_block_forward(blk, h, c)
    blk.attn = torch.nn.MultiheadAttention(32, 4, batch_first=True, bias=False)
    with pytest.raises(TypeError, match="packed in-projection"):
        sparse_block_forward(blk, h, c)
    blk.attn = keep
    with pytest.raises(ValueError, match="idx must have shape"):
        sparse_block_forward(blk, h, c, idx=torch.zeros(h.shape[0] + 1, 3, dtype=torch.long))


def test_diffusers_style_block_names_and_blocks_attr():
    m = _model()
    x, t, y = _inputs(m)

    class Wrapper(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner
            self.transformer_blocks = inner.blocks
            self.n_classes = inner.n_classes

        def forward(self, x, t, y):
            return self.inner(x, t, y)

    w = Wrapper(m)
    acc = apply_astraea(w, [1.0, 0.5])
    assert all(type(b).__name__ == "_AstraeaBlock" for b in w.transformer_blocks)
    acc.remove()
    acc = apply_astraea(m, [1.0], blocks_attr="blocks")
    assert all(type(b).__name__ == "_AstraeaBlock" for b in m.blocks)
    acc.remove()
    acc.remove()                                            # a second remove is harmless
    assert acc.step == -1 and acc.token_fraction == 0.0
    with pytest.raises(TypeError, match="named \\['pos'\\]"):
        apply_astraea(m, [1.0], blocks_attr="pos")


def test_fixed_starts_as_the_score_then_freezes():
    m = _model()
    x, t, y = _inputs(m)
    inputs = [x + 0.4 * s * torch.randn(x.shape, generator=torch.Generator().manual_seed(s)) for s in range(4)]
    budget = [1.0, 0.5, 0.5, 0.5]

    def outputs(sel):
        acc = apply_astraea(m, budget, selection=sel)
        with torch.no_grad():
            outs = [m(xx, t, y) for xx in inputs]
        acc.remove()
        return outs

    a, f = outputs("astraea"), outputs("fixed")
    torch.testing.assert_close(a[1], f[1])                 # the first reduced step: the same tokens
    assert not torch.allclose(a[3], f[3])                  # later the dynamic choice differs


def test_full_step_after_partial_steps_refreshes_every_token():
    m = _model()
    x, t, y = _inputs(m)
    acc = apply_astraea(m, [1.0, 0.25, 1.0])
    with torch.no_grad():
        m(x, t, y)
        m(x + 1, t, y)
        out = m(x - 1, t * 0.3, y)
    acc.remove()
    with torch.no_grad():
        torch.testing.assert_close(out, m(x - 1, t * 0.3, y), atol=1e-4, rtol=1e-4)
    assert all((st.skips == 0).all() for st in acc._states.values()) or acc._states == {}


def test_step_skip_recomputes_on_a_new_shape():
    m = _model()
    x, t, y = _inputs(m)
    ss = StepSkip(m, [True, False])
    with torch.no_grad():
        ss(x, t, y)
        out = ss(x[:2], t[:2], y[:2])
        torch.testing.assert_close(out, m(x[:2], t[:2], y[:2]), atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="non-empty"):
        StepSkip(m, [])


def test_search_history_and_bounds():
    calls = []
    res = search_token_budget(lambda b: calls.append(1) or float(b.sum()), 6, 0.5, population=4, generations=3,
                              children=3, tolerance=0.0, seed=2)
    assert len(res.history) == 4 and res.evaluations <= 4 + 3 * 3 and res.evaluations == len(calls)
    assert res.budget.mean() == pytest.approx(0.5)
    with pytest.raises(ValueError, match="population and children"):
        search_token_budget(lambda b: 0.0, 5, 0.6, children=1)
    with pytest.raises(ValueError, match="generations >= 0"):
        search_token_budget(lambda b: 0.0, 5, 0.6, generations=-1)
    # no first-step constraint: any gene may be small
    res = search_token_budget(lambda b: float(b[0]), 4, 0.5, population=4, generations=4, children=4,
                              tolerance=0.0, first_full=False, seed=0)
    assert res.budget[0] == 0.0 and res.budget.mean() == pytest.approx(0.5)


def test_uniform_budget_spreads_the_extra_units_evenly():
    b = uniform_budget(11, 0.5)                   # 1 + 10 steps: 45 units over 10 genes -> five 5s and five 4s
    assert b[0] == 1.0 and b.mean() == pytest.approx(0.5)
    assert sorted(np.round(b[1:] * 10).astype(int).tolist()) == [4] * 5 + [5] * 5
    assert np.round(b[1] * 10) == 5 and np.round(b[-1] * 10) == 5 and np.round(b[2] * 10) == 4
    b = uniform_budget(4, 0.5, grid=0.25)
    assert b[0] == 1.0 and b.mean() == pytest.approx(0.5) and np.allclose(b * 4, np.round(b * 4))


def test_moving_digits_arguments_and_defaults():
    X, y = moving_digits(3, seed=0)
    assert X.shape == (3, 4, 1, 16, 16)
    for bad in (dict(frames=0), dict(size=7), dict(max_speed=-1)):
        with pytest.raises(ValueError, match="need frames"):
            moving_digits(2, **bad)
    X, _ = moving_digits(5, frames=2, size=8, max_speed=0, seed=1)     # no room to move: static digits
    np.testing.assert_array_equal(X[:, 0], X[:, 1])
    a, _ = moving_digits(4, seed=5, split="test")
    b, _ = moving_digits(4, seed=5, split="test")
    np.testing.assert_array_equal(a, b)


def test_default_video_dit():
    m = TinyVideoDiT()
    assert m.frames == 4 and m.n_tokens == 4 * 16 and len(m.blocks) == 4 and m.config.width == 64
    x = torch.zeros(2, 4, 1, 16, 16)
    out = m(x, torch.rand(2), torch.tensor([1, 10]))
    assert torch.count_nonzero(out) == 0                    # zero-initialised output layer (adaLN-Zero)


# ------------------------------------------------------- the change term, defaults, round-robin


def test_reference_input_of_the_change_term_is_refreshed_for_computed_tokens():
    """``Delta`` is measured from the input at which a token was *last computed*: after a partial
    step the selected tokens' reference is that step's input, the skipped ones keep the old one."""
    m = _model()
    x, t, y = _inputs(m)
    acc = apply_astraea(m, [1.0, 0.25, 0.25])
    rec, hooks = _record_block_outputs(m)
    x1 = x + 0.5 * torch.randn(x.shape, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        m(x, t, y)
        refs0 = {i: st.last_in.clone() for i, st in acc._states.items()}
        m(x1, t * 0.5, y)
    for h in hooks:
        h.remove()
    k = int(round(0.25 * m.n_tokens))
    for i, st in acc._states.items():
        h1 = [r for r in rec if r[0] == i][1][1]
        computed = (st.skips == 0)[..., None]
        assert (computed.sum(1) == k).all()
        torch.testing.assert_close(st.last_in, torch.where(computed, h1, refs0[i]), atol=0, rtol=0)
        if i == 0:                                              # the first block's input changed everywhere
            assert not (h1 == refs0[0]).all(-1).any()
    acc.remove()


def test_default_weights_are_w_alpha_1_and_w_beta_one_half():
    assert (AstraeaCache([1.0]).w_alpha, AstraeaCache([1.0]).w_beta) == (1.0, 0.5)
    m = _model()
    acc = apply_astraea(m, [1.0])
    assert (acc.w_alpha, acc.w_beta) == (1.0, 0.5)
    acc.remove()
    # behaviour that pins w_beta = 0.5 from both sides: a token with Delta = d and no skips against a
    # token with Delta = 0 skipped once (score 0.5 e = 1.359 at the default)
    B, N, w = 1, 2, 3
    h = torch.zeros(B, N, w)
    for d, winner in ((1.0, 0), (0.8, 1)):                  # 1.5 > 1.359 (w_beta > 0.58 flips it); 1.3 < 1.359 (< 0.47 flips)
        st = _BlockState(out=torch.zeros(B, N, w), last_in=torch.zeros(B, N, w), lse=torch.ones(B, N),
                         skips=torch.tensor([[0.0, 1.0]]))
        h[0, 0, 0] = d
        assert AstraeaCache([1.0, 0.5])._select(st, h, 1)[0].tolist() == [winner]
        assert apply_astraea(_model(), [1.0, 0.5])._select(st, h, 1)[0].tolist() == [winner]


def test_penalty_only_score_is_a_round_robin():
    """``w_alpha = 0``: at a 50 % budget every token is computed every other step (no token is ever
    skipped twice in a row), whatever the inputs."""
    m = _model()
    x, t, y = _inputs(m)
    acc = apply_astraea(m, [1.0] + [0.5] * 6, w_alpha=0.0)
    with torch.no_grad():
        for s in range(7):
            m(x + 0.3 * s * torch.randn(x.shape, generator=torch.Generator().manual_seed(s)), t, y)
            for st in acc._states.values():
                assert st.skips.max() <= 1
                if s > 0:
                    assert ((st.skips == 0).sum(1) == m.n_tokens // 2).all()
    acc.remove()


def test_non_finite_inputs_raise():
    ok = torch.ones(2, 3)
    for name in ("lse", "delta", "skips"):
        args = {"lse": ok, "delta": ok, "skips": ok}
        args[name] = torch.tensor([[1.0, float("nan"), 1.0], [1.0, 1.0, 1.0]])
        with pytest.raises(ValueError, match=f"{name} holds non-finite"):
            token_scores(**args)
    with pytest.raises(ValueError, match="must be finite"):
        psnr(torch.full((2, 3), float("nan")), torch.zeros(2, 3))
    m = _model()
    x, t, y = _inputs(m)
    acc = apply_astraea(m, [1.0, 0.5])
    with torch.no_grad(), pytest.raises(ValueError, match="input of block 0 holds non-finite"):
        m(x * float("nan"), t, y)
    acc.remove()


def test_held_out_flow_loss_of_the_zero_predictor():
    from iclr26.compression.astraea.experiment import _held_out_flow_loss

    m = TinyVideoDiT(FRAMES, D.DiTConfig(image_size=16, patch=4, width=32, depth=1, heads=4))   # zero output layer
    r = _held_out_flow_loss(m, 4, FRAMES, seed=0)
    np.testing.assert_allclose(r["trained"], r["zero_velocity"], rtol=1e-6)
    assert all(1.0 < v < 3.0 for v in r["zero_velocity"])   # E (eps - x0)^2 = 1 + E x0^2 on [-1, 1] data
    mt = _model()
    r2 = _held_out_flow_loss(mt, 4, FRAMES, seed=0)
    np.testing.assert_allclose(r2["zero_velocity"], r["zero_velocity"])
    assert r2["trained"] != r["trained"]
