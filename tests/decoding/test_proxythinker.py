"""Tests of ProxyThinker (arXiv:2505.24872), Eq. 1: z = z_base + alpha (z_expert - z_amateur)."""
import pytest
import torch
from transformers import LogitsProcessorList, PreTrainedTokenizerFast

from iclr26.models.testing import widen_
from iclr26.models import TinyLMConfig, build_tiny_lm
from iclr26.decoding.proxythinker import (
    ProxyThinkerLogitsProcessor,
    check_same_tokenizer,
    layer_pruned_copy,
    proxythinker_generate,
)

CHARS = list("abcdefghijklmnopqrstuvwxyz0123456789 +-=.,?\n")


def tiny_lm(seed, vocab=64, layers=2, std=0.4):
    """A tiny Llama whose weight matrices are drawn at std 0.4 (20x the usual 0.02): peaked,
    position-dependent next-token distributions instead of near-uniform ones."""
    torch.manual_seed(seed)
    model = build_tiny_lm(TinyLMConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=layers), vocab,
                          eos_token_id=1, bos_token_id=2).eval()
    widen_(model, std, seed)
    return model


def char_tokenizer(chars=CHARS):
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders
    vocab = {"<pad>": 0, "</s>": 1, "<s>": 2}
    for c in chars:
        vocab.setdefault(c, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>",
                                   bos_token="<s>")


@pytest.fixture(scope="module")
def trio():
    return tiny_lm(0, layers=3), tiny_lm(1), tiny_lm(2)


PROMPTS = ["12+7=", "what is 3+4?", "a"]


@pytest.mark.parametrize("mask_from", ["attention_mask", "pad_token_id"])
def test_equation_1_against_full_forward(trio, mask_from):
    """Eq. 1 at every step: processor output == z_base + alpha (z_exp - z_ama) from full forwards,
    with left padding and incremental KV caches."""
    base, exp, ama = trio
    tok = char_tokenizer()
    tok.padding_side = "left"
    enc = tok(PROMPTS, return_tensors="pt", padding=True)
    kw = ({"prompt_attention_mask": enc["attention_mask"]} if mask_from == "attention_mask"
          else {"pad_token_id": tok.pad_token_id})
    proc = ProxyThinkerLogitsProcessor(exp, ama, alpha=0.7, **kw)
    ids, mask = enc["input_ids"], enc["attention_mask"]
    for _ in range(4):
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        with torch.no_grad():
            zb = base(ids, attention_mask=mask, position_ids=pos).logits[:, -1].float()
            ze = exp(ids, attention_mask=mask, position_ids=pos).logits[:, -1].float()
            za = ama(ids, attention_mask=mask, position_ids=pos).logits[:, -1].float()
        out = proc(ids, zb)
        torch.testing.assert_close(out, zb + 0.7 * (ze - za), atol=1e-4, rtol=1e-4)
        nxt = out.argmax(-1, keepdim=True)
        ids = torch.cat([ids, nxt], 1)
        mask = torch.cat([mask, torch.ones_like(nxt)], 1)


def test_hand_computed_logits():
    """Eq. 1 on numbers by hand: 1 + 0.5*(3 - 1) = 2."""
    class Const(torch.nn.Module):
        def __init__(self, v):
            super().__init__()
            self.v = torch.nn.Parameter(torch.tensor(v))
            self.config = object()

        def forward(self, input_ids, **kw):
            from types import SimpleNamespace
            b, t = input_ids.shape
            return SimpleNamespace(logits=self.v.expand(b, t, -1), past_key_values=None)

    proc = ProxyThinkerLogitsProcessor(Const([3.0, 0.0]), Const([1.0, 2.0]), alpha=0.5, pad_token_id=0)
    out = proc(torch.tensor([[5]]), torch.tensor([[1.0, 1.0]]))
    torch.testing.assert_close(out, torch.tensor([[2.0, 0.0]]))


def test_zero_alpha_equals_base_greedy(trio):
    """Reduction: alpha = 0 gives exactly the base model's greedy output."""
    base, exp, ama = trio
    tok = char_tokenizer()
    from iclr26.models.generation import generate

    got = proxythinker_generate(base, exp, ama, tok, PROMPTS, max_new_tokens=8, alpha=0.0)
    assert got == generate(base, tok, PROMPTS, 8)


def test_expert_equal_amateur_is_base(trio):
    """Reduction: an expert identical to the amateur leaves the base distribution unchanged."""
    base, exp, _ = trio
    tok = char_tokenizer()
    a = proxythinker_generate(base, exp, exp, tok, PROMPTS, max_new_tokens=8, alpha=1.0)
    b = proxythinker_generate(base, exp, exp, tok, PROMPTS, max_new_tokens=8, alpha=0.0)
    assert a == b


def test_guidance_changes_output_and_is_deterministic(trio):
    base, exp, ama = trio
    tok = char_tokenizer()
    a = proxythinker_generate(base, exp, ama, tok, PROMPTS, max_new_tokens=8, alpha=5.0)
    b = proxythinker_generate(base, exp, ama, tok, PROMPTS, max_new_tokens=8, alpha=5.0)
    c = proxythinker_generate(base, exp, ama, tok, PROMPTS, max_new_tokens=8, alpha=0.0)
    assert a == b and a != c


def test_logits_processor_in_generate_and_reuse(trio):
    """Contract: works inside model.generate and resets its caches for a new batch."""
    base, exp, ama = trio
    tok = char_tokenizer()
    tok.padding_side = "left"
    proc = ProxyThinkerLogitsProcessor(exp, ama, alpha=1.0, pad_token_id=0)
    enc = tok(["abc", "xyz"], return_tensors="pt")
    enc2 = tok(["abcdefghijk", "xyz0123456789"], return_tensors="pt", padding=True)
    kw = dict(max_new_tokens=5, do_sample=False, pad_token_id=0,
              logits_processor=LogitsProcessorList([proc]))
    o1 = base.generate(**enc, **kw)
    o2 = base.generate(**enc2, **kw)  # longer prompts, same batch size: caches must restart
    o3 = base.generate(**enc, **kw)
    assert torch.equal(o1, o3)
    fresh = ProxyThinkerLogitsProcessor(exp, ama, alpha=1.0, pad_token_id=0)
    assert torch.equal(o2, base.generate(**enc2, **{**kw, "logits_processor": LogitsProcessorList([fresh])}))


def test_no_amateur_ablation(trio):
    base, exp, _ = trio
    ids = torch.tensor([[3, 4, 5]])
    with torch.no_grad():
        zb = base(ids).logits[:, -1]
        ze = exp(ids).logits[:, -1]
    out = ProxyThinkerLogitsProcessor(exp, None, alpha=0.5, pad_token_id=0)(ids, zb)
    torch.testing.assert_close(out, zb + 0.5 * ze, atol=1e-5, rtol=1e-5)


def test_layer_pruned_copy_shares_weights(trio):
    base = trio[0]
    pruned = layer_pruned_copy(base, 1)
    assert len(pruned.model.layers) == 1 and len(base.model.layers) == 3
    assert pruned.model.layers[0].self_attn.q_proj.weight is base.model.layers[0].self_attn.q_proj.weight
    ids = torch.tensor([[3, 4, 5, 6]])
    with torch.no_grad():
        full = base(ids).logits
        h = base.model.embed_tokens(ids)
        pos = torch.arange(4)[None]
        pe = base.model.rotary_emb(h, pos)
        h = base.model.layers[0](h, attention_mask=None, position_embeddings=pe, position_ids=pos)
        h = h[0] if isinstance(h, tuple) else h
        ref = base.lm_head(base.model.norm(h))
        got = pruned(ids).logits
    assert not torch.allclose(full, got)
    torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)
    # incremental stepping through the pruned copy works (cache sized for its own depth)
    out = pruned.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=0)
    assert out.shape == (1, 7)


def test_rejects_different_tokenizers():
    with pytest.raises(ValueError, match="shared tokenizer"):
        check_same_tokenizer(char_tokenizer(), char_tokenizer(CHARS[::-1]))


def test_rejects_bad_alpha_and_args(trio):
    base, exp, ama = trio
    tok = char_tokenizer()
    with pytest.raises(ValueError, match="alpha"):
        ProxyThinkerLogitsProcessor(exp, ama, alpha=float("nan"), pad_token_id=0)
    with pytest.raises(TypeError, match="alpha"):
        ProxyThinkerLogitsProcessor(exp, ama, alpha="big", pad_token_id=0)
    with pytest.raises(TypeError, match="sequence of strings"):
        proxythinker_generate(base, exp, ama, tok, "abc")
    with pytest.raises(ValueError, match="max_new_tokens"):
        proxythinker_generate(base, exp, ama, tok, ["abc"], max_new_tokens=0)
    with pytest.raises(ValueError, match="shared tokenizer"):
        proxythinker_generate(base, exp, ama, tok, ["abc"], expert_tokenizer=char_tokenizer(CHARS[::-1]))
    with pytest.raises(ValueError, match="n_keep"):
        layer_pruned_copy(base, 0)


def test_rejects_bad_prompts_sampling_and_padding(trio):
    base, exp, ama = trio
    tok = char_tokenizer()
    with pytest.raises(ValueError, match=r"prompt 1 is empty \(.*has no tokens\)"):
        proxythinker_generate(base, exp, ama, tok, ["abc", ""])
    with pytest.raises(ValueError, match="prompts is empty"):
        proxythinker_generate(base, exp, ama, tok, [])
    with pytest.raises(TypeError, match="prompt 0 must be a string"):
        proxythinker_generate(base, exp, ama, tok, [3])
    for t in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
            proxythinker_generate(base, exp, ama, tok, ["abc"], do_sample=True, temperature=t)
    for p in (0.0, 1.5, float("nan")):
        with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\]"):
            proxythinker_generate(base, exp, ama, tok, ["abc"], do_sample=True, top_p=p)
    with pytest.raises(TypeError, match="temperature and top_p must be real numbers"):
        proxythinker_generate(base, exp, ama, tok, ["abc"], temperature="hot")
    with pytest.raises(ValueError, match="prompt_attention_mask.*or pad_token_id.*neither was given"):
        ProxyThinkerLogitsProcessor(exp, ama)
    proc = ProxyThinkerLogitsProcessor(exp, ama, prompt_attention_mask=torch.ones(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"prompt_attention_mask has shape \(2, 3\) but the prompts have "
                                         r"shape \(1, 4\)"):
        proc(torch.tensor([[3, 4, 5, 6]]), torch.zeros(1, 64))
    # a matching mask is used as given; top_p = 1 and temperature 1 are allowed
    assert proxythinker_generate(base, exp, ama, tok, ["abc"], max_new_tokens=2, top_p=1.0) is not None


def test_sampling_arguments_and_defaults_reach_generate(trio):
    import inspect
    from iclr26.models.generation import generate

    base, exp, ama = trio
    tok = char_tokenizer()
    kw = dict(do_sample=True, temperature=0.6, top_p=0.8, seed=3)
    got = proxythinker_generate(base, exp, ama, tok, PROMPTS, max_new_tokens=6, alpha=0.0, **kw)
    assert got == generate(base, tok, PROMPTS, 6, **kw)
    assert got != proxythinker_generate(base, exp, ama, tok, PROMPTS, max_new_tokens=6, alpha=0.0,
                                        **{**kw, "temperature": 1.0, "top_p": 1.0})
    one = proxythinker_generate(base, exp, ama, tok, PROMPTS[:1], max_new_tokens=1, alpha=1.0, batch_size=1)
    assert len(one) == 1
    d = inspect.signature(proxythinker_generate).parameters
    assert (d["max_new_tokens"].default, d["temperature"].default, d["top_p"].default, d["batch_size"].default,
            d["do_sample"].default) == (256, 1.0, 1.0, 8, False)


def test_vocabularies_of_different_size_are_cut_to_the_shared_part(trio):
    base, exp, ama = trio
    big_ama = tiny_lm(5, vocab=70)
    ids = torch.tensor([[3, 4, 5]])
    with torch.no_grad():
        ze, za = exp(ids).logits[:, -1], big_ama(ids).logits[:, -1]
    zb = torch.randn(1, 72)
    out = ProxyThinkerLogitsProcessor(exp, big_ama, alpha=0.5, pad_token_id=0)(ids, zb)
    torch.testing.assert_close(out[:, :64], zb[:, :64] + 0.5 * (ze - za[:, :64]), atol=1e-5, rtol=1e-5)
    assert torch.isinf(out[:, 64:]).all() and (out[:, 64:] < 0).all()
    zb_small = torch.randn(1, 60)
    out = ProxyThinkerLogitsProcessor(exp, big_ama, alpha=0.5, pad_token_id=0)(ids, zb_small)
    torch.testing.assert_close(out, zb_small + 0.5 * (ze - za[:, :64])[:, :60], atol=1e-5, rtol=1e-5)


def test_error_messages_name_the_models(trio):
    base, exp, ama = trio
    tok = char_tokenizer()
    other = char_tokenizer(CHARS[::-1])
    with pytest.raises(ValueError, match="the base and expert tokenizers differ"):
        proxythinker_generate(base, exp, ama, tok, ["abc"], expert_tokenizer=other)
    with pytest.raises(ValueError, match="the base and amateur tokenizers differ"):
        proxythinker_generate(base, exp, ama, tok, ["abc"], amateur_tokenizer=other)
    with pytest.raises(ValueError, match="the amateur model has 40 output logits and the base 64"):
        proxythinker_generate(base, exp, tiny_lm(6, vocab=40), tok, ["abc"])
    with pytest.raises(ValueError, match="the expert model has 40 output logits"):
        proxythinker_generate(base, tiny_lm(6, vocab=40), None, tok, ["abc"])
    with pytest.raises(ValueError, match="^batch_size must be >= 1, got 0$"):
        proxythinker_generate(base, exp, ama, tok, ["abc"], batch_size=0)
    nopad = char_tokenizer()
    nopad.pad_token = None
    with pytest.raises(ValueError, match=r"^the tokenizer needs a pad token \(left padding of prompt batches\); "
                                         r"set tokenizer.pad_token = tokenizer.eos_token$"):
        proxythinker_generate(base, exp, ama, nopad, ["abc"])


def tiny_qwen2(seed=7, layers=3, std=0.4):
    """A tiny Qwen2 (its config carries ``layer_types``), wide-initialised like :func:`tiny_lm`."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      pad_token_id=0, eos_token_id=1, bos_token_id=2)
    model = Qwen2ForCausalLM(cfg).eval()
    widen_(model, std, seed)
    return model


def test_layer_pruned_copy_config_and_layer_types():
    """The copy's config describes its own depth (layer_types cut too); the original is untouched."""
    model = tiny_qwen2()
    pruned = layer_pruned_copy(model, 2)
    assert pruned.config.num_hidden_layers == 2 and pruned.model.config is pruned.config
    assert pruned.config.layer_types == ["full_attention"] * 2
    assert model.config.num_hidden_layers == 3 and model.config.layer_types == ["full_attention"] * 3
    assert len(model.model.layers) == 3 and pruned.model is not model.model
    full = layer_pruned_copy(model, 3)  # the upper end of [1, n] is allowed
    ids = torch.tensor([[3, 4, 5, 6]])
    with torch.no_grad():
        torch.testing.assert_close(full(ids).logits, model(ids).logits)
    out = pruned.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=0)
    assert out.shape == (1, 7)


def test_layer_pruned_copy_rejections(trio):
    base = trio[0]
    with pytest.raises(TypeError, match=r"needs a decoder-only transformers model with `\.model\.layers` "
                                        r"\(Llama/Qwen2/Gemma style\), got Linear$"):
        layer_pruned_copy(torch.nn.Linear(2, 2), 1)

    class NoLayers(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = torch.nn.Linear(2, 2)

    with pytest.raises(TypeError, match="got NoLayers"):
        layer_pruned_copy(NoLayers(), 1)
    for bad in (True, 1.0, 4, -1):
        with pytest.raises(ValueError, match=r"^n_keep must be an integer in \[1, 3\] \(the model's layer count\), "
                                             rf"got {bad!r}$"):
            layer_pruned_copy(base, bad)


def test_generate_passes_its_arguments_and_defaults_on(trio, monkeypatch):
    """What proxythinker_generate hands to the shared generate(): defaults, batch size, extra kwargs
    and one ProxyThinker processor built with the tokenizer's pad id."""
    import iclr26.models.generation as generation

    base, exp, ama = trio
    tok = char_tokenizer()
    seen = {}

    def fake_generate(model, tokenizer, prompts, max_new_tokens, **kw):
        seen.update(model=model, prompts=prompts, max_new_tokens=max_new_tokens, **kw)
        return ["x"] * len(prompts)

    monkeypatch.setattr(generation, "generate", fake_generate)
    assert proxythinker_generate(base, exp, ama, tok, PROMPTS) == ["x"] * 3
    assert seen["model"] is base and seen["prompts"] == PROMPTS
    assert (seen["max_new_tokens"], seen["do_sample"], seen["temperature"], seen["top_p"], seen["seed"],
            seen["batch_size"]) == (256, False, 1.0, 1.0, None, 8)
    (proc,) = seen["logits_processor"]
    assert isinstance(proc, ProxyThinkerLogitsProcessor) and proc.alpha == 0.5 and proc.pad_token_id == 0
    seen.clear()
    proxythinker_generate(base, exp, None, tok, PROMPTS, 5, batch_size=2, min_new_tokens=3, alpha=2)
    assert (seen["max_new_tokens"], seen["batch_size"], seen["min_new_tokens"]) == (5, 2, 3)
    assert seen["logits_processor"][0].alpha == 2.0 and seen["logits_processor"][0].amateur is None


def test_tokenizer_check_message_counts():
    """The mismatch message counts tokens only in each tokenizer and tokens with moved ids."""
    a, b = char_tokenizer(list("abcdef")), char_tokenizer(list("bacdxy"))
    msg = (r"^ProxyThinker needs one shared tokenizer: the base and expert tokenizers differ \(9 vs 9 tokens; "
           r"2 only in base, 2 only in expert, 2 with different ids\)\. Use models of one family that share a "
           r"tokenizer \(e\.g\. Qwen2\.5-Coder-0\.5B/1\.5B\)\.$")
    with pytest.raises(ValueError, match=msg):
        check_same_tokenizer(a, b)
    with pytest.raises(ValueError, match=r"differ \(9 vs 10 tokens; 0 only in small, 1 only in large, 0 with"):
        check_same_tokenizer(a, char_tokenizer(list("abcdefg")), ("small", "large"))
    assert check_same_tokenizer(a, char_tokenizer(list("abcdef"))) is None  # equal vocabularies pass


def test_argument_checks_do_not_depend_on_sampling(trio):
    """top_p and temperature are checked even for greedy decoding (generate() ignores them there)."""
    base, exp, ama = trio
    tok = char_tokenizer()
    for p in (0.0, 1.5):
        with pytest.raises(ValueError, match=r"^top_p must be in \(0, 1\], got "):
            proxythinker_generate(base, exp, ama, tok, ["abc"], top_p=p)
    with pytest.raises(ValueError, match=r"^temperature must be a finite number > 0, got inf$"):
        proxythinker_generate(base, exp, ama, tok, ["abc"], temperature=float("inf"))
    with pytest.raises(TypeError, match=r"^prompts must be a sequence of strings, not a single string$"):
        proxythinker_generate(base, exp, ama, tok, "abc")
    with pytest.raises(ValueError, match=r"^prompts is empty: give at least one prompt$"):
        proxythinker_generate(base, exp, ama, tok, [])
    with pytest.raises(TypeError, match=r"^prompt 1 must be a string, got int$"):
        proxythinker_generate(base, exp, ama, tok, ["abc", 3])


def test_vocabulary_size_check_bounds(trio):
    base, exp, _ = trio
    tok = char_tokenizer()
    exact = tiny_lm(6, vocab=len(tok))  # exactly the tokenizer's size is enough
    assert len(proxythinker_generate(base, exp, exact, tok, ["abc"], max_new_tokens=1)) == 1
    # the amateur is checked even in a call where the expert slot is empty
    with pytest.raises(ValueError, match="the amateur model has 40 output logits"):
        proxythinker_generate(base, None, tiny_lm(6, vocab=40), tok, ["abc"])


def test_processor_rejects_non_models_by_name():
    with pytest.raises(ValueError, match=r"^ProxyThinkerLogitsProcessor needs the prompts' padding: give "
                                         r"prompt_attention_mask \(the mask of the next generate call\) or "
                                         r"pad_token_id \(left padding read off the prompts\); neither was given$"):
        ProxyThinkerLogitsProcessor(tiny_lm(1), None)
    with pytest.raises(TypeError, match=r"^expert must be a transformers causal LM, got Linear$"):
        ProxyThinkerLogitsProcessor(torch.nn.Linear(2, 2), None, pad_token_id=0)
    with pytest.raises(TypeError, match=r"^amateur must be a transformers causal LM, got Linear$"):
        ProxyThinkerLogitsProcessor(tiny_lm(1), torch.nn.Linear(2, 2), pad_token_id=0)


def test_repeated_call_on_the_same_ids_and_low_precision_scores(trio):
    """Calling twice on the same ids recomputes (no empty step); bf16 scores stay bf16 with the
    guidance term cast to the scores' dtype."""
    base, exp, ama = trio
    ids = torch.tensor([[3, 4, 5, 6], [0, 7, 8, 9]])
    mask = torch.tensor([[1, 1, 1, 1], [0, 1, 1, 1]])
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        zb = base(ids, attention_mask=mask, position_ids=pos).logits[:, -1]
        ze = exp(ids, attention_mask=mask, position_ids=pos).logits[:, -1]
        za = ama(ids, attention_mask=mask, position_ids=pos).logits[:, -1]
    proc = ProxyThinkerLogitsProcessor(exp, ama, alpha=0.7, pad_token_id=0)
    first = proc(ids, zb)
    again = proc(ids, zb)
    torch.testing.assert_close(first, again)
    torch.testing.assert_close(again, zb + 0.7 * (ze - za), atol=1e-4, rtol=1e-4)
    zb16 = zb.to(torch.bfloat16)
    out = ProxyThinkerLogitsProcessor(exp, ama, alpha=0.7, pad_token_id=0)(ids, zb16)
    assert out.dtype == torch.bfloat16
    delta16 = (ze - za).float().to(torch.bfloat16)
    assert torch.equal(out, zb16 + 0.7 * delta16)
    assert not torch.equal(zb16 + 0.7 * delta16, (zb16.float() + 0.7 * (ze - za)).to(torch.bfloat16))


# --- the claim check's helpers (experiment.py) -------------------------------------------------

def test_experiment_splits_are_disjoint_sized_and_level_mixed():
    from iclr26.decoding.proxythinker import experiment as ex

    cfg = dict(ex.SCALES["quick"], n_train=11, n_val=7, n_test=9)
    data = ex.splits(cfg, 0)
    assert {k: len(v) for k, v in data.items()} == {"test": 9, "val": 7, "train": 11}
    exprs = {k: {p.metadata["expression"] for p in v} for k, v in data.items()}
    assert all(len(exprs[k]) == len(data[k]) for k in data)          # no repeats within a split
    assert not (exprs["train"] & exprs["val"] or exprs["train"] & exprs["test"] or exprs["val"] & exprs["test"])
    levels = [p.metadata["level"] for p in data["test"]]
    assert levels[:4] == [3, 4, 3, 4] and sorted(set(levels)) == [3, 4]
    assert ex.splits(cfg, 0)["test"][0].question == data["test"][0].question   # deterministic
    assert ex.splits(cfg, 1)["test"][0].question != data["test"][0].question


def test_experiment_quick_splits_at_full_size_are_disjoint_and_test_is_stable():
    from iclr26.decoding.proxythinker import experiment as ex

    cfg = ex.SCALES["quick"]
    data = ex.splits(cfg, 0)
    assert {k: len(v) for k, v in data.items()} == {"test": cfg["n_test"], "val": cfg["n_val"], "train": cfg["n_train"]}
    assert cfg["n_test"] >= 100 and cfg["n_train"] >= 256 and cfg["n_val"] >= 64
    exprs = {k: {p.metadata["expression"] for p in v} for k, v in data.items()}
    assert sum(map(len, exprs.values())) == sum(map(len, data.values()))     # all distinct, across splits too
    for k in data:                                                          # levels 3 and 4 in equal parts
        lv = [p.metadata["level"] for p in data[k]]
        assert lv.count(3) == lv.count(4) == len(lv) // 2
    # the test split is drawn first: resizing the other splits leaves it unchanged
    small = ex.splits(dict(cfg, n_train=64, n_val=32), 0)
    assert [p.question for p in small["test"]] == [p.question for p in data["test"]]


def test_experiment_prompt_starts_the_answer():
    from iclr26.data.math import arithmetic_problems
    from iclr26.decoding.proxythinker import experiment as ex

    p = arithmetic_problems(1, seed=0, difficulty=3)[0]
    s = ex.prompt_for(p)
    assert s.endswith(f"Q: {p.question}\nA: {p.metadata['expression']} =")
    assert s.startswith("Q: Calculate 12 - 5 * 2.\nA: 12 - 5 * 2 = 2\n")
    assert ex._answer(" 42\nQ: Calculate") == " 42"
    assert ex._score([" 42\nQ: 7", " 7\n42"], [type(p)("q", "42", None, {}), type(p)("q", "42", None, {})]) == [1, 0]


def test_experiment_rejection_sampling_keeps_distinct_correct_samples(monkeypatch):
    import iclr26.models.generation_cache as gc
    from iclr26.data.math import Problem
    from iclr26.decoding.proxythinker import experiment as ex

    probs = [Problem("Calculate 2 + 3.", "5", None, {"expression": "2 + 3"}),
             Problem("Calculate 4 * 4.", "16", None, {"expression": "4 * 4"})]
    fake = [" 5\nQ", " 5\nA", " 6", " 5.0", " 15", " 17", " 1", "x"]
    seen = {}

    def fake_generate(model, tok, prompts, max_new, **kw):
        seen.update(prompts=prompts, max_new=max_new, **kw)
        return fake

    monkeypatch.setattr(gc, "generate_cached", fake_generate)
    cfg = dict(k=4, max_new_tokens=10, temperature=1.0, batch_size=8)
    rows, stats = ex.rft_rows(None, None, probs, cfg)
    assert seen["do_sample"] is True and seen["temperature"] == 1.0 and seen["prompts"][3] == ex.prompt_for(probs[0])
    assert seen["prompts"][4] == ex.prompt_for(probs[1]) and len(seen["prompts"]) == 8
    assert [r["completion"] for r in rows] == [" 5\n", " 5.0\n"]          # distinct correct ones, problem 0 only
    assert all(r["prompt"] == ex.prompt_for(probs[0]) for r in rows)
    assert stats == dict(samples=8, correct_samples=3, problems_solved=1, rows=2)
    assert seen["batch_size"] == 8                                    # no sample_batch: the greedy batch
    ex.rft_rows(None, None, probs, dict(cfg, sample_batch=5))
    assert seen["batch_size"] == 5 and seen["seed"] == 0


def test_experiment_flip_counter_counts_changed_argmax_of_live_rows():
    from iclr26.decoding.proxythinker import experiment as ex

    def proc(ids, scores):                       # flips row 0 to token 3, leaves row 1 alone
        out = scores.clone()
        out[0, 3] = 100.0
        return out

    fc = ex._FlipCounter(proc, stop_ids={1})
    scores = torch.tensor([[5.0, 0, 0, 0], [5.0, 0, 0, 0]])
    ids = torch.tensor([[7, 8], [7, 8]])
    out = fc(ids, scores)
    assert torch.equal(out.argmax(-1), torch.tensor([3, 0])) and (fc.flips, fc.steps) == (1, 2)
    fc(torch.tensor([[7, 8, 3], [7, 8, 1]]), scores)          # row 1 has stopped: not counted
    assert (fc.flips, fc.steps) == (2, 3)
    fc(torch.tensor([[7, 8], [7, 9]]), scores)                # a new batch starts: both rows live again
    assert (fc.flips, fc.steps) == (3, 5)
