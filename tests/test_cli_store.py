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
    from iclr26.harness.store import CONTENTION, NOMINAL_LOAD, START_S

    class Ref:
        def durations(self, paper, scale, fingerprint=None):
            return {"a": [10.0, 30.0, 20.0], "b": [100.0]}.get(paper, [])

    jobs = [Job("a", "quick", s, "fp") for s in range(4)] + [Job("b", "quick", 0, "fp"), Job("c", "quick", 0, "fp")]
    total, per = estimate_seconds(jobs, Ref(), 2)
    # a: median 20 s x 4, b: 100 s, c unknown: the median of the known costs (20 s); each trial's worker
    # also starts (START_S): 248 CPU-s. On the nominal loaded 2-core machine (one other busy process) the
    # 2 workers get 4/3 of a core between them; the stored CPU seconds come from a full machine, as here
    assert per == {("a", "quick"): 20.0, ("b", "quick"): 100.0}
    assert (START_S, CONTENTION, NOMINAL_LOAD) == (8.0, 1.8, 1.0)
    assert total == pytest.approx(248 / (4 / 3))
    assert estimate_seconds(jobs, Ref(), 1)[0] == pytest.approx(248)
    # 8 workers for 6 trials on 2 cores: all run at once, the longest at 2/7 of a core
    assert estimate_seconds(jobs, Ref(), 8)[0] == pytest.approx(108 * 3.5)
    # at a measured load: an idle machine, and 4 other processes besides the run's 2 on 2 cores
    assert estimate_seconds(jobs, Ref(), 2, cores=2, load=0.0)[0] == pytest.approx(124)
    assert estimate_seconds(jobs, Ref(), 2, cores=2, load=4.0)[0] == pytest.approx(248 / (2 / 3))
    # 1 job on an idle 2-core machine: a core stays free, and the CPU seconds shrink to 1.4 / 1.8
    assert estimate_seconds(jobs, Ref(), 1, cores=2, load=0.0)[0] == pytest.approx(248 * 1.4 / CONTENTION)
    assert estimate_seconds(jobs, Ref(), 2, cores=None)[0] == 124.0  # a cluster with a CPU per worker
    assert estimate_seconds([Job("c", "quick", 0, "fp")], Ref(), 1)[0] is None


def test_durations_count_cpu_time_and_a_share_of_wall_time_when_it_is_unknown(tmp_path):
    """A trial measured on an overloaded machine (wall 300 s, CPU 60 s) costs its CPU time; one that
    used several threads (wall 50 s, CPU 90 s) its CPU time too; one stored without CPU time 0.15 of
    its wall time, and never less than the median of the CPU-timed ones; trials at the current code
    are preferred to older ones."""
    from iclr26.harness.store import Store, Trial

    with Store(tmp_path / "s.sqlite") as st:
        for seed, wall, cpu in ((0, 300.0, 60.0), (1, 50.0, 90.0), (2, 40.0, None)):
            st.put_trial(Trial("crc", "quick", seed, "fp", "ok", {"metrics": {}}, None, wall, 1, "", {}, {}, 2, None, cpu))
        st.put_trial(Trial("crc", "quick", 3, "fp", "error", None, "x", 7.0, 1, "", {}, {}, 2, None, 7.0))
        assert sorted(st.durations("crc", "quick", "fp")) == [60.0, 90.0, 90.0]
        assert sorted(st.durations("crc", "quick")) == [60.0, 90.0, 90.0]  # no code named: the latest per seed
        assert st.durations("crc", "smoke") == []
        st.put_trial(Trial("crc", "quick", 0, "new", "ok", {"metrics": {}}, None, 10.0, 1, "", {}, {}, 3, None, 8.0))
        assert st.durations("crc", "quick", "new") == [8.0]  # the current code's trials only
        assert sorted(st.durations("crc", "quick", "other")) == [8.0, 90.0, 90.0]  # none there: latest per seed
        st.put_trial(Trial("csnn", "quick", 0, "fp", "ok", {"metrics": {}}, None, 400.0, 1, "", {}, {}, 2, None, None))
        assert st.durations("csnn", "quick") == [60.0]  # no CPU time anywhere: WALL_ONLY_SHARE of the wall time


#: runs measured on the project's shared 2-core machine, other work beside them: `iclr26 reproduce crc
#: --scale quick --jobs 2` (the published crc code: 20 seeds, t >= 0) into an empty store took 600 s
#: with the 1-minute load average at 4.67 on average (120 readings of /proc/loadavg, every 5 s; the load
#: includes the run's own 2 workers). The issue's `reproduce cda crc --jobs 2` took 714 s on another
#: loaded 2-core machine, compared with the nominal estimate (the README's and the report's). A
#: measurement describes the code it timed: when a paper's quick check is reworked, time it again.
MEASURED_RUNS = [(["crc"], 600.0, 4.67 - 2), (["cda", "crc"], 714.0, None)]


@pytest.mark.parametrize("ids, wall, load", MEASURED_RUNS)
def test_the_estimate_is_within_a_factor_of_two_of_measured_runs(ids, wall, load, tmp_path):
    from iclr26.harness.runner import estimate_seconds, plan
    from iclr26.harness.store import PUBLISHED_PATH

    if not PUBLISHED_PATH.is_file():
        pytest.skip("no published results")
    with Store(tmp_path / "empty.sqlite") as empty, Store(PUBLISHED_PATH, readonly=True) as pub:
        jobs, _ = plan(ids, "quick", None, empty, False)
        if load is None:  # the nominal loaded 2-core machine, as the README and the report say
            est = estimate_seconds(jobs, pub, 2)[0]
        else:
            est = estimate_seconds(jobs, pub, 2, cores=2, load=load)[0]
    assert wall / 2 <= est <= 2 * wall, (ids, est, wall)


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
    def cmdline(proc):  # a short-lived child (the resource tracker, a compiler) may be gone or a zombie
        try:
            return " ".join(proc.cmdline())
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            return ""

    children = []
    while time.time() < deadline and not children:
        children = [c for c in parent.children(recursive=True) if "spawn_main" in cmdline(c)]
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


def test_a_run_that_finds_every_trial_held_says_so_and_fails(tmp_path, capsys):
    """A second `reproduce` whose every trial is claimed by a live run must not end in an all-"not run"
    table with exit 0: it says that another run holds them, names it, and exits non-zero."""
    from iclr26.harness.experiments import folder_fingerprint
    from iclr26.registry import get

    db = tmp_path / "r.sqlite"
    Store(db).close()
    fp = folder_fingerprint(get("cpd_mrdpg"))
    holder = subprocess.Popen([sys.executable, "-c", f"""
import time
from iclr26.harness.store import Store
s = Store({str(db)!r})
assert s.claim("cpd_mrdpg", "smoke", 0, {fp!r}); print("held", flush=True); time.sleep(120)
"""], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        capsys.readouterr()
        assert main(["reproduce", "cpd_mrdpg", "--scale", "smoke", "--jobs", "1", "--store", str(db)]) == 3
        out = capsys.readouterr().out
        assert "nothing was run by this process" in out and f"pid {holder.pid}" in out
        assert "verdicts at scale" not in out  # no table of nothing but "not run"
    finally:
        holder.kill()
        holder.wait()


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


def test_info_and_report_refuse_a_store_that_is_not_there(tmp_path, capsys, monkeypatch):
    """A store the user named that does not exist, is a directory or sits under a file is an error
    for `info` and `report` (exit 2, one line naming it), never a page rendered without their runs."""
    monkeypatch.delenv("ICLR26_STORE", raising=False)
    missing = tmp_path / "typo.sqlite"
    folder = tmp_path / "folder.sqlite"
    folder.mkdir()
    afile = tmp_path / "afile"
    afile.write_text("x")
    for store, words in ((missing, f"no store at {missing}"), (folder, "is a directory"),
                         (afile / "s.sqlite", f"{afile} is a file, not a directory")):
        assert words in _one_line_error(capsys, ["info", "cpd_mrdpg", "--store", str(store)])
        assert words in _one_line_error(capsys, ["report", "--store", str(store), "--out", str(tmp_path / "site")])
    assert not (tmp_path / "site" / "index.html").exists()
    monkeypatch.setenv("ICLR26_STORE", str(missing))  # named through the environment: the same
    assert "$ICLR26_STORE" in _one_line_error(capsys, ["info", "cpd_mrdpg"])
    # the default store, never written yet, is no error: info says so
    monkeypatch.delenv("ICLR26_STORE")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert main(["info", "cpd_mrdpg"]) == 0
    assert "does not exist yet" in capsys.readouterr().out


def test_reproduce_says_where_it_creates_a_new_store(tmp_path, capsys):
    db = tmp_path / "new" / "runs.sqlite"
    assert main(["reproduce", "cpd_mrdpg", "--scale", "smoke", "--jobs", "1", "--store", str(db)]) == 0
    assert f"store: {db} (a new store, created now)" in capsys.readouterr().out
    assert main(["reproduce", "cpd_mrdpg", "--scale", "smoke", "--jobs", "1", "--store", str(db)]) == 0
    out = capsys.readouterr().out
    assert f"store: {db}\n" in out and "created now" not in out


def test_a_read_only_store_error_names_the_file(tmp_path, capsys, monkeypatch):
    db = tmp_path / "ro.sqlite"
    Store(db).close()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(db) and mode == os.W_OK else real(p, mode))
    err = _one_line_error(capsys, ["reproduce", "cpd_mrdpg", "--scale", "smoke", "--store", str(db)])
    assert f"the store {db} is read-only" in err
    from iclr26.harness.store import StoreError, Trial

    with Store(db, readonly=True) as st:  # a write through a read-only connection: the same words
        with pytest.raises(StoreError, match=f"the store {db} is read-only"):
            st.put_trial(Trial("crc", "quick", 0, "fp", "ok", {"metrics": {}}, None, 1.0, 1, "", {}, {}, 2))


def test_the_ray_executor_without_ray_is_one_line(tmp_path, capsys, monkeypatch):
    from iclr26.harness import ray_executor

    monkeypatch.setattr(ray_executor, "ray_available", lambda: False)
    err = _one_line_error(capsys, ["reproduce", "cpd_mrdpg", "--scale", "smoke", "--executor", "ray",
                                   "--store", str(tmp_path / "r.sqlite")])
    assert "needs Ray, which is not installed: pip install 'iclr26[ray]'" in err


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
    """The index shows each paper's quick time with 2 jobs on the loaded 2-core machine, the same
    function (store.wall_seconds) as the estimate of `reproduce`."""
    from iclr26.harness import report
    from iclr26.harness.store import Store, Trial

    runs = [Trial("crc", "quick", s, "fp", "ok", {"metrics": {}}, None, wall, 1, "", {}, {}, 2, None, cpu)
            for s, wall, cpu in ((0, 300.0, 60.0), (1, 50.0, 90.0), (2, 40.0, None))]
    monkeypatch.setattr(report, "select_trials", lambda p, scale, store: (runs if p.id == "crc" and scale == "quick" else [], None))
    with Store(tmp_path / "s.sqlite") as st:
        rec = next(r for r in report.collect(st) if r["id"] == "crc")
    assert rec["runtime_s"] == 390.0 and rec["cpu_s"] is None
    assert rec["core_s"] == 240.0 and rec["two_jobs_s"] == pytest.approx(264 / (4 / 3))
    assert report.time_cell(rec).startswith("3 min ")
    runs[:] = runs[:1]
    with Store(tmp_path / "s.sqlite") as st:
        rec = next(r for r in report.collect(st) if r["id"] == "crc")
    assert rec["two_jobs_s"] == pytest.approx(68)  # one trial cannot be split over two jobs
