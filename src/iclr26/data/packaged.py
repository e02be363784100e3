"""Data files shipped inside the package (``iclr26/data/files/``), each folder with its licence and a
``SOURCE.md`` naming where it comes from.

``hh-rlhf/``: the HH-RLHF harmless-base test split (anthropics/hh-rlhf, MIT).
``heterophilous-graphs/``: six node-classification graphs of yandex-research/heterophilous-graphs
(Platonov et al., ICLR 2023, MIT).
"""
from __future__ import annotations

from pathlib import Path

#: the folder of the shipped data files (inside the installed package)
FILES = Path(__file__).resolve().parent / "files"


def packaged_dir(name: str) -> Path:
    """The shipped folder ``name`` under :data:`FILES` (it need not exist: callers report a missing file)."""
    return FILES / name
