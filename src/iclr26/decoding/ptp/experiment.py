"""PTP claim check: tokens per teacher call at an unchanged output distribution.

Per seed: a tiny Llama teacher is trained here on an order-2 Markov language
(:func:`iclr26.models.speculative.markov_target`). Three drafters are trained on the same text with
the same number of steps, the same batches and the same learning-rate grid (each arm picks its rate
by its tokens per teacher call on validation prompts):
- ``ptp``: the library's :class:`PTPForCausalLM` initialised from the teacher, trained with
  :func:`train_ptp` (auxiliaries inside the teacher's CDF intervals), decoded with
  :func:`ptp_generate` (one PTP call proposes k tokens, one teacher call verifies them exactly);
- ``independent`` (control for the mechanism): the same model, loss, data and decoding, but the
  auxiliary slots do not see u (``PTPConfig(independent=True)``): each slot learns the marginal of
  its future token and proposes Pick(u_j, marginal_j), as independent multi-token heads would;
- ``speculative`` (the usual baseline): a small draft LM (1 layer, d = 32) distilled from the
  teacher (soft cross-entropy), decoded by chain speculative sampling with depth k
  (:func:`iclr26.models.speculative.speculative_generate`, Leviathan et al. verification);
- ``ar``: plain autoregressive sampling, one token per teacher call.

Metrics (per held-out prompt, items clustered by seed): ``tokens_per_call`` = generated tokens per
teacher call (EAGLE's tau). Distribution (one value per seed): ``teacher_logprob`` = mean teacher
log-probability per generated token of PTP-decoded text (fresh auxiliaries) and of the teacher's own
samples (``ar``, independent auxiliaries): equal in expectation exactly when PTP decoding samples the
teacher's distribution; ``ptp_unverified`` (PTP's proposals taken without verification) shows that the
statistic moves when the distribution does. ``info`` adds the bigram total variation of each against a
third teacher sample.
"""
from __future__ import annotations

import copy
import time

import numpy as np
import torch
from torch.nn import functional as F

from iclr26.common.seeding import seed_everything

SCALES = {
    "smoke": dict(target=dict(n_tokens=12, concentration=0.2, hidden_size=32, steps=20, seq_len=24, n_train=128),
                  n_train=64, train_len=24, steps=4, batch_size=8, lrs=(1e-3,), k=4, n_val=2, n_test=2,
                  prompt_len=6, new_tokens=8, n_dist=2, dist_tokens=8, draft_hidden=16,
                  toy=dict(vocab_size=20, k=6, n_train=32, prompt_len=4, hidden_size=16, steps=3, batch_size=8,
                           n_test=4),
                  lm=dict(n_train=4, n_test=1, ctx=6, completion=8, new_tokens=4, k=2, steps=1, batch_size=2,
                          lr=3e-4, train_layers=1, temperature=0.7)),
    # quick: learning rate 3e-3 for every arm, from a pilot on the validation prompts of seed 0
    # (PTP: 3e-3 > 2e-3 > 1e-3; draft LM: 3e-3 > 1e-3); one rate, so no validation decoding is run
    "quick": dict(target=dict(n_tokens=8, concentration=0.1, hidden_size=64, steps=300, seq_len=48),
                  n_train=512, train_len=48, steps=400, batch_size=32, lrs=(3e-3,), k=4, n_val=4,
                  n_test=12, prompt_len=12, new_tokens=48, n_dist=32, dist_tokens=48, draft_hidden=32,
                  # analytic teacher (official toy_increasing_sequence.py, V = 100); sizes in README.md
                  toy=dict(vocab_size=100, k=32, n_train=512, prompt_len=8, hidden_size=64, steps=600,
                           batch_size=32, n_test=64),
                  # SmolLM2-135M teacher: LM distillation sized to the CPU budget (README.md, compute)
                  lm=dict(n_train=32, n_test=4, ctx=12, completion=20, new_tokens=16, k=4, steps=30,
                          batch_size=4, lr=3e-4, train_layers=2, temperature=0.7)),
    # the paper: Vicuna-7B (LoRA r = 128) distilled on ShareGPT completions, Spec-Bench evaluation
    "paper": dict(teacher="lmsys/vicuna-7b-v1.3", data="ShareGPT completions of the teacher", lora_r=128,
                  eval="Spec-Bench (6 tasks)"),
}
SEEDS = {"smoke": 1, "quick": 5, "paper": 1}   # quick: power estimate in README.md


def _draft_lm(teacher, hidden, seed):
    from iclr26.models.tiny import TinyLMConfig, build_tiny_lm

    torch.manual_seed(20_000 + seed)
    c = teacher.config
    cfg = TinyLMConfig(hidden_size=hidden, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                       intermediate_size=2 * hidden, max_position_embeddings=c.max_position_embeddings)
    return build_tiny_lm(cfg, c.vocab_size, pad_token_id=c.pad_token_id, bos_token_id=c.bos_token_id,
                         eos_token_id=c.eos_token_id)


def _train_draft(draft, teacher, train, steps, batch_size, lr, seed):
    """Distil the draft LM from the teacher (soft next-token cross-entropy), the batches of train_ptp."""
    from iclr26.models.speculative import target_forward

    with torch.no_grad():
        P = torch.cat([torch.softmax(target_forward(teacher, train[i: i + 64])[1].float(), -1)
                       for i in range(0, len(train), 64)])
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(draft.parameters(), lr=lr)
    draft.train()
    for _ in range(steps):
        idx = torch.randint(0, len(train), (batch_size,), generator=g)
        logq = torch.log_softmax(draft(input_ids=train[idx]).logits.float(), -1)
        loss = -(P[idx] * logq).sum(-1).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    draft.eval()
    return draft


def _tau_ptp(teacher, ptp, prompts, n, k, seed):
    from iclr26.decoding.ptp import ptp_generate

    g = torch.Generator().manual_seed(seed)
    outs, taus = [], []
    for p in prompts:
        o, s = ptp_generate(teacher, ptp, p, n, k=k, generator=g)
        outs.append(o)
        taus.append(s.new_tokens / s.target_calls)
    return taus, outs


def _tau_spec(teacher, draft, prompts, n, k, seed):
    from iclr26.models.speculative import LMDrafter, speculative_generate

    g = torch.Generator().manual_seed(seed)
    taus = []
    for p in prompts:
        _, s = speculative_generate(teacher, LMDrafter(draft), p, n, depth=k, topk=1, do_sample=True, generator=g)
        taus.append(s.new_tokens / s.target_calls)
    return taus


def _bigram_tv(a, b, V):
    def dist(seqs):
        c = np.zeros((V, V))
        for s in seqs:
            s = np.asarray(s)
            np.add.at(c, (s[:-1], s[1:]), 1)
        return c / c.sum()
    return float(0.5 * np.abs(dist(a) - dist(b)).sum())


@torch.no_grad()
def _mean_logprob(teacher, prompts, outs):
    """Mean teacher log-probability per generated token (its expectation under the teacher's own
    samples is minus the teacher's entropy rate on these prompts)."""
    from iclr26.models.speculative import target_forward

    tot, n = 0.0, 0
    for p, o in zip(prompts, outs):
        seq = torch.cat([p, torch.as_tensor(o, dtype=torch.long)])[None]
        lp = torch.log_softmax(target_forward(teacher, seq)[1][0, len(p) - 1: -1].float(), -1)
        tot += float(lp.gather(-1, seq[0, len(p):, None]).sum())
        n += len(o)
    return tot / n


def _toy_claim(cfg: dict, seed: int) -> tuple[dict, dict]:
    """Leading-match length on the analytic teacher (:class:`IncreasingSequenceTeacher`): a PTP student
    (tiny Llama from scratch, official ``RoundingEmbedding``-style 32-bin auxiliary embedding) trained
    with :func:`train_ptp` on teacher samples; for held-out prompts and fresh uniforms u it proposes k
    tokens in one call, compared with the teacher's own inverse-CDF sample driven by the same u
    (:func:`ar_sample`). The control is the best possible independent (Medusa-style) head per slot:
    Pick(u_j, exact marginal of t_{n+j} given the context) (:func:`marginal_probs`)."""
    from iclr26.decoding.ptp import PTPConfig, PTPForCausalLM, ar_sample, pick, train_ptp
    from iclr26.decoding.ptp.toy import (IncreasingSequenceTeacher, increasing_sequences, leading_match_length,
                                         marginal_probs)
    from iclr26.models.tiny import TinyLMConfig, build_tiny_lm

    t0 = time.process_time()
    V, k, h = cfg["vocab_size"], cfg["k"], cfg["hidden_size"]
    teacher = IncreasingSequenceTeacher(V)
    g = torch.Generator().manual_seed(40_000 + seed)
    train = increasing_sequences(cfg["n_train"], cfg["prompt_len"] + k, V, g)
    torch.manual_seed(41_000 + seed)
    lm = build_tiny_lm(TinyLMConfig(hidden_size=h, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                    intermediate_size=2 * h, max_position_embeddings=256), V,
                       pad_token_id=0, bos_token_id=0, eos_token_id=V - 1)
    ptp = PTPForCausalLM(lm, PTPConfig(embedding="bins", num_anchors=32))
    losses = train_ptp(ptp, teacher, train, cfg["steps"], k=k, batch_size=cfg["batch_size"], lr=3e-3, min_context=2,
                       seed=seed)
    test = increasing_sequences(cfg["n_test"], cfg["prompt_len"], V, g)
    u = torch.rand(cfg["n_test"], k, generator=g, dtype=torch.float64)
    ref = ar_sample(teacher, test, u)
    draft, _ = ptp.generate_parallel(test, k, u=u)
    indep = pick(u, marginal_probs(test[:, -1], k, V))
    match = {"ptp": leading_match_length(draft, ref), "independent_heads": leading_match_length(indep, ref)}
    info = {"mean": {a: float(v.float().mean()) for a, v in match.items()}, "final_loss": float(np.mean(losses[-20:])),
            "cpu_s": time.process_time() - t0}
    return {a: [float(x) for x in v] for a, v in match.items()}, info


def _lm_claim(cfg: dict, seed: int) -> tuple[dict, dict]:
    """Tokens per teacher call with SmolLM2-135M as the teacher: two students, copies of the teacher
    whose last ``train_layers`` blocks and auxiliary embedding are trained with :func:`train_ptp`
    (same steps, batches, auxiliaries and learning rate) on the teacher's own samples (temperature
    ``temperature``) after GSM-style questions of this seed; ``ptp`` sees u, ``independent``
    (Medusa-style control, ``PTPConfig(independent=True)``) does not. Both are decoded by
    :func:`ptp_generate` (exact verification) on held-out questions."""
    import gc

    from iclr26.data.math import gsm_problems
    from iclr26.decoding.ptp import PTPConfig, PTPForCausalLM, ptp_generate, train_ptp
    from iclr26.models import load
    from iclr26.models.generation_cache import generate_cached

    t0 = time.process_time()
    teacher, tok = load("smollm2-135m")
    n_train, n_test, ctx, comp = cfg["n_train"], cfg["n_test"], cfg["ctx"], cfg["completion"]
    questions = [p.question for p in gsm_problems(n_train + n_test, seed=100 + seed)]
    _, ids = generate_cached(teacher, tok, questions[:n_train], comp, do_sample=True, temperature=cfg["temperature"],
                             top_p=1.0, seed=seed, batch_size=16, return_token_ids=True, min_new_tokens=comp)
    rows = [tok(q).input_ids[-ctx:] + list(map(int, i))[:comp] for q, i in zip(questions[:n_train], ids)]
    train = torch.tensor([r for r in rows if len(r) == ctx + comp], dtype=torch.long)
    test = [torch.tensor(tok(q).input_ids[-ctx:], dtype=torch.long) for q in questions[n_train:]]
    taus, info = {}, {"n_train_rows": len(train)}
    for arm in ("ptp", "independent"):
        student = PTPForCausalLM.from_teacher(teacher, PTPConfig(independent=arm == "independent"))
        torch.manual_seed(50_000 + seed)
        with torch.no_grad():
            student.aux_embed.anchors.weight.normal_(0.0, float(teacher.get_input_embeddings().weight.std()))
        for p in student.model.parameters():
            p.requires_grad_(False)
        for block in student.model.model.layers[-cfg["train_layers"]:]:
            for p in block.parameters():
                p.requires_grad_(True)
        losses = train_ptp(student, teacher, train, cfg["steps"], k=cfg["k"], batch_size=cfg["batch_size"],
                           lr=cfg["lr"], min_context=ctx, seed=seed, temperature=cfg["temperature"])
        g = torch.Generator().manual_seed(60_000 + seed)
        taus[arm] = []
        for p in test:
            _, st = ptp_generate(teacher, student, p, cfg["new_tokens"], k=cfg["k"], generator=g,
                                 temperature=cfg["temperature"])
            taus[arm].append(st.new_tokens / st.target_calls)
        info[arm] = {"loss_first": float(np.mean(losses[:5])), "loss_last": float(np.mean(losses[-5:])),
                     "mean_tokens_per_call": float(np.mean(taus[arm]))}
        del student
        gc.collect()
    del teacher
    gc.collect()
    info["cpu_s"] = time.process_time() - t0
    return {a: [float(x) for x in v] for a, v in taus.items()}, info


def run(scale: str, seed: int) -> dict:
    from iclr26.decoding.ptp import PTPConfig, PTPForCausalLM, ar_sample, train_ptp
    from iclr26.models.speculative import markov_target

    if scale == "paper":
        raise NotImplementedError("the paper's Vicuna-7B setting needs GPUs and hub access")
    torch.set_num_threads(1)
    cfg = SCALES[scale]
    seed_everything(seed)
    t0 = time.time()
    teacher, text = markov_target(seed, **cfg["target"])
    V = teacher.config.vocab_size
    rng = np.random.default_rng(seed + 1000)
    train = text(cfg["n_train"], cfg["train_len"], rng)
    val = text(cfg["n_val"], cfg["prompt_len"], rng)
    test = text(cfg["n_test"], cfg["prompt_len"], rng)
    dist = text(cfg["n_dist"], cfg["prompt_len"], rng)
    t_teacher = time.time() - t0
    k, n_new = cfg["k"], cfg["new_tokens"]
    common = dict(k=k, batch_size=cfg["batch_size"], seed=seed)

    chosen, val_scores, tokens_per_call, info_arm = {}, {}, {}, {}
    for arm in ("ptp", "independent", "speculative"):
        best = None
        val_scores[arm] = {}
        for lr in cfg["lrs"]:
            one = len(cfg["lrs"]) == 1          # nothing to choose: skip the validation decoding
            if arm == "speculative":
                m = _train_draft(_draft_lm(teacher, cfg["draft_hidden"], seed), teacher, train, cfg["steps"],
                                 cfg["batch_size"], lr, seed)
                v = float("nan") if one else float(np.mean(_tau_spec(teacher, m, val, n_new, k, seed + 7)))
            else:
                m = PTPForCausalLM.from_teacher(teacher, PTPConfig(independent=arm == "independent"))
                torch.manual_seed(30_000 + seed)
                with torch.no_grad():
                    m.aux_embed.anchors.weight.normal_(0.0, float(teacher.get_input_embeddings().weight.std()))
                train_ptp(m, teacher, train, cfg["steps"], lr=lr, **common)
                v = float("nan") if one else float(np.mean(_tau_ptp(teacher, m, val, n_new, k, seed + 7)[0]))
            val_scores[arm][lr] = v
            if best is None or (v > best[0]):
                best = (v, lr, m)
        chosen[arm] = best[2]
        info_arm[arm] = {"lr": best[1], "val_tokens_per_call": {str(a): b for a, b in val_scores[arm].items()
                                                                 if b == b}}
    t_train = time.time() - t0 - t_teacher

    taus_ptp, outs_ptp = _tau_ptp(teacher, chosen["ptp"], test, n_new, k, seed + 99)
    tokens_per_call["ptp"] = taus_ptp
    tokens_per_call["independent"] = _tau_ptp(teacher, chosen["independent"], test, n_new, k, seed + 99)[0]
    tokens_per_call["speculative"] = _tau_spec(teacher, chosen["speculative"], test, n_new, k, seed + 99)
    tokens_per_call["ar"] = [1.0] * len(test)

    # exactness: PTP decoding equals autoregressive inverse-CDF sampling with the same auxiliaries
    from iclr26.decoding.ptp import ptp_generate
    g = torch.Generator().manual_seed(seed + 99)
    mismatches = 0
    for p, o in zip(test, outs_ptp):
        u = torch.rand(n_new + k + 1, generator=g, dtype=torch.float64)
        mismatches += int((ar_sample(teacher, p, u[:n_new]) != torch.tensor(o)).sum())

    # distribution: bigrams of PTP output vs an independent teacher sample, and teacher vs teacher
    nd = cfg["dist_tokens"]
    gd = torch.Generator().manual_seed(seed + 555)
    ptp_out = [ptp_generate(teacher, chosen["ptp"], p, nd, k=k, generator=gd)[0] for p in dist]
    ref = ar_sample(teacher, dist, torch.rand(len(dist), nd, generator=gd, dtype=torch.float64)).tolist()
    ar2 = ar_sample(teacher, dist, torch.rand(len(dist), nd, generator=gd, dtype=torch.float64)).tolist()
    unver = []
    for p in dist:      # PTP proposals taken as output without verification, k at a time
        seq = p.clone()
        while len(seq) - len(p) < nd:
            d, _ = chosen["ptp"].generate_parallel(seq[None], k, generator=gd)
            seq = torch.cat([seq, d[0]])
        unver.append(seq[len(p): len(p) + nd].tolist())
    tv = {"ptp": _bigram_tv(ptp_out, ref, V), "ar": _bigram_tv(ar2, ref, V),
          "ptp_unverified": _bigram_tv(unver, ref, V)}
    loglik = {"ptp": _mean_logprob(teacher, dist, ptp_out), "ar": _mean_logprob(teacher, dist, ar2),
              "ptp_unverified": _mean_logprob(teacher, dist, unver)}

    for arm in tokens_per_call:
        info_arm.setdefault(arm, {})["mean_tokens_per_call"] = float(np.mean(tokens_per_call[arm]))
    t_markov = time.time() - t0
    toy_match, toy_info = _toy_claim(cfg["toy"], seed)
    lm_taus, lm_info = _lm_claim(cfg["lm"], seed)
    return {
        "metrics": {"tokens_per_call": {a: [float(x) for x in v] for a, v in tokens_per_call.items()},
                    "teacher_logprob": loglik, "toy_match_length": toy_match, "lm_tokens_per_call": lm_taus},
        "info": {"toy": toy_info, "lm": lm_info, "markov_seconds": t_markov, "bigram_tv": tv, "arms": info_arm, "teacher_train_loss": teacher.train_loss, "ptp_vs_ar_token_mismatches": mismatches,
                 "k": k, "new_tokens": n_new, "seconds": {"teacher": t_teacher, "drafters": t_train,
                                                           "total": time.time() - t0}},
    }
