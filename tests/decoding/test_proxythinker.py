"""Tests of ProxyThinker (arXiv:2505.24872), Eq. 1: z = z_base + alpha (z_expert - z_amateur)."""
import pytest
import torch
from transformers import LogitsProcessorList, PreTrainedTokenizerFast

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
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, std, generator=g)
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
