"""Loading a paper's experiment module and checking what it returns."""
from __future__ import annotations

import hashlib
import importlib
import math
import subprocess
from functools import lru_cache
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
    info = result.get("info", {})
    return {"metrics": metrics, "info": info}


#: files of a paper folder that do not change what its experiment measures: the README (the report
#: writes into it) and the claims (they only decide how stored measurements are judged)
NOT_FINGERPRINTED = ("README.md", "claims.toml")


def folder_fingerprint(paper: Paper) -> str:
    """sha256 over the paper folder's files that determine its measurements."""
    h = hashlib.sha256()
    for p in sorted(paper.folder.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts and p.name not in NOT_FINGERPRINTED:
            h.update(str(p.relative_to(paper.folder)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:16]


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
