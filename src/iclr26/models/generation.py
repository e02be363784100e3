"""Batched text generation: left padding, KV cache, greedy or sampled decoding, optional per-step
logits processors and per-step scores, on transformers' ``generate`` (``engine="transformers"``, the
default) or on the faster loop of :mod:`iclr26.models.fast_generation` (``engine="fast"``: the same
tokens for greedy decoding, the same distribution and, seeded, the same draws for sampling).

Every decoding component in the library takes the same arguments as :func:`generate`, so a method
and its baseline differ only in the ``logits_processor`` (or sampling knobs) they pass.
"""
from __future__ import annotations

import functools
import inspect
from typing import Sequence

ENGINES = ("transformers", "fast")
_END_OF_TURN = ("<|im_end|>", "<|endoftext|>", "<end_of_turn>", "<|eot_id|>", "<eos>")


def stop_token_ids(tokenizer, model=None) -> list[int]:
    """Token ids that end a completion: the tokenizer's/model's eos plus known end-of-turn tokens."""
    ids: list[int] = []

    def add(x):
        if x is None:
            return
        for i in (x if isinstance(x, (list, tuple)) else [x]):
            if isinstance(i, int) and i >= 0 and i not in ids:
                ids.append(i)

    add(getattr(tokenizer, "eos_token_id", None))
    if model is not None and getattr(model, "generation_config", None) is not None:
        add(model.generation_config.eos_token_id)
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    for t in _END_OF_TURN:
        if t in vocab:
            add(vocab[t])
    return ids


def _as_processor_list(logits_processor):
    from transformers import LogitsProcessorList

    if logits_processor is None:
        return None
    if isinstance(logits_processor, LogitsProcessorList):
        return logits_processor
    if isinstance(logits_processor, (list, tuple)):
        return LogitsProcessorList(list(logits_processor))
    if callable(logits_processor):
        return LogitsProcessorList([logits_processor])
    raise TypeError(
        f"logits_processor must be a LogitsProcessor, a list of them or None, got {type(logits_processor).__name__}"
    )


def generate(
    model,
    tokenizer,
    prompts: Sequence[str] | str,
    max_new_tokens: int,
    *,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_p: float = 1.0,
    logits_processor=None,
    seed: int | None = None,
    batch_size: int = 8,
    return_scores: bool = False,
    return_token_ids: bool = False,
    engine: str = "transformers",
    **generate_kwargs,
):
    """Generate a completion for each prompt (prompts are used verbatim: apply a chat template first;
    no BOS is added, so a model that needs one, e.g. Gemma, must get it in the prompt text).

    Prompts are processed in order, in batches of ``batch_size`` with left padding and the KV cache.
    Greedy when ``do_sample`` is False (``temperature``/``top_p`` are then ignored); otherwise pure
    ancestral sampling with the given temperature and nucleus ``top_p`` (no top-k cut). ``seed``
    seeds torch's global generator once before the first batch, so a call is reproducible.
    ``logits_processor`` (a transformers ``LogitsProcessor`` or list) runs at every step after the
    built-in processors (``min_new_tokens``) and, as in transformers, before the sampling warpers
    (temperature, then top-p). Extra keyword arguments go to ``model.generate`` (e.g. ``min_new_tokens``).

    ``engine="fast"`` decodes with :func:`iclr26.models.fast_generation.decode` instead of
    ``model.generate``: for Llama/Qwen2 models without hooks a compact forward with a preallocated KV
    cache (logits equal to transformers'), for any other model (or one with forward hooks, e.g.
    steering) the model's own forward with a ``DynamicCache`` and the inputs ``generate`` would give it.
    Requests it cannot reproduce (extra ``generate`` keywords other than ``min_new_tokens``, a model
    generation config that turns on other processors) fall back to ``model.generate``.

    Returns the decoded completions (special tokens removed, prompt excluded). With
    ``return_scores=True`` returns ``(completions, scores)`` where ``scores[i]`` is a float tensor
    ``(n_generated_i, vocab)`` of the processed logits at each step of completion ``i`` (the
    distribution the next token was chosen from), truncated after the first stop token.
    With ``return_token_ids=True`` the generated token ids (same truncation) are appended to the
    returned tuple: ``(completions, ids)`` or ``(completions, scores, ids)``.

    A prompt that tokenizes to no tokens (e.g. ``""``) raises ``ValueError`` naming it.
    """
    import torch

    if isinstance(prompts, str):
        prompts = [prompts]
    prompts = list(prompts)
    if not all(isinstance(p, str) for p in prompts):
        raise TypeError("prompts must be strings (apply the chat template before calling generate)")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    if do_sample:
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0 when sampling, got {temperature!r}")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
    if seed is not None:
        torch.manual_seed(int(seed))

    from transformers import GenerationConfig

    stops = stop_token_ids(tokenizer, model)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (stops[0] if stops else 0)
    gen_cfg = dict(
        max_new_tokens=max_new_tokens,
        do_sample=bool(do_sample),
        eos_token_id=stops or None,
        pad_token_id=pad_id,
        use_cache=True,
        return_dict_in_generate=True,
        output_scores=bool(return_scores),
    )
    if do_sample:
        gen_cfg.update(temperature=float(temperature), top_p=float(top_p), top_k=0)
    config_keys = {k for k in generate_kwargs if hasattr(GenerationConfig(), k)}
    gen_cfg.update({k: generate_kwargs.pop(k) for k in config_keys})
    config = GenerationConfig(**gen_cfg)
    processors = _as_processor_list(logits_processor)
    device = next(model.parameters()).device
    fast = engine == "fast"
    if fast:
        from .fast_generation import decode, fast_supported

        fast = fast_supported(model, config, config_keys, generate_kwargs)

    old_side = getattr(tokenizer, "padding_side", "right")
    tokenizer.padding_side = "left"
    completions: list[str] = []
    all_scores: list = []
    all_ids: list = []
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(prompts), batch_size):
            chunk = prompts[start : start + batch_size]
            enc = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False)
            enc = {k: v.to(device) for k, v in enc.items() if k in ("input_ids", "attention_mask")}
            if "attention_mask" not in enc:
                enc["attention_mask"] = torch.ones_like(enc["input_ids"])
            lengths = enc["attention_mask"].sum(-1).tolist() if enc["input_ids"].shape[1] else [0] * len(chunk)
            for j, n_tok in enumerate(lengths):
                if n_tok == 0:
                    raise ValueError(
                        f"prompt {start + j} ({chunk[j]!r}) is empty: it tokenizes to no tokens, so there is "
                        "nothing to condition on; give every prompt at least one token (e.g. a BOS or a chat template)"
                    )
            if fast:
                new, step_scores = decode(
                    model, enc["input_ids"], enc["attention_mask"], max_new_tokens, do_sample=bool(do_sample),
                    temperature=float(temperature), top_p=float(top_p), logits_processor=processors,
                    stop_ids=stops, pad_id=pad_id, min_new_tokens=int(config.min_new_tokens or 0),
                    return_scores=bool(return_scores),
                )
            else:
                with torch.no_grad():
                    out = model.generate(
                        **enc,
                        generation_config=config,
                        logits_processor=processors,
                        **generate_kwargs,
                    )
                new, step_scores = out.sequences[:, enc["input_ids"].shape[1] :], out.scores
            for i in range(new.shape[0]):
                ids = new[i].tolist()
                n = len(ids)
                for j, t in enumerate(ids):
                    if t in stops:
                        n = j + 1
                        break
                completions.append(tokenizer.decode(ids[:n], skip_special_tokens=True))
                if return_token_ids:
                    all_ids.append(ids[:n])
                if return_scores:
                    all_scores.append(torch.stack([s[i] for s in step_scores[:n]]).float().cpu())
    finally:
        tokenizer.padding_side = old_side
        model.train(was_training)
    extra = ([all_scores] if return_scores else []) + ([all_ids] if return_token_ids else [])
    return (completions, *extra) if extra else completions


@functools.lru_cache(maxsize=None)
def _cache_argument(model_class) -> str:
    """The name ``model_class.forward`` takes the KV cache under (read once per class, not per step)."""
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def forward_with_cache(model, cache=None, **inputs):
    """One forward pass of ``model`` with KV cache ``cache`` (``None`` on the first step); returns
    ``(output, new_cache)``. transformers 5.2x renamed the cache argument and output field from
    ``past_key_values`` to ``cache`` (the old name is deprecated, to be removed in 5.40); this
    passes and reads whichever name the installed release uses."""
    if cache is not None:
        inputs[_cache_argument(type(model))] = cache
    out = model(use_cache=True, **inputs)
    new = getattr(out, "cache", None)
    return out, new if new is not None else getattr(out, "past_key_values", None)
