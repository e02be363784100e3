"""Tests of iclr26.models.lora on a tiny Llama: LoRA starts as the identity, trains only adapters,
and an adapter survives a save/reload; TRL configs get CPU defaults."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("peft")

from iclr26.models import SimpleTokenizer, TinyLMConfig, build_tiny_lm  # noqa: E402
from iclr26.models import lora  # noqa: E402


@pytest.fixture()
def tiny():
    tok = SimpleTokenizer.from_texts(["0123456789+-=* ", "abcdefghij"], level="char")
    torch.manual_seed(0)
    model = build_tiny_lm(TinyLMConfig(hidden_size=32, intermediate_size=64, initializer_range=0.3), tok.vocab_size)
    return model.eval(), tok


def test_lora_starts_as_identity_and_trains_only_adapters(tiny):
    model, tok = tiny
    x = torch.tensor([[1, 2, 3, 4]])
    ref = model(x).logits.detach().clone()
    pm = lora.with_lora(model, r=4, seed=0)
    assert torch.allclose(pm(x).logits, ref, atol=1e-6)
    trainable = [n for n, p in pm.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    targeted = {n.split(".")[-4] for n in trainable if n.endswith("lora_A.default.weight")}
    assert {"q_proj", "v_proj", "down_proj"} <= targeted
    assert pm.peft_config["default"].lora_alpha == 8


def test_adapter_round_trip(tiny, tmp_path, monkeypatch):
    model, tok = tiny
    pm = lora.with_lora(model, r=4, seed=0)
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
    x = torch.tensor([[1, 2, 3, 4]])
    want = pm(x).logits.detach()
    lora.save_adapter(pm, tmp_path / "a")
    assert (tmp_path / "a" / "adapter_config.json").exists()

    torch.manual_seed(0)
    fresh = build_tiny_lm(TinyLMConfig(hidden_size=32, intermediate_size=64, initializer_range=0.3), tok.vocab_size)
    import iclr26.models as models
    monkeypatch.setattr(models, "load", lambda name, dtype=None: (fresh.eval(), tok))
    m2, _ = lora.load_adapter("tiny", tmp_path / "a")
    assert torch.allclose(m2(x).logits, want, atol=1e-5)
    torch.manual_seed(0)
    fresh2 = build_tiny_lm(TinyLMConfig(hidden_size=32, intermediate_size=64, initializer_range=0.3), tok.vocab_size)
    monkeypatch.setattr(models, "load", lambda name, dtype=None: (fresh2.eval(), tok))
    merged, _ = lora.load_adapter("tiny", tmp_path / "a", merge=True)
    assert not hasattr(merged, "peft_config")
    assert torch.allclose(merged(x).logits, want, atol=1e-4)


def test_rejections(tiny, tmp_path):
    model, tok = tiny
    with pytest.raises(ValueError, match="rank r"):
        lora.with_lora(model, r=0)
    with pytest.raises(ValueError, match="alpha"):
        lora.with_lora(model, r=2, alpha=0)
    with pytest.raises(ValueError, match="dropout"):
        lora.with_lora(model, r=2, dropout=1.0)
    with pytest.raises(ValueError, match="target modules"):
        lora.with_lora(model, r=2, target_modules=("nope",))
    with pytest.raises(TypeError, match="peft model"):
        lora.save_adapter(model, tmp_path / "x")
    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        lora.load_adapter("smollm2-135m", tmp_path / "missing")


def test_trl_args_defaults_and_overrides(tmp_path):
    trl = pytest.importorskip("trl")
    cfg = lora.trl_args(trl.DPOConfig, tmp_path, max_steps=3, seed=7)
    assert cfg.max_steps == 3 and cfg.seed == 7 and cfg.use_cpu and cfg.save_strategy == "no"
    assert cfg.report_to == [] or cfg.report_to == "none" or not cfg.report_to
