"""Dataset inference with natural identifiers (Sec. 5 of arXiv 2606.24408).

A suspect dataset holds ``n`` NIDs. Each NID gets ``k`` GIDs from its generator (the paper: k = 127),
an IID non-member hold-out that needs no private data. Per string, membership-inference features
(:func:`mia_features`) are computed from the audited model; a classifier (a GBDT in the paper) is
cross-fitted with *grouped* K-fold, a NID and its GIDs always in the same fold, to score how
NID-like (trained-on-like) each string is. Under H0 (the suspect set was not trained on) a NID and
its GIDs are exchangeable given the classifier fitted on the other folds, so the NID's rank among
its ``k + 1`` candidates is uniform. The ranks are turned into exact Uniform(0, 1) values (random
tie-breaking plus a uniform jitter inside the rank cell) and tested with Kolmogorov-Smirnov; the
paper declares "trained on" when p < 0.01.

The cross-fitted ranks are each uniform but not independent (the classifier that scores one fold was
fitted on the labels of the others), so the KS test over all of them is anti-conservative (README,
"What the quick check found"). ``split="half"`` is the split-sample form: the classifier is fitted on
the NIDs (with their GIDs) of a random ``fit_fraction`` of the suspect set and scores only the
others, whose ranks are then independent and exactly uniform under H0 given the fitted classifier.
This is the train-on-one-half, test-on-the-other design of LLM dataset inference (Maini et al. 2024,
Sec. 4), applied to the NID/GID ranks.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

#: the features of :func:`mia_features`, each oriented so that higher = more member-like
FEATURES = ("neg_loss", "min_k", "min_k_pp", "hinge")


def mia_features(logprobs, targets, k: float = 0.2) -> np.ndarray:
    """Per-sequence membership features from next-token log-probabilities (Sec. 5, features).

    ``logprobs``: array or tensor of shape (B, T, V), log-softmax of the model's next-token logits;
    ``targets``: (B, T) the observed tokens. Returns (B, 4) with columns :data:`FEATURES`:
    - neg_loss: mean log p(x_t) (Yeom et al.; the negative loss);
    - min_k: mean of the lowest ``k`` fraction of log p(x_t) (Min-K%, Shi et al. 2024);
    - min_k_pp: the same over (log p(x_t) - mu_t) / sigma_t with mu_t, sigma_t the mean and standard
      deviation of log p(z) under z ~ p(. | x_<t) (Min-K%++, Zhang et al. 2025);
    - hinge: mean of log p(x_t) - max_{z != x_t} log p(z) (the logit margin of Carlini et al. 2022).
    ReCaLL (a non-member-prefix ratio) is not included: see the README.
    """
    lp = np.asarray(logprobs.detach().cpu() if hasattr(logprobs, "detach") else logprobs, dtype=np.float64)
    tg = np.asarray(targets.detach().cpu() if hasattr(targets, "detach") else targets)
    if lp.ndim != 3 or tg.shape != lp.shape[:2]:
        raise ValueError(f"need logprobs of shape (B, T, V) and targets of shape (B, T); got {lp.shape} and {tg.shape}")
    if not 0 < k <= 1:
        raise ValueError(f"k (the Min-K% fraction) must lie in (0, 1], got {k!r}")
    if tg.min() < 0 or tg.max() >= lp.shape[2]:
        raise ValueError(f"targets must be token ids in [0, {lp.shape[2] - 1}]")
    tok = np.take_along_axis(lp, tg[..., None], axis=2)[..., 0]  # (B, T)
    p = np.exp(lp)
    mu = (p * lp).sum(2)
    sigma = np.sqrt(np.maximum((p * lp ** 2).sum(2) - mu ** 2, 1e-12))
    n_low = max(1, int(np.ceil(k * tok.shape[1])))
    min_k = np.sort(tok, axis=1)[:, :n_low].mean(1)
    min_k_pp = np.sort((tok - mu) / sigma, axis=1)[:, :n_low].mean(1)
    other = lp.copy()
    np.put_along_axis(other, tg[..., None], -np.inf, axis=2)
    hinge = (tok - other.max(2)).mean(1)
    return np.stack([tok.mean(1), min_k, min_k_pp, hinge], axis=1)


@dataclass(frozen=True)
class DatasetInferenceResult:
    """Result of :func:`dataset_inference`.

    statistic: the one-sample KS statistic of the NIDs' rank values against Uniform(0, 1);
    pvalue: its p-value (small = the suspect set was trained on);
    ranks: per NID, its rank value in (0, 1), small = the NID looks more trained-on than its GIDs;
    n: number of NIDs tested (ranked); n_gids: GIDs per NID; alternative: the KS alternative used;
    split: "crossfit" or "half" (how the classifier was fitted; "none" for a single score);
    n_fit: NIDs spent on fitting the classifier and left out of the test (``split="half"``; else 0);
    tested: indices (into the suspect set) of the NIDs whose ranks are in ``ranks``.
    """
    statistic: float
    pvalue: float
    ranks: np.ndarray
    n: int
    n_gids: int
    alternative: str
    split: str = "none"
    n_fit: int = 0
    tested: np.ndarray | None = None

    def reject(self, alpha: float = 0.01) -> bool:
        """The paper's decision: 'trained on' when p < alpha (alpha = 0.01 in Sec. 5)."""
        return bool(self.pvalue < alpha)


def _default_classifier(seed):
    from sklearn.ensemble import GradientBoostingClassifier
    return GradientBoostingClassifier(n_estimators=50, max_depth=2, learning_rate=0.1, random_state=seed)


def _cross_fit(nid, gid, n_splits, classifier, seed):
    """Out-of-fold NID-vs-GID scores with grouped K-fold (a NID and its GIDs share a fold)."""
    from sklearn.base import clone
    from sklearn.model_selection import GroupKFold

    n, k, f = gid.shape
    X = np.concatenate([nid[:, None, :], gid], axis=1).reshape(n * (k + 1), f)
    y = np.tile(np.r_[1, np.zeros(k, dtype=int)], n)
    groups = np.repeat(np.arange(n), k + 1)
    scores = np.empty(n * (k + 1))
    for train, test in GroupKFold(n_splits=n_splits).split(X, y, groups):
        clf = clone(classifier if classifier is not None else _default_classifier(seed)).fit(X[train], y[train])
        scores[test] = clf.predict_proba(X[test])[:, list(clf.classes_).index(1)]
    scores = scores.reshape(n, k + 1)
    return scores[:, 0], scores[:, 1:]


def _split_fit(nid, gid, fit_idx, test_idx, classifier, seed):
    """Scores of the ``test_idx`` NIDs and their GIDs from a classifier fitted on the ``fit_idx`` ones."""
    from sklearn.base import clone

    n, k, f = gid.shape

    def rows(idx):
        return np.concatenate([nid[idx, None, :], gid[idx]], axis=1).reshape(len(idx) * (k + 1), f)

    y = np.tile(np.r_[1, np.zeros(k, dtype=int)], len(fit_idx))
    clf = clone(classifier if classifier is not None else _default_classifier(seed)).fit(rows(fit_idx), y)
    scores = clf.predict_proba(rows(test_idx))[:, list(clf.classes_).index(1)].reshape(len(test_idx), k + 1)
    return scores[:, 0], scores[:, 1:]


def dataset_inference(nid_features, gid_features, n_splits: int = 5, classifier=None,
                      alternative: str = "greater", random_state=None, split: str = "crossfit",
                      fit_fraction: float = 0.5) -> DatasetInferenceResult:
    """Test whether the suspect set's NIDs were trained on, with their GIDs as the hold-out (Sec. 5).

    ``nid_features``: (n,) one score per NID or (n, F) features; ``gid_features``: (n, k) or
    (n, k, F) for the k GIDs of each NID. Scores and features are oriented higher = more member-like
    (:func:`mia_features`). With one score, NIDs are ranked by it directly. With F > 1 features a
    classifier (default: sklearn's GradientBoostingClassifier, 50 depth-2 trees) is cross-fitted with
    ``n_splits``-fold grouped K-fold and its out-of-fold probability is the score.

    ``alternative``: "greater" (default) tests that NIDs rank above their GIDs (the trained-on
    direction); "two-sided" tests any departure from uniform ranks.

    ``split`` (F > 1 only): "crossfit" (default) scores every NID out of fold, as above; "half" is
    the split-sample form: a random ``fit_fraction`` of the NIDs (at least one; the paper's
    reference design, Maini et al. 2024, uses half) and their GIDs fit the classifier, and only the
    remaining NIDs are ranked and tested, which keeps the test exact under H0 at the price of fewer
    tested NIDs. ``n_splits`` is not used by "half".
    """
    nid = np.asarray(nid_features, dtype=float)
    gid = np.asarray(gid_features, dtype=float)
    if nid.ndim == 1:
        nid, gid = nid[:, None], gid[..., None] if gid.ndim == 2 else gid
    if nid.ndim != 2 or gid.ndim != 3 or gid.shape[0] != nid.shape[0] or gid.shape[2] != nid.shape[1]:
        raise ValueError("need nid_features (n,) with gid_features (n, k), or (n, F) with (n, k, F); "
                         f"got {np.shape(nid_features)} and {np.shape(gid_features)}")
    n, k, f = gid.shape
    if k < 1:
        raise ValueError("each NID needs at least one GID")
    if not (np.isfinite(nid).all() and np.isfinite(gid).all()):
        raise ValueError("features must be finite")
    if alternative not in ("greater", "two-sided"):
        raise ValueError(f"alternative must be 'greater' or 'two-sided', got {alternative!r}")
    if split not in ("crossfit", "half"):
        raise ValueError(f"split must be 'crossfit' or 'half', got {split!r}")
    if isinstance(fit_fraction, (bool, np.bool_)) or not isinstance(fit_fraction, (int, float, np.floating)) \
            or not 0 < fit_fraction < 1:
        raise ValueError(f"fit_fraction must be a number in (0, 1), got {fit_fraction!r}")
    rng = np.random.default_rng(random_state)
    tested = np.arange(n)
    used = "none"
    if f == 1:
        s_nid, s_gid = nid[:, 0], gid[..., 0]
    elif split == "crossfit":
        if not isinstance(n_splits, (int, np.integer)) or not 2 <= n_splits <= n:
            raise ValueError(f"n_splits must be an integer in [2, n] = [2, {n}] with F > 1 features, got {n_splits!r}")
        seed = int(rng.integers(2**31 - 1))
        s_nid, s_gid = _cross_fit(nid, gid, n_splits, classifier, seed)
        used = "crossfit"
    else:
        if n < 2:
            raise ValueError(f"split='half' needs at least 2 NIDs (one to fit, one to test), got {n}")
        n_fit = min(n - 1, max(1, int(round(fit_fraction * n))))
        seed = int(rng.integers(2**31 - 1))
        perm = rng.permutation(n)
        fit_idx, tested = np.sort(perm[:n_fit]), np.sort(perm[n_fit:])
        s_nid, s_gid = _split_fit(nid, gid, fit_idx, tested, classifier, seed)
        used = "half"
    above = (s_gid > s_nid[:, None]).sum(1)
    ties = (s_gid == s_nid[:, None]).sum(1)
    rank = above + rng.integers(0, ties + 1)  # uniform on {0..k} under H0
    u = (rank + rng.random(len(s_nid))) / (k + 1)      # exactly Uniform(0, 1) under H0
    # scipy's "greater": the empirical CDF lies above the uniform one, i.e. the NIDs rank near the top
    res = stats.kstest(u, "uniform", alternative=alternative)
    return DatasetInferenceResult(statistic=float(res.statistic), pvalue=float(res.pvalue), ranks=u, n=len(u),
                                  n_gids=k, alternative=alternative, split=used, n_fit=n - len(u),
                                  tested=tested)
