"""Claim checks for RLCR (arXiv:2507.16806). Every claim runs this package's reward.

(1) The RLCR reward is a proper scoring rule for the verbalised confidence: for an answer that is
    correct with probability p, the Monte-Carlo expected reward (outcomes drawn from Bernoulli(p),
    each scored by :func:`reward.expected_reward`, i.e. by :func:`reward.rlcr_score`) of reporting
    q = p beats the best report at least 0.05 away, over a grid of p (items).
(2) Accuracy incentive (the theorem's second part): the best achievable expected RLCR reward of a
    more-likely-correct answer exceeds that of a less-likely one (pairs of p, items);
(3) the unbounded log-score analogue (:func:`reward.log_score`) loses it: on pairs with p <= 0.25
    the less-likely answer earns more.
(4) The paper's central experiment in small: GRPO (TRL's ``GRPOTrainer``, LoRA on SmolLM2-135M)
    with :func:`reward.rlcr_reward` against GRPO with :func:`reward.rlvr_reward`, same model, data,
    LoRA init, data order and budget; held-out Brier score, ECE and accuracy of the verbalised
    confidence. One seed = one independently trained pair of models (the unit).
(5) Confidence-weighted majority vote beats plain majority vote at equal samples (k per problem),
    using the verbalised confidences of the RLCR-trained model of (4), paired over problems.
"""
from __future__ import annotations

import tempfile

import numpy as np

from iclr26.common.seeding import seed_everything

from . import reward as R
from .voting import confidence_weighted_vote, majority_vote, max_confidence

SCALES = {
    "smoke": dict(n_p=9, n_q=51, draws=2000, n_pairs=12,
                  model="smollm2-135m", difficulty=1, max_new_tokens=6, steps=1, prompts_per_step=2,
                  num_generations=2, lr=5e-4, lora_r=8, n_test=4, n_vote=2, k=2, batch_size=16),
    "quick": dict(n_p=49, n_q=101, draws=20000, n_pairs=60,
                  model="smollm2-135m", difficulty=1, max_new_tokens=16, steps=10, prompts_per_step=2,
                  num_generations=8, lr=5e-4, lora_r=8, n_test=100, n_vote=100, k=16, batch_size=64),
    # the paper: Qwen2.5-7B, GRPO with RLCR vs RLVR on HotpotQA / math, up to 32 samples per question
    "paper": dict(n_p=99, n_q=1001, draws=100000, n_pairs=200,
                  model="qwen2.5-coder-1.5b", difficulty=4, max_new_tokens=48, steps=500, prompts_per_step=16,
                  num_generations=8, lr=1e-5, lora_r=16, n_test=1000, n_vote=1000, k=32, batch_size=32),
}
SEEDS = {"smoke": 1, "quick": 5, "paper": 5}   # quick: 5, fixed before the run at the current code (the published
                                               # 3-seed run was extended to 5 after an inconclusive look)

MISREPORT_GAP = 0.05   # a "misreport" is any q at least this far from p (our choice)
PAIR_GAP = 0.1         # pairs (p_lo, p_hi) differ by at least this much (our choice)
LOG_REGION = 0.25      # log-score counter-example region: p <= 0.25 < 1/(1+e), where p - H(p) decreases


def _mc_expected(p, q, draws, rng, score="brier"):
    """Monte-Carlo expected reward for every (p, q): outcomes y ~ Bernoulli(p), common to all q; the
    reward of each outcome is the library's (:func:`reward.expected_reward` at the empirical rate,
    which is exactly the mean of the library's per-output score over the drawn outcomes)."""
    freq = rng.binomial(draws, p) / draws                   # empirical P(correct) per p
    return R.expected_reward(freq[:, None], np.asarray(q, dtype=float)[None, :], score)


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


#: fixed answer + confidence format (two shots; the shots' confidences are varied so that no
#: single value is copied). Raw text, no chat template: short prompts keep GRPO affordable on a CPU.
PROMPT_HEAD = ("Answer, then give your confidence (0 to 1) that the answer is right.\n"
               "Q: 12 + 35 =<answer>47</answer><confidence>0.9</confidence>\n"
               "Q: 61 - 8 =<answer>53</answer><confidence>0.6</confidence>\n")
SPLIT_SEED = 20260   # the fixed train/test split of distinct expressions (not a seed of the trial)


def format_prompt(expression: str) -> str:
    return PROMPT_HEAD + f"Q: {expression} ="


def split_problems(difficulty):
    """Distinct arithmetic expressions split once, by a fixed seed, into a training half and a
    held-out half (no expression is in both)."""
    from iclr26.data.math import arithmetic_problems

    uniq = {}
    for p in arithmetic_problems(6000, seed=SPLIT_SEED, difficulty=difficulty):
        uniq.setdefault(p.metadata["expression"], p)
    keys = sorted(uniq)
    np.random.default_rng(SPLIT_SEED).shuffle(keys)
    half = len(keys) // 2
    return [uniq[k] for k in keys[:half]], [uniq[k] for k in keys[half:]]


def train_grpo(cfg, seed, reward_fn, train):
    """LoRA + TRL ``GRPOTrainer`` with ``reward_fn`` (the library's rlcr_reward or rlvr_reward) as
    its only reward function; returns the trained peft model and its tokenizer. Both arms of a seed
    share the LoRA init (``seed``), the data order and every hyper-parameter."""
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from iclr26.models.lora import load_with_lora, trl_args

    torch.manual_seed(seed)
    model, tok = load_with_lora(cfg["model"], r=cfg["lora_r"], seed=seed)
    n = cfg["steps"] * cfg["prompts_per_step"]
    idx = np.random.default_rng([seed, 7]).choice(len(train), size=n, replace=n > len(train))
    ds = Dataset.from_dict({"prompt": [format_prompt(train[i].metadata["expression"]) for i in idx],
                            "answer": [train[i].answer for i in idx]})
    with tempfile.TemporaryDirectory() as out:
        args = trl_args(GRPOConfig, out, max_steps=cfg["steps"],
                        per_device_train_batch_size=cfg["prompts_per_step"] * cfg["num_generations"],
                        num_generations=cfg["num_generations"], max_completion_length=cfg["max_new_tokens"],
                        learning_rate=cfg["lr"], lr_scheduler_type="constant", warmup_steps=0,
                        temperature=1.0, beta=0.0, seed=seed, data_seed=seed, gradient_checkpointing=False,
                        bf16=False, logging_steps=max(1, cfg["steps"]))
        trainer = GRPOTrainer(model=model, reward_funcs=[reward_fn], args=args, train_dataset=ds,
                              processing_class=tok)
        trainer.train()
    model.eval()
    return model, tok


def evaluate(model, tok, problems, cfg, k=1, seed=0):
    """Generate for every problem (greedy when ``k == 1``, else ``k`` samples at temperature 1) and
    parse the answer and verbalised confidence. Returns per-sample answers, confidences (None when
    missing/invalid) and correctness."""
    from iclr26.data.math import is_correct
    from iclr26.models.generation import generate

    prompts = [format_prompt(p.metadata["expression"]) for p in problems for _ in range(k)]
    texts = generate(model, tok, prompts, cfg["max_new_tokens"], do_sample=k > 1, temperature=1.0,
                     seed=seed, batch_size=cfg["batch_size"])
    parsed = [R.parse_completion(t) for t in texts]
    golds = [p.answer for p in problems for _ in range(k)]
    correct = [bool(x.answer is not None and is_correct(x.answer, g)) for x, g in zip(parsed, golds)]
    return dict(answers=[x.answer for x in parsed], conf=[x.confidence for x in parsed], correct=correct,
                texts=texts)


def discrimination_auroc(conf, correct) -> float:
    """AUROC of the verbalised confidence for correctness over the items with a parsed confidence
    (scikit-learn's ``roc_auc_score``; ties count half): 0.5 = the confidence does not rank right
    answers above wrong ones, as a constant would. 0.5 when only one outcome occurs (undefined)."""
    from sklearn.metrics import roc_auc_score

    pairs = [(q, bool(c)) for q, c in zip(conf, correct) if q is not None]
    ys = [c for _, c in pairs]
    if not pairs or all(ys) or not any(ys):
        return 0.5
    return float(roc_auc_score(ys, [q for q, _ in pairs]))


def calibration(ev):
    """Held-out Brier score (the library's ``brier_score``; a missing confidence costs the worst
    term, 1, as in the reward), ECE over the parsed confidences, accuracy, the AUROC of the
    confidence for correctness (:func:`discrimination_auroc`) and ``brier_constant``: the Brier score
    of always reporting the model's own held-out accuracy a, a (1 - a), the best constant confidence
    (an oracle constant: it is chosen on the evaluation items, which favours the constant)."""
    brier = [R.brier_score(q, c) if q is not None else 1.0 for q, c in zip(ev["conf"], ev["correct"])]
    have = [i for i, q in enumerate(ev["conf"]) if q is not None]
    ece = (R.expected_calibration_error([ev["conf"][i] for i in have], [ev["correct"][i] for i in have])
           if have else 1.0)
    acc = float(np.mean(ev["correct"]))
    return dict(brier=float(np.mean(brier)), ece=float(ece), accuracy=acc,
                brier_constant=acc * (1.0 - acc), auroc=discrimination_auroc(ev["conf"], ev["correct"]),
                format_rate=len(have) / len(ev["conf"]),
                mean_conf=float(np.mean([ev["conf"][i] for i in have])) if have else None)


def rl_arms(cfg, seed):
    import gc

    import torch

    from iclr26.data.math import is_correct

    torch.set_num_threads(1)
    train, test = split_problems(cfg["difficulty"])
    test_items = [test[i] for i in np.random.default_rng([seed, 11]).choice(len(test), cfg["n_test"], replace=False)]
    vote_items = [test[i] for i in np.random.default_rng([seed, 13]).choice(len(test), cfg["n_vote"], replace=False)]
    out = {}
    for arm, fn in (("rlvr", R.rlvr_reward), ("rlcr", R.rlcr_reward)):
        model, tok = train_grpo(cfg, seed, fn, train)
        ev = evaluate(model, tok, test_items, cfg)
        out[arm] = calibration(ev)
        out[arm]["examples"] = ev["texts"][:4]
        if arm == "rlcr":                         # (5): k samples per problem from the RLCR model
            vs = evaluate(model, tok, vote_items, cfg, k=cfg["k"], seed=seed)
            out["vote"] = vs
        del model
        gc.collect()
    k = cfg["k"]
    vs = out.pop("vote")
    wv, mv, mc, samp = [], [], [], []
    for i, p in enumerate(vote_items):
        a = vs["answers"][i * k:(i + 1) * k]
        q = [c if c is not None else 0.0 for c in vs["conf"][i * k:(i + 1) * k]]   # no confidence: no weight
        wv.append(float(is_correct(confidence_weighted_vote(a, q), p.answer)))
        mv.append(float(is_correct(majority_vote(a), p.answer)))
        mc.append(float(is_correct(max_confidence(a, q), p.answer)))
    out["voting"] = dict(weighted=wv, majority=mv, max_conf=mc,
                         sample_accuracy=float(np.mean(vs["correct"])),
                         format_rate=float(np.mean([c is not None for c in vs["conf"]])))
    return out


def run(scale: str, seed: int) -> dict:
    import torch

    torch.set_num_threads(1)
    cfg = SCALES[scale]
    rng = seed_everything(seed)
    truthful, best_mis, p_grid, argmax_q = proper_scoring(cfg, rng)
    b_hi, b_lo = accuracy_incentive(cfg, rng, "brier")
    l_hi, l_lo = accuracy_incentive(cfg, rng, "log", low_region=True)
    rl = rl_arms(cfg, seed)
    v = rl["voting"]
    return {
        "metrics": {
            "expected_reward": {"truthful": truthful.tolist(), "best_misreport": best_mis.tolist()},
            "brier_optimal_reward": {"more_likely": b_hi.tolist(), "less_likely": b_lo.tolist()},
            "log_optimal_reward": {"more_likely": l_hi.tolist(), "less_likely": l_lo.tolist()},
            "heldout_brier": {"rlcr": rl["rlcr"]["brier"], "rlvr": rl["rlvr"]["brier"],
                              "rlcr_constant": rl["rlcr"]["brier_constant"]},
            "heldout_auroc": {"rlcr": rl["rlcr"]["auroc"], "rlvr": rl["rlvr"]["auroc"]},
            "heldout_ece": {"rlcr": rl["rlcr"]["ece"], "rlvr": rl["rlvr"]["ece"]},
            "heldout_accuracy": {"rlcr": rl["rlcr"]["accuracy"], "rlvr": rl["rlvr"]["accuracy"]},
            "vote_correct": {"confidence_weighted": v["weighted"], "majority": v["majority"]},
        },
        "info": {
            "argmax_q_minus_p_max_abs": float(np.max(np.abs(argmax_q - p_grid))),
            "rl": {arm: rl[arm] for arm in ("rlcr", "rlvr")},
            "vote_accuracy": {"confidence_weighted": float(np.mean(v["weighted"])),
                              "majority": float(np.mean(v["majority"])),
                              "max_confidence": float(np.mean(v["max_conf"]))},
            "vote_sample_accuracy": v["sample_accuracy"], "vote_format_rate": v["format_rate"],
            "samples_per_problem": cfg["k"],
        },
    }
