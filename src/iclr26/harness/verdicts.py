"""From stored trials to one verdict per claim.

Only trials at the paper folder's current fingerprint count. Seed-paired claims take one value
per seed and arm (a per-item list is averaged first); item-paired claims concatenate the per-item
lists of all seeds in seed order.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..registry import Paper, get
from .claims import Claim
from .experiments import claims_for, folder_fingerprint
from .stats import ClaimStatistics, evaluate_claim
from .store import Store, Trial


@dataclass
class ClaimVerdict:
    claim: Claim
    verdict: str
    stats: ClaimStatistics | None
    seeds: list[int]
    note: str = ""
    method_values: list[float] | None = None
    baseline_values: list[float] | None = None


def paired_values(claim: Claim, trials: list[Trial]) -> tuple[np.ndarray, np.ndarray | None]:
    """Collect the method and baseline values of ``claim`` from ok trials; KeyError names what is missing."""
    xs, ys = [], []
    for t in trials:
        metrics = t.measurements["metrics"]
        if claim.metric not in metrics:
            raise KeyError(f"seed {t.seed}: metric {claim.metric!r} not measured (have {sorted(metrics)})")
        arms = metrics[claim.metric]
        for arm in claim.arms:
            if arm not in arms:
                raise KeyError(f"seed {t.seed}: arm {arm!r} missing for metric {claim.metric!r} (have {sorted(arms)})")
        m = arms[claim.method]
        b = arms[claim.baseline] if claim.baseline is not None else None
        if claim.unit == "seeds":
            xs.append(float(np.mean(m)))
            if b is not None:
                ys.append(float(np.mean(b)))
        else:
            if not isinstance(m, list):
                raise KeyError(f"claim {claim.id!r} pairs items but metric {claim.metric!r} holds one value per seed")
            xs.extend(m)
            if b is not None:
                ys.extend(b)
    return np.asarray(xs), (np.asarray(ys) if claim.baseline is not None else None)


def judge(claim: Claim, trials: list[Trial]) -> ClaimVerdict:
    errors = [t for t in trials if t.status != "ok"]
    seeds = [t.seed for t in trials]
    if errors:
        first = (errors[0].error or errors[0].status).strip().splitlines()[-1]
        return ClaimVerdict(claim, "error", None, seeds, f"{len(errors)} trial(s) failed: {first}")
    if not trials:
        return ClaimVerdict(claim, "not run", None, [])
    try:
        x, y = paired_values(claim, trials)
        st = evaluate_claim(claim.test, claim.direction, x, y, claim.baseline_value, claim.margin, claim.alpha)
    except (KeyError, ValueError) as e:
        return ClaimVerdict(claim, "error", None, seeds, str(e).strip("'\""))
    return ClaimVerdict(claim, st.verdict, st, seeds, st.note, x.tolist(), None if y is None else y.tolist())


def judge_paper(paper: Paper | str, scale: str, store: Store, save: bool = True) -> list[ClaimVerdict]:
    """Verdicts for every claim of ``paper`` at ``scale`` from the trials at the current code."""
    paper = get(paper) if isinstance(paper, str) else paper
    fp = folder_fingerprint(paper)
    trials = store.trials_at(paper.id, scale, fp)
    out = [judge(c, trials) for c in claims_for(paper).claims]
    by_id = {v.claim.id: v for v in out}
    for v in out:  # a claim that is one half of a conjunction stands only with its other half
        failed = [r for r in v.claim.requires if by_id[r].verdict != "reproduced"]
        if v.verdict == "reproduced" and failed:
            v.verdict = "not reproduced"
            v.note = f"significant on its own, but it stands only together with {', '.join(failed)}, which did not reproduce"
    if save:
        for v in out:
            store.put_verdict(paper.id, scale, v.claim.id, fp, v.verdict,
                              None if v.stats is None else v.stats.to_dict() | {"note": v.note}, v.seeds)
    return out
