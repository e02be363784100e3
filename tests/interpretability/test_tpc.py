"""TPC: the polynomial (equation against the explicit symmetric tensor), reductions, progressive
training, the cascade, the scikit-learn contract and rejections."""
import copy
import functools
import itertools

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.utils._param_validation import InvalidParameterError
from sklearn.utils.estimator_checks import parametrize_with_checks

from iclr26.interpretability.tpc import TruncatedPolynomialClassifier, order_flops, polynomial_logits
from iclr26.interpretability.tpc.experiment import make_task, mlp_width, run_task


def _quadratic_data(n=600, d=5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    u, v = rng.normal(size=d) / np.sqrt(d), rng.normal(size=d) / np.sqrt(d)
    y = (0.4 * X[:, 0] + 2 * (X @ u) ** 2 - 2 * (X @ v) ** 2 > 0).astype(int)
    return X, y


def _tensor_reference(x, bias, w, factors, lambdas, order):
    """f_n(x) = b + w.x + sum_o <W_o, x^{(x)o}> with W_o = sum_r lambda_r u_r (x) ... (x) u_r built explicitly."""
    f = bias + w @ x
    for o in range(2, order + 1):
        U, lam = factors[o - 2], lambdas[o - 2]
        d = len(x)
        W = np.zeros((d,) * o)
        for r in range(len(lam)):
            t = U[r]
            for _ in range(o - 1):
                t = np.multiply.outer(t, U[r])
            W += lam[r] * t
        total = 0.0
        for idx in itertools.product(range(d), repeat=o):
            total += W[idx] * np.prod(x[list(idx)])
        f += total
    return f


def test_polynomial_matches_explicit_tensor_contraction():
    rng = np.random.default_rng(1)
    d, R, N = 3, 2, 4
    X = rng.normal(size=(4, d))
    b, w = 0.3, rng.normal(size=d)
    U = [rng.normal(size=(R, d)) for _ in range(N - 1)]
    L = [rng.normal(size=R) for _ in range(N - 1)]
    fs = polynomial_logits(torch.as_tensor(X), torch.tensor(b, dtype=torch.float64), torch.as_tensor(w),
                           [torch.as_tensor(u) for u in U], [torch.as_tensor(l) for l in L])
    assert len(fs) == N
    for n in range(1, N + 1):
        ref = [_tensor_reference(x, b, w, U, L, n) for x in X]
        np.testing.assert_allclose(fs[n - 1].numpy(), ref, rtol=1e-10)
    # truncation: asking for order 2 returns only [f_1, f_2]
    assert len(polynomial_logits(torch.as_tensor(X), torch.tensor(b, dtype=torch.float64), torch.as_tensor(w),
                                 [torch.as_tensor(u) for u in U], [torch.as_tensor(l) for l in L], 2)) == 2


def test_fitted_decision_function_is_the_polynomial():
    X, y = _quadratic_data()
    clf = TruncatedPolynomialClassifier(max_order=3, rank=3, max_iter=60, random_state=0).fit(X, y)
    F = clf.staged_decision_function(X[:5])
    for n in (1, 2, 3):
        ref = [_tensor_reference(x, clf.intercept_, clf.coef_, clf.factors_, clf.lambdas_, n) for x in X[:5]]
        np.testing.assert_allclose(F[:, n - 1], ref, rtol=1e-9)
        np.testing.assert_allclose(clf.decision_function(X[:5], order=n), ref, rtol=1e-9)
    np.testing.assert_allclose(clf.decision_function(X[:5]), F[:, -1])
    p = clf.predict_proba(X[:5], order=2)
    np.testing.assert_allclose(p[:, 1], 1 / (1 + np.exp(-F[:, 1])))
    np.testing.assert_allclose(p.sum(1), 1)
    np.testing.assert_array_equal(clf.predict(X, order=1), clf.classes_[(clf.decision_function(X, 1) > 0).astype(int)])
    assert clf.n_params_ == 1 + 5 + 2 * (3 * 5 + 3)


def test_order_one_is_logistic_regression():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(800, 4))
    y = (X @ np.array([1.0, -2.0, 0.5, 0.0]) + 0.3 + rng.logistic(size=800) > 0).astype(int)
    tpc = TruncatedPolynomialClassifier(max_order=1, max_iter=1500, learning_rate=0.05, weight_decay=0.0,
                                        random_state=0).fit(X, y)
    lr = LogisticRegression(C=1e6).fit(X, y)
    np.testing.assert_allclose(tpc.coef_, lr.coef_[0], atol=0.03)
    assert tpc.intercept_ == pytest.approx(lr.intercept_[0], abs=0.03)
    assert tpc.factors_ == [] and tpc.n_params_ == 5


def test_progressive_training_freezes_lower_orders():
    X, y = _quadratic_data(seed=3)
    lin = TruncatedPolynomialClassifier(max_order=1, max_iter=80, random_state=4).fit(X, y)
    full = TruncatedPolynomialClassifier(max_order=3, rank=3, max_iter=80, random_state=4).fit(X, y)
    np.testing.assert_array_equal(lin.coef_, full.coef_)
    assert lin.intercept_ == full.intercept_
    two = TruncatedPolynomialClassifier(max_order=2, rank=3, max_iter=80, random_state=4).fit(X, y)
    np.testing.assert_array_equal(two.factors_[0], full.factors_[0])
    np.testing.assert_array_equal(two.lambdas_[0], full.lambdas_[0])
    assert len(full.loss_curve_) == 3 * 80
    # each stage lowers its loss; adding the quadratic term helps on a quadratic rule
    c = full.loss_curve_
    assert c[79] < c[0] and c[159] < c[80] and c[159] < c[79] - 0.05
    assert full.score(X, y) > lin.score(X, y) + 0.1


def test_joint_training_mode_trains_all_terms():
    X, y = _quadratic_data(seed=5)
    a = TruncatedPolynomialClassifier(max_order=2, rank=3, max_iter=60, train_mode="all", random_state=0).fit(X, y)
    p = TruncatedPolynomialClassifier(max_order=2, rank=3, max_iter=60, random_state=0).fit(X, y)
    assert len(a.loss_curve_) == 120
    assert not np.allclose(a.coef_, p.coef_)
    # mean BCE over both truncations, reported at the last step
    assert a.score(X, y) > 0.7 and a.n_iter_ == 120 and a.loss_curve_[-1] < a.loss_curve_[0]


def test_term_dropout_changes_training_and_is_seeded():
    X, y = _quadratic_data(seed=6)
    kw = dict(max_order=2, rank=2, max_iter=40, random_state=1)
    a = TruncatedPolynomialClassifier(term_dropout=0.5, **kw).fit(X, y)
    b = TruncatedPolynomialClassifier(term_dropout=0.5, **kw).fit(X, y)
    c = TruncatedPolynomialClassifier(**kw).fit(X, y)
    np.testing.assert_array_equal(a.factors_[0], b.factors_[0])
    assert not np.allclose(a.factors_[0], c.factors_[0])
    np.testing.assert_array_equal(a.coef_, c.coef_)     # the linear stage has no lower term to drop


def test_random_state_instance_and_none():
    X, y = _quadratic_data(n=100)
    a = TruncatedPolynomialClassifier(max_order=2, rank=2, max_iter=5,
                                      random_state=np.random.RandomState(0)).fit(X, y)
    b = TruncatedPolynomialClassifier(max_order=2, rank=2, max_iter=5,
                                      random_state=np.random.RandomState(0)).fit(X, y)
    np.testing.assert_array_equal(a.factors_[0], b.factors_[0])
    TruncatedPolynomialClassifier(max_order=2, rank=2, max_iter=5).fit(X, y)


@functools.lru_cache(maxsize=None)
def _fitted_cached(seed):
    X, y = _quadratic_data(n=900, seed=seed)
    clf = TruncatedPolynomialClassifier(max_order=3, rank=3, max_iter=150, learning_rate=0.03,
                                        random_state=seed).fit(X[:500], y[:500])
    return clf, X, y


def _fitted(seed=0):
    clf, X, y = _fitted_cached(seed)
    return copy.deepcopy(clf), X, y


def test_cascade_against_hand_computation():
    clf, X, y = _fitted()
    F = clf.staged_decision_function(X)
    thr = np.array([1.0, 0.5])
    pred, exit_order = clf.cascade_predict(X, thresholds=thr)
    ref_exit = np.where(np.abs(F[:, 0]) > 1.0, 1, np.where(np.abs(F[:, 1]) > 0.5, 2, 3))
    np.testing.assert_array_equal(exit_order, ref_exit)
    ref_logit = F[np.arange(len(X)), ref_exit - 1]
    np.testing.assert_array_equal(pred, clf.classes_[(ref_logit > 0).astype(int)])
    assert set(np.unique(exit_order)) == {1, 2, 3}
    # a threshold exactly at |f_1| does not exit (strict inequality)
    i = 0
    p2, e2 = clf.cascade_predict(X[:1], thresholds=[abs(F[i, 0]), np.inf])
    assert e2[0] == 3
    # the private logits-based rule agrees with the incremental evaluation
    p3, e3 = clf._cascade_from_logits(F, thr)
    np.testing.assert_array_equal(e3, exit_order)
    np.testing.assert_array_equal(clf.classes_[p3], pred)


def test_cascade_extremes_reduce_to_fixed_orders():
    clf, X, y = _fitted(0)
    p, e = clf.cascade_predict(X, thresholds=[0.0, 0.0])
    np.testing.assert_array_equal(p, clf.predict(X, order=1))
    assert (e == 1).all() and clf.cascade_cost(e) == pytest.approx(order_flops(5, 3, 1) / sum(
        order_flops(5, 3, o) for o in (1, 2, 3)))
    p, e = clf.cascade_predict(X, thresholds=[np.inf, np.inf, np.inf])
    np.testing.assert_array_equal(p, clf.predict(X))
    assert (e == 3).all() and clf.cascade_cost(e) == 1.0


def test_order_flops():
    assert order_flops(16, 4, 1) == 33
    assert order_flops(16, 4, 2) == 2 * 16 * 4 + 4 + 8
    assert order_flops(16, 4, 3) == 2 * 16 * 4 + 8 + 8


def test_calibrate_cascade_on_validation():
    clf, X, y = _fitted(2)
    Xv, yv = X[500:700], y[500:700]
    clf.calibrate_cascade(Xv, yv, keep=0.99)
    F = clf.staged_decision_function(Xv)
    # temperatures minimise each order's validation log loss over the grid
    for n in range(3):
        def nll(T):
            z = F[:, n] / T
            return np.mean(np.logaddexp(0, z) - yv * z)
        T = clf.temperatures_[n]
        assert nll(T) <= nll(T * 1.2) + 1e-12 and nll(T) <= nll(T / 1.2) + 1e-12
    np.testing.assert_allclose(clf.cascade_thresholds_, clf.temperatures_ * np.log(clf.cascade_tau_ / (1 - clf.cascade_tau_)))
    pred, e = clf.cascade_predict(Xv)
    full = clf.score(Xv, yv)
    assert np.mean(pred == yv) >= 0.99 * full - 1e-12
    assert clf.cascade_cost(e) < 1.0
    # the cheapest such tau: the next smaller candidate breaks the 99 % bar or costs no less
    taus = np.linspace(0.5, 0.999, 100)
    k = int(np.argmin(np.abs(taus - clf.cascade_tau_)))
    if k > 0:
        thr = clf.temperatures_ * np.log(taus[k - 1] / (1 - taus[k - 1]))
        p2, e2 = clf.cascade_predict(Xv, thresholds=thr)
        assert np.mean(p2 == yv) < 0.99 * full or clf.cascade_cost(e2) >= clf.cascade_cost(e)
    # keep = 1 with a single, unreachable-cheap candidate: still meets the bar
    clf.calibrate_cascade(Xv, yv, keep=1.0, taus=[0.5])
    p, e = clf.cascade_predict(Xv)
    if clf.cascade_tau_ == 1.0:
        assert (e == 3).all()
    else:
        assert np.mean(p == yv) >= full - 1e-12


def test_cascade_rejections():
    clf, X, y = _fitted(2)
    with pytest.raises(ValueError, match="calibrate_cascade"):
        clf.cascade_predict(X)
    with pytest.raises(ValueError, match="thresholds must be 2 or 3 non-negative"):
        clf.cascade_predict(X, thresholds=[1.0])
    with pytest.raises(ValueError, match="non-negative"):
        clf.cascade_predict(X, thresholds=[-1.0, 1.0])
    with pytest.raises(ValueError, match="keep must be in"):
        clf.calibrate_cascade(X, y, keep=0)
    with pytest.raises(ValueError, match="taus must be"):
        clf.calibrate_cascade(X, y, taus=[0.3])
    with pytest.raises(ValueError, match="different lengths"):
        clf.calibrate_cascade(X, y[:-1])
    with pytest.raises(ValueError, match=r"labels not seen in fit: \[7\]"):
        clf.calibrate_cascade(X[:3], [0, 1, 7])
    with pytest.raises(ValueError, match="exit_order must be"):
        clf.cascade_cost([0, 1])
    with pytest.raises(ValueError, match="exit_order must be"):
        clf.cascade_cost([4])


@pytest.mark.parametrize("order", [0, 4, 2.0, True, "2"])
def test_bad_order_is_rejected(order):
    clf, X, y = _fitted(0)
    with pytest.raises(ValueError, match=r"order must be an integer in 1\.\.3"):
        clf.decision_function(X, order=order)


def test_multiclass_is_rejected():
    X = np.random.default_rng(0).normal(size=(9, 2))
    with pytest.raises(ValueError, match=r"Only binary classification is supported.*exactly 2 classes, got 3 classes"):
        TruncatedPolynomialClassifier(max_iter=2).fit(X, [0, 1, 2] * 3)


def test_continuous_target_is_rejected():
    with pytest.raises(ValueError, match="Unknown label type"):
        TruncatedPolynomialClassifier(max_iter=2).fit(np.ones((4, 2)), [0.1, 0.2, 0.3, 0.4])


@pytest.mark.parametrize("params", [dict(max_order=0), dict(max_order=9), dict(rank=0), dict(train_mode="random"),
                                    dict(max_iter=0), dict(learning_rate=0), dict(weight_decay=-1),
                                    dict(term_dropout=1.0)])
def test_bad_parameters_are_rejected(params):
    with pytest.raises(InvalidParameterError, match="parameter of TruncatedPolynomialClassifier"):
        TruncatedPolynomialClassifier(**params).fit(np.eye(4), [0, 1, 0, 1])


def test_synthetic_task_and_mlp_width():
    rng = np.random.default_rng(0)
    X, y = make_task("poly", 8, 0, 0.1, rng)(4000)
    assert X.shape == (4000, 8) and abs(y.mean() - 0.5) < 0.04
    X, y = make_task("linear", 8, 0, 0.0, rng)(2000)
    # a noiseless linear rule is separable by a hyperplane
    assert LogisticRegression(C=1e4, max_iter=2000).fit(X, y).score(X, y) > 0.99
    with pytest.raises(ValueError, match="rule must be"):
        make_task("cubic", 8, 0, 0.1, rng)
    assert mlp_width(153, 16) == 8 and mlp_width(1, 16) == 1


def test_run_task_reports_every_arm():
    cfg = dict(d=5, rank=2, n_train=200, n_val=150, n_test=200, max_iter=20, mlp_iter=30, noise=0.1,
               tpc_lrs=(1e-2,), mlp_alphas=(1e-3,))
    out = run_task("poly", cfg, np.random.default_rng(0), 0)
    for k in ("order1", "order2", "order3", "mlp", "cascade"):
        assert 0 <= out[k] <= 1
    assert out["tpc_params"] == 1 + 5 + 2 * (2 * 5 + 2) and abs(out["mlp_params"] - out["tpc_params"]) <= 5 + 2
    assert 0 < out["cascade_cost"] <= 1 and 1 <= out["cascade_mean_exit_order"] <= 3 and out["cascade99_cost"] <= out["cascade_cost"]


@parametrize_with_checks([TruncatedPolynomialClassifier(max_order=2, rank=2, max_iter=40, learning_rate=0.1,
                                                        random_state=0)])
def test_sklearn_contract(estimator, check):
    check(estimator)


def _reference_progressive_fit(X, y, N, R, steps, lr, wd, seed):
    """Progressive training written out by hand: nn.Linear-style init, AdamW per stage with a fresh
    optimiser (learning rate reset), lower orders frozen, BCE on the top truncation, clipping at norm 1."""
    rs = np.random.RandomState(seed).randint(2**31 - 1)
    gen = torch.Generator().manual_seed(int(rs))
    n, d = X.shape
    bound = 1 / np.sqrt(d)
    Xt, yt = torch.tensor(X), torch.tensor(y, dtype=torch.float64)
    b = torch.zeros((), dtype=torch.float64, requires_grad=True)
    w = ((torch.rand(d, generator=gen, dtype=torch.float64) * 2 - 1) * bound).requires_grad_()
    U, L = [], []
    for _ in range(N - 1):
        U.append(((torch.rand(R, d, generator=gen, dtype=torch.float64) * 2 - 1) * bound).requires_grad_())
        L.append((torch.randn(R, generator=gen, dtype=torch.float64) * 0.02).requires_grad_())

    def logit(order):
        f = Xt @ w + b
        for o in range(2, order + 1):
            f = f + ((Xt @ U[o - 2].T) ** o * L[o - 2]).sum(1)
        return f

    for order in range(1, N + 1):
        params = [b, w] if order == 1 else [U[order - 2], L[order - 2]]
        opt = torch.optim.AdamW(params, lr=lr, weight_decay=wd)
        for _ in range(steps):
            opt.zero_grad()
            f = logit(order)
            loss = -(yt * torch.nn.functional.logsigmoid(f) + (1 - yt) * torch.nn.functional.logsigmoid(-f)).mean()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
    return b.item(), w.detach().numpy(), [u.detach().numpy() for u in U], [l.detach().numpy() for l in L]


def test_progressive_fit_matches_hand_written_training():
    X, y = _quadratic_data(n=200, d=4, seed=7)
    X = 3 * X                                  # large gradients: clipping is active
    clf = TruncatedPolynomialClassifier(max_order=3, rank=2, max_iter=25, learning_rate=0.05, weight_decay=0.1,
                                        random_state=11).fit(X, y)
    b, w, U, L = _reference_progressive_fit(X, y, 3, 2, 25, 0.05, 0.1, 11)
    assert clf.intercept_ == pytest.approx(b, abs=1e-10)
    np.testing.assert_allclose(clf.coef_, w, atol=1e-10)
    for o in range(2):
        np.testing.assert_allclose(clf.factors_[o], U[o], atol=1e-10)
        np.testing.assert_allclose(clf.lambdas_[o], L[o], atol=1e-10)
    assert clf.classes_.tolist() == [0, 1] and clf.n_features_in_ == 4
    assert clf.cascade_thresholds_ is None and (clf.temperatures_ == 1).all()


# --------------------------------------------------------------------------- real activations (experiment data)
def test_prompt_set_shares_frames_between_classes():
    from iclr26.interpretability.tpc.experiment import BENIGN, FRAMES, HARMFUL, prompt_set

    assert len(FRAMES) == 16 and len(HARMFUL) == len(BENIGN) == 50
    assert len(set(HARMFUL)) == 50 and len(set(BENIGN)) == 50 and not set(HARMFUL) & set(BENIGN)
    texts, labels, frames, acts = prompt_set(3, 4)
    assert len(texts) == 2 * 3 * 4 and labels.sum() == 12
    assert texts[0] == FRAMES[0].format(HARMFUL[0]) and texts[-1] == FRAMES[2].format(BENIGN[3])
    # every frame occurs equally often in both classes: the frame carries no label
    for f in range(3):
        assert ((frames == f) & (labels == 1)).sum() == ((frames == f) & (labels == 0)).sum() == 4
    assert set(acts) == {0, 1, 2, 3}


def test_real_split_keeps_frames_and_activities_apart():
    from iclr26.interpretability.tpc.experiment import SCALES, prompt_set, real_split

    cfg = SCALES["quick"]["real"]
    texts, labels, frames, acts = prompt_set(cfg["n_frames"], cfg["n_acts"])
    tr, va, te = real_split(frames, acts, labels, cfg, np.random.default_rng(0))
    assert (tr.sum(), va.sum(), te.sum()) == (2 * 7 * 22, 2 * 4 * 12, 2 * 5 * 16)
    assert not (tr & va).any() and not (tr & te).any() and not (va & te).any()
    for a, b in ((tr, va), (tr, te), (va, te)):
        assert not set(frames[a]) & set(frames[b])                           # no shared frame
        for lab in (0, 1):                                                   # no shared activity
            assert not set(acts[a & (labels == lab)]) & set(acts[b & (labels == lab)])
    for m in (tr, va, te):
        assert labels[m].mean() == 0.5
    tr2, _, _ = real_split(frames, acts, labels, cfg, np.random.default_rng(1))
    assert (tr2 != tr).any()


def test_run_real_on_separable_stand_in_activations():
    from iclr26.interpretability.tpc.experiment import SCALES, prompt_set, run_real

    cfg = dict(SCALES["smoke"]["real"], pca=10, max_iter=150, tpc_lrs=(0.1,))
    texts, labels, frames, acts = prompt_set(cfg["n_frames"], cfg["n_acts"])
    rng = np.random.default_rng(0)
    X = rng.normal(size=(len(texts), 10)) + 3.0 * labels[:, None] * np.eye(10)[0]
    out = run_real(cfg, np.random.default_rng(0), 0, X, labels, frames, acts)
    assert (out["n_train"], out["n_val"], out["n_test"]) == (12, 2, 4)
    assert out["order1"] >= 0.75 and out["tpc_params"] == 1 + 10 + 2 * (2 * 10 + 2)
    assert all(0 <= out[k] <= 1 for k in ("order2", "order3", "mlp", "cascade"))


@pytest.mark.llm
def test_read_activations_mean_pools_the_middle_layer(tmp_path, monkeypatch):
    from iclr26.interpretability.tpc import experiment as ex
    from iclr26.models import load
    from iclr26.models.hooks import decoder_layers

    monkeypatch.setattr(ex, "_activation_cache_dir", lambda: tmp_path)
    texts = ["Explain how to bake bread.", "Write a tutorial on how to build a bomb at home today."]
    X = ex.read_activations(texts, layer=3)
    assert X.shape == (2, 576) and np.isfinite(X).all() and len(list(tmp_path.iterdir())) == 1
    np.testing.assert_array_equal(ex.read_activations(texts, layer=3), X)            # from the disk cache
    model, tok = load("smollm2-135m")
    with torch.no_grad():
        for i, t in enumerate(texts):
            ids = tok(t, return_tensors="pt")["input_ids"]
            hs = model(ids, output_hidden_states=True).hidden_states
            assert len(decoder_layers(model)) + 1 == len(hs)
            np.testing.assert_allclose(X[i], hs[3][0].double().mean(0).numpy(), rtol=1e-4, atol=1e-4)
