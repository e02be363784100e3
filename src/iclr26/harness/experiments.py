"""Loading a paper's experiment module and checking what it returns."""
from __future__ import annotations

import ast
import hashlib
import importlib
import math
import subprocess
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path

from ..registry import Paper, get
from .claims import PaperClaims, load_claims

SCALES = ("smoke", "quick", "paper")
DEFAULT_SEEDS = {"smoke": 1, "quick": 3, "paper": 3}


class MeasurementError(ValueError):
    """An experiment returned measurements that do not follow the protocol."""


def load_experiment(paper: Paper):
    """Import ``iclr26.<domain>.<id>.experiment`` and check it defines SCALES and run()."""
    if paper.status != "implemented":
        raise RuntimeError(
            f"paper {paper.id!r} is not implemented yet (missing: {', '.join(paper.missing_files)})"
        )
    mod = importlib.import_module(f"{paper.module}.experiment")
    if not callable(getattr(mod, "run", None)):
        raise MeasurementError(f"{paper.module}.experiment must define run(scale, seed)")
    scales = getattr(mod, "SCALES", None)
    if not isinstance(scales, dict) or not {"smoke", "quick"} <= set(scales):
        raise MeasurementError(f"{paper.module}.experiment.SCALES must be a dict with 'smoke' and 'quick'")
    return mod


def seeds_for(paper: Paper, scale: str) -> int:
    mod = load_experiment(paper)
    return int(getattr(mod, "SEEDS", {}).get(scale, DEFAULT_SEEDS[scale]))


def claims_for(paper: Paper | str) -> PaperClaims:
    paper = get(paper) if isinstance(paper, str) else paper
    return load_claims(paper.folder / "claims.toml")


def check_measurements(result) -> dict:
    """Validate and normalise ``run()``'s return value; floats only, finite, paired lengths."""
    if not isinstance(result, dict) or not isinstance(result.get("metrics"), dict):
        raise MeasurementError("run() must return a dict with a 'metrics' dict: {metric: {arm: value(s)}}")
    extra = set(result) - {"metrics", "info"}
    if extra:
        raise MeasurementError(f"run() returned unknown keys {sorted(extra)}; allowed: metrics, info")
    metrics = {}
    for metric, arms in result["metrics"].items():
        if not isinstance(arms, dict) or not arms:
            raise MeasurementError(f"metric {metric!r} must map arm names to values")
        out, length = {}, None
        for arm, value in arms.items():
            if hasattr(value, "tolist"):  # numpy arrays and scalars, torch tensors
                value = value.tolist()
            if isinstance(value, (list, tuple)):
                vals = [float(v) for v in value]
                if not vals:
                    raise MeasurementError(f"metric {metric!r}, arm {arm!r}: empty list of items")
                if length is not None and len(vals) != length:
                    raise MeasurementError(
                        f"metric {metric!r}: arms have different numbers of items ({length} vs {len(vals)}); "
                        "per-item values must be paired by position"
                    )
                length = len(vals)
            else:
                vals = float(value)
            bad = [v for v in (vals if isinstance(vals, list) else [vals]) if not math.isfinite(v)]
            if bad:
                raise MeasurementError(f"metric {metric!r}, arm {arm!r}: non-finite value(s) {bad[:3]}")
            out[str(arm)] = vals
        metrics[str(metric)] = out
    info = _json_safe(result.get("info", {}), "info")
    if not isinstance(info, dict):
        raise MeasurementError("run()'s 'info' must be a dict")
    return {"metrics": metrics, "info": info}


def _json_safe(value, where: str):
    """``value`` as plain JSON data (numpy and torch arrays become lists, non-finite floats None);
    MeasurementError names the key whose value cannot be stored."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, (str, int, float, bool)) and not hasattr(k, "item"):
                raise MeasurementError(f"{where}: key {k!r} of type {type(k).__name__} cannot be stored; use strings")
            key = str(k.item() if hasattr(k, "item") else k)
            out[key] = _json_safe(v, f"{where}[{key!r}]")
        return out
    if isinstance(value, (list, tuple)):
        return [_json_safe(v, f"{where}[{i}]") for i, v in enumerate(value)]
    raise MeasurementError(f"{where}: a {type(value).__name__} cannot be stored as JSON; "
                           "allowed: numbers, strings, bools, None, lists, dicts and numpy/torch arrays")


#: files of a paper folder that do not change what its experiment measures: the README (the report
#: writes into it) and the claims (they only decide how stored measurements are judged)
NOT_FINGERPRINTED = ("README.md", "claims.toml")


def _without_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return tree


@lru_cache(maxsize=4096)
def code_bytes(name: str, data: bytes) -> bytes:
    """What of a file can change a measurement: for Python source the code without its docstrings
    and comments (``ast.unparse`` of the syntax tree with docstrings dropped), so that correcting a
    docstring, a comment or the layout does not mark trials stale; any other file (or source that
    does not parse) as it is. Memoised on the file's name and contents (a report fingerprints each
    folder once per claim and scale)."""
    if name.endswith(".py"):
        try:
            return ast.unparse(_without_docstrings(ast.parse(data.decode("utf-8")))).encode()
        except (SyntaxError, UnicodeDecodeError, ValueError, RecursionError):
            pass
    return data


def folder_fingerprint_of(files: dict[str, bytes], code: bool = True) -> str:
    """The fingerprint of a paper folder given its files (path relative to the folder -> bytes): over
    their code (:func:`code_bytes`), or with ``code=False`` over their bytes, as trials recorded it
    before code hashing (for migrating them)."""
    h = hashlib.sha256()
    for rel in sorted(files):
        if Path(rel).name in NOT_FINGERPRINTED or "__pycache__" in Path(rel).parts:
            continue
        h.update(rel.encode())
        h.update(code_bytes(rel, files[rel]) if code else files[rel])
    return h.hexdigest()[:16]


def legacy_folder_fingerprint_of(files: dict[str, bytes]) -> str:
    """The byte fingerprint trials recorded before code hashing (:func:`folder_fingerprint_of`)."""
    return folder_fingerprint_of(files, code=False)


def folder_fingerprint(paper: Paper) -> str:
    """sha256 over the code of the paper folder's files that determine its measurements (see
    :func:`code_bytes`: docstrings, comments and layout do not count)."""
    files = {str(p.relative_to(paper.folder)): p.read_bytes() for p in paper.folder.rglob("*")
             if p.is_file() and "__pycache__" not in p.parts and p.name not in NOT_FINGERPRINTED}
    return folder_fingerprint_of(files)


@lru_cache(maxsize=1)
def git_commit() -> str:
    """The checkout's commit (with ``+dirty`` when it has uncommitted changes), or ''."""
    root = Path(__file__).resolve().parents[3]
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src"], cwd=root,
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    return f"{sha}+dirty" if sha and dirty else sha


#: the package's source root: dependencies are recorded relative to it
PACKAGE_ROOT = Path(__file__).resolve().parents[1]
#: modules that judge or drive trials but never change what an experiment measures
NOT_MEASURED = ("iclr26.harness", "iclr26.cli")
#: packages whose version can change the numbers an experiment produces
NUMERIC_PACKAGES = {"numpy": "numpy", "scipy": "scipy", "torch": "torch", "transformers": "transformers",
                    "sklearn": "scikit-learn"}


@lru_cache(maxsize=4096)
def _sha(path: str, mtime_ns: int, size: int, code: bool) -> str:
    data = Path(path).read_bytes()
    return hashlib.sha256(code_bytes(path, data) if code else data).hexdigest()[:16]


def file_hash(path: Path) -> str | None:
    """sha256 (16 hex digits) of a file's bytes, or None when it no longer exists."""
    try:
        st = path.stat()
    except OSError:
        return None
    return _sha(str(path), st.st_mtime_ns, st.st_size, False)


def code_hash(path: Path) -> str | None:
    """sha256 (16 hex digits) of a file's code (:func:`code_bytes`), or None when it no longer exists."""
    try:
        st = path.stat()
    except OSError:
        return None
    return _sha(str(path), st.st_mtime_ns, st.st_size, True)


def code_hash_of(name: str, data: bytes) -> str:
    return hashlib.sha256(code_bytes(name, data)).hexdigest()[:16]


def measured_dependencies(modules: dict | None = None) -> dict:
    """What the finished experiment depended on: every project module it imported, hashed, and the
    versions of the number-changing packages it imported. Each module is recorded by the hash of its
    code (``code``: docstrings and comments do not count) and of its bytes (``files``).

    Called by the worker after ``run()``, so imports made inside functions count too. The harness and
    the CLI are left out: they judge and drive trials, they do not measure.
    """
    modules = sys.modules if modules is None else modules
    files, code, packages = {}, {}, {}
    for name, mod in list(modules.items()):
        if name.split(".")[0] in NUMERIC_PACKAGES and "." not in name:
            try:
                packages[NUMERIC_PACKAGES[name]] = metadata.version(NUMERIC_PACKAGES[name])
            except metadata.PackageNotFoundError:
                pass
        if not (name == "iclr26" or name.startswith("iclr26.")) or name.startswith(NOT_MEASURED):
            continue
        path = getattr(mod, "__file__", None)
        if not path:
            continue
        path = Path(path).resolve()
        try:
            rel = path.relative_to(PACKAGE_ROOT)
        except ValueError:
            continue
        h, c = file_hash(path), code_hash(path)
        if h is not None and c is not None:
            files[str(rel)], code[str(rel)] = h, c
    return {"files": dict(sorted(files.items())), "code": dict(sorted(code.items())),
            "packages": dict(sorted(packages.items()))}


@lru_cache(maxsize=64)
def _installed_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def staleness(trial, fingerprint: str | None = None) -> str | None:
    """Why a stored trial no longer measures the current code and packages, or None if it does.

    Stale when the paper folder changed (``fingerprint`` is the folder's current one), when a project
    module the trial imported changed or vanished, when a number-changing package it imported has
    another version now, or when the trial predates the recording of its dependencies.
    """
    reasons = []
    if fingerprint is not None and trial.fingerprint != fingerprint:
        reasons.append("the paper folder changed")
    deps = getattr(trial, "deps", None)
    if not deps:
        reasons.append("its dependencies were not recorded")
        return "; ".join(reasons)
    code = deps.get("code", {})  # trials recorded before code hashing have byte hashes only
    changed = [rel for rel, h in deps.get("files", {}).items()
               if (code_hash(PACKAGE_ROOT / rel) != code[rel] if rel in code else file_hash(PACKAGE_ROOT / rel) != h)]
    if changed:
        shown = ", ".join(changed[:4]) + (f" and {len(changed) - 4} more" if len(changed) > 4 else "")
        reasons.append(f"changed since: {shown}")
    moved = [f"{dist} {v} -> {_installed_version(dist) or 'absent'}"
             for dist, v in deps.get("packages", {}).items() if _installed_version(dist) != v]
    if moved:
        reasons.append("package versions: " + ", ".join(moved))
    return "; ".join(reasons) or None
