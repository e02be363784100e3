"""Synthetic sequence tasks for small attention models, as ``(x, y)`` token tensors.

Every generator takes a ``numpy.random.Generator`` and returns ``x`` (inputs, ``int64``,
``(n, T)``) and ``y`` (targets aligned with ``x``: ``y[:, t]`` is what the model must predict
after reading ``x[:, :t+1]``; ``-100`` marks positions that are not scored), so that
``iclr26.common.tiny_attention.lm_loss`` and ``masked_accuracy`` apply directly.

- :func:`mqar`: multi-query associative recall (Arora et al. 2024, "Zoology", Sec. 3).
- :func:`copying`: copy a random string after a separator (Jelassi et al. 2024).
- :func:`state_tracking`: running product in a finite group, tagged at every position
  (parity = S2 = Z2, cyclic Z_m, the symmetric group S3; Merrill et al. 2024, Grazzi et al. 2025).
- :func:`passkey`: retrieve a digit key hidden in filler text of any length (Mohtashami &
  Jaggi 2023); the filler is a fixed order-2 Markov "language" so it also gives an LM loss.
"""
from __future__ import annotations

import itertools

import numpy as np
import torch

IGNORE = -100


def _check_rng(rng):
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")


def _positive(**kw):
    for name, v in kw.items():
        if int(v) != v or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")


def _tensors(x, y):
    return torch.as_tensor(np.asarray(x), dtype=torch.long), torch.as_tensor(np.asarray(y), dtype=torch.long)


# ------------------------------------------------------------------------------------------ MQAR
def mqar(n: int, seq_len: int, n_pairs: int, vocab_size: int, rng: np.random.Generator):
    """Multi-query associative recall.

    The first ``2 * n_pairs`` tokens are key-value pairs ``k1 v1 k2 v2 ...`` (keys distinct, from
    ``[1, vocab/2)``; values from ``[vocab/2, vocab)``). The rest of the sequence is padding
    (token 0) in which every key reappears once, in random order at random positions; the target
    at a re-appearing key is its value. Token 0 is reserved for padding.
    """
    _check_rng(rng)
    _positive(n=n, seq_len=seq_len, n_pairs=n_pairs, vocab_size=vocab_size)
    half = vocab_size // 2
    if half - 1 < n_pairs:
        raise ValueError(f"vocab_size={vocab_size} holds only {half - 1} distinct keys, need n_pairs={n_pairs}")
    if seq_len < 3 * n_pairs:
        raise ValueError(f"seq_len must be >= 3 * n_pairs = {3 * n_pairs}, got {seq_len}")
    keys = np.argsort(rng.random((n, half - 1)), axis=1)[:, :n_pairs] + 1
    vals = rng.integers(half, vocab_size, size=(n, n_pairs))
    x = np.zeros((n, seq_len), dtype=np.int64)
    y = np.full((n, seq_len), IGNORE, dtype=np.int64)
    x[:, 0 : 2 * n_pairs : 2] = keys
    x[:, 1 : 2 * n_pairs : 2] = vals
    q_len = seq_len - 2 * n_pairs
    pos = np.sort(np.argsort(rng.random((n, q_len)), axis=1)[:, :n_pairs], axis=1) + 2 * n_pairs
    order = np.argsort(rng.random((n, n_pairs)), axis=1)
    rows = np.arange(n)[:, None]
    x[rows, pos] = keys[rows, order]
    y[rows, pos] = vals[rows, order]
    return _tensors(x, y)


# --------------------------------------------------------------------------------------- copying
def copying(n: int, length: int, vocab_size: int, rng: np.random.Generator):
    """Copy task: ``s_1..s_L SEP s_1..s_L``; the copy (after ``SEP``) is scored.

    Tokens ``s`` come from ``[1, vocab_size)``; token 0 is the separator. ``x`` has length
    ``2L`` (the last copied token is never an input) and ``y[t] = seq[t + 1]``.
    """
    _check_rng(rng)
    _positive(n=n, length=length, vocab_size=vocab_size)
    if vocab_size < 3:
        raise ValueError(f"vocab_size must be >= 3, got {vocab_size}")
    s = rng.integers(1, vocab_size, size=(n, length))
    seq = np.concatenate([s, np.zeros((n, 1), dtype=np.int64), s], axis=1)
    x, y = seq[:, :-1].copy(), seq[:, 1:].copy()
    y[:, : length] = IGNORE
    return _tensors(x, y)


# -------------------------------------------------------------------------------- state tracking
def group_table(group: str) -> np.ndarray:
    """Cayley table ``T[a, b] = a * b`` of ``"parity"`` (= Z2 = S2), ``"Z<m>"`` or ``"S3"``."""
    if group in ("parity", "S2"):
        group = "Z2"
    if group.startswith("Z") and group[1:].isdigit() and int(group[1:]) >= 2:
        m = int(group[1:])
        a = np.arange(m)
        return (a[:, None] + a[None, :]) % m
    if group == "S3":
        perms = list(itertools.permutations(range(3)))
        index = {p: i for i, p in enumerate(perms)}
        # (a * b)(i) = a(b(i)): apply b first, then a
        return np.array([[index[tuple(a[b[i]] for i in range(3))] for b in perms] for a in perms])
    raise ValueError(f"group must be 'parity', 'S2', 'Z<m>' (m >= 2) or 'S3', got {group!r}")


def state_tracking(n: int, seq_len: int, group: str, rng: np.random.Generator):
    """Word problem of a finite group, tagged: ``y[t] = x[t] * ... * x[1] * x[0]`` (left product).

    Inputs and outputs share the vocabulary of group elements (``0`` is the identity).
    For parity, ``y[t]`` is the XOR of ``x[0..t]``.
    """
    _check_rng(rng)
    _positive(n=n, seq_len=seq_len)
    table = group_table(group)
    g = table.shape[0]
    x = rng.integers(0, g, size=(n, seq_len))
    y = np.empty_like(x)
    state = np.zeros(n, dtype=np.int64)
    for t in range(seq_len):
        state = table[x[:, t], state]
        y[:, t] = state
    return _tensors(x, y)


# --------------------------------------------------------------------------------------- passkey
class PasskeyVocab:
    """Token layout of :func:`passkey`: digits ``0..9``, ``KEY``, ``QUERY``, then filler tokens."""

    DIGITS = 10
    KEY = 10
    QUERY = 11
    FILLER0 = 12

    def __init__(self, n_filler: int = 16):
        _positive(n_filler=n_filler)
        self.n_filler = n_filler
        self.size = self.FILLER0 + n_filler


def markov_language(n_filler: int, concentration: float, seed: int) -> np.ndarray:
    """A fixed order-2 Markov chain over ``n_filler`` tokens: ``P[a, b] = p(next | a, b)``.

    Rows are Dirichlet(``concentration``) draws from a generator seeded by ``seed`` (the
    "language"), independent of the experiment seed that draws the sequences.
    """
    g = np.random.default_rng(seed)
    return g.dirichlet(np.full(n_filler, concentration), size=(n_filler, n_filler))


def markov_text(n: int, length: int, P: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``n`` sequences of ``length`` tokens (``0..V-1``) from the order-2 chain ``P``.

    The first two tokens are uniform; token ``t >= 2`` is drawn from ``P[x_{t-2}, x_{t-1}]``.
    """
    _check_rng(rng)
    _positive(n=n, length=length)
    V = P.shape[0]
    if P.shape != (V, V, V):
        raise ValueError(f"P must have shape (V, V, V), got {P.shape}")
    out = np.empty((n, length), dtype=np.int64)
    out[:, 0] = rng.integers(0, V, n)
    if length > 1:
        out[:, 1] = rng.integers(0, V, n)
    cdf = np.cumsum(P, axis=-1)
    for t in range(2, length):
        u = rng.random(n)[:, None]
        c = cdf[out[:, t - 2], out[:, t - 1]]
        out[:, t] = np.minimum((u > c).sum(-1), V - 1)
    return out


def passkey(n: int, seq_len: int, rng: np.random.Generator, key_len: int = 3, n_filler: int = 16,
            P: np.ndarray | None = None, depth: np.ndarray | None = None):
    """Passkey retrieval in Markov filler text.

    Layout: ``filler ... KEY d1..dK filler ... QUERY d1..dK``, total ``seq_len + 1`` tokens, of
    which ``x`` is the first ``seq_len``. The key block starts at relative depth ``depth``
    (uniform in [0, 1) by default) of the filler. Returns ``x``, ``y_key`` (targets only on the
    ``K`` answer digits) and ``y_lm`` (targets only on filler tokens that follow two filler
    tokens, the in-distribution language-modelling positions).
    """
    _check_rng(rng)
    _positive(n=n, seq_len=seq_len, key_len=key_len, n_filler=n_filler)
    voc = PasskeyVocab(n_filler)
    filler_len = seq_len + 1 - 2 * (key_len + 1)
    if filler_len < 1:
        raise ValueError(f"seq_len={seq_len} too short for key_len={key_len}: need >= {2 * key_len + 2}")
    if P is None:
        P = markov_language(n_filler, 0.2, 0)
    if P.shape != (n_filler, n_filler, n_filler):
        raise ValueError(f"P must have shape {(n_filler,) * 3}, got {P.shape}")
    text = markov_text(n, filler_len, P, rng) + voc.FILLER0
    digits = rng.integers(0, 10, size=(n, key_len))
    if depth is None:
        depth = rng.random(n)
    start = np.floor(np.asarray(depth) * (filler_len + 1)).astype(np.int64).clip(0, filler_len)
    seq = np.empty((n, seq_len + 1), dtype=np.int64)
    is_filler = np.zeros((n, seq_len + 1), dtype=bool)
    block = np.concatenate([np.full((n, 1), voc.KEY), digits], axis=1)
    for i in range(n):
        s = start[i]
        row = np.concatenate([text[i, :s], block[i], text[i, s:], [voc.QUERY], digits[i]])
        seq[i] = row
        is_filler[i, :s] = True
        is_filler[i, s + key_len + 1 : s + key_len + 1 + filler_len - s] = True
    x, tgt = seq[:, :-1], seq[:, 1:]
    y_key = np.full_like(x, IGNORE)
    y_key[:, -key_len:] = tgt[:, -key_len:]
    # LM positions: target is a filler token whose two predecessors are filler tokens
    lm_ok = is_filler[:, 2:] & is_filler[:, 1:-1] & is_filler[:, :-2]
    y_lm = np.full_like(x, IGNORE)
    y_lm[:, 1:][lm_ok] = tgt[:, 1:][lm_ok]
    x, y_key = _tensors(x, y_key)
    return x, y_key, torch.as_tensor(y_lm, dtype=torch.long)
