"""Tests of iclr26.models.generation_cache: hits return what generate returns, every input that can
change the output changes the key, and requests the cache cannot key are refused."""
from __future__ import annotations

import json

import pytest
import torch

from iclr26.models import SimpleTokenizer, TinyLMConfig, build_tiny_lm
from iclr26.models import generation_cache as gc
from iclr26.models.generation import generate


@pytest.fixture()
def tiny():
    tok = SimpleTokenizer.from_texts(["0123456789+-=* ", "abcdefghij"], level="char")
    torch.manual_seed(0)
    model = build_tiny_lm(TinyLMConfig(), tok.vocab_size).eval()
    with torch.no_grad():  # a wide init, so that outputs depend visibly on the weights
        for p in model.parameters():
            p.normal_(0.0, 0.4)
    return model, tok


def test_hit_returns_generate_output_without_generating(tiny, tmp_path, monkeypatch):
    model, tok = tiny
    prompts = ["12+", "3", "ab"]
    want, want_ids = generate(model, tok, prompts, 6, return_token_ids=True)
    got = gc.generate_cached(model, tok, prompts, 6, cache_dir=tmp_path)
    assert got == want
    files = list(tmp_path.rglob("*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["token_ids"] == want_ids

    def boom(*a, **k):
        raise AssertionError("generate called on a cache hit")

    monkeypatch.setattr(gc, "generate", boom)
    assert gc.generate_cached(model, tok, prompts, 6, cache_dir=tmp_path) == want
    assert gc.generate_cached(model, tok, prompts, 6, cache_dir=tmp_path, return_token_ids=True) == (want, want_ids)


def test_seeded_sampling_is_cached_and_matches_generate(tiny, tmp_path):
    model, tok = tiny
    kw = dict(do_sample=True, temperature=1.3, seed=5)
    want = generate(model, tok, ["12+", "3"], 6, **kw)
    assert gc.generate_cached(model, tok, ["12+", "3"], 6, cache_dir=tmp_path, **kw) == want
    assert gc.generate_cached(model, tok, ["12+", "3"], 6, cache_dir=tmp_path, **kw) == want


def test_key_changes_with_every_input(tiny):
    model, tok = tiny
    base = gc.request_key(model, tok, ["12+", "3"], 6)
    assert base == gc.request_key(model, tok, ["12+", "3"], 6)
    variants = [
        gc.request_key(model, tok, ["12+", "4"], 6),
        gc.request_key(model, tok, ["3", "12+"], 6),
        gc.request_key(model, tok, ["12+", "3"], 7),
        gc.request_key(model, tok, ["12+", "3"], 6, batch_size=1),
        gc.request_key(model, tok, ["12+", "3"], 6, do_sample=True, seed=1),
        gc.request_key(model, tok, ["12+", "3"], 6, do_sample=True, seed=2),
        gc.request_key(model, tok, ["12+", "3"], 6, do_sample=True, seed=1, temperature=0.7),
        gc.request_key(model, tok, ["12+", "3"], 6, do_sample=True, seed=1, top_p=0.9),
    ]
    assert len({base, *variants}) == len(variants) + 1
    tok2 = SimpleTokenizer.from_texts(["0123456789+-=* ", "abcdefghijk"], level="char")
    assert gc.request_key(model, tok2, ["12+", "3"], 6) != base
    fp = gc.model_fingerprint(model)
    with torch.no_grad():
        next(model.parameters()).view(-1)[0] += 1e-3
    assert gc.model_fingerprint(model) != fp
    assert gc.request_key(model, tok, ["12+", "3"], 6) != base
    assert gc.model_fingerprint(model.to(torch.bfloat16)) != gc.model_fingerprint(model.to(torch.float32))


def test_refuses_what_it_cannot_key(tiny, tmp_path):
    model, tok = tiny
    with pytest.raises(TypeError, match="logits_processor"):
        gc.generate_cached(model, tok, ["1"], 3, cache_dir=tmp_path, logits_processor=lambda i, s: s)
    with pytest.raises(TypeError, match="return_scores"):
        gc.generate_cached(model, tok, ["1"], 3, cache_dir=tmp_path, return_scores=True)
    with pytest.raises(ValueError, match="seed"):
        gc.generate_cached(model, tok, ["1"], 3, cache_dir=tmp_path, do_sample=True)
    with pytest.raises(TypeError, match="prompts must be strings"):
        gc.generate_cached(model, tok, [1], 3, cache_dir=tmp_path)
    with pytest.raises(TypeError, match="plain keyword values"):
        gc.generate_cached(model, tok, ["1"], 3, cache_dir=tmp_path, bad_words_ids=[[1]])
    assert not list(tmp_path.rglob("*.json"))


def test_default_directory_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("ICLR26_GENERATION_CACHE", str(tmp_path / "g"))
    assert gc.generation_cache_dir() == tmp_path / "g"
    monkeypatch.delenv("ICLR26_GENERATION_CACHE")
    monkeypatch.setenv("ICLR26_CACHE", str(tmp_path / "models"))
    assert gc.generation_cache_dir() == tmp_path / "generations"


def test_a_failed_generation_leaves_no_entry(tiny, tmp_path, monkeypatch):
    model, tok = tiny

    def fail(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(gc, "generate", fail)
    with pytest.raises(KeyboardInterrupt):
        gc.generate_cached(model, tok, ["1"], 3, cache_dir=tmp_path)
    assert not list(tmp_path.rglob("*"))
