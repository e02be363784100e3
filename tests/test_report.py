"""How the report, the README summary and `iclr26 info` show verdicts: "reproduced, smaller" in its own
count and colour, premises counted apart, what an inconclusive verdict would take, the comparator floor,
the user's own runs beside the published ones."""
from __future__ import annotations

import math

import pytest

from iclr26.harness import report
from iclr26.harness.claims import parse_claims
from iclr26.harness.stats import VERDICTS, ClaimStatistics
from iclr26.harness.verdicts import ClaimVerdict

CLAIMS = {
    "paper": {"title": "A paper", "arxiv": "", "code": ""},
    "claims": [
        {"id": "learns", "statement": "the method arm learns the task", "paper_value": "0.9", "source": "T1",
         "metric": "acc", "method": "m", "baseline_value": 0.5, "direction": "greater", "unit": "seeds",
         "test": "paired_t", "paper_effect": 0.4, "premise": True},
        {"id": "beats_b", "statement": "m beats b", "paper_value": "+0.1", "source": "T2", "metric": "acc",
         "method": "m", "baseline": "b", "direction": "greater", "unit": "seeds", "test": "paired_t",
         "paper_effect": 0.1, "premises": ["learns"], "baseline_floor": 0.5, "baseline_floor_reason": "chance",
         "baseline_floor_expected": True},
        {"id": "smaller", "statement": "m beats c by a lot", "paper_value": "+0.3", "source": "T3", "metric": "acc",
         "method": "m", "baseline": "c", "direction": "greater", "unit": "seeds", "test": "paired_t",
         "paper_effect": 0.3},
        {"id": "unsure", "statement": "m beats d", "paper_value": "+0.05", "source": "T4", "metric": "acc",
         "method": "m", "baseline": "d", "direction": "greater", "unit": "seeds", "test": "paired_t",
         "paper_effect": 0.05},
    ],
}


def _stats(verdict, **kw):
    base = dict(test="paired_t", direction="greater", n=5, method_mean=0.8, baseline_mean=0.7, effect=0.1,
                ci_low=0.05, ci_high=0.15, pvalue=0.01, pvalue_opposite=0.99, verdict=verdict, alpha=0.05,
                paper_effect=0.1, mde=0.04)
    base.update(kw)
    return ClaimStatistics(**base)


def _record():
    pc = parse_claims(CLAIMS)
    verdicts = {"learns": ("reproduced", _stats("reproduced"), "significant"),
                "beats_b": ("reproduced", _stats("reproduced", baseline_floor=0.5, baseline_floor_pvalue=0.4),
                            "significant; the comparator (0.5) is not significantly above its floor 0.5, "
                            "which is itself what the paper claims"),
                "smaller": ("reproduced, smaller", _stats("reproduced, smaller", ci_high=0.12, paper_effect=0.3),
                            "reproduced (smaller than the paper's: bound +0.12 vs effect +0.3)"),
                "unsure": ("inconclusive", _stats("inconclusive", pvalue=0.2, units_needed=40, ci_low=-0.02),
                           "too little power")}
    rec = {"id": "toy", "domain": "classical", "status": "implemented", "feasibility": "A", "summary": "toy",
           "title": "A paper", "arxiv": "", "code": "", "claims": []}
    for c in pc.claims:
        e = report._claim_entry(c)
        v, st, note = verdicts[c.id]
        e.update(verdict=v, scale="quick", stale=None, note=note, stats=st.to_dict())
        rec["claims"].append(e)
    return pc, rec


def test_reproduced_smaller_is_a_verdict_with_its_own_colour_and_class():
    assert "reproduced, smaller" in VERDICTS and "reproduced, smaller" in report.KINDS
    assert report.COLOURS["reproduced, smaller"] not in (report.COLOURS["reproduced"], report.COLOURS["not reproduced"])
    assert report._cls("reproduced, smaller (smoke) [stale]") == "reproducedsmaller"
    assert ".reproducedsmaller{" in report.PAGE.replace("{{", "{")


def test_tally_counts_smaller_and_premises_apart():
    _, rec = _record()
    t = report.tally(rec["claims"])
    assert t["n_claims"] == 3 and t["n_premises"] == 1
    assert t["claims"]["reproduced"] == 1 and t["claims"]["reproduced, smaller"] == 1
    assert t["claims"]["inconclusive"] == 1 and t["premises"]["reproduced"] == 1
    assert report.tally_words(t) == "claims reproduced 1/3 (+1 smaller than the paper's); premises 1/1"
    line = next(x for x in report.summary_markdown([rec]).splitlines() if x.startswith("| toy"))
    assert "| 1/3 (+1 smaller); premises 1/1 |" in line and "learns: reproduced (premise)" in line
    assert "smaller: reproduced, smaller" in line


def test_the_page_shows_premises_floors_and_what_it_would_take(tmp_path):
    _, rec = _record()
    (tmp_path / "papers").mkdir()
    report._paper_page(tmp_path, rec, [])
    page = (tmp_path / "papers" / "toy.html").read_text()
    assert "<h2>Premises</h2>" in page and "claims reproduced 1/3" in page and "premises 1/1" in page
    assert "rests on the premise learns" in page
    assert "comparator floor: b must be above 0.5 (chance), p = 0.4" in page
    assert "the comparator failing it is itself the paper&#x27;s claim" in page
    assert "what it would take: about 40 seeds (now 5) would detect the paper&#x27;s effect +0.05" in page
    assert "class='reproducedsmaller'" in page and "table-layout:fixed" in page


def test_what_it_would_take_is_said_once_and_only_for_inconclusive():
    _, rec = _record()
    unsure = rec["claims"][3]
    assert report._reason(unsure).count("what it would take") == 1
    said = dict(unsure, note="too little power; about 40 seeds (now 5) would detect the paper's effect")
    assert "what it would take" not in report._reason(said)
    assert report.what_it_would_take(rec["claims"][2]) == ""


def test_info_labels_both_p_values_and_shows_the_new_rules(monkeypatch, capsys):
    from iclr26 import cli, registry
    from iclr26.harness import experiments, verdicts

    pc, rec = _record()
    by_id = {c.id: c for c in pc.claims}
    monkeypatch.setattr(experiments, "claims_for", lambda p: pc)

    def judged(p, scale, store, save=True):
        if scale != "quick":
            return [ClaimVerdict(c, "not run", None, []) for c in pc.claims]
        return [ClaimVerdict(by_id[e["id"]], e["verdict"], ClaimStatistics(**e["stats"]), [0, 1, 2, 3, 4], e["note"])
                for e in rec["claims"]]

    monkeypatch.setattr(verdicts, "judge_paper", judged)
    monkeypatch.setenv("ICLR26_STORE", "")
    assert cli.main(["info", "crc"]) == 0
    out = capsys.readouterr().out
    assert "p(claimed direction)=0.01, p(opposite)=0.99" in out
    assert "published quick: claims reproduced 1/3 (+1 smaller than the paper's); premises 1/1" in out
    assert "what it would take: about 40 seeds (now 5)" in out
    assert "rests on the premise learns" in out and "(premise)" in out
    assert "the comparator failing it is itself the paper's claim" in out
    assert registry.get("crc").status == "implemented"


def test_info_says_when_a_paper_has_no_arxiv_version(capsys):
    from iclr26 import cli

    assert cli.main(["info", "cda"]) == 0
    assert "arXiv: none (no arXiv version" in capsys.readouterr().out


def test_your_runs_overview_counts_agreement_and_explains_differences():
    _, rec = _record()
    import copy

    mine = copy.deepcopy(rec)
    mine["git_commits"] = ["abc123def4567890"]
    mine["last_run"] = "2026-12-01 10:00"
    mine["claims"][3].update(verdict="not reproduced", note="the interval rules out the paper's effect")
    yours = report.your_runs([mine], [rec])
    (p,) = yours["papers"]
    assert p["agree"] == 3 and p["compared"] == 4 and p["git_commits"] == ["abc123def4567890"]
    (d,) = p["differ"]
    assert d["claim"] == "unsure" and d["yours"] == "not reproduced" and d["published"] == "inconclusive"
    assert "rules out" in d["why"] and "too little power" in d["published_why"]
    html = report._your_runs_html(yours)
    assert "id='your-runs'" in html and "abc123def456" in html and "3/4" in html


def test_plot_draws_your_trials_and_colours_by_verdict(tmp_path):
    pc, _ = _record()
    claim = pc.claims[2]
    pub = ClaimVerdict(claim, "contradicted", _stats("contradicted", effect=-0.1, ci_low=-0.15, ci_high=-0.05),
                       [0, 1, 2], "", [0.5, 0.6, 0.55], [0.7, 0.65, 0.7])
    mine = ClaimVerdict(claim, "inconclusive", _stats("inconclusive"), [0, 1], "", [0.6, 0.62], [0.6, 0.6])
    colours = report.plot_claim(tmp_path / "a.png", claim, pub, yours=mine)
    assert (tmp_path / "a.png").stat().st_size > 5000
    assert colours == [report.COLOURS["contradicted"], report.COLOURS["inconclusive"]]
    assert math.isfinite(pub.stats.effect)


@pytest.mark.parametrize("kind", report.KINDS)
def test_every_verdict_has_a_colour(kind):
    assert report.COLOURS[kind].startswith("#")


def test_the_readme_times_come_from_the_expected_times():
    """The README's time sentences are generated from the published trials by the function behind
    `reproduce`'s estimate and the index's times (one source of truth)."""
    from pathlib import Path

    from iclr26.harness.store import PUBLISHED_PATH, Store

    if not PUBLISHED_PATH.is_file():
        pytest.skip("no published results")
    readme = (Path(report.__file__).resolve().parents[3] / "README.md").read_text()
    block = readme.split("<!-- times:begin -->\n", 1)[1].split("\n<!-- times:end -->", 1)[0]
    with Store(PUBLISHED_PATH, readonly=True) as st:
        assert block == report.times_markdown(report.expected_times(st))


def test_a_figure_is_rendered_once_and_reused_until_what_it_draws_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("ICLR26_PLOT_CACHE", str(tmp_path / "cache"))
    pc, _ = _record()
    claim = pc.claims[2]
    pub = ClaimVerdict(claim, "contradicted", _stats("contradicted", effect=-0.1, ci_low=-0.15, ci_high=-0.05),
                       [0, 1, 2], "", [0.5, 0.6, 0.55], [0.7, 0.65, 0.7])
    drawn = []
    real = report.plot_claim
    monkeypatch.setattr(report, "plot_claim", lambda path, *a, **k: drawn.append(path) or real(path, *a, **k))
    report.cached_plot(tmp_path / "a.png", claim, pub)
    report.cached_plot(tmp_path / "b.png", claim, pub)  # the same figure: copied from the cache
    assert len(drawn) == 1 and (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()
    moved = ClaimVerdict(claim, "contradicted", pub.stats, [0, 1, 2], "", [0.5, 0.6, 0.56], [0.7, 0.65, 0.7])
    report.cached_plot(tmp_path / "c.png", claim, moved)  # one value changed: rendered anew
    other = ClaimVerdict(claim, "inconclusive", _stats("inconclusive"), [0, 1, 2], "", [0.5, 0.6, 0.55], [0.7, 0.65, 0.7])
    report.cached_plot(tmp_path / "d.png", claim, other)  # the verdict (the colour) changed
    assert len(drawn) == 3
    monkeypatch.setenv("ICLR26_PLOT_CACHE", "")  # the cache turned off
    report.cached_plot(tmp_path / "e.png", claim, pub)
    assert len(drawn) == 4 and not (tmp_path / "e.png").with_suffix(".tmp").exists()
