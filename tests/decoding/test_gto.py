"""Tests of GTO (arXiv:2509.22134): branch values, the draft-tree reward, group-standardised
advantages, the clipped surrogate (hand values), the draft path log-probability against the drafter
itself, reductions (GTO term vanishes when the draft equals its reference; omega scales it), the
integration with EAGLE training, exact tree decoding with a GTO-trained draft, and rejections."""
import copy
import math

import numpy as np
import pytest
import torch

from iclr26.decoding.gto import (
    GTOLoss, branch_values, clipped_surrogate, draft_tree_reward, finetune_draft, group_advantages, path_logprob,
    score_tree, tree_rewards,
)
from iclr26.models.speculative import (
    EagleDraftHead, EagleDrafter, LMDrafter, draft_chain, draft_tree, greedy_decode, markov_target,
    speculative_generate, target_features, train_draft_head,
)


def test_branch_values_hand():
    a = torch.tensor([[1.0, 1.0, 0.0, 1.0], [0.5, 0.5, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    v = branch_values(a, [4, 2, 3])
    torch.testing.assert_close(v, torch.tensor([2.0, 0.75, 3.0]))
    with pytest.raises(ValueError, match="one length per branch"):
        branch_values(a, [1, 2])


def test_draft_tree_reward_hand_and_limits():
    v = torch.tensor([1.0, 2.0])
    assert float(draft_tree_reward(v)) == pytest.approx(math.log(math.e + math.e ** 2))
    assert float(draft_tree_reward(v, eta=2.0)) == pytest.approx(math.log(math.e ** 2 + math.e ** 4) / 2)
    assert float(draft_tree_reward(v, eta=200.0)) == pytest.approx(2.0, abs=1e-3)      # -> max branch
    assert float(draft_tree_reward(torch.tensor([3.0]))) == pytest.approx(3.0)        # one branch: its value
    with pytest.raises(ValueError, match="eta must be > 0"):
        draft_tree_reward(v, eta=0.0)


def test_group_advantages_hand():
    r = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 5.0, 5.0, 5.0])
    a = group_advantages(r, 4)
    sd = math.sqrt(1.25)
    torch.testing.assert_close(a[:4], torch.tensor([-1.5, -0.5, 0.5, 1.5]) / (sd + 1e-6))
    torch.testing.assert_close(a[4:], torch.zeros(4))
    torch.testing.assert_close(group_advantages(torch.tensor([0.0, 2.0]), 2), torch.tensor([-1.0, 1.0]), atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="group_size must be an integer >= 2"):
        group_advantages(r, 1)
    with pytest.raises(ValueError, match="divisible by group_size=3"):
        group_advantages(r, 3)


def test_clipped_surrogate_hand():
    lr = torch.log(torch.tensor([1.5, 1.5, 0.5, 0.5]))
    A = torch.tensor([1.0, -1.0, 1.0, -1.0])
    # min(sA, clip(s)A): 1.2, -1.5, 0.5, -0.8 -> loss = -mean
    assert float(clipped_surrogate(lr, A, 0.2)) == pytest.approx(-(1.2 - 1.5 + 0.5 - 0.8) / 4)
    assert float(clipped_surrogate(lr[:1], A[:1], 0.6)) == pytest.approx(-1.5)
    with pytest.raises(ValueError, match=r"clip_eps must be in \(0, 1\)"):
        clipped_surrogate(lr, A, 1.5)


@pytest.fixture(scope="module")
def setup(trained_markov_target):
    torch.set_num_threads(1)
    target, text = trained_markov_target
    data = text(48, 24, np.random.default_rng(3))
    feats = target_features(target, data)
    torch.manual_seed(0)
    head = EagleDraftHead.from_target(target, num_attention_heads=2)
    train_draft_head(head, feats, data, 40, batch_size=8, seed=0)
    return target, text, data, feats, head


def test_path_logprob_matches_the_drafter(setup):
    target, _, data, feats, head = setup
    ids, f = data[0, :10], feats[0, :9]
    chain = draft_chain(EagleDrafter(head), ids, f, 3)
    lp = path_logprob(head, f, ids, chain.tokens)
    assert float(lp) == pytest.approx(chain.scores[-1], abs=1e-4)
    lp.backward()
    assert head.fc.weight.grad is not None and head.fc.weight.grad.abs().sum() > 0
    head.zero_grad()
    assert float(path_logprob(head, f, ids, [])) == 0.0


def test_reward_of_a_perfect_draft_and_of_a_tree(setup):
    target, _, data, feats, head = setup
    loss = GTOLoss(target, head, depth=3, topk=1, total_tokens=3)
    ids = data[1, :12]
    perfect = draft_tree(LMDrafter(target), ids, None, depth=3, topk=1, total_tokens=3)
    r, best = loss._score(ids, perfect)
    assert float(r) == pytest.approx(3.0) and best == perfect.tokens
    tree = draft_tree(EagleDrafter(head), ids, feats[1, :11], depth=3, topk=2, total_tokens=6)
    r, best = loss._score(ids, tree)
    ref = greedy_decode(target, ids, 3)
    lens = []
    for p in tree.paths():
        n = 0
        while n < len(p) and p[n] == ref[n]:
            n += 1
        lens.append(n)
    assert float(r) == pytest.approx(math.log(sum(math.exp(n) for n in lens)), rel=1e-5)
    assert len(best) == max(lens) and best == ref[: len(best)]
    soft = GTOLoss(target, head, depth=3, topk=2, total_tokens=6, temperature=1.0)
    r_soft, _ = soft._score(ids, tree)
    assert 0 < float(r_soft) < float(r) + 3


def test_gto_term_vanishes_at_the_reference_and_scales_with_omega(setup):
    target, _, data, feats, head = setup
    kw = dict(group_size=2, n_groups=2, depth=3, topk=2, total_tokens=5, min_prefix=6)
    same = GTOLoss(target, head, seed=1, **kw)(head, feats[:4], data[:4])
    assert float(same) == 0.0 and same.requires_grad
    other = copy.deepcopy(head)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.2 * torch.randn_like(p))
    l1 = GTOLoss(target, other, seed=1, omega=1.0, **kw)(head, feats[:4], data[:4])
    l2 = GTOLoss(target, other, seed=1, omega=2.5, **kw)(head, feats[:4], data[:4])
    assert float(l2) == pytest.approx(2.5 * float(l1), abs=1e-6)
    l1.backward()
    g = sum(float(p.grad.abs().sum()) for p in head.parameters() if p.grad is not None)
    head.zero_grad()
    loss = GTOLoss(target, other, seed=1, **kw)
    loss(head, feats[:4], data[:4])
    assert set(loss.last) == {"reward_gain", "accepted", "rewards", "prefix_lengths", "paths", "clipped"}
    assert g > 0 or float(l1) == 0.0


def test_gto_training_changes_the_draft_and_decoding_stays_exact(setup):
    target, text, data, feats, head = setup
    ref = copy.deepcopy(head).eval()
    a, b = copy.deepcopy(head), copy.deepcopy(head)
    kw = dict(group_size=2, n_groups=1, depth=3, topk=2, total_tokens=5, min_prefix=6)
    train_draft_head(a, feats, data, 4, batch_size=4, seed=5, extra_loss=GTOLoss(target, ref, seed=2, **kw))
    train_draft_head(b, feats, data, 4, batch_size=4, seed=5)
    diff = max(float((p - q).abs().max()) for p, q in zip(a.parameters(), b.parameters()))
    assert diff > 0
    prompt = text(1, 8, np.random.default_rng(9))[0]
    out, _ = speculative_generate(target, EagleDrafter(a), prompt, 14, depth=3, topk=2, total_tokens=5)
    assert out == greedy_decode(target, prompt, 14)


def test_rejections(setup):
    target, _, data, feats, head = setup
    with pytest.raises(ValueError, match="omega must be >= 0"):
        GTOLoss(target, head, omega=-1.0)
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        GTOLoss(target, head, temperature=-0.5)
    with pytest.raises(ValueError, match="group_size must be an integer >= 2"):
        GTOLoss(target, head, group_size=1)
    with pytest.raises(ValueError, match="eta must be > 0"):
        GTOLoss(target, head, eta=-1.0)
    with pytest.raises(ValueError, match="clip_eps"):
        GTOLoss(target, head, clip_eps=0.0)
    with pytest.raises(ValueError, match="too short for min_prefix=20 and group_size=8"):
        GTOLoss(target, head, min_prefix=20, group_size=8)(head, feats[:1], data[:1])


def test_soft_reward_of_a_chain_uses_target_probabilities(setup):
    """temperature 1: one branch, r = L = sum_j prod_{m<=j} P_target(x_m | ...), computed here
    token by token with independent target calls."""
    target, _, data, feats, head = setup
    ids = data[2, :10]
    chain = draft_tree(EagleDrafter(head), ids, feats[2, :9], depth=3, topk=1, total_tokens=3)
    soft = GTOLoss(target, head, depth=3, topk=1, total_tokens=3, temperature=1.0)
    r, _ = soft._score(ids, chain)
    seq, prod, total = ids.tolist(), 1.0, 0.0
    for x in chain.tokens:
        with torch.no_grad():
            p = torch.softmax(target(input_ids=torch.tensor([seq])).logits[0, -1].double(), -1)
        prod *= float(p[x])
        total += prod
        seq.append(x)
    assert float(r) == pytest.approx(total, rel=1e-4)
    hot = GTOLoss(target, head, depth=3, topk=1, total_tokens=3, temperature=0.5)
    assert float(hot._score(ids, chain)[0]) != pytest.approx(total, rel=1e-3)


def test_defaults_and_state(setup):
    """Defaults as documented (eta 1, G 4, clip 0.2, omega 1, T 0, EAGLE-2 tree depth 5 / top-4 / 16);
    the head's train/eval mode is restored; at most the batch's sequences form groups."""
    target, _, data, feats, head = setup
    d = GTOLoss(target, head)
    assert (d.group_size, d.n_groups, d.min_prefix, d.eta, d.clip_eps, d.omega, d.temperature) == (4, 2, 8, 1.0, 0.2, 1.0, 0.0)
    assert d.tree == dict(depth=5, topk=4, total_tokens=16)
    h = copy.deepcopy(head).train()
    other = copy.deepcopy(head)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.3 * torch.randn_like(p))
    loss = GTOLoss(target, other, group_size=2, n_groups=5, depth=2, topk=2, total_tokens=3, min_prefix=6, seed=3)
    loss(h, feats[:2], data[:2])
    assert h.training
    assert 0 <= loss.last["accepted"] <= 2
    h.eval()
    loss(h, feats[:1], data[:1])
    assert not h.training


def test_validation_edges_and_precision():
    lr = torch.log(torch.tensor([1.5, 0.5]))
    A = torch.tensor([1.0, -1.0])
    assert float(clipped_surrogate(lr, A)) == float(clipped_surrogate(lr, A, 0.2))      # default clip 0.2
    with pytest.raises(ValueError, match="clip_eps"):
        clipped_surrogate(lr, A, 1.0)
    assert float(clipped_surrogate(lr, A, 0.3)) != float(clipped_surrogate(lr, A, 0.2))
    with pytest.raises(ValueError, match="group_size must be an integer >= 2"):
        group_advantages(torch.zeros(4), 2.0)
    r = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    sd = math.sqrt(1.25)
    torch.testing.assert_close(group_advantages(r, 4), torch.tensor([-1.5, -0.5, 0.5, 1.5], dtype=torch.float64) / (sd + 1e-6),
                               rtol=1e-12, atol=0)


def test_loss_value_state_and_determinism(setup):
    """The prefixes are drawn with the loss's own seeded generator (the global torch seed does not
    matter); the value is deterministic."""
    target, _, data, feats, head = setup
    other = copy.deepcopy(head)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.3 * torch.randn_like(p))
    kw = dict(group_size=2, n_groups=2, depth=3, topk=2, total_tokens=5, min_prefix=4)
    fresh = GTOLoss(target, other, **kw)
    assert fresh.last == {} and fresh.g.initial_seed() == 0
    assert GTOLoss(target, other, omega=0.0, **kw).omega == 0.0
    assert GTOLoss(target, other, omega=0.5, **kw).omega == 0.5
    torch.manual_seed(0)
    l1 = GTOLoss(target, other, seed=7, **kw)
    v1 = l1(head, feats[:2], data[:2])
    torch.manual_seed(12345)
    l2 = GTOLoss(target, other, seed=7, **kw)
    v2 = l2(head, feats[:2], data[:2])
    assert l1.last == l2.last and isinstance(l1.last["reward_gain"], float)
    assert float(v1) == float(v2)
    assert l1.last["prefix_lengths"][1] == l1.last["prefix_lengths"][0] + 1      # adjacent prefixes
    # the shortest allowed sequences: min_prefix + group_size tokens
    short = GTOLoss(target, other, seed=1, **kw)
    short(head, feats[:1, :6], data[:1, :6])


def _perturbed(head, scale=0.3, seed=0):
    other = copy.deepcopy(head)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))
    return other.eval()


def test_loss_equals_an_independent_recomputation(setup):
    """The loss value against a recomputation from its parts: R = r(T_theta) - r(T_ref) per recorded
    prefix (the sign of the debiasing), A standardised per group in numpy, s = pi_theta(S) / pi_0(S)
    with pi_0 the frozen reference (not the detached current draft), the clipped surrogate in
    numpy. A sign flip of R, a ratio to the current draft, or a wrong clip changes the value."""
    target, _, data, feats, head = setup
    ref = _perturbed(head, 0.3, seed=4)
    kw = dict(group_size=2, n_groups=2, depth=3, topk=2, total_tokens=5, min_prefix=6)
    loss = GTOLoss(target, ref, seed=7, clip_eps=0.1, omega=1.0, **kw)
    value = float(loss(head, feats[:2], data[:2]))
    last = loss.last
    R, logr = [], []
    for i, t in enumerate(last["prefix_lengths"]):
        s = i // 2
        ids, f = data[s, :t], feats[s, : t - 1]
        r_cur, best = loss._score(ids, draft_tree(EagleDrafter(head), ids, f, 3, 2, 5))
        r_ref, _ = loss._score(ids, draft_tree(EagleDrafter(ref), ids, f, 3, 2, 5))
        assert best == last["paths"][i]
        R.append(float(r_cur) - float(r_ref))
        with torch.no_grad():
            logr.append(float(path_logprob(head, f, ids, best)) - float(path_logprob(ref, f, ids, best)) if best else 0.0)
    np.testing.assert_allclose(last["rewards"], R, atol=1e-6)
    R = np.array(R).reshape(-1, 2)
    A = ((R - R.mean(1, keepdims=True)) / (R.std(1, keepdims=True) + 1e-6)).reshape(-1)
    s = np.exp(np.array(logr))
    expect = -np.mean(np.minimum(s * A, np.clip(s, 0.9, 1.1) * A))
    assert value == pytest.approx(expect, abs=1e-5)
    assert abs(value) > 1e-4                      # the ratio to pi_0 is not 1: the value is not -mean(A) = 0
    assert last["clipped"] == pytest.approx(float(np.mean(np.abs(s - 1) > 0.1)))


def test_debiased_reward_is_positive_against_a_worse_reference(setup):
    """Against an untrained reference draft the trained draft's trees accept more: R = r(T) - r(T_ref) > 0
    on average (a sign flip of the debiasing makes it negative)."""
    target, _, data, feats, head = setup
    torch.manual_seed(123)
    untrained = EagleDraftHead.from_target(target, num_attention_heads=2).eval()
    loss = GTOLoss(target, untrained, group_size=2, n_groups=4, depth=3, topk=2, total_tokens=5, min_prefix=6, seed=2)
    loss(head, feats[:4], data[:4])
    assert loss.last["reward_gain"] > 0.3
    assert sum(r > 0 for r in loss.last["rewards"]) > len(loss.last["rewards"]) / 2


def test_gto_gradient_raises_the_probability_of_positive_advantage_paths(setup):
    """At s = 1 the surrogate's gradient w.r.t. log s is -A / n: a descent step raises log pi(S)
    where A > 0 and lowers it where A < 0."""
    a = torch.log(torch.tensor([1.0, 1.0]))
    for adv in (torch.tensor([1.0, -1.0]), torch.tensor([-1.0, 1.0])):
        lr = torch.zeros(2, requires_grad=True)
        clipped_surrogate(lr + a, adv, 0.2).backward()
        # d loss / d log s_i = -A_i / n at s = 1: descent raises log s where A > 0
        torch.testing.assert_close(lr.grad, -adv / 2)


def test_clip_binds_outside_the_trust_region():
    """Gradient of the surrogate w.r.t. log s: -A s / n inside the clip range; 0 where the clip binds
    (s > 1 + eps with A > 0, s < 1 - eps with A < 0); unclipped on the pessimistic side."""
    lr = torch.log(torch.tensor([1.5, 0.5, 1.1, 1.5, 0.5])).requires_grad_(True)
    A = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0])
    clipped_surrogate(lr, A, 0.2).backward()
    s = torch.exp(lr.detach())
    torch.testing.assert_close(lr.grad, torch.tensor([0.0, 0.0, -1.1 / 5, 1.5 / 5, -0.5 / 5]))
    assert s[2] * A[2] == pytest.approx(1.1)


def test_non_finite_input_is_rejected(setup):
    target, _, data, feats, head = setup
    nan = float("nan")
    with pytest.raises(ValueError, match="accept_probs must be finite"):
        branch_values(torch.tensor([[nan, 1.0]]), [2])
    with pytest.raises(ValueError, match=r"accept_probs must be probabilities in \[0, 1\]"):
        branch_values(torch.tensor([[1.5, 1.0]]), [2])
    with pytest.raises(ValueError, match="lengths must lie in"):
        branch_values(torch.tensor([[1.0, 1.0]]), [3])
    with pytest.raises(ValueError, match="values must be finite"):
        draft_tree_reward(torch.tensor([1.0, nan]))
    with pytest.raises(ValueError, match="rewards must be finite"):
        group_advantages(torch.tensor([1.0, nan]), 2)
    with pytest.raises(ValueError, match="log_ratio must be finite"):
        clipped_surrogate(torch.tensor([nan]), torch.tensor([1.0]))
    with pytest.raises(ValueError, match="advantages must be finite"):
        clipped_surrogate(torch.tensor([0.0]), torch.tensor([float("inf")]))
    with pytest.raises(ValueError, match="same shape"):
        clipped_surrogate(torch.zeros(2), torch.zeros(3))
    bad = feats[0, :9].clone()
    bad[3, 0] = nan
    with pytest.raises(ValueError, match="feats must be finite"):
        path_logprob(head, bad, data[0, :10], [1])
    with pytest.raises(ValueError, match=r"feats must be \(len\(ids\) - 1, d\)"):
        path_logprob(head, feats[0, :8], data[0, :10], [1])
    with pytest.raises(ValueError, match="n_groups must be an integer >= 1"):
        GTOLoss(target, head, n_groups=0)
    with pytest.raises(ValueError, match="min_prefix must be an integer >= 2"):
        GTOLoss(target, head, min_prefix=1)
    with pytest.raises(ValueError, match="feats must be finite"):
        finetune_draft(copy.deepcopy(head), torch.full_like(feats[:4], nan), data[:4], 1)
    with pytest.raises(ValueError, match="steps must be a positive integer"):
        finetune_draft(copy.deepcopy(head), feats[:4], data[:4], 0)
    with pytest.raises(ValueError, match="lr must be > 0"):
        finetune_draft(copy.deepcopy(head), feats[:4], data[:4], 1, lr=0.0)
    with pytest.raises(ValueError, match="prefix_lengths must be non-empty"):
        tree_rewards(target, head, feats[:2], data[:2], [1])


def test_finetune_matches_the_shared_loop_and_stops_on_non_finite(setup):
    """Without non-finite values finetune_draft is train_draft_head (same batches, optimiser, clip);
    it stops on a NaN loss and on a NaN gradient with a finite loss."""
    target, _, data, feats, head = setup
    a, b = copy.deepcopy(head), copy.deepcopy(head)
    la = finetune_draft(a, feats, data, 3, batch_size=4, lr=2e-3, seed=11)
    lb = train_draft_head(b, feats, data, 3, batch_size=4, lr=2e-3, seed=11)
    assert la == pytest.approx(lb, rel=1e-6)
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q)
    with pytest.raises(FloatingPointError, match="non-finite loss"):
        finetune_draft(copy.deepcopy(head), feats, data, 2, batch_size=4,
                       extra_loss=lambda h, f, t: h.fc.weight.sum() * float("nan"))
    with pytest.raises(FloatingPointError, match="non-finite gradient"):
        finetune_draft(copy.deepcopy(head), feats, data, 2, batch_size=4,
                       extra_loss=lambda h, f, t: torch.sqrt((h.fc.weight * 0).sum()))


def test_tree_rewards_match_score_tree(setup):
    target, _, data, feats, head = setup
    r = tree_rewards(target, head, feats[:2], data[:2], [6, 10], depth=3, topk=2, total_tokens=5)
    assert r.shape == (2, 2)
    for i in range(2):
        for j, t in enumerate([6, 10]):
            ids = data[i, :t]
            tree = draft_tree(EagleDrafter(head), ids, feats[i, : t - 1], 3, 2, 5)
            assert float(r[i, j]) == pytest.approx(float(score_tree(target, ids, tree)[0]), abs=1e-6)
    assert not head.training
