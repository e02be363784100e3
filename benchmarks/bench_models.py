"""The bundled-model substrate: load time cold (GGUF parts -> sha256 -> dequantise -> cached Hugging
Face folder -> model) and cached, the peak memory of each, and greedy generation throughput of
:func:`iclr26.models.generation.generate` against a plain ``model.generate`` call on the same prompts
(same tokens: ``min_new_tokens = max_new_tokens``) at batch 1 and batch B.

Each load runs in a fresh process, so its peak resident memory is its own; the cold load builds
into a temporary cache folder and leaves the real cache alone.

    python benchmarks/bench_models.py [--models smollm2-135m qwen2.5-coder-0.5b] [--tokens 32] [--batch 8]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def child(name: str) -> None:
    """Prepare (a no-op when cached) and load ``name``; print seconds and peak memory as JSON."""
    import resource

    from iclr26.models import load, prepare

    t = time.perf_counter()
    prepare(name)
    t_prep = time.perf_counter() - t
    t = time.perf_counter()
    model, _ = load(name)
    t_load = time.perf_counter() - t
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    print(json.dumps(dict(prepare_s=t_prep, load_s=t_load, peak_mb=peak_mb, dtype=str(model.dtype))))


def run_child(name: str, cache: str | None) -> dict:
    env = dict(os.environ)
    if cache is not None:
        env["ICLR26_CACHE"] = cache
    out = subprocess.run([sys.executable, __file__, "--child", name], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def throughput(name: str, tokens: int, batch: int) -> list[str]:
    import torch

    from iclr26.models import load
    from iclr26.models.generation import generate

    torch.set_num_threads(1)
    model, tok = load(name)
    prompts = [f"Q: What is {a} + {2 * a + 1}?\nA:" for a in range(batch)]
    lines = []
    for bs in (1, batch):
        ps = prompts[:bs]
        t = time.perf_counter()
        generate(model, tok, ps, tokens, batch_size=bs, min_new_tokens=tokens)
        t_ours = time.perf_counter() - t
        tok.padding_side = "left"
        enc = tok(ps, return_tensors="pt", padding=True, add_special_tokens=False)
        t = time.perf_counter()
        with torch.no_grad():
            model.generate(**enc, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False,
                           pad_token_id=tok.pad_token_id)
        t_plain = time.perf_counter() - t
        n = bs * tokens
        lines.append(f"| {name} | {bs} | {n / t_ours:.1f} | {n / t_plain:.1f} | {100 * (t_ours / t_plain - 1):+.1f} % |")
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=["smollm2-135m"])
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--child")
    args = ap.parse_args()
    if args.child:
        return child(args.child)
    print("| model | cold: build cache + load (s) | cold peak MiB | cached load (s) | cached peak MiB | dtype |")
    print("|---|---|---|---|---|---|")
    for name in args.models:
        with tempfile.TemporaryDirectory(prefix="iclr26-bench-cache-") as tmp:
            cold = run_child(name, tmp)
        run_child(name, None)  # builds the real cache if it is missing
        warm = run_child(name, None)
        print(f"| {name} | {cold['prepare_s'] + cold['load_s']:.1f} | {cold['peak_mb']:.0f} | "
              f"{warm['prepare_s'] + warm['load_s']:.1f} | {warm['peak_mb']:.0f} | {warm['dtype']} |")
    print()
    print(f"greedy, {args.tokens} new tokens, 1 thread")
    print("| model | batch | iclr26 generate tok/s | model.generate tok/s | wrapper overhead |")
    print("|---|---|---|---|---|")
    for name in args.models:
        for line in throughput(name, args.tokens, args.batch):
            print(line)


if __name__ == "__main__":
    main()
