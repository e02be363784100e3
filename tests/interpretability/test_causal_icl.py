"""Tests for causal_icl: task sampler, BMA oracle, Thm 1 construction, model contract."""
import itertools

import numpy as np
import pytest
import torch

from iclr26.common.training import train
from iclr26.interpretability.causal_icl import (
    PositionOnlyAttention,
    RandomParentMarkovTask,
    TwoLayerRPEConfig,
    TwoLayerRPETransformer,
    bma_posterior,
    bma_predict,
    identifiable_softmax_error,
)


def _task(seed=0, d=4, H=5, L=3):
    return RandomParentMarkovTask(d, H, L, generator=torch.Generator().manual_seed(seed))


def test_sampler_shapes_parents_and_transition_frequencies():
    task = _task(d=3, H=4, L=2)
    x, par = task.sample(4000)
    assert x.shape == (4000, 3, 4) and par.shape == (4000, 4)
    assert (par[:, 0] == -1).all()
    for h in range(1, 4):
        assert ((par[:, h] >= 0) & (par[:, h] < h)).all()
        # pa(h) ~ Unif{0..h-1}
        freq = torch.bincount(par[:, h], minlength=h).double() / 4000
        assert torch.allclose(freq, torch.full((h,), 1.0 / h, dtype=torch.float64), atol=0.04)
    # x_h | x_pa(h) ~ pi: empirical transition frequencies for h = 1 (parent is always 0)
    a, b = x[:, :, 0].reshape(-1), x[:, :, 1].reshape(-1)
    counts = torch.zeros(3, 3, dtype=torch.float64)
    counts.index_put_((a, b), torch.ones_like(a, dtype=torch.float64), accumulate=True)
    assert torch.allclose(counts / counts.sum(1, keepdim=True), task.pi, atol=0.04)
    assert torch.allclose(task.pi.sum(1), torch.ones(3, dtype=torch.float64))


def test_bma_posterior_hand_computed():
    # d = 2, H = 3, L = 2, pi = [[0.9, 0.1], [0.2, 0.8]]; P(pa(h)=h') ∝ prod_l pi(x_h^l | x_h'^l)
    pi = torch.tensor([[0.9, 0.1], [0.2, 0.8]], dtype=torch.float64)
    x = torch.tensor([[[0, 1, 1], [1, 1, 0], [0, 0, 0]]])  # two examples + query
    post = bma_posterior(x, pi)[0]
    assert torch.allclose(post[1], torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64))
    # h = 2: h'=0 -> pi(1|0) pi(0|1) = 0.1*0.2 = 0.02; h'=1 -> pi(1|1) pi(0|1) = 0.8*0.2 = 0.16
    assert torch.allclose(post[2], torch.tensor([0.02 / 0.18, 0.16 / 0.18, 0.0], dtype=torch.float64))
    pred = bma_predict(x, pi)[0]
    # query x^q = (0, 0, .): p(x_2^q) = post0 pi(.|0) + post1 pi(.|0) = pi(.|0)
    assert torch.allclose(pred[2], pi[0])
    assert torch.allclose(pred[0], torch.full((2,), 0.5, dtype=torch.float64))


def test_thm1_construction_equals_bma():
    task = _task(seed=1, d=5, H=6, L=4)
    x, _ = task.sample(200)
    model = TwoLayerRPETransformer.from_construction(task.pi, H=6, L=4).double()
    lp = model(x)
    assert torch.allclose(lp.exp(), bma_predict(x, task.pi), atol=1e-6)
    assert torch.allclose(model.last_attention, bma_posterior(x, task.pi), atol=1e-6)


def test_bma_beats_single_parent_guess_and_training_learns():
    task = _task(seed=2, d=4, H=5, L=4)
    model = TwoLayerRPETransformer(TwoLayerRPEConfig(4, 5, 4), generator=torch.Generator().manual_seed(0))

    def stream():
        while True:
            yield task.sample(32)[0]

    def loss(m, x):
        return -m(x).gather(2, x[:, -1].unsqueeze(-1)).squeeze(-1)[:, 1:].mean()

    res = train(model, torch.optim.Adam(model.parameters(), lr=0.05), stream(), 80, loss)
    assert np.mean(res.losses[-10:]) < np.mean(res.losses[:10]) - 0.05


def test_position_only_baseline_reduces_to_uniform_parent_mixture_at_init():
    # zero RPE logits = uniform attention over earlier positions; zero V = uniform readout
    base = PositionOnlyAttention(3, 4)
    x = torch.randint(0, 3, (2, 3, 4))
    assert torch.allclose(base(x).exp(), torch.full((2, 4, 3), 1 / 3))


def test_identifiable_softmax_error_invariance():
    pi = _task(seed=3).pi
    W = torch.log(pi).T + torch.randn(4, 1, dtype=torch.float64) * 3  # + a 1^T (per-child shift)
    err = identifiable_softmax_error(W, pi)
    assert err["identified"] < 1e-12
    assert err["non_identified"] > 1e-3


def test_state_dict_round_trip_and_shape_check():
    a = TwoLayerRPETransformer(TwoLayerRPEConfig(4, 5, 3), generator=torch.Generator().manual_seed(1))
    b = TwoLayerRPETransformer(TwoLayerRPEConfig(4, 5, 3), generator=torch.Generator().manual_seed(2))
    b.load_state_dict(a.state_dict())
    x = _task(d=4, H=5, L=3).sample(3)[0]
    assert torch.equal(a(x), b(x))
    with pytest.raises(ValueError, match=r"shape \(batch, 4, 5\)"):
        a(torch.zeros(2, 3, 5, dtype=torch.long))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(d=1, H=5, L=3), "d must be"),
        (dict(d=4, H=1, L=3), "H must be"),
        (dict(d=4, H=5, L=0), "L must be"),
        (dict(d=4, H=5, L=3, dirichlet_alpha=0.0), "dirichlet_alpha"),
        (dict(d=2, H=5, L=3, pi=[[0.5, 0.6], [0.5, 0.5]]), "row-stochastic"),
    ],
)
def test_task_rejects_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RandomParentMarkovTask(**kwargs)


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="n_heads"):
        TwoLayerRPEConfig(4, 5, 3, n_heads=0)
    with pytest.raises(ValueError, match="init_std"):
        TwoLayerRPEConfig(4, 5, 3, init_std=-1.0)


def test_experiment_rejects_unknown_scale():
    from iclr26.interpretability.causal_icl.experiment import run

    with pytest.raises(ValueError, match="scale must be one of"):
        run("big", 0)
