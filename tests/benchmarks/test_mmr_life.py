"""MMR-Life: the official answer-extraction rule against an independent reference, voting and best-of-n,
per-type tables with bootstrap intervals, type correlation and clustering (scipy), the mini
benchmark's schema and answers, prompts, and rejection of bad input."""
import re
from collections import Counter

import numpy as np
import pytest
from scipy.cluster.hierarchy import linkage
from scipy.spatial.distance import squareform
from scipy.stats import pearsonr

from iclr26.benchmarks.mmr_life import (CHANCE, LETTERS, REASONING_TYPES, TYPE_TASK_MAP, best_of_n, extract_answer,
                                        extract_answers, majority_vote, make_items, per_type_accuracy,
                                        render_user_turn, sample_accuracy, score_item, type_correlation)
from iclr26.benchmarks.mmr_life import minibench


# --------------------------------------------------------------------------- answer extraction
def reference_extract(text):
    """Independent reference of the official rule, scanning right to left by hand (no shared regex)."""
    text = text.strip()
    out, i = [], 0
    while i < len(text):          # delete '-' / '*' and the whitespace after them
        if text[i] in "-*":
            i += 1
            while i < len(text) and text[i].isspace():
                i += 1
            continue
        out.append(text[i])
        i += 1
    t = "".join(out)
    # left-to-right scan, alternatives tried in order at each position, a match consumes its span
    alts = [re.compile(r"Answer\s*:\s*([A-Ea-e])"), re.compile(r"\\boxed\{\s*([A-Ea-e])\s*\}"),
            re.compile(r"([A-Ea-e])\s*\.")]
    best, p = "", 0
    while p < len(t):
        for k, a in enumerate(alts):
            if k == 0 and p > 0 and (t[p - 1].isalnum() or t[p - 1] == "_"):
                continue                      # the word boundary before "Answer"
            m = a.match(t, p)
            if m:
                best, p = m.group(1), max(m.end(), p + 1)
                break
        else:
            p += 1
    return best.upper()


@pytest.mark.parametrize("text,expected", [
    ("# Answer: B", "B"),
    ("Let me think. Answer: c", "C"),
    ("The answer is \\boxed{D}.", "D"),
    ("A. a cat\nB. a dog\nSo the answer is B.", "B"),
    ("nothing here", ""),
    ("", ""),
    ("Answer: A ... actually Answer: E", "E"),                  # the last match counts
    ("I think this is the image.", "E"),                       # official quirk: 'e.' at a word's end
    ("- Answer: B", "B"),                                      # list markers removed first
    ("Answer:B", "B"),
])
def test_extract_answer_cases(text, expected):
    assert extract_answer(text) == expected


def test_extract_answer_matches_independent_reference_on_random_texts():
    rng = np.random.default_rng(0)
    pieces = ["Answer: ", "answer:", "\\boxed{", "}", "A", "b", "C.", "d .", "E", ". ", "- ", "* ", "the image",
              "x", " ", "\n", "Answer : e", "F.", "boxed{A}", "1."]
    for _ in range(400):
        text = "".join(rng.choice(pieces, size=rng.integers(0, 12)))
        assert extract_answer(text) == reference_extract(text), text


def test_extract_answers_is_elementwise_and_rejects_a_bare_string():
    assert extract_answers(["Answer: A", "zz", "\\boxed{b}"]) == ["A", "", "B"]
    with pytest.raises(TypeError, match="responses"):
        extract_answers("Answer: A")
    with pytest.raises(TypeError, match="response"):
        extract_answer(3)


# --------------------------------------------------------------------------- voting, best-of-n
def test_majority_vote_is_counter_most_common_with_first_seen_ties():
    assert majority_vote(["A", "B", "B", "C"]) == "B"
    assert majority_vote(["C", "A", "A", "C"]) == "C"        # tie: first seen wins
    assert majority_vote(["", "", "A"]) == ""                # no-answer counts as a candidate
    rng = np.random.default_rng(1)
    for _ in range(200):
        p = list(rng.choice(list("ABCDE") + [""], size=rng.integers(1, 9)))
        assert majority_vote(p) == Counter(p).most_common(1)[0][0]


def test_majority_vote_of_one_run_is_that_run():
    for L in LETTERS:
        assert majority_vote([L]) == L


def test_best_of_n_takes_highest_score_first_on_ties():
    assert best_of_n(["A", "B", "C"], [0.1, 0.9, 0.3]) == "B"
    assert best_of_n(["A", "B", "C"], [0.5, 0.5, 0.1]) == "A"
    assert best_of_n(["D"], [-3.0]) == "D"


@pytest.mark.parametrize("answers,scores,match", [
    ([], [], "answers"), (["A", "B"], [0.1], "scores"), (["A", "B"], [0.1, float("nan")], "finite"),
    ("AB", [0.1, 0.2], "answers")])
def test_best_of_n_rejects_bad_input(answers, scores, match):
    with pytest.raises(ValueError, match=match):
        best_of_n(answers, scores)


def test_majority_vote_rejects_empty():
    with pytest.raises(ValueError, match="preds"):
        majority_vote([])


def test_score_item_matches_official_record():
    rec = score_item(["Answer: A", "Answer: B", "\\boxed{A}"], "a")
    assert rec == {"preds": ["A", "B", "A"], "cor_flag": [True, False, True], "pred_answer": "A", "correct": True}
    with pytest.raises(ValueError, match="golden"):
        score_item(["Answer: A"], "F")


def test_sample_accuracy_is_mean_share_of_correct_runs():
    assert sample_accuracy([[True, False], [True, True, True, False], []]) == pytest.approx((0.5 + 0.75 + 0) / 3)
    with pytest.raises(ValueError, match="cor_flags"):
        sample_accuracy([])


# --------------------------------------------------------------------------- per-type table
def test_per_type_accuracy_point_estimates_and_intervals():
    types = ["spatial"] * 50 + ["causal"] * 50
    correct = [1] * 40 + [0] * 10 + [1] * 5 + [0] * 45
    tab = per_type_accuracy(correct, types, n_boot=4000, seed=0)
    assert tab["overall"].accuracy == pytest.approx(0.45) and tab["overall"].n == 100
    assert tab["spatial"].accuracy == pytest.approx(0.8) and tab["causal"].accuracy == pytest.approx(0.1)
    # percentile bootstrap of a proportion: close to the normal interval p +- 1.96 sqrt(p(1-p)/n)
    half = 1.96 * np.sqrt(0.8 * 0.2 / 50)
    assert tab["spatial"].low == pytest.approx(0.8 - half, abs=0.03)
    assert tab["spatial"].high == pytest.approx(0.8 + half, abs=0.03)
    assert tab["spatial"].above_chance and not tab["causal"].above_chance
    assert tab["spatial"].chance == CHANCE == 0.2


def test_per_type_accuracy_is_deterministic_in_seed_and_degenerate_type_has_zero_width():
    a = per_type_accuracy([1, 0, 1, 1], ["x", "x", "y", "y"], seed=3)
    b = per_type_accuracy([1, 0, 1, 1], ["x", "x", "y", "y"], seed=3)
    assert a == b
    assert a["y"].low == a["y"].high == 1.0


@pytest.mark.parametrize("correct,types,kw,match", [
    ([], [], {}, "correct"), ([0.5, 2.0], ["a", "b"], {}, r"\[0, 1\]"), ([1, float("nan")], ["a", "b"], {}, "finite"),
    ([1, 0], ["a"], {}, "types"), ([1, 0], ["a", "b"], {"n_boot": 0}, "n_boot"),
    ([1, 0], ["a", "b"], {"level": 1.5}, "level"), ([1, 0], ["a", "b"], {"chance": -0.1}, "chance")])
def test_per_type_accuracy_rejects_bad_input(correct, types, kw, match):
    with pytest.raises(ValueError, match=match):
        per_type_accuracy(correct, types, **kw)


# --------------------------------------------------------------------------- type correlation
def test_type_correlation_matches_scipy_pearson_and_average_linkage():
    rng = np.random.default_rng(0)
    base = rng.normal(size=12)
    table = {"analogical": base + 0.1 * rng.normal(size=12), "inductive": base + 0.1 * rng.normal(size=12),
             "spatial": rng.normal(size=12), "temporal": rng.normal(size=12)}
    res = type_correlation(table)
    names = list(table)
    for i, a in enumerate(names):
        for j, b in enumerate(names):
            assert res.corr[i, j] == pytest.approx(pearsonr(table[a], table[b])[0])
    d = 1 - res.corr
    np.fill_diagonal(d, 0)
    ref = linkage(squareform(d, checks=False), method="average")
    np.testing.assert_allclose(res.linkage, ref)
    cl = res.clusters(3)
    assert cl["analogical"] == cl["inductive"] and cl["spatial"] != cl["analogical"]


@pytest.mark.parametrize("table,match", [
    ({"a": [1, 2, 3]}, "at least two"), ({"a": [1, 2], "b": [2, 3]}, ">= 3"),
    ({"a": [1, 2, 3], "b": [1, 2]}, ">= 3"), ({"a": [1, 2, 3], "b": [1, 1, 1]}, "same accuracy"),
    ({"a": [1, 2, float("nan")], "b": [1, 2, 3]}, "finite")])
def test_type_correlation_rejects_bad_input(table, match):
    with pytest.raises(ValueError, match=match):
        type_correlation(table)


def test_clusters_rejects_bad_count():
    res = type_correlation({"a": [1, 2, 3], "b": [3, 1, 2], "c": [1, 3, 2]})
    with pytest.raises(ValueError, match="n_clusters"):
        res.clusters(0)


# --------------------------------------------------------------------------- mini benchmark
def test_type_task_map_is_the_official_one():
    assert REASONING_TYPES == ("abductive", "analogical", "causal", "deductive", "inductive", "spatial", "temporal")
    assert all(len(v) == 3 for v in TYPE_TASK_MAP.values())
    assert TYPE_TASK_MAP["spatial"] == ("RPE", "CRE", "NRP")


def test_make_items_schema_determinism_and_balanced_answers():
    items = make_items(40, seed=5)
    assert items == make_items(40, seed=5) and items != make_items(40, seed=6)
    assert len(items) == 280
    for it in items:
        assert set(it) == {"id", "type", "task", "images", "question", "options", "golden_answer"}
        assert it["task"] in TYPE_TASK_MAP[it["type"]] and it["id"].startswith(it["task"] + "_")
        assert len(it["options"]) == 5 and len(set(it["options"])) == 5
        assert it["golden_answer"] in LETTERS and len(it["images"]) >= 2
    counts = Counter(it["golden_answer"] for it in items)
    assert min(counts.values()) > 30        # the correct letter is spread over A-E


def _solve(it):
    """An independent solver of the generators' rules from the text alone."""
    L = LETTERS
    opts = it["options"]
    if it["type"] == "inductive":
        v = [int(re.search(r"(\d+) dots", d).group(1)) for d in it["images"]]
        return L[opts.index(str(v[-1] + (v[1] - v[0])))]
    if it["type"] == "deductive":
        rules = dict(re.search(r"the (\w+) door leads to the (\w+)", d).groups() for d in it["images"][:-1])
        col = re.search(r"opening the (\w+) door", it["images"][-1]).group(1)
        return L[opts.index(f"the {rules[col]}")]
    if it["type"] == "spatial":
        rel = [re.search(r"the (\w+) stands directly left of the (\w+)", d).groups() for d in it["images"]]
        rights = {b for _, b in rel}
        left = [a for a, _ in rel if a not in rights][0]
        return L[opts.index(f"the {left}")]
    if it["type"] == "temporal":
        v = [int(re.search(r"(\d+) (?:cm|logs|coins)", d).group(1)) for d in it["images"]]
        up = any(w in it["images"][0] for w in ("growing", "filling", "filled with coins"))
        return L[int(np.argmin(v) if up else np.argmax(v))]
    if it["type"] == "analogical":
        pairs = dict(minibench._ANALOGIES)
        c = it["images"][2][2:]
        return L[opts.index(f"a {pairs[c]}")]
    if it["type"] == "causal":
        eff = {a: e for a, _, e in minibench._CAUSES}
        return L[opts.index(eff[it["images"][0]])]
    expl = {a: e for a, _, e in minibench._ABDUCTIONS}
    return L[opts.index(expl[it["images"][0]])]


def test_every_item_is_answerable_from_its_images():
    for it in make_items(25, seed=11):
        assert _solve(it) == it["golden_answer"], it


def test_render_user_turn_follows_the_official_layout():
    it = make_items(1, seed=0, types=("inductive",))[0]
    text = render_user_turn(it)
    assert text.startswith("Image 1: ")
    assert f"\nQuestion: {it['question']}\nOptions: A. {it['options'][0]} B. {it['options'][1]}" in text
    with pytest.raises(ValueError, match="options"):
        render_user_turn({"images": [], "question": "q", "options": ["a"]})
    with pytest.raises(ValueError, match="question"):
        render_user_turn({"images": [], "options": list("abcde")})


@pytest.mark.parametrize("kw,match", [(dict(n_per_type=0, seed=0), "n_per_type"),
                                      (dict(n_per_type=1, seed=0, types=("logical",)), "types"),
                                      (dict(n_per_type=1, seed=0, types=()), "types")])
def test_make_items_rejects_bad_input(kw, match):
    with pytest.raises(ValueError, match=match):
        make_items(**kw)


def test_experiment_answer_forcing_and_prompts_with_a_stub():
    """The experiment's reader: a parsed answer is kept; an unparsed one is continued with '# Answer:'."""
    from iclr26.benchmarks.mmr_life import experiment

    calls = []

    def fake_generate(model, tok, prompts, n, **kw):
        calls.append((list(prompts), n, kw))
        if n == 2:
            return [" D"] * len(prompts)
        return ["so Answer: B", "I am not sure"]

    import iclr26.models.generation as gen
    orig = gen.generate
    gen.generate = fake_generate
    try:
        letters, n_forced, _ = experiment._answers(None, None, ["p1", "p2"], 40, 4, sample=True, seed=0)
    finally:
        gen.generate = orig
    assert letters == ["B", "D"] and n_forced == 1
    assert calls[1][0] == ["p2I am not sure\n# Answer:"] and calls[1][1] == 2 and "do_sample" not in calls[1][2]
    assert calls[0][2]["temperature"] == 0.5 and calls[0][2]["top_p"] == 0.5 and calls[0][2]["do_sample"]


def test_chat_prompt_modes():
    from iclr26.benchmarks.mmr_life import chat_prompt

    class Tok:
        def apply_chat_template(self, msgs, tokenize, add_generation_prompt):
            return "|".join(m["role"] + ":" + m["content"] for m in msgs)

    it = make_items(1, seed=0, types=("causal",))[0]
    cot, direct = chat_prompt(Tok(), it, "cot"), chat_prompt(Tok(), it, "direct")
    assert "step by step" in cot and "step by step" not in direct and "# Answer: A/B/C/D/E" in direct
    with pytest.raises(ValueError, match="mode"):
        chat_prompt(Tok(), it, "tot")
