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
    assert "of 76 implemented" in out and "mcnemar_degradation" in out


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
    finally:
        con.close()


def test_killed_run_resumes_without_losing_or_repeating(tmp_path):
    db = tmp_path / "r.sqlite"
    cmd = [sys.executable, "-m", "iclr26.cli", "reproduce", "mcnemar_degradation", "--scale", "smoke",
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
        assert {v["claim"] for v in st.verdicts("mcnemar_degradation", "smoke")} >= {"type1_pooled"}


def test_report_renders_site(tmp_path):
    db = tmp_path / "r.sqlite"
    assert main(["reproduce", "mcnemar_degradation", "--scale", "smoke", "--store", str(db), "--jobs", "1"]) == 0
    out = tmp_path / "site"
    assert main(["report", "--out", str(out), "--store", str(db), "--no-readmes"]) == 0
    index = (out / "index.html").read_text()
    assert "mcnemar_degradation" in index and "planned" in index
    page = (out / "papers" / "mcnemar_degradation.html").read_text()
    assert "type1_pooled" in page and ".png" in page
    assert (out / "summary.json").exists() and "| mcnemar_degradation |" in (out / "summary.md").read_text()
