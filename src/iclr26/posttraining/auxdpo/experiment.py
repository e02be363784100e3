"""Claim checks for arXiv:2510.20413 (AuxDPO) on random misspecified linear-softmax bandits.

Each trial (seed) draws its own validation bandits and evaluation bandits (independent draws):

* a bandit: ``S`` states, ``K`` actions, ``d``-dim Gaussian features, a non-uniform base policy
  ``theta0``, a reward ``r*`` drawn independently of the features (so not realisable by the class:
  misspecified), and skewed pair frequencies (Dirichlet with concentration < 1);
* ``n_pairs`` comparisons labelled by the Bradley-Terry-Luce model on ``r*``;
* arms, all at the KL weight ``beta`` of the objective: ``dpo`` (:func:`.fit_dpo`), ``ipo``
  (:func:`.fit_ipo`, ``tau`` tuned), ``auxdpo`` (:func:`.fit_auxdpo`, exact null-space form,
  ``lambda_amp`` tuned), ``rlhf`` (two-stage: :func:`.fit_bt_reward` then :func:`.rlhf_solution`)
  and ``base`` (``theta0``);
* hyper-parameters are chosen by the mean true expected reward on the trial's validation bandits,
  never on its evaluation bandits;
* metrics per evaluation bandit: the true expected reward ``E_{pi_theta} r*`` and the KL divergence
  from the (population) RLHF policy ``argmax_theta E r* - beta KL`` to the learned policy.

The paper's three-arm example (Section 3) is exact arithmetic: its population values are checked in
the tests and returned under ``info["three_arm"]``; the metric ``three_arm_reward`` is its
finite-sample version (``n_three`` independent data sets of ``n_three_pairs`` comparisons drawn with
the example's pair frequencies), so that the sign of the effect is a statistical claim.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from iclr26.common.seeding import seed_everything

from .bandit import (PreferenceCounts, fit_auxdpo, fit_bt_reward, fit_dpo, fit_ipo, fit_ipo_matched_kl, null_space_basis,
                     random_bandit, rlhf_local_solution, rlhf_solution, sample_preferences, three_arm_example)

# lambda_null = 1e-4: the official notebook's value (Debangshu93/AuxDPO); at 1 the raw Gram of the LoRA
# gradients (eigenvalues 15-3500) makes the penalty 20-70x the DPO loss and pins delta at ~1e-4
_LM_COMMON = dict(model="smollm2-135m", beta=0.1, lora_r=4, lora_layers=2, lambda_null=1e-4, lambda_amp=0.01,
                  delta_lr=0.05, prompt_tokens=12, completion_tokens=6)
SCALES = {
    "smoke": dict(S=2, K=5, d=2, n_pairs=200, n_val=1, n_eval=2, beta=1.0, n_three=2, n_three_pairs=600,
                  lambda_grid=(1e-3, 0.1), tau_grid=(0.5, 1.0),
                  lm=dict(_LM_COMMON, n_train=4, n_eval=4, batch=2, steps=4, lr=5e-3)),
    # tau_grid: IPO's tau tuned for the regularised objective E r* - beta KL; the grid spans 3 decades
    # so that the validation optimum is interior (info["tau_at_grid_edge"] says when it is not)
    # lambda_grid: lambda_amp = 0 leaves the fit without a unique solution on separable pairs (|delta|
    # grows until L-BFGS stops), so the grid starts at 1e-5 instead of 0
    "quick": dict(S=3, K=10, d=3, n_pairs=1000, n_val=5, n_eval=20, beta=1.0, n_three=20, n_three_pairs=600,
                  lambda_grid=(1e-5, 1e-4, 1e-3, 0.01, 0.1, 1.0), tau_grid=(0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0),
                  # the CPU language-model check (exploratory, power-limited: see the README)
                  # 4 epochs: a per-pair offset is zero at its pair's first visit, so one epoch would equal DPO
                  lm=dict(_LM_COMMON, n_train=8, n_eval=16, batch=4, steps=8, lr=5e-3)),
    # the paper's LLM run, written down (not run on CPU): AuxDPOTrainer on SmolLM2-135M + LoRA,
    # HH-RLHF harmless-base pairs (shipped: iclr26/data/files/hh-rlhf), beta = 0.1 (TRL default)
    "paper": dict(S=3, K=10, d=3, n_pairs=1000, n_val=5, n_eval=20, beta=1.0, n_three=20, n_three_pairs=600,
                  lambda_grid=(1e-5, 1e-4, 1e-3, 0.01, 0.1, 1.0), tau_grid=(0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0),
                  lm=dict(_LM_COMMON, lora_layers=None, n_train=2000, n_eval=312, batch=16, steps=250,
                          lr=5e-5, prompt_tokens=256, completion_tokens=128)),
}
SEEDS = {"smoke": 1, "quick": 10, "paper": 10}
ARMS = ("base", "dpo", "ipo", "auxdpo", "rlhf")
HH_FILE = "harmless-base-test.jsonl.gz"


def _draw(rng, cfg):
    bandit, r, pairs = random_bandit(rng, S=cfg["S"], K=cfg["K"], d=cfg["d"])
    data = sample_preferences(bandit, r, pairs, cfg["n_pairs"], rng)
    return bandit, r, data


def _tune(cfg, val):
    """Hyper-parameters chosen on the validation bandits only:

    * ``lambda_reward``: AuxDPO's ``lambda_amp`` by mean true reward (the paper's metric);
    * ``lambda_objective`` and ``tau_objective``: AuxDPO's ``lambda_amp`` and IPO's ``tau`` by the mean
      regularised objective ``E r* - beta KL(pi || pi0)`` at the comparison's ``beta`` (matched
      regularisation: IPO cannot buy reward with an unpenalised step away from the base policy).
    """
    beta = cfg["beta"]
    aux = {lam: [fit_auxdpo(b, dt, beta, lam, Gamma=G) for b, r, dt, G in val] for lam in cfg["lambda_grid"]}
    ipo = {tau: [fit_ipo(b, dt, tau) for b, r, dt, _ in val] for tau in cfg["tau_grid"]}
    rew = {lam: np.mean([b.expected_reward(t, r) for (b, r, _, _), t in zip(val, ths)]) for lam, ths in aux.items()}
    obj = {lam: np.mean([b.regularised_objective(t, r, beta) for (b, r, _, _), t in zip(val, ths)])
           for lam, ths in aux.items()}
    tobj = {tau: np.mean([b.regularised_objective(t, r, beta) for (b, r, _, _), t in zip(val, ths)])
            for tau, ths in ipo.items()}
    pick = lambda d: max(d, key=d.get)  # noqa: E731
    return dict(lambda_reward=pick(rew), lambda_objective=pick(obj), tau_objective=pick(tobj),
                tau_scores={str(k): float(v) for k, v in tobj.items()})


def three_arm_sampled(rng, n_pairs):
    """Finite-sample version of the three-arm example: ``n_pairs`` comparisons drawn with the example's
    pair frequencies (1 : 10 : 1), labelled by BTL on ``r*``; expected rewards of base / DPO / AuxDPO."""
    b, r, pop = three_arm_example()
    n = rng.multinomial(n_pairs, (pop.wins_a + pop.wins_b) / (pop.wins_a + pop.wins_b).sum())
    p = 1.0 / (1.0 + np.exp(-(r[0, pop.a] - r[0, pop.b])))
    wa = rng.binomial(n, p)
    data = PreferenceCounts(pop.s, pop.a, pop.b, wa, n - wa)
    return {"base": b.expected_reward(b.theta0, r), "dpo": b.expected_reward(fit_dpo(b, data, 1.0), r),
            "auxdpo": b.expected_reward(fit_auxdpo(b, data, 1.0, 0.0), r)}


def three_arm_values():
    """Expected rewards of base / DPO / IPO / AuxDPO / RLHF-local in the paper's three-arm example."""
    from .bandit import rlhf_local_solution
    b, r, data = three_arm_example()
    th = {"base": b.theta0, "dpo": fit_dpo(b, data, 1.0), "ipo": fit_ipo(b, data, 1.0),
          "auxdpo": fit_auxdpo(b, data, 1.0, 0.0), "rlhf_local": rlhf_local_solution(b, r, 1.0)}
    return {k: b.expected_reward(v, r) for k, v in th.items()}


def _bandit_trial(cfg, rng):
    beta = cfg["beta"]
    val = []
    for _ in range(cfg["n_val"]):
        b, r, dt = _draw(rng, cfg)
        val.append((b, r, dt, null_space_basis(b.A_matrix())))
    tuned = _tune(cfg, val)
    lam_r, lam_j, tau = tuned["lambda_reward"], tuned["lambda_objective"], tuned["tau_objective"]
    reward = {a: [] for a in ARMS}
    gain = {a: [] for a in ("auxdpo", "ipo_kl_matched")}
    obj = {a: [] for a in ("dpo", "ipo", "auxdpo", "rlhf")}
    kl = {a: [] for a in ARMS}
    kl_local = {a: [] for a in ("dpo", "auxdpo")}
    matched_tau, kl_base = [], {a: [] for a in ("dpo", "auxdpo", "ipo", "ipo_kl_matched")}
    for _ in range(cfg["n_eval"]):
        b, r, dt = _draw(rng, cfg)
        G = null_space_basis(b.A_matrix())
        aux_r = fit_auxdpo(b, dt, beta, lam_r, Gamma=G)
        aux_j = aux_r if lam_j == lam_r else fit_auxdpo(b, dt, beta, lam_j, Gamma=G)
        # IPO at the KL to the base policy that AuxDPO reached on the same data (no reward used)
        ipo_m, t_m = fit_ipo_matched_kl(b, dt, b.kl(aux_r, b.theta0))
        th = {"base": b.theta0, "dpo": fit_dpo(b, dt, beta), "ipo": fit_ipo(b, dt, tau), "auxdpo": aux_r,
              "rlhf": rlhf_solution(b, fit_bt_reward(b, dt), beta)}
        target, local = rlhf_solution(b, r, beta), rlhf_local_solution(b, r, beta)
        for a in ARMS:
            reward[a].append(b.expected_reward(th[a], r))
            kl[a].append(b.kl(target, th[a]))
        base_r = reward["base"][-1]
        gain["auxdpo"].append(reward["auxdpo"][-1] - base_r)
        gain["ipo_kl_matched"].append(b.expected_reward(ipo_m, r) - base_r)
        j0 = b.regularised_objective(b.theta0, r, beta)
        for a, t in (("dpo", th["dpo"]), ("ipo", th["ipo"]), ("auxdpo", aux_j), ("rlhf", th["rlhf"])):
            obj[a].append(b.regularised_objective(t, r, beta) - j0)
        for a in kl_local:
            kl_local[a].append(b.kl(local, th[a]))
        matched_tau.append(t_m)
        for a, t in (("dpo", th["dpo"]), ("auxdpo", aux_r), ("ipo", th["ipo"]), ("ipo_kl_matched", ipo_m)):
            kl_base[a].append(b.kl(t, b.theta0))
    gaps = np.asarray(kl["auxdpo"]) - np.asarray(kl["dpo"])  # KL(target || AuxDPO) - KL(target || DPO)
    gaps_local = np.asarray(kl_local["auxdpo"]) - np.asarray(kl_local["dpo"])
    metrics = {
        "true_reward": reward,
        "reward_gain": gain,
        "objective_gain": obj,
        "kl_from_rlhf": kl,
        "kl_from_rlhf_local": kl_local,
        # per trial: the median over its evaluation bandits of the paired gap
        # KL(target || pi_AuxDPO) - KL(target || pi_DPO) (robust to the few bandits where one arm overshoots)
        "kl_gap_rlhf_median": {"auxdpo": float(np.median(gaps))},
        "kl_gap_rlhf_mean": {"auxdpo": float(np.mean(gaps))},
        "kl_gap_local_median": {"auxdpo": float(np.median(gaps_local))},
        # 1 where AuxDPO's policy is nearer the RLHF policy than DPO's (in KL), per bandit
        "auxdpo_nearer_than_dpo": {"auxdpo": [float(g < 0) for g in gaps]},
    }
    grid = cfg["tau_grid"]
    info = dict(tuned, lambda_amp=lam_r, tau=tau, tau_at_grid_edge=bool(tau in (min(grid), max(grid))),
                matched_tau=matched_tau, kl_to_base={a: float(np.mean(v)) for a, v in kl_base.items()},
                kl_to_base_median={a: float(np.median(v)) for a, v in kl_base.items()})
    return metrics, info


def run(scale: str, seed: int) -> dict:
    """One trial: bandits (validation + evaluation draws), the three-arm example's finite-sample
    data sets and, where the scale has ``lm``, the language-model comparison."""
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {sorted(SCALES)}, got {scale!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    cfg = SCALES[scale]
    seed_everything(seed)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    rng = np.random.default_rng([seed, 2510])
    metrics, info = _bandit_trial(cfg, rng)
    three = three_arm_values()
    sampled = [three_arm_sampled(rng, cfg["n_three_pairs"]) for _ in range(cfg["n_three"])]
    metrics["three_arm_reward"] = {k: [d[k] for d in sampled] for k in ("base", "dpo", "auxdpo")}
    info["three_arm"] = three
    info["seconds_bandits"] = time.perf_counter() - t0
    if "lm" in cfg:
        t1 = time.perf_counter()
        acc, lm_info = lm_trial(cfg["lm"], seed)
        metrics["lm_heldout_accuracy"] = acc
        info["lm"] = dict(lm_info, seconds=time.perf_counter() - t1)
    info["seconds"] = time.perf_counter() - t0
    return {"metrics": metrics, "info": info}


# ----------------------------------------------------------------------------- the language-model check
def load_hh_pairs(tokenizer, prompt_tokens: int, completion_tokens: int) -> list[dict]:
    """HH-RLHF harmless-base test pairs (shipped in ``iclr26/data/files/hh-rlhf``, MIT) as
    ``{"prompt", "chosen", "rejected"}``: the shared dialogue up to its last ``"\\n\\nAssistant:"`` cut
    to its last ``prompt_tokens`` tokens, the two replies to their first ``completion_tokens``; pairs
    whose cut replies agree (or that share no prompt) are dropped. File order."""
    import gzip
    import json

    from iclr26.data.packaged import packaged_dir

    for name, v in (("prompt_tokens", prompt_tokens), ("completion_tokens", completion_tokens)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    path = packaged_dir("hh-rlhf") / HH_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: the HH-RLHF harmless-base test split shipped with the package")
    key = "\n\nAssistant:"
    out = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            row = json.loads(line)
            c, j = row["chosen"], row["rejected"]
            i = c.rfind(key)
            if i < 0 or not j.startswith(c[: i + len(key)]):
                continue
            p = c[: i + len(key)]
            p_ids = tokenizer(p, add_special_tokens=False).input_ids[-prompt_tokens:]
            c_ids = tokenizer(c[len(p):], add_special_tokens=False).input_ids[:completion_tokens]
            j_ids = tokenizer(j[len(p):], add_special_tokens=False).input_ids[:completion_tokens]
            if not c_ids or not j_ids or c_ids == j_ids:
                continue
            out.append(dict(prompt=tokenizer.decode(p_ids), chosen=tokenizer.decode(c_ids),
                            rejected=tokenizer.decode(j_ids)))
    return out


def _lora(base, cfg, seed):
    """Fresh LoRA adapters (rank ``lora_r``) on the projections of the top ``lora_layers`` blocks
    (all blocks when None), seeded by ``seed``: the same init for both arms of a trial."""
    from peft import LoraConfig, get_peft_model

    from iclr26.models.lora import DEFAULT_TARGETS

    n_layers = base.config.num_hidden_layers
    layers = None if cfg["lora_layers"] is None else list(range(n_layers - cfg["lora_layers"], n_layers))
    torch.manual_seed(int(seed))
    lc = LoraConfig(r=cfg["lora_r"], lora_alpha=2 * cfg["lora_r"], lora_dropout=0.0, target_modules=list(DEFAULT_TARGETS),
                    layers_to_transform=layers, layers_pattern="layers" if layers is not None else None,
                    task_type="CAUSAL_LM")
    return get_peft_model(base, lc)


def lm_trial(cfg: dict, seed: int):
    """``AuxDPOTrainer`` against TRL's ``DPOTrainer`` at the same settings (beta, LoRA init, data, order,
    optimiser, steps), both with precomputed reference log-probabilities; returns the held-out
    preference accuracy per pair (1 when the implicit-reward margin is positive, 1/2 on a tie)."""
    import copy
    import tempfile

    import transformers
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    from iclr26.models import load
    from iclr26.models.lora import trl_args

    from .trainer import AuxDPOTrainer, heldout_margins

    transformers.logging.set_verbosity_error()
    base, tok = load(cfg["model"])
    # eager attention: the null-space penalty's double backward has no SDPA derivative on CPU
    base.set_attn_implementation("eager")
    pool = load_hh_pairs(tok, cfg["prompt_tokens"], cfg["completion_tokens"])
    need = cfg["n_train"] + cfg["n_eval"]
    if len(pool) < need:
        raise RuntimeError(f"only {len(pool)} usable HH pairs, the scale needs {need}")
    idx = np.random.default_rng([seed, 2510, 7]).permutation(len(pool))
    train = Dataset.from_list([pool[i] for i in idx[: cfg["n_train"]]])
    held = Dataset.from_list([pool[i] for i in idx[cfg["n_train"]: need]])
    acc, info = {}, {"train_loss": {}}
    for arm in ("dpo", "auxdpo"):
        model = _lora(copy.deepcopy(base), cfg, seed)
        with tempfile.TemporaryDirectory() as out:
            args = trl_args(DPOConfig, out, max_steps=cfg["steps"], learning_rate=cfg["lr"],
                            per_device_train_batch_size=cfg["batch"], per_device_eval_batch_size=cfg["batch"],
                            beta=cfg["beta"], precompute_ref_log_probs=True, seed=seed, logging_steps=1,
                            gradient_checkpointing=False)
            kw = dict(model=model, args=args, processing_class=tok, train_dataset=train, eval_dataset=held)
            if arm == "dpo":
                trainer = DPOTrainer(**kw)
            else:
                trainer = AuxDPOTrainer(**kw, lambda_null=cfg["lambda_null"], lambda_amp=cfg["lambda_amp"],
                                        delta_lr=cfg["delta_lr"])
            torch.manual_seed(seed)
            trainer.train()
            losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
            if not np.all(np.isfinite(losses)):
                raise FloatingPointError(f"{arm}: non-finite training loss {losses}")
            m = heldout_margins(trainer).numpy().astype(float)
        acc[arm] = np.where(m > 0, 1.0, np.where(m < 0, 0.0, 0.5)).tolist()
        info["train_loss"][arm] = losses
        if arm == "auxdpo":
            info["delta_abs_mean"] = float(trainer.aux_delta.detach().abs().mean())
        del trainer, model
    return acc, info
