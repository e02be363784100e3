"""RECON vs the raw IE-AE pose, no canonicalisation and a label-supervised correction, on digits
with known per-class pose distributions.

Paper claims (arXiv 2505.13289, abstract and Sec. 5): correcting the arbitrary canonical of a
class-pose decomposition by ``g_nat = g_hat m^{-1}`` discovers the data's instance-level pose
distributions without labels, and used as a test-time canonicalisation layer in front of a frozen
pre-trained classifier it improves that classifier, matching or beating label-supervised
canonicalisation.

One trial ``seed`` is one independent draw of everything: a stratified train / test split of
scikit-learn's 1,797 digits (16 x 16, :mod:`.datasets`), one true rotation per image from its
class's pose family (:data:`.datasets.POSE_FAMILIES`: upright, interval, bimodal 0/180, uniform),
and one IE-AE (:mod:`.backbone`) trained from its own initialisation on the rotated training
images, without labels. The reference set of :class:`.canonicalizer.RECON` is the training set's
``(z, g_hat)``; every measurement is on the test images. Arms (each a pose per test image):

- ``recon``: ``g_nat = g_hat m^{-1}``, ``m`` the Tukey-biweight Frechet mean of the poses of the
  ``k`` nearest training codes;
- ``raw``: the IE-AE's own ``g_hat`` (the control that isolates the normalisation: the same
  backbone, no correction);
- ``global``: ``g_hat`` corrected by one robust mean over the whole training set (a second
  control: a normalisation without the neighbourhoods);
- ``supervised``: ``g_hat`` corrected by the robust mean of the training poses of the image's
  true class (labels used: an upper reference, not a competitor);
- ``none``: the identity pose (no canonicalisation).

Metrics per trial: ``pose_w1``, the circular Wasserstein-1 distance between each arm's poses and
the true rotations of the test images, per class, averaged over the 10 classes (radians); the
same for uniform random poses (arm ``random``, the trivial level); ``accuracy``, the test accuracy
of one frozen classifier trained on the upright training images (logistic regression, its ``C``
chosen by cross-validation on the training split) after rotating each test image by ``-pose``
(``recon`` through :class:`.canonicalizer.TestTimeCanonicalizer`; ``true`` un-rotates by the true
rotation: the ceiling); ``equivariance_error``, the mean arc error
``|g_hat(rho(a) x) - g_hat(x) - a|`` of the backbone over test images and uniform angles ``a``.
Training raises :class:`.backbone.NonFiniteTrainingError` on a non-finite loss or gradient.
"""
from __future__ import annotations

import math
import time

import numpy as np
import torch

from iclr26.common.seeding import seed_everything

from .backbone import IEAutoencoder, encode, train_ieae
from .canonicalizer import RECON, TestTimeCanonicalizer, class_frechet_means, robust_frechet_mean, wrap_angle
from .datasets import load_digit_images, rotated, sample_poses
from .metrics import circular_w1

POSE_ARMS = ("recon", "raw", "global", "supervised", "none", "random")
ACC_ARMS = ("recon", "raw", "global", "supervised", "none", "true")

SCALES = {
    "smoke": dict(n_train=300, n_test=100, steps=4, batch_size=32, lr=1e-3, n_rot=4, width=4, z_dim=8, k=5,
                  C_grid=(1.0,)),
    "quick": dict(n_train=None, n_test=450, steps=600, batch_size=64, lr=1e-3, n_rot=8, width=8, z_dim=32, k=25,
                  C_grid=(0.1, 1.0, 10.0)),
    # The paper's setting: MNIST (60k, 28 x 28) with per-class pose distributions, a steerable
    # SO(2) IE-AE trained to convergence; not run here.
    "paper": dict(n_train=None, n_test=450, steps=5000, batch_size=128, lr=1e-3, n_rot=16, width=16, z_dim=64,
                  k=25, C_grid=(0.01, 0.1, 1.0, 10.0)),
}
SEEDS = {"smoke": 1, "quick": 6, "paper": 10}
SIZE, DIGIT_SIZE = 16, 12
ESTIMATOR, TUKEY_C = "tukey", math.pi / 2


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


def _per_class_w1(pose: np.ndarray, true: np.ndarray, labels: np.ndarray) -> list[float]:
    return [circular_w1(pose[labels == c], true[labels == c]) for c in np.unique(labels)]


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    rng = seed_everything(seed)
    t0 = time.time()
    images, labels = load_digit_images(SIZE, DIGIT_SIZE)
    tr, te = _split(labels, cfg["n_test"], cfg["n_train"], rng)
    true = sample_poses(labels, rng).astype(np.float32)
    x_rot = rotated(images, true)

    # the class-pose decomposition, unlabelled
    torch.manual_seed(seed)
    model = IEAutoencoder(SIZE, cfg["z_dim"], cfg["n_rot"], cfg["width"])
    losses = train_ieae(model, x_rot[tr], steps=cfg["steps"], batch_size=cfg["batch_size"], lr=cfg["lr"], seed=seed)
    enc = model.encoder.eval()
    z_tr, g_tr = encode(enc, x_rot[tr])
    z_te, g_te = encode(enc, x_rot[te])

    # premise: equivariance of the pose head to continuous rotations
    a = torch.tensor(rng.uniform(-math.pi, math.pi, len(te)), dtype=torch.float32)
    _, g_rot = encode(enc, rotated(x_rot[te], a.numpy()))
    equiv = float(wrap_angle(g_rot - g_te - a).abs().mean())

    # arms
    recon = RECON(k=cfg["k"], estimator=ESTIMATOR, c=TUKEY_C).fit(z_tr, g_tr)
    g_nat = recon(z_te, g_te)
    y_tr, y_te, t_te = labels[tr], labels[te], true[te]
    means = class_frechet_means(g_tr, torch.as_tensor(y_tr), ESTIMATOR, TUKEY_C)
    g_sup = wrap_angle(g_te - torch.tensor([means[int(c)] for c in y_te], dtype=g_te.dtype))
    g_glob = wrap_angle(g_te - robust_frechet_mean(g_tr, ESTIMATOR, TUKEY_C))
    poses = {"recon": g_nat, "raw": g_te, "global": g_glob, "supervised": g_sup,
             "none": torch.zeros_like(g_te),
             "random": torch.tensor(rng.uniform(-math.pi, math.pi, len(te)), dtype=torch.float32)}
    w1_per_class = {arm: _per_class_w1(p.numpy(), t_te, y_te) for arm, p in poses.items()}

    # test-time canonicalisation in front of a frozen upright classifier
    clf, C = _classifier(images[tr], y_tr, cfg["C_grid"], seed)
    ttc = TestTimeCanonicalizer(enc, recon, clf, mask=enc.mask).eval()
    acc = {}
    with torch.no_grad():
        acc["recon"] = float((ttc(x_rot[te]).argmax(1).numpy() == y_te).mean())
        for arm in ("raw", "global", "supervised", "none"):
            acc[arm] = float((clf(rotated(x_rot[te], (-poses[arm]).numpy())).argmax(1).numpy() == y_te).mean())
        acc["true"] = float((clf(rotated(x_rot[te], -t_te)).argmax(1).numpy() == y_te).mean())
        upright = float((clf(images[te]).argmax(1).numpy() == y_te).mean())
    idx = recon.neighbours(z_te).numpy()
    purity = float((y_tr[idx] == y_te[:, None]).mean())

    return {
        "metrics": {
            "pose_w1": {arm: float(np.mean(w1_per_class[arm])) for arm in POSE_ARMS},
            "accuracy": {arm: acc[arm] for arm in ACC_ARMS},
            "equivariance_error": {"backbone": equiv},
        },
        "info": {
            "w1_per_class": {arm: [round(v, 4) for v in w] for arm, w in w1_per_class.items()},
            "upright_accuracy": upright, "classifier_C": C, "neighbour_label_purity": purity,
            "loss_first": losses[0], "loss_last": float(np.mean(losses[-20:])), "steps": len(losses),
            "n_train": int(len(tr)), "n_test": int(len(te)), "seconds": round(time.time() - t0, 1),
        },
    }
