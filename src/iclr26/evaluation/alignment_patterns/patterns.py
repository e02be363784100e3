"""Alignment patterns, the alignment-pattern similarity (APS) and the bootstrap equivalence analysis.

From "Only Brains Align with Brains: Cross-Region Alignment Patterns Expose Limits of Normative
Models" (Höfling, Tangemann, Piefke, Keller, Franke, Bethge; ICLR 2026; arXiv 2604.21780;
official code https://github.com/bethgelab/alignment-pattern-analysis). Written from the paper's
description and a reading of the official analysis code, not copied from it.

Everything takes plain ``(stimuli x units)`` response matrices: one per region of interest (ROI) and
subject for brains, one per layer for a model. Notation (``M`` is an alignment measure: RSA or
linear predictivity, predictor first, target second):

- brain-brain pattern of ROI ``r``, from subject ``p`` to subject ``s`` (``p != s``):
  ``P[p, s, r, :] = [M(brain_p^r, brain_s^t) for t in ROIs]``;
- model pattern of a layer ``l`` on subject ``s``: ``Q[l, s, :] = [M(layer_l, brain_s^t) for t]``;
- brain-brain APS of subject ``s`` and ROI ``r``: the mean Pearson correlation between the
  reference ``ref_s^r = mean_{p, q != s, p != q} P[p, q, r, :]`` (pairs without ``s``) and each of
  ``s``'s target patterns ``P[p, s, r, :]``, ``p != s``;
- model APS of layer ``l``: the mean Pearson correlation between ``Q[l, s, :]`` and the same target
  patterns ``P[p, s, r, :]``, ``p != s``;
- equivalence: subjects are resampled with replacement (the same resamples for every model); a
  model is equivalent to the best one when its subject mean is at least the lower percentile bound
  of the best model's mean. The paper applies it to the pointwise score and to the APS separately.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

DEFAULT_ALPHAS = np.logspace(0, 9, 19)  # RidgeCV grid of the official linear-predictivity metric


# --------------------------------------------------------------------------------------------
# input checks
# --------------------------------------------------------------------------------------------
def _matrix(x, name: str, *, min_rows: int = 3, min_cols: int = 1) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 2:
        raise ValueError(f"{name} must be a 2-D (stimuli x units) array, got shape {a.shape}")
    if a.shape[0] < min_rows:
        raise ValueError(f"{name} needs at least {min_rows} stimuli (rows), got {a.shape[0]}")
    if a.shape[1] < min_cols:
        raise ValueError(f"{name} needs at least {min_cols} units (columns), got {a.shape[1]}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return a


def _brains(brains, name: str = "brains") -> tuple[list[list[np.ndarray]], list[str] | None]:
    """Normalise subjects x ROIs input (a sequence of sequences or of {roi: array} mappings)."""
    if isinstance(brains, np.ndarray) or not isinstance(brains, Sequence) or len(brains) == 0:
        raise ValueError(f"{name} must be a non-empty sequence over subjects of per-ROI arrays")
    rois = None
    out = []
    for i, subj in enumerate(brains):
        if isinstance(subj, Mapping):
            keys = list(subj)
            if rois is None:
                rois = keys
            elif keys != rois:
                raise ValueError(f"{name}[{i}] has ROIs {keys}, expected {rois} (same names, same order)")
            subj = [subj[k] for k in keys]
        elif rois is not None:
            raise ValueError(f"{name}[{i}] is not a mapping while {name}[0] is")
        if isinstance(subj, np.ndarray) or not isinstance(subj, Sequence) or len(subj) == 0:
            raise ValueError(f"{name}[{i}] must be a non-empty sequence (or mapping) of (stimuli x units) arrays")
        out.append([_matrix(a, f"{name}[{i}][{j}]") for j, a in enumerate(subj)])
    n_roi = len(out[0])
    if any(len(s) != n_roi for s in out):
        raise ValueError(f"every subject in {name} needs the same number of ROIs, got {[len(s) for s in out]}")
    n_stim = out[0][0].shape[0]
    for i, s in enumerate(out):
        for j, a in enumerate(s):
            if a.shape[0] != n_stim:
                raise ValueError(f"{name}[{i}][{j}] has {a.shape[0]} stimuli, expected {n_stim} (same stimuli everywhere)")
    return out, rois


def _layers(layers, name: str) -> list[np.ndarray]:
    if isinstance(layers, Mapping):
        layers = list(layers.values())
    if isinstance(layers, np.ndarray) and layers.ndim == 2:
        layers = [layers]
    if not isinstance(layers, Sequence) or len(layers) == 0:
        raise ValueError(f"{name} must be a non-empty sequence (or mapping) of (stimuli x features) arrays")
    return [_matrix(a, f"{name}[{i}]") for i, a in enumerate(layers)]


# --------------------------------------------------------------------------------------------
# alignment measures
# --------------------------------------------------------------------------------------------
def rdm(x, name: str = "x") -> np.ndarray:
    """Correlation-distance representational dissimilarity matrix ``1 - corr(x_i, x_j)`` over stimuli."""
    a = _matrix(x, name, min_rows=2, min_cols=2)
    c = a - a.mean(axis=1, keepdims=True)
    norm = np.linalg.norm(c, axis=1)
    if np.any(norm <= 1e-12 * max(1.0, float(np.abs(a).max()))):
        bad = int(np.argmin(norm))
        raise ValueError(f"{name}: stimulus {bad} has the same value in every unit; its correlation distance is undefined")
    c /= norm[:, None]
    return 1.0 - c @ c.T


def _rdm_vector(x, name: str) -> np.ndarray:
    """Upper triangle of the RDM, centred and scaled to unit norm (so a dot product is Pearson's r)."""
    d = rdm(x, name)
    v = d[np.triu_indices(d.shape[0], k=1)]
    v = v - v.mean()
    n = np.linalg.norm(v)
    if n <= 1e-12:
        raise ValueError(f"{name}: all pairwise dissimilarities are equal; RSA is undefined")
    return v / n


def rsa(x, y) -> float:
    """Representational similarity: Pearson r between the upper triangles of the two correlation-distance RDMs."""
    return float(np.clip(_rdm_vector(x, "x") @ _rdm_vector(y, "y"), -1.0, 1.0))


def _standardise(a: np.ndarray, name: str, *, drop_constant: bool) -> np.ndarray:
    sd = a.std(axis=0)
    const = sd <= 1e-12 * max(1.0, float(np.abs(a).max()))
    if const.any():
        if not drop_constant:
            raise ValueError(f"{name}: column(s) {np.flatnonzero(const)[:5].tolist()} are constant; R^2 is undefined for them")
        if const.all():
            raise ValueError(f"{name}: every column is constant; nothing to predict from")
        a, sd = a[:, ~const], sd[~const]
    return (a - a.mean(axis=0)) / sd


def linear_predictivity(x, y, *, n_folds: int = 5, alphas=None, random_state: int = 1) -> float:
    """Cross-validated ridge predictivity of ``y`` from ``x``: mean test R^2 over ``n_folds`` shuffled folds.

    As in the official metric: both matrices are z-scored per column over all stimuli, the ridge
    penalty is chosen inside each training fold by efficient leave-one-out over ``alphas``
    (default ``10^0 .. 10^9``, 19 values), R^2 is averaged uniformly over target columns and the fold
    scores are weighted by fold size. Constant predictor columns are dropped (they carry nothing);
    a constant target column raises.
    """
    from sklearn.linear_model import RidgeCV
    from sklearn.model_selection import KFold

    xa = _matrix(x, "x")
    ya = _matrix(y, "y")
    if xa.shape[0] != ya.shape[0]:
        raise ValueError(f"x and y need the same stimuli: {xa.shape[0]} vs {ya.shape[0]} rows")
    if not isinstance(n_folds, (int, np.integer)) or n_folds < 2 or n_folds > xa.shape[0] // 2:
        raise ValueError(f"n_folds must be an integer in [2, n_stimuli // 2 = {xa.shape[0] // 2}], got {n_folds!r}")
    grid = DEFAULT_ALPHAS if alphas is None else np.asarray(alphas, dtype=np.float64).ravel()
    if grid.size == 0 or not np.all(np.isfinite(grid)) or np.any(grid <= 0):
        raise ValueError(f"alphas must be positive finite numbers, got {alphas!r}")
    xa = _standardise(xa, "x", drop_constant=True)
    ya = _standardise(ya, "y", drop_constant=False)
    total = 0.0
    for tr, te in KFold(n_splits=int(n_folds), shuffle=True, random_state=random_state).split(xa):
        model = RidgeCV(alphas=grid).fit(xa[tr], ya[tr])
        total += model.score(xa[te], ya[te]) * len(te)
    return float(total / xa.shape[0])


@dataclass(frozen=True)
class _Measure:
    name: str
    prepare: Callable[[np.ndarray, str], object]
    compare: Callable[[object, object], float]
    batched: bool = False  # prepared values are unit vectors: a matrix product gives every pair


def _measure(metric) -> _Measure:
    if metric == "rsa":
        return _Measure("rsa", _rdm_vector, lambda a, b: float(a @ b), batched=True)
    if metric in ("linear_predictivity", "lp"):
        return _Measure("linear_predictivity", lambda a, name: a, linear_predictivity)
    if callable(metric):
        def compare(a, b):
            v = float(metric(a, b))
            if not np.isfinite(v):
                raise ValueError(f"metric {getattr(metric, '__name__', metric)!r} returned a non-finite value {v!r}")
            return v
        return _Measure(getattr(metric, "__name__", "custom"), lambda a, name: a, compare)
    raise ValueError(f"metric must be 'rsa', 'linear_predictivity' or a callable(x, y) -> float, got {metric!r}")


def alignment_matrix(predictors, targets, metric="rsa") -> np.ndarray:
    """``A[i, j] = M(predictors[i], targets[j])`` for lists of (stimuli x units) arrays."""
    m = _measure(metric)
    preds = _layers(predictors, "predictors")
    targs = _layers(targets, "targets")
    n = {a.shape[0] for a in preds + targs}
    if len(n) != 1:
        raise ValueError(f"predictors and targets need the same stimuli, got row counts {sorted(n)}")
    pp = [m.prepare(a, f"predictors[{i}]") for i, a in enumerate(preds)]
    tp = [m.prepare(a, f"targets[{j}]") for j, a in enumerate(targs)]
    if m.batched:
        return np.clip(np.stack(pp) @ np.stack(tp).T, -1.0, 1.0)
    return np.array([[m.compare(a, b) for b in tp] for a in pp])


# --------------------------------------------------------------------------------------------
# alignment patterns and APS
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BrainAlignmentPatterns:
    """Cross-subject alignment patterns ``scores[p, s, r, t] = M(brain_p^r, brain_s^t)``.

    Entries with ``p == s`` (a subject with itself) are not computed and hold NaN; every other
    entry is finite.
    """
    scores: np.ndarray
    metric: str
    rois: list[str] | None = None

    @property
    def n_subjects(self) -> int:
        return self.scores.shape[0]

    @property
    def n_rois(self) -> int:
        return self.scores.shape[2]

    def pattern(self, roi: int) -> np.ndarray:
        """Mean brain-brain pattern of ``roi`` over all ordered subject pairs, shape (n_rois,)."""
        off = ~np.eye(self.n_subjects, dtype=bool)
        return self.scores[off][:, roi, :].mean(axis=0)


def brain_alignment_patterns(brains, metric="rsa") -> BrainAlignmentPatterns:
    """Alignment of every ROI of every subject with every ROI of every other subject.

    ``brains``: a sequence over subjects; each a sequence of (stimuli x units) arrays, one per ROI
    (or a mapping ``{roi name: array}``, the same names in the same order for every subject). Unit
    counts may differ between subjects and ROIs; the stimuli (rows) are shared.
    """
    data, rois = _brains(brains)
    n_s, n_r = len(data), len(data[0])
    if n_s < 3:
        raise ValueError(f"brains needs at least 3 subjects (the leave-one-subject-out reference uses pairs of the others), got {n_s}")
    m = _measure(metric)
    prep = [[m.prepare(a, f"brains[{i}][{j}]") for j, a in enumerate(s)] for i, s in enumerate(data)]
    scores = np.full((n_s, n_s, n_r, n_r), np.nan)
    if m.batched:
        v = np.stack([np.stack(s) for s in prep])  # (subjects, rois, pairs)
        all_pairs = np.clip(np.einsum("prk,stk->psrt", v, v), -1.0, 1.0)
        off = ~np.eye(n_s, dtype=bool)
        scores[off] = all_pairs[off]
    else:
        for p in range(n_s):
            for s in range(n_s):
                if p != s:
                    for r in range(n_r):
                        for t in range(n_r):
                            scores[p, s, r, t] = m.compare(prep[p][r], prep[s][t])
    return BrainAlignmentPatterns(scores=scores, metric=m.name, rois=rois)


def model_alignment_patterns(layers, brains, metric="rsa") -> np.ndarray:
    """Model patterns ``Q[l, s, t] = M(layer_l, brain_s^t)``, shape (n_layers, n_subjects, n_rois)."""
    data, _ = _brains(brains)
    feats = _layers(layers, "layers")
    if feats[0].shape[0] != data[0][0].shape[0]:
        raise ValueError(f"layers have {feats[0].shape[0]} stimuli, brains {data[0][0].shape[0]}")
    flat = [a for s in data for a in s]
    a = alignment_matrix(feats, flat, metric)
    return a.reshape(len(feats), len(data), len(data[0]))


def _pearson_rows(ref: np.ndarray, rows: np.ndarray, what: str) -> np.ndarray:
    """Pearson r between the vector ``ref`` (..., k) and each row of ``rows`` (..., m, k)."""
    rc = ref - ref.mean(axis=-1, keepdims=True)
    xc = rows - rows.mean(axis=-1, keepdims=True)
    rn = np.linalg.norm(rc, axis=-1)
    xn = np.linalg.norm(xc, axis=-1)
    if np.any(rn <= 1e-12) or np.any(xn <= 1e-12):
        raise ValueError(f"{what}: an alignment pattern is constant over ROIs, so its Pearson correlation is undefined")
    return np.einsum("...k,...mk->...m", rc, xc) / (rn[..., None] * xn)


def _check_patterns(patterns: BrainAlignmentPatterns) -> np.ndarray:
    if not isinstance(patterns, BrainAlignmentPatterns):
        raise TypeError(f"patterns must be a BrainAlignmentPatterns (from brain_alignment_patterns), got {type(patterns).__name__}")
    P = patterns.scores
    n_s = P.shape[0]
    off = ~np.eye(n_s, dtype=bool)
    if not np.all(np.isfinite(P[off])):
        raise ValueError("patterns.scores has non-finite entries between different subjects")
    if n_s < 3:
        raise ValueError(f"patterns need at least 3 subjects, got {n_s}")
    if P.shape[2] < 3:
        raise ValueError(f"an alignment pattern needs at least 3 ROIs for a Pearson correlation to mean anything, got {P.shape[2]}")
    return P


def brain_brain_aps(patterns: BrainAlignmentPatterns) -> np.ndarray:
    """Brain-brain APS, shape (n_subjects, n_rois): for subject ``s`` and ROI ``r`` the mean Pearson r
    between the reference pattern from pairs of other subjects and each pattern ``P[p, s, r, :]``."""
    P = _check_patterns(patterns)
    n_s, _, n_r, _ = P.shape
    out = np.empty((n_s, n_r))
    for s in range(n_s):
        others = [i for i in range(n_s) if i != s]
        pairs = [(p, q) for p in others for q in others if p != q]
        ref = np.mean([P[p, q] for p, q in pairs], axis=0)  # (r, t)
        targets = np.stack([P[p, s] for p in others], axis=1)  # (r, p, t)
        out[s] = _pearson_rows(ref, targets, "brain_brain_aps").mean(axis=-1)
    return out


def model_aps(model_patterns, patterns: BrainAlignmentPatterns, reference: str = "target_subject") -> np.ndarray:
    """Model APS, shape (n_layers, n_subjects, n_rois): ``A[l, s, r]`` is the mean Pearson r between the
    layer's pattern and the targets ``P[p, s, r, :]``, p != s.

    ``reference="target_subject"`` (the official pipeline) takes the layer's pattern on subject ``s``
    itself, ``model_patterns[l, s, :]``. ``reference="other_subjects"`` takes the mean of its patterns
    on the other subjects, ``mean_{q != s} model_patterns[l, q, :]``: built like the brain-brain
    reference, which never uses subject ``s``.
    """
    if reference not in ("target_subject", "other_subjects"):
        raise ValueError(f"reference must be 'target_subject' or 'other_subjects', got {reference!r}")
    P = _check_patterns(patterns)
    Q = np.asarray(model_patterns, dtype=np.float64)
    if Q.ndim == 2:
        Q = Q[None]
    n_s, _, n_r, _ = P.shape
    if Q.ndim != 3 or Q.shape[1:] != (n_s, n_r):
        raise ValueError(f"model_patterns must have shape (n_layers, {n_s}, {n_r}), got {np.shape(model_patterns)}")
    if not np.all(np.isfinite(Q)):
        raise ValueError("model_patterns contains NaN or infinite values")
    out = np.empty((Q.shape[0], n_s, n_r))
    for s in range(n_s):
        others = [i for i in range(n_s) if i != s]
        targets = np.stack([P[p, s] for p in others], axis=1)  # (r, p, t)
        q = Q[:, s] if reference == "target_subject" else Q[:, others].mean(axis=1)
        qc = q - q.mean(axis=-1, keepdims=True)  # (layers, t)
        tc = targets - targets.mean(axis=-1, keepdims=True)  # (r, p, t)
        qn, tn = np.linalg.norm(qc, axis=-1), np.linalg.norm(tc, axis=-1)
        if np.any(qn <= 1e-12) or np.any(tn <= 1e-12):
            raise ValueError("model_aps: an alignment pattern is constant over ROIs, so its Pearson correlation is undefined")
        r_ = np.einsum("lt,rpt->lrp", qc, tc) / (qn[:, None, None] * tn[None])
        out[:, s, :] = r_.mean(axis=-1)
    return out


def select_layers(train_scores) -> np.ndarray:
    """Best layer per ROI: the argmax over layers of the subject-mean score, ``train_scores`` of shape
    (n_layers, n_subjects, n_rois) (a split not used for the evaluation). Returns (n_rois,) ints."""
    s = np.asarray(train_scores, dtype=np.float64)
    if s.ndim != 3 or s.size == 0:
        raise ValueError(f"train_scores must have shape (n_layers, n_subjects, n_rois), got {s.shape}")
    if not np.all(np.isfinite(s)):
        raise ValueError("train_scores contains NaN or infinite values")
    return np.argmax(s.mean(axis=1), axis=0)


# --------------------------------------------------------------------------------------------
# bootstrap equivalence
# --------------------------------------------------------------------------------------------
def _check_boot(n_boot, confidence):
    if not isinstance(n_boot, (int, np.integer)) or n_boot < 100:
        raise ValueError(f"n_boot must be an integer >= 100, got {n_boot!r}")
    if not (isinstance(confidence, (int, float)) and 0 < confidence < 1):
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}")


def subject_bootstrap_means(values, n_boot: int = 1000, random_state=0) -> np.ndarray:
    """Means over resampled subjects: ``values`` (n_subjects, ...) -> (n_boot, ...); subjects (axis 0)
    are drawn with replacement, the same draws for every trailing entry."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim == 0 or v.shape[0] < 2:
        raise ValueError(f"values needs at least 2 subjects along axis 0, got shape {v.shape}")
    if not np.all(np.isfinite(v)):
        raise ValueError("values contains NaN or infinite values")
    _check_boot(n_boot, 0.5)
    rng = np.random.default_rng(random_state)
    idx = rng.integers(0, v.shape[0], size=(int(n_boot), v.shape[0]))
    return v[idx].mean(axis=1)


@dataclass(frozen=True)
class EquivalenceResult:
    """Equivalence of candidates to the best one (scipy-style result).

    ``statistic``: subject mean per candidate; ``ci_low``/``ci_high``: percentile bounds of the
    subject-bootstrap mean; ``best``: index of the highest mean; ``threshold``: ``ci_low[best]``;
    ``equivalent``: ``statistic >= threshold`` per candidate.
    """
    names: list[str]
    statistic: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    best: int
    threshold: float
    equivalent: np.ndarray
    confidence: float
    n_boot: int

    @property
    def best_name(self) -> str:
        return self.names[self.best]

    @property
    def equivalent_names(self) -> list[str]:
        return [n for n, e in zip(self.names, self.equivalent) if e]


def equivalence_test(values, names: Sequence[str] | None = None, *, n_boot: int = 1000,
                     confidence: float = 0.95, random_state=0) -> EquivalenceResult:
    """Which candidates are practically equivalent to the best one across subjects.

    ``values``: (n_candidates, n_subjects) per-subject scores (or a mapping name -> (n_subjects,)).
    The subjects are resampled ``n_boot`` times with replacement, the same draws for all
    candidates; a candidate is equivalent when its mean is at least the lower ``(1 - confidence)/2``
    percentile of the best candidate's bootstrap means.
    """
    if isinstance(values, Mapping):
        names = list(values) if names is None else list(names)
        values = [values[n] for n in names]
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 2 or v.shape[0] < 1 or v.shape[1] < 2:
        raise ValueError(f"values must have shape (n_candidates, n_subjects >= 2), got {v.shape}")
    if not np.all(np.isfinite(v)):
        raise ValueError("values contains NaN or infinite values")
    _check_boot(n_boot, confidence)
    names = [str(i) for i in range(v.shape[0])] if names is None else [str(n) for n in names]
    if len(names) != v.shape[0]:
        raise ValueError(f"names has {len(names)} entries for {v.shape[0]} candidates")
    boot = subject_bootstrap_means(v.T, n_boot=n_boot, random_state=random_state)  # (n_boot, cands)
    lo_q, hi_q = (1 - confidence) / 2, 1 - (1 - confidence) / 2
    low, high = np.quantile(boot, lo_q, axis=0), np.quantile(boot, hi_q, axis=0)
    mean = v.mean(axis=1)
    best = int(np.argmax(mean))
    thr = float(low[best])
    return EquivalenceResult(names=names, statistic=mean, ci_low=low, ci_high=high, best=best,
                             threshold=thr, equivalent=mean >= thr, confidence=float(confidence),
                             n_boot=int(n_boot))


# --------------------------------------------------------------------------------------------
# the whole analysis
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AlignmentPatternResult:
    """Result of :func:`alignment_pattern_analysis`.

    Arrays are indexed (model, subject, roi) unless said otherwise. ``score`` is the pointwise score
    of each model's selected layer on the test split; ``aps`` its APS (official: the model's pattern on
    the target subject); ``aps_other_subjects`` the APS with the model's pattern averaged over the
    other subjects (:func:`model_aps` ``reference="other_subjects"``); ``brain_aps`` (subject, roi)
    the brain-brain APS; ``layer`` (model, roi) the selected layer; ``score_equivalence`` and
    ``aps_equivalence`` one :class:`EquivalenceResult` per ROI; ``equivalent_both`` (model, roi).
    """
    models: list[str]
    rois: list[str]
    metric: str
    score: np.ndarray
    aps: np.ndarray
    aps_other_subjects: np.ndarray
    brain_aps: np.ndarray
    layer: np.ndarray
    score_equivalence: list[EquivalenceResult]
    aps_equivalence: list[EquivalenceResult]
    brain_patterns: BrainAlignmentPatterns = field(repr=False)
    model_patterns: dict = field(repr=False, default_factory=dict)

    @property
    def equivalent_score(self) -> np.ndarray:
        return np.stack([e.equivalent for e in self.score_equivalence], axis=1)

    @property
    def equivalent_aps(self) -> np.ndarray:
        return np.stack([e.equivalent for e in self.aps_equivalence], axis=1)

    @property
    def equivalent_both(self) -> np.ndarray:
        return self.equivalent_score & self.equivalent_aps


def alignment_pattern_analysis(brains_train, brains_test, models: Mapping, metric="rsa", *,
                               n_boot: int = 1000, confidence: float = 0.95,
                               random_state=0, fixed_layers: Mapping | None = None) -> AlignmentPatternResult:
    """Pointwise scores, alignment patterns, APS and both equivalence analyses for a set of models.

    ``brains_train`` / ``brains_test``: subjects x ROIs responses to two disjoint stimulus sets (the
    same subjects, ROIs and units). ``models``: ``{name: (layers_train, layers_test)}``, each a list
    (or mapping) of (stimuli x features) arrays per layer for the same stimuli. The layer of each
    model for each ROI is the one with the highest subject-mean score on the train split; scores,
    patterns and APS are then computed on the test split, as in the official pipeline.
    ``fixed_layers``: optional ``{name: (n_rois,) layer indices}`` that replaces the train-split
    selection for those models (for a model whose layer for each ROI is known, e.g. a simulation's
    generator).
    """
    if not isinstance(models, Mapping) or not models:
        raise ValueError("models must be a non-empty mapping name -> (layers_train, layers_test)")
    tr, rois = _brains(brains_train, "brains_train")
    te, rois_te = _brains(brains_test, "brains_test")
    if len(tr) != len(te) or len(tr[0]) != len(te[0]):
        raise ValueError(f"brains_train ({len(tr)} subjects x {len(tr[0])} ROIs) and brains_test "
                         f"({len(te)} x {len(te[0])}) must have the same subjects and ROIs")
    if rois != rois_te:
        raise ValueError("brains_train and brains_test must name the same ROIs in the same order")
    n_r = len(tr[0])
    roi_names = rois if rois is not None else [str(i) for i in range(n_r)]
    bb = brain_alignment_patterns(te, metric)
    brain_aps = brain_brain_aps(bb)
    fixed = {} if fixed_layers is None else dict(fixed_layers)
    unknown = [k for k in fixed if k not in models]
    if unknown:
        raise ValueError(f"fixed_layers names models that are not in models: {unknown}")
    names, scores, apss, apss_loso, layers, qs = [], [], [], [], [], {}
    for name, pair in models.items():
        if not (isinstance(pair, Sequence) and len(pair) == 2):
            raise ValueError(f"models[{name!r}] must be a pair (layers_train, layers_test)")
        l_tr = _layers(pair[0], f"models[{name!r}][0]")
        l_te = _layers(pair[1], f"models[{name!r}][1]")
        if len(l_tr) != len(l_te):
            raise ValueError(f"models[{name!r}]: {len(l_tr)} train layers but {len(l_te)} test layers")
        q_tr = model_alignment_patterns(l_tr, tr, metric)  # (layers, subjects, rois)
        q_te = model_alignment_patterns(l_te, te, metric)
        if name in fixed:
            best = np.asarray(fixed[name])
            if (best.shape != (n_r,) or not np.issubdtype(best.dtype, np.integer)
                    or best.min() < 0 or best.max() >= len(l_te)):
                raise ValueError(f"fixed_layers[{name!r}] must be {n_r} layer indices in [0, {len(l_te)}), got {fixed[name]!r}")
        else:
            best = select_layers(q_tr)
        a = model_aps(q_te, bb)  # (layers, subjects, rois)
        a_loso = model_aps(q_te, bb, reference="other_subjects")
        r_idx = np.arange(n_r)
        names.append(str(name))
        layers.append(best)
        scores.append(q_te[best, :, r_idx].T)  # (subjects, rois)
        apss.append(a[best, :, r_idx].T)
        apss_loso.append(a_loso[best, :, r_idx].T)
        qs[str(name)] = q_te
    score, aps = np.stack(scores), np.stack(apss)
    s_eq = [equivalence_test(score[:, :, r], names, n_boot=n_boot, confidence=confidence,
                             random_state=random_state) for r in range(n_r)]
    a_eq = [equivalence_test(aps[:, :, r], names, n_boot=n_boot, confidence=confidence,
                             random_state=random_state) for r in range(n_r)]
    return AlignmentPatternResult(models=names, rois=roi_names, metric=bb.metric, score=score, aps=aps,
                                  aps_other_subjects=np.stack(apss_loso), brain_aps=brain_aps, layer=np.stack(layers), score_equivalence=s_eq,
                                  aps_equivalence=a_eq, brain_patterns=bb, model_patterns=qs)
