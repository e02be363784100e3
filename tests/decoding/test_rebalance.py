"""Tests of ReBalance: step confidence, variance, the official dynamic control, placement, fitting."""
import math

import numpy as np
import pytest
import torch
from transformers import LogitsProcessor

from iclr26.decoding.rebalance import (
    ReBalanceConfig,
    ReBalanceSteerer,
    baseline_control,
    control,
    fit_rebalance,
    step_confidence,
    window_variance,
)
from iclr26.models import random_char_lm
from iclr26.models.generation import generate
from iclr26.models.testing import widen_


def wide_char_lm(seed: int = 0, std: float = 0.4):
    """The tiny Llama with its weight matrices redrawn at std 0.4 (20x the usual 0.02), so that
    distributions are far from uniform and hidden states differ clearly from layer to layer."""
    model, tok = random_char_lm(seed=seed)
    widen_(model, std, seed)
    return model, tok


@pytest.fixture(scope="module")
def lm():
    return wide_char_lm(seed=0)


def cfg_with(strength=1.0, dim=32, **kw):
    torch.manual_seed(1)
    base = dict(vector=torch.randn(dim) * 3.0, layer=1, tau_c_low=0.3, tau_c_high=0.7, tau_v_low=0.001,
                tau_v_high=0.01, strength=strength)
    base.update(kw)
    return ReBalanceConfig(**base)


# ---------------------------------------------------------------- confidence and variance

def test_step_confidence_and_two_step_variance_hand_values():
    assert step_confidence([0.5, 0.125]) == pytest.approx(0.3125)                  # arithmetic (official online)
    assert step_confidence([0.5, 0.125], kind="geometric") == pytest.approx(0.25)  # exp(mean ln p)
    assert window_variance([0.2, 0.4, 0.9]) == pytest.approx([0.0, 0.01, 0.0625])  # (c_s - c_{s-1})^2 / 4
    assert window_variance([0.2, 0.4, 0.9], window=3) == pytest.approx([0.0, 0.01, float(np.var([.2, .4, .9]))])
    assert step_confidence([1.0, 1.0]) == 1.0


def test_step_confidence_rejections():
    with pytest.raises(ValueError, match=r"^max probabilities must lie in \(0, 1\]$"):
        step_confidence([0.5, 1.5])
    with pytest.raises(ValueError, match=r"^max probabilities must lie in \(0, 1\]$"):
        step_confidence([0.0])
    with pytest.raises(ValueError, match="^a step needs at least one token$"):
        step_confidence([])
    with pytest.raises(ValueError, match="kind must be 'arithmetic' or 'geometric'"):
        step_confidence([0.5], kind="harmonic")
    with pytest.raises(ValueError, match="window must be a positive integer"):
        window_variance([0.1], 0)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_confidences_are_rejected(bad):
    with pytest.raises(ValueError, match="max probabilities must be finite"):
        step_confidence([0.5, bad])
    with pytest.raises(ValueError, match="step confidences must be finite"):
        window_variance([0.5, bad])
    cfg = cfg_with(tau_c_low=0.66, tau_c_high=0.95, low_1=-1.02)
    with pytest.raises(ValueError, match="c must be a finite step statistic"):
        baseline_control(bad, cfg)
    with pytest.raises(ValueError, match="c must be a finite step statistic"):
        control(bad, 0.0, cfg)
    with pytest.raises(ValueError, match="v must be a finite step statistic"):
        control(0.5, bad, cfg)


# ---------------------------------------------------------------- the official control function

def test_baseline_control_hits_its_three_anchor_values():
    """F(tau_c^L) = low_1, F(tau_c^H) = 0 and F(1) = high_1 = 0.01, and F rises with c."""
    cfg = cfg_with(tau_c_low=0.66, tau_c_high=0.95, low_1=-1.02)
    assert baseline_control(0.66, cfg) == pytest.approx(-1.02, abs=1e-9)
    assert baseline_control(0.95, cfg) == pytest.approx(0.0, abs=1e-9)
    assert baseline_control(1.0, cfg) == pytest.approx(0.01, abs=1e-6)
    xs = np.linspace(0, 1, 41)
    ys = [baseline_control(x, cfg) for x in xs]
    assert all(b > a for a, b in zip(ys, ys[1:]))
    assert baseline_control(1.7, cfg) == baseline_control(1.0, cfg)      # c is clipped to [0, 1]
    assert baseline_control(-0.5, cfg) == baseline_control(0.0, cfg)
    # the middle of the interval is the midpoint of the two anchor values (tanh is odd)
    assert baseline_control(0.805, cfg) == pytest.approx(-0.51, abs=1e-9)


def test_control_regions_match_the_official_anchor_values():
    """g = F(c) + (low_2 - F(tau_c^L)) w_o + (high_2 - F(1)) w_u, clipped: deep in the overthinking
    region (low c, high v) g = low_2; steady over-confidence g = high_2; elsewhere g = F(c)."""
    cfg = cfg_with(tau_c_low=0.66, tau_c_high=0.95, tau_v_low=0.00056, tau_v_high=0.0116,
                   low_1=-1.02, low_2=-1.91)
    assert control(0.5, 0.05, cfg) == pytest.approx(-1.91)                        # overthinking: low_2
    assert control(0.5, 0.005, cfg) == pytest.approx(baseline_control(0.5, cfg))  # low c, moderate v: F
    assert control(0.8, 0.05, cfg) == pytest.approx(baseline_control(0.8, cfg))   # middle c, high v: F
    assert control(0.999, 0.0, cfg) == pytest.approx(0.1, abs=1e-3)               # underthinking: high_2
    assert control(0.999, 0.005, cfg) == pytest.approx(baseline_control(0.999, cfg), abs=1e-9)
    assert control(0.1, 0.2, cfg) == pytest.approx(-1.91)                         # never below min(low_1, low_2)
    # at the gate edges both sigmoids are 1/2: w_o = 1/4 / 0.25 = 1 -> exactly low_2 at (tau_c^L, tau_v^H)
    assert control(0.66, 0.0116, cfg) == pytest.approx(-1.91, abs=1e-9)
    # the high-side weight is normalised by sigmoid(12 (1 - tau_c^H) / IQR_c) / 2 (official code)
    g_m = 0.5 / (1 + math.exp(-12 * 0.05 / 0.29))
    w_u = min(1.0, 0.5 * 1.0 / g_m)
    assert control(0.95, 0.0, cfg) == pytest.approx(0.0 + (0.1 - baseline_control(1.0, cfg)) * w_u, abs=1e-6)


def test_control_scales_with_strength_and_keeps_sign_convention():
    """Negative below tau_c^H (subtract the overthinking direction), positive in the underthinking
    region; ``strength`` multiplies the whole coefficient."""
    c1, c3 = cfg_with(1.0), cfg_with(3.0)
    for c, v in [(0.2, 0.05), (0.5, 0.005), (0.69, 0.0), (0.99, 0.0)]:
        assert control(c, v, c3) == pytest.approx(3.0 * control(c, v, c1))
    assert control(0.2, 0.05, c1) < 0 and control(0.5, 0.005, c1) < 0
    assert control(0.99, 0.0, c1) > 0
    assert control(0.5, 0.005, cfg_with(0.0)) == 0.0


# ---------------------------------------------------------------- placement during decoding

PROMPTS = ["q: 12+7=\n", "q: 3+4?\n"]


class Force(LogitsProcessor):
    """Make the model write ``text`` (one character token per step) after the prompt."""

    def __init__(self, tok, text, n_prompt):
        self.ids = [tok.convert_tokens_to_ids(ch) for ch in text]
        self.n_prompt = n_prompt

    def __call__(self, input_ids, scores):
        j = input_ids.shape[1] - self.n_prompt
        if j < len(self.ids):
            scores = torch.full_like(scores, -1e9)
            scores[:, self.ids[j]] = 0.0
        return scores


def _shifts(model, tok, cfg, text, layer_site="input"):
    """Per decode forward: (fed token, input-of-layer seen by the layer minus the unsteered one)."""
    n_prompt = len(tok(PROMPTS[0], add_special_tokens=False)["input_ids"])
    layer = model.model.layers[cfg.layer]
    prev = model.model.layers[cfg.layer - 1]
    rec = {"fed": [], "clean": [], "seen": [], "out": [], "maxp": []}
    st = ReBalanceSteerer(model, tok, cfg, sep="\n\n")
    hs = [model.register_forward_pre_hook(
        lambda m, a, k: rec["fed"].append(k["input_ids"][0, -1].item()), with_kwargs=True),
        prev.register_forward_hook(lambda m, a, o: rec["clean"].append((o[0] if isinstance(o, tuple) else o)[0, -1].clone())),
        model.register_forward_hook(lambda m, a, o: rec["maxp"].append(
            float(torch.softmax(o.logits[0, -1].double(), -1).max())))]
    with st:
        hs.append(layer.register_forward_pre_hook(lambda m, a, k: rec["seen"].append(a[0][0, -1].clone()), with_kwargs=True))
        hs.append(layer.register_forward_hook(lambda m, a, o: rec["out"].append((o[0] if isinstance(o, tuple) else o)[0, -1].clone())))
        generate(model, tok, PROMPTS[:1], len(text) + 1, logits_processor=[Force(tok, text, n_prompt)])
    for h in hs:
        h.remove()
    diffs = [s - c for s, c in zip(rec["seen"], rec["clean"])]
    return [tok.convert_ids_to_tokens(i) for i in rec["fed"]], diffs, st, rec


def test_shift_is_added_at_the_separator_token_at_the_input_of_layer_l(lm):
    """Official placement: the forward that feeds the token completing "\\n\\n" gets h + g v at the
    input of layer l (the old placement, one token later at the layer output, must fail this), with
    g = control(c, v) of the step it closes: c = mean max-prob of the distributions that wrote
    "a", "b", "\\n" (the completing newline itself is not part of the step), v = 0 (first step)."""
    model, tok = lm
    cfg = cfg_with(1.0, tau_c_high=0.99, tau_c_low=0.5)
    text = "ab\n\ncd"
    fed, diffs, st, _ = _shifts(model, tok, cfg, text)
    # forwards: prefill, then "a", "b", "\n", "\n" (the separator), "c", "d"
    assert fed[1:] == list(text)
    moved = [i for i, d in enumerate(diffs) if float(d.abs().max()) > 1e-6]
    assert moved == [4]
    n_prompt = len(tok(PROMPTS[0], add_special_tokens=False)["input_ids"])
    ids = tok(PROMPTS[0], add_special_tokens=False)["input_ids"] + [tok.convert_tokens_to_ids(ch) for ch in text]
    with torch.no_grad():
        p = torch.softmax(model(torch.tensor([ids])).logits[0].double(), -1).max(-1).values
    c_ref = float(p[n_prompt - 1:n_prompt + 2].mean())
    g_ref = control(c_ref, 0.0, cfg)
    torch.testing.assert_close(diffs[4], g_ref * cfg.vector, atol=1e-4, rtol=1e-4)
    assert st.coefs == pytest.approx([g_ref], rel=1e-5)


def test_next_token_output_placement_is_an_option(lm):
    """The alternative placement (first token of the new step, output of layer l) shifts one
    forward later and leaves the layer's input untouched."""
    model, tok = lm
    text = "ab\n\ncd"
    cfg = cfg_with(1.0, tau_c_high=0.99, tau_c_low=0.5, placement="next_token", site="output")
    _, diffs, st, rec = _shifts(model, tok, cfg, text)
    assert all(float(d.abs().max()) < 1e-6 for d in diffs)
    plain = cfg_with(0.0, tau_c_high=0.99, tau_c_low=0.5)
    _, _, _, rec0 = _shifts(model, tok, plain, text)
    moved = [i for i, (a, b) in enumerate(zip(rec["out"], rec0["out"])) if float((a - b).abs().max()) > 1e-6]
    assert moved[0] == 5 and len(st.coefs) == 1
    torch.testing.assert_close(rec["out"][5] - rec0["out"][5], st.coefs[0] * cfg.vector, atol=1e-4, rtol=1e-4)
    cfg_in = cfg_with(1.0, tau_c_high=0.99, tau_c_low=0.5, placement="next_token")
    _, diffs, _, _ = _shifts(model, tok, cfg_in, text)
    assert [i for i, d in enumerate(diffs) if float(d.abs().max()) > 1e-6] == [5]


def test_later_steps_use_the_two_step_variance_of_the_steered_run(lm):
    """Each separator closes the step of the tokens fed since the previous one; its confidence is
    the mean max-prob of the (raw, steered-run) distributions that wrote those tokens, and its
    variance (c_s - c_{s-1})^2 / 4. With a character tokenizer "\n\n\n\n" is two separators,
    the second closing a one-token step ("\n")."""
    model, tok = lm
    cfg = cfg_with(1.0, tau_c_high=0.99, tau_c_low=0.5)
    text = "ab\n\nc\n\n\n\nd"
    fed, diffs, st, rec = _shifts(model, tok, cfg, text)
    moved = [i for i, d in enumerate(diffs) if float(d.abs().max()) > 1e-6]
    assert moved == [4, 7, 9]
    p = rec["maxp"]                    # p[i]: max-prob of the distribution forward i produced
    c1, c2, c3 = float(np.mean(p[0:3])), float(np.mean(p[4:6])), p[7]
    want = [control(c1, 0.0, cfg), control(c2, (c2 - c1) ** 2 / 4, cfg), control(c3, (c3 - c2) ** 2 / 4, cfg)]
    assert st.coefs == pytest.approx(want, rel=1e-5)
    for i, g in zip(moved, want):
        torch.testing.assert_close(diffs[i], g * cfg.vector, atol=1e-4, rtol=1e-4)


def test_a_separator_right_after_another_reuses_the_last_coefficient(lm):
    """The official ready-mask: a separator that closes an empty step keeps the row's previous
    coefficient (0 before any step)."""
    model, tok = lm
    cfg = cfg_with(1.0, tau_c_high=0.99, tau_c_low=0.5)
    st = ReBalanceSteerer(model, tok, cfg, sep="\n\n")
    st.splitter.pieces.update({9001: "\n\n", 9002: "x"})
    st._on_tokens(torch.tensor([[1, 2, 3]]), True)          # prefill
    st.last_maxp = torch.tensor([0.6])
    st._on_tokens(torch.tensor([[9001]]), False)             # separator, empty step: coefficient 0
    assert float(st.pending[0]) == 0.0
    st._on_tokens(torch.tensor([[9002]]), False)
    st._on_tokens(torch.tensor([[9001]]), False)
    g = control(0.6, 0.0, cfg)
    assert float(st.pending[0]) == pytest.approx(g) and st.conf[0] == [pytest.approx(0.6)]
    st._on_tokens(torch.tensor([[9001]]), False)             # empty again: reuse g, no new step
    assert float(st.pending[0]) == pytest.approx(g) and len(st.conf[0]) == 1
    st._on_tokens(torch.tensor([[9002, 9002]]), False)       # a new prompt batch restarts the state
    assert st.conf == [[]] and float(st.pending[0]) == 0.0


def test_zero_strength_equals_plain_decoding_and_hooks_are_removed(lm):
    model, tok = lm
    plain = generate(model, tok, PROMPTS, 20)
    with ReBalanceSteerer(model, tok, cfg_with(0.0), sep="1") as st:
        assert generate(model, tok, PROMPTS, 20) == plain
    assert st.events == 0
    cfg = cfg_with(200.0, tau_c_high=0.99, tau_c_low=0.5)
    n_pre, n_post = len(model._forward_pre_hooks), len(model.model.layers[1]._forward_pre_hooks)
    with ReBalanceSteerer(model, tok, cfg, sep="a") as st:
        got = generate(model, tok, PROMPTS, 20)
        assert len(model.model.layers[1]._forward_pre_hooks) == n_post + 1
        assert len(model._forward_pre_hooks) == n_pre + 1
    assert st.events > 0 and got != plain
    assert len(model.model.layers[1]._forward_pre_hooks) == n_post and len(model._forward_pre_hooks) == n_pre
    assert generate(model, tok, PROMPTS, 20) == plain


def test_state_restarts_between_prompt_batches(lm):
    model, tok = lm
    cfg = cfg_with(50.0, tau_c_high=0.99, tau_c_low=0.5)
    prompts = ["q: 12+7=\n", "q: 3+4?\n", "q: 9+9+9=\n", "q: 1?\n"]
    with ReBalanceSteerer(model, tok, cfg, sep="a"):
        both = generate(model, tok, prompts, 12, batch_size=2)
    with ReBalanceSteerer(model, tok, cfg, sep="a"):
        second = generate(model, tok, prompts[2:], 12, batch_size=2)
    assert both[2:] == second


def test_separator_detection_across_tokens(lm):
    """A separator ends a step at the token that completes it, whether written as one token, as
    several, or inside a longer token; the text kept between tokens never re-counts a separator."""
    model, tok = lm
    st = ReBalanceSteerer(model, tok, cfg_with(1.0), sep="\n\n")
    sp = st.splitter
    tail, ends = "", []
    for ch in "ab\n\nc\nd\n\n\n":
        e, tail = sp.ends(tail, tok.convert_tokens_to_ids(ch))
        ends.append(e)
    assert ends == [False, False, False, True, False, False, False, False, True, False]
    sp.pieces.update({1001: "a\n\n\nb\n\n", 1002: "\n", 1003: "abca" + "ab", 1004: "b"})
    assert sp.ends("", 1001) == (True, "")
    assert sp.ends("", 1002) == (False, "\n")
    st2 = ReBalanceSteerer(model, tok, cfg_with(1.0), sep="ab")
    st2.splitter.pieces.update({1003: "abcaab", 1004: "b", 1005: "aba"})
    assert st2.splitter.ends("", 1003) == (True, "")
    assert st2.splitter.ends("", 1005) == (True, "a")
    assert st2.splitter.ends("a", 1004) == (True, "")
    st3 = ReBalanceSteerer(model, tok, cfg_with(1.0), sep="X")
    st3.splitter.pieces.update({1001: "aX", 1002: "bc"})
    assert st3.splitter.ends("", 1001) == (True, "") and st3.splitter.ends("", 1002) == (False, "")
    with pytest.raises(ValueError, match="sep"):
        ReBalanceSteerer(model, tok, cfg_with(1.0), sep="")


def test_shift_keeps_dtype_and_skips_prefill(lm):
    model, tok = lm
    cfg = cfg_with(1.0)
    st = ReBalanceSteerer(model, tok, cfg)
    st._reset(2)
    st.pending = torch.tensor([0.75, 0.0])
    h = torch.randn(2, 1, 32).to(torch.bfloat16)
    out = st._shift(h)
    assert out.dtype == torch.bfloat16 and st.coefs == [0.75]
    want = h.float() + torch.tensor([0.75, 0.0])[:, None, None] * cfg.vector
    torch.testing.assert_close(out.float(), want, atol=0.05, rtol=0.02)
    assert st._shift(h) is None                                # consumed
    st.pending = torch.tensor([1.0, 0.0])
    assert st._shift(torch.randn(2, 3, 32)) is None           # prefill: untouched
    st.pending = torch.tensor([1.0, 0.0])
    out = st._layer_hook(None, (), (h, "rest"))
    assert out[1] == "rest" and st.coefs == [0.75, 1.0]
    st.pending = torch.tensor([1.0, 0.0])
    args, kw = st._layer_pre_hook(None, (), {"hidden_states": h, "x": 1})
    assert args == () and kw["x"] == 1 and kw["hidden_states"].shape == h.shape


# ---------------------------------------------------------------- fitting

CAL_PROMPTS = ["q: 12+7=\n", "q: 3+4?\n", "q: 9*9=\n", "q: 5-2?\n"]
CAL_COMPS = ["\n\n".join(f"{i}+{j}={i + j}" for j in range(6)) for i in range(4)]


def test_fit_matches_an_independent_prototype_computation(lm):
    """Vector = mu_O - mu_U (unnormalised) of the *input* of decoder layer ``layer`` at the first
    token of each step that follows a separator; O / U from quartiles of the step confidence (mean
    max-prob of the tokens that are not the completing separator) and the two-step variance; all
    recomputed here with a layer pre-hook. A sign flip, a normalised vector or the layer's output
    must fail."""
    model, tok = lm
    layer = 1
    cfg = fit_rebalance(model, tok, CAL_PROMPTS, CAL_COMPS, layer=layer, relax=True)
    captured = {}
    h = model.model.layers[layer].register_forward_pre_hook(
        lambda m, a, k: captured.__setitem__("in", a[0][0].detach().clone()), with_kwargs=True)
    confs, vars_, firsts = [], [], []
    try:
        for prompt, comp in zip(CAL_PROMPTS, CAL_COMPS):
            p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
            ids = p_ids + tok(comp, add_special_tokens=False)["input_ids"]
            with torch.no_grad():
                probs = torch.softmax(model(torch.tensor([ids])).logits[0].double(), -1)
            k, cs = len(p_ids), []
            steps = comp.split("\n\n")
            for i, s in enumerate(steps):
                n_tok = len(s) + (1 if i < len(steps) - 1 else 0)   # the step's chars + its first "\n"
                cs.append(float(np.mean([float(probs[k - 1 + j].max()) for j in range(n_tok)])))
                firsts.append(captured["in"][k] if i > 0 else None)
                k += len(s) + 2
            confs += cs
            vars_ += [0.0] + [(b - a) ** 2 / 4 for a, b in zip(cs, cs[1:])]
    finally:
        h.remove()
    confs, vars_ = np.array(confs), np.array(vars_)
    has = np.array([f is not None for f in firsts])
    tcl, tch = np.quantile(confs, [0.25, 0.75])
    tvl, tvh = np.quantile(vars_, [0.25, 0.75])
    o, u = (confs <= tcl) & (vars_ >= tvh) & has, (confs >= tch) & (vars_ <= tvl) & has
    if not (o.any() and u.any()):
        o, u = (confs <= tcl) & has, (confs >= tch) & has
    assert cfg.info["n_over"] == o.sum() and cfg.info["n_under"] == u.sum() and cfg.info["n_steps"] == 24
    mu_o = torch.stack([firsts[i] for i in np.flatnonzero(o)]).float().mean(0)
    mu_u = torch.stack([firsts[i] for i in np.flatnonzero(u)]).float().mean(0)
    torch.testing.assert_close(cfg.vector, mu_o - mu_u, atol=1e-4, rtol=1e-4)
    assert cfg.tau_c_low == pytest.approx(tcl, rel=1e-5) and cfg.tau_c_high == pytest.approx(tch, rel=1e-5)
    assert cfg.tau_v_low == pytest.approx(tvl, rel=1e-4, abs=1e-9)
    assert cfg.tau_v_high == pytest.approx(tvh, rel=1e-4, abs=1e-9)
    assert cfg.window == 2 and cfg.strength == 1.0 and cfg.layer == layer
    assert cfg.low_1 == -1.02 and cfg.low_2 == -1.91 and cfg.placement == "separator" and cfg.site == "input"
    unit = fit_rebalance(model, tok, CAL_PROMPTS, CAL_COMPS, layer=layer, relax=True, normalize=True)
    assert float(unit.vector.norm()) == pytest.approx(1.0, abs=1e-5)


def test_fit_accepts_token_ids_and_relaxes_only_below_min_steps(lm):
    model, tok = lm
    ids = [tok(c, add_special_tokens=False)["input_ids"] for c in CAL_COMPS]
    a = fit_rebalance(model, tok, CAL_PROMPTS, ids, layer=1, relax=True)
    b = fit_rebalance(model, tok, CAL_PROMPTS, CAL_COMPS, layer=1, relax=True)
    torch.testing.assert_close(a.vector, b.vector)
    strict = fit_rebalance(model, tok, CAL_PROMPTS, CAL_COMPS, layer=1, relax=True, min_steps=1)
    loose = fit_rebalance(model, tok, CAL_PROMPTS, CAL_COMPS, layer=1, relax=True, min_steps=100)
    assert loose.info["relaxed"] and loose.info["n_over"] >= strict.info["n_over"]
    assert strict.info["relaxed"]        # the joint O set of these traces is empty
    assert (strict.info["n_over"], strict.info["n_under"]) == (loose.info["n_over"], loose.info["n_under"])
    with pytest.raises(ValueError, match="found 0 overthinking"):
        fit_rebalance(model, tok, CAL_PROMPTS, CAL_COMPS, layer=1)
    with pytest.raises(ValueError, match="overthinking and .* underthinking steps"):
        fit_rebalance(model, tok, CAL_PROMPTS[:1], ["abc"], layer=1)
    with pytest.raises(ValueError, match="hold no tokens"):
        fit_rebalance(model, tok, CAL_PROMPTS[:1], [[]], layer=1)


def test_fitted_steering_changes_the_output_of_a_real_generation(lm):
    model, tok = lm
    cfg = fit_rebalance(model, tok, CAL_PROMPTS, CAL_COMPS, layer=1, relax=True, strength=5.0)
    plain = generate(model, tok, PROMPTS, 24)
    with ReBalanceSteerer(model, tok, cfg, sep="a") as st:
        got = generate(model, tok, PROMPTS, 24)
    assert st.events > 0 and got != plain


# ---------------------------------------------------------------- rejections

def test_rejections(lm):
    model, tok = lm
    with pytest.raises(ValueError, match="all zeros"):
        cfg_with(1.0, vector=torch.zeros(32))
    with pytest.raises(ValueError, match="must be finite"):
        cfg_with(1.0, vector=torch.full((32,), float("nan")))
    with pytest.raises(ValueError, match="non-empty 1-D tensor"):
        cfg_with(1.0, vector=torch.ones(2, 16))
    with pytest.raises(ValueError, match="steering vector has 31 entries but the model's hidden size is 32"):
        ReBalanceSteerer(model, tok, cfg_with(1.0, vector=torch.ones(31)))
    with pytest.raises(ValueError, match="strength"):
        cfg_with(-1.0)
    with pytest.raises(ValueError, match="thresholds"):
        cfg_with(1.0, tau_c_low=0.9, tau_c_high=0.1)
    with pytest.raises(ValueError, match="thresholds"):
        cfg_with(1.0, tau_c_low=0.5, tau_c_high=0.5)
    with pytest.raises(ValueError, match="thresholds"):
        cfg_with(1.0, tau_v_low=0.5, tau_v_high=0.1)
    with pytest.raises(ValueError, match="low_1 < 0 < high_1"):
        cfg_with(1.0, low_1=0.5)
    with pytest.raises(ValueError, match="low_1 < 0 < high_1"):
        cfg_with(1.0, high_2=0.0)
    with pytest.raises(ValueError, match="placement must be"):
        cfg_with(1.0, placement="first")
    with pytest.raises(ValueError, match="site must be"):
        cfg_with(1.0, site="middle")
    with pytest.raises(ValueError, match="kind must be"):
        cfg_with(1.0, kind="median")
    with pytest.raises(ValueError, match="window"):
        cfg_with(1.0, window=0)
    with pytest.raises(ValueError, match=r"^layer must be in \[0, 1\], got 5$"):
        ReBalanceSteerer(model, tok, cfg_with(1.0, layer=5))
    with pytest.raises(ValueError, match="empty prompt"):
        fit_rebalance(model, tok, ["", "q"], ["1\n\n2", "3\n\n4"], layer=0)
    with pytest.raises(TypeError, match="not single strings"):
        fit_rebalance(model, tok, "q", "1\n\n2", layer=0)
    with pytest.raises(ValueError, match="same positive number"):
        fit_rebalance(model, tok, ["q"], [], layer=0)
    with pytest.raises(ValueError, match=r"^layer must be in \[0, 1\], got 2$"):
        fit_rebalance(model, tok, ["q"], ["1"], layer=2)
    with pytest.raises(ValueError, match="q_low"):
        fit_rebalance(model, tok, ["a"], ["b"], layer=0, q_low=0.9, q_high=0.1)
    with pytest.raises(TypeError, match="decoder-only model"):
        ReBalanceSteerer(torch.nn.Linear(2, 2), tok, cfg_with(1.0))


def test_exit_and_reentry(lm):
    model, tok = lm
    st = ReBalanceSteerer(model, tok, cfg_with(1.0, layer=0))
    assert st.bsz == 0 and st.pending.numel() == 0 and st.events == 0
    with pytest.raises(RuntimeError, match="boom"):
        with st:
            raise RuntimeError("boom")
    n0 = len(model.model.layers[0]._forward_pre_hooks)
    with st:
        assert len(model.model.layers[0]._forward_pre_hooks) == n0 + 1
    assert len(model.model.layers[0]._forward_pre_hooks) == n0
    st.__exit__(None, None, None)
    assert st.bsz == 0 and st.pending.numel() == 0


# ---------------------------------------------------------------- gate shapes and edge handling

def test_control_gates_at_intermediate_values():
    """Away from saturation each gate is sigmoid(1200 x / IQR): one IQR/1200 inside the corner on
    both axes gives sigmoid(-1)^2 / 0.25 for the overthinking weight and sigmoid(-1)^2 / g_m for the
    underthinking one, g_m = sigmoid(12 (1 - tau_c^H) / IQR_c) / 2."""
    cfg = cfg_with(tau_c_low=0.66, tau_c_high=0.95, tau_v_low=0.0005, tau_v_high=0.0115, low_1=-1.02, low_2=-1.91)
    iqr_c, iqr_v = 0.29, 0.011
    s1 = 1 / (1 + math.e)                                   # sigmoid(-1)
    c, v = 0.66 + iqr_c / 1200, 0.0115 - iqr_v / 1200
    want = baseline_control(c, cfg) + (-1.91 + 1.02) * s1 * s1 / 0.25
    assert control(c, v, cfg) == pytest.approx(want, abs=1e-9)
    g_m = 0.5 / (1 + math.exp(-12 * 0.05 / iqr_c))
    c, v = 0.95 - iqr_c / 1200, 0.0005 + iqr_v / 1200
    want = baseline_control(c, cfg) + (0.1 - baseline_control(1.0, cfg)) * s1 * s1 / g_m
    assert control(c, v, cfg) == pytest.approx(want, abs=1e-9)
    # just above tau_c^L in the high-variance corner the weight is clipped at 1 (not 2)
    c = 0.66 + iqr_c / 12000
    assert baseline_control(c, cfg) > -1.02
    assert control(c, 1.0, cfg) == pytest.approx(baseline_control(c, cfg) - 1.91 + 1.02, abs=1e-12)
    assert control(1.5, 0.0, cfg) == control(1.0, 0.0, cfg)  # c is clipped to [0, 1]


def test_baseline_control_solves_small_slopes():
    """F(1) = high_1 also when the solution k of tanh(k(1 - m)) / tanh(k s) = R is below 1."""
    cfg = cfg_with(tau_c_low=0.3, tau_c_high=0.7, low_1=-0.0135)
    assert baseline_control(1.0, cfg) == pytest.approx(0.01, abs=1e-9)
    assert baseline_control(0.3, cfg) == pytest.approx(-0.0135, abs=1e-12)


def test_config_messages_and_allowed_edges(lm):
    model, tok = lm
    with pytest.raises(ValueError, match=r"got torch.Size\(\[2, 16\]\)$"):
        cfg_with(1.0, vector=torch.ones(2, 16))
    with pytest.raises(ValueError, match=r"^vector \(the steering direction\) must be a non-empty .* got list$"):
        cfg_with(1.0, vector=[1.0])
    with pytest.raises(ValueError, match=r"^vector \(the steering direction\) must be finite, got NaN or inf entries$"):
        cfg_with(1.0, vector=torch.full((32,), float("inf")))
    with pytest.raises(ValueError, match=r"^vector \(the steering direction\) is all zeros: steering would do "
                                         r"nothing; fit it with fit_rebalance \(mu_O - mu_U\)$"):
        cfg_with(1.0, vector=torch.zeros(32))
    with pytest.raises(ValueError, match=r"^thresholds must satisfy tau_c_low < tau_c_high and tau_v_low < "
                                         r"tau_v_high, got 0.3, 0.7, 0.01, 0.01$"):
        cfg_with(1.0, tau_v_low=0.01, tau_v_high=0.01)
    with pytest.raises(ValueError, match=r"^need low_1 < 0 < high_1 and high_2 > 0 \(the official control"):
        cfg_with(1.0, low_1=0.0)
    with pytest.raises(ValueError, match="low_1 < 0 < high_1"):
        cfg_with(1.0, high_1=0.0)
    assert cfg_with(1.0, window=1, kind="geometric").window == 1
    assert cfg_with(1.0, vector=torch.ones(1)).vector.numel() == 1
    assert window_variance([0.2, 0.9], 1) == [0.0, 0.0]
    with pytest.raises(TypeError, match=r"got Linear$"):
        ReBalanceSteerer(torch.nn.Linear(2, 2), tok, cfg_with(1.0))
    with pytest.raises(ValueError, match=r"^layer must be in \[0, 1\], got 2$"):
        ReBalanceSteerer(model, tok, cfg_with(1.0, layer=2))
    st = ReBalanceSteerer(model, tok, cfg_with(1.0))
    assert st.sep == "\n\n"
    with st:
        assert st.bsz == 0 and st.pending.numel() == 0


def test_hook_argument_paths(lm):
    model, tok = lm
    cfg = cfg_with(1.0)
    st = ReBalanceSteerer(model, tok, cfg)
    st._reset(1)
    h = torch.randn(1, 1, 32)
    st.pending = torch.tensor([2.0])
    args, kw = st._layer_pre_hook(None, (h, "pos", "mask"), {"k": 1})
    assert args[1:] == ("pos", "mask") and kw == {"k": 1}
    torch.testing.assert_close(args[0], h + 2.0 * cfg.vector)
    st.pending = torch.tensor([2.0])
    args, kw = st._layer_pre_hook(None, (), {"hidden_states": h})
    torch.testing.assert_close(kw["hidden_states"], h + 2.0 * cfg.vector)
    logits = torch.randn(1, 3, 54)
    st._model_hook(None, (), {}, (logits,))                 # a tuple output: the logits come first
    torch.testing.assert_close(st.last_maxp, torch.softmax(logits[:, -1], -1).max(-1).values)
    with pytest.raises(ValueError, match=r"^ReBalanceSteerer needs generation with input_ids \(not inputs_embeds\)$"):
        st._model_pre_hook(None, (), {"inputs_embeds": h})


def test_new_generation_is_detected_from_the_cache_position(lm):
    """A one-token prompt looks like a decode step: cache_position 0 marks it as a new generation."""
    model, tok = lm
    cfg = cfg_with(1.0, tau_c_high=0.99, tau_c_low=0.5)
    st = ReBalanceSteerer(model, tok, cfg, sep="XY")
    st.splitter.pieces.update({9001: "XY", 9002: "q", 9003: "Y"})
    st._model_pre_hook(None, (torch.tensor([[9002, 9002]]),), {})          # prefill via args
    assert st.bsz == 1 and st.step_p == [[]]
    st._on_tokens(torch.tensor([[9002]]), False)                            # no distribution yet
    assert st.step_p == [[]]
    st.last_maxp = torch.tensor([0.6])
    st._model_pre_hook(None, (), {"input_ids": torch.tensor([[9002]]), "cache_position": torch.tensor([7])})
    st._model_pre_hook(None, (), {"input_ids": torch.tensor([[9001]]), "cache_position": torch.tensor([8])})
    assert st.conf == [[pytest.approx(0.6)]]
    st._model_pre_hook(None, (), {"input_ids": torch.tensor([[9002]]), "cache_position": torch.tensor([0])})
    assert st.conf == [[]] and st.tail == [""]
    st._on_tokens(torch.tensor([[9003]]), False)        # "Y" alone after a restart does not complete "XY"
    assert st.conf == [[]] and float(st.pending[0]) == 0.0


def test_rows_are_tracked_independently_with_kind_and_window(lm):
    """Row 0 writes a plain token while row 1 closes steps: row 1 still gets its coefficients; the
    configured confidence kind and variance window are used (tau_v^H is placed so that the window-3
    variance sits two gate widths below it, where the overthinking weight is not saturated)."""
    model, tok = lm
    ps = [(0.5, 0.125), (0.9,), (0.3,)]
    cs = [float(np.exp(np.mean(np.log(p)))) for p in ps]
    v3 = float(np.var(cs))
    cfg = cfg_with(1.0, tau_c_high=0.99, tau_c_low=0.5, kind="geometric", window=3,
                   tau_v_low=0.0, tau_v_high=v3 / (1 - 2 / 1200))
    st = ReBalanceSteerer(model, tok, cfg, sep="\n\n")
    st.splitter.pieces.update({9001: "\n\n", 9002: "x"})
    st._on_tokens(torch.tensor([[1, 2], [1, 2]]), True)
    for probs in ps:
        for p in probs:
            st.last_maxp = torch.tensor([0.7, p])
            st._on_tokens(torch.tensor([[9002], [9002]]), False)
        st.last_maxp = torch.tensor([0.7, 0.7])
        st._on_tokens(torch.tensor([[9002], [9001]]), False)
    assert st.conf[1] == pytest.approx(cs) and st.conf[0] == []
    s2 = 1 / (1 + math.exp(2.0))
    want = baseline_control(cs[2], cfg) + (cfg.low_2 - cfg.low_1) * s2 / 0.25
    assert control(cs[2], v3, cfg) == pytest.approx(want, abs=1e-6)
    assert float(st.pending[1]) == pytest.approx(want, abs=1e-3)      # float32 probabilities
    assert float(st.pending[0]) == 0.0


def test_prefill_with_cache_positions(lm):
    model, tok = lm
    st = ReBalanceSteerer(model, tok, cfg_with(1.0))
    st._model_pre_hook(None, (), {"input_ids": torch.tensor([[5, 6, 7]]), "cache_position": torch.arange(3)})
    assert st.bsz == 1 and st.conf == [[]]


def test_segmentation_and_tails_start_empty(lm):
    from iclr26.decoding.rebalance.steering import _StepSplitter, _segment
    model, tok = lm
    sp = _StepSplitter(tok, "XY")
    sp.pieces.update({9001: "Y", 9002: "a", 9003: "XY"})
    steps = _segment(sp, [9001, 9002, 9003, 9002], [0.1, 0.2, 0.3, 0.4])
    assert steps == [([0.1, 0.2], 0), ([0.4], 3)]
    sp1 = _StepSplitter(tok, "X")
    sp1.pieces.update({9004: "aXbc"})
    assert sp1.ends("", 9004) == (True, "")
