"""The claims.toml schema: valid documents parse, invalid ones fail with a message naming the problem."""
import copy

import pytest

from iclr26.harness.claims import ClaimsError, load_claims, parse_claims

GOOD = {
    "paper": {"title": "T", "arxiv": "2501.00001", "code": ""},
    "claims": [{
        "id": "c1", "statement": "s", "paper_value": 0.5, "source": "Table 1", "metric": "acc",
        "method": "m", "baseline": "b", "direction": "greater", "unit": "seeds", "test": "wilcoxon",
        "paper_effect": 0.02,
    }],
}


def mutate(**changes):
    doc = copy.deepcopy(GOOD)
    for k, v in changes.items():
        if v is None:
            doc["claims"][0].pop(k)
        else:
            doc["claims"][0][k] = v
    return doc


def test_good_document_parses():
    pc = parse_claims(GOOD)
    c = pc.claims[0]
    assert (c.method, c.baseline, c.alpha, c.paper_value) == ("m", "b", 0.05, "0.5")
    assert c.arms == ("m", "b")


@pytest.mark.parametrize("changes,match", [
    (dict(test="ttest"), "unknown test 'ttest'"),
    (dict(direction="bigger"), "bad direction"),
    (dict(unit="runs"), "bad unit"),
    (dict(baseline=None), "exactly one of 'baseline'"),
    (dict(baseline_value=0.1), "exactly one of 'baseline'"),
    (dict(metric=None), r"missing field\(s\) \['metric'\]"),
    (dict(direction="equivalent"), "positive 'margin'"),
    (dict(test="tost"), "needs direction 'equivalent'"),
    (dict(test="mcnemar"), "unit must be 'items'"),
    (dict(alpha=1.5), "alpha must lie"),
    (dict(colour="red"), "unknown field"),
    (dict(margin=-1), "margin must be >= 0"),
    (dict(paper_effect=None), r"missing field\(s\) \['paper_effect'\]"),
    (dict(paper_effect="large"), "'paper_effect' must be a finite number"),
    (dict(paper_effect=float("nan")), "'paper_effect' must be a finite number"),
    (dict(paper_effect=-0.1), "outside the claimed region"),
    (dict(direction="less"), "outside the claimed region"),
    (dict(direction="equivalent", margin=0.01, test="tost"), "outside the equivalence margin"),
    (dict(floor_side="above"), "need a 'floor'"),
    (dict(floor=0.5, floor_side="sideways"), "bad floor_side"),
    (dict(floor=0.5, direction="equivalent", margin=0.1, test="tost"), "must say 'floor_side'"),
    (dict(cluster="seed"), "applies to unit 'items' only"),
    (dict(unit="items", cluster="model"), "bad cluster"),
    (dict(unit="items", cluster="none"), "say why in 'unit_reason'"),
    (dict(exploratory="yes"), "'exploratory' must be true or false"),
])
def test_bad_claims_are_rejected(changes, match):
    with pytest.raises(ClaimsError, match=match):
        parse_claims(mutate(**changes), "x/claims.toml")


def test_duplicate_ids_and_missing_paper():
    doc = copy.deepcopy(GOOD)
    doc["claims"].append(copy.deepcopy(doc["claims"][0]))
    with pytest.raises(ClaimsError, match="duplicate claim id"):
        parse_claims(doc)
    with pytest.raises(ClaimsError, match=r"\[paper\]"):
        parse_claims({"claims": GOOD["claims"]})


def test_load_reports_file_problems(tmp_path):
    with pytest.raises(ClaimsError, match="file not found"):
        load_claims(tmp_path / "none.toml")
    bad = tmp_path / "claims.toml"
    bad.write_text("[paper\n")
    with pytest.raises(ClaimsError, match="not valid TOML"):
        load_claims(bad)


def test_requires_must_name_other_claims():
    doc = mutate(requires=["nope"])
    with pytest.raises(ClaimsError, match="'requires' must list other claim ids"):
        parse_claims(doc)
    doc = copy.deepcopy(GOOD)
    doc["claims"].append(dict(GOOD["claims"][0], id="c2", requires=["c1"]))
    assert parse_claims(doc).claims[1].requires == ("c1",)


def test_new_fields_parse_with_defaults():
    c = parse_claims(mutate(unit="items", floor=0.5)).claims[0]
    assert c.paper_effect == 0.02 and c.cluster == "seed" and c.floor == 0.5 and c.floor_side == "above"
    c = parse_claims(mutate(unit="items", cluster="none", unit_reason="independent simulations",
                            direction="less", paper_effect=-0.1, floor=0.5)).claims[0]
    assert c.cluster == "none" and c.floor_side == "below"
    assert parse_claims(GOOD).claims[0].cluster is None and not parse_claims(GOOD).claims[0].exploratory


def test_requires_cycles_are_rejected():
    doc = copy.deepcopy(GOOD)
    doc["claims"] = [dict(GOOD["claims"][0], id="a", requires=["b"]), dict(GOOD["claims"][0], id="b", requires=["c"]),
                     dict(GOOD["claims"][0], id="c", requires=["a"])]
    with pytest.raises(ClaimsError, match="cycle: a -> b -> c -> a"):
        parse_claims(doc)
    doc["claims"][2]["requires"] = []
    assert [c.requires for c in parse_claims(doc).claims] == [("b",), ("c",), ()]


def test_premises_and_comparator_floors_parse():
    doc = copy.deepcopy(GOOD)
    doc["claims"][0]["premise"] = True
    doc["claims"].append(dict(GOOD["claims"][0], id="c2", premises=["c1"], baseline_floor=0.05,
                              baseline_floor_reason="a random walk's success rate"))
    c1, c2 = parse_claims(doc).claims
    assert c1.premise and not c2.premise and c2.premises == ("c1",)
    assert c2.baseline_floor == 0.05 and c2.baseline_floor_side == "above" and not c2.baseline_floor_expected
    doc["claims"][1].update(direction="less", paper_effect=-0.1, baseline_floor_expected=True)
    c2 = parse_claims(doc).claims[1]
    assert c2.baseline_floor_side == "below" and c2.baseline_floor_expected


@pytest.mark.parametrize("extra,match", [
    (dict(premises=["nope"]), "'premises' must list other claim ids"),
    (dict(premises=["c1"]), "not declared 'premise = true'"),
    (dict(premises="c1"), "'premises' must be a list"),
    (dict(premise="yes"), "'premise' must be true or false"),
    (dict(baseline_floor=0.1), "needs a 'baseline_floor_reason'"),
    (dict(baseline_floor_reason="chance"), "need a 'baseline_floor'"),
    (dict(baseline_floor_expected=True), "need a 'baseline_floor'"),
    (dict(baseline_floor=0.1, baseline_floor_reason="chance", baseline_floor_side="up"), "bad baseline_floor_side"),
    (dict(baseline_floor=0.1, baseline_floor_reason="chance", baseline_floor_expected=1), "must be true or false"),
    (dict(baseline_floor=float("nan"), baseline_floor_reason="chance"), "finite number"),
])
def test_bad_premises_and_comparator_floors_are_rejected(extra, match):
    doc = copy.deepcopy(GOOD)
    doc["claims"].append(dict(GOOD["claims"][0], id="c2", **extra))
    with pytest.raises(ClaimsError, match=match):
        parse_claims(doc)


def test_comparator_floor_needs_an_arm_and_premise_cycles_are_rejected():
    doc = copy.deepcopy(GOOD)
    c = doc["claims"][0]
    c.pop("baseline")
    c.update(baseline_value=0.5, baseline_floor=0.1, baseline_floor_reason="chance")
    with pytest.raises(ClaimsError, match="'baseline_floor' needs a 'baseline' arm"):
        parse_claims(doc)
    doc = copy.deepcopy(GOOD)
    doc["claims"] = [dict(GOOD["claims"][0], id="a", premise=True, premises=["b"]),
                     dict(GOOD["claims"][0], id="b", premise=True, requires=["a"])]
    with pytest.raises(ClaimsError, match="cycle: a -> b -> a"):
        parse_claims(doc)
