"""Loader for the released PERSPECTRA file (``Perspectra.json`` in caisa-lab/ICLR-2026-Pespectra).

The release carries no licence, so nothing of it ships with this package: :func:`load` reads the copy a
user has, checks it against the schema of the release and names the first field that is missing or
of the wrong type.

Schema (read from the released file, commit 742b411): a JSON list of topics, each
``{"topic": str, "pros": [opinion, ...], "cons": [opinion, ...]}`` with opinion
``{"opinion": str, "top5_matches": [str, ...], "expanded": [str, ...]}``: the Kialo claim, the five
retrieved Reddit comments and the five rewritten arguments. The full release holds 100 topics,
373 pro and 389 con opinions, 5 expansions each (3,810 arguments).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

STANCES = ("pro", "con")
RELEASE = "https://github.com/caisa-lab/ICLR-2026-Pespectra (Perspectra.json)"


class SchemaError(ValueError):
    """The file does not follow the PERSPECTRA schema; the message names the offending field."""


@dataclass(frozen=True)
class Opinion:
    text: str                     # the Kialo opinion
    stance: str                   # "pro" or "con" towards the topic
    expanded: tuple[str, ...]     # the naturalised arguments that voice it
    matches: tuple[str, ...] = ()  # the retrieved Reddit comments (``top5_matches``)


@dataclass(frozen=True)
class Topic:
    text: str
    opinions: tuple[Opinion, ...] = field(default_factory=tuple)

    @property
    def pros(self) -> tuple[Opinion, ...]:
        return tuple(o for o in self.opinions if o.stance == "pro")

    @property
    def cons(self) -> tuple[Opinion, ...]:
        return tuple(o for o in self.opinions if o.stance == "con")


def _str(x, where: str, allow_empty: bool = False) -> str:
    if not isinstance(x, str):
        raise SchemaError(f"{where} must be a string, got {type(x).__name__}")
    if not allow_empty and not x.strip():
        raise SchemaError(f"{where} is an empty string")
    return x


def _strings(x, where: str, required: bool) -> tuple[str, ...]:
    if not isinstance(x, list):
        raise SchemaError(f"{where} must be a list of strings, got {type(x).__name__}")
    if required and not x:
        raise SchemaError(f"{where} is empty: every opinion needs at least one argument")
    return tuple(_str(s, f"{where}[{i}]", allow_empty=not required) for i, s in enumerate(x))


def parse(records) -> list[Topic]:
    """Validate already-decoded PERSPECTRA records (the JSON list) and return :class:`Topic` objects."""
    if not isinstance(records, list):
        raise SchemaError(f"the file must hold a JSON list of topics, got {type(records).__name__}")
    if not records:
        raise SchemaError("the file holds no topics")
    topics = []
    for t, rec in enumerate(records):
        where = f"[{t}]"
        if not isinstance(rec, dict):
            raise SchemaError(f"{where} must be an object with 'topic', 'pros', 'cons', got {type(rec).__name__}")
        for key in ("topic", "pros", "cons"):
            if key not in rec:
                raise SchemaError(f"{where} is missing the field '{key}'")
        text = _str(rec["topic"], f"{where}.topic")
        opinions = []
        for side, stance in (("pros", "pro"), ("cons", "con")):
            if not isinstance(rec[side], list):
                raise SchemaError(f"{where}.{side} must be a list of opinions, got {type(rec[side]).__name__}")
            for j, op in enumerate(rec[side]):
                w = f"{where}.{side}[{j}]"
                if not isinstance(op, dict):
                    raise SchemaError(f"{w} must be an object, got {type(op).__name__}")
                for key in ("opinion", "expanded"):
                    if key not in op:
                        raise SchemaError(f"{w} is missing the field '{key}'")
                matches = _strings(op["top5_matches"], f"{w}.top5_matches", False) if "top5_matches" in op else ()
                opinions.append(Opinion(_str(op["opinion"], f"{w}.opinion"), stance,
                                        _strings(op["expanded"], f"{w}.expanded", True), matches))
        if not opinions:
            raise SchemaError(f"{where} has neither pros nor cons")
        topics.append(Topic(text, tuple(opinions)))
    return topics


def load(path) -> list[Topic]:
    """Read ``Perspectra.json`` from ``path`` (a file, or a folder holding it) and validate it.

    Raises ``FileNotFoundError`` saying where the release is when the file is absent, and
    :class:`SchemaError` (a ``ValueError``) naming the first missing or mistyped field.
    """
    if not isinstance(path, (str, Path)):
        raise TypeError(f"path must be a str or pathlib.Path, got {type(path).__name__}")
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / "Perspectra.json"
    if not p.is_file():
        raise FileNotFoundError(
            f"no PERSPECTRA file at {p}: download Perspectra.json from {RELEASE} (it carries no licence, "
            "so it is not shipped with iclr26) and pass its path")
    try:
        records = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise SchemaError(f"{p} is not valid JSON: {e}") from e
    return parse(records)


def to_records(topics) -> list[dict]:
    """The inverse of :func:`parse`: topics back to the release's JSON structure."""
    out = []
    for t in topics:
        rec = {"topic": t.text, "pros": [], "cons": []}
        for o in t.opinions:
            rec["pros" if o.stance == "pro" else "cons"].append(
                {"opinion": o.text, "top5_matches": list(o.matches), "expanded": list(o.expanded)})
        out.append(rec)
    return out
