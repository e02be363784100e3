"""The bundled-model substrate: greedy generation throughput of ``iclr26.models.generation.generate``
(``engine="transformers"`` and ``engine="fast"``) against a plain transformers ``model.generate``
and against llama.cpp (``xllamacpp``, optional: ``pip install 'iclr26[bench]'``) on the same
model and prompts, one thread each, in one run; and (``--load``) load time cold (GGUF parts ->
sha256 -> dequantise -> cached Hugging Face folder -> model) and cached, with peak memory.

Every method decodes exactly ``--tokens`` new tokens per prompt (``min_new_tokens`` /
``ignore_eos``). The methods are timed in alternating rounds (``--rounds``), so a machine whose
speed drifts slows all of them alike; the table gives each method's median tokens/s over the rounds
and the median of the per-round ratios. llama.cpp runs the model's GGUF file as shipped (its
quantised weights, e.g. Q4_1 for SmolLM2), the transformers paths the dequantised float weights;
a batch of B prompts goes to llama.cpp as B concurrent requests on a server with B slots, which it
decodes together (continuous batching).

    python benchmarks/bench_models.py [--models smollm2-135m qwen2.5-coder-0.5b] [--tokens 32]
                                      [--batches 1 8] [--rounds 3] [--load]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


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


def prompts_for(batch: int) -> list[str]:
    return [f"Q: What is {a} + {2 * a + 1}?\nA:" for a in range(batch)]


class LlamaCpp:
    """A one-thread llama.cpp server (xllamacpp) on ``name``'s GGUF with ``slots`` parallel slots."""

    def __init__(self, name: str, slots: int, tokens: int, workdir: Path):
        import xllamacpp as xl

        from iclr26.models import bundled

        gguf = workdir / f"{name}.gguf"
        if not gguf.exists():
            bundled._gguf_path(bundled.BUNDLED[name], workdir)
        p = xl.CommonParams()
        p.model.path = str(gguf)
        p.n_parallel = slots
        p.n_ctx = slots * (64 + tokens + 16)
        p.cpuparams.n_threads = 1
        p.cpuparams_batch.n_threads = 1
        p.cache_prompt = False
        self.server, self.tokens = xl.Server(p), tokens
        self.pool = ThreadPoolExecutor(max_workers=slots)

    def one(self, prompt: str) -> int:
        r = self.server.handle_completions({"prompt": prompt, "n_predict": self.tokens, "temperature": 0.0,
                                            "top_k": 1, "ignore_eos": True, "cache_prompt": False})
        return int(r["usage"]["completion_tokens"])

    def __call__(self, prompts: list[str]) -> int:
        return sum(self.pool.map(self.one, prompts))


def throughput(name: str, tokens: int, batches: list[int], rounds: int, llama: bool, workdir: Path) -> list[str]:
    import torch

    from iclr26.models import load
    from iclr26.models.generation import generate

    torch.set_num_threads(1)
    model, tok = load(name)
    lines = []
    for bs in batches:
        ps = prompts_for(bs)
        tok.padding_side = "left"
        enc = tok(ps, return_tensors="pt", padding=True, add_special_tokens=False)

        def plain():
            with torch.no_grad():
                model.generate(**enc, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False,
                               pad_token_id=tok.pad_token_id)
            return bs * tokens

        methods = {
            "model.generate": plain,
            "iclr26 (transformers)": lambda: (generate(model, tok, ps, tokens, batch_size=bs, min_new_tokens=tokens),
                                              bs * tokens)[1],
            "iclr26 (fast)": lambda: (generate(model, tok, ps, tokens, batch_size=bs, min_new_tokens=tokens,
                                               engine="fast"), bs * tokens)[1],
        }
        if llama:
            cpp = LlamaCpp(name, bs, tokens, workdir)
            methods["llama.cpp"] = lambda: cpp(ps)
        for f in methods.values():   # warm-up (first-call allocations, llama.cpp's graph)
            f()
        rates: dict[str, list[float]] = {k: [] for k in methods}
        for _ in range(rounds):
            for k, f in methods.items():
                t = time.perf_counter()
                n = f()
                rates[k].append(n / (time.perf_counter() - t))
        med = {k: statistics.median(v) for k, v in rates.items()}

        def ratio(a, b):
            return statistics.median(x / y for x, y in zip(rates[a], rates[b]))

        cells = [f"{med[k]:.1f}" for k in methods] + [f"{ratio('iclr26 (fast)', 'model.generate'):.2f}x"]
        cells.append(f"{ratio('iclr26 (fast)', 'llama.cpp'):.2f}x" if llama else "-")
        lines.append(f"| {name} | {bs} | " + " | ".join(cells) + " |")
        if llama:
            del cpp
    return lines, list(methods)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=["smollm2-135m"])
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--load", action="store_true", help="also time cold and cached loads (minutes)")
    ap.add_argument("--no-llama", action="store_true", help="skip llama.cpp even if xllamacpp is installed")
    ap.add_argument("--child")
    args = ap.parse_args()
    if args.child:
        return child(args.child)
    if args.load:
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
    llama = not args.no_llama
    if llama:
        try:
            import xllamacpp  # noqa: F401
        except ImportError:
            print("xllamacpp is not installed (pip install 'iclr26[bench]'): llama.cpp column left out\n")
            llama = False
    print(f"greedy, {args.tokens} new tokens per prompt, 1 thread, median of {args.rounds} alternating rounds "
          f"(tokens/s; ratios: median of per-round ratios)")
    with tempfile.TemporaryDirectory(prefix="iclr26-bench-gguf-") as tmp:
        header = None
        for name in args.models:
            lines, methods = throughput(name, args.tokens, args.batches, args.rounds, llama, Path(tmp))
            if header is None:
                header = ["model", "batch"] + [f"{m} tok/s" for m in methods] + ["fast / model.generate",
                                                                                   "fast / llama.cpp"]
                print("| " + " | ".join(header) + " |")
                print("|" + "---|" * len(header))
            for line in lines:
                print(line, flush=True)


if __name__ == "__main__":
    main()
