"""Tests for AutoDeco (arXiv:2510.26697): equations, reductions, decoding hook, rejections."""
import math

import pytest
import torch
from transformers import LogitsProcessorList

from iclr26.models.testing import widen_
from iclr26.models import TinyLMConfig, build_tiny_lm
from iclr26.decoding.autodeco import (AutoDecoConfig, AutoDecoHeads, AutoDecoLogitsProcessor, autodeco_loss,
                                      soft_top_p_probs, top_p_filter, warp_logits)
from iclr26.decoding.autodeco.experiment import T_GRID, P_GRID, exact_policy_logprobs
from iclr26.decoding.autodeco.training import TracePositions, train_heads


def tiny_lm(seed=0, std=0.4):
    """A tiny Llama whose weight matrices are drawn at std 0.4 (20x the usual 0.02): peaked,
    position-dependent next-token distributions instead of near-uniform ones."""
    torch.manual_seed(seed)
    model = build_tiny_lm(TinyLMConfig(hidden_size=32, intermediate_size=64), 64, eos_token_id=1,
                          bos_token_id=2).eval()
    widen_(model, std, seed)
    return model


def test_soft_top_p_matches_hand_computation():
    # Sec. 2.2: p = softmax(l/T); m_sorted = exp(-alpha * relu(cumsum - P)); p~ = p*m / sum(p*m)
    p = torch.tensor([0.5, 0.3, 0.2])
    logits = p.log()[None]
    q = soft_top_p_probs(logits, torch.tensor([1.0]), torch.tensor([0.6]), alpha=30.0)[0]
    m = torch.tensor([1.0, math.exp(-30 * 0.2), math.exp(-30 * 0.4)])  # cumsum = 0.5, 0.8, 1.0
    ref = p * m / (p * m).sum()
    assert torch.allclose(q, ref, atol=1e-6)


def test_soft_top_p_is_differentiable_in_T_and_P():
    logits = torch.randn(4, 10)
    t = torch.full((4,), 0.7, requires_grad=True)
    pp = torch.full((4,), 0.5, requires_grad=True)
    q = soft_top_p_probs(logits, t, pp)
    (-q[:, 3].clamp_min(1e-9).log()).sum().backward()
    assert t.grad is not None and torch.isfinite(t.grad).all() and t.grad.abs().sum() > 0
    assert pp.grad is not None and pp.grad.abs().sum() > 0


def test_hard_top_p_filter_keeps_smallest_nucleus():
    probs = torch.tensor([[0.1, 0.5, 0.25, 0.15]])
    assert top_p_filter(probs, 0.6).tolist() == [[False, True, True, False]]
    assert top_p_filter(probs, 0.5).tolist() == [[False, True, False, False]]
    assert top_p_filter(probs, 1.0).all()
    assert top_p_filter(probs, 1e-6).sum() == 1  # the top token is always kept


def test_warp_logits_temperature_and_cut():
    logits = torch.tensor([[2.0, 1.0, 0.0]])
    out = warp_logits(logits, 0.5, 1.0)
    assert torch.allclose(out, logits / 0.5)
    out = warp_logits(logits, 1.0, 0.5)
    assert out[0, 0] == 2.0 and torch.isinf(out[0, 1:]).all()


def test_heads_ranges_and_constant():
    heads = AutoDecoHeads(AutoDecoConfig(hidden_size=8))
    h, l = torch.randn(5, 8), torch.randn(5, 11)
    t, p = heads(h, l)
    assert t.shape == (5,) and p.shape == (5,)
    assert ((t > 0) & (t < 2)).all() and ((p > 0) & (p < 1)).all()
    heads.set_constant(1.0, 1.0)
    t, p = heads(h, l)
    assert torch.all(t == 1.0) and torch.all(p == 1.0)


def test_reduction_constant_heads_equal_plain_sampling():
    """Heads fixed at T=1, p=1: same seed -> the same tokens as plain sampling."""
    model = tiny_lm()
    ids = torch.tensor([[3, 4, 5, 6], [7, 8, 9, 10]])
    heads = AutoDecoHeads.from_base(model).set_constant(1.0, 1.0)
    kw = dict(max_new_tokens=12, do_sample=True, temperature=1.0, top_p=1.0, top_k=0, pad_token_id=0,
              eos_token_id=None)
    torch.manual_seed(123)
    plain = model.generate(ids, **kw)
    with AutoDecoLogitsProcessor(model, heads) as proc:
        torch.manual_seed(123)
        auto = model.generate(ids, logits_processor=LogitsProcessorList([proc]), **kw)
    assert torch.equal(plain, auto)


def test_processor_reads_last_hidden_state_and_records():
    model = tiny_lm()
    heads = AutoDecoHeads.from_base(model)
    ids = torch.tensor([[3, 4, 5]])
    proc = AutoDecoLogitsProcessor(model, heads, record=True)
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
    scores = out.logits[:, -1, :]
    warped = proc(ids, scores)
    t, p = heads(out.hidden_states[-1][:, -1, :], scores)
    assert torch.allclose(warped, warp_logits(scores, t, p))
    assert len(proc.history) == 1
    proc.remove()


def test_loss_decreases_and_easy_mask_reduction():
    torch.manual_seed(0)
    heads = AutoDecoHeads(AutoDecoConfig(hidden_size=6))
    h, logits = torch.randn(32, 6), torch.randn(32, 9) * 3
    y = logits.argmax(-1)
    # easy_drop=0 keeps every position: L_T is then the plain p(y)-weighted CE at T
    loss, parts = autodeco_loss(heads, h, logits, y, easy_drop=0.0)
    t, _ = heads(h, logits)
    ce = torch.nn.functional.cross_entropy(logits / t[:, None], y, reduction="none")
    w = torch.softmax(logits, -1).gather(-1, y[:, None]).squeeze(-1)
    assert math.isclose(parts["loss_t"], float((ce * w).mean()), rel_tol=1e-5)
    # training on tokens the model already predicts should lower T (sharper is better)
    data = TracePositions(h, y, torch.arange(32), torch.zeros(32, dtype=torch.long))

    class Head(torch.nn.Module):  # minimal stand-in for a model's output embedding
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(6, 9, bias=False)

        def get_output_embeddings(self):
            return self.lin

    stub = Head()
    with torch.no_grad():
        stub.lin.weight.copy_(torch.linalg.lstsq(h, logits).solution.T)
    t0 = float(heads(h, stub.lin(h))[0].mean())
    res = train_heads(heads, stub, data, steps=60, batch_size=16, lr=1e-2)
    assert res.final_loss < res.losses[0]
    assert float(heads(h, stub.lin(h))[0].mean()) < t0


def test_exact_policy_matches_direct_computation():
    """The experiment's exact pass@1 equals the product of warped gold probabilities, times the
    warped mass of non-digit tokens at the terminal position."""
    model = tiny_lm()
    heads = _wide_heads(AutoDecoHeads.from_base(model))
    torch.manual_seed(1)
    hidden = torch.randn(5, 32)
    labels = torch.randint(0, 64, (5,))
    labels[2] = 0  # terminal positions: the label is a placeholder
    labels[4] = 0
    terminal = torch.tensor([False, False, True, False, True])
    with torch.no_grad():
        top0 = model.get_output_embeddings()(hidden).argmax(-1)
    labels[3] = top0[3]  # item 1 is greedy's: its gold token is the argmax and its end token no digit
    digits = torch.tensor(sorted({3, 7, 11, 40, int(top0[2])} - {int(top0[4])}))
    pos = TracePositions(hidden, labels, torch.tensor([0, 0, 0, 1, 1]), torch.tensor([0, 1, 2, 0, 1]))
    grid, greedy, auto, mt, mp = exact_policy_logprobs(model, heads, pos, terminal, digits, 2)
    with torch.no_grad():
        logits = model.get_output_embeddings()(hidden)

        def per_item(warped):
            lp = torch.log_softmax(warped, -1)
            gold = lp.gather(-1, labels[:, None]).squeeze(-1)
            end = torch.log1p(-lp[:, digits].exp().sum(-1))
            v = torch.where(terminal, end, gold)
            return torch.stack([v[:3].sum(), v[3:].sum()])

        for t, p in [(0.5, 0.9), (1.0, 1.0), (0.1, 0.5), (1.5, 0.95)]:
            i, j = T_GRID.index(t), P_GRID.index(p)
            assert torch.allclose(grid[i, j].float(), per_item(warp_logits(logits, t, p)), atol=1e-4)
        t, p = heads(hidden, logits)
        assert 0.05 < float(p.min()) and float(p.max()) < 0.999 and float(t.max()) / float(t.min()) > 1.5
        assert torch.allclose(auto.float(), per_item(warp_logits(logits, t, p)), atol=1e-4)
        assert math.isclose(mt, float(t.mean()), rel_tol=1e-5) and math.isclose(mp, float(p.mean()), rel_tol=1e-5)
        top = logits.argmax(-1)
        ok = torch.where(terminal, ~torch.isin(top, digits), top == labels).float()
        assert torch.equal(greedy.exp().float(), torch.stack([ok[:3].prod(), ok[3:].prod()]))
        assert 0 < float(greedy.exp().sum()) < 2  # the fixture separates the arms
    grid2, greedy2, none, mt2, _ = exact_policy_logprobs(model, None, pos, terminal, digits, 2, chunk=2)
    assert none is None and math.isnan(mt2)
    assert torch.allclose(grid2, grid, atol=1e-6) and torch.equal(greedy2, greedy)


def _wide_heads(heads, seed=3, std=0.1):
    """Heads drawn at a wide std so that T and P vary from position to position."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for prm in heads.parameters():
            prm.normal_(0.0, std, generator=g)
    return heads


@pytest.mark.parametrize("kwargs, match", [
    (dict(hidden_size=0), "hidden_size"),
    (dict(hidden_size=8, head_hidden=0), "head_hidden"),
    (dict(hidden_size=8, max_temperature=0.0), "max_temperature"),
])
def test_rejects_bad_config(kwargs, match):
    with pytest.raises(ValueError, match=match):
        AutoDecoConfig(**kwargs)


def test_rejects_bad_inputs():
    heads = AutoDecoHeads(AutoDecoConfig(hidden_size=4))
    with pytest.raises(ValueError, match="leading dimensions"):
        heads(torch.randn(3, 4), torch.randn(2, 7))
    with pytest.raises(ValueError, match="easy_drop"):
        autodeco_loss(heads, torch.randn(3, 4), torch.randn(3, 7), torch.zeros(3, dtype=torch.long), easy_drop=1.0)
    with pytest.raises(ValueError, match="alpha"):
        soft_top_p_probs(torch.randn(2, 5), torch.ones(2), torch.ones(2), alpha=0)
    with pytest.raises(ValueError, match="top_p"):
        heads.set_constant(1.0, 1.5)
    with pytest.raises(TypeError, match="AutoDecoHeads"):
        AutoDecoLogitsProcessor(tiny_lm(), object())


def test_rejects_bad_temperature_and_top_p():
    logits = torch.randn(3, 7)
    for t in (0.0, -0.5, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"temperature (must lie in \(0, inf\)|must not be NaN)"):
            warp_logits(logits, t, 1.0)
    with pytest.raises(ValueError, match=r"temperature must lie in \(0, inf\), got values from -1.0 to 1.0"):
        warp_logits(logits, torch.tensor([1.0, -1.0, 0.5]), 1.0)
    with pytest.raises(ValueError, match=r"temperature has shape \(2,\); it must be a scalar or shaped like "
                                         r"the logits without the vocabulary axis, \(3,\) \(or \(3, 1\)\)"):
        warp_logits(logits, torch.ones(2), 1.0)
    with pytest.raises(ValueError, match=r"temperature has shape \(3, 7\)"):
        warp_logits(logits, torch.ones(3, 7), 1.0)
    for p in (0.0, 1.5, -0.1):
        with pytest.raises(ValueError, match=r"top_p must lie in \(0, 1.0\]"):
            warp_logits(logits, 1.0, p)
    with pytest.raises(ValueError, match="top_p must not be NaN"):
        top_p_filter(torch.softmax(logits, -1), float("nan"))
    with pytest.raises(ValueError, match=r"top_p has shape \(4,\)"):
        top_p_filter(torch.softmax(logits, -1), torch.full((4,), 0.5))
    # the allowed shapes: scalar, (3,), (3, 1) give the same result
    a = warp_logits(logits, 0.7, 0.8)
    b = warp_logits(logits, torch.full((3,), 0.7), torch.full((3,), 0.8))
    c = warp_logits(logits, torch.full((3, 1), 0.7), torch.full((3, 1), 0.8))
    assert torch.equal(a, b) and torch.equal(a, c)
    assert torch.equal(warp_logits(logits[0], 0.7, 0.8), a[0])          # 1-D logits, scalar T and P
    # per-row values are applied to their own row
    rows = warp_logits(logits, torch.tensor([0.5, 1.0, 2.0]), torch.tensor([1.0, 1.0, 1.0]))
    torch.testing.assert_close(rows, logits / torch.tensor([[0.5], [1.0], [2.0]]))


def test_teacher_forced_rejects_an_empty_prompt():
    from iclr26.decoding.autodeco.training import teacher_forced

    class Tok:
        pad_token_id = 0

        def __call__(self, text, add_special_tokens=True):
            return {"input_ids": [int(t) for t in text.split()]}

    with pytest.raises(ValueError, match="prompt '' has no tokens"):
        teacher_forced(tiny_lm(), Tok(), ["3 4", ""], ["5", "6"])
    with pytest.raises(ValueError, match="tokenises to nothing"):
        teacher_forced(tiny_lm(), Tok(), ["3 4"], [""])


@pytest.mark.slow
@pytest.mark.llm
def test_quick_experiment_runs():
    from iclr26.decoding.autodeco.experiment import run

    out = run("quick", 0)
    assert set(out["metrics"]["pass1"]) == {"autodeco", "default", "tuned", "oracle", "greedy"}
    assert out["info"]["n_train_accepted_problems"] > out["info"]["n_train"] // 3


def test_experiment_splits_are_disjoint_and_digit_tokens():
    from iclr26.decoding.autodeco.experiment import SCALES, digit_token_ids, split_problems

    cfg = dict(SCALES["quick"])
    tr, va, te = split_problems(cfg, 0)
    assert (len(tr), len(va), len(te)) == (cfg["n_train"], cfg["n_val"], cfg["n_test"])
    exprs = [p.metadata["expression"] for p in tr + va + te]
    assert len(set(exprs)) == len(exprs)
    assert [p.metadata["expression"] for p in split_problems(cfg, 0)[2]] == [p.metadata["expression"] for p in te]
    assert [p.metadata["expression"] for p in split_problems(cfg, 1)[2]] != [p.metadata["expression"] for p in te]
    with pytest.raises(ValueError, match="distinct problems"):
        split_problems(dict(cfg, difficulty=1, n_train=300), 0)  # one-digit a +/- b: at most 200 exist

    class Tok:
        vocab = ["a", "1", "\u0120", "23", "\u01202", "x9", "0.", ""]

        def __len__(self):
            return len(self.vocab)

        def convert_ids_to_tokens(self, ids):
            return [self.vocab[i] for i in ids]

    assert digit_token_ids(Tok()).tolist() == [1, 3, 6]


# ----- independent references for the loss, the heads and the training loop -----

def _ref_soft_top_p(logits, t, p, alpha):
    """Sec. 2.2 written out row by row (sort, cumulative mass, exp(-alpha relu(c - P)), renormalise)."""
    rows = []
    for l, ti, pi in zip(logits, t, p):
        probs = torch.softmax(l / ti, -1)
        order = torch.argsort(probs, descending=True)
        c = torch.cumsum(probs[order], 0)
        m = torch.empty_like(probs)
        m[order] = torch.exp(-alpha * torch.clamp(c - pi, min=0.0))
        rows.append(probs * m / ((probs * m).sum() + 1e-9))
    return torch.stack(rows)


def _ref_loss(heads, h, logits, y, *, alpha, easy_drop, min_temperature, weights, seed):
    t, p = heads(h, logits)
    base = torch.softmax(logits, -1)
    w_dft = base[torch.arange(len(y)), y]
    u = torch.rand(y.shape, generator=torch.Generator().manual_seed(seed))
    keep = ~((base.argmax(-1) == y) & (u < easy_drop))
    w = torch.ones(len(y)) if weights is None else weights
    ce = -torch.log_softmax(logits / torch.clamp(t, min=min_temperature)[:, None], -1)[torch.arange(len(y)), y]
    lt = (ce * w_dft * w * keep).sum() / max(float((w * keep).sum()), 1.0)
    q = _ref_soft_top_p(logits, t, p, alpha)
    nll = -torch.log(q[torch.arange(len(y)), y] + 1e-9)
    lp = (nll * w_dft * w).sum() / max(float(w.sum()), 1.0)
    return lt, lp, t, p


@pytest.mark.parametrize("weights_scale", [None, 0.02, 3.0])
def test_autodeco_loss_against_reference(weights_scale):
    """L = L_T + L_P (Sec. 2.2) with easy-token masking, p(y) weights, position weights and the
    min_temperature clamp, against a row-by-row reference; the base logits get no gradient."""
    torch.manual_seed(3)
    heads = AutoDecoHeads(AutoDecoConfig(hidden_size=6, head_hidden=16))
    h = torch.randn(40, 6)
    logits = (torch.randn(40, 9) * 3).requires_grad_(True)
    y = torch.where(torch.rand(40) < 0.6, logits.detach().argmax(-1), torch.randint(0, 9, (40,)))
    weights = None if weights_scale is None else torch.rand(40) * weights_scale
    kw = dict(alpha=12.0, easy_drop=0.35, min_temperature=0.95, weights=weights)
    loss, parts = autodeco_loss(heads, h, logits, y, generator=torch.Generator().manual_seed(11), **kw)
    with torch.no_grad():
        lt, lp, t, p = _ref_loss(heads, h, logits.detach(), y, seed=11, **kw)
    assert (t < 0.95).any() and (t > 0.95).any()  # the clamp is active on part of the positions
    assert math.isclose(parts["loss_t"], float(lt), rel_tol=1e-5)
    assert math.isclose(parts["loss_p"], float(lp), rel_tol=1e-5)
    assert math.isclose(float(loss.detach()), float(lt + lp), rel_tol=1e-5)
    assert math.isclose(parts["mean_T"], float(t.mean()), rel_tol=1e-6)
    assert math.isclose(parts["mean_P"], float(p.mean()), rel_tol=1e-6)
    assert set(parts) == {"loss_t", "loss_p", "mean_T", "mean_P"}
    loss.backward()
    assert logits.grad is None  # the frozen model's logits are constants
    assert heads.temp_head[0].weight.grad.abs().sum() > 0 and heads.top_p_head[0].weight.grad.abs().sum() > 0


def test_autodeco_loss_defaults_and_rejections():
    import inspect

    d = inspect.signature(autodeco_loss).parameters
    assert (d["alpha"].default, d["easy_drop"].default, d["min_temperature"].default) == (30.0, 0.6, 0.01)
    assert inspect.signature(soft_top_p_probs).parameters["alpha"].default == 30.0
    torch.manual_seed(4)
    heads = AutoDecoHeads(AutoDecoConfig(hidden_size=4, head_hidden=8))
    h, logits = torch.randn(12, 4), torch.randn(12, 7) * 2
    y = logits.argmax(-1)
    loss, parts = autodeco_loss(heads, h, logits, y, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        lt, lp, _, _ = _ref_loss(heads, h, logits, y, alpha=30.0, easy_drop=0.6, min_temperature=0.01,
                                 weights=None, seed=2)
    assert math.isclose(parts["loss_t"], float(lt), rel_tol=1e-5)
    assert math.isclose(parts["loss_p"], float(lp), rel_tol=1e-5)
    q = soft_top_p_probs(logits, torch.full((12,), 0.8), torch.full((12,), 0.7))
    torch.testing.assert_close(q, _ref_soft_top_p(logits, torch.full((12,), 0.8), torch.full((12,), 0.7), 30.0))
    with pytest.raises(ValueError, match=r"^autodeco_loss expects flattened hidden \(N, H\), logits \(N, V\) "
                                         r"and labels \(N,\)$"):
        autodeco_loss(heads, h[None], logits, y)
    for args in ((h, logits[None], y), (h, logits, y[:, None])):
        with pytest.raises(ValueError, match="expects flattened"):
            autodeco_loss(heads, *args)
    with pytest.raises(ValueError, match=r"^hidden, logits and labels must have the same number of positions, "
                                         r"got 12, 11, 12$"):
        autodeco_loss(heads, h, logits[:11], y)
    with pytest.raises(ValueError, match="got 12, 12, 10"):
        autodeco_loss(heads, h, logits, y[:10])
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match=rf"^easy_drop must be in \[0, 1\), got {bad!r}$"):
            autodeco_loss(heads, h, logits, y, easy_drop=bad)
    with pytest.raises(ValueError, match=r"^alpha must be > 0, got -1.0$"):
        soft_top_p_probs(logits, torch.ones(12), torch.ones(12), alpha=-1.0)


def test_heads_forward_against_reference():
    """T = max_T sigmoid(MLP_T(h)); P = sigmoid(MLP_P([h, T, stats(softmax(l / max(T, 0.01)))]))."""
    torch.manual_seed(5)
    cfg = AutoDecoConfig(hidden_size=6, head_hidden=10, max_temperature=3.0)
    heads = AutoDecoHeads(cfg)
    assert [tuple(m.weight.shape) for m in heads.temp_head if hasattr(m, "weight")] == [(10, 6), (1, 10)]
    assert [tuple(m.weight.shape) for m in heads.top_p_head if hasattr(m, "weight")] == [(10, 11), (1, 10)]
    with torch.no_grad():
        heads.temp_head[2].bias.fill_(-6.0)   # some temperatures below the 0.01 floor of the features
        heads.temp_head[2].weight.mul_(8.0)
    h, logits = torch.randn(30, 6), torch.randn(30, 12) * 2
    t, p = heads(h, logits)
    with torch.no_grad():
        rt = 3.0 * torch.sigmoid(heads.temp_head[2](torch.relu(heads.temp_head[0](h)))).squeeze(-1)
        z = logits / torch.clamp(rt, min=1e-2)[:, None]
        q = torch.softmax(z, -1)
        stats = torch.stack([q.max(-1).values, -(q * torch.log_softmax(z, -1)).sum(-1), q.var(-1),
                             q.sort(-1, descending=True).values[:, :5].sum(-1)], -1)
        x = torch.cat([h, rt[:, None], stats], -1)
        rp = torch.sigmoid(heads.top_p_head[2](torch.relu(heads.top_p_head[0](x)))).squeeze(-1)
    assert (rt < 1e-2).any() and (rt > 1e-2).any()
    torch.testing.assert_close(t, rt)
    torch.testing.assert_close(p, rp)
    torch.testing.assert_close(heads.temperature(h), rt)
    # the top-p head does not move the temperature head through its input copy of T
    heads.zero_grad()
    heads(h, logits)[1].sum().backward()
    assert heads.temp_head[0].weight.grad is None or heads.temp_head[0].weight.grad.abs().sum() == 0
    # without the probability features the top-p head reads [h, T] only
    plain = AutoDecoHeads(AutoDecoConfig(hidden_size=6, head_hidden=10, use_prob_features=False))
    assert plain.top_p_head[0].weight.shape == (10, 7)
    t2, p2 = plain(h, logits)
    with torch.no_grad():
        x = torch.cat([h, t2[:, None]], -1)
        torch.testing.assert_close(p2, torch.sigmoid(plain.top_p_head[2](torch.relu(plain.top_p_head[0](x)))).squeeze(-1))


def test_probability_features_small_vocabulary():
    from iclr26.decoding.autodeco.heads import probability_features

    logits = torch.tensor([[2.0, 0.0, -1.0], [0.5, 0.5, 3.0]])
    f = probability_features(logits)
    q = torch.softmax(logits, -1)
    ref = torch.stack([q.max(-1).values, -(q * q.log()).sum(-1), q.var(-1), torch.ones(2)], -1)
    torch.testing.assert_close(f, ref)


def test_config_defaults_bounds_and_messages():
    cfg = AutoDecoConfig(hidden_size=1, head_hidden=1, max_temperature=1e-3)  # the smallest allowed values
    assert (cfg.hidden_size, cfg.head_hidden) == (1, 1)
    d = AutoDecoConfig(hidden_size=4)
    assert (d.head_hidden, d.max_temperature, d.use_prob_features) == (256, 2.0, True)
    with pytest.raises(ValueError, match=r"^hidden_size must be a positive integer, got 4.0$"):
        AutoDecoConfig(hidden_size=4.0)
    with pytest.raises(ValueError, match=r"^head_hidden must be a positive integer, got 2.5$"):
        AutoDecoConfig(hidden_size=4, head_hidden=2.5)
    with pytest.raises(ValueError, match=r"^head_hidden must be a positive integer, got 0$"):
        AutoDecoConfig(hidden_size=4, head_hidden=0)
    with pytest.raises(ValueError, match=r"^max_temperature must be > 0, got -1.0$"):
        AutoDecoConfig(hidden_size=4, max_temperature=-1.0)
    with pytest.raises(TypeError, match=r"^config must be an AutoDecoConfig, got dict$"):
        AutoDecoHeads({"hidden_size": 4})
    heads = AutoDecoHeads(AutoDecoConfig(hidden_size=4))
    with pytest.raises(ValueError, match=r"^hidden \(3, 4\) and logits \(2, 7\) must share leading dimensions$"):
        heads(torch.randn(3, 4), torch.randn(2, 7))
    with pytest.raises(ValueError, match=r"^hidden size 5 != config.hidden_size 4$"):
        heads(torch.randn(3, 5), torch.randn(3, 7))


def test_from_base_and_set_constant():
    from types import SimpleNamespace

    model = tiny_lm()
    heads = AutoDecoHeads.from_base(model, head_hidden=12, max_temperature=1.5)
    assert (heads.config.hidden_size, heads.config.head_hidden, heads.config.max_temperature) == (32, 12, 1.5)

    class Multi:  # a multimodal config: the text sizes live in get_text_config()
        hidden_size = None

        def get_text_config(self):
            return SimpleNamespace(hidden_size=24)

    assert AutoDecoHeads.from_base(SimpleNamespace(config=Multi())).config.hidden_size == 24
    with pytest.raises(ValueError, match=r"^model.config has no hidden_size; build AutoDecoConfig\(hidden_size=...\) "
                                         r"yourself$"):
        AutoDecoHeads.from_base(SimpleNamespace(config=SimpleNamespace()))
    h, l = torch.randn(4, 32), torch.randn(4, 64)
    assert heads.set_constant(0.6, 0.7) is heads
    t, p = heads(h, l)
    torch.testing.assert_close(t, torch.full((4,), 0.6))
    torch.testing.assert_close(p, torch.full((4,), 0.7))
    heads.set_constant(1.2, 1.0)
    t, p = heads(h, l)
    assert torch.all(p == 1.0) and float(heads.top_p_head[-1].bias) == 40.0
    for bad in (0.0, 1.5, -1.0):
        with pytest.raises(ValueError, match=rf"^temperature must be in \(0, 1.5\), got {bad!r}$"):
            heads.set_constant(bad, 1.0)
    for bad in (0.0, 1.01):
        with pytest.raises(ValueError, match=rf"^top_p must be in \(0, 1\], got {bad!r}$"):
            heads.set_constant(1.0, bad)


def test_warp_logits_tiny_temperature_and_scalar_shapes():
    logits = torch.tensor([[2.0, 1.0, 0.0], [0.0, 3.0, 1.0]])
    out = warp_logits(logits * 1e-6, 1e-9, 1.0)  # below the 1e-6 floor of the division
    torch.testing.assert_close(out, logits)
    one = warp_logits(torch.tensor([1.0, 2.0, 0.5]), torch.tensor(0.5), torch.tensor(1.0))
    torch.testing.assert_close(one, torch.tensor([2.0, 4.0, 1.0]))
    with pytest.raises(ValueError, match=r"^top_p must lie in \(0, 1.0\], got values from 0.5 to 1.5$"):
        top_p_filter(torch.softmax(logits, -1), torch.tensor([0.5, 1.5]))
    with pytest.raises(ValueError, match=r"^temperature must not be NaN$"):
        warp_logits(logits, torch.tensor([1.0, float("nan")]), 1.0)
    with pytest.raises(ValueError, match=r"^temperature must lie in \(0, inf\), got values from 1.0 to inf$"):
        warp_logits(logits, torch.tensor([1.0, float("inf")]), 1.0)
    # per-row top-p: each row gets its own nucleus
    keep = top_p_filter(torch.tensor([[0.6, 0.3, 0.1], [0.6, 0.3, 0.1]]), torch.tensor([[0.5], [0.8]]))
    assert keep.tolist() == [[True, False, False], [True, True, False]]


def test_processor_history_dtype_removal_and_errors():
    model = tiny_lm()
    heads = AutoDecoHeads.from_base(model)
    with pytest.raises(ValueError, match=r"^model has no output embedding \(lm_head\); AutoDeco needs a causal LM head$"):
        AutoDecoLogitsProcessor(torch.nn.Linear(2, 2), heads)
    with pytest.raises(TypeError, match=r"^heads must be AutoDecoHeads, got object$"):
        AutoDecoLogitsProcessor(model, object())
    ids = torch.tensor([[3, 4, 5, 6], [9, 8, 7, 6]])
    quiet = AutoDecoLogitsProcessor(model, heads)
    assert quiet.record is False
    with pytest.raises(RuntimeError, match=r"^AutoDecoLogitsProcessor saw no hidden state: was the hook removed "
                                           r"before generate\?$"):
        quiet(ids, torch.zeros(2, 64))
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
    scores = out.logits[:, -1, :]
    warped = quiet(ids, scores.to(torch.bfloat16))
    assert warped.dtype == torch.bfloat16 and quiet.history == []
    t, p = heads(out.hidden_states[-1][:, -1, :], scores.to(torch.bfloat16))
    torch.testing.assert_close(warped, warp_logits(scores.to(torch.bfloat16), t, p).to(torch.bfloat16))
    with pytest.raises(RuntimeError, match=r"^captured hidden batch 2 != scores batch 3 \(beam search and other "
                                           r"batch-expanding modes are not supported\)$"):
        quiet(ids, torch.zeros(3, 64))
    quiet.remove()
    quiet.remove()  # idempotent
    with AutoDecoLogitsProcessor(model, heads, record=True) as rec:
        with torch.no_grad():
            model(ids[:1])
        rec(ids[:1], scores[:1])
        assert len(rec.history) == 1 and rec.history[0][0].shape == (1,)
        tt, pp = heads(out.hidden_states[-1][:1, -1, :], scores[:1])
        torch.testing.assert_close(rec.history[0][0], tt)
        torch.testing.assert_close(rec.history[0][1], pp)
    # after the context exits the hook is gone: a new forward no longer updates the captured state
    before = rec._hidden.clone()
    with torch.no_grad():
        model(torch.tensor([[10, 11]]))
    assert torch.equal(rec._hidden, before) and rec._handle is None


class _SpaceTok:
    """Token ids written as numbers separated by spaces; ``pad_token_id`` settable."""

    def __init__(self, pad=0):
        self.pad_token_id = pad

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": ([2] if add_special_tokens else []) + [int(t) for t in text.split()]}


@pytest.mark.parametrize("pad", [0, None])
def test_teacher_forced_against_per_sequence_forwards(pad):
    """Each completion token's hidden state equals the unpadded single-sequence forward's state at
    the position before it; batches of 2 over 3 sequences of different lengths (left padding)."""
    from iclr26.decoding.autodeco.training import teacher_forced

    model = tiny_lm()
    prompts, comps = ["3 4 5", "9", "7 7 8 20"], ["6 7", "10 11 12", "13"]
    pos = teacher_forced(model, _SpaceTok(pad), prompts, comps, batch_size=2)
    assert pos.labels.tolist() == [6, 7, 10, 11, 12, 13]
    assert pos.item.tolist() == [0, 0, 1, 1, 1, 2] and pos.step.tolist() == [0, 1, 0, 1, 2, 0]
    refs = []
    for p, c in zip(prompts, comps):
        pi, ci = [2] + [int(t) for t in p.split()], [int(t) for t in c.split()]
        with torch.no_grad():
            hs = model(torch.tensor([pi + ci]), output_hidden_states=True).hidden_states[-1][0]
        refs.append(hs[len(pi) - 1: len(pi) - 1 + len(ci)])
    torch.testing.assert_close(pos.hidden, torch.cat(refs), atol=1e-4, rtol=1e-4)
    assert pos.hidden.dtype == torch.float32
    with pytest.raises(ValueError, match=r"^2 prompts but 1 completions$"):
        teacher_forced(model, _SpaceTok(), prompts[:2], comps[:1])
    with pytest.raises(ValueError, match=r"^batch_size must be positive, got 0$"):
        teacher_forced(model, _SpaceTok(), prompts, comps, batch_size=0)
    one = teacher_forced(model, _SpaceTok(), prompts, comps, batch_size=1)
    torch.testing.assert_close(one.hidden, pos.hidden, atol=1e-4, rtol=1e-4)


def test_teacher_forced_default_batch_size():
    import inspect
    from iclr26.decoding.autodeco.training import teacher_forced

    assert inspect.signature(teacher_forced).parameters["batch_size"].default == 16
    d = inspect.signature(train_heads).parameters
    assert (d["steps"].default, d["batch_size"].default, d["lr"].default, d["alpha"].default,
            d["easy_drop"].default, d["seed"].default) == (400, 64, 1e-3, 30.0, 0.6, 0)


class _Stub(torch.nn.Module):
    def __init__(self, h=5, v=9):
        super().__init__()
        self.lin = torch.nn.Linear(h, v, bias=False)

    def get_output_embeddings(self):
        return self.lin


def _ref_train(heads, stub, data, *, steps, batch_size, lr, weights, alpha, easy_drop, seed):
    """The head-training loop written out: epochs of a seeded permutation cut into full batches
    (one short batch when there are fewer positions than a batch), AdamW, autodeco_loss."""
    g = torch.Generator().manual_seed(seed)
    n = data.hidden.shape[0]
    w_all = torch.ones(n) if weights is None else weights
    opt = torch.optim.AdamW(heads.parameters(), lr=lr)
    batches = []
    while len(batches) < steps:
        perm = torch.randperm(n, generator=g)
        starts = list(range(0, n - batch_size + 1, batch_size)) or [0]
        for s in starts:
            if len(batches) >= steps:
                break
            idx = perm[s: s + batch_size]
            batches.append(idx)
            h = data.hidden[idx]
            with torch.no_grad():
                logits = stub.lin(h)
            loss, _ = autodeco_loss(heads, h, logits, data.labels[idx], alpha=alpha, easy_drop=easy_drop,
                                    weights=w_all[idx], generator=g)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return batches


@pytest.mark.parametrize("n, batch_size, weighted", [(22, 8, True), (5, 8, False)])
def test_train_heads_against_reference_loop(n, batch_size, weighted):
    torch.manual_seed(8)
    stub = _Stub()
    with torch.no_grad():
        stub.lin.weight.mul_(6.0)
    h = torch.randn(n, 5)
    y = torch.where(torch.rand(n) < 0.5, stub.lin(h).argmax(-1), torch.randint(0, 9, (n,)))
    data = TracePositions(h, y, torch.arange(n), torch.zeros(n, dtype=torch.long))
    weights = torch.rand(n) * 2 if weighted else None
    a = AutoDecoHeads(AutoDecoConfig(hidden_size=5, head_hidden=8))
    b = AutoDecoHeads(AutoDecoConfig(hidden_size=5, head_hidden=8))
    b.load_state_dict(a.state_dict())
    kw = dict(steps=7, batch_size=batch_size, lr=5e-3, weights=weights, alpha=9.0, easy_drop=0.3, seed=4)
    res = train_heads(a, stub, data, **kw)
    _ref_train(b, stub, data, **kw)
    assert len(res.losses) == 7
    for (k, va), vb in zip(a.state_dict().items(), b.state_dict().values()):
        torch.testing.assert_close(va, vb, atol=1e-5, rtol=1e-5, msg=k)
    with pytest.raises(ValueError, match=r"^no training positions \(no accepted samples\?\)$"):
        train_heads(a, stub, TracePositions(h[:0], y[:0], y[:0], y[:0]), steps=1)


def test_leading_dimensions_beyond_one_batch_axis():
    """(batch, time, ...) inputs give the same values as the flattened (batch * time, ...) ones."""
    from iclr26.decoding.autodeco.heads import probability_features

    torch.manual_seed(6)
    heads = AutoDecoHeads(AutoDecoConfig(hidden_size=6, head_hidden=10))
    h, logits = torch.randn(2, 5, 6), torch.randn(2, 5, 7) * 2
    t, p = heads(h, logits)
    tf, pf = heads(h.reshape(10, 6), logits.reshape(10, 7))
    assert t.shape == (2, 5) and p.shape == (2, 5)
    torch.testing.assert_close(t, tf.reshape(2, 5))
    torch.testing.assert_close(p, pf.reshape(2, 5))
    torch.testing.assert_close(heads.temperature(h), tf.reshape(2, 5))
    with pytest.raises(ValueError, match=r"^hidden size 7 != config.hidden_size 6$"):
        heads(torch.randn(2, 5, 7), logits)
    with pytest.raises(ValueError, match="must share leading dimensions"):
        heads(h, torch.randn(2, 4, 7))
    with pytest.raises(ValueError, match="must share leading dimensions"):
        heads(h, torch.randn(3, 5, 7))
    torch.testing.assert_close(probability_features(logits), probability_features(logits.reshape(10, 7)).reshape(2, 5, 4))
    short = logits[:, :3]  # fewer time steps than the top-5 width: the top-5 mass is over the vocabulary
    torch.testing.assert_close(probability_features(short), probability_features(short.reshape(6, 7)).reshape(2, 3, 4))
    tt, pp = torch.rand(2, 5) + 0.3, torch.rand(2, 5) * 0.8 + 0.1
    q = soft_top_p_probs(logits, tt, pp, alpha=7.0)
    torch.testing.assert_close(q, _ref_soft_top_p(logits.reshape(10, 7), tt.reshape(10), pp.reshape(10), 7.0).reshape(2, 5, 7))
    w = warp_logits(logits, tt, pp)
    torch.testing.assert_close(w, warp_logits(logits.reshape(10, 7), tt.reshape(10), pp.reshape(10)).reshape(2, 5, 7))
    w1 = warp_logits(logits, tt[..., None], pp[..., None])
    torch.testing.assert_close(w1, w)
    assert soft_top_p_probs(logits, tt, pp, alpha=0.5).shape == (2, 5, 7)  # any alpha > 0 is allowed


def test_soft_top_p_loss_stays_finite_far_outside_the_nucleus():
    """A label deep in the tail has q(y) below 1e-9; the 1e-9 floor keeps its loss finite."""
    heads = AutoDecoHeads(AutoDecoConfig(hidden_size=3, head_hidden=4)).set_constant(0.5, 0.1)
    logits = torch.tensor([[12.0, 0.0, -12.0], [0.0, 10.0, -10.0]])
    y = torch.tensor([2, 2])
    loss, parts = autodeco_loss(heads, torch.randn(2, 3), logits, y, easy_drop=0.0)
    assert math.isfinite(parts["loss_p"]) and math.isfinite(float(loss.detach()))
    q = soft_top_p_probs(logits, torch.full((2,), 0.5), torch.full((2,), 0.1))
    assert (q[:, 2] < 1e-9).all()


def test_temperature_and_top_p_dtypes():
    logits = torch.tensor([[2.0, 1.0, 0.0]])
    assert warp_logits(logits, torch.tensor(0.7, dtype=torch.float64), 1.0).dtype == torch.float32
    assert warp_logits(logits, torch.tensor([0.7], dtype=torch.float64), torch.tensor([1.0], dtype=torch.float64)
                       ).dtype == torch.float32
    # top_p is compared in the probabilities' dtype (bf16: 0.6016 rounds to the mass 0.6015625 of the top token)
    probs = torch.tensor([[0.6, 0.3, 0.1]], dtype=torch.bfloat16)
    assert top_p_filter(probs, 0.6016).tolist() == [[True, False, False]]
    assert top_p_filter(probs, torch.tensor([0.6016])).tolist() == [[True, False, False]]


def test_from_base_reads_a_plain_hidden_size():
    from types import SimpleNamespace

    assert AutoDecoHeads.from_base(SimpleNamespace(config=SimpleNamespace(hidden_size=20))).config.hidden_size == 20


def test_train_heads_defaults_batches_and_low_precision_head(monkeypatch):
    """The loop's defaults (400 steps, batches of 64, AdamW lr 1e-3), full batches only, and
    logits recomputed in the output embedding's dtype."""
    import iclr26.decoding.autodeco.training as training

    seen = {}

    def fake_train(model, opt, data, steps, loss_fn):
        seen.update(steps=steps, lr=opt.param_groups[0]["lr"], opt=type(opt).__name__,
                    sizes=[len(next(data)) for _ in range(6)], loss=loss_fn(model, next(data)))

    monkeypatch.setattr(training, "train", fake_train)
    torch.manual_seed(9)
    heads = AutoDecoHeads(AutoDecoConfig(hidden_size=5, head_hidden=8))
    n = 200
    data = TracePositions(torch.randn(n, 5), torch.randint(0, 9, (n,)), torch.arange(n), torch.zeros(n, dtype=torch.long))
    stub = _Stub().to(torch.bfloat16)
    train_heads(heads, stub, data)
    assert (seen["steps"], seen["lr"], seen["opt"]) == (400, 1e-3, "AdamW")
    assert seen["sizes"] == [64] * 6 and torch.isfinite(seen["loss"])
    train_heads(heads, stub, TracePositions(data.hidden[:15], data.labels[:15], data.item[:15], data.step[:15]),
                batch_size=8)
    assert seen["sizes"] == [8] * 6  # 15 positions, batches of 8: the short remainder is dropped


# ----- the fused decoding step, presorted training and the shared-prefix teacher forcing -----

def _step_reference(heads, h, logits):
    """The decoding step written as the two separate calls: heads, then the full-sort warp."""
    t, p = heads(h, logits)
    return warp_logits(logits, t, p.clamp_min(1e-12)), t, p


@pytest.mark.parametrize("candidates", [1, 3, 5, 7, 40, 256])
@pytest.mark.parametrize("features", [True, False])
def test_autodeco_step_equals_heads_then_full_sort_warp(candidates, features):
    from iclr26.decoding.autodeco import autodeco_step

    torch.manual_seed(5)
    heads = _wide_heads(AutoDecoHeads(AutoDecoConfig(hidden_size=12, head_hidden=16, use_prob_features=features)),
                        std=0.3)
    h = torch.randn(9, 12)
    logits = torch.randn(9, 40) * 4
    logits[0, 3] = float("-inf")  # e.g. an EOS blocked by min_new_tokens
    logits[1, :] = torch.randn(40) * 0.05  # near flat: a wide nucleus (the full-sort fallback for small k)
    out, t, p = autodeco_step(heads, h, logits, candidates=candidates)
    ref, t_ref, p_ref = _step_reference(heads, h, logits)
    torch.testing.assert_close(t, t_ref)
    torch.testing.assert_close(p, p_ref)
    assert not torch.isnan(p).any()
    assert torch.equal(torch.isinf(out), torch.isinf(ref))
    torch.testing.assert_close(out[~torch.isinf(out)], ref[~torch.isinf(ref)])
    kept = (~torch.isinf(out)).sum(-1)
    assert kept.min() >= 1 and kept.max() > 1 and len(set(kept.tolist())) > 2  # the fixture varies the nucleus


def test_autodeco_step_low_temperature_and_unit_top_p_rows():
    from iclr26.decoding.autodeco import autodeco_step

    torch.manual_seed(6)
    heads = _wide_heads(AutoDecoHeads(AutoDecoConfig(hidden_size=6, head_hidden=8)), std=0.3)
    h, logits = torch.randn(4, 6), torch.randn(4, 30) * 2
    with torch.no_grad():  # T below the features' 0.01 clamp: the warp divides by T itself
        heads.temp_head[-1].weight.zero_()
        heads.temp_head[-1].bias.fill_(float(torch.logit(torch.tensor(0.004 / 2))))
    out, t, p = autodeco_step(heads, h, logits, candidates=4)
    ref, _, p_ref = _step_reference(heads, h, logits)
    assert torch.allclose(t, torch.full((4,), 0.004), atol=1e-6)
    torch.testing.assert_close(p, p_ref)
    assert torch.equal(torch.isinf(out), torch.isinf(ref))
    torch.testing.assert_close(out[~torch.isinf(out)], ref[~torch.isinf(ref)])
    assert float(out[~torch.isinf(out)].abs().max()) > 100  # l / 0.004, not l / 0.01
    # P = 1 keeps every token, even where the float cumulative mass reaches 1 before the tail
    heads.set_constant(0.5, 1.0)
    peaked = torch.randn(4, 30) * 30
    out, _, p = autodeco_step(heads, h, peaked, candidates=4)
    assert torch.all(p == 1.0) and not torch.isinf(out).any()
    torch.testing.assert_close(out, peaked / 0.5)
    assert top_p_filter(torch.softmax(peaked, -1), 1.0).all()


def test_autodeco_step_rejections():
    from iclr26.decoding.autodeco import autodeco_step

    heads = AutoDecoHeads(AutoDecoConfig(hidden_size=6))
    h, l = torch.randn(2, 6), torch.randn(2, 9)
    for bad in (0, -1, 2.0, None):
        with pytest.raises(ValueError, match="candidates must be a positive integer"):
            autodeco_step(heads, h, l, candidates=bad)
    with pytest.raises(ValueError, match=r"hidden \(3, 6\) and logits \(2, 9\) must share leading dimensions"):
        autodeco_step(heads, torch.randn(3, 6), l)
    with pytest.raises(ValueError, match="hidden size 5 != config.hidden_size 6"):
        autodeco_step(heads, torch.randn(2, 5), l)
    model = tiny_lm()
    with pytest.raises(ValueError, match="candidates must be a positive integer, got 0"):
        AutoDecoLogitsProcessor(model, AutoDecoHeads.from_base(model), candidates=0)
    ids = torch.tensor([[3, 4, 5]])
    with torch.no_grad():
        scores = model(ids).logits[:, -1, :]
    with AutoDecoLogitsProcessor(model, AutoDecoHeads.from_base(model)) as plain:  # record defaults to False
        model(ids)
        plain(ids, scores)
        assert plain.history == []
    heads1 = _wide_heads(AutoDecoHeads.from_base(model))
    with AutoDecoLogitsProcessor(model, heads1, candidates=1) as one, torch.no_grad():
        model(ids, output_hidden_states=True)
        h = model(ids, output_hidden_states=True).hidden_states[-1][:, -1, :]
        ref, _, _ = _step_reference(heads1, h, scores)
        out = one(ids, scores)
    assert torch.equal(torch.isinf(out), torch.isinf(ref))
    import inspect
    from iclr26.decoding.autodeco import autodeco_step as step
    assert inspect.signature(step).parameters["candidates"].default == 256
    assert inspect.signature(AutoDecoLogitsProcessor).parameters["candidates"].default == 256


def test_probability_features_with_blocked_tokens_and_variance():
    from iclr26.decoding.autodeco import probability_features

    torch.manual_seed(2)
    logits = torch.randn(3, 17) * 2
    logits[0, :4] = float("-inf")
    f = probability_features(logits)
    assert not torch.isnan(f).any()
    for r in range(3):
        p = torch.softmax(logits[r][torch.isfinite(logits[r])], -1).double()
        full = torch.softmax(logits[r], -1).double()
        ref = [p.max(), -(p * p.log()).sum(), full.var(), full.topk(5).values.sum()]
        torch.testing.assert_close(f[r].double(), torch.stack(ref), atol=1e-6, rtol=1e-5)
    one = probability_features(torch.tensor([[1.5]]))
    assert one.tolist() == [[1.0, 0.0, 0.0, 1.0]]
    two = torch.tensor([[0.3, -1.2]])
    p2 = torch.softmax(two, -1)[0]
    torch.testing.assert_close(probability_features(two)[0, 2], p2.var())  # V = 2: divides by V - 1 = 1


def test_presorted_soft_top_p_and_loss_equal_the_unsorted_ones():
    torch.manual_seed(4)
    heads = _wide_heads(AutoDecoHeads(AutoDecoConfig(hidden_size=7, head_hidden=8)), std=0.3)
    h, logits = torch.randn(12, 7), torch.randn(12, 25) * 3
    y = torch.where(torch.rand(12) < 0.5, logits.argmax(-1), torch.randint(0, 25, (12,)))
    srt, order = logits.sort(dim=-1, descending=True, stable=True)
    rank = (order == y[:, None]).int().argmax(-1)
    t, p = torch.rand(12) + 0.3, torch.rand(12) * 0.8 + 0.1
    q = soft_top_p_probs(logits, t, p, alpha=7.0)
    qs = soft_top_p_probs(srt, t, p, alpha=7.0, presorted=True)
    torch.testing.assert_close(qs, q.gather(-1, order))
    # leading dimensions beyond one batch axis: (2, 6, V)
    qs3 = soft_top_p_probs(srt.reshape(2, 6, 25), t.reshape(2, 6), p.reshape(2, 6), alpha=7.0, presorted=True)
    torch.testing.assert_close(qs3.reshape(12, 25), qs)
    w = torch.rand(12) * 2
    la, pa = autodeco_loss(heads, h, logits, y, weights=w, alpha=7.0, easy_drop=0.5,
                           generator=torch.Generator().manual_seed(1))
    lb, pb = autodeco_loss(heads, h, srt, rank, weights=w, alpha=7.0, easy_drop=0.5,
                           generator=torch.Generator().manual_seed(1), presorted=True)
    torch.testing.assert_close(la, lb)
    assert pa == pytest.approx(pb)
    assert pa["loss_p"] > 0.05 and 0 < (y == logits.argmax(-1)).sum() < 12


@pytest.mark.parametrize("dtype, n", [(torch.float32, 22), (torch.bfloat16, 22), (torch.float32, 150)])
def test_train_heads_presorted_equals_recomputed_logits(dtype, n):
    """n = 150 spans three chunks of the one-off sort (64 rows each)."""
    torch.manual_seed(8)
    stub = _Stub().to(dtype)
    with torch.no_grad():
        stub.lin.weight.mul_(6.0)
    h = torch.randn(n, 5)
    y = torch.where(torch.rand(n) < 0.5, stub.lin(h.to(dtype)).argmax(-1), torch.randint(0, 9, (n,)))
    data = TracePositions(h, y, torch.arange(n), torch.zeros(n, dtype=torch.long))
    a = AutoDecoHeads(AutoDecoConfig(hidden_size=5, head_hidden=8))
    b = AutoDecoHeads(AutoDecoConfig(hidden_size=5, head_hidden=8))
    b.load_state_dict(a.state_dict())
    kw = dict(steps=9, batch_size=8, lr=5e-3, weights=torch.rand(n) * 2, alpha=9.0, easy_drop=0.3, seed=4)
    ra = train_heads(a, stub, data, **kw)
    rb = train_heads(b, stub, data, presort=True, **kw)
    # the same loss at every step up to float noise (Adam turns noise in near-zero gradients into lr-sized
    # weight differences, so the weights themselves are compared loosely)
    assert ra.losses[0] == pytest.approx(rb.losses[0], rel=1e-6)  # before any update: the same loss
    assert ra.losses == pytest.approx(rb.losses, rel=1e-3, abs=1e-4)
    for (k, va), vb in zip(a.state_dict().items(), b.state_dict().values()):
        torch.testing.assert_close(va, vb, atol=2e-2, rtol=0, msg=k)
    assert ra.losses[0] != pytest.approx(ra.losses[-1])


@pytest.mark.parametrize("share", [True, False])
def test_teacher_forced_shared_prefix_against_per_sequence_forwards(share):
    from iclr26.decoding.autodeco.training import teacher_forced

    model = tiny_lm()
    head = "5 9 12 3 3 8"
    prompts = [head + " 4", head + " 4 6 7", head + " 30 31", head + " 4 6"]
    comps = ["6 7", "10", "13 14 15", "9"]
    pos = teacher_forced(model, _SpaceTok(), prompts, comps, batch_size=3, share_prefix=share)
    refs = []
    for p, c in zip(prompts, comps):
        pi, ci = [2] + [int(t) for t in p.split()], [int(t) for t in c.split()]
        with torch.no_grad():
            hs = model(torch.tensor([pi + ci]), output_hidden_states=True).hidden_states[-1][0]
        refs.append(hs[len(pi) - 1: len(pi) - 1 + len(ci)])
    torch.testing.assert_close(pos.hidden, torch.cat(refs), atol=1e-4, rtol=1e-4)
    assert pos.labels.tolist() == [6, 7, 10, 13, 14, 15, 9]
    assert pos.item.tolist() == [0, 0, 1, 2, 2, 2, 3] and pos.step.tolist() == [0, 1, 0, 0, 1, 2, 0]
    # one prompt that is the shared prefix itself: it keeps its last token
    pos2 = teacher_forced(model, _SpaceTok(), [head, head + " 4"], ["7", "8"], share_prefix=share)
    with torch.no_grad():
        r0 = model(torch.tensor([[2, 5, 9, 12, 3, 3, 8, 7]]), output_hidden_states=True).hidden_states[-1][0, -2]
    torch.testing.assert_close(pos2.hidden[0], r0, atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="no prompts given"):
        teacher_forced(model, _SpaceTok(), [], [])


def test_teacher_forced_runs_the_shared_prefix_once():
    from iclr26.decoding.autodeco.training import _common_prefix_length, teacher_forced

    assert _common_prefix_length([[1, 2, 3], [1, 2, 4], [1, 2, 3, 5]]) == 2
    assert _common_prefix_length([[1, 2], [1, 2, 3]]) == 2 and _common_prefix_length([[4], [1]]) == 0
    assert _common_prefix_length([[1, 2, 3, 4], [1, 2, 3, 5]]) == 3
    model = tiny_lm()
    lengths = []
    hook = model.model.register_forward_pre_hook(lambda m, a, k: lengths.append(k["input_ids"].shape), with_kwargs=True)
    head = "5 9 12 3 3 8"
    teacher_forced(model, _SpaceTok(), [head + " 4", head + " 6 7"], ["6", "10"], batch_size=1)
    hook.remove()
    assert lengths == [(1, 7), (1, 2), (1, 3)]


def test_soft_top_p_rejects_temperatures_top_p_and_alpha_out_of_range():
    """soft_top_p_probs with T = 0 returned NaN (0 / 0 where a logit is 0); it now rejects T <= 0,
    non-finite T, NaN or out-of-[0, 1] P and non-finite alpha, as warp_logits does for T and P."""
    torch.manual_seed(17)
    logits = torch.randn(12, 7)
    logits[:, 0] = 0.0
    p = torch.full((12,), 0.7)
    for bad in (0.0, -0.5, float("inf")):
        with pytest.raises(ValueError, match=rf"^temperature must lie in \(0, inf\), got values from"):
            soft_top_p_probs(logits, torch.full((12,), bad), p)
    with pytest.raises(ValueError, match=r"^temperature must lie in \(0, inf\), got values from 0.0 to 1.0$"):
        soft_top_p_probs(logits, torch.tensor([1.0] * 11 + [0.0]), p)
    with pytest.raises(ValueError, match=r"^temperature must not be NaN$"):
        soft_top_p_probs(logits, torch.full((12,), float("nan")), p)
    with pytest.raises(ValueError, match=r"^temperature must lie in \(0, inf\)"):
        soft_top_p_probs(logits, 0.0, p, presorted=True)
    with pytest.raises(ValueError, match=r"^temperature has shape \(12, 1\); it must be a scalar or broadcast to "
                                         r"the logits without the vocabulary axis, \(12,\)$"):
        soft_top_p_probs(logits, torch.ones(12, 1), p)  # would broadcast to (12, 12, 7)
    for bad in (1.5, -0.1):
        with pytest.raises(ValueError, match=r"^top_p must lie in \[0, 1.0\]"):
            soft_top_p_probs(logits, torch.ones(12), torch.full((12,), bad))
    with pytest.raises(ValueError, match=r"^top_p must not be NaN$"):
        soft_top_p_probs(logits, torch.ones(12), torch.full((12,), float("nan")))
    for bad in (float("inf"), float("nan")):
        with pytest.raises(ValueError, match=r"^alpha must be"):
            soft_top_p_probs(logits, torch.ones(12), p, alpha=bad)
    # the edges of the allowed ranges give finite distributions; numbers work like scalar tensors
    for t, pp in ((1e-6, 0.0), (1e-6, 1.0), (50.0, 0.0), (50.0, 1.0)):
        q = soft_top_p_probs(logits, torch.full((12,), t), torch.full((12,), pp))
        assert bool(torch.isfinite(q).all()) and bool((q >= 0).all())
    assert torch.equal(soft_top_p_probs(logits, 0.8, 0.6), soft_top_p_probs(logits, torch.tensor(0.8), torch.tensor(0.6)))
    t = torch.full((12,), 0.9, requires_grad=True)
    soft_top_p_probs(logits, t, p)[:, 1].sum().backward()
    assert t.grad is not None and bool(torch.isfinite(t.grad).all())


def test_loss_and_config_reject_non_finite_or_non_positive_settings():
    """autodeco_loss's min_temperature (a divisor) must be a finite number > 0, its weights finite
    and >= 0 with one per position; max_temperature must be finite."""
    torch.manual_seed(18)
    heads = AutoDecoHeads(AutoDecoConfig(hidden_size=4, head_hidden=8))
    h, logits = torch.randn(6, 4), torch.randn(6, 7)
    y = logits.argmax(-1)
    for bad in (0.0, -0.01, float("inf"), float("nan")):
        with pytest.raises(ValueError, match=r"^min_temperature must be a finite number > 0"):
            autodeco_loss(heads, h, logits, y, min_temperature=bad)
    for w in (torch.tensor([1.0, 1, 1, 1, 1, float("nan")]), torch.tensor([1.0, 1, 1, 1, 1, -1])):
        with pytest.raises(ValueError, match=r"^weights must be finite and >= 0"):
            autodeco_loss(heads, h, logits, y, weights=w)
    with pytest.raises(ValueError, match=r"^weights must have shape \(6,\), got \(6, 1\)$"):
        autodeco_loss(heads, h, logits, y, weights=torch.ones(6, 1))
    loss, _ = autodeco_loss(heads, h, logits, y, weights=torch.tensor([0.0, 1, 2, 1, 1, 3]))
    assert math.isfinite(float(loss.detach()))
    with pytest.raises(ValueError, match=r"^max_temperature must be finite \(> 0\), got inf$"):
        AutoDecoConfig(hidden_size=4, max_temperature=float("inf"))
