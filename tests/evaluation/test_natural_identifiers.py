"""Natural identifiers: generators and finder (Sec. 3), DP audit bound (Sec. 4), dataset inference (Sec. 5)."""
import math

import numpy as np
import pytest
import torch
from scipy import stats
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.linear_model import LogisticRegression
from sklearn.neighbors import KNeighborsClassifier

from iclr26.evaluation.natural_identifiers import (
    FEATURES, KINDS, AuditResult, DatasetInferenceResult, count_hits, dataset_inference, dp_audit_epsilon,
    find_nids, generate_identifiers, hit_bound, hits_tail, mia_features,
)


def exact(exc, pattern):
    """pytest.raises whose regex must match the whole message (so a changed message fails)."""
    return pytest.raises(exc, match=rf"^(?:{pattern})$")


# --------------------------------------------------------------------------- identifiers (Sec. 3)
@pytest.mark.parametrize("kind,alphabet,length", [
    ("md5", "0123456789abcdef", 32), ("sha1", "0123456789abcdef", 40), ("sha256", "0123456789abcdef", 64),
    ("hex", "0123456789abcdef", 16),
    ("short_url", "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", 7)])
def test_generated_identifiers_have_the_kind_format(kind, alphabet, length):
    ids = generate_identifiers(kind, 50, np.random.default_rng(1))
    assert len(ids) == 50 and all(len(s) == length and set(s) <= set(alphabet) for s in ids)
    assert KINDS[kind] == (alphabet, length)
    assert generate_identifiers(kind, 3, 7) == generate_identifiers(kind, 3, np.random.default_rng(7))
    assert len(set(ids)) == 50


def test_generated_identifiers_are_uniform_over_the_alphabet():
    ids = generate_identifiers("hex", 2000, np.random.default_rng(0), length=8)
    counts = np.array([sum(s.count(c) for s in ids) for c in "0123456789abcdef"])
    assert counts.sum() == 16000
    assert stats.chisquare(counts).pvalue > 0.01
    # positions are independent of each other: first and last character
    table = np.zeros((16, 16))
    for s in ids:
        table[int(s[0], 16), int(s[-1], 16)] += 1
    assert stats.chi2_contingency(table).pvalue > 0.01
    b62 = "".join(generate_identifiers("short_url", 3000, 3))
    assert len(set(b62)) == 62


def test_generate_rejects_bad_input():
    with exact(ValueError, r"unknown identifier kind 'crc'; allowed: \['hex', 'md5', 'sha1', 'sha256', 'short_url'\]"):
        generate_identifiers("crc", 3)
    with exact(ValueError, r"n must be a non-negative integer, got -1"):
        generate_identifiers("md5", -1)
    with exact(ValueError, r"n must be a non-negative integer, got 2.0"):
        generate_identifiers("md5", 2.0)
    with exact(ValueError, r"length must be a positive integer, got 0"):
        generate_identifiers("md5", 2, length=0)
    with exact(ValueError, r"length must be a positive integer, got 1.5"):
        generate_identifiers("md5", 2, length=1.5)
    assert generate_identifiers("md5", 0) == []
    assert generate_identifiers("md5", 1, 0, length=1)[0] in "0123456789abcdef"


def test_find_nids_in_text():
    sha1 = "3f786850e387550fdab836ed7e6dc881de23001b"
    md5 = "d41d8cd98f00b204e9800998ecf8427e"
    texts = [f"commit {sha1} fixes md5={md5}.", "no identifier here", f"see https://bit.ly/Ab3dE9x and word Ab3dE9y"]
    found = find_nids(texts, kinds=("sha1", "md5", "short_url"))
    assert found == [(0, "sha1", sha1), (0, "md5", md5), (2, "short_url", "Ab3dE9x")]
    # order within a text follows the text, not the kinds
    assert find_nids([f"{md5} {sha1}"], kinds=("sha1", "md5")) == [(0, "md5", md5), (0, "sha1", sha1)]
    # a hash inside a longer run is not an identifier of the shorter kind
    assert find_nids([sha1 + "ab"], kinds=("md5", "sha1")) == []
    assert find_nids(["x" + md5], kinds="md5") == []
    assert find_nids([md5 + "g"], kinds="md5") == []
    assert find_nids([md5.upper()], kinds="md5") == []
    # a short-URL slug needs a preceding slash, also at the start of a text
    assert find_nids(["Ab3dE9x"], kinds="short_url") == []
    assert find_nids(["/Ab3dE9x"], kinds="short_url") == [(0, "short_url", "Ab3dE9x")]
    # length override, and an earlier kind's span is not reported again by a later one
    assert find_nids(["key 0a1b2c3d end"], kinds=("hex", "short_url"), length=8) == [(0, "hex", "0a1b2c3d")]
    assert find_nids(["/0a1b2c3d"], kinds=("hex", "short_url"), length=8) == [(0, "hex", "0a1b2c3d")]
    assert find_nids(["/0a1b2c3d"], kinds=("short_url", "hex"), length=8) == [(0, "short_url", "0a1b2c3d")]
    assert find_nids(["/0a1b2c3dZ"], kinds=("short_url", "hex"), length=9) == [(0, "short_url", "0a1b2c3dZ")]
    # default kinds: md5 and sha1
    assert find_nids([f"{md5} {sha1} /Ab3dE9x"]) == [(0, "md5", md5), (0, "sha1", sha1)]


def test_find_nids_rejects_bad_input():
    with exact(TypeError, "texts must be a sequence of strings, not one string"):
        find_nids("abc")
    with exact(ValueError, r"kinds must name at least one kind; allowed: \['hex', 'md5', 'sha1', 'sha256', 'short_url'\]"):
        find_nids(["abc"], kinds=())
    with exact(ValueError, r"unknown identifier kind 'url'; allowed: \['hex', 'md5', 'sha1', 'sha256', 'short_url'\]"):
        find_nids(["abc"], kinds=("url",))


# --------------------------------------------------------------------------- DP audit (Sec. 4)
def reference_bound(eps, c, r):
    return min(1.0, r * math.exp(eps) / (c - 1 + math.exp(eps)))


@pytest.mark.parametrize("eps,c,r", [(0.0, 2, 1), (1.0, 2, 1), (1.0, 32, 1), (4.0, 8, 3), (8.0, 32, 1), (0.5, 10, 9)])
def test_hit_bound_equation(eps, c, r):
    assert hit_bound(eps, c, r) == pytest.approx(reference_bound(eps, c, r), rel=1e-12)


def test_hit_bound_reductions():
    # Steinke et al.'s two-candidate game; chance at epsilon = 0; certainty at epsilon = inf
    assert hit_bound(2.0, 2) == pytest.approx(math.exp(2) / (1 + math.exp(2)))
    assert hit_bound(0.0, 32, 4) == pytest.approx(4 / 32)
    assert hit_bound(np.inf, 32) == 1.0
    assert hit_bound(800.0, 32) == pytest.approx(1.0)
    assert hit_bound(3.0, 5, 4) == 1.0  # capped: 4 e^3 / (4 + e^3) > 1


def test_hit_bound_rejects_bad_input():
    with exact(ValueError, r"epsilon must be >= 0, got -1"):
        hit_bound(-1, 2)
    with exact(ValueError, r"epsilon must be >= 0, got nan"):
        hit_bound(float("nan"), 2)
    with exact(ValueError, r"cardinality must be an integer >= 2 \(the NID plus at least one GID\), got 1"):
        hit_bound(1.0, 1)
    with exact(ValueError, r"cardinality must be an integer >= 2 \(the NID plus at least one GID\), got 4.0"):
        hit_bound(1.0, 4.0)
    with exact(ValueError, r"top_r must be an integer in \[1, cardinality - 1\] = \[1, 3\], got 4"):
        hit_bound(1.0, 4, 4)
    with exact(ValueError, r"top_r must be an integer in \[1, cardinality - 1\] = \[1, 3\], got 0"):
        hit_bound(1.0, 4, 0)
    with exact(ValueError, r"top_r must be an integer in \[1, cardinality - 1\] = \[1, 3\], got 1.0"):
        hit_bound(1.0, 4, 1.0)
    assert hit_bound(1.0, 2, 1) > 0 and hit_bound(0.1, 4, 3) < 1


def reference_tail(v, m, eps, c, r, delta):
    """Steinke et al. (2023) Thm. 3 with p(eps) of the c-candidate game, written out term by term."""
    p = reference_bound(eps, c, r)
    f = lambda w: 1.0 if w <= 0 else sum(stats.binom.pmf(j, m, p) for j in range(w, m + 1))
    extra = max((f(v - i) - f(v)) / i for i in range(1, m + 1)) if v > 0 else 0.0
    return min(1.0, f(v) + 2 * m * delta * extra)


@pytest.mark.parametrize("v,m,eps,c,r,delta", [
    (7, 10, 1.0, 2, 1, 0.0), (7, 10, 1.0, 2, 1, 1e-3), (5, 20, 2.0, 8, 1, 1e-4), (12, 30, 0.5, 4, 2, 1e-2),
    (0, 10, 1.0, 2, 1, 1e-3), (30, 30, 3.0, 32, 1, 1e-5), (3, 10, 0.0, 4, 1, 0.3)])
def test_hits_tail_equation(v, m, eps, c, r, delta):
    assert hits_tail(v, m, eps, c, r, delta) == pytest.approx(reference_tail(v, m, eps, c, r, delta), rel=1e-9, abs=1e-15)


def test_audit_epsilon_is_the_rejection_boundary():
    for hits, m, c, delta in [(70, 100, 2, 0.0), (30, 100, 8, 0.0), (25, 200, 32, 1e-5), (90, 100, 32, 1e-4)]:
        a = dp_audit_epsilon(hits, m, cardinality=c, delta=delta, beta=0.05)
        assert a.epsilon > 0
        assert hits_tail(hits, m, a.epsilon, c, 1, delta) <= 0.05
        assert hits_tail(hits, m, a.epsilon + 1e-4, c, 1, delta) > 0.05
        assert a.pvalue == pytest.approx(hits_tail(hits, m, 0.0, c, 1, delta))
        assert (a.hits, a.m, a.cardinality, a.top_r, a.delta, a.beta) == (hits, m, c, 1, delta, 0.05)
        assert a.hit_rate == hits / m


def test_audit_epsilon_closed_form_when_every_guess_hits():
    # all m hits, delta = 0: p(eps)^m = beta, so e^eps = p (c - 1) / (1 - p) with p = beta^(1/m)
    for m, c in [(50, 2), (200, 32), (1000, 8)]:
        p = 0.05 ** (1 / m)
        expect = math.log(p * (c - 1) / (1 - p))
        assert dp_audit_epsilon(m, m, cardinality=c).epsilon == pytest.approx(expect, abs=1e-5)
    # a larger candidate set certifies more from the same perfect guesses
    assert dp_audit_epsilon(300, 300, cardinality=32).epsilon > dp_audit_epsilon(300, 300, cardinality=2).epsilon + 3
    # top_r = 2 of 8: the same closed form with p / 2
    p = 0.05 ** (1 / 100)
    assert dp_audit_epsilon(100, 100, cardinality=8, top_r=2).epsilon == pytest.approx(
        math.log((p / 2) * 7 / (1 - p / 2)), abs=1e-5)


def test_audit_epsilon_is_zero_at_chance_and_capped():
    assert dp_audit_epsilon(50, 100, cardinality=2).epsilon == 0.0
    assert dp_audit_epsilon(3, 96, cardinality=32).epsilon == 0.0
    a = dp_audit_epsilon(100, 100, cardinality=32, eps_max=2.0)
    assert a.epsilon == 2.0
    assert dp_audit_epsilon(100, 100, cardinality=32, eps_max=20.0).epsilon < 20.0
    # per-NID 0/1 array input
    hits = np.r_[np.ones(60, int), np.zeros(40, int)]
    assert dp_audit_epsilon(hits, cardinality=2) == dp_audit_epsilon(60, 100, cardinality=2)
    assert dp_audit_epsilon(list(hits.astype(bool)), cardinality=2).hits == 60
    # the tolerance controls the bisection
    coarse = dp_audit_epsilon(60, 100, cardinality=2, tol=0.5).epsilon
    fine = dp_audit_epsilon(60, 100, cardinality=2).epsilon
    assert coarse <= fine < coarse + 0.5 and fine - coarse > 1e-4


def test_audit_is_valid_under_an_extreme_epsilon_dp_mechanism():
    # randomised response at the bound: every guess hits with probability exactly p(eps)
    rng = np.random.default_rng(3)
    eps, c, m = 2.0, 8, 200
    over = [dp_audit_epsilon(int(rng.binomial(m, hit_bound(eps, c))), m, cardinality=c).epsilon > eps
            for _ in range(400)]
    assert np.mean(over) <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 400)
    # and the audit is not trivially zero there
    assert np.median([dp_audit_epsilon(int(rng.binomial(m, hit_bound(eps, c))), m, cardinality=c).epsilon
                      for _ in range(20)]) > 1.0


def test_audit_rejects_bad_input():
    with exact(ValueError, r"hits must be a count with m given, or a 1-D array of 0/1 per-NID hits"):
        dp_audit_epsilon([0, 2, 1])
    with exact(ValueError, r"hits must be a count with m given, or a 1-D array of 0/1 per-NID hits"):
        dp_audit_epsilon([[0, 1]])
    with exact(ValueError, r"m \(the number of audited NIDs\) must be a positive integer, got 0"):
        dp_audit_epsilon(0, 0)
    with exact(ValueError, r"m \(the number of audited NIDs\) must be a positive integer, got 1.0"):
        dp_audit_epsilon(0, 1.0)
    with exact(ValueError, r"hits must be an integer in \[0, m\] = \[0, 5\], got 6"):
        dp_audit_epsilon(6, 5)
    with exact(ValueError, r"hits must be an integer in \[0, m\] = \[0, 5\], got -1"):
        dp_audit_epsilon(-1, 5)
    with exact(ValueError, r"hits must be an integer in \[0, m\] = \[0, 5\], got 2.5"):
        dp_audit_epsilon(2.5, 5)
    with exact(ValueError, r"beta must lie in \(0, 1\), got 0"):
        dp_audit_epsilon(2, 5, beta=0)
    with exact(ValueError, r"beta must lie in \(0, 1\), got 1"):
        dp_audit_epsilon(2, 5, beta=1)
    with exact(ValueError, r"delta must lie in \[0, 1\), got -0.1"):
        dp_audit_epsilon(2, 5, delta=-0.1)
    with exact(ValueError, r"delta must lie in \[0, 1\), got 1"):
        dp_audit_epsilon(2, 5, delta=1)
    with exact(ValueError, r"cardinality must be an integer >= 2 \(the NID plus at least one GID\), got 1"):
        dp_audit_epsilon(2, 5, cardinality=1)
    assert dp_audit_epsilon(0, 5, delta=0.0, beta=0.5).epsilon == 0.0
    assert dp_audit_epsilon(5, 5, cardinality=2, beta=0.99).epsilon > 0


def test_count_hits_by_hand_and_ties():
    nid = np.array([5.0, 1.0, 3.0, 2.0])
    gid = np.array([[1.0, 2.0], [4.0, 0.0], [3.5, 2.9], [2.5, 2.6]])
    np.testing.assert_array_equal(count_hits(nid, gid), [1, 0, 0, 0])
    np.testing.assert_array_equal(count_hits(nid, gid, top_r=2), [1, 1, 1, 0])
    assert count_hits([1.0], [[0.0]]).dtype.kind == "i"
    # all tied: the NID's place is uniform, so the hit rate is the chance rate r / c
    rng = np.random.default_rng(0)
    h = count_hits(np.zeros(20000), np.zeros((20000, 3)), rng=rng)
    assert abs(h.mean() - 0.25) < 0.015
    h2 = count_hits(np.zeros(20000), np.zeros((20000, 3)), top_r=3, rng=rng)
    assert abs(h2.mean() - 0.75) < 0.015
    # partial ties: NID tied with one GID and above the other -> hit with probability 1/2
    h3 = count_hits(np.ones(20000), np.tile([1.0, 0.0], (20000, 1)), rng=1)
    assert abs(h3.mean() - 0.5) < 0.02
    np.testing.assert_array_equal(count_hits(np.ones(5), np.tile([1.0, 0.0], (5, 1)), rng=7),
                                  count_hits(np.ones(5), np.tile([1.0, 0.0], (5, 1)), rng=7))


def test_count_hits_rejects_bad_input():
    with exact(ValueError, r"need nid_scores of shape \(m,\) and gid_scores of shape \(m, c - 1\); got \(2,\) and \(3, 2\)"):
        count_hits(np.zeros(2), np.zeros((3, 2)))
    with exact(ValueError, r"need nid_scores of shape \(m,\) and gid_scores of shape \(m, c - 1\); got \(2, 1\) and \(2, 2\)"):
        count_hits(np.zeros((2, 1)), np.zeros((2, 2)))
    with exact(ValueError, r"need nid_scores of shape \(m,\) and gid_scores of shape \(m, c - 1\); got \(2,\) and \(2,\)"):
        count_hits(np.zeros(2), np.zeros(2))
    with exact(ValueError, r"scores must be finite"):
        count_hits(np.array([np.nan, 0.0]), np.zeros((2, 2)))
    with exact(ValueError, r"scores must be finite"):
        count_hits(np.zeros(2), np.array([[0.0, np.inf], [0.0, 0.0]]))
    with exact(ValueError, r"top_r must be an integer in \[1, cardinality - 1\] = \[1, 2\], got 3"):
        count_hits(np.zeros(2), np.zeros((2, 2)), top_r=3)


# --------------------------------------------------------------------------- features (Sec. 5)
def peaked_logprobs(seed=0, B=3, T=5, V=6):
    g = torch.Generator().manual_seed(seed)
    logits = 3.0 * torch.randn(B, T, V, generator=g, dtype=torch.float64)  # far from uniform
    return torch.log_softmax(logits, -1), torch.randint(0, V, (B, T), generator=g)


def test_mia_features_against_a_loop_reference():
    lp, tg = peaked_logprobs()
    got = mia_features(lp, tg, k=0.4)
    assert got.shape == (3, 4) and FEATURES == ("neg_loss", "min_k", "min_k_pp", "hinge")
    for b in range(3):
        tok = [float(lp[b, t, tg[b, t]]) for t in range(5)]
        mus = [float((lp[b, t].exp() * lp[b, t]).sum()) for t in range(5)]
        sds = [float(((lp[b, t].exp() * (lp[b, t] - mus[t]) ** 2).sum()).sqrt()) for t in range(5)]
        z = [(tok[t] - mus[t]) / sds[t] for t in range(5)]
        hinge = [tok[t] - max(float(lp[b, t, v]) for v in range(6) if v != tg[b, t]) for t in range(5)]
        assert got[b, 0] == pytest.approx(np.mean(tok))
        assert got[b, 1] == pytest.approx(np.mean(sorted(tok)[:2]))  # ceil(0.4 * 5) = 2 lowest
        assert got[b, 2] == pytest.approx(np.mean(sorted(z)[:2]))
        assert got[b, 3] == pytest.approx(np.mean(hinge))
    np.testing.assert_allclose(mia_features(lp.numpy(), tg.numpy(), k=0.4), got)
    # k = 1 makes Min-K% the mean log-likelihood; a tiny k keeps the single lowest token
    full = mia_features(lp, tg, k=1.0)
    np.testing.assert_allclose(full[:, 1], full[:, 0])
    one = mia_features(lp, tg, k=0.01)
    np.testing.assert_allclose(one[:, 1], [min(float(lp[b, t, tg[b, t]]) for t in range(5)) for b in range(3)])
    np.testing.assert_allclose(mia_features(lp, tg)[:, 1], one[:, 1])  # default k = 20 %: 1 of 5 tokens


def test_mia_features_uniform_model_and_orientation():
    V = 4
    lp = torch.full((2, 3, V), -math.log(V), dtype=torch.float64)
    f = mia_features(lp, torch.zeros(2, 3, dtype=torch.long))
    np.testing.assert_allclose(f[:, 0], -math.log(V))
    np.testing.assert_allclose(f[:, 3], 0.0)
    np.testing.assert_allclose(f[:, 2], 0.0, atol=1e-4)  # zero spread: guarded division
    # a better-predicted sequence scores higher on every feature
    lp2, tg2 = peaked_logprobs(1, B=1, T=6)
    best = lp2.argmax(-1)
    worst = lp2.argmin(-1)
    assert (mia_features(lp2, best) > mia_features(lp2, worst)).all()


def test_mia_features_rejects_bad_input():
    lp, tg = peaked_logprobs()
    with exact(ValueError, r"need logprobs of shape \(B, T, V\) and targets of shape \(B, T\); got \(3, 5\) and \(3, 5\)"):
        mia_features(lp[..., 0], tg)
    with exact(ValueError, r"need logprobs of shape \(B, T, V\) and targets of shape \(B, T\); got \(3, 5, 6\) and \(3, 4\)"):
        mia_features(lp, tg[:, :4])
    with exact(ValueError, r"k \(the Min-K% fraction\) must lie in \(0, 1\], got 0"):
        mia_features(lp, tg, k=0)
    with exact(ValueError, r"k \(the Min-K% fraction\) must lie in \(0, 1\], got 1.5"):
        mia_features(lp, tg, k=1.5)
    with exact(ValueError, r"targets must be token ids in \[0, 5\]"):
        mia_features(lp, tg + 6)
    with exact(ValueError, r"targets must be token ids in \[0, 5\]"):
        mia_features(lp, tg - 6)
    assert mia_features(lp, torch.full_like(tg, 5)).shape == (3, 4)


# --------------------------------------------------------------------------- dataset inference (Sec. 5)
def test_rank_values_by_hand():
    nid = np.array([10.0, -10.0, 0.5])
    gid = np.array([[0.0, 1.0, 2.0], [0.0, 1.0, 2.0], [0.0, 1.0, 2.0]])
    r = dataset_inference(nid, gid, random_state=0)
    # ranks 0, 3, 2 of k + 1 = 4 cells, jittered inside the cell
    assert r.ranks[0] < 0.25 and r.ranks[1] >= 0.75 and 0.5 <= r.ranks[2] < 0.75
    assert (r.n, r.n_gids, r.alternative) == (3, 3, "greater")
    ref = stats.kstest(r.ranks, "uniform", alternative="greater")
    assert (r.statistic, r.pvalue) == (pytest.approx(ref.statistic), pytest.approx(ref.pvalue))
    two = dataset_inference(nid, gid, alternative="two-sided", random_state=0)
    np.testing.assert_allclose(two.ranks, r.ranks)
    assert two.pvalue == pytest.approx(stats.kstest(r.ranks, "uniform").pvalue)
    assert isinstance(r, DatasetInferenceResult)


def test_ties_are_broken_uniformly():
    r = dataset_inference(np.zeros(4000), np.zeros((4000, 3)), random_state=1)
    cells = np.floor(r.ranks * 4).astype(int)
    assert stats.chisquare(np.bincount(cells, minlength=4)).pvalue > 0.001
    assert stats.kstest(r.ranks, "uniform").pvalue > 0.001
    # a NID tied with one GID and above two others sits in cell 0 or 1, never lower
    r2 = dataset_inference(np.ones(2000), np.tile([1.0, 0.0, 0.0], (2000, 1)), random_state=2)
    cells2 = np.floor(r2.ranks * 4).astype(int)
    assert set(cells2) == {0, 1} and abs(np.mean(cells2) - 0.5) < 0.05


def test_null_size_and_power_single_score():
    rng = np.random.default_rng(0)
    rej = [dataset_inference(rng.normal(size=15), rng.normal(size=(15, 7)), random_state=i).reject(0.05)
           for i in range(800)]
    lo, hi = stats.binomtest(int(np.sum(rej)), 800).proportion_ci(0.99)
    assert lo <= 0.05 <= hi
    member = dataset_inference(rng.normal(1.5, 1, 40), rng.normal(size=(40, 15)), random_state=0)
    assert member.pvalue < 1e-6 and member.reject() and member.reject(1e-6)
    assert not member.reject(member.pvalue)
    # members that rank *below* their GIDs are not "trained on" under the one-sided test
    low = dataset_inference(rng.normal(-1.5, 1, 40), rng.normal(size=(40, 15)), random_state=0)
    assert low.pvalue > 0.5
    assert dataset_inference(rng.normal(-1.5, 1, 40), rng.normal(size=(40, 15)), alternative="two-sided",
                             random_state=0).pvalue < 1e-6


def test_classifier_path_is_cross_fitted_by_group():
    # a 1-nearest-neighbour classifier memorises its training rows: any leak of a NID's own row (or
    # its GIDs) into the fold that scores it would push the null rejection rate far above alpha
    rng = np.random.default_rng(1)
    knn = KNeighborsClassifier(n_neighbors=1)
    rej = [dataset_inference(rng.normal(size=(20, 3)), rng.normal(size=(20, 5, 3)), classifier=knn, n_splits=4,
                             random_state=i).reject(0.05) for i in range(150)]
    assert np.mean(rej) < 0.12
    # the classifier combines features: signal in one of three features is found
    nid = rng.normal(size=(60, 3)); nid[:, 2] += 2.0
    r = dataset_inference(nid, rng.normal(size=(60, 15, 3)), classifier=LogisticRegression(), random_state=0)
    assert r.pvalue < 1e-6
    # ... and in the opposite direction of a raw feature too (the classifier learns the orientation)
    nid2 = rng.normal(size=(60, 3)); nid2[:, 0] -= 2.0
    assert dataset_inference(nid2, rng.normal(size=(60, 15, 3)), classifier=LogisticRegression(),
                             random_state=0).pvalue < 1e-6


def test_default_gbdt_and_label_column():
    rng = np.random.default_rng(4)
    nid = rng.normal(size=(25, 2)); nid[:, 0] += 2.5
    r = dataset_inference(nid, rng.normal(size=(25, 7, 2)), random_state=0)
    assert r.pvalue < 1e-6 and r.n == 25 and r.n_gids == 7
    again = dataset_inference(nid, rng.normal(size=(25, 7, 2)), n_splits=3, random_state=0)
    assert again.pvalue < 1e-4

    class Reversed(BaseEstimator, ClassifierMixin):
        """classes_ listed as [1, 0]: the score must still be P(label 1)."""
        def fit(self, X, y):
            self.lr_ = LogisticRegression().fit(X, y)
            self.classes_ = self.lr_.classes_[::-1]
            return self

        def predict_proba(self, X):
            return self.lr_.predict_proba(X)[:, ::-1]

    r2 = dataset_inference(nid, rng.normal(size=(25, 7, 2)), classifier=Reversed(), random_state=0)
    assert r2.pvalue < 1e-6


def test_dataset_inference_rejects_bad_input():
    z1, z2 = np.zeros(4), np.zeros((4, 3))
    with exact(ValueError, r"need nid_features \(n,\) with gid_features \(n, k\), or \(n, F\) with \(n, k, F\); got \(4,\) and \(5, 3\)"):
        dataset_inference(z1, np.zeros((5, 3)))
    with exact(ValueError, r"need nid_features \(n,\) with gid_features \(n, k\), or \(n, F\) with \(n, k, F\); got \(4, 2\) and \(4, 3, 3\)"):
        dataset_inference(np.zeros((4, 2)), np.zeros((4, 3, 3)))
    with exact(ValueError, r"need nid_features \(n,\) with gid_features \(n, k\), or \(n, F\) with \(n, k, F\); got \(4, 2\) and \(4, 3\)"):
        dataset_inference(np.zeros((4, 2)), np.zeros((4, 3)))
    with exact(ValueError, r"need nid_features \(n,\) with gid_features \(n, k\), or \(n, F\) with \(n, k, F\); got \(4, 2, 1\) and \(4, 3, 2, 1\)"):
        dataset_inference(np.zeros((4, 2, 1)), np.zeros((4, 3, 2, 1)))
    with exact(ValueError, r"each NID needs at least one GID"):
        dataset_inference(z1, np.zeros((4, 0)))
    with exact(ValueError, r"features must be finite"):
        dataset_inference(np.r_[np.nan, 0, 0, 0], z2)
    with exact(ValueError, r"features must be finite"):
        dataset_inference(z1, np.full((4, 3), np.inf))
    with exact(ValueError, r"alternative must be 'greater' or 'two-sided', got 'less'"):
        dataset_inference(z1, z2, alternative="less")
    with exact(ValueError, r"n_splits must be an integer in \[2, n\] = \[2, 4\] with F > 1 features, got 5"):
        dataset_inference(np.zeros((4, 2)), np.zeros((4, 3, 2)), n_splits=5)
    with exact(ValueError, r"n_splits must be an integer in \[2, n\] = \[2, 4\] with F > 1 features, got 1"):
        dataset_inference(np.zeros((4, 2)), np.zeros((4, 3, 2)), n_splits=1)
    with exact(ValueError, r"n_splits must be an integer in \[2, n\] = \[2, 4\] with F > 1 features, got 2.0"):
        dataset_inference(np.zeros((4, 2)), np.zeros((4, 3, 2)), n_splits=2.0)
    # one score needs no folds; two folds are the minimum with features
    assert dataset_inference(z1, z2, n_splits=1).n == 4
    rng = np.random.default_rng(0)
    assert dataset_inference(rng.normal(size=(4, 2)), rng.normal(size=(4, 3, 2)), n_splits=2,
                             classifier=LogisticRegression()).n == 4
    assert dataset_inference(rng.normal(size=(4, 2)), rng.normal(size=(4, 3, 2)), n_splits=4,
                             classifier=LogisticRegression()).n_gids == 3


# --------------------------------------------------------------------------- experiment pieces
def test_experiment_encoding_and_dp_training_contract():
    from iclr26.evaluation.natural_identifiers import experiment as ex

    cfg = dict(ex.SCALES["smoke"], n_train=32, epochs=1)
    ids = generate_identifiers("hex", 32, 0)
    ctx, tgt = ex.encode(ids, cfg["window"])
    assert ctx.shape == (32, 16, 6) and tgt.shape == (32, 16)
    assert (ctx[:, 0] == 16).all() and (ctx[:, 1, -1] == tgt[:, 0]).all()  # padding, then the previous char
    model = ex.train(ids, cfg, 4.0, seed=0)
    assert isinstance(model, torch.nn.Sequential)  # the opacus wrapper is removed
    f = ex.featurize(model, ids[:5], cfg)
    assert f.shape == (5, 4) and np.isfinite(f).all()
    assert set(ex.SCALES) >= {"smoke", "quick", "paper"} and ex.SEEDS["quick"] == 5


@pytest.mark.slow
def test_quick_scale_claims_direction():
    from iclr26.evaluation.natural_identifiers import experiment as ex

    out = ex.run("quick", 0)
    m = out["metrics"]
    assert m["di_neglog10p"]["member"] > 2 > m["di_neglog10p"]["nonmember"]
    for eps in (1, 4, 8):
        assert m["eps_hat"][f"{eps}_c32"] < eps
    assert np.mean(m["null_reject"]["gbdt"]) < 0.05


# --------------------------------------------------------------------------- defaults and edge cases
def test_documented_defaults():
    # hits_tail: r = 1, delta = 0; dp_audit_epsilon: c = 2; reject: alpha = 0.01
    assert hits_tail(7, 10, 1.0, 4) == pytest.approx(reference_tail(7, 10, 1.0, 4, 1, 0.0), rel=1e-12)
    assert dp_audit_epsilon(70, 100) == dp_audit_epsilon(70, 100, cardinality=2, top_r=1, delta=0.0, beta=0.05)
    assert dp_audit_epsilon(1, 1, cardinality=32).m == 1  # a single audited NID is allowed
    r = DatasetInferenceResult(statistic=0.1, pvalue=0.5, ranks=np.zeros(1), n=1, n_gids=1, alternative="greater")
    assert not r.reject() and r.reject(0.6)
    assert DatasetInferenceResult(0.1, 0.009, np.zeros(1), 1, 1, "greater").reject()
    assert not DatasetInferenceResult(0.1, 0.01, np.zeros(1), 1, 1, "greater").reject()
    from iclr26.evaluation.natural_identifiers.inference import _default_classifier
    params = _default_classifier(123).get_params()
    assert (params["n_estimators"], params["max_depth"], params["learning_rate"], params["random_state"]) == (50, 2, 0.1, 123)


def test_delta_term_at_one_hit_and_at_every_hit():
    # one hit: the delta term is 2 m delta (1 - f(1)); every hit of two: the maximum sits at i = m
    for v, m in [(1, 10), (2, 2), (3, 3)]:
        assert hits_tail(v, m, 0.5, 8, 1, 0.01) == pytest.approx(reference_tail(v, m, 0.5, 8, 1, 0.01), rel=1e-12)
        assert hits_tail(v, m, 0.5, 8, 1, 0.01) > hits_tail(v, m, 0.5, 8, 1, 0.0)


def test_finder_keeps_looking_after_a_skipped_match():
    md5 = "d41d8cd98f00b204e9800998ecf8427e"
    # a bare slug is skipped, the one after a slash is still found
    assert find_nids(["Ab3dE9x then /Zz9yY8x"], kinds="short_url") == [(0, "short_url", "Zz9yY8x")]
    # a later kind's overlapping match is skipped, its next match is still found
    assert find_nids(["/0a1b2c3d and /Zz9yY8xw"], kinds=("hex", "short_url"), length=8) == [
        (0, "hex", "0a1b2c3d"), (0, "short_url", "Zz9yY8xw")]
    # characters outside the hex alphabet break a hash
    assert find_nids([md5[:-1] + "X"], kinds="md5") == []
    assert find_nids([md5[:-1] + "g"], kinds="md5") == []


def test_feature_inputs_that_need_care():
    lp, tg = peaked_logprobs()
    want = mia_features(lp, tg)
    # a tensor that requires grad (the model's output) is detached, not refused
    assert np.allclose(mia_features(lp.clone().requires_grad_(True), tg), want)
    # float32 input is computed in float64
    lp32 = lp.float()
    np.testing.assert_allclose(mia_features(lp32, tg), mia_features(lp32.double(), tg), rtol=1e-13, atol=1e-13)
    with exact(ValueError, r"targets must be token ids in \[0, 5\]"):
        mia_features(lp, torch.full_like(tg, 6))


def test_single_score_shapes_and_one_gid():
    z = np.zeros(4)
    assert dataset_inference(z, np.zeros((4, 3, 1)), random_state=0).n_gids == 3  # (n,) with (n, k, 1)
    np.testing.assert_allclose(dataset_inference(z, np.zeros((4, 3, 1)), random_state=0).ranks,
                               dataset_inference(z, np.zeros((4, 3)), random_state=0).ranks)
    one = dataset_inference(np.ones(6), np.zeros((6, 1)), random_state=0)
    assert one.n_gids == 1 and (one.ranks < 0.5).all()


def test_default_five_folds():
    # n = 5 NIDs with features: the default n_splits = 5 is allowed, 6 would not be
    rng = np.random.default_rng(5)
    r = dataset_inference(rng.normal(size=(5, 2)), rng.normal(size=(5, 3, 2)), classifier=LogisticRegression(),
                          random_state=0)
    assert r.n == 5


# --------------------------------------------------------------------------- split-sample dataset inference
class FirstFeature(BaseEstimator, ClassifierMixin):
    """A fixed score (the first feature) that records, on the class (the test clones it), what the
    last fitted copy was fitted on and what it scored."""
    def fit(self, X, y):
        self.classes_ = np.array([0, 1])
        FirstFeature.fit_X_, FirstFeature.fit_y_ = X.copy(), y.copy()
        return self

    def predict_proba(self, X):
        FirstFeature.scored_X_ = X.copy()
        s = 1 / (1 + np.exp(-X[:, 0]))
        return np.stack([1 - s, s], axis=1)


def test_split_sample_fits_on_one_half_and_ranks_the_other_by_hand():
    rng = np.random.default_rng(11)
    n, k = 20, 5
    nid, gid = rng.normal(size=(n, 2)), rng.normal(size=(n, k, 2))
    spy = FirstFeature()
    from iclr26.evaluation.natural_identifiers import inference as inf

    fit_idx = np.array([0, 3, 4, 9])
    test_idx = np.array([1, 2, 5])
    s_nid, s_gid = inf._split_fit(nid, gid, fit_idx, test_idx, spy, 0)
    fitted = spy.fit_X_.reshape(len(fit_idx), k + 1, 2)
    np.testing.assert_array_equal(fitted[:, 0], nid[fit_idx])          # the NID row, then its GIDs
    np.testing.assert_array_equal(fitted[:, 1:], gid[fit_idx])
    np.testing.assert_array_equal(spy.fit_y_, np.tile([1, 0, 0, 0, 0, 0], len(fit_idx)))
    np.testing.assert_allclose(s_nid, 1 / (1 + np.exp(-nid[test_idx, 0])))
    np.testing.assert_allclose(s_gid, 1 / (1 + np.exp(-gid[test_idx, :, 0])))

    r = dataset_inference(nid, gid, classifier=spy, split="half", random_state=3)
    assert (r.split, r.n_fit, r.n, r.n_gids) == ("half", 10, 10, k)
    fit_nids = spy.fit_X_.reshape(10, k + 1, 2)[:, 0]
    held = np.setdiff1d(np.arange(n), r.tested)
    np.testing.assert_array_equal(np.sort(fit_nids[:, 0]), np.sort(nid[held, 0]))      # disjoint halves
    assert len(np.intersect1d(held, r.tested)) == 0 and len(r.tested) == 10
    scored = spy.scored_X_.reshape(10, k + 1, 2)
    np.testing.assert_array_equal(scored[:, 0], nid[r.tested])                       # only the others scored
    # rank cells by hand: number of GIDs above the NID (no ties with continuous features)
    above = (gid[r.tested, :, 0] > nid[r.tested, None, 0]).sum(1)
    np.testing.assert_array_equal(np.floor(r.ranks * (k + 1)).astype(int), above)
    ref = stats.kstest(r.ranks, "uniform", alternative="greater")
    assert (r.statistic, r.pvalue) == (pytest.approx(ref.statistic), pytest.approx(ref.pvalue))
    # fit_fraction sets the size of the fitting part
    q = dataset_inference(nid, gid, classifier=FirstFeature(), split="half", fit_fraction=0.25, random_state=3)
    assert (q.n_fit, q.n, len(q.tested)) == (5, 15, 15)
    # at least one NID to fit and one to test
    assert dataset_inference(nid[:2], gid[:2], classifier=FirstFeature(), split="half", fit_fraction=0.01).n_fit == 1
    assert dataset_inference(nid[:2], gid[:2], classifier=FirstFeature(), split="half", fit_fraction=0.99).n == 1
    assert dataset_inference(nid, gid, classifier=FirstFeature(), split="half", fit_fraction=0.01).n_fit == 1
    # the default classifier (the GBDT) is used when none is given
    g = dataset_inference(nid, gid, split="half", random_state=0)
    assert g.n == 10 and 0 <= g.pvalue <= 1


def test_split_sample_result_fields_of_the_other_forms():
    rng = np.random.default_rng(12)
    nid, gid = rng.normal(size=(8, 2)), rng.normal(size=(8, 3, 2))
    c = dataset_inference(nid, gid, classifier=LogisticRegression(), n_splits=2, random_state=0)
    assert (c.split, c.n_fit, c.n) == ("crossfit", 0, 8)
    np.testing.assert_array_equal(c.tested, np.arange(8))
    one = dataset_inference(nid[:, 0], gid[..., 0], split="half", random_state=0)     # one score: no classifier
    assert (one.split, one.n_fit, one.n) == ("none", 0, 8)
    np.testing.assert_array_equal(one.tested, np.arange(8))
    # the cross-fitted default is unchanged by the new options
    np.testing.assert_allclose(c.ranks, dataset_inference(nid, gid, classifier=LogisticRegression(), n_splits=2,
                                                          random_state=0, split="crossfit").ranks)
    # the split is drawn from random_state: same state, same split; another state, another split
    a = dataset_inference(nid, gid, classifier=LogisticRegression(), split="half", random_state=1)
    b = dataset_inference(nid, gid, classifier=LogisticRegression(), split="half", random_state=1)
    np.testing.assert_array_equal(a.tested, b.tested) ; np.testing.assert_allclose(a.ranks, b.ranks)
    assert any(not np.array_equal(a.tested, dataset_inference(nid, gid, classifier=LogisticRegression(),
                                                               split="half", random_state=s).tested)
               for s in range(2, 6))


def test_split_sample_is_valid_under_the_null_where_cross_fitting_is_not():
    # pure-noise features; a 1-NN classifier memorises its training rows. The cross-fitted form ranks
    # NIDs scored by classifiers fitted on each other's labels (dependent ranks); the split form tests
    # only rows the classifier never saw, so its size is exactly alpha.
    rng = np.random.default_rng(13)
    knn = KNeighborsClassifier(n_neighbors=1)
    rej = [dataset_inference(rng.normal(size=(20, 4)), rng.normal(size=(20, 15, 4)), classifier=knn, split="half",
                             random_state=i).reject(0.05) for i in range(500)]
    lo, hi = stats.binomtest(int(np.sum(rej)), 500).proportion_ci(0.99)
    assert lo <= 0.05 <= hi
    lr = LogisticRegression()
    rej_lr = [dataset_inference(rng.normal(size=(20, 4)), rng.normal(size=(20, 15, 4)), classifier=lr, split="half",
                                random_state=i).reject(0.1) for i in range(200)]
    lo, hi = stats.binomtest(int(np.sum(rej_lr)), 200).proportion_ci(0.99)
    assert lo <= 0.1 <= hi


def test_split_sample_has_power_under_an_alternative():
    rng = np.random.default_rng(14)
    nid = rng.normal(size=(60, 3)); nid[:, 1] += 2.0
    r = dataset_inference(nid, rng.normal(size=(60, 15, 3)), classifier=LogisticRegression(), split="half",
                          random_state=0)
    assert r.pvalue < 1e-6 and r.n == 30
    # the classifier learns the orientation on the fitting half: a feature lower for members works too
    nid2 = rng.normal(size=(60, 3)); nid2[:, 0] -= 2.0
    assert dataset_inference(nid2, rng.normal(size=(60, 15, 3)), classifier=LogisticRegression(), split="half",
                             random_state=0).pvalue < 1e-6
    # a weak signal: the rejection rate at 0.05 is far above 0.05
    rej = []
    for i in range(60):
        nid3 = rng.normal(size=(40, 3)); nid3[:, 2] += 0.8
        rej.append(dataset_inference(nid3, rng.normal(size=(40, 15, 3)), classifier=LogisticRegression(),
                                     split="half", random_state=i).reject(0.05))
    assert np.mean(rej) > 0.5


def test_split_sample_rejects_bad_input():
    z, g = np.zeros((4, 2)), np.zeros((4, 3, 2))
    with exact(ValueError, r"split must be 'crossfit' or 'half', got 'thirds'"):
        dataset_inference(z, g, split="thirds")
    for bad in (0, 1, 0.0, 1.0, -0.5, 1.5, True, "0.5", None):
        with exact(ValueError, rf"fit_fraction must be a number in \(0, 1\), got {bad!r}"):
            dataset_inference(z, g, split="half", fit_fraction=bad)
    with exact(ValueError, r"split='half' needs at least 2 NIDs \(one to fit, one to test\), got 1"):
        dataset_inference(np.zeros((1, 2)), np.zeros((1, 3, 2)), split="half")
    # n_splits is not used by the split-sample form
    rng = np.random.default_rng(0)
    assert dataset_inference(rng.normal(size=(4, 2)), rng.normal(size=(4, 3, 2)), split="half", n_splits=99,
                             classifier=LogisticRegression()).n == 2
    assert dataset_inference(rng.normal(size=(4, 2)), rng.normal(size=(4, 3, 2)), split="half",
                             fit_fraction=np.float64(0.5), classifier=LogisticRegression()).n == 2
