"""Claim checks for RLCR (arXiv:2507.16806).

(1) The RLCR reward is a proper scoring rule for the verbalised confidence: for an answer that is
    correct with probability p, the Monte-Carlo expected reward (outcomes drawn from Bernoulli(p))
    of reporting q = p beats the best report at least 0.05 away, over a grid of p (items).
(2) Accuracy incentive (the theorem's second part): the best achievable expected RLCR reward of
    giving a more-likely-correct answer exceeds that of a less-likely one (pairs of p, items);
(3) the unbounded log-score analogue loses it: on pairs with p <= 0.25 the less-likely answer
    earns more (the paper's argument that the bounded rule matters).
(4) Confidence-weighted majority vote beats plain majority vote at equal samples, paired over
    problems. Samples come from SmolLM2-135M-Instruct on procedural arithmetic. The 135M model
    was not trained to verbalise a confidence, so each sample's confidence is the model's own probability of
    the answer tokens (from the step distributions the sample was drawn from; a proxy, see README).
"""
from __future__ import annotations

import numpy as np

from iclr26.common.seeding import seed_everything

from .reward import expected_calibration_error, rlcr_score
from .voting import confidence_weighted_vote, majority_vote, max_confidence

SCALES = {
    "smoke": dict(n_p=9, n_q=51, draws=2000, n_pairs=12,
                  model="smollm2-135m", n_problems=2, k=3, difficulty=2, max_new_tokens=3, temperature=1.0,
                  batch_size=16),
    "quick": dict(n_p=49, n_q=101, draws=20000, n_pairs=60,
                  model="smollm2-135m", n_problems=32, k=8, difficulty=2, max_new_tokens=4, temperature=1.0,
                  batch_size=32),
    # the paper: Qwen2.5-7B trained with RLCR, up to 32 samples per question on math/HotpotQA
    "paper": dict(n_p=99, n_q=1001, draws=100000, n_pairs=200,
                  model="qwen2.5-coder-1.5b", n_problems=1000, k=32, difficulty=5, max_new_tokens=16,
                  temperature=1.0, batch_size=32),
}
SEEDS = {"smoke": 1, "quick": 2, "paper": 3}

MISREPORT_GAP = 0.05   # a "misreport" is any q at least this far from p (our choice)
PAIR_GAP = 0.1         # pairs (p_lo, p_hi) differ by at least this much (our choice)
LOG_REGION = 0.25      # log-score counter-example region: p <= 0.25 < 1/(1+e), where p - H(p) decreases


def _score_table(q, score):
    """Reward for each q when the answer is right (row 1) or wrong (row 0)."""
    if score == "brier":
        return np.stack([-(q ** 2), 1.0 - (q - 1.0) ** 2])
    with np.errstate(divide="ignore"):
        return np.stack([np.log1p(-q), 1.0 + np.log(q)])


def _mc_expected(p, q, draws, rng, score="brier"):
    """Monte-Carlo expected reward for every (p, q): outcomes y ~ Bernoulli(p), common to all q."""
    freq = (rng.binomial(draws, p) / draws)[:, None]          # empirical P(correct) per p
    s = _score_table(np.asarray(q, dtype=float), score)
    # an outcome that never occurred contributes 0 (avoids 0 * -inf for the log score)
    right = np.where(freq > 0, freq * s[1][None, :], 0.0)
    wrong = np.where(freq < 1, (1 - freq) * s[0][None, :], 0.0)
    return right + wrong


def proper_scoring(cfg, rng):
    p = np.linspace(0.02, 0.98, cfg["n_p"])
    q = np.linspace(0.0, 1.0, cfg["n_q"])
    # one set of outcome draws per p, shared by every report q (common random numbers)
    er_all = _mc_expected(p, np.concatenate([q, p]), cfg["draws"], rng)
    er = er_all[:, : len(q)]
    truthful = er_all[np.arange(len(p)), len(q) + np.arange(len(p))]   # report q = p exactly
    far = np.abs(q[None, :] - p[:, None]) >= MISREPORT_GAP
    best_mis = np.where(far, er, -np.inf).max(axis=1)
    argmax_q = q[er.argmax(axis=1)]
    return truthful, best_mis, p, argmax_q


def accuracy_incentive(cfg, rng, score, low_region=False):
    hi_lim = LOG_REGION if low_region else 1.0
    p_lo = rng.uniform(0.0, hi_lim - PAIR_GAP, cfg["n_pairs"])
    p_hi = np.minimum(p_lo + rng.uniform(PAIR_GAP, hi_lim - p_lo + 1e-12), hi_lim)
    q = np.linspace(0.0, 1.0, cfg["n_q"])
    best_hi = _mc_expected(p_hi, q, cfg["draws"], rng, score).max(axis=1)
    best_lo = _mc_expected(p_lo, q, cfg["draws"], rng, score).max(axis=1)
    return best_hi, best_lo


def answer_logprob(tok, ids, scores, answer):
    """log-probability of the sampled answer: the sum, over the generated tokens whose text overlaps
    the first occurrence of ``answer`` in the completion, of log softmax(step scores)[token].
    The scores are those the token was sampled from (temperature 1, no truncation: the model's own
    distribution). None when the answer does not occur."""
    import torch

    text = tok.decode(ids, skip_special_tokens=True)
    start = text.find(answer) if answer else -1
    if start < 0:
        return None
    end = start + len(answer)
    logp = torch.log_softmax(scores.float(), dim=-1)
    total, prev = 0.0, 0
    for j in range(len(ids)):
        cur = len(tok.decode(ids[: j + 1], skip_special_tokens=True))
        if prev < end and cur > start:
            total += float(logp[j, ids[j]])
        prev = cur
    return total


def voting(cfg, seed):
    import torch

    from iclr26.data.math import arithmetic_problems, arithmetic_prompt, first_number, is_correct
    from iclr26.models import load
    from iclr26.models.generation import generate

    model, tok = load(cfg["model"])
    probs = arithmetic_problems(cfg["n_problems"], seed=1000 + seed, difficulty=cfg["difficulty"])
    k = cfg["k"]
    # few-shot chat prompt whose reply is started with the expression ("17 + 4 ="), so the sampled
    # continuation is the answer (its first number)
    prompts = [arithmetic_prompt(tok, p) for p in probs]
    flat = [pr for pr in prompts for _ in range(k)]
    torch.manual_seed(seed)
    comps, answers, conf = [], [], []
    bs = cfg["batch_size"]
    for b in range(0, len(flat), bs):      # chunked so that the per-step scores are dropped at once
        c, sc, ids = generate(model, tok, flat[b : b + bs], cfg["max_new_tokens"], do_sample=True,
                              temperature=cfg["temperature"], batch_size=bs, return_scores=True,
                              return_token_ids=True)
        for text, s, i in zip(c, sc, ids):
            a = first_number(text)
            lp = answer_logprob(tok, i, s, a)
            comps.append(text)
            answers.append(a)
            conf.append(float(np.exp(lp)) if lp is not None else 0.0)
    wv, mv, mc, single, sample_correct = [], [], [], [], []
    for i, p in enumerate(probs):
        a, q = answers[i * k : (i + 1) * k], conf[i * k : (i + 1) * k]
        wv.append(float(is_correct(confidence_weighted_vote(a, q), p.answer)))
        mv.append(float(is_correct(majority_vote(a), p.answer)))
        mc.append(float(is_correct(max_confidence(a, q), p.answer)))
        single.append(float(is_correct(a[0], p.answer)))
        sample_correct += [float(is_correct(x, p.answer)) for x in a]
    return dict(weighted=wv, majority=mv, max_conf=mc, single=single, conf=conf, sample_correct=sample_correct,
                examples=comps[: min(8, len(comps))])


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    rng = seed_everything(seed)
    truthful, best_mis, p_grid, argmax_q = proper_scoring(cfg, rng)
    b_hi, b_lo = accuracy_incentive(cfg, rng, "brier")
    l_hi, l_lo = accuracy_incentive(cfg, rng, "log", low_region=True)
    v = voting(cfg, seed)
    return {
        "metrics": {
            "expected_reward": {"truthful": truthful.tolist(), "best_misreport": best_mis.tolist()},
            "brier_optimal_reward": {"more_likely": b_hi.tolist(), "less_likely": b_lo.tolist()},
            "log_optimal_reward": {"more_likely": l_hi.tolist(), "less_likely": l_lo.tolist()},
            "vote_correct": {"confidence_weighted": v["weighted"], "majority": v["majority"]},
        },
        "info": {
            "argmax_q_minus_p_max_abs": float(np.max(np.abs(argmax_q - p_grid))),
            "accuracy": {"confidence_weighted": float(np.mean(v["weighted"])), "majority": float(np.mean(v["majority"])),
                         "max_confidence": float(np.mean(v["max_conf"])), "single_sample": float(np.mean(v["single"]))},
            "sample_accuracy": float(np.mean(v["sample_correct"])),
            "proxy_confidence_ece": expected_calibration_error(v["conf"], v["sample_correct"]),
            "proxy_confidence_mean_rlcr_reward": float(np.mean([rlcr_score(c, y) for c, y in zip(v["conf"], v["sample_correct"])])),
            "samples_per_problem": cfg["k"],
            "example_completions": v["examples"],
        },
    }
