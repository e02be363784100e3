"""Run trials as Ray tasks, on a Ray cluster or on a local Ray instance.

The same trials, the same timeouts and the same error rows as the local process pool: each trial is
one Ray task that calls :func:`.runner.execute_trial` in a fresh worker process (``max_calls=1``:
clean memory accounting, and the recorded dependencies are only the modules this trial imported),
never retried. The driver collects results with ``ray.wait`` as they finish and hands each one to
``on_done`` at once, so the driver alone writes the store, exactly as with the local pool.

Resources (documented in ``docs/running_on_ray.md``):

* 1 CPU per trial;
* memory: the experiment module's ``RESOURCES = {"memory_gb": ...}`` when it declares one (a number,
  or ``{scale: number}``; read from the source, the module is not imported on the driver); otherwise
  :data:`MODEL_MEMORY_GB` for the model papers, those in :data:`MODEL_DOMAINS` or whose code imports
  ``iclr26.models``; otherwise no reservation. A request larger than every node of the cluster is
  lowered to the largest node, so a trial never waits for a node that does not exist.

Timeouts: the worker tells the driver (through a small actor) when the task begins and when
``run()`` begins; the per-trial timeout counts from the start of ``run()``, the import limit
(:data:`.runner.LOAD_LIMIT`) from the start of the task, so time spent queued for a free CPU or
installing a runtime environment counts against neither. A trial past its limit is cancelled with
``ray.cancel(ref, force=True)`` (its worker is killed) and stored as ``timeout``. A worker that dies
(out of memory, killed, node lost) gives an ``error`` row naming the Ray exception.
"""
from __future__ import annotations

import ast
import json
import math
import os
import time
from pathlib import Path

from ..registry import Paper, get
from .runner import LOAD_LIMIT, Job, execute_trial

#: domains whose papers load a bundled language model
MODEL_DOMAINS = ("decoding", "posttraining")
#: memory reserved for a model paper's trial that declares no RESOURCES
MODEL_MEMORY_GB = 4.0
#: a Ray runtime environment for the run (JSON text, or the path of a JSON or YAML file)
RUNTIME_ENV_VAR = "ICLR26_RAY_RUNTIME_ENV"
#: seconds between two looks at the running trials
POLL_S = 0.25
_GB = 1024 ** 3


# ---------------------------------------------------------------------------- resources

def declared_resources(paper: Paper):
    """The value of ``RESOURCES`` assigned at the top level of the paper's experiment.py, or None."""
    path = paper.folder / "experiment.py"
    try:
        tree = ast.parse(path.read_text(), str(path))
    except (OSError, SyntaxError):
        return None  # the trial itself reports a missing or broken experiment
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == "RESOURCES" for t in targets):
            try:
                return ast.literal_eval(value)
            except ValueError:
                raise ValueError(f"{paper.module}.experiment.RESOURCES must be a literal dict, "
                                 'e.g. {"memory_gb": 6}') from None
    return None


def uses_models(paper: Paper) -> bool:
    """Whether any module of the paper's folder imports ``iclr26.models`` (a bundled language model)."""
    for path in sorted(paper.folder.glob("*.py")):
        try:
            tree = ast.parse(path.read_text(), str(path))
        except (OSError, SyntaxError):
            continue
        package = paper.module.split(".")
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                mod = ".".join(base + ([node.module] if node.module else []))
                names = [mod] + [f"{mod}.{a.name}" for a in node.names]
            else:
                continue
            if any(n == "iclr26.models" or n.startswith("iclr26.models.") for n in names):
                return True
    return False


def memory_gb(paper: Paper, scale: str) -> float:
    """Memory (GB) to reserve for one trial of ``paper`` at ``scale``, by the rule in the module doc."""
    declared = declared_resources(paper)
    default = MODEL_MEMORY_GB if paper.domain in MODEL_DOMAINS or uses_models(paper) else 0.0
    if declared is None:
        return default
    if not isinstance(declared, dict) or set(declared) - {"memory_gb"}:
        raise ValueError(f"{paper.module}.experiment.RESOURCES must be a dict with the single key "
                         f"'memory_gb', got {declared!r}")
    value = declared.get("memory_gb", default)
    if isinstance(value, dict):
        value = value.get(scale, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{paper.module}.experiment.RESOURCES['memory_gb'] must be a number of GB >= 0 "
                         f"(or {{scale: number}}), got {value!r}")
    return float(value)


def task_options(job: Job, largest_node_bytes: float | None = None) -> dict:
    """Ray options of ``job``'s task: 1 CPU, its memory (lowered to the largest node when given)."""
    opts = {"num_cpus": 1}
    need = memory_gb(get(job.paper), job.scale) * _GB
    if largest_node_bytes:
        need = min(need, largest_node_bytes)
    if need > 0:
        opts["memory"] = int(need)
    return opts


# ---------------------------------------------------------------------------- worker side

class _Clock:
    """Collects (key, "begun" | "started") marks from the workers; the driver takes them as they come."""

    def __init__(self):
        self.marks = []

    def mark(self, key: int, what: str) -> None:
        self.marks.append((key, what))

    def take(self) -> list:
        out, self.marks = self.marks, []
        return out


def _trial(paper_id: str, scale: str, seed: int, key: int, clock) -> tuple:
    """The body of one Ray task: one trial, with its start marks sent to the driver."""
    clock.mark.remote(key, "begun")
    return execute_trial(paper_id, scale, seed, started=lambda: clock.mark.remote(key, "started"))


# ---------------------------------------------------------------------------- driver side

MISSING = "the ray executor needs Ray, which is not installed: pip install 'iclr26[ray]' (or use --executor local)"


class RayMissing(RuntimeError):
    """``--executor ray`` without Ray installed."""


def ray_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("ray") is not None


def _ray_leftovers() -> dict:
    """What a local Ray instance may leave behind, as it is before the run starts one."""
    import tempfile

    token = Path.home() / ".ray" / "auth_token"
    temp = Path(os.environ.get("RAY_TMPDIR") or tempfile.gettempdir()) / "ray"
    return {"token": token, "token_existed": token.exists(), "ray_home_existed": token.parent.exists(),
            "temp": temp, "temp_existed": temp.exists(),
            "sessions": {p.name for p in temp.glob("session_*")} if temp.is_dir() else set()}


def _session_dir(ray) -> Path | None:
    try:  # the session folder of the instance just started (not public API: best effort)
        return Path(ray._private.worker._global_node.get_session_dir_path())
    except Exception:  # noqa: BLE001
        return None


def clean_up_local_ray(before: dict) -> list[Path]:
    """Remove what the local Ray instance this run started left behind, and only that: its session
    folder (and the ``session_latest`` link when it points there), the Ray temp folder when the run
    created it and it is now empty, and ``~/.ray/auth_token`` (with ``~/.ray`` when empty) when the
    run created it. Returns the paths removed."""
    import shutil

    removed = []
    temp = before["temp"]
    session = before.get("session")
    new = {p for p in temp.glob("session_*") if p.name not in before["sessions"] and p.name != "session_latest"} \
        if temp.is_dir() else set()
    if session is not None and session.parent == temp:
        new = {p for p in new if p == session} or {session}
    for p in sorted(new):
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    latest = temp / "session_latest"
    if latest.is_symlink() and not latest.exists():
        latest.unlink()
        removed.append(latest)
    if not before["temp_existed"] and temp.is_dir():
        try:
            temp.rmdir()  # only if empty
            removed.append(temp)
        except OSError:
            pass
    if not before["token_existed"] and before["token"].exists():
        # the driver keeps the token it generated for any later local instance of this process, which
        # cannot start once the file is gone: remove it when the process ends
        _TOKENS_TO_REMOVE[before["token"]] = before["ray_home_existed"]
        if not _TOKEN_CLEANUP_REGISTERED:
            import atexit

            atexit.register(remove_created_tokens)
            globals()["_TOKEN_CLEANUP_REGISTERED"] = True
    return removed


#: auth tokens a local Ray instance of this process created (path -> whether ~/.ray existed before)
_TOKENS_TO_REMOVE: dict[Path, bool] = {}
_TOKEN_CLEANUP_REGISTERED = False


def remove_created_tokens() -> list[Path]:
    """Remove the ``~/.ray/auth_token`` files (and ``~/.ray`` when it was created and is empty) that
    this process's local Ray instances created; registered to run when the process exits."""
    removed = []
    for token, home_existed in list(_TOKENS_TO_REMOVE.items()):
        if token.exists():
            token.unlink()
            removed.append(token)
        if not home_existed:
            try:
                token.parent.rmdir()
                removed.append(token.parent)
            except OSError:
                pass
        del _TOKENS_TO_REMOVE[token]
    return removed

def runtime_env_from_environment() -> dict | None:
    """The runtime environment named by ``$ICLR26_RAY_RUNTIME_ENV`` (JSON text or a JSON/YAML file)."""
    raw = os.environ.get(RUNTIME_ENV_VAR, "").strip()
    if not raw:
        return None
    if raw.startswith("{"):
        env = json.loads(raw)
    else:
        text = Path(raw).expanduser().read_text()
        if raw.endswith((".yaml", ".yml")):
            import yaml

            env = yaml.safe_load(text)
        else:
            env = json.loads(text)
    if not isinstance(env, dict):
        raise ValueError(f"${RUNTIME_ENV_VAR} must hold a JSON object (a Ray runtime environment), got {env!r}")
    return env


def _describe(exc: BaseException) -> str:
    text = f"the Ray task failed: {type(exc).__name__}: {exc}"
    if "No module named 'iclr26" in text:
        text += ("\nthe Ray workers cannot import iclr26: give them the package through a runtime environment "
                 "or an image (docs/running_on_ray.md)")
    return text


def _largest_node_memory(ray) -> float | None:
    sizes = [n.get("Resources", {}).get("memory", 0) for n in ray.nodes() if n.get("Alive")]
    return max(sizes) if sizes else None


def ray_execute(jobs: list[Job], n_workers: int, timeout: float | None, on_done, address: str | None = None,
                runtime_env: dict | None = None) -> None:
    """Run ``jobs`` as Ray tasks; ``on_done(job, *outcome)`` in this process as each one finishes.

    ``address``: a Ray cluster (``auto``, ``HOST:PORT``, ``ray://HOST:10001``); when None,
    ``$RAY_ADDRESS``; when neither, a local Ray instance with ``n_workers`` CPUs is started here and
    shut down at the end. On a cluster its CPUs bound how many trials run at once, not ``n_workers``.
    ``runtime_env`` (default: ``$ICLR26_RAY_RUNTIME_ENV``) is how the workers get the package when
    it is not installed on the nodes. An already initialised Ray (a notebook) is used as it is.
    """
    if not jobs:
        return
    try:
        import ray
    except ImportError:
        raise RayMissing(MISSING) from None

    owned, left_before = False, None
    if not ray.is_initialized():
        address = address or os.environ.get("RAY_ADDRESS") or None
        kwargs = {}
        env = runtime_env if runtime_env is not None else runtime_env_from_environment()
        if env:
            kwargs["runtime_env"] = env
        if address in (None, "local"):
            left_before = _ray_leftovers()
            ray.init(address="local", num_cpus=n_workers, include_dashboard=False, **kwargs)
            left_before["session"] = _session_dir(ray)
        else:
            ray.init(address=address, **kwargs)
        owned = True

    live: dict = {}  # ObjectRef -> state of its trial
    clock = None
    try:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)
        clock = ray.remote(_Clock).options(num_cpus=0, scheduling_strategy=here).remote()
        task = ray.remote(max_calls=1, max_retries=0)(_trial)
        largest = _largest_node_memory(ray)
        by_key = {}
        for key, job in enumerate(jobs):
            try:
                opts = task_options(job, largest)
            except ValueError as e:  # a bad RESOURCES declaration is this trial's error, not the run's
                on_done(job, "error", None, str(e), 0.0, 0.0, None)
                continue
            ref = task.options(**opts, name=f"iclr26 {job.paper} {job.scale} seed {job.seed}").remote(
                job.paper, job.scale, job.seed, key, clock)
            live[ref] = by_key[key] = {"job": job, "submitted": time.perf_counter(), "begun": None,
                                       "started": None}

        def finish(ref, s, now):
            try:
                outcome = ray.get(ref)
            except Exception as e:  # noqa: BLE001 - a dead worker, a lost node, a failed runtime env
                outcome = ("error", None, _describe(e), now - (s["started"] or s["begun"] or s["submitted"]),
                           0.0, None)
            on_done(s["job"], *outcome)

        while live:
            ready, _ = ray.wait(list(live), num_returns=len(live), timeout=POLL_S)
            marks = ray.get(clock.take.remote())
            now = time.perf_counter()  # after take(): a slow round trip never eats into a trial's time
            for key, what in marks:
                s = by_key.get(key)
                if s is not None and s[what] is None:
                    s[what] = now
            for ref in ready:
                finish(ref, live.pop(ref), now)
            for ref, s in list(live.items()):
                if s["started"] is None and s["begun"] is not None and now - s["begun"] > LOAD_LIMIT:
                    why, spent = f"the worker did not start run() within {LOAD_LIMIT:g} s", now - s["begun"]
                elif timeout is not None and s["started"] is not None and now - s["started"] > timeout:
                    why, spent = f"trial exceeded the {timeout:g} s timeout", now - s["started"]
                else:
                    continue
                del live[ref]
                if ray.wait([ref], timeout=0)[0]:  # it finished meanwhile: keep its result
                    finish(ref, s, now)
                    continue
                ray.cancel(ref, force=True)
                on_done(s["job"], "timeout", None, why, spent, 0.0, None)
    finally:
        for ref in live:  # interrupted: leave nothing running on the cluster
            try:
                ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001
                pass
        if clock is not None:
            try:
                ray.kill(clock)
            except Exception:  # noqa: BLE001
                pass
        if owned:
            ray.shutdown()
            if left_before is not None:
                clean_up_local_ray(left_before)
