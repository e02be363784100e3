"""CDA: scikit-learn contract, the performance score (Sec. 3.1), reductions and rejections."""
import numpy as np
import pytest
from sklearn.datasets import load_iris, make_blobs
from sklearn.utils.estimator_checks import parametrize_with_checks
from sklearn.utils._param_validation import InvalidParameterError

from iclr26.classical.cda import CentroidDiscriminantAnalysis, performance_score
from iclr26.classical.cda.experiment import (dataset_scores, fit_cpu_seconds, load_dataset, loglog_slope,
                                            pair_auroc, timing_replicate)


def brute_force_score(q, y):
    best = (-1, None)
    s = np.sort(np.unique(q))
    for t in (s[1:] + s[:-1]) / 2:
        pred = (q > t).astype(int)
        tp = np.sum((pred == 1) & (y == 1)); tn = np.sum((pred == 0) & (y == 0))
        fp = np.sum((pred == 1) & (y == 0)); fn = np.sum((pred == 0) & (y == 1))
        f1p = 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0
        f1n = 2 * tn / (2 * tn + fn + fp) if tn + fn + fp else 0
        ps = (f1p + f1n + (tp + tn) / len(y)) / 3
        if ps > best[0]:
            best = (ps, t)
    return best


def test_performance_score_matches_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(5):
        q = np.round(rng.normal(size=40), 1)  # ties included
        y = (q + rng.normal(size=40) > 0).astype(int)
        ps, cut = performance_score(q, y)
        ref_ps, ref_cut = brute_force_score(q, y)
        assert ps == pytest.approx(ref_ps) and cut == pytest.approx(ref_cut)


def test_zero_iterations_is_the_centroid_discriminant():
    X, y = make_blobs(200, n_features=5, centers=2, random_state=0)
    clf = CentroidDiscriminantAnalysis(max_iter=0).fit(X, y)
    cdb0 = X[y == 1].mean(0) - X[y == 0].mean(0)
    assert np.allclose(clf.coef_[0], cdb0 / np.linalg.norm(cdb0))


def test_rotations_never_lower_the_training_score():
    X, y = make_blobs(300, n_features=8, centers=2, cluster_std=4.0, random_state=1)
    base = CentroidDiscriminantAnalysis(max_iter=0).fit(X, y).scores_[0]
    tuned = CentroidDiscriminantAnalysis(max_iter=30, random_state=0).fit(X, y).scores_[0]
    assert tuned >= base


def test_separable_and_multiclass():
    X, y = load_iris(return_X_y=True)
    clf = CentroidDiscriminantAnalysis(random_state=0).fit(X, y)
    assert clf.coef_.shape == (3, 4) and clf.score(X, y) > 0.95
    assert clf.decision_function(X).shape == (150, 3)


def test_deterministic_under_random_state():
    X, y = make_blobs(200, n_features=6, centers=2, cluster_std=5, random_state=2)
    a = CentroidDiscriminantAnalysis(random_state=3).fit(X, y).coef_
    b = CentroidDiscriminantAnalysis(random_state=3).fit(X, y).coef_
    assert np.array_equal(a, b)


@pytest.mark.parametrize("params", [dict(search="random"), dict(max_iter=-1), dict(kernel="poly"),
                                    dict(kernel_scale=0), dict(tol=-1)])
def test_bad_parameters_are_rejected(params):
    X, y = make_blobs(20, centers=2, random_state=0)
    with pytest.raises(InvalidParameterError, match="parameter of CentroidDiscriminantAnalysis"):
        CentroidDiscriminantAnalysis(**params).fit(X, y)


def test_single_class_is_rejected():
    with pytest.raises(ValueError, match="at least 2 classes"):
        CentroidDiscriminantAnalysis().fit(np.ones((5, 2)), np.zeros(5))


def test_one_sample_per_class_is_rejected():
    X = np.random.default_rng(0).normal(size=(7, 3))
    y = np.array([0, 0, 0, 1, 1, 1, 2])
    with pytest.raises(ValueError, match=r"at least 2 samples per class.*\[2\] have 1 sample"):
        CentroidDiscriminantAnalysis().fit(X, y)


def test_constant_X_is_rejected():
    with pytest.raises(ValueError, match="X is constant"):
        CentroidDiscriminantAnalysis().fit(np.full((6, 3), 2.5), [0, 1, 0, 1, 0, 1])


def test_coincident_centroids_are_rejected():
    # X varies, but both classes share one centroid: CDB0 (the line between the centroids) is undefined
    X = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
    with pytest.raises(ValueError, match=r"classes 'a' and 'b'.*centroids coincide"):
        CentroidDiscriminantAnalysis().fit(X, ["a", "a", "b", "b"])


def test_performance_score_when_every_projection_ties():
    # one distinct value: the only rules predict a single class; 3 positives of 4
    ps, cut = performance_score(np.full(4, 0.7), np.array([1, 1, 1, 0]))
    # all positive: F1+ = 6/7, F1- = 0, accuracy 3/4
    assert ps == pytest.approx((6 / 7 + 0 + 3 / 4) / 3)
    assert cut < 0.7   # q - cut > 0 for every sample: all predicted positive
    ps, cut = performance_score(np.full(4, 0.7), np.array([0, 0, 0, 1]))
    assert ps == pytest.approx((6 / 7 + 0 + 3 / 4) / 3) and cut == 0.7   # all predicted negative


def test_pair_auroc_is_balanced_accuracy():
    from sklearn.metrics import balanced_accuracy_score

    rng = np.random.default_rng(1)
    yt = rng.random(200) < 0.3
    yp = np.where(rng.random(200) < 0.8, yt, ~yt)
    assert pair_auroc(yt, yp) == pytest.approx(balanced_accuracy_score(yt, yp))
    assert pair_auroc(yt, np.ones(200, bool)) == 0.5 == pair_auroc(yt, np.zeros(200, bool))
    # symmetric in which class is called positive
    assert pair_auroc(~yt, ~yp) == pytest.approx(pair_auroc(yt, yp))
    with pytest.raises(ValueError, match="both classes"):
        pair_auroc(np.ones(5, bool), np.ones(5, bool))


def test_loglog_slope_reference():
    sizes = np.array([1000, 2000, 4000, 8000])
    assert loglog_slope(sizes, 3e-6 * sizes ** 1.5) == pytest.approx(1.5)
    assert loglog_slope(sizes, 0.2 + 0 * sizes) == pytest.approx(0.0, abs=1e-12)


def test_fit_cpu_seconds_counts_this_process_only():
    class Sleeper:
        def fit(self, X, y):
            import time
            time.sleep(0.2)

    assert fit_cpu_seconds(Sleeper(), None, None) < 0.05   # sleeping costs no CPU time


def test_bundled_datasets_load_clean():
    for name in ("glass", "pima", "crabs"):
        X, y = load_dataset(name)
        assert X.ndim == 2 and len(X) == len(y) and np.isfinite(X).all() and (X.std(axis=0) > 0).all()
    X, y = load_dataset("pima")
    assert X.shape == (532, 7)              # Pima.tr + Pima.te, the row names dropped
    X, y = load_dataset("crabs")
    assert X.shape == (200, 5) and set(y) == {"B/F", "B/M", "O/F", "O/M"}


def test_dataset_scores_are_pair_aurocs():
    # glass: 4 classes of >= 15 samples (Con and Tabl dropped), 6 pairs, two splits; the baselines'
    # cross-validated fits are left to the contract tests, which run the whole experiment
    scores = dataset_scores("glass", splits=2, max_iter=3, seed=0, arms=("cda",))
    assert set(scores) == {"cda"} and 0.6 < scores["cda"] < 1


def test_timing_replicate_shapes():
    cfg = dict(max_iter=2, n_grid=(100, 200), svm_n_grid=(100, 200), m_fixed=5, m_grid=(5, 10), n_fixed=100)
    r = timing_replicate(cfg, 0)
    assert set(r["slope_n"]) == {"cda", "svm", "linear_svm_dual", "linear_svm"}
    assert set(r["slope_m"]) == {"cda", "lda"}
    assert all(len(v) == 2 for v in r["times_n"].values()) and all(np.isfinite(list(r["slope_n"].values())))


def _bo_reference(thetas, scores, ell=0.35, noise=1e-6):
    """GP posterior (scikit-learn, fixed RBF kernel on standardised scores) + expected improvement on 1-degree steps."""
    from scipy.stats import norm
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF

    z = (scores - scores.mean()) / (scores.std() or 1.0)
    gp = GaussianProcessRegressor(RBF(ell, "fixed"), alpha=noise + 1e-9, optimizer=None).fit(thetas[:, None], z)
    grid = np.deg2rad(np.linspace(-90, 90, 181))
    m, sd = gp.predict(grid[:, None], return_std=True)
    gap = m - z.max()
    ei = gap * norm.cdf(gap / sd) + sd * norm.pdf(gap / sd)
    ei[np.isin(grid, thetas)] = -np.inf
    return grid[np.argmax(ei)]


def test_bayesian_optimisation_step_matches_gp_reference():
    from iclr26.classical.cda.estimator import _AngleBO

    rng = np.random.default_rng(4)
    grid = np.deg2rad(np.linspace(-90, 90, 181))
    for k in range(2, 9):
        thetas = np.r_[0.0, rng.choice(grid, k - 1, replace=False)]
        scores = 0.7 + 0.2 * np.sin(2 * thetas + 1.0) + 0.01 * rng.normal(size=k)
        assert _AngleBO().next_angle(thetas, scores) == pytest.approx(_bo_reference(thetas, scores))
    # equal scores: no spread to standardise by, the search still moves away from the evaluated angles
    t = _AngleBO().next_angle(np.array([0.0, 0.5]), np.array([0.8, 0.8]))
    assert t not in (0.0, 0.5)


def _rotation_reference(X, y):
    """One CDA rotation by hand (Sec. 3.2), with the 5-degree grid search: (discriminant, cut, score)."""
    def cdb(w):
        v = (w[y == 1] @ X[y == 1]) / w[y == 1].sum() - (w[y == 0] @ X[y == 0]) / w[y == 0].sum()
        return v / np.linalg.norm(v)

    n = len(y)
    w = np.full(n, 1 / np.sqrt(n))
    v1 = cdb(w)
    ps0, cut0 = brute_force_score(X @ v1, y)
    d = np.abs(X @ v1 - cut0)
    d = d / d.sum()
    w = w * np.abs(d - d.min() - d.max())
    w = w / np.linalg.norm(w)
    v2 = cdb(w)
    v2 = v2 - v1 * (v2 @ v1)
    v2 = v2 / np.linalg.norm(v2)
    best = (v1, cut0, ps0)
    for theta in np.deg2rad(np.arange(-90, 91, 5)):
        v = np.cos(theta) * v1 + np.sin(theta) * v2
        ps, cut = brute_force_score(X @ v, y)
        if ps > best[2] + 1e-12:
            best = (v / np.linalg.norm(v), cut, ps)
    return best


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_one_rotation_matches_hand_computation(seed):
    X, y = make_blobs(120, n_features=4, centers=2, cluster_std=3.0, random_state=seed)
    X = X @ np.random.default_rng(seed).normal(size=(4, 4))      # correlated features: CDB0 is not optimal
    clf = CentroidDiscriminantAnalysis(max_iter=1, search="grid").fit(X, y)
    v, cut, ps = _rotation_reference(X, y)
    np.testing.assert_allclose(clf.coef_[0], v, atol=1e-10)
    assert clf.intercept_[0] == pytest.approx(-cut)
    assert clf.scores_[0] == pytest.approx(ps)
    assert clf.n_iter_ == 1


def test_stopping_rule_uses_the_last_ten_scores():
    X, y = make_blobs(150, n_features=5, centers=2, cluster_std=4.0, random_state=3)
    # any spread passes a huge tolerance: stop as soon as 10 scores exist (CDB0 + 9 rotations)
    assert CentroidDiscriminantAnalysis(max_iter=50, tol=10.0, search="grid").fit(X, y).n_iter_ == 9
    # tol = 0 never stops early
    assert CentroidDiscriminantAnalysis(max_iter=12, tol=0.0, search="grid").fit(X, y).n_iter_ == 12
    assert CentroidDiscriminantAnalysis(max_iter=0).fit(X, y).n_iter_ == 0


def test_weighted_centroid_direction():
    from iclr26.classical.cda.estimator import _weighted_cdb

    rng = np.random.default_rng(0)
    X, y, w = rng.normal(size=(30, 4)), np.r_[np.ones(12), np.zeros(18)].astype(int), rng.uniform(0.1, 1, 30)
    ref = np.average(X[y == 1], axis=0, weights=w[y == 1]) - np.average(X[y == 0], axis=0, weights=w[y == 0])
    np.testing.assert_allclose(_weighted_cdb(X, y, w), ref / np.linalg.norm(ref))
    Z = np.array([[1.0, 2.0], [1.0, 2.0], [3.0, 0.0], [3.0, 0.0]])
    assert not _weighted_cdb(Z[[0, 2, 1, 3]], np.array([1, 1, 0, 0]), np.ones(4)).any()   # equal centroids


def test_kernel_width_is_the_median_distance():
    from scipy.spatial.distance import pdist

    X, y = make_blobs(60, n_features=3, centers=2, random_state=0)
    clf = CentroidDiscriminantAnalysis(kernel="rbf", kernel_scale=2.0, max_iter=2, random_state=0).fit(X, y)
    sigma = 2.0 * np.median(pdist(X))
    assert clf.gamma_ == pytest.approx(1 / (2 * sigma ** 2))
    assert clf.coef_.shape == (1, 60)
    from sklearn.metrics.pairwise import rbf_kernel
    np.testing.assert_allclose(clf.decision_function(X[:5]),
                               rbf_kernel(X[:5], X, gamma=clf.gamma_) @ clf.coef_[0] + clf.intercept_[0])


def test_one_vs_one_votes_and_tie_break():
    X, y = load_iris(return_X_y=True)
    clf = CentroidDiscriminantAnalysis(max_iter=3, random_state=0).fit(X, y)
    pair = X @ clf.coef_.T + clf.intercept_
    votes = np.zeros((len(X), 3))
    for j, (a, b) in enumerate(clf.pairs_):
        votes[:, b] += pair[:, j] > 0
        votes[:, a] += pair[:, j] <= 0
    assert set(map(tuple, clf.pairs_)) == {(0, 1), (0, 2), (1, 2)}
    clear = np.sort(votes, axis=1)[:, -1] > np.sort(votes, axis=1)[:, -2]
    np.testing.assert_array_equal(clf.predict(X)[clear], votes.argmax(axis=1)[clear])
    # a cycle (each class wins one pair): the summed pair scores decide
    clf.coef_, clf.intercept_ = np.zeros((3, 4)), np.array([0.5, -2.0, 1.0])   # pairs (0,1), (0,2), (1,2)
    d = clf.decision_function(X[:1])
    np.testing.assert_array_equal(np.rint(d[0]), [1, 1, 1])                     # one vote each
    assert clf.predict(X[:1])[0] == 0      # class 0: +0.5 and +2.0 against -0.5 (class 1) and -1.0 (class 2)


def test_binary_decision_is_one_column():
    X, y = make_blobs(80, n_features=3, centers=2, random_state=5)
    clf = CentroidDiscriminantAnalysis(max_iter=3, random_state=0).fit(X, y)
    d = clf.decision_function(X)
    assert d.shape == (80,)
    np.testing.assert_allclose(d, X @ clf.coef_[0] + clf.intercept_[0])
    np.testing.assert_array_equal(clf.predict(X), clf.classes_[(d > 0).astype(int)])
    assert np.isclose(np.linalg.norm(clf.coef_[0]), 1.0)


@parametrize_with_checks([CentroidDiscriminantAnalysis(max_iter=5, random_state=0),
                          CentroidDiscriminantAnalysis(max_iter=3, kernel="rbf", random_state=0)])
def test_sklearn_contract(estimator, check):
    check(estimator)
