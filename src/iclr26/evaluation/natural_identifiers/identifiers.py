"""Natural identifiers (NIDs): generators and a finder for structured random strings.

Natural Identifiers for Privacy and Data Audits in Large Language Models (Rossi, Marek, Boenisch,
Dziedzic; ICLR 2026; arXiv 2606.24408; no official code found). Sec. 3: an NID is a string
``v = W(z)`` produced by a *known* generator ``W`` from random bits ``z`` (a cryptographic hash, a
short-URL slug). Because ``W`` is known, any number of *generated identifiers* (GIDs) can be drawn
from the same distribution; they serve as canaries that were never trained on (DP audit) and as an
IID non-member hold-out (dataset inference).

Modelling assumption (stated in the README): the output of a cryptographic hash is uniform over its
alphabet and length, and a short-URL slug is uniform over base-62 strings of its length, so ``W`` is
"IID uniform characters" for every kind below.
"""
from __future__ import annotations

import re
import string

import numpy as np

#: kind -> (alphabet, default length, regex of one occurrence in text)
KINDS: dict[str, tuple[str, int]] = {
    "md5": ("0123456789abcdef", 32),
    "sha1": ("0123456789abcdef", 40),
    "sha256": ("0123456789abcdef", 64),
    "hex": ("0123456789abcdef", 16),
    "short_url": (string.digits + string.ascii_letters, 7),
}


def _check_kind(kind: str) -> tuple[str, int]:
    if kind not in KINDS:
        raise ValueError(f"unknown identifier kind {kind!r}; allowed: {sorted(KINDS)}")
    return KINDS[kind]


def generate_identifiers(kind: str, n: int, rng=None, length: int | None = None) -> list[str]:
    """``n`` IID generated identifiers (GIDs) of ``kind``: ``W(z)`` with fresh random ``z`` (Sec. 3).

    ``length`` overrides the kind's default length (e.g. a 16-character hex prefix of a hash).
    ``rng`` is a numpy Generator or a seed.
    """
    alphabet, default = _check_kind(kind)
    length = default if length is None else length
    if not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    if not isinstance(length, (int, np.integer)) or length < 1:
        raise ValueError(f"length must be a positive integer, got {length!r}")
    rng = np.random.default_rng(rng)
    codes = rng.integers(0, len(alphabet), size=(n, length))
    table = np.array(list(alphabet))
    return ["".join(row) for row in table[codes]]


def _pattern(kind: str, length: int | None) -> re.Pattern:
    alphabet, default = _check_kind(kind)
    length = default if length is None else length
    cls = "0-9a-f" if alphabet == KINDS["hex"][0] else "0-9A-Za-z"
    # the identifier must not be part of a longer run of identifier-like characters
    return re.compile(rf"(?<![0-9A-Za-z])[{cls}]{{{length}}}(?![0-9A-Za-z])")


def find_nids(texts, kinds=("md5", "sha1"), length: int | None = None) -> list[tuple[int, str, str]]:
    """The NIDs occurring in ``texts``: a list of ``(text_index, kind, identifier)`` in text order.

    A kind's occurrence is a maximal run of its alphabet of exactly its length (``length`` overrides
    the defaults). Kinds are tried in the given order and a span found by an earlier kind is not
    reported again. Short-URL slugs are only recognised after ``/`` (a bare 7-character word is not an
    identifier).
    """
    if isinstance(texts, str):
        raise TypeError("texts must be a sequence of strings, not one string")
    kinds = (kinds,) if isinstance(kinds, str) else tuple(kinds)
    if not kinds:
        raise ValueError(f"kinds must name at least one kind; allowed: {sorted(KINDS)}")
    patterns = [(k, _pattern(k, length)) for k in kinds]
    found = []
    for i, text in enumerate(texts):
        spans: list[tuple[int, int, str, str]] = []
        for kind, pat in patterns:
            for m in pat.finditer(text):
                if kind == "short_url" and (m.start() == 0 or text[m.start() - 1] != "/"):
                    continue
                if any(s < m.end() and m.start() < e for s, e, _, _ in spans):
                    continue
                spans.append((m.start(), m.end(), kind, m.group()))
        found.extend((i, kind, ident) for _, _, kind, ident in sorted(spans))
    return found
