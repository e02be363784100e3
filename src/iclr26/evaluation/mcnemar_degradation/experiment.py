"""Claim checks for the McNemar degradation test: simulations at the paper's sizes and a real model.

Every check calls the library's functions (:mod:`.test`) on per-sample 0/1 scores; the harness then
judges the per-replication (or per-item) outcomes.

(a) Type-I error (Sec. 3-4). Per replication, four tasks with the paper's total size N = 25,282 get
    paired 2x2 tables with accuracy drop delta = 0 (flip rate 9 %, accuracy 60 %); each aggregation
    of :func:`aggregate_counts` decides at alpha = 0.05. Items: the replications' reject indicators.
(b) Power at delta = 0.8 % (Sec. 3, 6): the exact paired test (:func:`mcnemar_degradation`) against
    the unpaired two-proportion z-test (:func:`unpaired_degradation`), applied to the same samples.
(c) Pruning (Sec. 5), one MMLU-Pro-sized task (N = 12,032). Per sample a latent noise propensity u:
    a share of the samples never flips (u = 0), the others have u ~ Beta(1, 3). Ten noisy re-runs
    of the base model flip each sample with probability u (the paper: 10 runs at temperature 0.3);
    :func:`flip_mask` keeps the samples that flipped in some run. The optimisation flips a sample with
    probability proportional to u (flip rate 9 %, delta = 0.8 %). Arms: the exact test on all
    samples, on the samples :func:`flip_mask` keeps, and on as many samples kept at random (control).
(d) Real model (Sec. 6): SmolLM2-135M-Instruct in bfloat16 (the paper's models run in bf16), greedy
    on few-shot two-term arithmetic. A theoretically lossless change (another attention kernel:
    eager instead of SDPA; the same function, other rounding) and a real degradation (the KV cache
    stored in FP8 E5M2) on the same items.
"""
from __future__ import annotations

import copy

import numpy as np

from iclr26.common.seeding import seed_everything

from .test import AGGREGATIONS, aggregate_counts, flip_mask, mcnemar_degradation, unpaired_degradation

# N = 25,282 is the paper's total evaluation size (Sec. 6); the split into four tasks is ours.
TASK_SIZES = (12_032, 8_000, 3_931, 1_319)
PRUNE_SIZE = 12_032  # MMLU-Pro, the benchmark the paper prunes (5,604 never-flipping samples removed)
ALPHA = 0.05
_SIM = dict(p_flip=0.09, acc=0.6, delta=0.008, noise_runs=10, flip_prone=0.7, noise_beta=(1.0, 3.0))
SCALES = {
    "smoke": dict(_SIM, reps_null=200, n_mc=200, reps_power=40, reps_prune=10,
                  real=dict(model="smollm2-135m", n=48, difficulty=2, max_new_tokens=3, batch_size=16, noise_runs=2,
                            noise_temperature=0.3)),
    # 2 seeds x 10,000 null replications: a size of alpha + 0.01 is detected (contradicted) with
    # probability ~0.9 and a size of exactly alpha stays below alpha + 0.005 with probability ~0.95
    "quick": dict(_SIM, reps_null=10_000, n_mc=1000, reps_power=1000, reps_prune=500,
                  real=dict(model="smollm2-135m", n=500, difficulty=2, max_new_tokens=4, batch_size=16, noise_runs=10,
                            noise_temperature=0.3)),
    "paper": dict(_SIM, reps_null=50_000, n_mc=10_000, reps_power=10_000, reps_prune=5000,
                  real=dict(model="qwen2.5-coder-1.5b", n=1319, difficulty=4, max_new_tokens=8, batch_size=16,
                            noise_runs=10, noise_temperature=0.3)),
}
SEEDS = {"smoke": 1, "quick": 2, "paper": 4}


def simulate_tables(rng, sizes, acc: float, p_flip: float, delta: float, reps: int):
    """Per replication and task, counts (a, b, c, d): both wrong, only base right, only new right, both right."""
    q = 0.5 + delta / (2 * p_flip)
    if not 0 <= q <= 1:
        raise ValueError(f"delta={delta} is impossible with p_flip={p_flip}: need |delta| <= p_flip")
    b_p, c_p = p_flip * q, p_flip * (1 - q)
    d_p = acc - b_p
    a_p = 1 - b_p - c_p - d_p
    if min(a_p, d_p) < 0:
        raise ValueError("inconsistent acc/p_flip/delta: cell probabilities must be non-negative")
    probs = np.array([a_p, b_p, c_p, d_p])
    return np.stack([rng.multinomial(n, probs, size=reps) for n in sizes], axis=1)  # (reps, T, 4)


def table_scores(table):
    """Per-sample 0/1 scores (base, new) realising a 2x2 table (a, b, c, d)."""
    a, b, c, d = (int(v) for v in table)
    base = np.repeat(np.array([0, 1, 0, 1], dtype=np.int8), [a, b, c, d])
    new = np.repeat(np.array([0, 0, 1, 1], dtype=np.int8), [a, b, c, d])
    return base, new


def simulate_pruning(rng, n: int, cfg: dict):
    """One replication of the pruning study: (base, new, noise_runs) per-sample 0/1 scores.

    A share ``flip_prone`` of the samples has a noise propensity u ~ Beta(noise_beta), the rest u = 0.
    The optimisation makes a sample discordant with probability kappa * u (kappa sets the flip rate
    ``p_flip``); a discordant sample is lost (base right, new wrong) with probability
    q = 1/2 + delta / (2 p_flip). ``noise_runs`` re-runs of the base model flip each sample's score
    independently with probability u.
    """
    a, b = cfg["noise_beta"]
    prone = rng.random(n) < cfg["flip_prone"]
    u = np.where(prone, rng.beta(a, b, n), 0.0)
    kappa = cfg["p_flip"] / (cfg["flip_prone"] * a / (a + b))
    if kappa * u.max(initial=0.0) > 1:
        raise ValueError("p_flip too large for this noise propensity: kappa * u exceeds 1")
    disc = rng.random(n) < kappa * u
    q = 0.5 + cfg["delta"] / (2 * cfg["p_flip"])
    lost = rng.random(n) < q
    base = np.where(disc, lost, rng.random(n) < cfg["acc"]).astype(np.int8)
    new = np.where(disc, 1 - base, base).astype(np.int8)
    runs = (base[None, :] ^ (rng.random((cfg["noise_runs"], n)) < u[None, :])).astype(np.int8)
    return base, new, runs


# --------------------------------------------------------------------------- real model (Sec. 6)
def _prompt_ids(tok, cfg, seed):
    from iclr26.data.math import arithmetic_problems, arithmetic_prompt

    seen, probs = set(), []
    for p in arithmetic_problems(4 * cfg["n"], seed=seed, difficulty=cfg["difficulty"]):
        if p.question not in seen:  # distinct problems: every item is a new draw
            seen.add(p.question)
            probs.append(p)
        if len(probs) == cfg["n"]:
            break
    ids = [tok(arithmetic_prompt(tok, p), add_special_tokens=False)["input_ids"] for p in probs]
    return ids, [p.answer for p in probs]


def _common_prefix(ids) -> int:
    k = min(len(x) for x in ids) - 1  # keep at least one token per item for the first step
    first = ids[0]
    for x in ids[1:]:
        j = 0
        while j < k and x[j] == first[j]:
            j += 1
        k = j
    return k


def greedy_answers(model, tok, ids, max_new_tokens: int, batch_size: int, temperature: float = 0.0,
                   generator=None) -> list[str]:
    """Completions of token-id prompts sharing a few-shot prefix: the prefix's KV cache is computed
    once, items of equal length are batched without padding (no padding can change the numerics),
    and decoding stops at an end-of-turn token. Greedy at ``temperature = 0``; otherwise ancestral
    sampling from ``softmax(logits / temperature)`` with the torch ``generator`` (the noisy re-runs
    of Sec. 5 sample at temperature 0.3)."""
    import torch
    from transformers import DynamicCache

    from iclr26.models.generation import stop_token_ids

    if not (isinstance(temperature, (int, float)) and np.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {temperature!r}")

    stops = set(stop_token_ids(tok, model))
    p = _common_prefix(ids)
    with torch.no_grad():
        prefix = DynamicCache()
        model(input_ids=torch.tensor([ids[0][:p]]), past_key_values=prefix, use_cache=True)
        groups: dict[int, list[int]] = {}
        for i, x in enumerate(ids):
            groups.setdefault(len(x), []).append(i)
        out: list[str] = [""] * len(ids)
        for length in sorted(groups):
            idx = groups[length]
            for s in range(0, len(idx), batch_size):
                chunk = idx[s:s + batch_size]
                cache = copy.deepcopy(prefix)
                cache.batch_repeat_interleave(len(chunk))
                inp = torch.tensor([ids[i][p:] for i in chunk])
                gen: list[list[int]] = [[] for _ in chunk]
                done = [False] * len(chunk)
                for _ in range(max_new_tokens):
                    logits = model(input_ids=inp, past_key_values=cache, use_cache=True).logits[:, -1].float()
                    if temperature == 0:
                        nxt = logits.argmax(-1)
                    else:
                        probs = torch.softmax(logits / temperature, dim=-1)
                        nxt = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
                    for j, t in enumerate(nxt.tolist()):
                        if not done[j]:
                            done[j] = t in stops
                            if not done[j]:
                                gen[j].append(t)
                    if all(done):
                        break
                    inp = nxt[:, None]
                for j, i in enumerate(chunk):
                    out[i] = tok.decode(gen[j])
    return out


def _fp8_kv_hooks(model, dtype):
    """Store keys and values in FP8: round the k/v projections to ``dtype`` (per-tensor scale 1)."""
    def hook(_mod, _inp, out):
        return out.to(dtype).to(out.dtype)

    handles = []
    for layer in model.model.layers:
        handles.append(layer.self_attn.k_proj.register_forward_hook(hook))
        handles.append(layer.self_attn.v_proj.register_forward_hook(hook))
    return handles


def real_model_case(cfg: dict, seed: int) -> dict:
    """Per-item correctness of the base model, a lossless change and a degradation, on the same items."""
    import torch

    from iclr26.data.math import first_number, is_correct
    from iclr26.models import load

    model, tok = load(cfg["model"], dtype=torch.bfloat16)
    ids, golds = _prompt_ids(tok, cfg, seed)

    def score(m, **sampling):
        texts = greedy_answers(m, tok, ids, cfg["max_new_tokens"], cfg["batch_size"], **sampling)
        return [float(is_correct(first_number(t), g)) for t, g in zip(texts, golds)], texts

    model.set_attn_implementation("sdpa")
    base, base_txt = score(model)
    model.set_attn_implementation("eager")  # same function, another kernel: only rounding differs
    lossless, loss_txt = score(model)
    model.set_attn_implementation("sdpa")
    handles = _fp8_kv_hooks(model, torch.float8_e5m2)
    degraded, _ = score(model)
    for h in handles:
        h.remove()
    res_l = mcnemar_degradation(base, lossless)
    res_d = mcnemar_degradation(base, degraded)

    # Sec. 5 on the real model: noisy re-runs of the base model (sampling at a small temperature),
    # the samples that never flip across them pruned by flip_mask; the exact test depends on the
    # discordant pairs only, so the pruned test keeps its power exactly when the pruned samples hold
    # none of the degradation's discordant pairs.
    gen = torch.Generator().manual_seed(10_007 * seed + 1)
    runs_arr = np.asarray([score(model, temperature=cfg["noise_temperature"], generator=gen)[0]
                           for _ in range(cfg["noise_runs"])], dtype=np.int8)
    keep = flip_mask(runs_arr)
    b_arr, d_arr = np.asarray(base, dtype=np.int8), np.asarray(degraded, dtype=np.int8)
    disc = b_arr != d_arr
    kept_share = float(keep.mean())
    res_p = mcnemar_degradation(b_arr[keep], d_arr[keep]) if keep.any() else None

    def z(res):  # the exact test's standardised drop (b - c) / sqrt(b + c), its signal (Sec. 5)
        return 0.0 if res is None or res.b + res.c == 0 else (res.b - res.c) / np.sqrt(res.b + res.c)

    z_full, z_pruned = z(res_d), z(res_p)
    # disjoint pairs of re-runs: two draws of the same model, a lossless comparison by construction of
    # the null (the same distribution), tested one-sided for degradation as the paper tests changes
    pair_reject = [float(mcnemar_degradation(runs_arr[i], runs_arr[i + 1]).pvalue < ALPHA)
                   for i in range(0, cfg["noise_runs"] - 1, 2)]
    return {
        "metrics": {
            "lossless_correct": {"base": base, "lossless": lossless},
            "degraded_correct": {"base": base, "degraded": degraded},
            "real_discordant_kept": {"flip_mask": keep[disc].astype(float).tolist(),
                                     "random": [kept_share] * int(disc.sum())},
            "lossless_reject": {"lossless": [float(res_l.pvalue < ALPHA)] + pair_reject},
            "real_signal_z": {"flip_mask": [z_pruned], "all": [z_full]},
        },
        "info": {
            "model": cfg["model"], "dtype": "bfloat16", "n_items": len(ids),
            "accuracy": {"base": float(np.mean(base)), "lossless": float(np.mean(lossless)),
                         "degraded": float(np.mean(degraded))},
            "lossless_text_changed": int(sum(a != b for a, b in zip(base_txt, loss_txt))),
            "lossless": {"b": res_l.b, "c": res_l.c, "flip_rate": res_l.flip_rate, "pvalue": res_l.pvalue},
            "degraded": {"b": res_d.b, "c": res_d.c, "flip_rate": res_d.flip_rate, "pvalue": res_d.pvalue},
            "pruning": {"noise_runs": cfg["noise_runs"], "temperature": cfg["noise_temperature"],
                        "kept_share": kept_share, "n_discordant": int(disc.sum()),
                        "discordant_kept": int((keep & disc).sum()),
                        "pruned_pvalue": None if res_p is None else res_p.pvalue,
                        "full_pvalue": res_d.pvalue, "z_full": z_full, "z_pruned": z_pruned,
                        "rerun_accuracy": runs_arr.mean(axis=1).tolist()},
            "lossless_rerun_pair_reject": pair_reject,
        },
    }


def run(scale: str, seed: int) -> dict:
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; allowed: {', '.join(SCALES)}")
    cfg = SCALES[scale]
    rng = seed_everything(seed)

    # (a) type-I error under delta = 0
    null = simulate_tables(rng, TASK_SIZES, cfg["acc"], cfg["p_flip"], 0.0, cfg["reps_null"])
    rej = {m: np.zeros(cfg["reps_null"]) for m in AGGREGATIONS}
    for r in range(cfg["reps_null"]):
        p = aggregate_counts(null[r, :, 1], null[r, :, 2], AGGREGATIONS, cfg["n_mc"], rng)
        for m in AGGREGATIONS:
            rej[m][r] = float(p[m] < ALPHA)
    combined = np.max([rej[m] for m in AGGREGATIONS], axis=0)

    # (b) power at delta = 0.8 %, all four tasks pooled into one evaluation (N = 25,282)
    alt = simulate_tables(rng, TASK_SIZES, cfg["acc"], cfg["p_flip"], cfg["delta"], cfg["reps_power"])
    paired, unpaired = [], []
    for r in range(cfg["reps_power"]):
        base, new = table_scores(alt[r].sum(axis=0))
        paired.append(float(mcnemar_degradation(base, new).pvalue < ALPHA))
        unpaired.append(float(unpaired_degradation(base, new).pvalue < ALPHA))

    # (c) pruning never-flipping samples with flip_mask, against random pruning of the same size
    full, pruned, random_pruned, kept, kept_disc = [], [], [], [], []
    for _ in range(cfg["reps_prune"]):
        base, new, runs = simulate_pruning(rng, PRUNE_SIZE, cfg)
        keep = flip_mask(runs)
        rand = np.zeros(PRUNE_SIZE, dtype=bool)
        rand[rng.choice(PRUNE_SIZE, int(keep.sum()), replace=False)] = True
        full.append(float(mcnemar_degradation(base, new).pvalue < ALPHA))
        pruned.append(float(mcnemar_degradation(base[keep], new[keep]).pvalue < ALPHA))
        random_pruned.append(float(mcnemar_degradation(base[rand], new[rand]).pvalue < ALPHA))
        disc = base != new
        kept.append(keep.mean())
        kept_disc.append(disc[keep].sum() / max(disc.sum(), 1))

    real = real_model_case(cfg["real"], seed)
    return {
        "metrics": {
            **real["metrics"],
            "type1_reject": {**{m: rej[m].tolist() for m in AGGREGATIONS}, "combined": combined.tolist()},
            "power_reject": {"paired_mcnemar": paired, "unpaired_z": unpaired},
            "pruning_reject": {"full": full, "flip_pruned": pruned, "random_pruned": random_pruned},
        },
        "info": {
            "real_model": real["info"], "task_sizes": list(TASK_SIZES), "prune_size": PRUNE_SIZE,
            "kept_sample_fraction": float(np.mean(kept)), "kept_discordant_fraction": float(np.mean(kept_disc)),
            "power": {"paired": float(np.mean(paired)), "unpaired": float(np.mean(unpaired)),
                      "full": float(np.mean(full)), "flip_pruned": float(np.mean(pruned)),
                      "random_pruned": float(np.mean(random_pruned))},
            "type1": {m: float(np.mean(rej[m])) for m in AGGREGATIONS} | {"combined": float(combined.mean())},
        },
    }
