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
CLUSTERS = ("seed", "none")
FLOOR_SIDES = ("above", "below")
REQUIRED = ("id", "statement", "paper_value", "source", "metric", "method", "direction", "unit", "test",
            "paper_effect")
OPTIONAL = ("baseline", "baseline_value", "margin", "alpha", "proxy", "requires", "effect_source",
            "floor", "floor_side", "floor_reason", "cluster", "unit_reason", "exploratory",
            "premise", "premises", "baseline_floor", "baseline_floor_side", "baseline_floor_reason",
            "baseline_floor_expected")


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
    paper_effect: float = 0.0
    effect_source: str = ""
    floor: float | None = None
    floor_side: str | None = None
    floor_reason: str = ""
    cluster: str | None = None
    unit_reason: str = ""
    exploratory: bool = False
    #: this claim establishes what others rest on ("the method arm learns the task", "the baseline is
    #: competent"); it is counted apart from the paper's claims
    premise: bool = False
    #: premise claims this claim rests on: it is inconclusive whenever one of them is not reproduced
    premises: tuple[str, ...] = ()
    #: the comparator's trivial level (chance, a random walk): a "reproduced" against a comparator that
    #: does not clear it is inconclusive, unless ``baseline_floor_expected`` (that failure is the claim)
    baseline_floor: float | None = None
    baseline_floor_side: str | None = None
    baseline_floor_reason: str = ""
    baseline_floor_expected: bool = False

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
        effect = _number(path, where, c, "paper_effect")
        direction = c["direction"]
        if direction == "greater" and not effect > -margin:
            _fail(path, where, f"paper_effect {effect:g} lies outside the claimed region (method - comparator > "
                  f"{-margin:g}): it is the paper's effect as method - comparator in the metric's units")
        if direction == "less" and not effect < margin:
            _fail(path, where, f"paper_effect {effect:g} lies outside the claimed region (method - comparator < "
                  f"{margin:g}): it is the paper's effect as method - comparator in the metric's units")
        if direction == "equivalent" and not abs(effect) < margin:
            _fail(path, where, f"paper_effect {effect:g} lies outside the equivalence margin +-{margin:g}")
        floor, floor_side = None, None
        if "floor" in c:
            floor = _number(path, where, c, "floor")
            floor_side = c.get("floor_side") or {"greater": "above", "less": "below"}.get(direction)
            if floor_side is None:
                _fail(path, where, "an 'equivalent' claim with a 'floor' must say 'floor_side' (above or below)")
            if floor_side not in FLOOR_SIDES:
                _fail(path, where, f"bad floor_side {floor_side!r}; allowed: {', '.join(FLOOR_SIDES)}")
        elif "floor_side" in c or "floor_reason" in c:
            _fail(path, where, "'floor_side' / 'floor_reason' need a 'floor'")
        bfloor, bfloor_side = None, None
        if "baseline_floor" in c:
            if not has_arm:
                _fail(path, where, "'baseline_floor' needs a 'baseline' arm (a constant comparator has no level to check)")
            bfloor = _number(path, where, c, "baseline_floor")
            bfloor_side = c.get("baseline_floor_side") or floor_side or {"greater": "above", "less": "below"}.get(direction)
            if bfloor_side is None:
                _fail(path, where, "an 'equivalent' claim with a 'baseline_floor' must say 'baseline_floor_side' "
                      "(above or below)")
            if bfloor_side not in FLOOR_SIDES:
                _fail(path, where, f"bad baseline_floor_side {bfloor_side!r}; allowed: {', '.join(FLOOR_SIDES)}")
            if not str(c.get("baseline_floor_reason", "")).strip():
                _fail(path, where, "a 'baseline_floor' needs a 'baseline_floor_reason' (what the level is: chance, a random walk)")
        elif any(k in c for k in ("baseline_floor_side", "baseline_floor_reason", "baseline_floor_expected")):
            _fail(path, where, "'baseline_floor_side' / 'baseline_floor_reason' / 'baseline_floor_expected' need a 'baseline_floor'")
        for key in ("exploratory", "premise", "baseline_floor_expected"):
            if not isinstance(c.get(key, False), bool):
                _fail(path, where, f"'{key}' must be true or false")
        premises = c.get("premises", [])
        if not isinstance(premises, list) or not all(isinstance(r, str) for r in premises):
            _fail(path, where, "'premises' must be a list of claim ids")
        cluster = c.get("cluster")
        if c["unit"] == "seeds":
            if cluster is not None:
                _fail(path, where, "'cluster' applies to unit 'items' only (seed-paired claims have one value per seed)")
        else:
            cluster = "seed" if cluster is None else cluster
            if cluster not in CLUSTERS:
                _fail(path, where, f"bad cluster {cluster!r}; allowed: {', '.join(CLUSTERS)}")
            if cluster == "none" and not str(c.get("unit_reason", "")).strip():
                _fail(path, where, "cluster 'none' treats every item as an independent draw: say why in 'unit_reason'")
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
                requires=tuple(c.get("requires", ())), paper_effect=effect,
                effect_source=str(c.get("effect_source", "")), floor=floor, floor_side=floor_side,
                floor_reason=str(c.get("floor_reason", "")), cluster=cluster,
                unit_reason=str(c.get("unit_reason", "")), exploratory=bool(c.get("exploratory", False)),
                premise=bool(c.get("premise", False)), premises=tuple(premises),
                baseline_floor=bfloor, baseline_floor_side=bfloor_side,
                baseline_floor_reason=str(c.get("baseline_floor_reason", "")),
                baseline_floor_expected=bool(c.get("baseline_floor_expected", False)),
            )
        )
    ids = {c.id for c in claims}
    for c in claims:
        bad = [r for r in c.requires if r not in ids or r == c.id]
        if bad or not isinstance(c.requires, tuple) or not all(isinstance(r, str) for r in c.requires):
            _fail(path, f"claim {c.id}", f"'requires' must list other claim ids of this paper; unknown: {bad}")
    by_id = {c.id: c for c in claims}
    for c in claims:
        bad = [r for r in c.premises if r not in ids or r == c.id]
        if bad:
            _fail(path, f"claim {c.id}", f"'premises' must list other claim ids of this paper; unknown: {bad}")
        not_premise = [r for r in c.premises if not by_id[r].premise]
        if not_premise:
            _fail(path, f"claim {c.id}", f"'premises' lists {not_premise}, which are not declared 'premise = true'")
    _check_acyclic(path, claims)
    return PaperClaims(title=paper["title"], arxiv=paper["arxiv"], code=paper["code"], claims=tuple(claims))


def _number(path, where: str, c: dict, key: str) -> float:
    v = c[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v in (float("inf"), float("-inf")):
        _fail(path, where, f"'{key}' must be a finite number in the metric's units, got {v!r}")
    return float(v)


def _check_acyclic(path, claims: list[Claim]) -> None:
    """'requires' and 'premises' together must form no cycle: A requires B requires A can never be decided."""
    graph = {c.id: tuple(c.requires) + tuple(c.premises) for c in claims}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, trail: list[str]) -> None:
        if state.get(node) == 2:
            return
        if state.get(node) == 1:
            cycle = trail[trail.index(node):] + [node]
            _fail(path, f"claim {node}", f"'requires' / 'premises' form a cycle: {' -> '.join(cycle)}")
        state[node] = 1
        for r in graph[node]:
            visit(r, trail + [node])
        state[node] = 2

    for c in claims:
        visit(c.id, [])


def load_claims(path: str | Path) -> PaperClaims:
    path = Path(path)
    if not path.is_file():
        raise ClaimsError(f"{path}: file not found")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ClaimsError(f"{path}: not valid TOML: {e}") from None
    return parse_claims(data, path)
