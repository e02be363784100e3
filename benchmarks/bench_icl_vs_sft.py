"""Cost of scoring a decision field with the ICL prompt's key/value cache reused (``score_queries``)
against re-running the whole prompt for every query (the naive loop), and linear CKA against its
Gram-matrix (HSIC) form: single-threaded CPU time (``time.process_time``), best of ``--repeats``.

    python benchmarks/bench_icl_vs_sft.py [--model tiny|smollm2-135m] [--repeats 3] [--k 8] [--queries 25]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from iclr26.interpretability.icl_vs_sft import (format_query, icl_context, label_token_ids, linear_cka,
                                                make_angle_task, score_queries)
from _timing import best_of


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--queries", type=int, default=25)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    if args.model == "tiny":
        from iclr26.models import SimpleTokenizer
        from iclr26.models.testing import wide_llama

        labels = ("X", "Y")
        tok = SimpleTokenizer.from_texts(["Input: 0123456789\nLabel:XY"], level="char")
        model = wide_llama(vocab_size=len(tok), hidden_size=64, num_layers=4)
        model.config.max_position_embeddings = 4096
    else:
        from iclr26.models import load

        labels = (" Bar", " Rud")
        model, tok = load(args.model)
    X, y = make_angle_task(90.0, args.k, seed=0)
    ctx = icl_context(X, y, labels)
    Q, _ = make_angle_task(90.0, args.queries // 2 + 1, seed=1)
    queries = [format_query(x) for x in Q[:args.queries]]
    a, b = label_token_ids(tok, labels)

    def naive():
        with torch.no_grad():
            for q in queries:
                ids = torch.tensor([tok(ctx + q, add_special_tokens=False)["input_ids"]])
                model(input_ids=ids).logits[0, -1, [a, b]]

    t_cache = best_of(lambda: score_queries(model, tok, queries, context=ctx, labels=labels), args.repeats)
    t_naive = best_of(naive, args.repeats)
    print(f"decision-field scoring, {len(queries)} queries, {2 * args.k} exemplars: cached {t_cache:.3f}s, "
          f"naive {t_naive:.3f}s, ratio {t_naive / max(t_cache, 1e-9):.2f}x")
    rng = np.random.default_rng(0)
    A, B = rng.normal(size=(500, 256)), rng.normal(size=(500, 256))

    def hsic_form():
        H = np.eye(500) - 1.0 / 500
        K, L = H @ A @ A.T @ H, H @ B @ B.T @ H
        return np.sum(K * L) / np.sqrt(np.sum(K * K) * np.sum(L * L))

    t_cka, t_hsic = best_of(lambda: linear_cka(A, B), args.repeats), best_of(hsic_form, args.repeats)
    print(f"linear CKA (500 x 256): feature form {t_cka:.4f}s, Gram form {t_hsic:.4f}s")


if __name__ == "__main__":
    main()
