"""Tests for Stochastic Soft Thinking (arXiv:2508.03440): equations, reductions, probe, rejections."""
import math

import pytest
import torch

from iclr26.models.testing import widen_
from iclr26.models import TinyLMConfig, build_tiny_lm
from iclr26.decoding.stochastic_soft_thinking import (gumbel_softmax_weights, js_divergence, replacement_probe,
                                                      soft_thinking_generate, soft_token_weights)


class Tok:
    """Minimal tokenizer over integer strings "3 4 5" (ids as words)."""

    pad_token_id = 0
    eos_token_id = 1

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [int(t) for t in text.split()]}

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(str(i) for i in ids)


def tiny_lm(seed=0, std=0.4):
    """A tiny Llama whose weight matrices are drawn at std 0.4 (20x the usual 0.02): peaked next-token
    distributions, so replacing a soft token by one support token or another clearly differs."""
    torch.manual_seed(seed)
    model = build_tiny_lm(TinyLMConfig(hidden_size=32, intermediate_size=64), 64, eos_token_id=1,
                          bos_token_id=2).eval()
    widen_(model, std, seed)
    return model


def test_truncation_top_k_top_p_renormalises():
    p = torch.tensor([[0.4, 0.3, 0.2, 0.1]])
    w, pt = soft_token_weights(p.log(), mode="vanilla", top_k=3, top_p=1.0)
    assert torch.allclose(pt, torch.tensor([[4 / 9, 3 / 9, 2 / 9, 0.0]]), atol=1e-6)
    w, pt = soft_token_weights(p.log(), mode="vanilla", top_k=4, top_p=0.6)  # 0.4 + 0.3 reaches 0.6
    assert torch.allclose(pt, torch.tensor([[4 / 7, 3 / 7, 0.0, 0.0]]), atol=1e-6)
    assert torch.equal(w, pt)


def test_gumbel_softmax_equation():
    # w = softmax((log p + g) / tau) with given noise
    p = torch.tensor([[0.5, 0.25, 0.25, 0.0]])
    g = torch.tensor([[0.1, -0.3, 0.7, 5.0]])
    w = gumbel_softmax_weights(p, 0.5, gumbel=g)
    logits = (torch.tensor([math.log(0.5), math.log(0.25), math.log(0.25)]) + g[0, :3]) / 0.5
    ref = torch.softmax(logits, -1)
    assert torch.allclose(w[0, :3], ref, atol=1e-6) and w[0, 3] == 0


def test_gumbel_tau_to_zero_is_argmax_and_gumbel_max_sampling():
    p = torch.tensor([[0.6, 0.3, 0.1]])
    g = torch.tensor([[0.0, 0.9, 0.2]])
    w = gumbel_softmax_weights(p, 1e-6, gumbel=g)
    assert torch.equal(w, torch.tensor([[0.0, 1.0, 0.0]]))  # argmax(log p + g) = token 1
    # the argmax of the noisy weights is distributed as p (Gumbel-max trick)
    gen = torch.Generator().manual_seed(0)
    draws = gumbel_softmax_weights(p.expand(20000, 3), 1e-6, generator=gen).argmax(-1)
    freq = torch.bincount(draws, minlength=3).float() / 20000
    assert torch.allclose(freq, p[0], atol=0.015)


def test_reduction_one_hot_soft_input_equals_discrete_greedy():
    """Soft tokens with a one-hot weight (top_k=1) reproduce greedy decoding token for token."""
    model, tok = tiny_lm(), Tok()
    prompts = ["3 4 5 6", "7 8 9"]
    out = soft_thinking_generate(model, tok, prompts, mode="vanilla", top_k=1, max_think_tokens=8,
                                 max_answer_tokens=0, batch_size=2)
    for p, think in zip(prompts, out.think_ids):
        ids = torch.tensor([tok(p)["input_ids"]])
        ref = model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0, eos_token_id=None)
        assert think == ref[0, ids.shape[1]:].tolist()
    disc = soft_thinking_generate(model, tok, prompts, mode="discrete", max_think_tokens=8, max_answer_tokens=0)
    assert disc.think_ids == out.think_ids


def test_switch_to_discrete_answer_and_gumbel_randomness():
    model, tok = tiny_lm(), Tok()
    prompts = ["3 4 5 6"] * 3
    v = soft_thinking_generate(model, tok, prompts, mode="vanilla", max_think_tokens=5, answer_prefix="9 9",
                               max_answer_tokens=3, batch_size=3)
    assert all(len(t) == 5 for t in v.think_ids)
    assert v.answers[0] == v.answers[1] == v.answers[2]  # vanilla soft thinking is deterministic
    assert all(len(a.split()) <= 3 for a in v.answers)
    g1 = soft_thinking_generate(model, tok, prompts, mode="gumbel", tau=0.5, seed=0, max_think_tokens=5,
                                max_answer_tokens=3, batch_size=3)
    g2 = soft_thinking_generate(model, tok, prompts, mode="gumbel", tau=0.5, seed=0, max_think_tokens=5,
                                max_answer_tokens=3, batch_size=3)
    assert g1.think_ids == g2.think_ids  # seeded
    weights = [w for row in g1.think_weights for _, w in row]
    assert all(abs(float(w.sum()) - 1) < 1e-4 for w in weights)


def test_think_end_token_stops_thinking():
    model, tok = tiny_lm(), Tok()
    greedy = soft_thinking_generate(model, tok, ["3 4 5"], mode="discrete", max_think_tokens=6, max_answer_tokens=0)
    first = greedy.think_ids[0][0]
    out = soft_thinking_generate(model, tok, ["3 4 5"], mode="discrete", max_think_tokens=6, think_end_ids=(first,),
                                 max_answer_tokens=0)
    assert out.think_ids[0] == []


def test_js_divergence_values():
    p = torch.tensor([1.0, 0.0])
    q = torch.tensor([0.0, 1.0])
    assert math.isclose(float(js_divergence(p, q)), math.log(2), rel_tol=1e-6)
    assert float(js_divergence(p, p)) == 0.0
    a, b = torch.tensor([0.5, 0.5]), torch.tensor([0.9, 0.1])
    m = (a + b) / 2
    ref = 0.5 * float((a * (a / m).log()).sum()) + 0.5 * float((b * (b / m).log()).sum())
    assert math.isclose(float(js_divergence(a, b)), ref, rel_tol=1e-5)


def test_probe_one_hot_dominant_token_gives_zero_js():
    """If the soft token is (numerically) its top-1 token, replacing it by that token changes nothing."""
    model, tok = tiny_lm(), Tok()
    out = soft_thinking_generate(model, tok, ["3 4 5"], mode="vanilla", top_k=2, temperature=1e-3,
                                 max_think_tokens=4, max_answer_tokens=0, probe_steps=(2, 3))
    tw = [(ids, w) for ids, w in out.think_weights[0]]
    # force two support tokens with a negligible second weight so the probe runs
    forced = [(torch.tensor([int(ids[0]), (int(ids[0]) + 1) % 64]), torch.tensor([1.0, 0.0])) for ids, _ in tw]
    rows = replacement_probe(model, tok, "3 4 5", forced, out.probe_logits[0])
    assert rows and all(r["js_top1"] < 1e-4 for r in rows)
    assert all(r["js_top2"] >= r["js_top1"] for r in rows)


def test_probe_replaces_by_the_two_highest_weight_tokens():
    """Top-1 / top-2 are the support tokens of largest and second-largest weight (support given
    unsorted); the divergences match an independent forward with the replaced embedding."""
    model, tok = tiny_lm(), Tok()
    E = model.get_input_embeddings().weight
    prompt = "3 4 5"
    tw = [(torch.tensor([7, 11]), torch.tensor([0.6, 0.4])),
          (torch.tensor([20, 30, 40, 50]), torch.tensor([0.3, 0.05, 0.45, 0.2]))]
    ctx = E[torch.tensor([3, 4, 5])]
    s1 = tw[0][1] @ E[tw[0][0]]
    s2 = tw[1][1] @ E[tw[1][0]]
    with torch.no_grad():
        soft = model(inputs_embeds=torch.cat([ctx, s1[None], s2[None]])[None]).logits[0, -1]
        rows = replacement_probe(model, tok, prompt, tw, {2: soft})
        assert len(rows) == 1 and rows[0]["step"] == 2
        assert rows[0]["w_top1"] == pytest.approx(0.45) and rows[0]["w_top2"] == pytest.approx(0.3)
        p_soft = torch.softmax(soft, -1)
        for key, t in (("1", 40), ("2", 20)):
            q = torch.softmax(model(inputs_embeds=torch.cat([ctx, s1[None], E[t][None]])[None]).logits[0, -1], -1)
            assert rows[0][f"js_top{key}"] == pytest.approx(float(js_divergence(p_soft, q)), abs=1e-5)
            assert rows[0][f"argmax_agree_top{key}"] == bool(p_soft.argmax() == q.argmax())
        # the alternatives (lowest-weight token 30, or the third 50) give different divergences
        for t in (30, 50):
            q = torch.softmax(model(inputs_embeds=torch.cat([ctx, s1[None], E[t][None]])[None]).logits[0, -1], -1)
            assert abs(rows[0]["js_top2"] - float(js_divergence(p_soft, q))) > 1e-3
        # a single-token support has no top-2 and is skipped
        assert replacement_probe(model, tok, prompt, [(torch.tensor([7]), torch.tensor([1.0]))], {1: soft}) == []


def test_probe_selection_by_top1_weight():
    """``probe_max_top1`` keeps the logits after exactly the soft steps whose largest weight is at
    most the threshold (and equal to the next-step logits of an independent forward);
    ``max_probes`` keeps the earliest of them; ``probe_steps`` adds fixed steps."""
    model, tok = tiny_lm(seed=1), Tok()
    kw = dict(mode="vanilla", top_k=4, top_p=1.0, max_think_tokens=8, max_answer_tokens=0, batch_size=2)
    prompts = ["3 4 5 6", "7 8 9"]
    base = soft_thinking_generate(model, tok, prompts, **kw)
    top1 = [[float(w.max()) for _, w in row] for row in base.think_weights]
    thr = sorted(x for row in top1 for x in row)[len(top1[0])]  # a threshold that splits the steps
    out = soft_thinking_generate(model, tok, prompts, probe_max_top1=thr, **kw)
    for r, row in enumerate(top1):
        want = [k + 1 for k, x in enumerate(row) if x <= thr]
        assert sorted(out.probe_logits[r]) == want
    assert 0 < sum(len(d) for d in out.probe_logits) < sum(len(row) for row in top1)
    assert out.think_ids == base.think_ids                      # probing does not change the thought
    # the kept logits are the next-token logits after the soft prefix
    E = model.get_input_embeddings().weight
    r = 0 if out.probe_logits[0] else 1
    k = min(out.probe_logits[r])
    ids = torch.tensor(tok(prompts[r])["input_ids"])
    soft = [w.to(E.dtype) @ E[i] for i, w in out.think_weights[r][:k]]
    with torch.no_grad():
        ref = model(inputs_embeds=torch.cat([E[ids], torch.stack(soft)])[None]).logits[0, -1]
    torch.testing.assert_close(out.probe_logits[r][k], ref, atol=1e-4, rtol=1e-4)
    capped = soft_thinking_generate(model, tok, prompts, probe_max_top1=thr, max_probes=1, **kw)
    for r in range(2):
        full = sorted(out.probe_logits[r])
        assert sorted(capped.probe_logits[r]) == full[:1]
    every = soft_thinking_generate(model, tok, prompts, probe_max_top1=1.0, max_probes=3, **kw)
    assert [sorted(d) for d in every.probe_logits] == [[1, 2, 3], [1, 2, 3]]
    fixed = soft_thinking_generate(model, tok, prompts, probe_steps=(2,), probe_max_top1=1e-9, **kw)
    assert [sorted(d) for d in fixed.probe_logits] == [[2], [2]]
    none = soft_thinking_generate(model, tok, prompts, **kw)
    assert none.probe_logits == [{}, {}]
    # answer-phase steps are never probed
    ans = soft_thinking_generate(model, tok, prompts, probe_max_top1=1.0, **dict(kw, max_think_tokens=2,
                                                                                   max_answer_tokens=3))
    assert [sorted(d) for d in ans.probe_logits] == [[1, 2], [1, 2]]


def test_fixture_is_far_from_uniform():
    model = tiny_lm()
    with torch.no_grad():
        p = torch.softmax(model(torch.tensor([[3, 4, 5, 6, 7]])).logits[0], -1)
    h = -(p * p.log()).sum(-1)
    assert float(h.mean()) < 0.8 * math.log(64)


@pytest.mark.parametrize("kwargs, match", [
    (dict(mode="beam"), "mode"),
    (dict(top_k=0), "top_k"),
    (dict(top_p=0.0), "top_p"),
    (dict(temperature=0.0), "temperature"),
    (dict(temperature=float("nan")), r"temperature must be > 0, got nan"),
    (dict(temperature=-1.0), "temperature must be > 0"),
    (dict(top_p=1.5), r"top_p must be in \(0, 1\]"),
    (dict(top_p=float("nan")), r"top_p must be in \(0, 1\]"),
    (dict(mode="gumbel", tau=float("nan")), "tau must be a finite number > 0"),
])
def test_rejects_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        soft_token_weights(torch.randn(1, 5), **kwargs)


@pytest.mark.parametrize("p", [[[float("nan"), 0.5, 0.5]], [[-0.1, 0.6, 0.5]], [[float("inf"), 0.0, 0.0]],
                               [[0.0, 0.0, 0.0]]])
def test_gumbel_weights_reject_non_probabilities(p):
    with pytest.raises(ValueError, match="p_tilde"):
        gumbel_softmax_weights(torch.tensor(p), 0.5)


def test_gumbel_weights_reject_bad_tau_and_noise():
    p = torch.tensor([[0.2, 0.8]])
    with pytest.raises(ValueError, match="tau"):
        gumbel_softmax_weights(p, float("inf"))
    with pytest.raises(ValueError, match="tau"):
        gumbel_softmax_weights(p, float("nan"))
    with pytest.raises(ValueError, match="gumbel"):
        gumbel_softmax_weights(p, 0.5, gumbel=torch.zeros(1, 3))
    with pytest.raises(ValueError, match="gumbel"):
        gumbel_softmax_weights(p, 0.5, gumbel=torch.tensor([[float("nan"), 0.0]]))


def test_rejects_bad_generate_arguments():
    model, tok = tiny_lm(), Tok()
    with pytest.raises(ValueError, match="mode"):
        soft_thinking_generate(model, tok, ["3"], mode="nope")
    with pytest.raises(ValueError, match="max_think_tokens"):
        soft_thinking_generate(model, tok, ["3"], max_think_tokens=-1)
    with pytest.raises(ValueError, match="tau"):
        gumbel_softmax_weights(torch.ones(1, 3) / 3, 0.0)
    with pytest.raises(ValueError, match="max_answer_tokens"):
        soft_thinking_generate(model, tok, ["3"], max_answer_tokens=-1)
    with pytest.raises(ValueError, match=r"prompt 1 is empty \(.*has no tokens\)"):
        soft_thinking_generate(model, tok, ["3 4", ""])
    with pytest.raises(ValueError, match="prompts is empty"):
        soft_thinking_generate(model, tok, [])
    with pytest.raises(TypeError, match="prompt 0 must be a string"):
        soft_thinking_generate(model, tok, [3])
    for t in (0.0, float("nan")):
        with pytest.raises(ValueError, match="temperature must be > 0"):
            soft_thinking_generate(model, tok, ["3"], temperature=t)
    for p in (0.0, 1.01, float("nan")):
        with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\]"):
            soft_thinking_generate(model, tok, ["3"], top_p=p)
    with pytest.raises(ValueError, match="tau must be a finite number > 0"):
        soft_thinking_generate(model, tok, ["3"], mode="gumbel", tau=-1.0)
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        soft_thinking_generate(model, tok, ["3"], batch_size=0)
    for v in (0.0, 1.5, float("nan")):
        with pytest.raises(ValueError, match=r"probe_max_top1 must be None or in \(0, 1\]"):
            soft_thinking_generate(model, tok, ["3"], probe_max_top1=v)
    for v in (0, -1, 1.5):
        with pytest.raises(ValueError, match="max_probes must be None or a positive integer"):
            soft_thinking_generate(model, tok, ["3"], max_probes=v)
    with pytest.raises(ValueError, match="has no tokens: the probe needs the prompt"):
        replacement_probe(model, tok, "", [(torch.tensor([1, 2]), torch.tensor([0.5, 0.5]))], {1: torch.zeros(64)})
    with pytest.raises(ValueError, match=r"probe steps \[2\] are outside 1..1"):
        replacement_probe(model, tok, "3", [(torch.tensor([1, 2]), torch.tensor([0.5, 0.5]))], {2: torch.zeros(64)})


@pytest.mark.slow
@pytest.mark.llm
def test_quick_experiment_runs():
    from iclr26.decoding.stochastic_soft_thinking.experiment import run

    out = run("quick", 0)
    m = out["metrics"]
    assert len(m["pass1"]["gumbel"]) == len(m["pass1"]["vanilla"]) == len(m["passk"]["sampling"])
    assert len(m["js"]["top1"]) == len(m["js"]["top2"])


def test_batched_3d_inputs_match_row_by_row():
    """Every reduction runs along the vocabulary axis: 3-D inputs give the row-wise results."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 9, generator=g) * 2
    for kw in (dict(top_k=4, top_p=0.8), dict(top_k=9, top_p=1.0), dict(top_k=2, top_p=0.3)):
        w3, p3 = soft_token_weights(logits, mode="vanilla", temperature=0.7, **kw)
        d3, _ = soft_token_weights(logits, mode="discrete", temperature=0.7, **kw)
        for i in range(2):
            w2, p2 = soft_token_weights(logits[i], mode="vanilla", temperature=0.7, **kw)
            d2, _ = soft_token_weights(logits[i], mode="discrete", temperature=0.7, **kw)
            torch.testing.assert_close(p3[i], p2)
            torch.testing.assert_close(w3[i], w2)
            assert torch.equal(d3[i], d2)
            for j in range(3):
                w1, _ = soft_token_weights(logits[i, j], mode="vanilla", temperature=0.7, **kw)
                torch.testing.assert_close(w3[i, j], w1)
    noise = torch.randn(2, 3, 9, generator=g)
    pt = soft_token_weights(logits, top_k=5, top_p=0.9)[1]
    gw = gumbel_softmax_weights(pt, 0.5, gumbel=noise)
    for i in range(2):
        torch.testing.assert_close(gw[i], gumbel_softmax_weights(pt[i], 0.5, gumbel=noise[i]))
    a = torch.softmax(torch.randn(2, 3, 9, generator=g), -1)
    b = torch.softmax(torch.randn(2, 3, 9, generator=g), -1)
    js = js_divergence(a, b)
    assert js.shape == (2, 3)
    assert float(js[1, 2]) == pytest.approx(float(js_divergence(a[1, 2], b[1, 2])))


def test_gumbel_support_and_default_tau():
    p = torch.tensor([[0.5, 0.25, 0.25, 0.0]])
    w = gumbel_softmax_weights(p, 10.0, gumbel=torch.tensor([[0.1, -0.3, 0.7, 5.0]]))
    assert w[0, 3] == 0.0                                 # outside the support even at a high tau
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0]])
    w_default, pt = soft_token_weights(logits, mode="gumbel", generator=torch.Generator().manual_seed(5))
    ref = gumbel_softmax_weights(pt, 0.5, generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(w_default, ref)            # the paper's tau = 0.5 is the default


def test_nucleus_boundary_and_default_top_k():
    """Top-p keeps tokens while the mass before them is below top_p: with p = (0.5, 0.25, 0.25) and
    top_p = 0.75 the third token (mass before it exactly 0.75) is cut. The default top-k is 15
    (Soft Thinking's setting)."""
    _, pt = soft_token_weights(torch.tensor([0.5, 0.25, 0.25]).log(), top_k=3, top_p=0.75)
    torch.testing.assert_close(pt, torch.tensor([2 / 3, 1 / 3, 0.0]))
    logits = -0.01 * torch.arange(40, dtype=torch.float32)  # nearly flat: top-p 1.0 keeps all of top-k
    _, pt = soft_token_weights(logits, top_p=1.0)
    assert int((pt > 0).sum()) == 15
