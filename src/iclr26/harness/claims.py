"""Claims as data: read and validate a paper's ``claims.toml``.

Schema (see docs/adding_a_paper.md): a ``[paper]`` table (title, arxiv, code) and a list of
``[[claims]]``, each naming the metric, the method arm, the baseline arm or a constant
``baseline_value``, the direction, the pairing unit and the test.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from .stats import BINARY_TESTS, DIRECTIONS, TESTS

UNITS = ("seeds", "items")
REQUIRED = ("id", "statement", "paper_value", "source", "metric", "method", "direction", "unit", "test")
OPTIONAL = ("baseline", "baseline_value", "margin", "alpha", "proxy", "requires")


class ClaimsError(ValueError):
    """A claims.toml that does not follow the schema; the message names file, claim and field."""


@dataclass(frozen=True)
class Claim:
    id: str
    statement: str
    paper_value: str
    source: str
    metric: str
    method: str
    direction: str
    unit: str
    test: str
    baseline: str | None = None
    baseline_value: float | None = None
    margin: float = 0.0
    alpha: float = 0.05
    proxy: str = ""
    requires: tuple[str, ...] = ()

    @property
    def arms(self) -> tuple[str, ...]:
        return (self.method,) if self.baseline is None else (self.method, self.baseline)

    @property
    def comparator(self) -> str:
        return self.baseline if self.baseline is not None else f"{self.baseline_value:g}"


@dataclass(frozen=True)
class PaperClaims:
    title: str
    arxiv: str
    code: str
    claims: tuple[Claim, ...]


def _fail(path, where: str, msg: str):
    raise ClaimsError(f"{path}: {where}: {msg}")


def parse_claims(data: dict, path: str | Path = "<claims>") -> PaperClaims:
    """Validate a parsed claims document; raise :class:`ClaimsError` naming what is wrong."""
    paper = data.get("paper")
    if not isinstance(paper, dict):
        _fail(path, "[paper]", "missing table with title, arxiv and code")
    for key in ("title", "arxiv", "code"):
        if not isinstance(paper.get(key), str):
            _fail(path, "[paper]", f"'{key}' must be a string")
    raw = data.get("claims")
    if not isinstance(raw, list) or not raw:
        _fail(path, "[[claims]]", "at least one claim is required")
    unknown_top = set(data) - {"paper", "claims"}
    if unknown_top:
        _fail(path, "top level", f"unknown tables {sorted(unknown_top)}; allowed: paper, claims")
    claims, seen = [], set()
    for i, c in enumerate(raw):
        where = f"claim #{i + 1} ({c.get('id', '?')})"
        missing = [k for k in REQUIRED if k not in c]
        if missing:
            _fail(path, where, f"missing field(s) {missing}")
        extra = set(c) - set(REQUIRED) - set(OPTIONAL)
        if extra:
            _fail(path, where, f"unknown field(s) {sorted(extra)}; allowed: {list(REQUIRED + OPTIONAL)}")
        if c["id"] in seen:
            _fail(path, where, "duplicate claim id")
        seen.add(c["id"])
        if c["test"] not in TESTS:
            _fail(path, where, f"unknown test {c['test']!r}; allowed: {', '.join(TESTS)}")
        if c["direction"] not in DIRECTIONS:
            _fail(path, where, f"bad direction {c['direction']!r}; allowed: {', '.join(DIRECTIONS)}")
        if c["unit"] not in UNITS:
            _fail(path, where, f"bad unit {c['unit']!r}; allowed: {', '.join(UNITS)}")
        has_arm, has_value = "baseline" in c, "baseline_value" in c
        if has_arm == has_value:
            _fail(path, where, "give exactly one of 'baseline' (an arm) or 'baseline_value' (a constant)")
        if c["test"] == "binomial" and has_arm:
            _fail(path, where, "test 'binomial' compares a rate with 'baseline_value', not an arm")
        if c["test"] == "mcnemar" and not has_arm:
            _fail(path, where, "test 'mcnemar' needs a 'baseline' arm")
        if c["test"] in BINARY_TESTS and c["unit"] != "items":
            _fail(path, where, f"test {c['test']!r} pairs 0/1 items: unit must be 'items'")
        margin = float(c.get("margin", 0.0))
        if margin < 0:
            _fail(path, where, f"margin must be >= 0, got {margin}")
        if c["direction"] == "equivalent" and margin <= 0:
            _fail(path, where, "direction 'equivalent' needs a positive 'margin'")
        if c["test"] == "tost" and c["direction"] != "equivalent":
            _fail(path, where, "test 'tost' needs direction 'equivalent'")
        if c["test"] == "mcnemar" and (margin or c["direction"] == "equivalent"):
            _fail(path, where, "test 'mcnemar' supports greater/less with margin 0 only")
        alpha = float(c.get("alpha", 0.05))
        if not 0 < alpha < 1:
            _fail(path, where, f"alpha must lie in (0, 1), got {alpha}")
        for key in ("id", "statement", "source", "metric", "method"):
            if not isinstance(c[key], str) or not c[key]:
                _fail(path, where, f"'{key}' must be a non-empty string")
        claims.append(
            Claim(
                id=c["id"], statement=c["statement"], paper_value=str(c["paper_value"]),
                source=c["source"], metric=c["metric"], method=c["method"],
                direction=c["direction"], unit=c["unit"], test=c["test"],
                baseline=c.get("baseline"),
                baseline_value=float(c["baseline_value"]) if has_value else None,
                margin=margin, alpha=alpha, proxy=str(c.get("proxy", "")),
                requires=tuple(c.get("requires", ())),
            )
        )
    ids = {c.id for c in claims}
    for c in claims:
        bad = [r for r in c.requires if r not in ids or r == c.id]
        if bad or not isinstance(c.requires, tuple) or not all(isinstance(r, str) for r in c.requires):
            _fail(path, f"claim {c.id}", f"'requires' must list other claim ids of this paper; unknown: {bad}")
    return PaperClaims(title=paper["title"], arxiv=paper["arxiv"], code=paper["code"], claims=tuple(claims))


def load_claims(path: str | Path) -> PaperClaims:
    path = Path(path)
    if not path.is_file():
        raise ClaimsError(f"{path}: file not found")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ClaimsError(f"{path}: not valid TOML: {e}") from None
    return parse_claims(data, path)
