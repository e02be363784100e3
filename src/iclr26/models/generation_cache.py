"""A content-addressed disk cache for baseline generations.

Several checks need the same baseline outputs (the greedy or sampled completions of one model on
one problem set) for every seed and, sometimes, for several papers. :func:`generate_cached` calls
:func:`iclr26.models.generation.generate` once per distinct request and stores the result under a
key built from everything that can change it:

- the model's weights (a SHA-256 over every parameter and buffer, in name order, with dtypes and
  shapes) and its class;
- the tokenizer (its class, vocabulary size and special tokens) and the exact prompt list;
- the decoding arguments (``max_new_tokens``, ``do_sample``, ``temperature``, ``top_p``, ``seed``,
  ``batch_size``, extra ``generate`` keyword arguments);
- the installed torch and transformers versions.

Only baseline decoding is cached: a ``logits_processor`` may hold state that cannot be keyed, so it
is refused, and per-step scores are refused because they are too large to store. The batch size is
part of the key because left padding changes the numerics of a batch slightly.

The cache lives in ``$ICLR26_GENERATION_CACHE`` (default: ``generations/`` next to the model cache,
see :func:`iclr26.models.bundled.cache_root`). Entries are written atomically, so an interrupted
run leaves either a complete entry or none.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Sequence

from .bundled import cache_root
from .generation import generate

__all__ = ["generate_cached", "generation_cache_dir", "model_fingerprint", "request_key"]

_FORMAT = 1
_REFUSED = {
    "logits_processor": "a logits processor can hold state the cache cannot key; call generate() instead",
    "return_scores": "per-step scores are not cached; call generate() instead",
}


def generation_cache_dir() -> Path:
    """``$ICLR26_GENERATION_CACHE``, else ``<model cache root>/../generations``."""
    env = os.environ.get("ICLR26_GENERATION_CACHE")
    return Path(env).expanduser() if env else cache_root().parent / "generations"


def model_fingerprint(model) -> str:
    """SHA-256 over the model class and every parameter and buffer (name, dtype, shape, bytes)."""
    import torch

    h = hashlib.sha256()
    h.update(f"{type(model).__module__}.{type(model).__qualname__}".encode())
    tensors = dict(model.named_parameters())
    tensors.update(dict(model.named_buffers()))
    for name in sorted(tensors):
        t = tensors[name].detach().to("cpu").contiguous()
        h.update(f"|{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        if t.numel():
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _tokenizer_fingerprint(tokenizer) -> str:
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    special = getattr(tokenizer, "all_special_tokens", [])
    payload = {
        "class": type(tokenizer).__qualname__,
        "name": getattr(tokenizer, "name_or_path", ""),
        "vocab_size": len(vocab),
        "vocab_sha": hashlib.sha256(json.dumps(sorted(vocab.items())).encode()).hexdigest() if vocab else "",
        "special": list(special),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def request_key(model, tokenizer, prompts: Sequence[str], max_new_tokens: int, **kwargs) -> str:
    """The cache key of a :func:`generate` request (see the module docstring for what it covers)."""
    import torch
    import transformers

    for name, why in _REFUSED.items():
        if kwargs.get(name):
            raise TypeError(f"generate_cached does not take {name}: {why}")
    for name, value in kwargs.items():
        if not isinstance(value, (type(None), bool, int, float, str)):
            raise TypeError(
                f"generate_cached can key only plain keyword values (None, bool, int, float, str); "
                f"{name} is a {type(value).__name__}"
            )
    payload = {
        "format": _FORMAT,
        "model": model_fingerprint(model),
        "tokenizer": _tokenizer_fingerprint(tokenizer),
        "prompts": list(prompts),
        "max_new_tokens": max_new_tokens,
        "kwargs": {k: kwargs[k] for k in sorted(kwargs)},
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def generate_cached(
    model,
    tokenizer,
    prompts: Sequence[str] | str,
    max_new_tokens: int,
    *,
    return_token_ids: bool = False,
    cache_dir: str | os.PathLike | None = None,
    **kwargs,
):
    """:func:`iclr26.models.generation.generate`, stored on disk by content.

    Takes the same arguments as ``generate`` (``do_sample``, ``temperature``, ``top_p``, ``seed``,
    ``batch_size``, extra ``model.generate`` keywords), except ``logits_processor`` and
    ``return_scores``, which raise ``TypeError``. Returns what ``generate`` returns: the completions,
    or ``(completions, token_ids)`` with ``return_token_ids=True``. A sampled request is cached only
    when it has a ``seed`` (without one, two calls are meant to differ): it raises otherwise.
    """
    if isinstance(prompts, str):
        prompts = [prompts]
    prompts = list(prompts)
    if not all(isinstance(p, str) for p in prompts):
        raise TypeError("prompts must be strings (apply the chat template before calling generate_cached)")
    if kwargs.get("do_sample") and kwargs.get("seed") is None:
        raise ValueError("a sampled request is cached only with a seed; pass seed=... or call generate()")
    key = request_key(model, tokenizer, prompts, max_new_tokens, **kwargs)
    root = Path(cache_dir).expanduser() if cache_dir is not None else generation_cache_dir()
    path = root / key[:2] / f"{key}.json"
    if path.exists():
        entry = json.loads(path.read_text())
        if entry.get("format") == _FORMAT and len(entry.get("completions", [])) == len(prompts):
            if return_token_ids:
                return entry["completions"], entry["token_ids"]
            return entry["completions"]
    completions, ids = generate(model, tokenizer, prompts, max_new_tokens, return_token_ids=True, **kwargs)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"format": _FORMAT, "completions": completions, "token_ids": ids}, f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return (completions, ids) if return_token_ids else completions
