"""From stored trials to one verdict per claim.

The trials judged are those at the current code (paper folder, every project module the trial
imported, and its package versions); when there are none, the latest stored trials are judged and
the verdict is marked stale with the reason. Seed-paired claims take one value per seed and arm (a
per-item list is averaged first); item-paired claims concatenate the per-item lists of all seeds in
seed order, and, unless the claim says its items are independent draws (``cluster = "none"``), the
test runs on one value per seed.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..registry import Paper, get
from .claims import Claim
from .experiments import claims_for, folder_fingerprint, staleness
from .stats import REPRODUCED, ClaimStatistics, evaluate_claim
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
    stale: str | None = None  # why the trials judged no longer measure the current code, or None
    clusters: list[int] | None = None


def paired_values(claim: Claim, trials: list[Trial]) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """The method values, baseline values and cluster labels (seed per item, or None) of ``claim``.

    KeyError names what is missing.
    """
    xs, ys, cl = [], [], []
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
            cl.extend([t.seed] * len(m))
            if b is not None:
                ys.extend(b)
    clusters = np.asarray(cl) if claim.unit == "items" and claim.cluster == "seed" else None
    return np.asarray(xs), (np.asarray(ys) if claim.baseline is not None else None), clusters


def judge(claim: Claim, trials: list[Trial]) -> ClaimVerdict:
    errors = [t for t in trials if t.status != "ok"]
    seeds = [t.seed for t in trials]
    if errors:
        first = (errors[0].error or errors[0].status).strip().splitlines()[-1]
        return ClaimVerdict(claim, "error", None, seeds, f"{len(errors)} trial(s) failed: {first}")
    if not trials:
        return ClaimVerdict(claim, "not run", None, [], "no trial stored")
    try:
        x, y, clusters = paired_values(claim, trials)
        st = evaluate_claim(claim.test, claim.direction, x, y, claim.baseline_value, claim.margin, claim.alpha,
                            paper_effect=claim.paper_effect, floor=claim.floor, floor_side=claim.floor_side,
                            clusters=clusters, baseline_floor=claim.baseline_floor,
                            baseline_floor_side=claim.baseline_floor_side,
                            baseline_floor_expected=claim.baseline_floor_expected)
    except (KeyError, ValueError) as e:
        return ClaimVerdict(claim, "error", None, seeds, str(e).strip("'\""))
    return ClaimVerdict(claim, st.verdict, st, seeds, st.note, x.tolist(), None if y is None else y.tolist(),
                        clusters=None if clusters is None else clusters.tolist())


def _premise_words(v: ClaimVerdict) -> str:
    s = v.stats
    comparator = (f"{v.claim.comparator} {s.baseline_mean:.4g}" if v.claim.baseline is not None
                  else f"the constant {v.claim.comparator}") if s is not None else ""
    nums = "" if s is None else f": {v.claim.method} {s.method_mean:.4g} vs {comparator}, p = {s.pvalue:.3g}"
    return f"{v.claim.id} ({v.verdict}{nums})"


def apply_requires(verdicts: list[ClaimVerdict]) -> list[ClaimVerdict]:
    """Premises first, then conjunctions, resolved together as a fixed point.

    A claim that rests on premises (``premises``) is "inconclusive" whenever one of them is not
    reproduced (a smaller reproduction still establishes it), whatever its own direction: no
    "contradicted" and no "reproduced" rests on a failed premise; the note names the premise, its
    numbers, and what the claim's own test said. A claim that stands only with others
    (``requires``) is reproduced only if they all are: one whose partner is not reproduced,
    contradicted or not, is "not reproduced"; one whose partner could not be decided (inconclusive,
    error, not run) is "inconclusive". Chains (A requires B rests on C) give the same answer in any
    order of the claims.
    """
    by_id = {v.claim.id: v for v in verdicts}
    changed = True
    while changed:
        changed = False
        for v in verdicts:
            if v.verdict in ("error", "not run"):
                continue
            failed = [r for r in v.claim.premises if by_id[r].verdict not in REPRODUCED]
            if failed and not v.note.startswith("rests on the premise"):
                own = v.verdict if v.verdict != "inconclusive" else "inconclusive"
                v.note = ("rests on the premise " + ", ".join(_premise_words(by_id[r]) for r in failed)
                          + f", which is not established; its own test: {own}" + (f" ({v.note})" if v.note else ""))
                v.verdict = "inconclusive"
                changed = True
                continue
            if v.verdict not in REPRODUCED:
                continue
            failed = [r for r in v.claim.requires if by_id[r].verdict not in REPRODUCED]
            if not failed:
                continue
            decided = all(by_id[r].verdict in ("not reproduced", "contradicted") for r in failed)
            v.verdict = "not reproduced" if decided else "inconclusive"
            v.note = (f"significant on its own, but it stands only together with "
                      + ", ".join(f"{r} ({by_id[r].verdict})" for r in failed))
            changed = True
    return verdicts


def select_trials(paper: Paper, scale: str, store: Store) -> tuple[list[Trial], str | None]:
    """The trials to judge and, when they no longer measure the current code, why (else None)."""
    fp = folder_fingerprint(paper)
    at = store.trials_at(paper.id, scale, fp)
    current = [t for t in at if staleness(t, fp) is None]
    if current:
        return current, None
    # none measures the current code: judge one version, never a mix of seeds from different ones
    # (a seed rerun at a later version next to others left from an older one would pair arms and
    # claims that never ran together): the trials at the current folder code if any (only shared
    # modules or packages changed), else those of the most recent run's folder version
    latest = at or store.latest_trials(paper.id, scale)
    if not latest:
        return [], None
    if not at:
        newest = max(latest, key=lambda t: t.finished_at or 0).fingerprint
        latest = store.trials_at(paper.id, scale, newest)
    reasons = sorted({r for r in (staleness(t, fp) for t in latest) if r})
    return latest, "; ".join(reasons) or None


def judge_paper(paper: Paper | str, scale: str, store: Store, save: bool = True) -> list[ClaimVerdict]:
    """Verdicts for every claim of ``paper`` at ``scale``: from the trials at the current code, else
    from the latest trials, marked stale."""
    paper = get(paper) if isinstance(paper, str) else paper
    fp = folder_fingerprint(paper)
    trials, stale = select_trials(paper, scale, store)
    out = apply_requires([judge(c, trials) for c in claims_for(paper).claims])
    for v in out:
        v.stale = stale if trials else None
    if save and trials and not getattr(store, "readonly", False):
        for v in out:
            stats = {} if v.stats is None else v.stats.to_dict()
            store.put_verdict(paper.id, scale, v.claim.id, fp if not stale else trials[-1].fingerprint, v.verdict,
                              stats | {"note": v.note, "stale": stale}, v.seeds)
    return out
