"""Tests of the AND-OR template (ICLR 2026): max-entropy equations, SUM-MAX score, pursuit, expansion, contracts."""
import numpy as np
import pytest
from sklearn.metrics import roc_auc_score
from sklearn.utils.estimator_checks import parametrize_with_checks

from iclr26.vision.and_or_template import AndOrTemplate, block_gain, log_partition, moment_match
from iclr26.vision.and_or_template import data


# ---------------------------------------------------------------- equations (max-entropy terminal model)
def test_log_partition_is_log_mean_exp():
    rng = np.random.default_rng(0)
    ref = rng.random((50, 3))
    beta = np.array([0.0, 2.0, 7.5])
    direct = np.log(np.mean(np.exp(ref * beta), axis=0))
    np.testing.assert_allclose(log_partition(beta, ref), direct, rtol=1e-12)
    assert log_partition(np.zeros(3), ref) == pytest.approx(np.zeros(3))


def test_moment_match_solves_tilted_mean_equation():
    # E_{q_beta}[r] = sum_i r_i exp(beta r_i) / sum_i exp(beta r_i) must equal the target mean
    rng = np.random.default_rng(1)
    ref = rng.beta(1, 4, size=(200, 4))
    target = np.array([0.3, 0.5, 0.7, 0.25])
    beta = moment_match(target, ref, beta_max=30.0)
    w = np.exp(ref * beta)
    np.testing.assert_allclose((w * ref).sum(0) / w.sum(0), target, atol=1e-6)
    # below the reference mean the presence-only terminal has beta = 0
    assert moment_match(np.array([0.0]), ref[:, :1])[0] == pytest.approx(0.0, abs=1e-9)


def test_block_gain_is_rows_times_kl_of_the_tilted_reference():
    # per row, beta mu - log z(beta) at the moment-matched beta is KL(q_beta || q) of the tilted reference
    rng = np.random.default_rng(2)
    ref = rng.random((300, 2)) ** 2
    rows = 0.5 + 0.5 * rng.random((40, 2))
    gain, beta = block_gain(rows, ref)
    for j in range(2):
        w = np.exp(beta[j] * ref[:, j])
        w /= w.sum()
        kl = float(np.sum(w * np.log(w * ref.shape[0])))
        assert gain[j] == pytest.approx(40 * kl, rel=1e-6)


def _two_part_data(seed=0, n=60):
    """Columns 0-1: part A (variant 1), 2-3: part B (variant 2), 4-5: noise. Positives hold A or B."""
    rng = np.random.default_rng(seed)
    ref = rng.random((n, 6)) * 0.4
    pos = rng.random((n, 6)) * 0.4
    half = n // 2
    pos[:half, :2] = 0.8 + 0.2 * rng.random((half, 2))
    pos[half:, 2:4] = 0.8 + 0.2 * rng.random((n - half, 2))
    X = np.vstack([pos, ref])
    y = np.r_[np.ones(n), np.zeros(n)].astype(int)
    return X, y


def test_pursuit_finds_the_two_alternatives_as_one_or_node():
    X, y = _two_part_data()
    m = AndOrTemplate(sparsity=10.0).fit(X, y)
    terms = [sorted(b["terminals"]) for b in m.blocks_]
    assert [0, 1] in terms and [2, 3] in terms
    ka, kb = terms.index([0, 1]), terms.index([2, 3])
    # exclusive row sets: alternatives of one OR node
    assert any(ka in g and kb in g for g in m.or_nodes_)
    assert all(b["beta"].min() > 0 for b in m.blocks_)


def test_branch_frequencies_count_the_rows_each_branch_explains():
    # rho_k = count_k / n and the null branch takes the rows no alternative of its OR node fires on
    X, y = _two_part_data()
    m = AndOrTemplate(sparsity=10.0).fit(X, y)
    n = float(m.n_rows_)
    for g, members in enumerate(m.or_nodes_):
        c = np.array([max(m.blocks_[k]["count"], 0.5) for k in members])
        null = max(n - c.sum(), 0.5)
        np.testing.assert_allclose(np.exp(m.log_rho_[members]), c / (c.sum() + null), rtol=1e-12)
        assert np.exp(m.log_rho_null_[g]) == pytest.approx(null / (c.sum() + null), rel=1e-12)
        assert np.exp(m.log_rho_[members]).sum() + np.exp(m.log_rho_null_[g]) == pytest.approx(1.0)
    assert n == float(np.sum(y == m.classes_[1]))


def test_score_is_sum_max_of_the_documented_terms():
    X, y = _two_part_data(1)
    m = AndOrTemplate(sparsity=10.0).fit(X, y)
    Xt, _ = _two_part_data(5)
    ref = m.reference_
    manual = np.zeros(len(Xt))
    for g, members in enumerate(m.or_nodes_):
        best = np.full(len(Xt), m.log_rho_null_[g])
        for k in members:
            b = m.blocks_[k]
            cols = b["terminals"]
            logZ = np.log(np.mean(np.exp(ref[:, cols] * b["beta"]), axis=0)).sum()
            best = np.maximum(best, m.log_rho_[k] + Xt[:, cols] @ b["beta"] - logZ)
        manual += best
    np.testing.assert_allclose(m.template_score(Xt), manual, rtol=1e-10)
    np.testing.assert_allclose(m.decision_function(Xt), manual + np.log(60 / 60), rtol=1e-10)
    # branch frequencies and the null branch of an OR node sum to one
    for g, members in enumerate(m.or_nodes_):
        assert np.exp(m.log_rho_[members]).sum() + np.exp(m.log_rho_null_[g]) == pytest.approx(1.0)


def test_explain_contributions_sum_to_the_score_and_name_the_fired_branch():
    X, y = _two_part_data(2)
    m = AndOrTemplate(sparsity=10.0).fit(X, y)
    parse = m.explain(X[:3])
    np.testing.assert_allclose([p["score"] for p in parse], m.template_score(X[:3]), rtol=1e-10)
    for p in parse:
        assert p["score"] == pytest.approx(sum(n["contribution"] for n in p["or_nodes"]))
        fired = [n for n in p["or_nodes"] if n["branch"] is not None]
        assert fired
        for n in fired:
            b = m.blocks_[n["branch"]]
            ev = sum(t["evidence"] for t in n["terminals"])
            assert n["contribution"] == pytest.approx(ev + m.log_rho_[n["branch"]])
            assert [t["feature"] for t in n["terminals"]] == list(b["terminals"])
    # a reference row fires no branch
    ref_parse = m.explain(np.full((1, 6), 0.05))[0]
    assert all(n["branch"] is None for n in ref_parse["or_nodes"])


def test_prior_ratio_enters_the_decision_only():
    X, y = _two_part_data(3)
    keep = np.r_[np.arange(20), np.arange(60, 120)]  # 20 positives (part A only), 60 reference rows
    m = AndOrTemplate(sparsity=10.0).fit(X[keep], y[keep])
    np.testing.assert_allclose(m.decision_function(X) - m.template_score(X), np.log(20 / 60))
    np.testing.assert_allclose(m.predict_proba(X)[:, 1], 1 / (1 + np.exp(-m.decision_function(X))))


def test_local_mutual_exclusion_keeps_neighbouring_terminals_apart():
    X, y = _two_part_data(4)
    pos = np.array([[0.0], [1.0], [10.0], [11.0], [20.0], [30.0]])  # 0~1 and 2~3 are neighbours
    m = AndOrTemplate(sparsity=10.0, exclusion_radius=2.0, feature_positions=pos).fit(X, y)
    for b in m.blocks_:
        p = pos[b["terminals"], 0]
        assert np.all(np.abs(p[:, None] - p[None, :])[~np.eye(len(p), dtype=bool)] >= 2.0)


# ---------------------------------------------------------------- semi-supervised expansion
def test_expand_adds_the_missing_variant_branch():
    X, y = _two_part_data(6)
    only_a = np.r_[np.arange(30), np.arange(60, 120)]
    m = AndOrTemplate(sparsity=10.0).fit(X[only_a], y[only_a])
    assert [sorted(b["terminals"]) for b in m.blocks_] == [[0, 1]]
    rng = np.random.default_rng(7)
    unl = rng.random((40, 6)) * 0.4
    unl[:, 2:4] = 0.8 + 0.2 * rng.random((40, 2))
    before = m.template_score(unl).mean()
    m.expand(unl)
    assert [2, 3] in [sorted(b["terminals"]) for b in m.blocks_]
    assert m.template_score(unl).mean() > before + 1.0
    assert any(e["accepted"] for e in m.expansion_log_)


def test_expand_gate_rejects_weak_branches():
    X, y = _two_part_data(6)
    only_a = np.r_[np.arange(30), np.arange(60, 120)]
    m = AndOrTemplate(sparsity=10.0, gain_threshold=1e6).fit(X[only_a], y[only_a])
    rng = np.random.default_rng(7)
    unl = rng.random((40, 6)) * 0.4
    unl[:, 2:4] = 0.9
    m.expand(unl)
    assert len(m.blocks_) == 1 and not any(e["accepted"] for e in m.expansion_log_)


# ---------------------------------------------------------------- procedural data and learning
def test_generator_is_deterministic_and_responses_in_unit_interval():
    a = data.make_task("symmetry", 5, 5, np.random.default_rng(3))
    b = data.make_task("symmetry", 5, 5, np.random.default_rng(3))
    np.testing.assert_array_equal(a[0], b[0])
    R = data.terminal_responses(a[0])
    assert R.shape == (10, len(data.feature_table())) and R.min() >= 0 and R.max() <= 1


def test_noiseless_shape_gives_response_one_at_its_anchor():
    img = data.render([(2, 18, 18)], 0.0, np.random.default_rng(0))
    R = data.terminal_responses(img[None])[0]
    ft = data.feature_table()
    j = int(np.flatnonzero((ft[:, 0] == 2) & (ft[:, 1] == 18) & (ft[:, 2] == 18))[0])
    assert R[j] == pytest.approx(1.0)
    far = (ft[:, 0] == 2) & (np.hypot(ft[:, 1] - 18, ft[:, 2] - 18) > 9)
    assert R[far].max() < 0.05


def test_learns_the_diagonal_theme_and_parse_points_at_diagonal_crosses():
    rng = np.random.default_rng(0)
    imgs, y, _, _ = data.make_task("diagonal", 50, 100, rng, noise=0.2)
    timgs, ty, _, _ = data.make_task("diagonal", 100, 100, rng, noise=0.2)
    ft = data.feature_table()
    m = AndOrTemplate(sparsity=3.0, exclusion_radius=7.0, feature_positions=ft[:, 1:])
    m.fit(data.terminal_responses(imgs), y)
    assert roc_auc_score(ty, m.decision_function(data.terminal_responses(timgs))) > 0.8
    top = m.blocks_[0]
    kinds, xs, ys = ft[top["terminals"]].T
    assert np.mean(kinds == 2) >= 0.5  # mostly cross detectors
    assert np.all((np.abs(xs - ys) <= 4) | (np.abs(xs + ys - 36) <= 4))  # on a diagonal


def test_fit_is_deterministic():
    X, y = _two_part_data(8)
    a = AndOrTemplate().fit(X, y).decision_function(X)
    b = AndOrTemplate().fit(X, y).decision_function(X)
    np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------- rejection
@pytest.mark.parametrize("kw, message", [
    ({"n_blocks": 0}, "n_blocks must be an integer >= 1"), ({"n_blocks": 2.5}, "n_blocks must be"),
    ({"sparsity": -1.0}, "sparsity must be a finite number >= 0"), ({"sparsity": np.nan}, "sparsity must be"),
    ({"max_terminals": 0}, "max_terminals must be"), ({"beta_max": 0.0}, "beta_max must be a finite number > 0"),
    ({"or_overlap": 1.5}, "or_overlap must be a number in"), ({"min_support": -0.1}, "min_support must be"),
    ({"min_lift": 0.5}, "min_lift must be a finite number >= 1"),
    ({"consistency_threshold": 1.5}, "consistency_threshold must be a share in"),
    ({"exclusion_radius": -1}, "exclusion_radius must be"), ({"n_iter": True}, "n_iter must be"),
    ({"feature_positions": np.zeros((3, 2)), "exclusion_radius": 1.0}, "feature_positions must be"),
])
def test_rejects_bad_parameters(kw, message):
    X, y = _two_part_data()
    with pytest.raises(ValueError, match=message):
        AndOrTemplate(**kw).fit(X, y)


def test_rejects_nan_multiclass_and_unfitted():
    X, y = _two_part_data()
    Xn = X.copy()
    Xn[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        AndOrTemplate().fit(Xn, y)
    with pytest.raises(ValueError, match="binary"):
        AndOrTemplate().fit(X, np.arange(len(y)) % 3)
    with pytest.raises(Exception, match="not fitted"):
        AndOrTemplate().decision_function(X)
    m = AndOrTemplate().fit(X, y)
    with pytest.raises(ValueError, match="features"):
        m.decision_function(X[:, :3])
    with pytest.raises(ValueError, match="NaN"):
        m.expand(Xn)
    with pytest.raises(ValueError, match="images must have shape"):
        data.terminal_responses(np.zeros((2, 10, 10)))
    with pytest.raises(ValueError, match="theme must be one of"):
        data.make_task("golden", 1, 1, np.random.default_rng(0))


# ---------------------------------------------------------------- ecosystem contract
@parametrize_with_checks([AndOrTemplate(n_blocks=4)])
def test_sklearn_contract(estimator, check):
    check(estimator)
