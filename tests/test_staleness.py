"""Honest staleness: a verdict is current only while everything its trials measured is unchanged:
the paper folder, every project module the experiment imported, and the number-changing packages."""
import shutil

import pytest

from iclr26.harness import experiments
from iclr26.harness.experiments import measured_dependencies, staleness
from iclr26.harness.runner import plan, run_jobs
from iclr26.harness.store import Store, Trial


@pytest.fixture(scope="module")
def smoke_trial(tmp_path_factory):
    """One real smoke trial of cpd_mrdpg, run by a worker process and stored."""
    db = tmp_path_factory.mktemp("stale") / "s.sqlite"
    with Store(db) as store:
        jobs, _ = plan(["cpd_mrdpg"], "smoke", 1, store, force=True)
        (trial,) = run_jobs(jobs, store, n_workers=1)
        assert trial.status == "ok", trial.error
        stored = store.get_trial(trial.paper, trial.scale, trial.seed, trial.fingerprint)
    return db, stored


def test_worker_records_what_the_experiment_imported(smoke_trial):
    _, t = smoke_trial
    files = t.deps["files"]
    assert "classical/cpd_mrdpg/experiment.py" in files
    assert "common/seeding.py" in files  # imported from outside the paper folder
    assert not any(f.startswith("harness/") for f in files)  # the harness judges, it does not measure
    assert "numpy" in t.deps["packages"]
    assert staleness(t, t.fingerprint) is None


def test_editing_a_shared_module_makes_the_trial_stale(smoke_trial, tmp_path, monkeypatch):
    _, t = smoke_trial
    copy = tmp_path / "iclr26"
    shutil.copytree(experiments.PACKAGE_ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(experiments, "PACKAGE_ROOT", copy)
    assert staleness(t, t.fingerprint) is None
    (copy / "harness" / "stats.py").write_text("# edited\n")  # judging code: verdicts are re-judged, not stale
    assert staleness(t, t.fingerprint) is None
    seeding = copy / "common" / "seeding.py"
    seeding.write_text(seeding.read_text() + "\nEDITED = True\n")
    assert "changed since: common/seeding.py" in staleness(t, t.fingerprint)
    seeding.unlink()
    assert "common/seeding.py" in staleness(t, t.fingerprint)


def test_a_package_upgrade_or_a_folder_change_makes_the_trial_stale(smoke_trial):
    _, t = smoke_trial
    moved = Trial(**{**t.__dict__, "deps": {**t.deps, "packages": {**t.deps["packages"], "numpy": "0.0.1"}}})
    assert "package versions: numpy 0.0.1 ->" in staleness(moved, t.fingerprint)
    assert "the paper folder changed" in staleness(t, "another")
    old = Trial(**{**t.__dict__, "deps": None})
    assert "not recorded" in staleness(old, t.fingerprint)


def test_stale_trials_are_rerun_and_their_verdicts_marked(smoke_trial, tmp_path, monkeypatch):
    from iclr26.harness.verdicts import judge_paper

    db, t = smoke_trial
    with Store(db) as store:
        assert plan(["cpd_mrdpg"], "smoke", 1, store, force=False)[0] == []  # current: skipped
        assert all(v.stale is None for v in judge_paper("cpd_mrdpg", "smoke", store, save=False))
        copy = tmp_path / "iclr26"
        shutil.copytree(experiments.PACKAGE_ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
        monkeypatch.setattr(experiments, "PACKAGE_ROOT", copy)
        (copy / "common" / "seeding.py").write_text("# edited\n")
        jobs, skipped = plan(["cpd_mrdpg"], "smoke", 1, store, force=False)
        assert len(jobs) == 1 and skipped == 0
        vs = judge_paper("cpd_mrdpg", "smoke", store, save=False)
        assert vs and all("common/seeding.py" in v.stale for v in vs)


def test_measured_dependencies_skip_foreign_and_fileless_modules():
    import types

    fake = {"iclr26.x": types.ModuleType("iclr26.x"), "json": __import__("json"),
            "iclr26.common.seeding": __import__("iclr26.common.seeding", fromlist=["x"])}
    deps = measured_dependencies(fake)
    assert list(deps["files"]) == ["common/seeding.py"] and deps["packages"] == {}


def test_worker_records_the_cpu_seconds_of_run(smoke_trial):
    """CPU seconds are measured around run() in the worker: positive, and at most what the machine's
    cores could spend in the trial's wall time."""
    import os

    _, t = smoke_trial
    assert t.cpu_s is not None and t.cpu_s > 0
    assert t.cpu_s <= t.duration_s * (os.cpu_count() or 1) + 0.5


def test_docstrings_comments_and_layout_do_not_count_as_code():
    from iclr26.harness.experiments import code_bytes

    src = b'"""Module doc."""\nimport math\n\n\ndef f(x):\n    """Doc of f."""\n    # a comment\n    return math.exp(x)  # why\n'
    prose = b'"""Another module doc."""\nimport math\n\ndef f(x):\n    """Reworded."""\n    return math.exp( x )\n'
    code = b'"""Module doc."""\nimport math\n\n\ndef f(x):\n    """Doc of f."""\n    return math.exp(-x)\n'
    assert code_bytes("m.py", src) == code_bytes("m.py", prose)
    assert code_bytes("m.py", src) != code_bytes("m.py", code)
    only_doc = b'def g():\n    """Only a docstring."""\n'
    assert code_bytes("m.py", only_doc) == code_bytes("m.py", b"def g():\n    pass\n")
    # a string that is not a docstring is code; other files and unparsable source count byte for byte
    assert code_bytes("m.py", b'x = 1\n"not a docstring"\n') != code_bytes("m.py", b"x = 1\n")
    assert code_bytes("data.json", b'{"a": 1}') == b'{"a": 1}'
    assert code_bytes("bad.py", b"def (:\n") == b"def (:\n"


def test_editing_a_docstring_keeps_the_trial_current_and_editing_code_does_not(smoke_trial, tmp_path, monkeypatch):
    _, t = smoke_trial
    assert "code" in t.deps and t.deps["code"]["common/seeding.py"]
    copy = tmp_path / "iclr26"
    shutil.copytree(experiments.PACKAGE_ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(experiments, "PACKAGE_ROOT", copy)
    seeding = copy / "common" / "seeding.py"
    text = seeding.read_text()
    seeding.write_text("# a new comment\n" + text.replace('"""', '"""Reworded. ', 1))
    assert staleness(t, t.fingerprint) is None
    seeding.write_text(text + "\nEXTRA = 1\n")
    assert "changed since: common/seeding.py" in staleness(t, t.fingerprint)


def test_a_legacy_byte_hashed_trial_is_migrated_when_its_files_are_proven_identical(smoke_trial, tmp_path):
    import importlib.util
    import json

    from iclr26.harness.experiments import folder_fingerprint, legacy_folder_fingerprint_of
    from iclr26.registry import get

    spec = importlib.util.spec_from_file_location(
        "migrate_code_hashes", experiments.PACKAGE_ROOT.parents[1] / "tools" / "migrate_code_hashes.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    _, t = smoke_trial
    paper = get("cpd_mrdpg")
    files = {str(p.relative_to(paper.folder)): p.read_bytes() for p in paper.folder.rglob("*")
             if p.is_file() and "__pycache__" not in p.parts}
    legacy_fp = legacy_folder_fingerprint_of(files)
    assert legacy_fp != folder_fingerprint(paper)
    wrong = dict(t.deps["files"], **{"common/seeding.py": "0" * 16})  # a module that no longer matches
    legacy = Trial(**{**t.__dict__, "fingerprint": legacy_fp, "deps": {"files": t.deps["files"], "packages": t.deps["packages"]}})
    other = Trial(**{**t.__dict__, "seed": 7, "fingerprint": legacy_fp, "deps": {"files": wrong, "packages": t.deps["packages"]}})
    db = tmp_path / "legacy.sqlite"
    with Store(db) as st:
        st.put_trial(legacy)
        st.put_trial(other)
    assert staleness(legacy, folder_fingerprint(paper))  # before: the folder fingerprint no longer matches
    counts = tool.migrate(db)
    assert counts["folder_migrated"] == 2 and counts["modules_kept"] >= 1
    with Store(db, readonly=True) as st:
        moved = st.get_trial("cpd_mrdpg", t.scale, t.seed, folder_fingerprint(paper))
        moved7 = st.get_trial("cpd_mrdpg", t.scale, 7, folder_fingerprint(paper))
    assert moved is not None and staleness(moved, folder_fingerprint(paper)) is None
    assert moved.measurements == json.loads(json.dumps(t.measurements))
    assert "common/seeding.py" not in moved7.deps["code"]  # unproven: keeps its byte hash and is judged by it
    assert "changed since: common/seeding.py" in staleness(moved7, folder_fingerprint(paper))
