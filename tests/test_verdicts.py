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


@pytest.mark.parametrize("order", ["ABC", "CBA", "BAC", "CAB"])
def test_requires_is_a_fixed_point_in_any_order(order, monkeypatch):
    """A requires B requires C; C fails; A and B must fall whatever the order of the claims."""
    import numpy as np

    from iclr26.harness import verdicts

    monkeypatch.setattr(verdicts, "claims_for", lambda paper: _conjunct_claims(order))
    monkeypatch.setattr(verdicts, "folder_fingerprint", lambda paper: "fp")
    monkeypatch.setattr(verdicts, "staleness", lambda t, fp=None: None)
    rng = np.random.default_rng(0)
    trials = []
    for seed in range(8):
        b = float(rng.normal())
        m = {"m": {"a": b + 1.0 + 0.1 * rng.normal(), "b": b},  # a clear win
             "m_flat": {"a": b + 0.1 * rng.normal(), "b": b}}  # no effect, precisely measured
        trials.append(Trial("cda", "quick", seed, "fp", "ok", {"metrics": m}, None, 0, 0, "", {}, {}, 0))

    class FakeStore:
        def trials_at(self, *a):
            return trials

    out = {v.claim.id: v for v in verdicts.judge_paper(registry.get("cda"), "quick", FakeStore(), save=False)}
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
