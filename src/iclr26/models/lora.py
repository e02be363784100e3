"""One path for post-training on the bundled models: load, wrap with LoRA (``peft``), train with a
TRL trainer, save the adapter, reload it.

The papers' trainers are TRL's own (``DPOTrainer``, ``GRPOTrainer``, ...) or thin subclasses; this
module only holds what every such run repeats:

>>> model, tok = load_with_lora("smollm2-135m", r=8)                       # doctest: +SKIP
>>> args = trl_args(DPOConfig, "/tmp/run", max_steps=50, learning_rate=5e-4)  # doctest: +SKIP
>>> DPOTrainer(model=model, args=args, train_dataset=ds, processing_class=tok).train()  # doctest: +SKIP
>>> save_adapter(model, "/tmp/adapter"); model2, tok2 = load_adapter("smollm2-135m", "/tmp/adapter")  # doctest: +SKIP
"""
from __future__ import annotations

import os
from pathlib import Path

__all__ = ["DEFAULT_TARGETS", "with_lora", "load_with_lora", "save_adapter", "load_adapter", "trl_args"]

#: attention and MLP projections of Llama / Qwen2 / Gemma3 blocks
DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def with_lora(model, *, r: int = 8, alpha: float | None = None, dropout: float = 0.0,
              target_modules=DEFAULT_TARGETS, seed: int | None = None):
    """Wrap ``model`` with fresh LoRA adapters (``peft.get_peft_model``); only the adapters train.

    ``alpha`` defaults to ``2 * r``. ``seed`` seeds torch before the adapters' random init (LoRA's
    ``B`` starts at zero, so the wrapped model computes exactly what ``model`` did).
    """
    import torch
    from peft import LoraConfig, get_peft_model

    if not isinstance(r, int) or isinstance(r, bool) or r < 1:
        raise ValueError(f"LoRA rank r must be a positive integer, got {r!r}")
    alpha = 2 * r if alpha is None else alpha
    if not alpha > 0:
        raise ValueError(f"LoRA alpha must be > 0, got {alpha!r}")
    if not 0 <= dropout < 1:
        raise ValueError(f"LoRA dropout must be in [0, 1), got {dropout!r}")
    names = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
    targets = [t for t in target_modules if t in names]
    if not targets:
        raise ValueError(f"none of the LoRA target modules {list(target_modules)} exist in {type(model).__name__}")
    if seed is not None:
        torch.manual_seed(int(seed))
    cfg = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets, task_type="CAUSAL_LM")
    return get_peft_model(model, cfg)


def load_with_lora(name: str, *, dtype=None, r: int = 8, alpha: float | None = None, dropout: float = 0.0,
                   target_modules=DEFAULT_TARGETS, seed: int | None = None):
    """:func:`iclr26.models.load` then :func:`with_lora`; returns ``(peft_model, tokenizer)``."""
    from . import load

    model, tok = load(name, dtype=dtype)
    return with_lora(model, r=r, alpha=alpha, dropout=dropout, target_modules=target_modules, seed=seed), tok


def save_adapter(model, path: str | os.PathLike) -> Path:
    """Save only the LoRA adapter of a ``peft`` model (a few MB) to ``path``."""
    if not hasattr(model, "peft_config"):
        raise TypeError(f"save_adapter needs a peft model (from with_lora), got {type(model).__name__}")
    path = Path(path)
    model.save_pretrained(str(path))
    return path


def load_adapter(name: str, path: str | os.PathLike, *, dtype=None, merge: bool = False):
    """Load base model ``name`` and the adapter saved at ``path``; returns ``(model, tokenizer)``.
    With ``merge=True`` the adapter is folded into the weights and a plain transformers model is
    returned."""
    from peft import PeftModel

    from . import load

    path = Path(path)
    if not (path / "adapter_config.json").exists():
        raise FileNotFoundError(f"no LoRA adapter at {path} (adapter_config.json missing); save one with save_adapter")
    model, tok = load(name, dtype=dtype)
    model = PeftModel.from_pretrained(model, str(path))
    model.eval()
    return (model.merge_and_unload(), tok) if merge else (model, tok)


#: deprecated ``TrainingArguments`` names (transformers 5.x) and the names that replace them
_RENAMED_ARGS = (("gradient_checkpointing", "activation_checkpointing"),
                 ("gradient_checkpointing_kwargs", "activation_checkpointing_kwargs"))


def _current_names(config_cls, kw: dict) -> dict:
    """``kw`` with the deprecated checkpointing names spelled as ``config_cls`` now wants them.

    Where the class has ``activation_checkpointing`` (transformers >= 5.x), a ``gradient_checkpointing``
    passed by the caller, or else the class's own default for it (TRL's trainers default it to True),
    is passed as ``activation_checkpointing``: the same setting, without the deprecated alias.
    """
    import dataclasses
    if not dataclasses.is_dataclass(config_cls):
        return kw
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    for old, new in _RENAMED_ARGS:
        if new not in fields or new in kw:
            continue
        if old in kw:
            kw[new] = kw.pop(old)
        elif old in fields and fields[old].default not in (None, dataclasses.MISSING):
            kw[new] = fields[old].default
    return kw


def trl_args(config_cls, output_dir: str | os.PathLike, **overrides):
    """A TRL config (``DPOConfig``, ``GRPOConfig``, ...) with CPU defaults: no reporting, no
    checkpoints, CPU device, seed 0, logging every step. ``overrides`` win.

    ``gradient_checkpointing`` (deprecated in transformers 5.x) is passed on as
    ``activation_checkpointing`` where the config has it; so is the config's own default for it."""
    base = dict(output_dir=str(output_dir), report_to=[], save_strategy="no", use_cpu=True, seed=0,
                logging_steps=1, disable_tqdm=True)
    base.update(overrides)
    return config_cls(**_current_names(config_cls, base))
