"""Decoding throughput of every decoding-time method in iclr26 against plain generation with the
same model, prompts, batch and number of new tokens (``min_new_tokens = max_new_tokens``, so no
arm stops early), single-threaded. The method and its peer are timed alternately, best of
``--repeats`` rounds after a warm-up call each, so drift in machine speed hits both. Speed does not
depend on what the heads or vectors learnt, so untrained heads and a random steering vector are used.

    python benchmarks/bench_decoding.py [--model smollm2-135m] [--tokens 32] [--batch 8] [--repeats 2]

Pairs (method vs its peer):
- AutoDeco (heads + per-token T and top-p through ``AutoDecoLogitsProcessor``) vs plain sampling
  with T = 1, p = 1. The paper reports about +1.7 % latency (Sec. 4).
- ReBalance (a forward hook on one layer, steering at every step start, and the confidence
  tracker) vs plain greedy decoding.
- ProxyThinker (base stepped by ``generate``; an expert and an amateur stepped alongside by the
  logits processor) vs the base alone. Here both small models are the first half of the base's
  layers (``layer_pruned_copy``), so the ideal cost is 1 + 2 x 0.5 = 2 base forwards per token.
- Soft thinking (vanilla and Gumbel-Softmax soft tokens through ``inputs_embeds``) vs the same loop
  with discrete tokens and vs transformers' greedy ``generate``.
"""
from __future__ import annotations

import argparse
import time

import torch


def compare(method, peer, n_tokens: int, repeats: int) -> tuple[float, float]:
    """Tokens/s of ``method`` and ``peer``: one untimed warm-up call each, then ``repeats`` rounds
    that time the two alternately (so drift in machine speed hits both), best round of each."""
    method(0), peer(0)
    best_m = best_p = float("inf")
    for r in range(repeats):
        t = time.perf_counter()
        method(r)
        best_m = min(best_m, time.perf_counter() - t)
        t = time.perf_counter()
        peer(r)
        best_p = min(best_p, time.perf_counter() - t)
    return n_tokens / best_m, n_tokens / best_p


def main():
    from iclr26.decoding.autodeco import AutoDecoHeads, AutoDecoLogitsProcessor
    from iclr26.decoding.proxythinker import layer_pruned_copy, proxythinker_generate
    from iclr26.decoding.rebalance import ReBalanceConfig, ReBalanceSteerer
    from iclr26.decoding.rebalance.steering import decoder_layers
    from iclr26.decoding.stochastic_soft_thinking import soft_thinking_generate
    from iclr26.models import load
    from iclr26.models.generation import generate

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, tok = load(args.model)
    prompts = [f"Q: What is {a} + {2 * a + 3}? Think step by step.\nA:" for a in range(args.batch)]
    n, k, reps = args.batch * args.tokens, args.tokens, args.repeats
    fixed = dict(batch_size=args.batch, min_new_tokens=k)
    rows = []

    def pair(name, method, peer, peer_name):
        rm, rp = compare(method, peer, n, reps)
        rows.append((name, rm, peer_name, rp))

    # AutoDeco vs plain sampling
    heads = AutoDecoHeads.from_base(model).eval()

    def autodeco(r):
        with AutoDecoLogitsProcessor(model, heads) as proc:
            generate(model, tok, prompts, k, do_sample=True, seed=r, logits_processor=proc, **fixed)

    pair("AutoDeco", autodeco, lambda r: generate(model, tok, prompts, k, do_sample=True, seed=r, **fixed),
         "sampling T=1, p=1")

    # ReBalance vs greedy: steer at every step start (any newline ends a step)
    layers = decoder_layers(model)
    dim = model.config.hidden_size
    v = torch.randn(dim)
    cfg = ReBalanceConfig(vector=v / v.norm(), layer=2 * len(layers) // 3, tau_c_low=0.3, tau_c_high=0.7,
                          tau_v_low=0.0, tau_v_high=0.01, scale=1.0)

    def rebalance(r):
        with ReBalanceSteerer(model, tok, cfg, sep="\n") as st:
            generate(model, tok, prompts, k, logits_processor=[st.processor], **fixed)

    greedy = lambda r: generate(model, tok, prompts, k, **fixed)  # noqa: E731
    pair("ReBalance", rebalance, greedy, "greedy")

    # ProxyThinker vs the base alone
    half = layer_pruned_copy(model, len(layers) // 2)
    pair("ProxyThinker", lambda r: proxythinker_generate(model, half, half, tok, prompts, k, **fixed),
         greedy, "greedy (base alone)")

    # soft thinking vs the same loop with discrete tokens, and vs transformers' greedy generate
    def soft(mode):
        return lambda r: soft_thinking_generate(model, tok, prompts, mode=mode, seed=r, max_think_tokens=k,
                                                max_answer_tokens=0, batch_size=args.batch)

    for mode in ("vanilla", "gumbel"):
        pair(f"soft thinking ({mode})", soft(mode), soft("discrete"), "same loop, discrete tokens")
    pair("soft-thinking loop (discrete)", soft("discrete"), greedy, "greedy")

    print(f"model={args.model} batch={args.batch} new_tokens={k} threads=1 best of {reps} alternating rounds")
    print("| method | tokens/s | peer | peer tokens/s | time per token vs peer |")
    print("|---|---|---|---|---|")
    for name, rm, peer, rp in rows:
        print(f"| {name} | {rm:.1f} | {peer} | {rp:.1f} | {100 * (rp / rm - 1):+.1f} % |")


if __name__ == "__main__":
    main()
