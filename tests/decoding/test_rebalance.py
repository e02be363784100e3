"""Tests of ReBalance: step confidence, window variance, the dynamic control function, hooks."""
import math

import numpy as np
import pytest
import torch
from transformers import LogitsProcessor

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


@pytest.fixture(scope="module")
def lm():
    return random_char_lm(seed=0)


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


def test_rejections(lm):
    model, tok = lm
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
