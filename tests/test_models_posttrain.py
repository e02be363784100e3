"""Tests of iclr26.models.posttrain: LoRA SFT (TRL SFTTrainer) and LoRA GRPO (TRL GRPOTrainer)."""
from __future__ import annotations

import pytest

pytest.importorskip("trl")

from iclr26.models import posttrain as P  # noqa: E402


def _lora_and_base(model):
    lora = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    base = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}
    return lora, base


def test_as_dataset_forms_and_rejections():
    rows = [{"prompt": "a", "completion": "b"}, {"prompt": "c", "completion": "d"}]
    ds = P.as_dataset(rows, ["prompt", "completion"])
    assert ds.column_names == ["prompt", "completion"] and len(ds) == 2
    assert P.as_dataset({"prompt": ["a"], "answer": ["1"]}, ["prompt"])[0] == {"prompt": "a", "answer": "1"}
    assert P.as_dataset(ds, ["prompt"]) is ds
    with pytest.raises(ValueError, match=r"dataset lacks column\(s\) \['completion'\]"):
        P.as_dataset([{"prompt": "a"}], ["prompt", "completion"])
    with pytest.raises(ValueError, match="dataset is empty"):
        P.as_dataset({"prompt": []}, ["prompt"])
    with pytest.raises(TypeError, match="dataset rows must be dicts"):
        P.as_dataset(["a"], ["prompt"])
    with pytest.raises(TypeError, match="got str"):
        P.as_dataset("prompt", ["prompt"])


def test_runner_rejections():
    rows = [{"prompt": "a", "completion": "b"}]
    with pytest.raises(ValueError, match="lr must be a positive number, got 0"):
        P.sft_lora("smollm2-135m", rows, lr=0)
    with pytest.raises(ValueError, match="batch_size must be a positive number"):
        P.sft_lora("smollm2-135m", rows, batch_size=-1)
    with pytest.raises(ValueError, match=r"num_generations must be an integer >= 2 .*got 1"):
        P.grpo_lora("smollm2-135m", lambda **k: [0.0], [{"prompt": "a"}], num_generations=1)
    with pytest.raises(ValueError, match="beta \\(KL weight\\) must be >= 0"):
        P.grpo_lora("smollm2-135m", lambda **k: [0.0], [{"prompt": "a"}], beta=-0.1)
    with pytest.raises(TypeError, match="reward_funcs must be a callable or a non-empty list"):
        P.grpo_lora("smollm2-135m", [], [{"prompt": "a"}])
    with pytest.raises(ValueError, match="steps must be a positive number"):
        P.grpo_lora("smollm2-135m", lambda **k: [0.0], [{"prompt": "a"}], steps=0)


@pytest.mark.llm
def test_sft_then_grpo_train_only_the_adapters():
    rows = [{"prompt": "Q: 2+2=\nAnswer:", "completion": " 4"}, {"prompt": "Q: 3+3=\nAnswer:", "completion": " 6"}]
    run = P.sft_lora("smollm2-135m", rows, steps=2, batch_size=2, lr=1e-3, seed=0)
    assert any("loss" in h for h in run.log_history) and not run.model.training
    lora0, base0 = _lora_and_base(run.model)
    assert any(float(v.abs().sum()) > 0 for n, v in lora0.items() if "lora_B" in n)   # B left zero
    with pytest.raises(ValueError, match="tokenizer is required"):
        P.grpo_lora(run.model, lambda **k: [0.0], [{"prompt": "a"}])
    seen = {}

    def reward(prompts=None, completions=None, answer=None, **kw):
        seen.update(n=len(completions), answer=list(answer), prompts=list(prompts))
        return [float(i % 2) for i in range(len(completions))]   # varies within a group

    run2 = P.grpo_lora(run.model, reward, {"prompt": [r["prompt"] for r in rows], "answer": ["4", "6"]},
                       tokenizer=run.tokenizer, steps=1, prompts_per_step=1, num_generations=4,
                       max_completion_length=3, lr=1e-2, seed=0)
    assert run2.model is run.model                               # the same adapters kept training
    assert seen["n"] == 4 and seen["answer"][0] in ("4", "6") and seen["prompts"][0].startswith("Q:")
    assert any("reward" in h for h in run2.log_history)
    lora1, base1 = _lora_and_base(run2.model)
    assert all((base1[n] == base0[n]).all() for n in base0)      # base weights frozen
    assert any(not (lora1[n] == lora0[n]).all() for n in lora0)
