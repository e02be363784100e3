"""LoRA post-training runners on the bundled models: supervised fine-tuning with TRL's ``SFTTrainer``
and GRPO with TRL's ``GRPOTrainer``, both configured through :func:`iclr26.models.lora.trl_args`.

Both take either a model name (loaded and wrapped with fresh LoRA adapters), a plain transformers
model (wrapped), or a ``peft`` model, whose existing adapters keep training -- so a two-stage run
(SFT, then GRPO on the same adapters) is ``grpo_lora(sft_lora(name, ds1).model, ...)``.

>>> run = sft_lora("smollm2-135m", [{"prompt": "2+2=", "completion": " 4"}], steps=2)   # doctest: +SKIP
>>> run = grpo_lora(run.model, [my_reward], [{"prompt": "2+3=", "answer": "5"}], tokenizer=run.tokenizer,
...                 steps=2, num_generations=4)                                          # doctest: +SKIP

The dataset is a ``datasets.Dataset``, a list of row dicts, or a dict of columns. SFT rows need
``prompt`` and ``completion`` (the loss is on the completion tokens only); GRPO rows need
``prompt``, and every other column is passed by name to the reward functions (TRL's convention:
``reward(prompts=, completions=, completion_ids=, **columns) -> list[float]``).
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

__all__ = ["PostTrainRun", "sft_lora", "grpo_lora", "as_dataset"]


@dataclass
class PostTrainRun:
    """What a runner returns: the trained ``peft`` model (eval mode), its tokenizer and TRL's log."""
    model: Any
    tokenizer: Any
    log_history: list = field(default_factory=list)


def as_dataset(data, required: Sequence[str]):
    """``datasets.Dataset`` from a Dataset, a list of row dicts or a dict of columns; checks that
    the ``required`` columns are there and that it is not empty."""
    from datasets import Dataset

    if isinstance(data, Dataset):
        ds = data
    elif isinstance(data, dict):
        ds = Dataset.from_dict(dict(data))
    elif isinstance(data, (list, tuple)):
        if not all(isinstance(r, dict) for r in data):
            raise TypeError("dataset rows must be dicts (column -> value)")
        ds = Dataset.from_list(list(data))
    else:
        raise TypeError(f"dataset must be a datasets.Dataset, a list of row dicts or a dict of columns, "
                        f"got {type(data).__name__}")
    missing = [c for c in required if c not in ds.column_names]
    if missing:
        raise ValueError(f"dataset lacks column(s) {missing}; it has {ds.column_names}, needs {list(required)}")
    if len(ds) == 0:
        raise ValueError("dataset is empty")
    return ds


def _model(model, tokenizer, r, alpha, seed):
    from .lora import load_with_lora, with_lora

    if isinstance(model, str):
        return load_with_lora(model, r=r, alpha=alpha, seed=seed)
    if tokenizer is None:
        raise ValueError("tokenizer is required when a model object (not a bundled model name) is given")
    if hasattr(model, "peft_config"):
        return model, tokenizer                      # keep training its adapters
    return with_lora(model, r=r, alpha=alpha, seed=seed), tokenizer


def _check_positive(**kw):
    for k, v in kw.items():
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise ValueError(f"{k} must be a positive number, got {v!r}")


def sft_lora(model, dataset, *, tokenizer=None, steps: int | None = None, epochs: float = 1.0,
             batch_size: int = 8, lr: float = 2e-4, r: int = 8, alpha: float | None = None, seed: int = 0,
             max_length: int = 512, **config) -> PostTrainRun:
    """Supervised LoRA fine-tuning with TRL's ``SFTTrainer`` on prompt/completion rows (loss on the
    completion only, ``completion_only_loss=True``), constant learning rate, no warm-up.

    ``steps`` (optimizer steps) wins over ``epochs``. ``config`` overrides any ``SFTConfig`` field."""
    import torch
    from trl import SFTConfig, SFTTrainer

    from .lora import trl_args

    _check_positive(steps=steps, epochs=epochs, batch_size=batch_size, lr=lr, max_length=max_length)
    ds = as_dataset(dataset, ["prompt", "completion"]).select_columns(["prompt", "completion"])
    torch.manual_seed(seed)
    model, tok = _model(model, tokenizer, r, alpha, seed)
    with tempfile.TemporaryDirectory() as out:
        kw = dict(per_device_train_batch_size=batch_size, learning_rate=lr, lr_scheduler_type="constant",
                  warmup_steps=0, seed=seed, data_seed=seed, completion_only_loss=True, max_length=max_length,
                  packing=False, gradient_checkpointing=False, bf16=False)
        kw.update(dict(max_steps=int(steps)) if steps is not None else dict(num_train_epochs=float(epochs)))
        kw.update(config)
        args = trl_args(SFTConfig, out, **kw)
        trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tok)
        trainer.train()
        history = list(trainer.state.log_history)
    model.eval()
    return PostTrainRun(model, tok, history)


def grpo_lora(model, reward_funcs: Callable | Sequence[Callable], dataset, *, tokenizer=None, steps: int = 10,
              prompts_per_step: int = 2, num_generations: int = 8, max_completion_length: int = 16,
              lr: float = 5e-4, beta: float = 0.0, temperature: float = 1.0, r: int = 8,
              alpha: float | None = None, seed: int = 0, **config) -> PostTrainRun:
    """GRPO (DeepSeekMath's group-relative policy optimisation) with LoRA through TRL's
    ``GRPOTrainer``: every step draws ``prompts_per_step`` prompts, ``num_generations`` completions
    each, scores them with ``reward_funcs`` and updates the adapters. ``beta`` is the KL weight
    (0: no reference model), constant learning rate. ``config`` overrides any ``GRPOConfig`` field."""
    import torch
    from trl import GRPOConfig, GRPOTrainer

    from .lora import trl_args

    _check_positive(steps=steps, prompts_per_step=prompts_per_step, num_generations=num_generations,
                    max_completion_length=max_completion_length, lr=lr, temperature=temperature)
    if isinstance(num_generations, bool) or not isinstance(num_generations, int) or num_generations < 2:
        raise ValueError(f"num_generations must be an integer >= 2 (GRPO normalises within a group), "
                         f"got {num_generations!r}")
    if not beta >= 0:
        raise ValueError(f"beta (KL weight) must be >= 0, got {beta!r}")
    funcs = [reward_funcs] if callable(reward_funcs) else list(reward_funcs)
    if not funcs or not all(callable(f) for f in funcs):
        raise TypeError("reward_funcs must be a callable or a non-empty list of callables")
    ds = as_dataset(dataset, ["prompt"])
    torch.manual_seed(seed)
    model, tok = _model(model, tokenizer, r, alpha, seed)
    with tempfile.TemporaryDirectory() as out:
        kw = dict(max_steps=int(steps), per_device_train_batch_size=prompts_per_step * num_generations,
                  num_generations=num_generations, max_completion_length=max_completion_length, learning_rate=lr,
                  lr_scheduler_type="constant", warmup_steps=0, temperature=temperature, beta=beta, seed=seed,
                  data_seed=seed, gradient_checkpointing=False, bf16=False)
        kw.update(config)
        args = trl_args(GRPOConfig, out, **kw)
        trainer = GRPOTrainer(model=model, reward_funcs=funcs, args=args, train_dataset=ds, processing_class=tok)
        trainer.train()
        history = list(trainer.state.log_history)
    model.eval()
    return PostTrainRun(model, tok, history)
