"""Tests for causal_icl: task sampler, BMA oracle (Sec. 3), Thm 1 construction, the two-layer model
and its one-layer ablation against loop references, Prop. 1 identifiability, device/dtype, rejections."""
import math

import numpy as np
import pytest
import torch

from iclr26.common.training import train
from iclr26.interpretability.causal_icl import (
    OneLayerRPEConfig,
    OneLayerRPETransformer,
    RandomParentMarkovTask,
    TwoLayerRPEConfig,
    TwoLayerRPETransformer,
    bma_posterior,
    bma_predict,
    identifiable_softmax_error,
    softmax_abs_errors,
)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny tensors: one thread avoids oversubscription on shared cores."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _task(seed=0, d=4, H=5, L=3):
    return RandomParentMarkovTask(d, H, L, generator=torch.Generator().manual_seed(seed))


def _randomise(model, seed, scale=1.5):
    """Far-from-uniform parameters (scale ~1.5 logits), so attention and readouts are peaked."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * scale)
    return model


# ---------------------------------------------------------------- sampler

def test_sampler_shapes_parents_and_transition_frequencies():
    task = _task(d=3, H=4, L=2)
    x, par = task.sample(4000)
    assert x.shape == (4000, 3, 4) and par.shape == (4000, 4)
    assert x.dtype == torch.long and x.min() >= 0 and x.max() <= 2
    assert (par[:, 0] == -1).all()
    for h in range(1, 4):
        assert ((par[:, h] >= 0) & (par[:, h] < h)).all()
        freq = torch.bincount(par[:, h], minlength=h).double() / 4000  # pa(h) ~ Unif{0..h-1}
        assert torch.allclose(freq, torch.full((h,), 1.0 / h, dtype=torch.float64), atol=0.04)
    # x_1 ~ Unif over the d symbols
    f0 = torch.bincount(x[:, :, 0].reshape(-1), minlength=3).double() / x[:, :, 0].numel()
    assert torch.allclose(f0, torch.full((3,), 1 / 3, dtype=torch.float64), atol=0.02)
    # x_h | x_pa(h) ~ pi, for every h, pooled over the L + 1 sequences that share the parent map
    counts = torch.zeros(3, 3, dtype=torch.float64)
    for h in range(1, 4):
        a = x.gather(2, par[:, h].view(-1, 1, 1).expand(-1, 3, 1)).reshape(-1)
        b = x[:, :, h].reshape(-1)
        counts.index_put_((a, b), torch.ones_like(a, dtype=torch.float64), accumulate=True)
    assert torch.allclose(counts / counts.sum(1, keepdim=True), task.pi, atol=0.025)
    assert torch.allclose(task.pi.sum(1), torch.ones(3, dtype=torch.float64))


def test_sampler_parent_shared_within_a_context():
    # a deterministic pi (a permutation) makes x_h a function of x_pa(h) in every sequence of a context
    perm = torch.tensor([[0.0, 1, 0], [0, 0, 1], [1, 0, 0]])
    task = RandomParentMarkovTask(3, 5, 4, pi=perm, generator=torch.Generator().manual_seed(1))
    x, par = task.sample(200)
    for h in range(1, 5):
        src = x.gather(2, par[:, h].view(-1, 1, 1).expand(-1, 5, 1)).squeeze(2)
        assert torch.equal(x[:, :, h], (src + 1) % 3)


def test_sampler_generator_argument():
    task = _task(seed=5)
    a, pa = task.sample(6, torch.Generator().manual_seed(3))
    b, pb = task.sample(6, torch.Generator().manual_seed(3))
    assert torch.equal(a, b) and torch.equal(pa, pb)
    state = task.generator.get_state()
    task.sample(6, torch.Generator().manual_seed(4))
    assert torch.equal(task.generator.get_state(), state)  # the task's own stream is untouched
    c, _ = task.sample(6)
    assert not torch.equal(task.generator.get_state(), state)
    assert not torch.equal(a, c)


def test_dirichlet_rows_concentration():
    # Dirichlet(alpha) rows: E[p_ij^2] = (alpha + 1) / (d (d alpha + 1)); small alpha -> peaked rows
    def draws(**kw):
        return torch.stack([RandomParentMarkovTask(4, 2, 1, generator=torch.Generator().manual_seed(s), **kw).pi
                            for s in range(300)])
    for alpha, kw in ((0.3, dict(dirichlet_alpha=0.3)), (2.0, dict(dirichlet_alpha=2.0)), (0.5, {})):  # default 0.5
        pis = draws(**kw)
        expected = (alpha + 1) / (4 * (4 * alpha + 1))
        assert abs(float((pis ** 2).mean()) - expected) < 0.1 * expected
        assert len({tuple(p.reshape(-1).tolist()) for p in pis}) == 300  # every seed its own pi


def test_task_pi_is_reproducible_from_its_generator():
    torch.manual_seed(1)
    a = RandomParentMarkovTask(4, 3, 2, generator=torch.Generator().manual_seed(7)).pi
    torch.manual_seed(2)  # the global stream plays no part
    b = RandomParentMarkovTask(4, 3, 2, generator=torch.Generator().manual_seed(7)).pi
    assert torch.equal(a, b)
    # without a generator the task uses its own, seeded 0
    assert torch.equal(RandomParentMarkovTask(4, 3, 2).pi,
                       RandomParentMarkovTask(4, 3, 2, generator=torch.Generator().manual_seed(0)).pi)
    torch.manual_seed(3)
    x1, _ = RandomParentMarkovTask(4, 3, 2).sample(5)
    torch.manual_seed(4)
    x2, _ = RandomParentMarkovTask(4, 3, 2).sample(5)
    assert torch.equal(x1, x2)


# ---------------------------------------------------------------- BMA oracle (Sec. 3)

def _bma_reference(x, pi):
    """Loop reference: P(pa(h)=h') proportional to prod_l pi(x_h^l | x_h'^l), uniform prior over h' < h."""
    B, Lp1, H = x.shape
    d = pi.shape[0]
    post = torch.zeros(B, H, H, dtype=torch.float64)
    pred = torch.zeros(B, H, d, dtype=torch.float64)
    for b in range(B):
        pred[b, 0] = 1.0 / d
        for h in range(1, H):
            w = torch.tensor([math.prod(float(pi[x[b, l, g], x[b, l, h]]) for l in range(Lp1 - 1)) for g in range(h)],
                             dtype=torch.float64)
            post[b, h, :h] = w / w.sum()
            for g in range(h):
                pred[b, h] += post[b, h, g] * pi[x[b, -1, g]]
    return post, pred


def test_bma_posterior_hand_computed():
    # d = 2, H = 3, L = 2, pi = [[0.9, 0.1], [0.2, 0.8]]
    pi = torch.tensor([[0.9, 0.1], [0.2, 0.8]], dtype=torch.float64)
    x = torch.tensor([[[0, 1, 1], [1, 1, 0], [0, 0, 0]]])  # two examples + query
    post = bma_posterior(x, pi)[0]
    assert torch.equal(post[0], torch.zeros(3, dtype=torch.float64))
    assert torch.allclose(post[1], torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64))
    # h = 2: h'=0 -> pi(1|0) pi(0|1) = 0.1*0.2 = 0.02; h'=1 -> pi(1|1) pi(0|1) = 0.8*0.2 = 0.16
    assert torch.allclose(post[2], torch.tensor([0.02 / 0.18, 0.16 / 0.18, 0.0], dtype=torch.float64))
    pred = bma_predict(x, pi)[0]
    assert torch.allclose(pred[2], pi[0])  # both candidate parents of the query hold token 0
    assert torch.allclose(pred[0], torch.full((2,), 0.5, dtype=torch.float64))


def test_bma_matches_loop_reference():
    task = _task(seed=7, d=4, H=5, L=3)
    x, _ = task.sample(12)
    post, pred = _bma_reference(x, task.pi)
    assert torch.allclose(bma_posterior(x, task.pi), post, atol=1e-12)
    assert torch.allclose(bma_predict(x, task.pi), pred, atol=1e-12)
    # the query's own tokens do not enter the posterior
    x2 = x.clone()
    x2[:, -1] = (x2[:, -1] + 1) % 4
    assert torch.equal(bma_posterior(x2, task.pi), bma_posterior(x, task.pi))


# ---------------------------------------------------------------- two-layer model

def _two_layer_reference(model, x):
    """Loop reference of the disentangled two-layer forward pass (Thm 1's architecture)."""
    c = model.config
    a1 = torch.softmax(model.rpe.detach().double(), -1)  # (K, L): offset j + 1
    W, R = model.W.detach().double(), torch.softmax(model.V.detach().double(), -1)
    B = x.shape[0]
    out = torch.zeros(B, c.H, c.d, dtype=torch.float64)
    for b in range(B):
        z = torch.zeros(c.H, c.n_heads, c.d, dtype=torch.float64)
        for h in range(c.H):
            for k in range(c.n_heads):
                for j in range(c.L):
                    z[h, k, x[b, c.L - 1 - j, h]] += a1[k, j]  # offset j + 1 = sequence L - 1 - j
        out[b, 0] = 1.0 / c.d
        for h in range(1, c.H):
            s = torch.tensor([sum(float(z[h, k] @ W[k] @ z[g, k]) for k in range(c.n_heads)) for g in range(h)])
            att = torch.softmax(s.double(), 0)
            for g in range(h):
                out[b, h] += att[g] * R[x[b, -1, g]]
    return out


def test_two_layer_matches_loop_reference():
    model = _randomise(TwoLayerRPETransformer(TwoLayerRPEConfig(4, 5, 3, n_heads=2)), seed=3).double()
    x, _ = _task(seed=4, d=4, H=5, L=3).sample(6)
    assert torch.allclose(model(x).exp(), _two_layer_reference(model, x), atol=1e-10)


def test_thm1_construction_equals_bma():
    task = _task(seed=1, d=5, H=6, L=4)
    x, _ = task.sample(200)
    model = TwoLayerRPETransformer.from_construction(task.pi, H=6, L=4).double()
    assert torch.allclose(model(x).exp(), bma_predict(x, task.pi), atol=1e-6)
    assert torch.allclose(model.last_attention, bma_posterior(x, task.pi), atol=1e-6)
    # layer 1 of the construction: head k copies the same-position token of example offset k + 1
    z = model.layer1(x)
    for k in range(4):
        assert torch.allclose(z[:, :, k], torch.nn.functional.one_hot(x[:, 3 - k], 5).double(), atol=1e-12)


def test_two_layer_zero_W_reduces_to_uniform_parent_mixture():
    # W = 0: uniform attention over the h - 1 candidates, output = their average readout row
    model = _randomise(TwoLayerRPETransformer(TwoLayerRPEConfig(3, 4, 2)), seed=8).double()
    with torch.no_grad():
        model.W.zero_()
    x, _ = _task(seed=2, d=3, H=4, L=2).sample(5)
    R = torch.softmax(model.V.detach(), -1)
    out = model(x).exp()
    for h in range(1, 4):
        assert torch.allclose(out[:, h], R[x[:, -1, :h]].mean(1), atol=1e-12)
    assert torch.allclose(out[:, 0], torch.full((5, 3), 1 / 3, dtype=torch.float64))


def test_two_layer_prop1_invariance_to_per_child_shift():
    # Prop. 1: W_k[child, :] += a_k[child] leaves every prediction unchanged
    model = _randomise(TwoLayerRPETransformer(TwoLayerRPEConfig(4, 5, 3)), seed=9).double()
    x, _ = _task(seed=3, d=4, H=5, L=3).sample(8)
    before = model(x)
    with torch.no_grad():
        model.W.add_(torch.randn(3, 4, 1, dtype=torch.float64) * 3)
    assert torch.allclose(model(x), before, atol=1e-10)
    with torch.no_grad():  # a per-parent (column) shift does change them
        model.W.add_(torch.randn(3, 1, 4, dtype=torch.float64) * 3)
    assert not torch.allclose(model(x), before, atol=1e-3)


@pytest.mark.parametrize("cls, cfg", [(TwoLayerRPETransformer, TwoLayerRPEConfig),
                                      (OneLayerRPETransformer, OneLayerRPEConfig)])
def test_prediction_at_h_ignores_query_tokens_from_h_on(cls, cfg):
    model = _randomise(cls(cfg(4, 6, 3)), seed=11).double()
    x, _ = _task(seed=6, d=4, H=6, L=3).sample(10)
    out = model(x)
    for h in range(6):
        x2 = x.clone()
        x2[:, -1, h:] = (x2[:, -1, h:] + 1) % 4
        assert torch.allclose(model(x2)[:, : h + 1], out[:, : h + 1], atol=1e-12)
        if h > 0:  # ... but does use the earlier ones
            x3 = x.clone()
            x3[:, -1, :h] = (x3[:, -1, :h] + 1) % 4
            assert not torch.allclose(model(x3)[:, h], out[:, h], atol=1e-6)


@pytest.mark.parametrize("cls, cfg", [(TwoLayerRPETransformer, TwoLayerRPEConfig),
                                      (OneLayerRPETransformer, OneLayerRPEConfig)])
def test_both_models_read_the_examples(cls, cfg):
    model = _randomise(cls(cfg(4, 5, 3)), seed=12).double()
    x, _ = _task(seed=8, d=4, H=5, L=3).sample(10)
    out = model(x)
    for l in range(3):
        x2 = x.clone()
        x2[:, l] = (x2[:, l] + 1) % 4
        assert not torch.allclose(model(x2)[:, 1:], out[:, 1:], atol=1e-6)


def test_training_learns():
    task = _task(seed=2, d=4, H=5, L=4)
    model = TwoLayerRPETransformer(TwoLayerRPEConfig(4, 5, 4), generator=torch.Generator().manual_seed(0))

    def stream():
        while True:
            yield task.sample(32)[0]

    def loss(m, x):
        return -m(x).gather(2, x[:, -1].unsqueeze(-1)).squeeze(-1)[:, 1:].mean()

    res = train(model, torch.optim.Adam(model.parameters(), lr=0.05), stream(), 80, loss)
    assert np.mean(res.losses[-10:]) < np.mean(res.losses[:10]) - 0.05


def test_init_is_seeded_and_spread():
    a = TwoLayerRPETransformer(TwoLayerRPEConfig(4, 5, 3, init_std=2.0), generator=torch.Generator().manual_seed(1))
    b = TwoLayerRPETransformer(TwoLayerRPEConfig(4, 5, 3, init_std=2.0), generator=torch.Generator().manual_seed(1))
    assert torch.equal(a.rpe, b.rpe) and a.rpe.shape == (3, 3)
    assert 1.0 < float(a.rpe.detach().std()) < 4.0
    assert torch.equal(a.W, torch.zeros(3, 4, 4)) and torch.equal(a.V, torch.zeros(4, 4))
    assert torch.equal(TwoLayerRPETransformer(TwoLayerRPEConfig(4, 5, 3, init_std=0.0)).rpe, torch.zeros(3, 3))
    o = OneLayerRPETransformer(OneLayerRPEConfig(4, 5, 3, init_std=2.0), generator=torch.Generator().manual_seed(1))
    assert o.rpe.shape == (2, 4, 9) and 1.0 < float(o.rpe.detach().std()) < 4.0
    torch.manual_seed(5)  # the init follows the generator, not the global stream
    o2 = OneLayerRPETransformer(OneLayerRPEConfig(4, 5, 3, init_std=2.0), generator=torch.Generator().manual_seed(1))
    assert torch.equal(o.rpe, o2.rpe)
    o3 = OneLayerRPETransformer(OneLayerRPEConfig(4, 5, 3, init_std=2.0), generator=torch.Generator().manual_seed(2))
    assert not torch.equal(o.rpe, o3.rpe)
    assert a.last_attention is None and o.last_attention is None  # set by the first forward pass
    assert float(o.U.detach().abs().sum() + o.V.detach().abs().sum() + o.gate.detach().abs().sum()) == 0.0
    assert torch.equal(OneLayerRPETransformer(OneLayerRPEConfig(4, 5, 3, init_std=0.0)).rpe, torch.zeros(2, 4, 9))


# ---------------------------------------------------------------- one-layer ablation

def _one_layer_reference(model, x):
    """Loop reference of the one-layer ablation: per head, softmax over every visible context token of
    rpe[k, j, h - h' + H - 1] + U[k, x_{h-1}^q, token]; per-head readout; heads mixed by softmax(gate)."""
    c = model.config
    rpe, U = model.rpe.detach().double(), model.U.detach().double()
    R, g = torch.softmax(model.V.detach().double(), -1), torch.softmax(model.gate.detach().double(), 0)
    B, H, L, d = x.shape[0], c.H, c.L, c.d
    out = torch.zeros(B, H, d, dtype=torch.float64)
    for b in range(B):
        out[b, 0] = 1.0 / d
        for h in range(1, H):
            prev = int(x[b, -1, h - 1])
            for k in range(c.n_heads):
                keys, scores = [], []
                for j in range(L + 1):  # j = 0: the query itself, j >= 1: the j-th example back
                    seq = L - j
                    for hp in range(H):
                        if j == 0 and hp >= h:
                            continue
                        tok = int(x[b, seq, hp])
                        keys.append(tok)
                        scores.append(float(rpe[k, j, h - hp + H - 1] + U[k, prev, tok]))
                att = torch.softmax(torch.tensor(scores, dtype=torch.float64), 0)
                for a, tok in zip(att, keys):
                    out[b, h] += g[k] * a * R[k, tok]
    return out


def test_one_layer_matches_loop_reference():
    model = _randomise(OneLayerRPETransformer(OneLayerRPEConfig(3, 4, 2, n_heads=3)), seed=5).double()
    x, _ = _task(seed=9, d=3, H=4, L=2).sample(4)
    assert torch.allclose(model(x).exp(), _one_layer_reference(model, x), atol=1e-10)
    assert model.last_attention.shape == (4, 4, 3, 3, 4)
    assert torch.allclose(model.last_attention.sum((-1, -2)), torch.ones(4, 4, 3, dtype=torch.float64))


def test_one_layer_can_be_the_prior_parent_mixture():
    # examples masked out by the RPE and zero content/readout-free weights -> uniform over the prefix;
    # readout pi -> sum_{h' < h} pi(. | x_h'^q) / (h - 1), the best a layer blind to the pair fit can do
    task = _task(seed=10, d=3, H=5, L=2)
    model = OneLayerRPETransformer(OneLayerRPEConfig(3, 5, 2, n_heads=1)).double()
    with torch.no_grad():
        model.rpe[:, 1:] = -1e4
        model.rpe[:, 0] = 0.0
        model.V.copy_(torch.log(task.pi).unsqueeze(0))
    x, _ = task.sample(6)
    out = model(x).exp()
    for h in range(1, 5):
        assert torch.allclose(out[:, h], task.pi[x[:, -1, :h]].mean(1), atol=1e-9)


# ---------------------------------------------------------------- Prop. 1 parameter metric

def test_identifiable_softmax_error_invariance_and_units():
    pi = _task(seed=3).pi
    W = torch.log(pi).T + torch.randn(4, 1, dtype=torch.float64) * 3  # + a 1^T (per-child shift)
    err = identifiable_softmax_error(W, pi)
    assert err["identified"] < 1e-12
    assert err["non_identified"] > 1e-2
    # the paper's units: (1/d) * entrywise L1 norm
    ident, other = softmax_abs_errors(torch.zeros(4, 4), pi)
    e0 = identifiable_softmax_error(torch.zeros(4, 4), pi)
    assert e0["identified"] == pytest.approx(float(ident.sum()) / 4)
    assert e0["non_identified"] == pytest.approx(float(other.sum()) / 4)


def test_softmax_abs_errors_hand_computed():
    pi = torch.tensor([[0.5, 0.5], [0.2, 0.8]], dtype=torch.float64)  # pi[parent, child]
    ident, other = softmax_abs_errors(torch.zeros(2, 2), pi)
    # identified: softmax over parents of log pi(child | .): child 0 -> (0.5, 0.2)/0.7, child 1 -> (0.5, 0.8)/1.3
    t_id = torch.tensor([[0.5 / 0.7, 0.2 / 0.7], [0.5 / 1.3, 0.8 / 1.3]], dtype=torch.float64)
    assert torch.allclose(ident, (t_id - 0.5).abs())
    # other axis: softmax over children, for each parent = the rows of pi, laid out [child, parent]
    assert torch.allclose(other, (pi.T - 0.5).abs())


def test_softmax_abs_errors_general_W_and_float64():
    g = torch.Generator().manual_seed(4)
    W = (torch.randn(3, 3, generator=g) * 2).float()
    pi32 = torch.softmax(torch.randn(3, 3, generator=g) * 2, 1).float()
    ident, other = softmax_abs_errors(W, pi32)
    Wd, target = W.double(), torch.log(pi32.double()).T
    assert ident.dtype == other.dtype == torch.float64
    assert torch.allclose(ident, (torch.softmax(Wd, 1) - torch.softmax(target, 1)).abs(), atol=1e-15, rtol=0)
    assert torch.allclose(other, (torch.softmax(Wd, 0) - torch.softmax(target, 0)).abs(), atol=1e-15, rtol=0)
    assert not torch.allclose(ident, other, atol=1e-3)


# ---------------------------------------------------------------- ecosystem contract: devices, dtypes, state

@pytest.mark.parametrize("cls, cfg", [(TwoLayerRPETransformer, TwoLayerRPEConfig),
                                      (OneLayerRPETransformer, OneLayerRPEConfig)])
def test_masks_follow_the_module_device_and_dtype(cls, cfg):
    model = cls(cfg(4, 5, 3)).to("meta")
    assert all(buf.device.type == "meta" for buf in model.buffers())
    out = model(torch.zeros(2, 4, 5, dtype=torch.long, device="meta"))
    assert out.device.type == "meta" and out.shape == (2, 5, 4)
    x, _ = _task(d=4, H=5, L=3).sample(3)
    m64 = _randomise(cls(cfg(4, 5, 3)), seed=1).double()
    assert m64(x).dtype == torch.float64
    m32 = cls(cfg(4, 5, 3)).float()
    m32.load_state_dict({k: v.float() for k, v in m64.state_dict().items()})
    assert m32(x).dtype == torch.float32
    assert torch.allclose(m32(x).double(), m64(x), atol=1e-4)


def test_bma_on_the_input_device():
    x = torch.zeros(2, 4, 5, dtype=torch.long, device="meta")
    assert bma_posterior(x, torch.full((4, 4), 0.25, dtype=torch.float64)).device.type == "meta"
    assert bma_predict(x, torch.full((4, 4), 0.25, dtype=torch.float64)).device.type == "meta"
    assert bma_posterior(x, torch.full((4, 4), 0.25, dtype=torch.float64, device="meta")).device.type == "meta"


@pytest.mark.parametrize("cls, cfg", [(TwoLayerRPETransformer, TwoLayerRPEConfig),
                                      (OneLayerRPETransformer, OneLayerRPEConfig)])
def test_state_dict_round_trip_and_shape_check(cls, cfg):
    a = cls(cfg(4, 5, 3), generator=torch.Generator().manual_seed(1))
    _randomise(a, seed=2)
    b = cls(cfg(4, 5, 3), generator=torch.Generator().manual_seed(3))
    b.load_state_dict(a.state_dict())
    assert set(a.state_dict()) == {n for n, _ in a.named_parameters()}  # masks are not state
    x = _task(d=4, H=5, L=3).sample(3)[0]
    assert torch.equal(a(x), b(x))
    with pytest.raises(ValueError, match=r"shape \(batch, 4, 5\)"):
        a(torch.zeros(2, 3, 5, dtype=torch.long))
    with pytest.raises(ValueError, match=r"shape \(batch, 4, 5\)"):
        a(torch.zeros(4, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="integer token ids"):
        a(torch.zeros(2, 4, 5))


# ---------------------------------------------------------------- rejections

@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(d=1, H=5, L=3), "d must be an int >= 2, got 1"),
        (dict(d=4, H=1, L=3), "H must be an int >= 2, got 1"),
        (dict(d=4, H=5, L=0), "L must be an int >= 1, got 0"),
        (dict(d=4.0, H=5, L=3), "d must be an int"),
        (dict(d=4, H=5, L=3, dirichlet_alpha=0.0), "dirichlet_alpha must be > 0"),
        (dict(d=2, H=5, L=3, pi=[[0.5, 0.6], [0.5, 0.5]]), r"pi must be a \(2, 2\) row-stochastic"),
        (dict(d=2, H=5, L=3, pi=[[1.5, -0.5], [0.5, 0.5]]), "row-stochastic"),
        (dict(d=2, H=5, L=3, pi=[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]), "row-stochastic"),
    ],
)
def test_task_rejects_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RandomParentMarkovTask(**kwargs)


def test_task_accepts_given_pi_and_rejects_bad_batch():
    pi = torch.tensor([[0.7, 0.3], [0.4, 0.6]])
    task = RandomParentMarkovTask(2, 3, 1, pi=pi)
    assert torch.allclose(task.pi, pi.double()) and task.pi.dtype == torch.float64
    # rows that sum to 1 only within tolerance are renormalised; zeros are floored at 1e-12
    near = torch.tensor([[0.7, 0.3 + 5e-6], [0.0, 1.0 - 4e-6]], dtype=torch.float64)
    tn = RandomParentMarkovTask(2, 3, 1, pi=near)
    assert torch.allclose(tn.pi.sum(1), torch.ones(2, dtype=torch.float64), atol=1e-14, rtol=0)
    assert torch.allclose(tn.pi[0], near[0] / near[0].sum(), atol=1e-14, rtol=0)
    assert 0 < float(tn.pi[1, 0]) < 1e-11
    assert task.sample(1)[0].shape == (1, 2, 3)
    for bad in (0, 2.0):
        with pytest.raises(ValueError, match="batch must be a positive int"):
            task.sample(bad)


@pytest.mark.parametrize("cfg", [TwoLayerRPEConfig, OneLayerRPEConfig])
def test_configs_reject_bad_values(cfg):
    with pytest.raises(ValueError, match="n_heads must be a positive int, got 0"):
        cfg(4, 5, 3, n_heads=0)
    with pytest.raises(ValueError, match=r"init_std must be >= 0, got -1.0"):
        cfg(4, 5, 3, init_std=-1.0)
    with pytest.raises(ValueError, match="L must be an int >= 1"):
        cfg(4, 5, 0)
    with pytest.raises(ValueError, match="d must be an int >= 2"):
        cfg(1, 5, 3)
    with pytest.raises(ValueError, match="H must be an int >= 2"):
        cfg(4, 1, 3)


def test_smallest_dimensions_are_accepted():
    for cfg in (TwoLayerRPEConfig(2, 2, 1), OneLayerRPEConfig(2, 2, 1)):
        assert (cfg.d, cfg.H, cfg.L) == (2, 2, 1)
    assert RandomParentMarkovTask(2, 2, 1).sample(3)[0].shape == (3, 2, 2)


def test_config_defaults():
    assert TwoLayerRPEConfig(4, 5, 3).n_heads == 3  # Thm 1: K = L heads
    assert OneLayerRPEConfig(4, 5, 3).n_heads == 2
    assert TwoLayerRPEConfig(4, 5, 3).init_std == 1.0 == OneLayerRPEConfig(4, 5, 3).init_std


def test_softmax_errors_reject_bad_shapes():
    with pytest.raises(ValueError, match=r"W and pi must both be \(d, d\) matrices, got \(2, 3\) and \(2, 2\)"):
        softmax_abs_errors(torch.zeros(2, 3), torch.eye(2))
    with pytest.raises(ValueError, match="W and pi must both be"):
        softmax_abs_errors(torch.zeros(2, 3), torch.full((2, 3), 0.5))  # same shape, not square
    with pytest.raises(ValueError, match="W and pi must both be"):
        softmax_abs_errors(torch.zeros(2, 2, 2), torch.full((2, 2, 2), 0.5))  # not a matrix
    with pytest.raises(ValueError, match="W and pi must both be"):
        identifiable_softmax_error(torch.zeros(3, 3), torch.eye(2))


def test_experiment_rejects_unknown_scale():
    from iclr26.interpretability.causal_icl.experiment import run

    with pytest.raises(ValueError, match="scale must be one of"):
        run("big", 0)
