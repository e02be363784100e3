"""Tests of the speculative-decoding substrate (iclr26.models.speculative): exact greedy verification
against plain greedy decoding and transformers' assisted generation, speculative sampling's output
distribution, EAGLE-2 tree construction, accounting, and the EAGLE draft head's contracts."""
import math

import numpy as np
import pytest
import torch

from iclr26.models.speculative import (
    DraftHeadConfig,
    EagleDraftHead,
    EagleDrafter,
    LMDrafter,
    SpecStats,
    acceptance_profile,
    draft_chain,
    draft_tree,
    expected_speedup,
    expected_tokens_per_call,
    greedy_decode,
    markov_target,
    residual_distribution,
    speculative_generate,
    target_features,
    train_draft_head,
    verify_greedy,
    verify_sampling,
)

V = 16


@pytest.fixture(scope="module")
def trained():
    """A tiny target trained on an order-2 Markov language (far from uniform: its loss is checked),
    a smaller draft LM trained on the same text, and an EAGLE head trained on the target's features."""
    torch.set_num_threads(1)
    target, text = markov_target(0, n_tokens=V, concentration=0.2, steps=120, seq_len=32, hidden_size=32, lr=1e-2)
    assert target.train_loss < math.log(V) - 0.3
    small, _ = markov_target(1, n_tokens=V, concentration=0.2, steps=60, seq_len=32, hidden_size=16,
                             num_hidden_layers=1)
    data = text(128, 32, np.random.default_rng(5))
    feats = target_features(target, data)
    head = EagleDraftHead.from_target(target, num_attention_heads=2)
    train_draft_head(head, feats, data, 60, batch_size=16, seed=0)
    prompts = text(4, 10, np.random.default_rng(7))
    return target, small, head, prompts, text


def _hf_greedy(model, prompt, n, **kw):
    out = model.generate(prompt[None], do_sample=False, max_new_tokens=n, min_new_tokens=n, **kw)
    return out[0, len(prompt):].tolist()


CONFIGS = [dict(depth=1), dict(depth=3), dict(depth=4, topk=2, total_tokens=6), dict(depth=5, topk=4, total_tokens=16)]


@pytest.mark.parametrize("kw", CONFIGS)
def test_greedy_speculation_equals_plain_greedy_token_by_token(trained, kw):
    target, small, head, prompts, _ = trained
    for drafter in (EagleDrafter(head), LMDrafter(small)):
        for p in prompts:
            out, st = speculative_generate(target, drafter, p, 24, **kw)
            ref = greedy_decode(target, p, 24)
            assert out == ref
            assert out == _hf_greedy(target, p, 24)
            assert st.new_tokens == 24 and sum(a + 1 for a in st.accepted) >= 23
            assert all(0 <= a <= kw["depth"] for a in st.accepted)


def test_every_accepted_cycle_matches_greedy(trained):
    """Cycle by cycle: the tokens appended by each verification are the next greedy tokens."""
    target, _, head, prompts, _ = trained
    p = prompts[0]
    out, st = speculative_generate(target, EagleDrafter(head), p, 30, depth=4, topk=3, total_tokens=10)
    ref = greedy_decode(target, p, 30)
    pos = 1                                  # the prefill's token
    assert out[0] == ref[0]
    for a in st.accepted:
        seg = out[pos: pos + a + 1]
        assert seg == ref[pos: pos + len(seg)]
        pos += a + 1
    assert pos >= 30


def test_same_greedy_output_as_transformers_assisted_generation(trained):
    """transformers' assisted generation with the same draft LM and our chain decoding produce the
    same tokens (both the target's greedy output)."""
    target, small, _, prompts, _ = trained
    small.generation_config.num_assistant_tokens = 3
    small.generation_config.num_assistant_tokens_schedule = "constant"
    for p in prompts:
        hf = _hf_greedy(target, p, 20, assistant_model=small)
        ours, st = speculative_generate(target, LMDrafter(small), p, 20, depth=3)
        assert ours == hf == _hf_greedy(target, p, 20)
        assert st.tokens_per_target_forward >= 1.0


def test_perfect_and_adversarial_drafters(trained):
    target, _, _, prompts, _ = trained
    p = prompts[1]
    out, st = speculative_generate(target, LMDrafter(target), p, 21, depth=4)
    assert out == greedy_decode(target, p, 21)
    assert st.accepted == [4, 4, 4, 4]      # 1 (prefill) + 4 cycles * 5 tokens = 21
    assert st.mean_accepted_length == 5.0 and st.target_calls == 5
    assert st.tokens_per_target_forward == pytest.approx(21 / 5)
    assert st.acceptance_rate == 1.0

    class Wrong:
        """Proposes a token the target never picks greedily next."""
        needs_features = False

        def start(self, ids, feats):
            self.ids = ids

        def expand(self, paths, states):
            rows = torch.cat([self.ids[None].expand(paths.shape[0], -1), paths], 1)
            with torch.no_grad():
                lg = target(input_ids=rows).logits[:, -1]
            return torch.log_softmax(-lg, -1), None

    out, st = speculative_generate(target, Wrong(), p, 12, depth=3)
    assert out == greedy_decode(target, p, 12)
    assert st.accepted == [0] * 11 and st.mean_accepted_length == 1.0 and st.target_calls == 12


class TableDrafter:
    """Draft log-probs depend only on the last path token (or the root): a hand-checkable tree."""
    needs_features = False

    def __init__(self, table):
        self.table = torch.log(torch.tensor(table, dtype=torch.float32))
        self.calls = []

    def start(self, ids, feats):
        pass

    def expand(self, paths, states):
        self.calls.append(paths.clone())
        last = paths[:, -1] if paths.shape[1] else torch.full((paths.shape[0],), 3)
        return self.table[last], None


TABLE = [[0.1, 0.6, 0.3, 0.0], [0.5, 0.1, 0.4, 0.0], [0.2, 0.2, 0.6, 0.0], [0.7, 0.2, 0.1, 0.0]]


def test_eagle2_tree_expansion_and_rerank():
    d = TableDrafter(TABLE)
    tree = draft_tree(d, torch.tensor([3]), None, depth=3, topk=2, total_tokens=5)
    # layer 1: root -> 0 (.7), 1 (.2); layer 2: expand both: 0->1 (.42), 0->2 (.21), 1->0 (.1), 1->2 (.08)
    # top-2 of layer 2: [0,1] .42, [0,2] .21; layer 3: [0,1,0] .21, [0,1,2] .168, [0,2,2] .126, [0,2,0] .042
    assert [c.tolist() for c in d.calls] == [[[]], [[0], [1]], [[0, 1], [0, 2]]]
    assert tree.steps == 3
    kept = sorted((tuple(tree.path(i)), round(math.exp(s), 4)) for i, s in enumerate(tree.scores))
    assert kept == [((0,), 0.7), ((0, 1), 0.42), ((0, 1, 0), 0.21), ((0, 2), 0.21), ((1,), 0.2)]
    for i, par in enumerate(tree.parents):              # parents first, depths consistent
        assert par < i and tree.depths[i] == (1 if par < 0 else tree.depths[par] + 1)
    assert sorted(map(tuple, tree.paths())) == [(0, 1, 0), (0, 2), (1,)]


def test_tree_with_topk_one_is_the_greedy_chain():
    t1 = draft_tree(TableDrafter(TABLE), torch.tensor([3]), None, depth=4, topk=1, total_tokens=4)
    t2 = draft_chain(TableDrafter(TABLE), torch.tensor([3]), None, depth=4)
    assert t1.tokens == t2.tokens == [0, 1, 0, 1] and t1.parents == t2.parents == [-1, 0, 1, 2]
    np.testing.assert_allclose(t1.scores, t2.scores, rtol=1e-6)
    np.testing.assert_allclose(np.exp(t1.scores[-1]), 0.7 * 0.6 * 0.5 * 0.6, rtol=1e-5)


def test_total_tokens_cuts_the_tree_keeping_ancestors():
    tree = draft_tree(TableDrafter(TABLE), torch.tensor([3]), None, depth=3, topk=2, total_tokens=2)
    assert [tree.path(i) for i in range(len(tree))] == [[0], [0, 1]]


def test_verify_greedy_picks_longest_row():
    logits = torch.full((2, 4, 5), -1.0)
    for r, toks in enumerate([[1, 2, 4, 0], [1, 2, 3, 4]]):
        for j, t in enumerate(toks):
            logits[r, j, t] = 1.0
    paths = torch.tensor([[1, 2, 3], [1, 2, 3]])
    assert verify_greedy(logits, paths, [3, 3]) == (1, 3, [1, 2, 3, 4])
    assert verify_greedy(logits, paths, [3, 2]) == (0, 2, [1, 2, 4])   # row 1 is only 2 long
    assert verify_greedy(logits[:1], torch.tensor([[0, 2, 3]]), [3]) == (0, 0, [1])
    with pytest.raises(ValueError, match=r"\(R, m\+1, V\)"):
        verify_greedy(logits, paths[:, :2], [2, 2])


def test_residual_distribution_values():
    p = torch.tensor([0.5, 0.3, 0.2])
    q = torch.tensor([0.2, 0.5, 0.3])
    torch.testing.assert_close(residual_distribution(p, q), torch.tensor([1.0, 0.0, 0.0]))
    torch.testing.assert_close(residual_distribution(p, p), p)


def test_speculative_sampling_output_is_distributed_as_the_target():
    """Monte Carlo: the first and second output tokens of verify_sampling follow p_0 and p_1 when
    the first token is accepted (Leviathan et al. 2023, Theorem 3.5), for a draft q far from p."""
    g = torch.Generator().manual_seed(0)
    p = torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]])
    q = torch.tensor([[0.1, 0.1, 0.1, 0.7], [0.4, 0.3, 0.2, 0.1]])
    n = 20000
    first = torch.zeros(4)
    n_acc = []
    for _ in range(n):
        d0 = int(torch.multinomial(q[0], 1, generator=g))
        d1 = int(torch.multinomial(q[1], 1, generator=g))
        a, out = verify_sampling(p, q, [d0, d1], generator=g)
        first[out[0]] += 1
        n_acc.append(a)
        assert len(out) == a + 1
    torch.testing.assert_close(first / n, p[0], atol=0.012, rtol=0)
    # P(accept first) = sum_x min(p, q) = 0.1 + 0.1 + 0.1 + 0.05 = 0.35
    assert abs(np.mean(np.array(n_acc) >= 1) - 0.35) < 0.012
    a, out = verify_sampling(p, p[:2], [0, 1], generator=g)     # q == p: always accepted
    assert a == 2 and out[:2] == [0, 1]
    with pytest.raises(ValueError, match="m\\+1, V"):
        verify_sampling(p[:2], q, [0, 1])


def test_sampled_generation_runs_and_counts(trained):
    target, small, head, prompts, _ = trained
    g = torch.Generator().manual_seed(3)
    out, st = speculative_generate(target, EagleDrafter(head), prompts[0], 15, depth=3, do_sample=True, generator=g)
    assert len(out) == 15 and all(0 <= t < V + 3 for t in out)
    assert st.target_calls == 1 + st.cycles and st.draft_steps == 3 * st.cycles
    with pytest.raises(ValueError, match="chains only"):
        speculative_generate(target, EagleDrafter(head), prompts[0], 5, topk=2, do_sample=True)


def test_accounting_and_cost_model():
    st = SpecStats(accepted=[2, 0, 3], target_calls=4, draft_steps=9, new_tokens=9, drafted=9)
    assert st.mean_accepted_length == pytest.approx(1 + 5 / 3)
    assert st.tokens_per_target_forward == pytest.approx(9 / 4)
    assert st.acceptance_rate == pytest.approx(5 / 9)
    assert st.expected_speedup(0.1) == pytest.approx((8 / 3) / 1.3)
    assert expected_speedup(3.0, 4, 0.0) == 3.0
    assert expected_speedup(3.0, 4, 0.25) == pytest.approx(1.5)
    assert expected_tokens_per_call(0.5, 3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert expected_tokens_per_call(1.0, 4) == 5.0 and expected_tokens_per_call(0.0, 4) == 1.0
    m = st.merge(SpecStats(accepted=[1], target_calls=2, draft_steps=3, new_tokens=3, drafted=3))
    assert m.accepted == [2, 0, 3, 1] and m.target_calls == 6 and m.new_tokens == 12 and m.drafted == 12
    assert math.isnan(SpecStats().mean_accepted_length) and math.isnan(SpecStats().tokens_per_target_forward)
    with pytest.raises(ValueError, match="cost_ratio"):
        expected_speedup(2.0, 1, -1.0)
    with pytest.raises(ValueError, match="tokens_per_call"):
        expected_speedup(0.5, 1, 0.1)
    with pytest.raises(ValueError, match="alpha"):
        expected_tokens_per_call(1.5, 2)


def test_eagle_head_contracts(trained):
    target, _, head, prompts, text = trained
    sd = head.state_dict()
    assert not any("embed" in k or "lm_head" in k for k in sd)            # the target's weights are not owned
    clone = EagleDraftHead.from_target(target, num_attention_heads=2)
    clone.load_state_dict(sd)
    f = torch.randn(2, 7, head.config.hidden_size)
    t = torch.randint(0, V, (2, 7))
    torch.testing.assert_close(clone(f, t), head(f, t))
    # causal: changing the last position leaves earlier outputs unchanged
    f2, t2 = f.clone(), t.clone()
    f2[:, -1] += 1.0
    t2[:, -1] = (t2[:, -1] + 1) % V
    torch.testing.assert_close(head(f2, t2)[:, :-1], head(f, t)[:, :-1])
    assert not torch.allclose(head(f2, t2)[:, -1], head(f, t)[:, -1])
    h64 = EagleDraftHead.from_target(target, num_attention_heads=2).double()
    assert h64(f.double(), t).dtype == torch.float64
    with pytest.raises(ValueError, match="feature size"):
        head(torch.randn(1, 3, 5), torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="same B, T"):
        head(f, t[:, :3])
    with pytest.raises(ValueError, match="divisible"):
        DraftHeadConfig(hidden_size=30, num_attention_heads=4)


def test_trained_head_beats_untrained_head(trained):
    target, _, head, prompts, _ = trained
    fresh = EagleDraftHead.from_target(target, num_attention_heads=2)
    kw = dict(depth=4)
    good = acceptance_profile(target, EagleDrafter(head), prompts, 20, **kw)
    bad = acceptance_profile(target, EagleDrafter(fresh), prompts, 20, **kw)
    assert good.mean_accepted_length > bad.mean_accepted_length + 0.3
    assert len(good.per_prompt) == len(prompts)


def test_training_lowers_the_eagle_loss(trained):
    target, _, _, _, text = trained
    data = text(64, 24, np.random.default_rng(11))
    feats = target_features(target, data)
    head = EagleDraftHead.from_target(target, num_attention_heads=2)
    losses = train_draft_head(head, feats, data, 40, batch_size=8, seed=1)
    assert np.mean(losses[-5:]) < 0.8 * np.mean(losses[:5])
    head2 = EagleDraftHead.from_target(target, num_attention_heads=2)
    head2.load_state_dict(EagleDraftHead.from_target(target, num_attention_heads=2).state_dict())


def test_rejections(trained):
    target, _, head, prompts, _ = trained
    with pytest.raises(ValueError, match="max_new_tokens"):
        speculative_generate(target, EagleDrafter(head), prompts[0], 0)
    with pytest.raises(ValueError, match="depth"):
        speculative_generate(target, EagleDrafter(head), prompts[0], 5, depth=0)
    with pytest.raises(ValueError, match="temperature"):
        LMDrafter(target, temperature=0.0)
    with pytest.raises(ValueError, match="1-D sequence"):
        greedy_decode(target, torch.zeros(2, 3, dtype=torch.long), 3)
    with pytest.raises(ValueError, match="features"):
        EagleDrafter(head).start(prompts[0], None)


@pytest.mark.llm
def test_smollm2_exact_greedy_and_assisted_generation():
    """The bundled SmolLM2-135M as target: an EAGLE head (briefly trained on its own features) and
    SmolLM2 itself as drafter both reproduce plain greedy decoding; transformers' assisted
    generation agrees."""
    from iclr26.models import load

    torch.set_num_threads(1)
    model, tok = load("smollm2-135m")
    ids = torch.tensor(tok("The capital of France is", add_special_tokens=False)["input_ids"])
    ref = greedy_decode(model, ids, 12)
    assert ref == _hf_greedy(model, ids, 12)
    data = torch.cat([ids, torch.tensor(ref)])[None]
    head = EagleDraftHead.from_target(model, num_attention_heads=9, intermediate_size=512)
    train_draft_head(head, target_features(model, data), data, 5, batch_size=1)
    out, st = speculative_generate(model, EagleDrafter(head), ids, 12, depth=3, topk=2, total_tokens=4)
    assert out == ref
    out, st = speculative_generate(model, LMDrafter(model), ids, 12, depth=3)
    assert out == ref and st.accepted[0] == 3
    model.generation_config.num_assistant_tokens_schedule = "constant"
    assert _hf_greedy(model, ids, 12, assistant_model=model) == ref
