"""PERSPECTRA: loader schema checks, task builders, the NIE score and other metrics, answer parsing,
option scoring, the mini benchmark's paired framings, and rejection of bad input."""
import json
import math

import numpy as np
import pytest

from iclr26.benchmarks.perspectra import (SchemaError, build_counting_task, build_matching_task,
                                          build_polarity_task, counting_metrics, evaluate, is_concessive, load,
                                          matching_metrics, nie_score, parse, parse_choice, parse_count,
                                          parse_polarity, polarity_metrics, to_records)
from iclr26.benchmarks.perspectra import minibench, scoring, tasks


def release_like():
    """A two-topic file in the release's schema (texts invented)."""
    return [
        {"topic": "Cats are better than dogs.",
         "pros": [{"opinion": "Cats need less care.", "top5_matches": ["c1", "c2"],
                   "expanded": ["Cats look after themselves.", "A cat needs no walks.", "Cats groom alone."]}],
         "cons": [{"opinion": "Dogs are more loyal.", "top5_matches": [],
                   "expanded": ["A dog stays by your side.", "Dogs protect their owners."]},
                  {"opinion": "Dogs keep you active.", "top5_matches": [],
                   "expanded": ["Walking a dog is exercise.", "Dogs get you outside."]}]},
        {"topic": "Tea beats coffee.",
         "pros": [{"opinion": "Tea has less caffeine.", "top5_matches": [],
                   "expanded": ["Tea calms rather than jolts.", "You can drink tea at night."]}],
         "cons": [{"opinion": "Coffee tastes richer.", "top5_matches": [],
                   "expanded": ["Coffee has deeper flavour.", "Nothing matches an espresso."]}]},
    ]


# --------------------------------------------------------------------------- equations
def test_nie_matches_hand_computed_values():
    # (1 + |3-2|/2)^-1 = 2/3; (1 + |1-0|/max(1,0))^-1 = 1/2; exact = 1
    assert nie_score([3, 1, 5], [2, 0, 5]) == pytest.approx((2 / 3 + 1 / 2 + 1) / 3)
    # the error is normalised by the true count: off by 2 at k=4 equals off by 1 at k=2
    assert nie_score([6], [4]) == pytest.approx(nie_score([3], [2])) == pytest.approx(2 / 3)


def test_nie_is_one_only_for_exact_counts_and_symmetric_in_sign():
    assert nie_score([1, 2, 3], [1, 2, 3]) == 1.0
    assert nie_score([2], [3]) == pytest.approx(nie_score([4], [3]))
    assert nie_score([4], [3]) < 1.0


def test_counting_metrics_shares_of_over_and_under():
    m = counting_metrics([3, 4, 1, 2, 2], [2, 2, 2, 2, 2])
    assert m["accuracy"] == pytest.approx(0.4)
    assert m["mae"] == pytest.approx((1 + 2 + 1) / 5)
    assert m["signed_error"] == pytest.approx((1 + 2 - 1) / 5)
    assert m["n_fail"] == 3
    assert m["over_share"] == pytest.approx(2 / 3) and m["under_share"] == pytest.approx(1 / 3)


def test_counting_metrics_reduce_when_every_count_is_right():
    m = counting_metrics([1, 5], [1, 5])
    assert m["accuracy"] == 1.0 and m["mae"] == 0.0 and m["nie"] == 1.0
    assert math.isnan(m["over_share"]) and math.isnan(m["under_share"])


def test_matching_metrics_exact_stance_and_same_stance_failures():
    items = [dict(task="matching", answer=0, stance="pro", option_stances=["pro", "pro", "con"], options=list("abc")),
             dict(task="matching", answer=2, stance="con", option_stances=["pro", "pro", "con"], options=list("abc"))]
    m = matching_metrics([1, 0], items)
    assert m["exact_accuracy"] == 0.0
    assert m["stance_accuracy"] == 0.5           # item 1 picked another pro, item 2 a pro for a con
    assert m["same_stance_failure_share"] == 0.5
    assert m["same_stance_distractor_share"] == pytest.approx((1 / 2 + 0) / 2)
    assert matching_metrics([0, 2], items)["exact_accuracy"] == 1.0


def test_polarity_metrics_concessive_share_of_failures():
    items = [dict(answer="pro", concessive=True), dict(answer="con", concessive=True),
             dict(answer="pro", concessive=False), dict(answer="con", concessive=False)]
    m = polarity_metrics(["con", "pro", "con", "con"], items)
    assert m["accuracy"] == 0.25
    assert m["concessive_failure_share"] == pytest.approx(2 / 3)
    assert m["accuracy_concessive"] == 0.0 and m["accuracy_plain"] == 0.5


# --------------------------------------------------------------------------- loader
def test_load_round_trips_the_release_schema(tmp_path):
    path = tmp_path / "Perspectra.json"
    path.write_text(json.dumps(release_like()))
    topics = load(path)
    assert [len(t.opinions) for t in topics] == [3, 2]
    assert [o.stance for o in topics[0].opinions] == ["pro", "con", "con"]
    assert topics[0].pros[0].matches == ("c1", "c2")
    assert to_records(topics) == release_like()
    assert load(tmp_path)[1].text == "Tea beats coffee."          # a folder holding the file


def test_load_names_the_missing_file_and_the_release(tmp_path):
    with pytest.raises(FileNotFoundError, match="ICLR-2026-Pespectra"):
        load(tmp_path / "nothing.json")
    with pytest.raises(TypeError, match="path"):
        load(3)


@pytest.mark.parametrize("mutate, where", [
    (lambda d: d[0].pop("cons"), r"\[0\] is missing the field 'cons'"),
    (lambda d: d[1]["pros"][0].pop("expanded"), r"\[1\]\.pros\[0\] is missing the field 'expanded'"),
    (lambda d: d[0]["cons"][1].update(expanded=[]), r"\[0\]\.cons\[1\]\.expanded is empty"),
    (lambda d: d[0]["cons"][0].update(opinion=7), r"\[0\]\.cons\[0\]\.opinion must be a string"),
    (lambda d: d[0].update(topic="  "), r"\[0\]\.topic is an empty string"),
    (lambda d: d[1].update(pros={}), r"\[1\]\.pros must be a list"),
])
def test_schema_errors_name_the_field(mutate, where):
    d = release_like()
    mutate(d)
    with pytest.raises(SchemaError, match=where):
        parse(d)


def test_schema_rejects_non_list_and_bad_json(tmp_path):
    with pytest.raises(SchemaError, match="JSON list"):
        parse({"topic": "x"})
    with pytest.raises(SchemaError, match="no topics"):
        parse([])
    bad = tmp_path / "Perspectra.json"
    bad.write_text("{not json")
    with pytest.raises(SchemaError, match="not valid JSON"):
        load(bad)
    assert issubclass(SchemaError, ValueError)


# --------------------------------------------------------------------------- builders
def test_counting_items_count_distinct_source_opinions():
    topics = minibench.topics(0)
    items = build_counting_task(topics, 300, seed=1, max_count=5, max_extra=2)
    for it in items:
        assert it["answer"] == len(set(it["owners"]))
        assert it["answer"] <= len(it["arguments"]) <= it["answer"] + 2
        assert len(set(it["arguments"])) == len(it["arguments"])      # never the same text twice
        assert it["options"] == [1, 2, 3, 4, 5]
        t = next(t for t in topics if t.text == it["topic"])
        for a, o in zip(it["arguments"], it["owners"]):
            assert a in t.opinions[o].expanded
    counts = np.bincount([it["answer"] for it in items], minlength=6)[1:]
    assert counts.min() > 40                                            # uniform on 1..5
    assert any(len(it["arguments"]) > it["answer"] for it in items)
    assert build_counting_task(topics, 5, seed=1) == build_counting_task(topics, 5, seed=1)
    assert build_counting_task(topics, 5, seed=1) != build_counting_task(topics, 5, seed=2)


def test_counting_without_extras_voices_each_opinion_once():
    items = build_counting_task(minibench.topics(0), 50, seed=3, max_extra=0)
    assert all(len(it["arguments"]) == it["answer"] for it in items)


def test_matching_items_point_at_the_source_opinion():
    topics = parse(release_like())
    for it in build_matching_task(topics, 50, seed=0):
        t = next(t for t in topics if t.text == it["topic"])
        src = next(o for o in t.opinions if o.text == it["options"][it["answer"]])
        assert it["argument"] in src.expanded and it["stance"] == src.stance
        assert sorted(it["options"]) == sorted(o.text for o in t.opinions)
    two = build_matching_task(topics, 20, seed=0, n_options=2)
    assert all(len(it["options"]) == 2 for it in two)


def test_polarity_items_take_the_stance_and_tag_concession():
    topics = parse(release_like())
    items = build_polarity_task(topics, 40, seed=0)
    for it in items:
        t = next(t for t in topics if t.text == it["topic"])
        src = next(o for o in t.opinions if it["argument"] in o.expanded)
        assert it["answer"] == src.stance and it["concessive"] is False


def test_is_concessive_markers():
    assert is_concessive("Although it costs money, it saves lives.")
    assert is_concessive("Admittedly, that is hard. Still, we should.")
    assert is_concessive("I get that people like cars, yet cities need air.")
    assert not is_concessive("Cars pollute. We should ban them.")
    assert not is_concessive("The thoughtful plan works.")        # 'though' inside a word is no marker


def test_minibench_pairs_share_content_and_answer():
    groups = minibench.polarity_pairs(60, seed=0)
    for g in groups:
        assert [it["framing"] for it in g] == list(minibench.FRAMINGS)
        assert len({it["answer"] for it in g}) == 1 and len({it["topic"] for it in g}) == 1
        plain, conc, reb = (it["argument"] for it in g)
        own = plain.split(". ", 1)[1].rstrip(".").lower()
        assert own in conc.lower() and own in reb.lower()             # the same own opinion, last
        assert conc.lower().rstrip(".").endswith(own) and reb.lower().rstrip(".").endswith(own)
        assert is_concessive(conc) and not is_concessive(plain) and not is_concessive(reb)
        assert [it["concessive"] for it in g] == [False, True, False]
    assert {g[0]["answer"] for g in groups} == {"pro", "con"}


def test_minibench_schema_and_expansions_not_concessive():
    recs = minibench.records(0)
    topics = parse(recs)
    assert len(topics) == 10 and all(len(t.pros) == 3 and len(t.cons) == 3 for t in topics)
    assert all(len(o.expanded) == 5 and not any(is_concessive(e) for e in o.expanded)
               for t in topics for o in t.opinions)
    assert minibench.records(0) == recs and minibench.records(1) != recs


# --------------------------------------------------------------------------- parsing
@pytest.mark.parametrize("text, k", [("3", 3), ("There are 4 distinct opinions.", 4), ("three", 3),
                                     ("I count Two opinions", 2), ("none of them", None)])
def test_parse_count(text, k):
    assert parse_count(text) == k


@pytest.mark.parametrize("text, j", [("B", 1), ("(C) because", 2), ("The answer is B.", 1), ("I think D.", 3),
                                     ("A. support", 0), ("I am not sure", None), ("F", None)])
def test_parse_choice(text, j):
    assert parse_choice(text, 5) == j


@pytest.mark.parametrize("text, s", [("A", "pro"), ("B", "con"), ("It supports the topic", "pro"),
                                     ("It opposes it", "con"), ("unclear", None)])
def test_parse_polarity(text, s):
    assert parse_polarity(text) == s


# --------------------------------------------------------------------------- evaluate
def test_evaluate_with_oracle_and_constant_answers():
    items = build_counting_task(minibench.topics(0), 30, seed=0)
    assert evaluate(lambda ps: [str(it["answer"]) for it in items], items)["accuracy"] == 1.0
    hi = evaluate(lambda ps: ["5"] * len(ps), items)
    assert hi["over_share"] == 1.0 and hi["unparsed"] == 0
    lo = evaluate(lambda ps: ["I do not know"] * len(ps), items)
    assert lo["accuracy"] == 0.0 and lo["unparsed"] == 30
    pol = [it for g in minibench.polarity_pairs(5, 0) for it in g]
    assert evaluate(lambda ps: ["A" if it["answer"] == "pro" else "B" for it in pol], pol)["accuracy"] == 1.0
    m = build_matching_task(minibench.topics(0), 10, seed=0)
    assert evaluate(lambda ps: [tasks.LETTERS[it["answer"]] for it in m], m)["exact_accuracy"] == 1.0
    half = evaluate(lambda ps: [tasks.LETTERS[it["answer"]] if i % 2 else "?" for i, it in enumerate(m)], m)
    assert half["exact_accuracy"] == pytest.approx(0.5) and half["unparsed"] == 5


def test_prompts_hold_every_argument_and_option():
    c = build_counting_task(minibench.topics(0), 1, seed=0)[0]
    p = tasks.counting_prompt(c)
    assert all(f"Argument {i + 1}: {a}" in p for i, a in enumerate(c["arguments"]))
    m = build_matching_task(minibench.topics(0), 1, seed=0)[0]
    assert all(f"{tasks.LETTERS[i]}. {o}" in tasks.matching_prompt(m) for i, o in enumerate(m["options"]))
    pol = minibench.polarity_pairs(1, 0)[0][0]
    assert "A. support" in tasks.polarity_prompt(pol) and "A. oppose" in tasks.polarity_prompt(pol, swap=True)


# --------------------------------------------------------------------------- scoring
@pytest.fixture(scope="module")
def smol():
    import torch
    from iclr26.models import BUNDLED, load
    from iclr26.models.bundled import is_installed
    if "smollm2-135m" not in BUNDLED or not is_installed("smollm2-135m"):
        pytest.skip("bundled SmolLM2 not installed")
    torch.set_num_threads(1)
    return load("smollm2-135m")


def test_score_options_equals_unbatched_forward(smol):
    import torch
    model, tok = smol
    prompts = ["Pick a letter.", "Which is first in the alphabet, A or B? Answer with the letter only."]
    labels = [["A", "B", "C"], ["A", "B"]]
    got = scoring.score_options(model, tok, prompts, labels, batch_size=2)
    for p, lab, g in zip(prompts, labels, got):
        ids = tok(scoring.chat_prompt(tok, p), return_tensors="pt", add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            lp = torch.log_softmax(model(input_ids=ids).logits[0, -1].float(), -1)
        sel = lp[scoring.option_token_ids(tok, lab)]
        np.testing.assert_allclose(g, torch.log_softmax(sel, -1).numpy(), atol=2e-4)
        assert np.exp(g).sum() == pytest.approx(1.0)


def test_score_options_rejects_multi_token_labels_and_bad_batch(smol):
    model, tok = smol
    with pytest.raises(ValueError, match="one token"):
        scoring.score_options(model, tok, ["x"], [["support", "a very long label"]])
    with pytest.raises(ValueError, match="batch_size"):
        scoring.score_options(model, tok, ["x"], [["A", "B"]], batch_size=0)
    with pytest.raises(ValueError, match="one label list per prompt"):
        scoring.score_options(model, tok, ["x", "y"], [["A", "B"]])


def test_swapped_orders_cancel_a_letter_preference(monkeypatch):
    """A model that always prefers letter A (90 %) is right on every 'pro' item without the swap;
    averaging over the two option orders leaves it no preference."""
    def biased(model, tok, prompts, labels, batch_size=4, chat=True):
        return [np.log(np.array([0.9] + [0.1 / (len(lab) - 1)] * (len(lab) - 1))) for lab in labels]
    monkeypatch.setattr(scoring, "score_options", biased)
    items = [it for g in minibench.polarity_pairs(4, 0) for it in g]
    plain = scoring.LMChooser(None, None, items, swap_polarity=False)
    assert plain([tasks.polarity_prompt(it) for it in items]) == ["pro"] * len(items)
    both = scoring.LMChooser(None, None, items)
    both([tasks.polarity_prompt(it) for it in items])
    np.testing.assert_allclose(np.exp(np.array(both.logps)), 0.5)


# --------------------------------------------------------------------------- rejection
def test_metrics_reject_bad_input():
    with pytest.raises(ValueError, match="pred"):
        nie_score([1, np.nan], [1, 2])
    with pytest.raises(ValueError, match="same length"):
        nie_score([1, 2], [1])
    with pytest.raises(ValueError, match="non-empty"):
        counting_metrics([], [])
    with pytest.raises(ValueError, match="equal length"):
        polarity_metrics(["pro"], [])


def test_builders_reject_bad_arguments():
    topics = minibench.topics(0)
    with pytest.raises(ValueError, match="n must be a positive integer"):
        build_counting_task(topics, 0, seed=0)
    with pytest.raises(ValueError, match="max_count"):
        build_counting_task(topics, 3, seed=0, max_count=0)
    with pytest.raises(ValueError, match="max_extra"):
        build_counting_task(topics, 3, seed=0, max_extra=-1)
    with pytest.raises(TypeError, match="seed"):
        build_polarity_task(topics, 3, seed=1.5)
    with pytest.raises(ValueError, match="topics is empty"):
        build_matching_task([], 3, seed=0)
    with pytest.raises(TypeError, match="Topic objects"):
        build_matching_task([{"topic": "x"}], 3, seed=0)
    with pytest.raises(ValueError, match="n_options"):
        build_matching_task(topics, 3, seed=0, n_options=1)
    with pytest.raises(ValueError, match="framings"):
        minibench.polarity_pairs(3, 0, framings=("sarcastic",))
    with pytest.raises(ValueError, match="n_expanded"):
        minibench.records(0, n_expanded=99)


def test_evaluate_rejects_bad_input():
    items = build_counting_task(minibench.topics(0), 3, seed=0)
    with pytest.raises(TypeError, match="predict_fn"):
        evaluate("not callable", items)
    with pytest.raises(ValueError, match="non-empty"):
        evaluate(lambda ps: ps, [])
    with pytest.raises(ValueError, match="one task"):
        evaluate(lambda ps: ps, items + build_matching_task(minibench.topics(0), 1, seed=0))
    with pytest.raises(ValueError, match="returned 1 answers"):
        evaluate(lambda ps: ["1"], items)
    with pytest.raises(TypeError, match="text"):
        parse_count(3)
