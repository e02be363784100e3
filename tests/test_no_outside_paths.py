"""Nothing under ``src/`` or ``tests/`` reads a path outside the repository.

A user's clone has nothing beside it: data a test or claim check needs ships inside the package
(``iclr26/data/files/``). The scan flags, in every ``.py`` file (comments included):

* the ``shared`` folder beside the project: ``../shared``, ``"shared" / "data"``, ``"..", "shared"``;
* ``Path(__file__)`` chains (``.parents[N]``, ``.parent``) and nested ``os.path.dirname(__file__)``
  calls that climb above the repository root;
* ``os.pardir`` / ``".."`` joined onto such a chain.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SELF = Path(__file__).resolve()

_Q = "[\"']"
#: a path into the ``shared`` folder beside the project, in any of the usual spellings
SHARED = [
    re.compile(r"\.\.[/\\]+shared\b"),                                   # "../shared/...", "..\\shared"
    re.compile(_Q + r"\.\." + _Q + r"\s*,\s*" + _Q + r"shared" + _Q),    # os.path.join(.., "..", "shared")
    re.compile(r"/\s*" + _Q + r"shared" + _Q),                           # ... / "shared"
    re.compile(_Q + r"shared" + _Q + r"\s*/"),                           # "shared" / "data"
    re.compile(_Q + r"shared[/\\](data|tools)\b"),                       # "shared/data/..."
    re.compile(r"/\s*" + _Q + r"\.\." + _Q),                             # ... / ".."
    re.compile(r"\bos\.pardir\b"),
]
#: Path(__file__)[.resolve()|.absolute()] followed by .parents[N] / .parent steps
FILE_CHAIN = re.compile(r"Path\(\s*__file__\s*\)(?:\.(?:resolve|absolute)\(\))?((?:\.parents\[\s*\d+\s*\]|\.parent\b)+)")
STEP = re.compile(r"\.parents\[\s*(\d+)\s*\]|\.parent\b")
DIRNAME = re.compile(r"((?:os\.path\.dirname\(\s*|dirname\(\s*)+)(?:os\.path\.(?:abspath|realpath)\(\s*)?__file__")


def _levels(chain: str) -> int:
    """How many directories ``chain`` climbs from the file (``.parent`` = 1, ``.parents[k]`` = k + 1)."""
    return sum(int(m.group(1)) + 1 if m.group(1) is not None else 1 for m in STEP.finditer(chain))


def outside_reads(text: str, rel: Path) -> list[str]:
    """The places in ``text`` (the source of the file at ``rel``, relative to the repository root)
    that name a path outside the repository, as ``"line N: snippet"``."""
    depth = len(rel.parts)  # climbing `depth` levels from the file reaches the repository root
    hits = []
    for i, line in enumerate(text.splitlines(), 1):
        for pat in SHARED:
            if pat.search(line):
                hits.append(f"line {i}: {line.strip()}")
                break
        else:
            for m in FILE_CHAIN.finditer(line):
                if _levels(m.group(1)) > depth:
                    hits.append(f"line {i}: {line.strip()} (climbs {_levels(m.group(1))} levels, the root is {depth} up)")
            for m in DIRNAME.finditer(line):
                if m.group(1).count("dirname(") > depth:
                    hits.append(f"line {i}: {line.strip()} (climbs above the repository root)")
    return hits


FILES = sorted(p for d in ("src", "tests") for p in (ROOT / d).rglob("*.py")
               if "__pycache__" not in p.parts and p.resolve() != SELF)


def test_the_scan_sees_the_sources():
    assert len(FILES) > 100
    assert ROOT / "src" / "iclr26" / "architectures" / "csnn" / "datasets.py" in FILES


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_path_outside_the_repository(path):
    rel = path.relative_to(ROOT)
    hits = outside_reads(path.read_text(encoding="utf-8"), rel)
    assert not hits, f"{rel} names a path outside the repository:\n" + "\n".join(hits)


# the loaders as they read the data beside the project before it shipped with the package
OLD_CSNN = 'DEFAULT_ROOT = Path(__file__).resolve().parents[4].parent / "shared" / "data" / "heterophilous-graphs"\n'
OLD_MESSAGE = 'f"MIT) are read from ../shared/data/heterophilous-graphs/ beside the project, or from the "\n'


@pytest.mark.parametrize("text", [
    OLD_CSNN, OLD_MESSAGE,
    'ROOT = Path(__file__).resolve().parents[4].parent\n',       # above the root, no "shared" named
    'ROOT = Path(__file__).parents[5]\n',
    'ROOT = Path(__file__).parent.parent.parent.parent.parent.parent\n',
    'ROOT = os.path.join(os.path.dirname(__file__), "..", "shared")\n',
    'd = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))))\n',
    'p = Path("shared/data/hh-rlhf")\n',
    'p = here / ".." / "data"\n',
])
def test_the_scan_catches_a_path_outside(text):
    assert outside_reads(text, Path("src/iclr26/architectures/csnn/datasets.py"))


@pytest.mark.parametrize("text", [
    'PACKAGE_ROOT = Path(__file__).resolve().parents[1]\n',
    'ROOT = Path(__file__).resolve().parents[3] / "README.md"\n',   # src/iclr26/harness -> the repository root
    'FILES = Path(__file__).resolve().parent / "files"\n',
    'body = "<a href=\'../index.html\'>all papers</a>"\n',
    '"""the weights are shared by all layers"""\n',
])
def test_the_scan_lets_paths_inside_the_repository_pass(text):
    assert not outside_reads(text, Path("src/iclr26/harness/report.py"))


def test_the_scan_fails_on_the_loaders_before_the_data_shipped():
    """The first version of the check is the one that would have caught issue 26: the old csnn
    loader (its default root and its error message) is flagged at its real depth."""
    rel = Path("src/iclr26/architectures/csnn/datasets.py")
    hits = outside_reads(OLD_CSNN + OLD_MESSAGE, rel)
    assert len(hits) == 2
