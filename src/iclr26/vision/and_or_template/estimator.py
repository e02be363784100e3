"""AND-OR template (AOT) over terminal responses, learned by penalised block pursuit.

Paper: the ICLR 2026 paper whose abstract reads "This work proposes a compositional AND-OR template
for art and design ... maximum-entropy log-linear model ... consistency score as log-likelihood gain
against a reference distribution ... penalized EM-style block-pursuit with sparsity and local mutual
exclusivity ... semi-supervised structural expansion, triggered by matching gain and
structural-consistency thresholds". Its full text and any official code could not be found (no
arXiv id, no repository); the equations below follow the paper's abstract, a secondary summary of
it, and the two works it builds on: Si & Zhu, "Learning AND-OR Templates for Object Recognition and
Detection" (TPAMI 2013: information projection, block pursuit, SUM-MAX inference) and Jin et al.,
"Learning AND-OR Templates for Professional Photograph Parsing and Guidance" (arXiv 2410.06124).

Model. An image I is described by D terminal responses r_j(I) (in the paper in [0, 1]; any finite
values work here). Against a reference distribution q (the negative class of ``fit``), one AND node
(a "block", part configuration) k with terminals B_k is the maximum-entropy tilt

    p_k(I) / q(I) = prod_{j in B_k} exp(beta_kj r_j(I)) / z_j(beta_kj),   z_j(b) = E_q[exp(b r_j)],

so its log-likelihood gain is S_k(I) = sum_{j in B_k} beta_kj r_j(I) - log Z_k with
log Z_k = sum_j log z_j(beta_kj) (terminals independent under q, as in Si & Zhu). beta_kj solves the
moment-matching equation E_{p_k}[r_j] = mean of r_j over the images the block explains. An OR node
g holds mutually exclusive alternative blocks (and a null branch) with frequencies rho; with the MAX
approximation of SUM-MAX inference its term is max(log rho_g0, max_{k in g} log rho_k + S_k(I)),
i.e. a switch s_k in {0, 1} picks one branch. The consistency score is the sum over OR nodes,

    Score(I) = log p(I) / q(I) ~= sum_g max(log rho_g0, max_{k in g} [log rho_k + S_k(I)]),

which decomposes into per-term evidence s_k (log rho_k + sum_j beta_kj r_j(I) - log Z_k).

Learning (EM-style block pursuit). The data matrix R holds the positives' responses. A block (rows A,
columns B) has gain sum_{i in A} sum_{j in B} (beta_j R_ij - log z_j(beta_j)) minus ``sparsity``
nats per terminal. From seed columns the pursuit alternates an M-step (refit beta on A by moment
matching; add the columns of largest gain while each gains more than ``sparsity``, at most
``max_terminals``, never two within ``exclusion_radius`` of each other or of a column used before:
local mutual exclusion) and an E-step (A = the rows whose block score exceeds ``row_threshold``),
and keeps the best block; blocks are added while one gains more than zero, up to ``n_blocks``.
Blocks whose row sets overlap by less than ``or_overlap`` become alternatives of one OR node.

``expand`` is the semi-supervised structural expansion: block pursuit on the unlabelled rows that no
branch explains; a new branch is kept only if its mean matching gain per row reaches
``gain_threshold`` and its structural consistency (share of its terminals whose evidence points the
block's way, averaged over its rows) reaches ``consistency_threshold``.
"""
from __future__ import annotations

import numbers

import numpy as np
from scipy.special import expit, logsumexp
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

__all__ = ["AndOrTemplate", "log_partition", "moment_match", "block_gain"]


# --------------------------------------------------------------------------- max-ent terminal model
def log_partition(beta, reference):
    """log z_j(beta_j) = log mean_i exp(beta_j * reference[i, j]) for each column j (stable).

    ``beta``: shape (D,); ``reference``: the reference responses, shape (n_ref, D).
    """
    beta = np.asarray(beta, dtype=np.float64)
    ref = np.asarray(reference, dtype=np.float64)
    return logsumexp(ref * beta[None, :], axis=0) - np.log(ref.shape[0])


def _tilted_mean(beta, ref):
    w = ref * beta[None, :]
    w = np.exp(w - w.max(axis=0, keepdims=True))
    return (w * ref).sum(axis=0) / w.sum(axis=0)


def moment_match(target_mean, reference, beta_max=10.0, n_iter=60, beta_min=0.0):
    """Solve E_{q_beta}[r_j] = target_mean_j for beta_j in [beta_min, beta_max] (bisection).

    E_{q_beta}[r] = d log z / d beta is increasing in beta, so bisection on the bracket is exact to
    (beta_max - beta_min) / 2^n_iter. Targets outside the bracket's reach give the bracket's end: with the
    default beta_min = 0 a terminal only ever counts as evidence of a part's presence (as the active-basis /
    hybrid-image-template terminals of Si & Zhu, lambda >= 0); a target below the reference mean gives 0.
    """
    mu = np.asarray(target_mean, dtype=np.float64)
    ref = np.asarray(reference, dtype=np.float64)
    lo = np.full(mu.shape, float(beta_min))
    hi = np.full(mu.shape, float(beta_max))
    for _ in range(n_iter):
        mid = 0.5 * (lo + hi)
        up = _tilted_mean(mid, ref) < mu
        lo = np.where(up, mid, lo)
        hi = np.where(up, hi, mid)
    return 0.5 * (lo + hi)


def block_gain(R_rows, reference, beta_max=10.0):
    """Per-column information gain of a row set: |A| (beta_j mu_j - log z_j(beta_j)) at the moment-matched
    beta_j (mu_j the mean of column j over the rows). Returns (gain, beta), each of shape (D,)."""
    R_rows = np.asarray(R_rows, dtype=np.float64)
    mu = R_rows.mean(axis=0)
    beta = moment_match(mu, reference, beta_max)
    per_row = beta * mu - log_partition(beta, reference)
    return R_rows.shape[0] * np.maximum(per_row, 0.0), beta


# --------------------------------------------------------------------------- estimator
def _check_real(name, v, lo=None, lo_open=False, integer=False, allow_none=False):
    if v is None and allow_none:
        return v
    ok = isinstance(v, numbers.Integral) if integer else isinstance(v, numbers.Real)
    if isinstance(v, bool) or not ok or not np.isfinite(v) or (
            lo is not None and (v <= lo if lo_open else v < lo)):
        kind = "an integer" if integer else "a finite number"
        bound = "" if lo is None else (f" > {lo}" if lo_open else f" >= {lo}")
        raise ValueError(f"{name} must be {kind}{bound}, got {v!r}")
    return v


class AndOrTemplate(ClassifierMixin, BaseEstimator):
    """AND-OR template classifier: positives (``classes_[1]``) against the reference (``classes_[0]``).

    Parameters
    ----------
    n_blocks : most AND nodes (blocks) the pursuit adds. Default 12.
    sparsity : penalty in nats per terminal of a block (the pursuit's sparsity term). Default 2.0.
    max_terminals : most terminals per block. Default 4.
    row_threshold : an image belongs to a block when its block score S_k exceeds this (nats). Default 0.
    n_iter : E/M alternations per seed. Default 6.
    n_seeds : seed columns tried per block (those of largest single-column gain). Default 8.
    exclusion_radius : local mutual exclusion: no two terminals closer than this (in the units of
        ``feature_positions``) in the template. 0 switches it off. Default 0.
    feature_positions : (D, p) array of terminal positions for the exclusion, or None. Default None.
    or_overlap : blocks whose row sets overlap by less than this share of the smaller set are
        alternatives of one OR node. Default 0.2.
    beta_max : upper bound on beta (terminal weights lie in [0, beta_max]). Default 10.
    gain_threshold, consistency_threshold : ``expand``'s two gates (nats per row; share). Defaults 1.0, 0.6.
    min_support : a block must explain at least this share of the positives. Default 0.05.
    min_lift : ... and fire on the positives more than ``min_lift`` times as often as on the reference
        rows (1 = just more often). Default 2.
    """

    def __init__(self, n_blocks=12, sparsity=2.0, max_terminals=4, row_threshold=0.0, n_iter=6, n_seeds=8,
                 exclusion_radius=0.0, feature_positions=None, or_overlap=0.2, beta_max=10.0,
                 gain_threshold=1.0, consistency_threshold=0.6, min_support=0.05, min_lift=2.0):
        self.n_blocks = n_blocks
        self.sparsity = sparsity
        self.max_terminals = max_terminals
        self.row_threshold = row_threshold
        self.n_iter = n_iter
        self.n_seeds = n_seeds
        self.exclusion_radius = exclusion_radius
        self.feature_positions = feature_positions
        self.or_overlap = or_overlap
        self.beta_max = beta_max
        self.gain_threshold = gain_threshold
        self.consistency_threshold = consistency_threshold
        self.min_support = min_support
        self.min_lift = min_lift

    # ------------------------------------------------------------------ validation
    def _check_params(self):
        _check_real("n_blocks", self.n_blocks, lo=1, integer=True)
        _check_real("sparsity", self.sparsity, lo=0)
        _check_real("max_terminals", self.max_terminals, lo=1, integer=True)
        _check_real("row_threshold", self.row_threshold)
        _check_real("n_iter", self.n_iter, lo=1, integer=True)
        _check_real("n_seeds", self.n_seeds, lo=1, integer=True)
        _check_real("exclusion_radius", self.exclusion_radius, lo=0)
        _check_real("beta_max", self.beta_max, lo=0, lo_open=True)
        _check_real("gain_threshold", self.gain_threshold)
        if not (isinstance(self.consistency_threshold, numbers.Real) and not isinstance(self.consistency_threshold, bool)
                and 0.0 <= self.consistency_threshold <= 1.0):
            raise ValueError(f"consistency_threshold must be a share in [0, 1], got {self.consistency_threshold!r}")
        if not (isinstance(self.min_support, numbers.Real) and not isinstance(self.min_support, bool)
                and 0.0 <= self.min_support <= 1.0):
            raise ValueError(f"min_support must be a number in [0, 1], got {self.min_support!r}")
        _check_real("min_lift", self.min_lift, lo=1)
        if not (isinstance(self.or_overlap, numbers.Real) and not isinstance(self.or_overlap, bool)
                and 0.0 <= self.or_overlap <= 1.0):
            raise ValueError(f"or_overlap must be a number in [0, 1], got {self.or_overlap!r}")

    def _positions(self, d):
        if self.feature_positions is None:
            return None
        pos = np.asarray(self.feature_positions, dtype=np.float64)
        if pos.ndim == 1:
            pos = pos[:, None]
        if pos.ndim != 2 or pos.shape[0] != d or not np.all(np.isfinite(pos)):
            raise ValueError(f"feature_positions must be a finite (n_features, p) array with n_features = {d}, "
                             f"got shape {np.shape(self.feature_positions)}")
        return pos

    # ------------------------------------------------------------------ sklearn plumbing
    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        # a presence-only template (beta >= 0) cannot use features whose low values mark the positives
        tags.classifier_tags.poor_score = True
        return tags

    def fit(self, X, y):
        """Learn the template from the positives (y == classes_[1]) against the reference (classes_[0])."""
        self._check_params()
        X, y = validate_data(self, X, y, dtype=np.float64, ensure_min_samples=2)
        check_classification_targets(y)
        classes = np.unique(y)
        if classes.size != 2:
            raise ValueError(f"Only binary classification is supported. AndOrTemplate is a binary (template vs "
                             f"reference) classifier; y has {classes.size} class(es): {classes.tolist()}")
        self.classes_ = classes
        pos, ref = X[y == classes[1]], X[y == classes[0]]
        self.reference_ = ref.copy()
        self.ref_mean_ = ref.mean(axis=0)
        self._exclusion_mask_ = self._build_exclusion(X.shape[1])
        self.blocks_ = []
        used = np.zeros(X.shape[1], dtype=bool)
        for _ in range(int(self.n_blocks)):
            blk = self._pursue(pos, used)
            if blk is None:
                break
            self.blocks_.append(blk)
            used |= self._blocked_by(blk["terminals"])
        self.n_rows_ = pos.shape[0]
        self._build_or_nodes(pos)
        self.log_prior_ratio_ = float(np.log(pos.shape[0] / ref.shape[0]))
        self.n_parameters_ = int(sum(2 * len(b["terminals"]) + 2 for b in self.blocks_))
        return self

    # ------------------------------------------------------------------ block pursuit
    def _build_exclusion(self, d):
        pos = self._positions(d)
        if pos is None or self.exclusion_radius == 0:
            return None
        dist = np.sqrt(((pos[:, None, :] - pos[None, :, :]) ** 2).sum(-1))
        return dist < float(self.exclusion_radius)

    def _blocked_by(self, cols):
        out = np.zeros(self.n_features_in_, dtype=bool)
        out[list(cols)] = True
        if self._exclusion_mask_ is not None and len(cols):
            out |= self._exclusion_mask_[list(cols)].any(axis=0)
        return out

    def _select_columns(self, gain, available):
        order = np.argsort(-gain, kind="stable")
        chosen, blocked = [], ~available
        for j in order:
            if len(chosen) >= self.max_terminals or gain[j] <= self.sparsity:
                break
            if blocked[j]:
                continue
            chosen.append(int(j))
            blocked = blocked | self._blocked_by([j])
        return chosen

    def _row_scores(self, R, cols, beta):
        cols = list(cols)
        logz = log_partition(beta[cols], self.reference_[:, cols])
        return R[:, cols] @ beta[cols] - logz.sum()

    def _members(self, R, cols, beta):
        """E-step: rows whose block score exceeds ``row_threshold`` and whose parse is structurally consistent
        (at least ``consistency_threshold`` of the block's terminals carry positive evidence)."""
        cols = list(cols)
        logz = log_partition(beta[cols], self.reference_[:, cols])
        ev = R[:, cols] * beta[cols][None, :] - logz[None, :]
        return (ev.sum(axis=1) > self.row_threshold) & ((ev > 0).mean(axis=1) >= self.consistency_threshold)

    def _pursue(self, pos, used, seed_cols=None):
        available = ~used
        if not available.any() or pos.shape[0] == 0:
            return None
        ref = self.reference_
        # seed rows of column j: the positives whose response exceeds the reference's 90th percentile
        thr = np.quantile(ref, 0.9, axis=0)
        mask = pos > thr[None, :]
        counts = mask.sum(axis=0)
        mu = np.where(counts > 0, (pos * mask).sum(axis=0) / np.maximum(counts, 1), 0.0)
        beta0 = moment_match(mu, ref, self.beta_max)
        seed_gain = counts * np.maximum(beta0 * mu - log_partition(beta0, ref), 0.0)
        seed_gain[~available | (counts == 0)] = -np.inf
        if seed_cols is None:
            seed_cols = [int(j) for j in np.argsort(-seed_gain, kind="stable")[: int(self.n_seeds)]
                         if np.isfinite(seed_gain[j])]
        best = None
        for j0 in seed_cols:
            rows = mask[:, j0]
            cols = []
            for _ in range(int(self.n_iter)):
                if rows.sum() == 0:
                    break
                gain, beta = block_gain(pos[rows], ref, self.beta_max)
                new_cols = self._select_columns(gain, available)
                if not new_cols:
                    cols = []
                    break
                new_rows = self._members(pos, new_cols, beta)
                if new_cols == cols and np.array_equal(new_rows, rows):
                    break
                cols, rows = new_cols, new_rows
            if not cols or rows.sum() < max(1.0, self.min_support * pos.shape[0]):
                continue
            _, beta = block_gain(pos[rows], ref, self.beta_max)
            s = self._row_scores(pos, cols, beta)
            # the block must fire at least min_lift times as often among the positives as among the reference
            rows = self._members(pos, cols, beta)
            ref_rate = float(self._members(ref, cols, beta).mean())
            if rows.sum() == 0 or rows.mean() <= self.min_lift * ref_rate:
                continue
            total = float(s[rows].sum() - self.sparsity * len(cols))
            if total > 0 and (best is None or total > best["gain"]):
                logz = log_partition(beta[cols], ref[:, cols])
                best = {"terminals": cols, "beta": beta[cols].copy(), "log_z": logz.copy(),
                        "log_Z": float(logz.sum()), "rows": rows.copy(), "gain": total}
        return best

    def _build_or_nodes(self, pos):
        """Group mutually exclusive blocks into OR nodes and set the branch frequencies rho."""
        fires = [self._fires(pos, b) for b in self.blocks_]
        for b, f in zip(self.blocks_, fires):
            b["count"] = float(f.sum())
        groups = []
        for k, f in enumerate(fires):
            for g in groups:
                if all(self._exclusive(f, fires[m]) for m in g):
                    g.append(k)
                    break
            else:
                groups.append([k])
        self.or_nodes_ = groups
        self._set_rho()

    def _exclusive(self, a, b):
        small = min(a.sum(), b.sum())
        return small == 0 or (a & b).sum() / small < self.or_overlap

    def _set_rho(self):
        n = float(self.n_rows_)
        self.log_rho_ = np.zeros(len(self.blocks_))
        self.log_rho_null_ = np.zeros(len(self.or_nodes_))
        for g, members in enumerate(self.or_nodes_):
            c = np.array([max(self.blocks_[k]["count"], 0.5) for k in members])  # 0.5: no branch has rho = 0
            null = max(n - c.sum(), 0.5)
            tot = c.sum() + null
            self.log_rho_[members] = np.log(c / tot)
            self.log_rho_null_[g] = np.log(null / tot)

    @staticmethod
    def _block_score(X, b):
        return X[:, b["terminals"]] @ b["beta"] - b["log_Z"]

    def _fires(self, X, b):
        ev = X[:, b["terminals"]] * b["beta"][None, :] - b["log_z"][None, :]
        return (ev.sum(axis=1) > self.row_threshold) & ((ev > 0).mean(axis=1) >= self.consistency_threshold)

    # ------------------------------------------------------------------ inference
    def _check_X(self, X):
        check_is_fitted(self, "blocks_")
        return validate_data(self, X, dtype=np.float64, reset=False)

    def _branch_terms(self, X):
        """(n, n_blocks) array of log rho_k + S_k(I)."""
        if not self.blocks_:
            return np.zeros((X.shape[0], 0))
        return np.stack([self._block_score(X, b) for b in self.blocks_], axis=1) + self.log_rho_[None, :]

    def template_score(self, X):
        """Consistency score log p(I)/q(I) under SUM-MAX inference (sum over OR nodes of the best branch)."""
        X = self._check_X(X)
        terms = self._branch_terms(X)
        total = np.zeros(X.shape[0])
        for g, members in enumerate(self.or_nodes_):
            total += np.maximum(self.log_rho_null_[g], terms[:, members].max(axis=1))
        return total

    def decision_function(self, X):
        """Posterior log-odds of the template class: Score(I) + log(n_pos / n_ref) (training frequencies)."""
        return self.template_score(X) + self.log_prior_ratio_

    def predict_proba(self, X):
        p = expit(self.decision_function(X))
        return np.stack([1.0 - p, p], axis=1)

    def predict(self, X):
        d = self.decision_function(X)
        return self.classes_[(d > 0).astype(int)]

    def explain(self, X):
        """The parse of each row: per OR node the chosen branch (or None) and its AND node's terminals.

        Returns a list (one per row) of dicts ``{"score", "or_nodes": [{"or_node", "branch", "contribution",
        "terminals": [{"feature", "beta", "response", "evidence"}]}]}`` where ``contribution`` is the OR node's
        term of the score (log rho + S_k for a fired branch, log rho_null otherwise) and ``evidence`` is
        beta_kj r_j(I) - log z_j(beta_kj). The contributions sum to ``score`` (= ``template_score``).
        """
        X = self._check_X(X)
        terms = self._branch_terms(X)
        out = []
        for i in range(X.shape[0]):
            nodes, score = [], 0.0
            for g, members in enumerate(self.or_nodes_):
                k = members[int(np.argmax(terms[i, members]))]
                if terms[i, k] > self.log_rho_null_[g]:
                    b = self.blocks_[k]
                    ev = [{"feature": int(j), "beta": float(bj), "response": float(X[i, j]),
                           "evidence": float(bj * X[i, j] - lz)}
                          for j, bj, lz in zip(b["terminals"], b["beta"], b["log_z"])]
                    nodes.append({"or_node": g, "branch": int(k), "contribution": float(terms[i, k]),
                                  "terminals": ev})
                    score += float(terms[i, k])
                else:
                    nodes.append({"or_node": g, "branch": None, "contribution": float(self.log_rho_null_[g]),
                                  "terminals": []})
                    score += float(self.log_rho_null_[g])
            out.append({"score": score, "or_nodes": nodes})
        return out

    # ------------------------------------------------------------------ semi-supervised expansion
    def expand(self, X_unlabeled):
        """Add branches learned from unlabelled high-quality rows that no branch explains (see module doc).

        Returns ``self``; ``expansion_log_`` lists every candidate with its gain, consistency and verdict.
        """
        X = self._check_X(X_unlabeled)
        if X.shape[0] == 0:
            raise ValueError("X_unlabeled has no rows")
        explained = np.zeros(X.shape[0], dtype=bool)
        for b in self.blocks_:  # a row is explained when some branch fires on it (the E-step's rule)
            explained |= self._fires(X, b)
        free = X[~explained]
        used = np.zeros(self.n_features_in_, dtype=bool)
        for b in self.blocks_:
            used |= self._blocked_by(b["terminals"])
        self.expansion_log_ = []
        added = []
        while free.shape[0] > 0 and len(self.blocks_) + len(added) < 4 * int(self.n_blocks):
            blk = self._pursue(free, used)
            if blk is None:
                break
            rows = blk["rows"]
            s = free[rows][:, blk["terminals"]]
            mean_gain = float(self._block_score(free[rows], blk).mean())
            side = np.sign(blk["beta"])[None, :] * (s - self.ref_mean_[blk["terminals"]][None, :]) > 0
            consistency = float(side.mean())
            ok = mean_gain >= self.gain_threshold and consistency >= self.consistency_threshold
            self.expansion_log_.append({"terminals": list(blk["terminals"]), "support": int(rows.sum()),
                                        "mean_gain": mean_gain, "consistency": consistency, "accepted": ok})
            used |= self._blocked_by(blk["terminals"])
            if ok:
                added.append(blk)
                free = free[~rows]
        if not added:
            return self
        # the unlabelled rows join the positives: re-count every branch on them, then place the new ones
        old_fires = [self._fires(X, b) for b in self.blocks_]
        for b, f in zip(self.blocks_, old_fires):
            b["count"] += float(f.sum())
        for blk in added:
            f = self._fires(X, blk)
            blk["count"] = float(f.sum())
            k = len(self.blocks_)
            self.blocks_.append(blk)
            for g in self.or_nodes_:
                if all(self._exclusive(f, old_fires[m] if m < len(old_fires) else
                                       self._fires(X, self.blocks_[m])) for m in g):
                    g.append(k)
                    break
            else:
                self.or_nodes_.append([k])
        self.n_rows_ += X.shape[0]
        self._set_rho()
        self.n_parameters_ = int(sum(2 * len(b["terminals"]) + 2 for b in self.blocks_))
        return self
