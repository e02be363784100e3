"""Verdicts from stored trials: `requires` as a fixed point, conjunctions with undecided partners."""
import pytest

from iclr26 import registry
from iclr26.harness.store import Trial


def _conjunct_claims(order):
    from iclr26.harness.claims import parse_claims

    base = dict(statement="s", paper_value="v", source="x", metric="m", method="a", baseline="b",
                unit="seeds", test="paired_t", direction="greater", paper_effect=0.5)
    claims = {
        "A": dict(base, id="A", requires=["B"]),
        "B": dict(base, id="B", requires=["C"]),
        "C": dict(base, id="C", metric="m_flat"),
    }
    return parse_claims({"paper": {"title": "t", "arxiv": "", "code": ""}, "claims": [claims[k] for k in order]})


def _judge(monkeypatch, pc, trials):
    """Verdicts of ``pc`` on ``trials``, as judge_paper gives them for a store holding only those."""
    from iclr26.harness import verdicts

    monkeypatch.setattr(verdicts, "claims_for", lambda paper: pc)
    monkeypatch.setattr(verdicts, "folder_fingerprint", lambda paper: "fp")
    monkeypatch.setattr(verdicts, "staleness", lambda t, fp=None: None)

    class FakeStore:
        def trials_at(self, *a):
            return trials

    return {v.claim.id: v for v in verdicts.judge_paper(registry.get("cda"), "quick", FakeStore(), save=False)}


@pytest.mark.parametrize("order", ["ABC", "CBA", "BAC", "CAB"])
def test_requires_is_a_fixed_point_in_any_order(order, monkeypatch):
    """A requires B requires C; C fails; A and B must fall whatever the order of the claims."""
    import numpy as np

    rng = np.random.default_rng(0)
    trials = []
    for seed in range(8):
        b = float(rng.normal())
        m = {"m": {"a": b + 1.0 + 0.1 * rng.normal(), "b": b},  # a clear win
             "m_flat": {"a": b + 0.1 * rng.normal(), "b": b}}  # no effect, precisely measured
        trials.append(Trial("cda", "quick", seed, "fp", "ok", {"metrics": m}, None, 0, 0, "", {}, {}, 0))

    out = _judge(monkeypatch, _conjunct_claims(order), trials)
    assert out["C"].verdict == "not reproduced"
    assert out["B"].verdict == "not reproduced" and "C (not reproduced)" in out["B"].note
    assert out["A"].verdict == "not reproduced" and "B (not reproduced)" in out["A"].note


def test_conjunct_with_an_undecided_partner_is_inconclusive():
    from iclr26.harness.claims import parse_claims
    from iclr26.harness.verdicts import ClaimVerdict, apply_requires

    base = dict(statement="s", paper_value="v", source="x", metric="m", method="a", baseline="b",
                unit="seeds", test="paired_t", direction="greater", paper_effect=0.5)
    pc = parse_claims({"paper": {"title": "t", "arxiv": "", "code": ""}, "claims": [
        dict(base, id="short", requires=["same"]), dict(base, id="same")]})
    vs = apply_requires([ClaimVerdict(pc.claims[0], "reproduced", None, []),
                         ClaimVerdict(pc.claims[1], "inconclusive", None, [])])
    assert vs[0].verdict == "inconclusive" and "same (inconclusive)" in vs[0].note


def _premise_claims():
    from iclr26.harness.claims import parse_claims

    base = dict(statement="s", paper_value="v", source="x", metric="m", method="a", baseline="b",
                unit="seeds", test="paired_t", direction="greater", paper_effect=0.5)
    learns = {k: v for k, v in base.items() if k != "baseline"} | dict(
        id="learns", premise=True, metric="acc", baseline_value=0.5, paper_effect=0.1)
    return parse_claims({"paper": {"title": "t", "arxiv": "", "code": ""}, "claims": [
        learns,
        dict(base, id="design", premise=True, premises=["learns"]),
        dict(base, id="worse", premises=["design"]),
        dict(base, id="better", premises=["learns"]),
    ]})


def _verdicts_with(acc_shift, monkeypatch, order=None):
    """Judge the premise claims on 8 seeds: 'worse' is significantly the wrong way, 'better' a clear win."""
    import dataclasses

    import numpy as np

    pc = _premise_claims()
    if order is not None:
        pc = type(pc)(pc.title, pc.arxiv, pc.code, tuple(pc.claims[i] for i in order))
    # 'worse' reads the same metric as 'better' with the arms swapped: a contradiction on its own
    pc = type(pc)(pc.title, pc.arxiv, pc.code, tuple(
        dataclasses.replace(c, method="b", baseline="a") if c.id == "worse" else c for c in pc.claims))
    rng = np.random.default_rng(1)
    trials = []
    for seed in range(8):
        b = float(rng.normal())
        m = {"acc": {"a": 0.5 + acc_shift + 0.02 * rng.normal()},
             "m": {"a": b + 1.0 + 0.1 * rng.normal(), "b": b}}
        trials.append(Trial("cda", "quick", seed, "fp", "ok", {"metrics": m}, None, 0, 0, "", {}, {}, 0))
    return _judge(monkeypatch, pc, trials)


@pytest.mark.parametrize("order", [None, (3, 2, 1, 0), (2, 0, 3, 1)])
def test_a_failed_premise_makes_contradicted_and_reproduced_inconclusive(order, monkeypatch):
    out = _verdicts_with(-0.02, monkeypatch, order)  # the method arm is below chance: nothing learned
    assert out["learns"].verdict == "contradicted"
    assert out["design"].verdict == "inconclusive" and "rests on the premise learns" in out["design"].note
    # on its own 'worse' is contradicted and 'better' reproduced; neither stands on a failed premise
    assert out["worse"].stats.verdict == "contradicted" and out["worse"].verdict == "inconclusive"
    assert "rests on the premise design (inconclusive" in out["worse"].note and "its own test: contradicted" in out["worse"].note
    assert out["better"].stats.verdict == "reproduced" and out["better"].verdict == "inconclusive"
    assert "learns (" in out["better"].note and "vs the constant 0.5" in out["better"].note  # the premise's numbers


def test_an_established_premise_lets_the_claims_be_decided(monkeypatch):
    out = _verdicts_with(0.3, monkeypatch)
    assert out["learns"].verdict == "reproduced" and out["design"].verdict == "reproduced"
    assert out["worse"].verdict == "contradicted" and out["better"].verdict == "reproduced"


def test_premise_rules_leave_errors_alone():
    from iclr26.harness.verdicts import ClaimVerdict, apply_requires

    pc = _premise_claims()
    vs = apply_requires([ClaimVerdict(pc.claims[0], "inconclusive", None, []),
                         ClaimVerdict(pc.claims[1], "error", None, [], "boom"),
                         ClaimVerdict(pc.claims[2], "reproduced, smaller", None, []),
                         ClaimVerdict(pc.claims[3], "reproduced, smaller", None, [])])
    assert vs[1].verdict == "error" and vs[1].note == "boom"
    assert vs[2].verdict == "inconclusive" and vs[3].verdict == "inconclusive"
    vs = apply_requires([ClaimVerdict(pc.claims[0], "reproduced, smaller", None, []),
                         ClaimVerdict(pc.claims[1], "reproduced", None, []),
                         ClaimVerdict(pc.claims[2], "contradicted", None, []),
                         ClaimVerdict(pc.claims[3], "reproduced", None, [])])
    assert [v.verdict for v in vs] == ["reproduced, smaller", "reproduced", "contradicted", "reproduced"]


def test_stale_trials_are_judged_from_one_code_version_never_a_mix(monkeypatch):
    """No trial measures the current code: the newest run's version is judged alone, not seed 1 of an
    older version beside seed 0 of a newer one (their arms and claims never ran together)."""
    from iclr26.harness import verdicts

    monkeypatch.setattr(verdicts, "folder_fingerprint", lambda paper: "now")
    monkeypatch.setattr(verdicts, "staleness", lambda t, fp=None: None if t.fingerprint == fp else "changed")

    def trial(seed, fp, finished):
        return Trial("cda", "quick", seed, fp, "ok", {"metrics": {}}, None, 0, 0, "", {}, {}, finished)

    stored = [trial(0, "old", 1.0), trial(1, "old", 2.0), trial(0, "new", 3.0)]

    class FakeStore:
        def trials_at(self, paper, scale, fp):
            return [t for t in stored if t.fingerprint == fp]

        def latest_trials(self, paper, scale):
            best = {}
            for t in stored:
                if t.seed not in best or t.finished_at > best[t.seed].finished_at:
                    best[t.seed] = t
            return list(best.values())

    chosen, why = verdicts.select_trials(registry.get("cda"), "quick", FakeStore())
    assert [(t.seed, t.fingerprint) for t in chosen] == [(0, "new")] and why == "changed"
    stored.append(trial(1, "now", 0.5))  # a trial at the current folder code wins over newer stale ones
    monkeypatch.setattr(verdicts, "staleness", lambda t, fp=None: "a shared module changed")
    chosen, why = verdicts.select_trials(registry.get("cda"), "quick", FakeStore())
    assert [(t.seed, t.fingerprint) for t in chosen] == [(1, "now")]
