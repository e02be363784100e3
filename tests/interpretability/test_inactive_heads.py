"""Tests of the inactive-heads scores (arXiv:2504.03889): the 12 score functions against a reference
built from the attention computed by hand (projections, rotary embedding, causal softmax), the LN
reduction, thresholds as quantiles of the calibration distribution, per-input head zeroing against
the attention output recomputed without the head, padding, other layouts, and rejections."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from iclr26.interpretability.inactive_heads import (BASE_SCORES, RULES, SCORES, head_scores, inactive_mask,
                                                    layer_normalize, random_mask, threshold,
                                                    zero_heads_per_input)
from iclr26.models.testing import wide_llama
from iclr26.models import hooks


def _tiny(seed=0, layers=3):
    def heads_differ(i, layer):
        # head-dependent value scales so heads differ clearly in output norm
        vp = layer.self_attn.v_proj.weight
        vp.mul_(torch.tensor([0.1, 1.0, 0.4, 2.0])[i % 4])
        vp[:6].mul_(0.2 + 0.5 * i)

    return wide_llama(num_layers=layers, seed=seed, post_layer=heads_differ,
                      scale=lambda i, part: {"q_proj": 1.2, "k_proj": 1.2, "v_proj": 0.5}.get(part, 0.35))


@pytest.fixture(scope="module")
def tiny():
    return _tiny()


@pytest.fixture(scope="module")
def ids():
    g = torch.Generator().manual_seed(3)
    return torch.randint(0, 40, (3, 12), generator=g)


def _manual_attention(model, ids):
    """Per layer: attention weights [B, H, S, S], values [B, H, S, d] (repeated over the group) and
    head outputs [B, H, S, d], recomputed from the block inputs with the module's weights."""
    layers = model.model.layers
    with hooks.record_activations(model, {str(i): l.self_attn for i, l in enumerate(layers)}, which="input") as xs:
        model(ids)
    B, S = ids.shape
    pos = torch.arange(S)[None].expand(B, S)
    out = []
    for i, layer in enumerate(layers):
        a = layer.self_attn
        x = xs[str(i)][0]
        H, KV, d = 4, 2, a.head_dim
        q = a.q_proj(x).view(B, S, H, d).transpose(1, 2)
        k = a.k_proj(x).view(B, S, KV, d).transpose(1, 2)
        v = a.v_proj(x).view(B, S, KV, d).transpose(1, 2)
        cos, sin = model.model.rotary_emb(x, pos)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        k, v = k.repeat_interleave(H // KV, 1), v.repeat_interleave(H // KV, 1)
        logits = q @ k.transpose(-1, -2) / np.sqrt(d)
        logits = logits.masked_fill(~torch.tril(torch.ones(S, S, dtype=torch.bool)), float("-inf"))
        A = logits.softmax(-1)
        out.append((A.detach().double().numpy(), v.detach().double().numpy(), (A @ v).detach().double().numpy()))
    return out


def _reference(model, ids):
    """Every score by explicit loops over inputs, layers, heads and tokens (Sec. 3 definitions)."""
    att = _manual_attention(model, ids)
    B, S = ids.shape
    L, H = len(att), 4
    raw = {b: np.zeros((B, L, H)) for b in BASE_SCORES}
    for n in range(B):
        for li, (A, v, o) in enumerate(att):
            for h in range(H):
                raw["awft"][n, li, h] = np.mean([A[n, h, i, 0] for i in range(S)])
                ent = []
                for i in range(S):
                    row = A[n, h, i, :i + 1]
                    ent.append(-sum(p * np.log(p) for p in row if p > 0))
                raw["aeqd"][n, li, h] = np.mean(ent)
                raw["ftvvn"][n, li, h] = np.linalg.norm(v[n, h, 0])
                raw["avvn"][n, li, h] = np.mean([np.linalg.norm(v[n, h, j]) for j in range(S)])
                raw["lthon"][n, li, h] = np.linalg.norm(o[n, h, S - 1])
                raw["ahon"][n, li, h] = np.mean([np.linalg.norm(o[n, h, i]) for i in range(S)])
    ref = {}
    for b, val in raw.items():
        ref[b] = val
        ref[b + "_ln"] = val / val.mean(axis=2, keepdims=True)
    return ref


# ---------------------------------------------------------------- scores

def test_twelve_scores_and_rules():
    assert len(SCORES) == 12 and len(set(SCORES)) == 12
    assert {s for s in SCORES if RULES[s] == "greater"} == {"awft", "awft_ln"}
    assert all(RULES[s] == "less" for s in SCORES if not s.startswith("awft"))


def test_scores_match_hand_computed_attention(tiny, ids):
    got = head_scores(tiny, ids)
    ref = _reference(tiny, ids)
    assert set(got) == set(SCORES)
    for s in SCORES:
        assert got[s].shape == (3, 3, 4) and got[s].dtype == torch.float32
        np.testing.assert_allclose(got[s].numpy(), ref[s], rtol=2e-4, atol=1e-6, err_msg=s)
    # the fixture is not degenerate: heads differ in every score
    for s in SCORES:
        assert float(got[s].std()) > 1e-3, s


def test_subset_and_single_score(tiny, ids):
    full = head_scores(tiny, ids)
    one = head_scores(tiny, ids, scores="ahon_ln")
    assert list(one) == ["ahon_ln"]
    torch.testing.assert_close(one["ahon_ln"], full["ahon_ln"])
    two = head_scores(tiny, ids, scores=["ftvvn", "aeqd_ln"])
    assert list(two) == ["ftvvn", "aeqd_ln"]
    torch.testing.assert_close(two["ftvvn"], full["ftvvn"])
    torch.testing.assert_close(two["aeqd_ln"], full["aeqd_ln"])


def test_return_logits_are_the_models(tiny, ids):
    sc, logits = head_scores(tiny, ids, scores="awft", return_logits=True)
    with torch.no_grad():
        ref = tiny(ids).logits
    torch.testing.assert_close(logits, ref, rtol=1e-4, atol=1e-5)
    assert tiny.config._attn_implementation != "eager"    # restored after the eager pass


def test_padding_excluded(tiny, ids):
    short = ids[:1, :7]
    padded = torch.cat([short, torch.zeros(1, 5, dtype=torch.long)], 1)
    mask = torch.tensor([[1] * 7 + [0] * 5])
    a = head_scores(tiny, short)
    b = head_scores(tiny, padded, attention_mask=mask)
    for s in SCORES:
        torch.testing.assert_close(a[s], b[s], rtol=1e-4, atol=1e-5, msg=s)
    # a batch mixing lengths gives each row its own scores
    batch = torch.cat([padded, ids[1:2]], 0)
    bm = torch.cat([mask, torch.ones(1, 12, dtype=torch.long)], 0)
    c = head_scores(tiny, batch, attention_mask=bm)
    d = head_scores(tiny, ids[1:2])
    for s in SCORES:
        torch.testing.assert_close(c[s][0:1], a[s], rtol=1e-4, atol=1e-5, msg=s)
        torch.testing.assert_close(c[s][1:2], d[s], rtol=1e-4, atol=1e-5, msg=s)


def test_single_token_input(tiny, ids):
    """A one-token input (alone or right-padded in a batch): the first token takes all the weight,
    the entropy is 0, and the output of each head is its first value vector."""
    x = ids[:1, :1]
    a = head_scores(tiny, x)
    torch.testing.assert_close(a["awft"], torch.ones(1, 3, 4))
    torch.testing.assert_close(a["aeqd"], torch.zeros(1, 3, 4))
    torch.testing.assert_close(a["ahon"], a["ftvvn"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(a["avvn"], a["ftvvn"])
    torch.testing.assert_close(a["lthon"], a["ahon"])
    padded = torch.cat([ids[:1, :1], torch.zeros(1, 6, dtype=torch.long)], 1)
    b = head_scores(tiny, padded, attention_mask=torch.tensor([[1, 0, 0, 0, 0, 0, 0]]))
    assert torch.isnan(a["aeqd_ln"]).all()       # 0 / 0: the LN entropy is undefined on one token
    for s in SCORES:
        torch.testing.assert_close(b[s], a[s], rtol=1e-4, atol=1e-5, equal_nan=True, msg=s)


def test_layer_normalize_reduction():
    x = torch.tensor([[[1.0, 2.0, 3.0, 6.0], [2.0, 2.0, 2.0, 2.0]]])
    y = layer_normalize(x)
    torch.testing.assert_close(y, torch.tensor([[[1 / 3, 2 / 3, 1.0, 2.0], [1.0, 1.0, 1.0, 1.0]]]))
    torch.testing.assert_close(y.mean(-1), torch.ones(1, 2))
    torch.testing.assert_close(layer_normalize(torch.tensor([1.0, 3.0])), torch.tensor([0.5, 1.5]))  # one layer
    with pytest.raises(ValueError, match=r"^score must have a heads axis \(last dimension\)$"):
        layer_normalize(torch.tensor(1.0))


def test_bfloat16_model_gives_float32_scores(ids):
    m = _tiny(seed=2).to(torch.bfloat16)
    got = head_scores(m, ids, scores=("ahon", "awft", "avvn"))
    ref = head_scores(_tiny(seed=2), ids, scores=("ahon", "awft", "avvn"))
    for s in got:
        assert got[s].dtype == torch.float32
        np.testing.assert_allclose(got[s].numpy(), ref[s].numpy(), rtol=0.1, atol=0.05)


def test_gemma3_layout_runs():
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(1)
    cfg = Gemma3TextConfig(vocab_size=40, hidden_size=24, intermediate_size=48, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=1, head_dim=8, max_position_embeddings=64,
                           sliding_window=4)
    model = Gemma3ForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    x = torch.randint(0, 40, (2, 10))
    sc = head_scores(model, x)
    assert all(v.shape == (2, 2, 4) and torch.isfinite(v).all() for v in sc.values())
    # one value head shared by 4 query heads: the value scores agree across the group
    torch.testing.assert_close(sc["avvn"], sc["avvn"][..., :1].expand(-1, -1, 4))
    torch.testing.assert_close(sc["awft"] <= 1.0, torch.ones_like(sc["awft"], dtype=torch.bool))


def test_gpt2_layout_output_scores_and_value_rejection():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=40, n_embd=24, n_layer=2, n_head=4, n_positions=32)).eval()
    x = torch.randint(0, 40, (2, 9))
    sc = head_scores(model, x, scores=("ahon", "lthon_ln", "awft", "aeqd"))
    assert all(v.shape == (2, 2, 4) for v in sc.values())
    with pytest.raises(ValueError, match=r"has no v_proj: value-vector scores need separate q/k/v projections"):
        head_scores(model, x, scores="avvn")


# ---------------------------------------------------------------- thresholds and masks

def test_threshold_is_the_quantile_of_the_calibration_scores():
    g = torch.Generator().manual_seed(0)
    vals = torch.rand(50, 3, 4, generator=g) * 2
    for p in (0.0, 0.05, 0.1, 0.3, 1.0):
        t = threshold(vals, p, "ahon_ln")
        assert t == pytest.approx(float(np.quantile(vals.numpy().astype(np.float64), p)), rel=1e-9)
        ta = threshold(vals, p, "awft")
        assert ta == pytest.approx(float(np.quantile(vals.numpy().astype(np.float64), 1 - p)), rel=1e-9)
    # the flagged share on the calibration values is about p, on either side
    for p in (0.05, 0.2):
        assert float(inactive_mask(vals, threshold(vals, p, "avvn"), "avvn").float().mean()) == pytest.approx(p, abs=0.01)
        assert float(inactive_mask(vals, threshold(vals, p, "awft_ln"), "awft_ln").float().mean()) == pytest.approx(p, abs=0.01)
    assert not inactive_mask(vals, threshold(vals, 0.0, "ahon"), "ahon").any()
    assert not inactive_mask(vals, threshold(vals, 0.0, "awft"), "awft").any()


def test_inactive_mask_direction():
    x = torch.tensor([0.1, 0.5, 0.9])
    assert inactive_mask(x, 0.5, "ahon").tolist() == [True, False, False]
    assert inactive_mask(x, 0.5, "awft").tolist() == [False, False, True]
    assert inactive_mask(x, 0.5, "awft_ln").tolist() == [False, False, True]
    assert inactive_mask(x, 0.5, "aeqd_ln").tolist() == [True, False, False]


def test_random_mask_rate_and_nesting():
    m = random_mask((400, 5, 6), 0.2, generator=torch.Generator().manual_seed(1))
    assert m.dtype == torch.bool and m.shape == (400, 5, 6)
    assert float(m.float().mean()) == pytest.approx(0.2, abs=0.01)
    m2 = random_mask((400, 5, 6), 0.3, generator=torch.Generator().manual_seed(1))
    assert bool((m2 | ~m).all())       # same draw: the 0.2 set lies inside the 0.3 set
    assert not random_mask((10, 2, 2), 0.0).any() and random_mask((10, 2, 2), 1.0).all()


# ---------------------------------------------------------------- zeroing

def test_zeroing_a_head_removes_exactly_its_output(tiny, ids):
    x = ids[:1]
    att = _manual_attention(tiny, x)
    layer = 1
    mask = torch.zeros(3, 4, dtype=torch.bool)
    mask[layer, 2] = True
    captured = {}
    with zero_heads_per_input(tiny, mask):
        with hooks.record_activations(tiny, {"a": tiny.model.layers[layer].self_attn}) as got:
            tiny(x)
    o = torch.as_tensor(att[layer][2])[0].float()                  # [H, S, d]
    o[2] = 0.0
    ref = tiny.model.layers[layer].self_attn.o_proj(o.transpose(0, 1).reshape(1, x.shape[1], -1))
    torch.testing.assert_close(got["a"][0], ref, rtol=1e-4, atol=1e-5)
    # the hook is gone afterwards and an all-False mask changes nothing
    with torch.no_grad():
        plain = tiny(x).logits
        with zero_heads_per_input(tiny, torch.zeros(1, 3, 4, dtype=torch.bool)):
            same = tiny(x).logits
        with zero_heads_per_input(tiny, mask):
            changed = tiny(x).logits
        after = tiny(x).logits
    torch.testing.assert_close(same, plain)
    torch.testing.assert_close(after, plain)
    assert float((changed - plain).abs().max()) > 1e-3


# ---------------------------------------------------------------- rejections

def test_rejections(tiny, ids):
    with pytest.raises(ValueError, match=r"unknown score\(s\) \['foo'\]; allowed: awft, awft_ln, aeqd"):
        head_scores(tiny, ids, scores=["ahon", "foo"])
    with pytest.raises(ValueError, match=r"unknown score\(s\) \(\); allowed"):
        head_scores(tiny, ids, scores=[])
    with pytest.raises(ValueError, match=r"input_ids must be a \[batch, seq_len\] tensor"):
        head_scores(tiny, ids[0])
    with pytest.raises(ValueError, match=r"input_ids must be a \[batch, seq_len\] tensor"):
        head_scores(tiny, ids[:, :0])
    with pytest.raises(ValueError, match=r"attention_mask must have the shape of input_ids \(3, 12\), got \(3, 11\)"):
        head_scores(tiny, ids, attention_mask=torch.ones(3, 11, dtype=torch.long))
    left = torch.ones(3, 12, dtype=torch.long)
    left[0, 0] = 0
    with pytest.raises(ValueError, match=r"right-padded: attention_mask\[:, 0\] must be 1"):
        head_scores(tiny, ids, attention_mask=left)
    holey = torch.ones(3, 12, dtype=torch.long)
    holey[1, 5] = 0
    with pytest.raises(ValueError, match=r"right-padded: attention_mask must be 1\.\.\.1 0\.\.\.0"):
        head_scores(tiny, ids, attention_mask=holey)
    with pytest.raises(ValueError, match=r"^unknown score 'x'; allowed: awft, awft_ln, aeqd, aeqd_ln, ftvvn, ftvvn_ln, avvn, avvn_ln, lthon, lthon_ln, ahon, ahon_ln$"):
        threshold(torch.ones(3), 0.1, "x")
    with pytest.raises(ValueError, match=r"quantile must lie in \[0, 1\], got 1.5"):
        threshold(torch.ones(3), 1.5, "ahon")
    with pytest.raises(ValueError, match=r"quantile must lie in \[0, 1\], got -0.1"):
        threshold(torch.ones(3), -0.1, "ahon")
    with pytest.raises(ValueError, match=r"^calibration values must be a non-empty set of finite numbers$"):
        threshold(torch.tensor([1.0, float("nan")]), 0.1, "ahon")
    with pytest.raises(ValueError, match="non-empty set of finite numbers"):
        threshold(torch.tensor([]), 0.1, "ahon")
    with pytest.raises(ValueError, match=r"^unknown score 'y'; allowed: awft, awft_ln, aeqd, aeqd_ln, ftvvn, ftvvn_ln, avvn, avvn_ln, lthon, lthon_ln, ahon, ahon_ln$"):
        inactive_mask(torch.ones(3), 0.1, "y")
    with pytest.raises(ValueError, match=r"p must lie in \[0, 1\], got 2"):
        random_mask((2, 2), 2)
    with pytest.raises(ValueError, match=r"p must lie in \[0, 1\], got -1"):
        random_mask((2, 2), -1)
    with pytest.raises(ValueError, match=r"mask must be a bool tensor"):
        with zero_heads_per_input(tiny, torch.zeros(3, 4)):
            pass
    with pytest.raises(ValueError, match=r"one input at a time: mask must be \[n_layers, n_heads\]"):
        with zero_heads_per_input(tiny, torch.zeros(2, 3, 4, dtype=torch.bool)):
            pass
    with pytest.raises(ValueError, match=r"head mask must have shape \(n_layers, n_heads\)"):
        with zero_heads_per_input(tiny, torch.zeros(3, 5, dtype=torch.bool)):
            pass


# ---------------------------------------------------------------- experiment

def test_experiment_smoke_measures_every_arm():
    from iclr26.interpretability.inactive_heads import experiment

    r = experiment.run("smoke", 1)
    m = r["metrics"]
    assert set(m) == {"zeroable_cloze", "zeroable_ppl", "threshold_gap"}
    assert set(m["zeroable_cloze"]) == {"ahon_ln", "awft", "random"}
    for metric in m.values():
        for vals in metric.values():
            assert all(0.0 <= v < float("inf") for v in vals)


@pytest.mark.slow
@pytest.mark.llm
def test_quick_scale_trial_runs():
    from iclr26.interpretability.inactive_heads import experiment

    r = experiment.run("quick", 1)
    assert len(r["metrics"]["zeroable_ppl"]["ahon_ln"]) == len(experiment.SCALES["quick"]["models"])
