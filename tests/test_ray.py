"""The Ray executor: trials as Ray tasks on a local Ray instance with 2 CPUs, stored by the driver."""
import time
from types import SimpleNamespace

import pytest

ray = pytest.importorskip("ray")

from iclr26.harness.ray_executor import (MODEL_MEMORY_GB, RUNTIME_ENV_VAR, memory_gb,  # noqa: E402
                                        runtime_env_from_environment)
from iclr26.harness.runner import Job, plan, run_jobs  # noqa: E402
from iclr26.harness.store import Store  # noqa: E402
from iclr26.registry import get  # noqa: E402

# the tests that start or clean up a local Ray instance (its token and session folders) run on one worker
pytestmark = pytest.mark.xdist_group("ray")


def test_ray_runs_stores_resumes_and_times_out(tmp_path):
    from iclr26.harness import ray_executor

    before = ray_executor._ray_leftovers()
    store = Store(tmp_path / "r.sqlite")
    jobs, skipped = plan(["mcnemar_degradation"], "smoke", 2, store, force=False)
    assert (len(jobs), skipped) == (2, 0)

    t0 = time.perf_counter()
    done = run_jobs(jobs, store, n_workers=2, timeout=600, executor="ray")
    assert not ray.is_initialized(), "the local Ray instance it started must be shut down"
    assert sorted(t.seed for t in done) == [0, 1]
    for job in jobs:
        t = store.get_trial(job.paper, job.scale, job.seed, job.fingerprint)
        assert t is not None and t.status == "ok", t and t.error
        assert "evaluation/mcnemar_degradation/experiment.py" in t.deps["files"]
        assert "torch" in t.deps["packages"]  # the model half ran in the worker
        assert 0 < t.duration_s < time.perf_counter() - t0 and t.peak_mem_mb > 0

    again, skipped = plan(["mcnemar_degradation"], "smoke", 2, store, force=False)
    assert (again, skipped) == ([], 2)
    assert run_jobs(again, store, n_workers=2, executor="ray") == []

    # a trial past its timeout is cancelled and stored as such; a failing trial is an error with its
    # traceback; the timeout counts from run(), not from the worker's start and imports
    fp = jobs[0].fingerprint
    slow = Job("mcnemar_degradation", "smoke", 2, fp)
    broken = Job("sportr", "smoke", 0, "none")  # planned, not implemented: load_experiment raises
    out = {t.paper: t for t in run_jobs([slow, broken], store, n_workers=2, timeout=0.5, executor="ray")}
    assert out["mcnemar_degradation"].status == "timeout" and "0.5 s timeout" in out["mcnemar_degradation"].error
    assert 0.5 <= out["mcnemar_degradation"].duration_s < 30
    assert store.get_trial(slow.paper, slow.scale, slow.seed, slow.fingerprint).status == "timeout"
    assert out["sportr"].status == "error" and "Traceback" in out["sportr"].error
    assert "not implemented" in out["sportr"].error
    assert not ray.is_initialized()
    # the local instances it started left no session folder, temp folder or new auth token behind
    ray_executor.remove_created_tokens()  # what the process does at exit
    after = ray_executor._ray_leftovers()
    assert after["sessions"] - {"session_latest"} <= before["sessions"], after["sessions"] - before["sessions"]
    assert after["token_existed"] == before["token_existed"] and after["temp_existed"] == before["temp_existed"]


def _paper(tmp_path, domain, code):
    folder = tmp_path / domain / "p"
    folder.mkdir(parents=True)
    (folder / "experiment.py").write_text(code)
    return SimpleNamespace(id="p", domain=domain, module=f"iclr26.{domain}.p", folder=folder)


def test_memory_rule(tmp_path):
    assert memory_gb(get("mcnemar_degradation"), "smoke") == MODEL_MEMORY_GB  # imports iclr26.models
    assert memory_gb(get("autodeco"), "quick") == MODEL_MEMORY_GB  # a decoding paper
    assert memory_gb(get("cda"), "quick") == 0.0
    assert memory_gb(_paper(tmp_path / "a", "classical", "from ...models import load\n"), "quick") == MODEL_MEMORY_GB
    declared = _paper(tmp_path / "b", "decoding", 'RESOURCES = {"memory_gb": {"quick": 2, "paper": 12}}\n')
    assert (memory_gb(declared, "quick"), memory_gb(declared, "paper"), memory_gb(declared, "smoke")) == \
        (2.0, 12.0, MODEL_MEMORY_GB)
    assert memory_gb(_paper(tmp_path / "c", "classical", "RESOURCES = {'memory_gb': 1.5}\n"), "quick") == 1.5
    with pytest.raises(ValueError, match="memory_gb"):
        memory_gb(_paper(tmp_path / "d", "classical", "RESOURCES = {'memory_gb': -1}\n"), "quick")
    with pytest.raises(ValueError, match="single key"):
        memory_gb(_paper(tmp_path / "e", "classical", "RESOURCES = {'cpus': 2}\n"), "quick")


def test_runtime_env_from_environment(tmp_path, monkeypatch):
    monkeypatch.delenv(RUNTIME_ENV_VAR, raising=False)
    assert runtime_env_from_environment() is None
    monkeypatch.setenv(RUNTIME_ENV_VAR, '{"py_modules": ["src/iclr26"]}')
    assert runtime_env_from_environment() == {"py_modules": ["src/iclr26"]}
    f = tmp_path / "env.yaml"
    f.write_text("env_vars:\n  ICLR26_CACHE: /tmp/c\n")
    monkeypatch.setenv(RUNTIME_ENV_VAR, str(f))
    assert runtime_env_from_environment() == {"env_vars": {"ICLR26_CACHE": "/tmp/c"}}


def test_the_cleanup_removes_only_what_the_run_started(tmp_path, monkeypatch):
    """What a local Ray instance leaves (its session folder, the temp folder it created, ~/.ray/auth_token)
    goes; what was there before the run (another session, an existing token) stays."""
    from iclr26.harness import ray_executor

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp" / "ray" / "session_old").mkdir(parents=True)
    before = ray_executor._ray_leftovers()
    assert not before["token_existed"] and before["sessions"] == {"session_old"}
    new = tmp_path / "tmp" / "ray" / "session_2026-12-01_10-00-00_1"
    (new / "logs").mkdir(parents=True)
    (tmp_path / "tmp" / "ray" / "session_latest").symlink_to(new)
    token = tmp_path / "home" / ".ray" / "auth_token"
    token.parent.mkdir(parents=True)
    token.write_text("t")
    before["session"] = new
    removed = ray_executor.clean_up_local_ray(before)
    assert not new.exists() and new in removed
    assert token.exists()  # a later local instance of this process needs it: removed at exit
    assert (tmp_path / "tmp" / "ray" / "session_old").is_dir()  # not this run's
    assert not (tmp_path / "tmp" / "ray" / "session_latest").is_symlink()
    assert ray_executor.remove_created_tokens() == [token, token.parent]
    assert not token.exists() and not token.parent.exists()
    # a token that was there before stays
    token.parent.mkdir()
    token.write_text("mine")
    before = ray_executor._ray_leftovers()
    assert ray_executor.clean_up_local_ray(before) == [] and token.read_text() == "mine"
