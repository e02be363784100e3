"""CDA: scikit-learn contract, the performance score (Sec. 3.1), reductions and rejections."""
import numpy as np
import pytest
from sklearn.datasets import load_iris, make_blobs
from sklearn.utils.estimator_checks import parametrize_with_checks
from sklearn.utils._param_validation import InvalidParameterError

from iclr26.classical.cda import CentroidDiscriminantAnalysis, performance_score


@parametrize_with_checks([CentroidDiscriminantAnalysis(max_iter=5, random_state=0),
                          CentroidDiscriminantAnalysis(max_iter=3, kernel="rbf", random_state=0)])
def test_sklearn_contract(estimator, check):
    check(estimator)


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
