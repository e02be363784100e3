"""The 76 papers as plain data.

Importing this module imports nothing heavy (no torch, transformers or scikit-learn): it reads
``registry.json`` (built from the seed abstract lists by ``tools/build_registry.py``) and looks at
the package folders on disk to tell which papers are implemented.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
#: the files every implemented paper folder holds besides its component module(s)
REQUIRED_FILES = ("__init__.py", "experiment.py", "claims.toml", "README.md")
FEASIBILITY = {
    "A": "faithful method and a meaningful claim check on a CPU",
    "B": "faithful method, claim checked on a smaller proxy",
    "C": "only the core mechanism can be built here",
    "D": "nothing meaningful beyond an evaluation harness",
}


@dataclass(frozen=True)
class Paper:
    id: str
    seed: str
    position: int
    domain: str
    feasibility: str
    summary: str
    abstract: str

    @property
    def module(self) -> str:
        """Dotted module path of the paper's package."""
        return f"iclr26.{self.domain}.{self.id}"

    @property
    def folder(self) -> Path:
        return PACKAGE_DIR / self.domain / self.id

    @property
    def missing_files(self) -> list[str]:
        """Required files the folder lacks (a component module besides them is required too)."""
        if not self.folder.is_dir():
            return list(REQUIRED_FILES) + ["<component>.py"]
        missing = [f for f in REQUIRED_FILES if not (self.folder / f).is_file()]
        components = [p for p in self.folder.glob("*.py") if p.name not in ("__init__.py", "experiment.py")]
        if not components:
            missing.append("<component>.py")
        return missing

    @property
    def status(self) -> str:
        """``implemented`` when the folder holds the whole file set, else ``planned``."""
        return "implemented" if not self.missing_files else "planned"


@lru_cache(maxsize=1)
def papers() -> dict[str, Paper]:
    """All papers keyed by id, in seed order."""
    raw = json.loads((PACKAGE_DIR / "registry.json").read_text())
    return {e["id"]: Paper(**e) for e in raw}


def get(paper_id: str) -> Paper:
    """The paper with this id; a clear error lists close matches otherwise."""
    table = papers()
    if paper_id not in table:
        import difflib

        close = difflib.get_close_matches(paper_id, table, n=3)
        hint = f" Did you mean: {', '.join(close)}?" if close else " Run `iclr26 list` to see all ids."
        raise KeyError(f"unknown paper id {paper_id!r}.{hint}")
    return table[paper_id]


def implemented() -> list[Paper]:
    return [p for p in papers().values() if p.status == "implemented"]
