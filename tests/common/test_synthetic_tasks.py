"""Tests of iclr26.common.synthetic_tasks against independent references of each task's rule."""
import itertools
import os

import numpy as np
import pytest
import torch

from iclr26.common.synthetic_tasks import (IGNORE, PasskeyVocab, copying, group_table, markov_language, markov_text,
                                           mqar, passkey, state_tracking)


def _rng(seed=0):
    return np.random.default_rng(seed)


# ----------------------------------------------------------------------------- MQAR
def test_mqar_layout_and_answers():
    n, T, P, V = 50, 20, 4, 16
    x, y = mqar(n, T, P, V, _rng(1))
    assert x.dtype == torch.long and y.dtype == torch.long and x.shape == y.shape == (n, T)
    x, y = x.numpy(), y.numpy()
    for i in range(n):
        keys, vals = x[i, 0:2 * P:2], x[i, 1:2 * P:2]
        assert len(set(keys.tolist())) == P                       # distinct keys
        assert keys.min() >= 1 and keys.max() < V // 2
        assert vals.min() >= V // 2 and vals.max() < V
        assert (y[i, :2 * P] == IGNORE).all()                     # the pairs are not scored
        lookup = dict(zip(keys.tolist(), vals.tolist()))
        q = x[i, 2 * P:]
        scored = np.flatnonzero(y[i] != IGNORE)
        assert len(scored) == P
        assert sorted(x[i, scored].tolist()) == sorted(keys.tolist())   # every key asked once
        for t in scored:
            assert y[i, t] == lookup[x[i, t]]                     # the answer is the key's value
        assert (q[(y[i, 2 * P:] == IGNORE)] == 0).all()          # everything else is padding
    # queries in random order and places, values random: not a fixed pattern
    assert len({tuple(r) for r in x[:, 2 * P:]}) > n // 2


def test_mqar_uses_the_whole_key_range_and_is_seeded():
    x, _ = mqar(400, 12, 3, 20, _rng(2))
    keys = x[:, 0:6:2].numpy()
    assert set(np.unique(keys)) == set(range(1, 10))
    a, b = mqar(5, 12, 3, 20, _rng(3)), mqar(5, 12, 3, 20, _rng(3))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_mqar_minimal_sizes_and_rejections():
    x, y = mqar(3, 6, 2, 6, _rng(0))     # seq_len = 3 * n_pairs and vocab holding exactly n_pairs keys
    assert x.shape == (3, 6)
    with pytest.raises(ValueError, match=r"^vocab_size=6 holds only 2 distinct keys, need n_pairs=3$"):
        mqar(3, 12, 3, 6, _rng(0))
    with pytest.raises(ValueError, match=r"^seq_len must be >= 3 \* n_pairs = 6, got 5$"):
        mqar(3, 5, 2, 10, _rng(0))
    with pytest.raises(ValueError, match=r"^n must be a positive integer, got 0$"):
        mqar(0, 6, 2, 10, _rng(0))
    with pytest.raises(ValueError, match=r"^seq_len must be a positive integer, got 2.5$"):
        mqar(2, 2.5, 2, 10, _rng(0))
    with pytest.raises(TypeError, match=r"^rng must be a numpy.random.Generator, got int$"):
        mqar(2, 6, 2, 10, 0)


# ----------------------------------------------------------------------------- copying
def test_copying_targets_are_the_string_not_shifted():
    L, V = 5, 9
    x, y = copying(30, L, V, _rng(4))
    assert x.shape == y.shape == (30, 2 * L)
    s = x[:, :L]
    assert (s >= 1).all() and (s < V).all()
    assert (x[:, L] == 0).all()                               # separator
    assert torch.equal(x[:, L + 1:], s[:, :-1])               # the copy so far is the input
    assert torch.equal(y[:, L:], s)                           # after reading SEP s_1..s_j, predict s_{j+1}
    assert (y[:, :L] == IGNORE).all()
    assert len(torch.unique(s)) == V - 1


def test_copying_rejections():
    with pytest.raises(ValueError, match=r"^vocab_size must be >= 3, got 2$"):
        copying(2, 3, 2, _rng(0))
    assert copying(2, 3, 3, _rng(0))[0].shape == (2, 6)
    with pytest.raises(ValueError, match=r"^length must be a positive integer, got 0$"):
        copying(2, 0, 5, _rng(0))


# ----------------------------------------------------------------------------- state tracking
def _perm_index():
    perms = list(itertools.permutations(range(3)))
    return perms, {p: i for i, p in enumerate(perms)}


def test_s3_table_is_composition_apply_right_first():
    """T[a, b] = a o b: (a o b)(i) = a(b(i)), written here with explicit permutation arrays."""
    perms, index = _perm_index()
    T = group_table("S3")
    for a, b in itertools.product(range(6), repeat=2):
        pa, pb = np.array(perms[a]), np.array(perms[b])
        assert T[a, b] == index[tuple(pa[pb])]
    assert T[0].tolist() == list(range(6)) and T[:, 0].tolist() == list(range(6))   # 0 is the identity
    assert not np.array_equal(T, T.T)                                                # non-abelian


def test_cyclic_and_parity_tables():
    np.testing.assert_array_equal(group_table("Z3"), [[0, 1, 2], [1, 2, 0], [2, 0, 1]])
    np.testing.assert_array_equal(group_table("parity"), [[0, 1], [1, 0]])
    np.testing.assert_array_equal(group_table("S2"), group_table("Z2"))
    for bad in ("Z1", "Z", "S4", "Zx", "A5"):
        with pytest.raises(ValueError, match=r"^group must be 'parity', 'S2', 'Z<m>' \(m >= 2\) or 'S3', got "):
            group_table(bad)


def test_state_tracking_s3_is_the_left_running_product():
    """y[t] = x[t] o x[t-1] o ... o x[0], composed as permutations (the newest element applied last)."""
    perms, index = _perm_index()
    x, y = state_tracking(40, 9, "S3", _rng(5))
    assert x.shape == y.shape == (40, 9) and x.dtype == torch.long
    for row_x, row_y in zip(x.numpy(), y.numpy()):
        state = np.arange(3)
        for t in range(9):
            state = np.array(perms[row_x[t]])[state]        # new(i) = x_t(state(i))
            assert row_y[t] == index[tuple(state)]
    assert set(np.unique(x.numpy())) == set(range(6))


def test_state_tracking_parity_and_cyclic():
    x, y = state_tracking(20, 15, "parity", _rng(6))
    torch.testing.assert_close(y, torch.cumsum(x, 1) % 2)
    x, y = state_tracking(20, 15, "Z5", _rng(7))
    torch.testing.assert_close(y, torch.cumsum(x, 1) % 5)
    assert set(np.unique(x.numpy())) == set(range(5))
    with pytest.raises(ValueError, match="seq_len"):
        state_tracking(2, 0, "Z2", _rng(0))


# ----------------------------------------------------------------------------- passkey
def test_passkey_vocab():
    v = PasskeyVocab(5)
    assert (v.DIGITS, v.KEY, v.QUERY, v.FILLER0, v.n_filler, v.size) == (10, 10, 11, 12, 5, 17)
    assert PasskeyVocab().size == 28
    with pytest.raises(ValueError, match=r"^n_filler must be a positive integer, got 0$"):
        PasskeyVocab(0)


def test_markov_language_rows_and_seed():
    P = markov_language(4, 0.5, seed=3)
    assert P.shape == (4, 4, 4)
    np.testing.assert_allclose(P.sum(-1), 1.0)
    np.testing.assert_array_equal(P, markov_language(4, 0.5, seed=3))
    assert not np.allclose(P, markov_language(4, 0.5, seed=4))
    # small concentration: peaked rows (a language, not noise)
    assert markov_language(8, 0.05, 0).max(-1).mean() > markov_language(8, 5.0, 0).max(-1).mean() + 0.3


def test_markov_text_follows_the_chain():
    P = markov_language(3, 0.7, seed=1)
    text = markov_text(3000, 12, P, _rng(8))
    assert text.shape == (3000, 12) and text.min() >= 0 and text.max() <= 2
    counts = np.zeros((3, 3, 3))
    for t in range(2, 12):
        np.add.at(counts, (text[:, t - 2], text[:, t - 1], text[:, t]), 1)
    emp = counts / counts.sum(-1, keepdims=True)
    assert np.abs(emp - P).max() < 0.05
    # the first two tokens are uniform draws
    assert np.abs(np.bincount(text[:, 0], minlength=3) / 3000 - 1 / 3).max() < 0.04
    assert np.abs(np.bincount(text[:, 1], minlength=3) / 3000 - 1 / 3).max() < 0.04
    assert markov_text(4, 1, P, _rng(0)).shape == (4, 1)
    with pytest.raises(ValueError, match=r"^P must have shape \(V, V, V\), got \(3, 3\)$"):
        markov_text(2, 4, np.full((3, 3), 1 / 3), _rng(0))
    with pytest.raises(ValueError, match=r"^length must be a positive integer, got 0$"):
        markov_text(2, 0, P, _rng(0))
    # a deterministic chain: next = (a + b) % 3
    D = np.zeros((3, 3, 3))
    for a, b in itertools.product(range(3), repeat=2):
        D[a, b, (a + b) % 3] = 1.0
    t = markov_text(5, 8, D, _rng(9))
    np.testing.assert_array_equal(t[:, 2:], (t[:, :-2] + t[:, 1:-1]) % 3)


def test_passkey_layout_targets_and_lm_positions():
    n, T, K, nf = 60, 24, 3, 6
    depth = np.linspace(0, 0.999, n)
    x, y_key, y_lm = passkey(n, T, _rng(10), key_len=K, n_filler=nf, P=markov_language(nf, 0.3, 1), depth=depth)
    voc = PasskeyVocab(nf)
    assert x.shape == y_key.shape == y_lm.shape == (n, T)
    x, y_key, y_lm = x.numpy(), y_key.numpy(), y_lm.numpy()
    filler_len = T + 1 - 2 * (K + 1)
    for i in range(n):
        row = x[i]
        k_pos = np.flatnonzero(row == voc.KEY)
        assert len(k_pos) == 1
        s = k_pos[0]
        assert s == min(int(np.floor(depth[i] * (filler_len + 1))), filler_len)
        digits = row[s + 1:s + 1 + K]
        assert (digits < 10).all()
        q = np.flatnonzero(row == voc.QUERY)
        assert q.tolist() == [T - K]                           # QUERY, then K - 1 digits as input
        np.testing.assert_array_equal(row[T - K + 1:], digits[:-1])
        # the targets are the K digits, on the last K positions only
        assert (y_key[i, :T - K] == IGNORE).all()
        np.testing.assert_array_equal(y_key[i, T - K:], digits)
        # filler tokens everywhere else
        filler = np.ones(T, bool)
        filler[s:s + K + 1] = False
        filler[T - K:] = False
        assert (row[filler] >= voc.FILLER0).all() and filler.sum() == filler_len
        # LM positions: target (the next token) is filler and its two predecessors are filler
        seq = np.concatenate([row, [digits[-1]]])
        isf = np.concatenate([filler, [False]])
        for t in range(T):
            ok = t >= 1 and isf[t + 1] and isf[t] and isf[t - 1]
            assert y_lm[i, t] == (seq[t + 1] if ok else IGNORE)
    assert (y_lm != IGNORE).sum() > n * (filler_len - 6)


def test_passkey_defaults_and_rejections():
    x, y_key, y_lm = passkey(8, 30, _rng(11))
    assert x.max() < PasskeyVocab(16).size
    assert (y_key != IGNORE).sum(1).tolist() == [3] * 8
    depths = [int(np.flatnonzero(r == PasskeyVocab.KEY)[0]) for r in x.numpy()]
    assert len(set(depths)) > 1                                # uniform random depth by default
    # the default language is markov_language(n_filler, 0.2, 0)
    a = passkey(4, 30, _rng(12))
    b = passkey(4, 30, _rng(12), P=markov_language(16, 0.2, 0))
    assert all(torch.equal(u, v) for u, v in zip(a, b))
    with pytest.raises(ValueError, match=r"^seq_len=7 too short for key_len=3: need >= 8$"):
        passkey(2, 7, _rng(0))
    assert passkey(2, 8, _rng(0))[0].shape == (2, 8)
    with pytest.raises(ValueError, match=r"^P must have shape \(4, 4, 4\), got \(3, 3, 3\)$"):
        passkey(2, 20, _rng(0), n_filler=4, P=markov_language(3, 0.2, 0))
    with pytest.raises(TypeError, match="rng must be a numpy.random.Generator"):
        passkey(2, 20, None)


def test_every_size_argument_is_validated():
    with pytest.raises(ValueError, match=r"^n_pairs must be a positive integer, got 0$"):
        mqar(2, 6, 0, 10, _rng(0))
    with pytest.raises(ValueError, match=r"^vocab_size must be a positive integer, got 0$"):
        mqar(2, 6, 2, 0, _rng(0))
    with pytest.raises(ValueError, match=r"^n must be a positive integer, got 0$"):
        copying(0, 3, 5, _rng(0))
    with pytest.raises(ValueError, match=r"^vocab_size must be a positive integer, got 3.5$"):
        copying(2, 3, 3.5, _rng(0))
    with pytest.raises(ValueError, match=r"^n must be a positive integer, got 0$"):
        state_tracking(0, 3, "Z2", _rng(0))
    P = markov_language(3, 0.5, 0)
    with pytest.raises(ValueError, match=r"^n must be a positive integer, got 0$"):
        markov_text(0, 3, P, _rng(0))
    for kw, name in ((dict(n=0), "n"), (dict(seq_len=0), "seq_len"), (dict(key_len=0), "key_len"),
                     (dict(n_filler=0), "n_filler")):
        args = dict(n=2, seq_len=20, key_len=3, n_filler=4) | kw
        with pytest.raises(ValueError, match=rf"^{name} must be a positive integer, got 0$"):
            passkey(args["n"], args["seq_len"], _rng(0), key_len=args["key_len"], n_filler=args["n_filler"])


def test_markov_text_second_token_and_last_token_guard():
    P = markov_language(4, 0.5, 0)
    seed = int.from_bytes(os.urandom(4), "little")           # fresh values: memory left by an earlier
    b = markov_text(50, 6, P, _rng(seed))                    # run of this test cannot pass for them
    a = markov_text(50, 2, P, _rng(seed))
    np.testing.assert_array_equal(a, b[:, :2])                 # the second token is drawn, not left empty
    # cumulative probabilities that fall short of 1 (rounding) never yield a token >= V
    short = P * 0.9
    assert markov_text(200, 6, short, _rng(4)).max() == 3


def test_passkey_digits_and_depth_clipping():
    x, y_key, _ = passkey(200, 12, _rng(5), key_len=2, n_filler=3)
    assert set(np.unique(y_key[y_key != IGNORE].numpy())) == set(range(10))     # digit 0 included
    filler_len = 12 + 1 - 2 * 3
    for d, want in ((-0.5, 0), (1.0, filler_len), (2.0, filler_len)):
        x, _, _ = passkey(1, 12, _rng(6), key_len=2, n_filler=3, depth=np.array([d]))
        assert int(np.flatnonzero(x[0].numpy() == PasskeyVocab.KEY)[0]) == want


def test_passkey_key_at_the_end_is_never_an_lm_target():
    x, y_key, y_lm = passkey(3, 12, _rng(7), key_len=2, n_filler=3, depth=np.array([1.0, 1.0, 0.0]))
    scored = y_lm[y_lm != IGNORE]
    assert (scored >= PasskeyVocab.FILLER0).all()
    assert (y_lm[0] != IGNORE).sum() == (y_lm[2] != IGNORE).sum() == 12 + 1 - 2 * 3 - 2
