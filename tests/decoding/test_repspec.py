"""Tests of RepSpec's re-parameterised linear layers (merge equation, reduction, function-preserving
initialisation, contracts, rejections) and of a re-parameterised EAGLE draft head in exact
speculative decoding."""
import copy

import numpy as np
import pytest
import torch
from torch import nn

from iclr26.decoding.repspec import DEFAULT_TARGETS, RepLinear, merge_all, reparameterize
from iclr26.models.speculative import (
    EagleDraftHead, EagleDrafter, greedy_decode, markov_target, speculative_generate, target_features,
    train_draft_head,
)


def _randomise(rep: RepLinear, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in rep.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g))
    return rep


def _reference_merge(rep: RepLinear):
    """Independent reference: the affine map read off by probing with the basis vectors (float64)."""
    r = copy.deepcopy(rep).double()
    with torch.no_grad():
        b = r(torch.zeros(1, rep.in_features, dtype=torch.float64))[0]
        W = (r(torch.eye(rep.in_features, dtype=torch.float64)) - b).T
    return W, b


@pytest.mark.parametrize("n_pre,n_bypass,n_post,bias", [(1, 1, 0, True), (2, 3, 2, True), (0, 2, 1, False),
                                                         (1, 0, 0, True), (3, 1, 1, False)])
def test_merge_equals_the_affine_map_of_the_branches(n_pre, n_bypass, n_post, bias):
    torch.manual_seed(0)
    rep = _randomise(RepLinear(6, 5, n_pre=n_pre, n_bypass=n_bypass, n_post=n_post, bias=bias), seed=n_pre + n_post)
    W, b = rep.merged_parameters()
    W_ref, b_ref = _reference_merge(rep)
    torch.testing.assert_close(W, W_ref, rtol=1e-10, atol=1e-10)
    if bias:
        torch.testing.assert_close(b, b_ref, rtol=1e-10, atol=1e-10)
    merged = rep.merge()
    assert isinstance(merged, nn.Linear) and (merged.bias is not None) == bias
    x = torch.randn(4, 3, 6)
    torch.testing.assert_close(merged(x), rep(x), rtol=1e-5, atol=1e-5)


def test_merge_hand_example():
    """W' = P (W + B) Q, b' = P ((W + B) c + b + b_B) + p for one Pre, one Bypass, one Post."""
    rep = RepLinear(2, 2, n_pre=1, n_bypass=1, n_post=1)
    with torch.no_grad():
        rep.pre[0].weight.copy_(torch.tensor([[2.0, 0.0], [0.0, 1.0]])); rep.pre[0].bias.copy_(torch.tensor([1.0, 0.0]))
        rep.main.weight.copy_(torch.tensor([[1.0, 1.0], [0.0, 1.0]])); rep.main.bias.copy_(torch.tensor([0.0, 1.0]))
        rep.bypass[0].weight.copy_(torch.tensor([[0.0, 1.0], [1.0, 0.0]])); rep.bypass[0].bias.copy_(torch.tensor([1.0, 1.0]))
        rep.post[0].weight.copy_(torch.tensor([[1.0, 0.0], [1.0, 1.0]])); rep.post[0].bias.copy_(torch.tensor([0.0, -1.0]))
    W, b = rep.merged_parameters()
    # W + B = [[1,2],[1,1]]; (W+B) Q = [[2,2],[2,1]]; P . = [[2,2],[4,3]]
    # (W+B) c = [1,1]; + b + b_B = [2,3]; P . = [2,5]; + p = [2,4]
    torch.testing.assert_close(W, torch.tensor([[2.0, 2.0], [4.0, 3.0]], dtype=torch.float64))
    torch.testing.assert_close(b, torch.tensor([2.0, 4.0], dtype=torch.float64))
    assert W.dtype == torch.float64


def test_from_linear_is_function_preserving_and_reduces_to_the_layer():
    torch.manual_seed(1)
    lin = nn.Linear(7, 4)
    rep = RepLinear.from_linear(lin, n_pre=2, n_bypass=2, n_post=1)
    x = torch.randn(5, 7)
    torch.testing.assert_close(rep(x), lin(x))
    m = rep.merge()
    torch.testing.assert_close(m.weight, lin.weight)
    torch.testing.assert_close(m.bias, lin.bias)
    for p in rep.pre:
        torch.testing.assert_close(p.weight, torch.eye(7))
        assert torch.all(p.bias == 0)
    assert all(torch.all(b.weight == 0) and torch.all(b.bias == 0) for b in rep.bypass)
    # the default structure is the paper's best linear setting: one Pre, one Bypass, no Post
    d = RepLinear(3, 3)
    assert (len(d.pre), len(d.bypass), len(d.post)) == (1, 1, 0)
    assert "n_pre=1, n_bypass=1, n_post=0" in repr(d)
    # gradients reach every branch
    rep2 = RepLinear.from_linear(nn.Linear(3, 2, bias=False))
    rep2(torch.randn(4, 3)).pow(2).sum().backward()
    assert rep2.bypass[0].weight.grad is not None and rep2.bypass[0].weight.grad.abs().sum() > 0
    assert rep2.pre[0].weight.grad.abs().sum() > 0


def test_dtype_device_and_state_dict_round_trip():
    rep = _randomise(RepLinear(4, 3, n_post=1).double())
    assert rep.merge().weight.dtype == torch.float64
    clone = RepLinear(4, 3, n_post=1).double()
    clone.load_state_dict(rep.state_dict())
    x = torch.randn(2, 4, dtype=torch.float64)
    torch.testing.assert_close(clone(x), rep(x))
    r16 = RepLinear.from_linear(nn.Linear(4, 3).to(torch.bfloat16))
    assert r16.pre[0].weight.dtype == torch.bfloat16 and r16.merge().weight.dtype == torch.bfloat16


def test_rejections():
    with pytest.raises(ValueError, match="n_pre must be a non-negative integer"):
        RepLinear(3, 3, n_pre=-1)
    with pytest.raises(ValueError, match="n_bypass must be a non-negative integer"):
        RepLinear(3, 3, n_bypass=1.5)
    with pytest.raises(ValueError, match="n_post must be a non-negative integer"):
        RepLinear(3, 3, n_post=True)
    with pytest.raises(ValueError, match="in_features must be a positive integer"):
        RepLinear(0, 3)
    with pytest.raises(ValueError, match="out_features must be a positive integer"):
        RepLinear(3, -2)
    with pytest.raises(TypeError, match="needs an nn.Linear"):
        RepLinear.from_linear(nn.Conv1d(2, 2, 1))
    with pytest.raises(ValueError, match=r"no nn.Linear named one of \('nope',\)"):
        reparameterize(nn.Sequential(nn.Linear(2, 2)), targets="nope")


@pytest.fixture(scope="module")
def draft(trained_markov_target):
    torch.set_num_threads(1)
    target, text = trained_markov_target
    data = text(64, 24, np.random.default_rng(3))
    feats = target_features(target, data)
    torch.manual_seed(0)
    head = EagleDraftHead.from_target(target, num_attention_heads=2)
    plain = copy.deepcopy(head)
    names = reparameterize(head)
    return target, text, data, feats, head, plain, names


def test_reparameterize_targets_the_paper_layers_and_preserves_the_head(draft):
    target, _, data, feats, head, plain, names = draft
    assert sorted(n.rsplit(".", 1)[-1] for n in names) == sorted(DEFAULT_TARGETS)
    assert not isinstance(head.fc, RepLinear)                      # the input FC and embeddings untouched
    f, t = feats[:4, :-1], data[:4, 1:]
    torch.testing.assert_close(head(f, t), plain(f, t))
    n_plain = sum(p.numel() for p in plain.parameters())
    assert sum(p.numel() for p in head.parameters()) > n_plain


def test_trained_merged_head_reproduces_logits_and_decodes_exactly(draft):
    target, text, data, feats, head, plain, _ = draft
    rep = copy.deepcopy(head)
    train_draft_head(rep, feats, data, 30, batch_size=8, seed=0)
    f, t = feats[:6, :-1], data[:6, 1:]
    with torch.no_grad():
        before = rep.lm_head(rep(f, t))
    merged = copy.deepcopy(rep)
    names = merge_all(merged)
    assert len(names) == 7 and not any(isinstance(m, RepLinear) for m in merged.modules())
    assert sum(p.numel() for p in merged.parameters()) == sum(p.numel() for p in plain.parameters())
    with torch.no_grad():
        after = merged.lm_head(merged(f, t))
    assert float((before - after).abs().max()) < 1e-5
    assert not torch.allclose(after, plain.lm_head(plain(f, t)).detach())       # training changed it
    # the merged head loads into a plain head's structure
    fresh = copy.deepcopy(plain)
    fresh.load_state_dict(merged.state_dict())
    torch.testing.assert_close(fresh(f, t), merged(f, t))
    prompt = text(1, 8, np.random.default_rng(9))[0]
    out, st = speculative_generate(target, EagleDrafter(merged), prompt, 16, depth=3)
    assert out == greedy_decode(target, prompt, 16)
    assert merge_all(merged) == []


def test_reparameterized_training_differs_from_plain_training(draft):
    """Same data, steps and initial function: the optimisation path differs (else the method is a no-op)."""
    target, _, data, feats, head, plain, _ = draft
    a, b = copy.deepcopy(head), copy.deepcopy(plain)
    la = train_draft_head(a, feats, data, 5, batch_size=8, seed=2)
    lb = train_draft_head(b, feats, data, 5, batch_size=8, seed=2)
    assert la[0] == pytest.approx(lb[0], rel=1e-5)                    # same function at step 0
    assert abs(la[-1] - lb[-1]) > 1e-6


def test_reparameterize_structure_and_options():
    net = nn.ModuleDict({"q_proj": nn.Linear(4, 4), "down_proj": nn.Linear(4, 3, bias=False), "other": nn.Linear(4, 4)})
    names = reparameterize(net)
    assert names == ["q_proj", "down_proj"] and isinstance(net["other"], nn.Linear)
    for n in names:
        assert (len(net[n].pre), len(net[n].bypass), len(net[n].post)) == (1, 1, 0)
    assert net["down_proj"].pre[0].bias is None and net["down_proj"].bypass[0].bias is None
    net2 = nn.ModuleDict({"a": nn.Linear(4, 4), "b": nn.Linear(4, 2)})
    assert reparameterize(net2, targets=["b"], n_pre=2, n_bypass=0, n_post=3) == ["b"]
    assert (len(net2["b"].pre), len(net2["b"].bypass), len(net2["b"].post)) == (2, 0, 3)
    assert merge_all(net2) == ["b"] and type(net2["b"]) is nn.Linear and net2["b"].out_features == 2
    with pytest.raises(ValueError, match="in_features must be a positive integer"):
        RepLinear(True, 3)
    with pytest.raises(ValueError, match="out_features must be a positive integer"):
        RepLinear(3, 2.0)


def test_dtype_and_device_follow_the_layer():
    """Every branch is created with the layer's dtype and device (checked on the meta device, which
    allocates nothing, and in float64 without a later .double())."""
    rep = RepLinear(3, 2, n_pre=1, n_bypass=2, n_post=1, device="meta")
    assert {p.device.type for p in rep.parameters()} == {"meta"}
    assert rep.merge().weight.device.type == "meta"
    lin = nn.Linear(3, 2, device="meta")
    assert {p.device.type for p in RepLinear.from_linear(lin, n_post=1).parameters()} == {"meta"}
    r64 = RepLinear(3, 2, n_post=1, n_bypass=2, dtype=torch.float64)
    assert {p.dtype for p in r64.parameters()} == {torch.float64}
    assert r64(torch.randn(2, 3, dtype=torch.float64)).dtype == torch.float64
    one = RepLinear(1, 1)                                           # the smallest valid layer
    assert one(torch.ones(1, 1)).shape == (1, 1)
    with pytest.raises(TypeError, match="got Conv1d"):
        RepLinear.from_linear(nn.Conv1d(2, 2, 1))
    with pytest.raises(ValueError, match="in Sequential"):
        reparameterize(nn.Sequential(nn.Linear(2, 2)), targets=("nope",))
