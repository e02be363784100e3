"""The CLI and the result store: listing, a smoke run end to end, resuming after a kill, the report."""
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from iclr26.cli import main
from iclr26.harness.store import Store


def test_list_shows_76(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "of 76 implemented" in out and "cpd_mrdpg" in out


def test_list_into_a_closed_pipe_exits_quietly():
    """`iclr26 list | head -1` must not end in a BrokenPipeError traceback."""
    proc = subprocess.Popen([sys.executable, "-c", "from iclr26.cli import main; raise SystemExit(main(['list']))"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before anything is written (`head` that has read enough)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0, err
    assert "Traceback" not in err


def test_info_and_unknown_id(capsys):
    assert main(["info", "cda"]) == 0
    assert "Centroid" in capsys.readouterr().out
    assert main(["info", "no_such_paper"]) == 2
    assert "unknown paper id" in capsys.readouterr().err


def test_reproduce_rejects_planned_and_bad_flags():
    with pytest.raises(SystemExit, match="not implemented"):
        main(["reproduce", "sportr", "--scale", "smoke"])
    with pytest.raises(SystemExit):
        main(["reproduce", "cda", "--seeds", "0"])


def _rows(db):
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT seed, finished_at FROM trials ORDER BY seed").fetchall()
    except sqlite3.OperationalError as e:  # the run has created the file but not yet its schema
        if "no such table" in str(e):
            return []
        raise
    finally:
        con.close()


def test_killed_run_resumes_without_losing_or_repeating(tmp_path):
    db = tmp_path / "r.sqlite"
    cmd = [sys.executable, "-m", "iclr26.cli", "reproduce", "cpd_mrdpg", "--scale", "smoke",
           "--seeds", "3", "--jobs", "1", "--store", str(db)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 240
    while time.time() < deadline:
        if db.exists() and len(_rows(db)) >= 1:
            break
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    first = _rows(db)
    assert 1 <= len(first) < 3, "the kill should land mid-run"
    subprocess.run(cmd, check=True, capture_output=True)
    after = _rows(db)
    assert [s for s, _ in after] == [0, 1, 2]  # nothing lost, nothing duplicated
    assert dict(after)[first[0][0]] == first[0][1]  # finished trials were not redone
    with Store(db) as st:
        assert {v["claim"] for v in st.verdicts("cpd_mrdpg", "smoke")} >= {"recovers_number_of_change_points"}


def test_report_renders_site(tmp_path):
    db = tmp_path / "r.sqlite"
    assert main(["reproduce", "cpd_mrdpg", "--scale", "smoke", "--store", str(db), "--jobs", "1"]) == 0
    out = tmp_path / "site"
    assert main(["report", "--out", str(out), "--store", str(db), "--published", str(tmp_path / "none.sqlite")]) == 0
    index = (out / "index.html").read_text()
    assert "cpd_mrdpg" in index and "planned" in index
    page = (out / "papers" / "cpd_mrdpg.html").read_text()
    assert "recovers_number_of_change_points" in page and ".png" in page
    assert (out / "summary.json").exists() and "| cpd_mrdpg |" in (out / "summary.md").read_text()


# --- two stores: the published results and the user's own runs -------------------------------------


@pytest.fixture
def user_store(tmp_path, monkeypatch):
    db = tmp_path / "mine" / "runs.sqlite"
    monkeypatch.setenv("ICLR26_STORE", str(db))
    return db


def _digest(path):
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def test_reproduce_writes_the_users_store_not_the_published_results(user_store, capsys):
    from iclr26.harness.store import PUBLISHED_PATH

    before = _digest(PUBLISHED_PATH)
    assert main(["reproduce", "cpd_mrdpg", "--scale", "smoke", "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert f"store: {user_store}" in out and "trial(s) to run with 1 job(s)" in out
    with Store(user_store) as st:
        assert [t.seed for t in st.trials_at("cpd_mrdpg", "smoke",
                                              st.all_trials()[0].fingerprint)] == [0]
    assert _digest(PUBLISHED_PATH) == before  # the tracked results were not touched
    # the report shows the user's verdicts beside the published ones, and writes no README
    from iclr26.registry import get

    readme = get("cpd_mrdpg").folder / "README.md"
    text = readme.read_text()
    site = user_store.parent / "site"
    assert main(["report", "--out", str(site)]) == 0
    assert readme.read_text() == text
    page = (site / "papers" / "cpd_mrdpg.html").read_text()
    if PUBLISHED_PATH.is_file():
        assert "your run" in page
    assert _digest(PUBLISHED_PATH) == before


def test_estimate_from_published_durations():
    from iclr26.harness.runner import Job, estimate_seconds

    class Ref:
        def durations(self, paper, scale):
            return {"a": [10.0, 30.0, 20.0], "b": [100.0]}.get(paper, [])

    jobs = [Job("a", "quick", s, "fp") for s in range(4)] + [Job("b", "quick", 0, "fp"), Job("c", "quick", 0, "fp")]
    total, per = estimate_seconds(jobs, Ref(), 2)
    # a: median 20 s x 4, b: 100 s, c unknown: the median of the known costs (20 s); 200 s over 2 workers
    assert per == {("a", "quick"): 20.0, ("b", "quick"): 100.0}
    assert total == 100.0
    assert estimate_seconds(jobs, Ref(), 1)[0] == 200.0
    assert estimate_seconds([Job("c", "quick", 0, "fp")], Ref(), 1)[0] is None


def test_durations_count_cpu_time_capped_by_wall_time(tmp_path):
    """A trial measured on an overloaded machine (wall 300 s, CPU 60 s) costs its CPU time; one that
    used several threads (wall 50 s, CPU 90 s) its wall time; one stored without CPU time the median
    of the CPU-timed ones, or its wall time when no trial of the paper has CPU time."""
    from iclr26.harness.store import Store, Trial

    with Store(tmp_path / "s.sqlite") as st:
        for seed, wall, cpu in ((0, 300.0, 60.0), (1, 50.0, 90.0), (2, 40.0, None)):
            st.put_trial(Trial("crc", "quick", seed, "fp", "ok", {"metrics": {}}, None, wall, 1, "", {}, {}, 2, None, cpu))
        st.put_trial(Trial("crc", "quick", 3, "fp", "error", None, "x", 7.0, 1, "", {}, {}, 2, None, 7.0))
        # the trial without CPU time costs the median of the CPU-timed ones (60 s and 50 s -> 60 s)
        assert sorted(st.durations("crc", "quick")) == [50.0, 60.0, 60.0]
        assert st.durations("crc", "smoke") == []
        st.put_trial(Trial("csnn", "quick", 0, "fp", "ok", {"metrics": {}}, None, 40.0, 1, "", {}, {}, 2, None, None))
        assert st.durations("csnn", "quick") == [40.0]  # no CPU time anywhere: the wall time


# --- robust runs ------------------------------------------------------------------------------------


def test_workers_die_with_a_killed_run(tmp_path):
    """kill -9 of `reproduce` must not leave its worker (and a hung trial) running."""
    import psutil

    db = tmp_path / "r.sqlite"
    cmd = [sys.executable, "-m", "iclr26.cli", "reproduce", "cpd_mrdpg", "--scale", "smoke",
           "--seeds", "3", "--jobs", "1", "--store", str(db)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    parent = psutil.Process(proc.pid)
    deadline = time.time() + 240
    children = []
    while time.time() < deadline and not children:
        children = [c for c in parent.children(recursive=True) if "spawn_main" in " ".join(c.cmdline())]
        time.sleep(0.2)
    assert children, "no worker started"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    gone, alive = psutil.wait_procs(children, timeout=15)
    assert not alive, [c.cmdline() for c in alive]


def test_a_claimed_trial_is_left_to_the_run_that_holds_it(tmp_path):
    db = tmp_path / "r.sqlite"
    with Store(db) as st:
        assert st.claim("p", "smoke", 0, "fp")
        assert st.claim("p", "smoke", 0, "fp")  # the same process may claim again
    holder = subprocess.Popen([sys.executable, "-c", f"""
import time
from iclr26.harness.store import Store
s = Store({str(db)!r}); s.conn.execute("DELETE FROM running")
assert s.claim("p", "smoke", 1, "fp"); print("held", flush=True); time.sleep(60)
"""], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    with Store(db) as st:
        assert not st.claim("p", "smoke", 1, "fp")  # a live run holds it
        holder.kill()
        holder.wait()
        assert st.claim("p", "smoke", 1, "fp")  # its holder died: the claim is taken over


def test_two_runs_on_one_store_run_each_trial_once(tmp_path):
    db = tmp_path / "r.sqlite"
    cmd = [sys.executable, "-m", "iclr26.cli", "reproduce", "cpd_mrdpg", "--scale", "smoke",
           "--seeds", "2", "--jobs", "1", "--store", str(db)]
    a = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(1.0)
    b = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    outs = [a.communicate(timeout=600)[0], b.communicate(timeout=600)[0]]
    ran = [{int(line.split("seed ")[1].split(":")[0]) for line in o.splitlines() if ": ok in " in line} for o in outs]
    assert ran[0] | ran[1] == {0, 1}
    assert not ran[0] & ran[1], outs


def test_info_that_json_cannot_hold_is_converted_or_refused():
    import numpy as np

    from iclr26.harness.experiments import MeasurementError, check_measurements

    out = check_measurements({"metrics": {"m": {"a": 1.0}},
                              "info": {"curve": np.arange(3), "x": np.float32(0.5), "bad": float("nan"), 3: (1, 2)}})
    assert out["info"] == {"curve": [0, 1, 2], "x": 0.5, "bad": None, "3": [1, 2]}
    with pytest.raises(MeasurementError, match=r"info\['obj'\]: a object cannot be stored"):
        check_measurements({"metrics": {"m": {"a": 1.0}}, "info": {"obj": object()}})


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "soon"])
def test_timeouts_must_be_positive(value, capsys):
    with pytest.raises(SystemExit) as e:
        main(["reproduce", "cda", "--timeout", value])
    assert e.value.code == 2 and "--timeout" in capsys.readouterr().err


def test_an_error_verdict_makes_reproduce_fail(tmp_path, capsys):
    """Verdicts judge every stored trial at the current code, whatever --seeds asked for."""
    from iclr26.harness.experiments import folder_fingerprint
    from iclr26.harness.store import Trial
    from iclr26.registry import get

    db = tmp_path / "r.sqlite"
    assert main(["reproduce", "cpd_mrdpg", "--scale", "smoke", "--seeds", "1", "--jobs", "1",
                 "--store", str(db)]) == 0
    fp = folder_fingerprint(get("cpd_mrdpg"))
    with Store(db) as st:
        st.put_trial(Trial("cpd_mrdpg", "smoke", 4, fp, "error", None, "Boom: seed 4 failed", 1.0, 0, "",
                           {}, {}, time.time(), {"files": {}, "packages": {}}))
    capsys.readouterr()
    assert main(["reproduce", "cpd_mrdpg", "--scale", "smoke", "--seeds", "1", "--store", str(db)]) == 1
    assert "verdict(s) are errors" in capsys.readouterr().out


def _one_line_error(capsys, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err and err.count("\n") == 1, err
    return err


def test_bad_stores_get_one_line_errors(tmp_path, capsys):
    text = tmp_path / "text.sqlite"
    text.write_text("this is not a database\n" * 100)
    assert "not a readable iclr26 store" in _one_line_error(capsys, ["info", "cda", "--store", str(text)])
    folder = tmp_path / "dir.sqlite"
    folder.mkdir()
    assert "is a directory" in _one_line_error(capsys, ["reproduce", "cda", "--store", str(folder)])
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert "a parent of it is a file" in _one_line_error(capsys, ["reproduce", "cda", "--store", str(afile / "s.sqlite")])
    good = tmp_path / "good.sqlite"
    with Store(good) as st:
        st.conn.execute("PRAGMA journal_mode=DELETE")
        st.conn.execute("CREATE TABLE pad (x)")
        st.conn.executemany("INSERT INTO pad VALUES (?)", [("y" * 1000,)] * 200)
    trunc = tmp_path / "trunc.sqlite"
    trunc.write_bytes(good.read_bytes()[:5000])
    _one_line_error(capsys, ["report", "--store", str(trunc), "--out", str(tmp_path / "s1")])
    assert "cannot write the report" in _one_line_error(capsys, ["report", "--out", str(afile / "site"),
                                                                 "--store", str(good)])


def test_info_and_report_read_a_read_only_store(tmp_path, capsys):
    db = tmp_path / "ro" / "r.sqlite"
    assert main(["reproduce", "cpd_mrdpg", "--scale", "smoke", "--jobs", "1", "--store", str(db)]) == 0
    for f in db.parent.iterdir():
        f.chmod(0o444)
    db.parent.chmod(0o555)
    try:
        capsys.readouterr()
        assert main(["info", "cpd_mrdpg", "--store", str(db)]) == 0
        assert "yours smoke:" in capsys.readouterr().out
        assert main(["report", "--store", str(db), "--out", str(tmp_path / "site")]) == 0
    finally:
        db.parent.chmod(0o755)


def test_summary_json_is_strict(tmp_path):
    import json

    db = tmp_path / "r.sqlite"
    assert main(["reproduce", "cpd_mrdpg", "--scale", "smoke", "--jobs", "1", "--store", str(db)]) == 0
    out = tmp_path / "site"
    assert main(["report", "--store", str(db), "--out", str(out), "--published", str(tmp_path / "none")]) == 0

    def refuse(c):
        raise ValueError(f"non-standard JSON constant {c}")

    summary = json.loads((out / "summary.json").read_text(), parse_constant=refuse)
    assert summary["source"] == "yours" and len(summary["papers"]) == 76
    assert "overview.png" in (out / "index.html").read_text() and (out / "overview.png").stat().st_size > 1000


def test_a_store_written_before_cpu_seconds_were_recorded_opens_and_migrates(tmp_path):
    """Stores from before the deps and cpu_s columns: read-only opening reads them as None, a writable
    opening adds the columns, and a new trial keeps its CPU seconds."""
    from iclr26.harness.store import Trial

    db = tmp_path / "old.sqlite"
    con = sqlite3.connect(db)
    con.execute("""CREATE TABLE trials (paper TEXT NOT NULL, scale TEXT NOT NULL, seed INTEGER NOT NULL,
        fingerprint TEXT NOT NULL, status TEXT NOT NULL, measurements TEXT, error TEXT, duration_s REAL,
        peak_mem_mb REAL, git_commit TEXT, versions TEXT, machine TEXT, finished_at REAL NOT NULL,
        PRIMARY KEY (paper, scale, seed, fingerprint))""")
    con.execute("INSERT INTO trials VALUES ('crc','quick',0,'fp','ok','{\"metrics\": {}}',NULL,12.5,1,'','{}','{}',1)")
    con.commit()
    con.close()
    with Store(db, readonly=True) as st:
        (t,) = st.trials_at("crc", "quick", "fp")
        assert t.deps is None and t.cpu_s is None and t.duration_s == 12.5
    with Store(db) as st:
        cols = [r[1] for r in st.conn.execute("PRAGMA table_info(trials)")]
        assert cols[-2:] == ["deps", "cpu_s"]
        st.put_trial(Trial("crc", "quick", 1, "fp", "ok", {"metrics": {}}, None, 3.0, 1, "", {}, {}, 2, None, 2.5))
        assert [t.cpu_s for t in st.trials_at("crc", "quick", "fp")] == [None, 2.5]


def test_report_quick_time_counts_cpu_time_and_two_jobs(tmp_path, monkeypatch):
    """The index shows each paper's quick time with 2 jobs from CPU seconds capped by wall time."""
    from iclr26.harness import report
    from iclr26.harness.store import Store, Trial

    runs = [Trial("crc", "quick", s, "fp", "ok", {"metrics": {}}, None, wall, 1, "", {}, {}, 2, None, cpu)
            for s, wall, cpu in ((0, 300.0, 60.0), (1, 50.0, 90.0), (2, 40.0, None))]
    monkeypatch.setattr(report, "select_trials", lambda p, scale, store: (runs if p.id == "crc" and scale == "quick" else [], None))
    with Store(tmp_path / "s.sqlite") as st:
        rec = next(r for r in report.collect(st) if r["id"] == "crc")
    assert rec["runtime_s"] == 390.0 and rec["cpu_s"] is None
    assert rec["core_s"] == 170.0 and rec["two_jobs_s"] == 85.0
    runs[:] = runs[:1]
    with Store(tmp_path / "s.sqlite") as st:
        rec = next(r for r in report.collect(st) if r["id"] == "crc")
    assert rec["two_jobs_s"] == 60.0  # one trial cannot be split over two jobs
