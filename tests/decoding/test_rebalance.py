"""Tests of ReBalance: step confidence, window variance, the dynamic control function, hooks."""
import math

import numpy as np
import pytest
import torch
from transformers import LogitsProcessor

from iclr26.models.testing import widen_
from iclr26.decoding.rebalance import (
    ReBalanceConfig,
    ReBalanceSteerer,
    control,
    fit_rebalance,
    step_confidence,
    window_variance,
)
from iclr26.models import random_char_lm
from iclr26.models.generation import generate


def wide_char_lm(seed: int = 0, std: float = 0.4):
    """The tiny Llama with its weight matrices redrawn at std 0.4 (20x the usual 0.02), so that
    distributions are far from uniform and hidden states differ clearly from layer to layer."""
    model, tok = random_char_lm(seed=seed)
    widen_(model, std, seed)
    return model, tok


@pytest.fixture(scope="module")
def lm():
    return wide_char_lm(seed=0)


def cfg_with(strength, dim=32, **kw):
    torch.manual_seed(1)
    v = torch.randn(dim)
    base = dict(vector=v / v.norm(), layer=1, tau_c_low=0.2, tau_c_high=0.9, tau_v_low=0.0,
                tau_v_high=1.0, scale=1.0, strength=strength)
    base.update(kw)
    return ReBalanceConfig(**base)


def test_step_confidence_and_variance_hand_values():
    assert step_confidence([0.5, 0.125]) == pytest.approx(0.25)       # geometric mean
    assert window_variance([0.2, 0.4, 0.9], window=2) == pytest.approx([0.0, 0.01, 0.0625])


def test_control_function_hand_values():
    """alpha = sign(c - tau_c^H) * B * tanh(|c - tau_c^H|), B by region (B_o, B_u, B_m)."""
    cfg = cfg_with(2.0, tau_c_low=0.3, tau_c_high=0.7, tau_v_low=0.01, tau_v_high=0.05,
                   amplitudes=(1.0, 3.0, 0.5), scale=1.5)
    # overthinking region: c <= 0.3 and v >= 0.05 -> B_o = 1
    assert control(0.2, 0.1, cfg) == pytest.approx(-1.0 * math.tanh(0.5) * 2.0 * 1.5)
    # underthinking region: c >= 0.7 and v <= 0.01 -> B_u = 3, positive sign
    assert control(0.9, 0.0, cfg) == pytest.approx(3.0 * math.tanh(0.2) * 2.0 * 1.5)
    # neither: B_m
    assert control(0.5, 0.03, cfg) == pytest.approx(-0.5 * math.tanh(0.2) * 2.0 * 1.5)
    assert control(0.7, 0.03, cfg) == 0.0


PROMPTS = ["q: 12+7=\n", "q: 3+4?\n"]


def test_zero_strength_equals_plain_decoding(lm):
    model, tok = lm
    cfg = cfg_with(0.0, tau_c_high=1.0)
    plain = generate(model, tok, PROMPTS, 20)
    with ReBalanceSteerer(model, tok, cfg, sep="1") as st:
        got = generate(model, tok, PROMPTS, 20, logits_processor=[st.processor])
    assert got == plain


def test_steering_is_applied_and_hooks_removed(lm):
    model, tok = lm
    plain = generate(model, tok, PROMPTS, 20)
    # any character ends a "step": steering at every token; huge strength changes the output
    cfg = cfg_with(200.0, tau_c_high=1.0)
    st = ReBalanceSteerer(model, tok, cfg, sep="\n")
    st._ends_step = lambda b, token_id: True  # every token ends a step
    with st:
        got = generate(model, tok, PROMPTS, 20, logits_processor=[st.processor])
        assert len(model.model.layers[1]._forward_hooks) == 1
    assert st.alphas_applied and all(a < 0 for a in st.alphas_applied)  # c < tau_c^H = 1
    assert got != plain
    assert len(model.model.layers[1]._forward_hooks) == 0
    assert generate(model, tok, PROMPTS, 20) == plain


def test_separator_written_as_several_tokens_ends_a_step(lm):
    """With a character tokenizer "\\n\\n" is two tokens: the step must end at the second one, once."""
    model, tok = lm
    st = ReBalanceSteerer(model, tok, cfg_with(1.0), sep="\n\n")
    st._reset(1)
    ends = [st._ends_step(0, tok.convert_tokens_to_ids(ch)) for ch in "ab\n\nc\nd\n\n\n"]
    assert ends == [False, False, False, True, False, False, False, False, True, False]
    with pytest.raises(ValueError, match="sep"):
        ReBalanceSteerer(model, tok, cfg_with(1.0), sep="")


def test_steering_fires_after_a_blank_line_in_the_output(lm):
    """End to end: a generated "\\n" "\\n" pair schedules a steering event for the next token."""
    model, tok = lm
    nl = tok.convert_tokens_to_ids("\n")

    class ForceNewlines(LogitsProcessor):  # make the model write x, \n, \n, then anything
        def __call__(self, input_ids, scores):
            step = input_ids.shape[1] - n_prompt
            if step in (1, 2):
                scores = torch.full_like(scores, -1e9)
                scores[:, nl] = 0.0
            return scores

    n_prompt = len(tok(PROMPTS[0])["input_ids"])
    with ReBalanceSteerer(model, tok, cfg_with(1.0, tau_c_high=1.0), sep="\n\n") as st:
        out = generate(model, tok, PROMPTS[:1], 6, logits_processor=[st.processor, ForceNewlines()])
    assert out[0][1:3] == "\n\n"
    assert len(st.alphas_applied) >= 1 and st.alphas_applied[0] < 0  # c < tau_c^H = 1


def test_fit_builds_unit_vector(lm):
    model, tok = lm
    comps = ["\n\n".join(f"{i}+{j}={i + j}" for j in range(6)) for i in range(4)]
    cfg = fit_rebalance(model, tok, PROMPTS * 2, comps, layer=1, relax=True)
    assert cfg.vector.shape == (32,)
    assert float(cfg.vector.norm()) == pytest.approx(1.0, abs=1e-5)
    assert cfg.tau_c_low <= cfg.tau_c_high and cfg.info["n_over"] > 0 and cfg.info["n_under"] > 0


def test_fit_matches_an_independent_prototype_computation(lm):
    """Vector = normalised (mu_O - mu_U) of the output of decoder layer ``layer`` at the first token
    of each step, with O / U from quantile thresholds of step confidence and window variance; all
    recomputed here with a forward hook and per-step confidences, and compared with fit_rebalance.
    A sign flip (mu_U - mu_O) or the input of the layer instead of its output must fail."""
    model, tok = lm
    prompts = ["q: 12+7=\n", "q: 3+4?\n", "q: 9*9=\n", "q: 5-2?\n"]
    comps = ["\n\n".join(f"{i}+{j}={i + j}" for j in range(6)) for i in range(4)]
    layer = 0
    cfg = fit_rebalance(model, tok, prompts, comps, layer=layer, window=3, q_low=0.25, q_high=0.75, relax=True)
    captured = {}
    h = model.model.layers[layer].register_forward_hook(
        lambda m, a, o: captured.__setitem__("out", (o[0] if isinstance(o, tuple) else o)[0].detach().clone()))
    confs, vars_, firsts = [], [], []
    try:
        for prompt, comp in zip(prompts, comps):
            p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
            steps = comp.split("\n\n")
            step_ids = [tok(x + ("\n\n" if i < len(steps) - 1 else ""), add_special_tokens=False)["input_ids"]
                        for i, x in enumerate(steps)]
            ids = p_ids + sum(step_ids, [])
            with torch.no_grad():
                probs = torch.softmax(model(torch.tensor([ids])).logits[0].double(), -1)
            k, cs = len(p_ids), []
            for st_ids in step_ids:
                pmax = [float(probs[k - 1 + j].max()) for j in range(len(st_ids))]
                cs.append(math.prod(pmax) ** (1 / len(pmax)))
                firsts.append(captured["out"][k])
                k += len(st_ids)
            confs += cs
            vars_ += [float(np.var(cs[max(0, i - 2):i + 1])) for i in range(len(cs))]
    finally:
        h.remove()
    confs, vars_ = np.array(confs), np.array(vars_)
    tcl, tch = np.quantile(confs, [0.25, 0.75])
    tvl, tvh = np.quantile(vars_, [0.25, 0.75])
    o, u = (confs <= tcl) & (vars_ >= tvh), (confs >= tch) & (vars_ <= tvl)
    if not (o.any() and u.any()):
        o, u = confs <= tcl, confs >= tch
    assert cfg.info["n_over"] == o.sum() and cfg.info["n_under"] == u.sum()
    H = torch.stack(firsts).float()
    d = H[torch.from_numpy(o)].mean(0) - H[torch.from_numpy(u)].mean(0)
    torch.testing.assert_close(cfg.vector, d / d.norm(), atol=1e-4, rtol=1e-4)
    assert cfg.tau_c_low == pytest.approx(tcl, rel=1e-5) and cfg.tau_c_high == pytest.approx(tch, rel=1e-5)
    assert cfg.tau_v_low == pytest.approx(tvl, rel=1e-4, abs=1e-9)
    assert cfg.tau_v_high == pytest.approx(tvh, rel=1e-4, abs=1e-9)
    assert cfg.scale == pytest.approx(float(np.mean([float(x.norm()) for x in firsts])), rel=1e-4)
    assert cfg.window == 3 and cfg.strength == 1.0 and cfg.layer == layer


def test_hook_adds_plus_alpha_times_vector_once(lm):
    """The decoding hook shifts the layer output by +alpha_s * v at the scheduled step only."""
    model, tok = lm
    cfg = cfg_with(1.0)
    st = ReBalanceSteerer(model, tok, cfg)
    st._reset(2)
    st.pending = torch.tensor([0.7, -1.3])
    h = torch.randn(2, 1, 32)
    out = st._hook(None, (), (h, "rest"))
    torch.testing.assert_close(out[0], h + torch.tensor([0.7, -1.3])[:, None, None] * cfg.vector)
    assert out[1] == "rest" and st.alphas_applied == pytest.approx([0.7, -1.3])
    assert st._hook(None, (), (h, "rest")) is None          # consumed: nothing pending
    st.pending = torch.tensor([0.5, 0.0])
    torch.testing.assert_close(st._hook(None, (), h), h + torch.tensor([0.5, 0.0])[:, None, None] * cfg.vector)
    st.pending = torch.tensor([0.5, 0.0])
    assert st._hook(None, (), torch.randn(2, 3, 32)) is None  # prefill: untouched


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
    with pytest.raises(ValueError, match="empty prompt"):
        fit_rebalance(model, tok, ["", "q"], ["1\n\n2", "3\n\n4"], layer=0)
    with pytest.raises(TypeError, match="not single strings"):
        fit_rebalance(model, tok, "q", "1\n\n2", layer=0)
    with pytest.raises(ValueError, match="same positive number"):
        fit_rebalance(model, tok, ["q"], [], layer=0)
    with pytest.raises(ValueError, match="layer"):
        fit_rebalance(model, tok, ["q"], ["1"], layer=2)
    with pytest.raises(ValueError, match="strength"):
        cfg_with(-1.0)
    with pytest.raises(ValueError, match="thresholds"):
        cfg_with(1.0, tau_c_low=0.9, tau_c_high=0.1)
    with pytest.raises(ValueError, match="layer"):
        ReBalanceSteerer(model, tok, cfg_with(1.0, layer=5))
    with pytest.raises(ValueError, match="window"):
        window_variance([0.1], 0)
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        step_confidence([0.0])
    with pytest.raises(ValueError, match="q_low"):
        fit_rebalance(model, tok, ["a"], ["b"], layer=0, q_low=0.9, q_high=0.1)


def test_state_restarts_between_prompt_batches(lm):
    """Steering state (pending alpha, step confidences) must not leak from one batch to the next."""
    model, tok = lm
    cfg = cfg_with(50.0, tau_c_high=1.0)
    prompts = ["q: 12+7=\n", "q: 3+4?\n", "q: 9+9+9=\n", "q: 1?\n"]
    st = ReBalanceSteerer(model, tok, cfg, sep="1")
    st._ends_step = lambda b, token_id: True  # every token ends a step
    with st:
        both = generate(model, tok, prompts, 12, batch_size=2, logits_processor=[st.processor])
    st2 = ReBalanceSteerer(model, tok, cfg, sep="1")
    st2._ends_step = lambda b, token_id: True  # every token ends a step
    with st2:
        second = generate(model, tok, prompts[2:], 12, batch_size=2, logits_processor=[st2.processor])
    assert both[2:] == second


def test_control_regions_at_their_boundaries():
    cfg = cfg_with(1.0, tau_c_low=0.3, tau_c_high=0.7, tau_v_low=0.01, tau_v_high=0.05,
                   amplitudes=(1.0, 3.0, 0.5))
    t = lambda c: math.tanh(abs(c - 0.7))  # noqa: E731
    assert control(0.3, 0.05, cfg) == pytest.approx(-1.0 * t(0.3))    # both equalities: overthinking
    assert control(0.2, 0.03, cfg) == pytest.approx(-0.5 * t(0.2))    # low c, moderate v: middle
    assert control(0.5, 0.10, cfg) == pytest.approx(-0.5 * t(0.5))    # high v, middle c: middle
    assert control(0.9, 0.01, cfg) == pytest.approx(3.0 * t(0.9))     # v at tau_v^L: underthinking
    assert control(0.9, 0.03, cfg) == pytest.approx(0.5 * t(0.9))     # high c, moderate v: middle
    assert control(0.5, 0.0, cfg) == pytest.approx(-0.5 * t(0.5))     # low v, middle c: middle


def test_step_confidence_edges_and_messages():
    assert step_confidence([1.0, 1.0]) == 1.0
    with pytest.raises(ValueError, match=r"^max probabilities must lie in \(0, 1\]$"):
        step_confidence([0.5, 1.5])
    with pytest.raises(ValueError, match="^a step needs at least one token$"):
        step_confidence([])


def test_layer_range_exit_and_state(lm):
    model, tok = lm
    st = ReBalanceSteerer(model, tok, cfg_with(1.0, layer=0))           # the first layer is allowed
    assert st.bsz == 0 and st.pending.numel() == 0
    with pytest.raises(ValueError, match=r"^layer must be in \[0, 1\], got 2$"):
        ReBalanceSteerer(model, tok, cfg_with(1.0, layer=2))
    with pytest.raises(RuntimeError, match="boom"):                      # exceptions propagate
        with st:
            raise RuntimeError("boom")
    n0 = len(model.model.layers[0]._forward_hooks)
    with st:                                                             # re-entering after an exit works
        assert len(model.model.layers[0]._forward_hooks) == n0 + 1
    assert len(model.model.layers[0]._forward_hooks) == n0
    st.__exit__(None, None, None)                                        # a second exit is harmless
    assert st.bsz == 0 and st.pending.numel() == 0


def test_step_end_detection_with_multi_character_pieces(lm):
    model, tok = lm
    st = ReBalanceSteerer(model, tok, cfg_with(1.0), sep="ab")
    st._reset(1)
    st._pieces.update({1001: "abca" + "ab", 1002: "b", 1003: "aba", 1004: "c"})
    assert [st._ends_step(0, i) for i in (1001, 1002)] == [True, False]   # nothing left after the last "ab"
    st._reset(1)
    assert [st._ends_step(0, i) for i in (1003, 1002)] == [True, True]    # "a" kept across the end
    st2 = ReBalanceSteerer(model, tok, cfg_with(1.0), sep="\n\n")
    st2._reset(1)
    st2._pieces.update({1001: "a\n\n\nb\n\n", 1002: "\n"})
    assert [st2._ends_step(0, i) for i in (1001, 1002)] == [True, False]
    st3 = ReBalanceSteerer(model, tok, cfg_with(1.0), sep="X")
    st3._reset(1)
    st3._pieces.update({1001: "aX", 1002: "b", 1004: "c"})
    assert [st3._ends_step(0, i) for i in (1004, 1002, 1001, 1002)] == [False, False, True, False]


def test_hook_keeps_dtype_and_records_nonzero_alphas_only(lm):
    model, tok = lm
    cfg = cfg_with(1.0)
    st = ReBalanceSteerer(model, tok, cfg)
    st._reset(2)
    st.pending = torch.tensor([0.75, 0.0])
    h = torch.randn(2, 1, 32).to(torch.bfloat16)
    out = st._hook(None, (), h)
    assert out.dtype == torch.bfloat16 and st.alphas_applied == [0.75]
    st.pending = torch.tensor([1.0, 0.0])
    st._hook(None, (), h)
    assert st.alphas_applied == [0.75, 1.0]


def test_observer_reads_each_step_from_the_distributions_that_wrote_it(lm):
    """Feed the tracker by hand: row 0 writes "a", "\\n", "\\n" (a step ends with the second newline),
    row 1 writes "a", "b", "c". The step confidence of row 0 is the geometric mean of the max
    probabilities of the three distributions that produced its tokens."""
    model, tok = lm
    cfg = cfg_with(1.0, tau_c_high=1.0)
    st = ReBalanceSteerer(model, tok, cfg, sep="\n\n")
    V = len(tok)
    g = torch.Generator().manual_seed(0)
    ids = torch.tensor([tok("q=", add_special_tokens=False)["input_ids"]] * 2)
    toks = [("a", "a"), ("\n", "b"), ("\n", "c")]
    maxp = []
    for step, (t0, t1) in enumerate(toks + [("x", "x")]):
        scores = torch.randn(2, V, generator=g) * 3
        st.processor(ids, scores)
        maxp.append(torch.softmax(scores, -1).max(-1).values)
        if step < len(toks):
            new = torch.tensor([[tok.convert_tokens_to_ids(t0)], [tok.convert_tokens_to_ids(t1)]])
            ids = torch.cat([ids, new], 1)
    assert st.conf[1] == [] and len(st.conf[0]) == 1
    ref = math.exp(sum(math.log(float(m[0])) for m in maxp[:3]) / 3)
    assert st.conf[0][0] == pytest.approx(ref, rel=1e-5)
    assert float(st.pending[0]) == pytest.approx(control(ref, 0.0, cfg)) and float(st.pending[1]) == 0.0
