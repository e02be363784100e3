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


# --------------------------------------------------------------------------- gold labels and wiring
def _clauses_in(text, clauses):
    low = text.lower()
    return [c for c in clauses if c in low]


def test_polarity_gold_label_is_the_side_of_the_writers_own_opinion():
    """Read the writer's own opinion (the clause that ends the text) and the conceded / rejected one
    from the item texts, look their sides up in the topic table, and compare with the gold label."""
    # the table itself: a sentence that argues for closing zoos is listed on the supporting side
    assert "wild animals suffer from living in small enclosures" in minibench.TOPICS["Zoos should be closed."][0]
    groups = minibench.polarity_pairs(80, seed=7)
    seen = set()
    for g in groups:
        pros, cons = minibench.TOPICS[g[0]["topic"]]
        for it in g:
            text = it["argument"].lower().rstrip(".")
            found = _clauses_in(text, pros + cons)
            own = [c for c in found if text.endswith(c)]
            assert len(own) == 1, it
            side = "pro" if own[0] in pros else "con"
            assert it["answer"] == side, it
            others = [c for c in found if c != own[0]]
            if it["framing"] == "plain":
                assert others == []
            else:                                    # the conceded / rejected point is the other side's
                assert len(others) == 1 and (others[0] in pros) != (side == "pro"), it
            seen.add(side)
    assert seen == {"pro", "con"}


def test_integer_polarity_answers_are_option_indices():
    item = dict(task="polarity", topic="t", argument="a", answer="pro", concessive=False)
    assert tasks.decode_answer(item, 0) == "pro" and tasks.decode_answer(item, 1) == "con"
    assert tasks.decode_answer(item, np.int64(1)) == "con"
    pol = [it for g in minibench.polarity_pairs(6, 0) for it in g]
    right = evaluate(lambda ps: [0 if it["answer"] == "pro" else 1 for it in pol], pol)
    assert right["accuracy"] == 1.0 and right["predictions"] == [it["answer"] for it in pol]
    wrong = evaluate(lambda ps: [1 if it["answer"] == "pro" else 0 for it in pol], pol)
    assert wrong["accuracy"] == 0.0


def test_matching_stance_accuracy_asymmetric_case():
    stances = ["pro", "pro", "con", "con"]
    items = [dict(task="matching", answer=0, stance="pro", option_stances=stances, options=list("abcd")),
             dict(task="matching", answer=2, stance="con", option_stances=stances, options=list("abcd")),
             dict(task="matching", answer=1, stance="pro", option_stances=stances, options=list("abcd"))]
    # item 1 exact; item 2 another con (same stance); item 3 a con for a pro (other stance)
    m = matching_metrics([0, 3, 2], items)
    assert m["exact_accuracy"] == pytest.approx(1 / 3)
    assert m["stance_accuracy"] == pytest.approx(2 / 3)
    assert m["same_stance_failure_share"] == pytest.approx(1 / 2)
    m = matching_metrics([1, 3, 0], items)                     # every pick of the source's stance
    assert m["stance_accuracy"] == 1.0 and m["same_stance_failure_share"] == 1.0
    m = matching_metrics([2, 0, 3], items)                     # every pick of the other stance
    assert m["stance_accuracy"] == 0.0 and m["same_stance_failure_share"] == 0.0


def _count_item(answer, n_args, stub):
    return dict(task="counting", topic="T", arguments=[f"argument {i}" for i in range(n_args)],
                owners=list(range(n_args)), answer=answer, options=[1, 2, 3, 4, 5], stub=stub)


def _match_item(answer, stance, stub):
    stances = ["pro", "pro", "con", "con"]
    return dict(task="matching", topic="T", argument="x", options=list("abcd"), option_stances=stances,
                answer=answer, stance=stance, stub=stub)


def _run_with_stub(monkeypatch, citems, mitems, pol_wrong, n_pol=4, seed=0):
    """``experiment.run`` with a stub model: counting and matching items answer their ``stub`` field,
    polarity item ``(framing, group)`` is answered wrongly iff it is in ``pol_wrong``."""
    from iclr26.benchmarks.perspectra import experiment

    loads, choosers = [], []

    class StubChooser:
        def __init__(self, model, tok, items, batch_size=4):
            self.model, self.items = model, items
            choosers.append(self)

        def __call__(self, prompts):
            assert len(prompts) == len(self.items)
            out = []
            for i, it in enumerate(self.items):
                if it["task"] == "polarity":
                    wrong = (it["framing"], i // len(minibench.FRAMINGS)) in pol_wrong
                    flip = {"pro": "con", "con": "pro"}
                    out.append(flip[it["answer"]] if wrong else it["answer"])
                else:
                    out.append(it["stub"])
            return out

    def fake_load(name):
        loads.append(name)
        return f"model:{name}", "tok"

    import torch
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)      # keep this process's threads
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr(experiment, "_load", fake_load)
    monkeypatch.setattr(experiment, "LMChooser", StubChooser)
    monkeypatch.setattr(experiment, "build_counting_task", lambda *a, **k: citems)
    monkeypatch.setattr(experiment, "build_matching_task", lambda *a, **k: mitems)
    monkeypatch.setitem(experiment.SCALES, "stub", dict(model="m-count", polarity_model="m-pol", n_count=len(citems),
                                                        n_match=len(mitems), n_pol=n_pol, max_count=5,
                                                        batch_size=4))
    res = experiment.run("stub", seed)
    assert loads == ["m-count", "m-pol"]
    assert [c.model for c in choosers] == ["model:m-count", "model:m-count", "model:m-pol"]
    assert [c.items[0]["task"] for c in choosers] == ["counting", "matching", "polarity"]
    return res


def test_run_wiring_with_a_stub_model(monkeypatch):
    citems = [_count_item(2, 2, 1),    # single voice, under
              _count_item(3, 3, 3),    # single voice, right
              _count_item(1, 1, 1),    # single voice, right
              _count_item(2, 4, 4),    # extras, over
              _count_item(1, 2, 2),    # extras, over
              _count_item(3, 4, 4)]    # extras, over
    mitems = [_match_item(0, "pro", 0),   # exact
              _match_item(2, "con", 3),   # another con: same stance
              _match_item(1, "pro", 2)]   # a con for a pro
    wrong = {("plain", 0), ("concessive", 0), ("concessive", 1), ("concessive", 2), ("rebuttal", 2),
             ("rebuttal", 3)}
    res = _run_with_stub(monkeypatch, citems, mitems, wrong)
    m, info = res["metrics"], res["info"]
    assert m["count_accuracy"]["lm"] == pytest.approx(2 / 6)
    assert m["count_mae"]["lm"] == pytest.approx((1 + 0 + 0 + 2 + 1 + 1) / 6)
    assert m["count_nie"]["lm"] == pytest.approx((2 / 3 + 1 + 1 + 1 / 2 + 1 / 2 + 3 / 4) / 6)
    assert m["count_over_share"]["lm"] == pytest.approx(3 / 4)
    assert m["count_over_share_single"]["lm"] == 0.0          # the only single-voice failure is an under
    assert info["count_single_items"] == 3
    assert info["count_signed_error"] == pytest.approx((-1 + 0 + 0 + 2 + 1 + 1) / 6)
    assert info["count_failures"] == 4
    assert info["count_predictions"] == [1, 3, 1, 4, 2, 4] and info["count_truth"] == [2, 3, 1, 2, 1, 3]
    assert m["match_exact"]["lm"] == pytest.approx(1 / 3)
    assert m["match_stance"]["lm"] == pytest.approx(2 / 3)
    assert m["match_same_stance_fail_share"]["lm"] == pytest.approx(1 / 2)
    assert info["match_failures"] == 2
    assert m["polarity_error"] == {"plain": [1.0, 0.0, 0.0, 0.0], "concessive": [1.0, 1.0, 1.0, 0.0],
                                   "rebuttal": [0.0, 0.0, 1.0, 1.0]}
    assert m["polarity_accuracy"] == pytest.approx({"plain": 0.75, "concessive": 0.25, "rebuttal": 0.5})
    assert m["concessive_failure_share"]["lm"] == pytest.approx(3 / 4)   # 3 of the 4 plain+concessive failures
    assert info["polarity_failures_plain_concessive"] == 4
    assert info["n_count"] == 6 and info["n_match"] == 3 and info["n_pol_groups"] == 4 and info["unparsed"] == 0
    assert 0.0 <= m["concessive_failure_share"]["random"] <= 1.0


def test_run_fallbacks_and_the_guessers_answer_range(monkeypatch):
    """A model without failures gets the null (0.5) for every failure share, no single-voice item
    gives 0.5 for both arms, and the guesser answers uniformly on 1..5 (on items whose answer is 5 it
    is right about a fifth of the time, never over, and off by 2 on average)."""
    n = 400
    citems = [_count_item(5, 6, 5) for _ in range(n)]           # 5 opinions, one voiced twice
    mitems = [_match_item(0, "pro", 0), _match_item(3, "con", 3)]
    res = _run_with_stub(monkeypatch, citems, mitems, set())
    m, info = res["metrics"], res["info"]
    assert m["count_accuracy"]["lm"] == 1.0 and info["count_failures"] == 0
    assert m["count_over_share"]["lm"] == 0.5
    assert info["count_single_items"] == 0
    assert m["count_over_share_single"] == {"lm": 0.5, "random": 0.5}
    assert m["match_exact"]["lm"] == 1.0 and m["match_same_stance_fail_share"]["lm"] == 0.0
    assert m["polarity_accuracy"] == {"plain": 1.0, "concessive": 1.0, "rebuttal": 1.0}
    assert m["concessive_failure_share"]["lm"] == 0.5 and info["polarity_failures_plain_concessive"] == 0
    # the guesser: uniform on 1..5 -> P(5) = 0.2, E|5 - guess| = 2, never above 5
    assert 0.14 < m["count_accuracy"]["random"] < 0.26
    assert abs(m["count_mae"]["random"] - 2.0) < 0.2
    assert m["count_over_share"]["random"] == 0.0
