"""GRAM-DTI vs a SMILES-protein CLIP and pairwise-InfoNCE multi-modal comparators, on synthetic
four-view drug-target data with a drug-cold split, in two pre-training regimes.

Paper claims (arXiv 2509.21971): GRAM-DTI's pre-training (Gramian-volume alignment of four
modalities, adaptive modality dropout, IC50 weak supervision) gives better drug-target interaction
prediction than SMILES-protein models, in particular for unseen drugs and targets; each component
helps (ablations).

Each trial ``seed`` is one independent draw of everything: one synthetic dataset per regime
(:func:`make_dti_data`), the probe's pairs, and the pretrainers, one per arm. Regimes:
- ``corpus`` (the headline, as in the paper): the pre-training quadruplets are the known
  interactions of a separate group of corpus drugs (40 % of the drugs, about 4,800 pairs); the
  probe is trained on labelled pairs of other drugs (20 %) and scored on unseen test drugs (20 %);
- ``labels`` (arms prefixed ``labels_``): the pre-training quadruplets are exactly the positives of
  the probe's training drugs (60 %), so SMILES-protein pre-training is trained on the downstream
  labels themselves.
Arms:
- ``clip``: ``L_bi`` only (SMILES-protein InfoNCE), the baseline a user would pick;
- ``pairwise``: the sum of InfoNCE over all six modality pairs, the natural multi-modal comparator;
- ``pairwise_bi`` (control): ``pairwise`` + ``L_bi``, the same extra SMILES-protein term the
  volume objective carries, so ``volume`` vs ``pairwise_bi`` isolates the volume term;
- ``volume``: ``L_vol + L_bi`` (the official objective without dropout and IC50);
- ``volume_adaptive``: + adaptive modality dropout (p_drop 0.8, ``run.py:34``);
- ``full``: + the IC50 auxiliary loss (GRAM-DTI);
- ``full_random`` (control): ``full`` with a uniformly drawn modality dropped at the same rate;
- ``full_random_aux`` (control): ``full`` dropping only text or HTA (never the L_bi pair), at random;
- ``untrained``: the randomly initialised projectors (what the probe gets from no pre-training).
Every arm has the same projector initialisation and fit seed (so the dropout arms drop on the same
steps and draw anchors from the same stream, and the heads' dropout masks are the same function of
the seed), optimiser (Adam, clipping at 1.0), steps and batch size; its learning rate is chosen on
the validation drugs' probe AUROC from ``lr_grid``, widened once past an edge that wins. The probe
(logistic regression on ``[z_d * z_p, z_d, z_p]`` of the frozen SMILES and protein embeddings, C
chosen on validation) is trained on pairs of the probe's training drugs, and scored on pairs of
unseen (test) drugs: AUROC.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from iclr26.common.seeding import seed_everything

from .data import make_dti_data, probe_pairs
from .pretrainer import GRAMDTIPretrainer
from .probe import pair_features, probe_scores

ARMS = {
    "clip": dict(objective="clip", dropout=None, ic50=False),
    "pairwise": dict(objective="pairwise", dropout=None, ic50=False),
    "pairwise_bi": dict(objective="pairwise_bi", dropout=None, ic50=False),
    "volume": dict(objective="gram", dropout=None, ic50=False),
    "volume_adaptive": dict(objective="gram", dropout="adaptive", ic50=False),
    "full": dict(objective="gram", dropout="adaptive", ic50=True),
    "full_random": dict(objective="gram", dropout="random", ic50=True),
    "full_random_aux": dict(objective="gram", dropout="random_aux", ic50=True),
}
MODALITIES = ("text", "hta", "smiles", "protein")  # losses.py:237 order; the protein is the no-drop anchor
# regime -> (split fractions, trained arms, metric-name prefix)
REGIMES = {
    "corpus": ((0.4, 0.2, 0.2, 0.2), tuple(ARMS), ""),
    "labels": ((0.6, 0.2, 0.2), ("clip", "full"), "labels_"),
}

SCALES = {
    "smoke": dict(n_drugs=60, n_proteins=30, steps=8, batch=32, lr_grid=(1e-3,), hidden=16, dim=8,
                  n_probe=(600, 300, 300), widen=False),
    "quick": dict(n_drugs=600, n_proteins=200, steps=150, batch=128, lr_grid=(3e-3, 1e-2), hidden=32,
                  dim=16, n_probe=(4000, 2000, 3000), widen=True),
    # the paper's setting (not run): 50,968 quadruplets, batch 1280 (run.py:22), 40 epochs (run.py:24),
    # Adam lr 1e-4 (trainer.py:191), projectors 768 -> 512 (models.py:29-38)
    "paper": dict(n_drugs=6000, n_proteins=2000, steps=1600, batch=1280, lr_grid=(1e-4, 3e-4, 1e-3), hidden=768,
                  dim=512, n_probe=(50000, 20000, 20000), widen=True),
}
SEEDS = {"smoke": 1, "quick": 8, "paper": 10}


def _train_arm(arm: str, cfg: dict, data, views, ic50, probe_sets, seed: int, lr: float | None):
    kw = ARMS.get(arm, {})
    model = GRAMDTIPretrainer({m: views[m].shape[1] for m in MODALITIES}, shared={"hta": "text"},
                              hidden=cfg["hidden"], projection_dim=cfg["dim"], ic50_hidden=cfg["hidden"],
                              seed=seed, **kw)
    hist = {}
    if lr is not None:
        hist = model.fit(views, ic50, steps=cfg["steps"], batch_size=cfg["batch"], lr=lr, seed=seed)
    zd = model.transform({"smiles": data.drug_views["smiles"]}, ["smiles"])["smiles"]
    zp = model.transform({"protein": data.protein_view}, ["protein"])["protein"]
    feats = {k: (pair_features(zd, zp, pr), y) for k, (pr, y) in probe_sets.items()}
    res = probe_scores(feats["train"], feats["val"], {"test": feats["test"]}, seed=seed)
    res["drop_rates"] = hist.get("drop_rates", {})
    res["final_loss"] = hist["losses"][-1] if hist else float("nan")
    return res


def _run_regime(cfg: dict, seed: int, fractions, arms, prefix: str, auroc: dict, aupr: dict, info: dict):
    data = make_dti_data(cfg["n_drugs"], cfg["n_proteins"], split_fractions=fractions, seed=seed)
    views, ic50 = data.quadruplets()
    rng = np.random.default_rng(seed + 10_000)
    probe_sets = {part: probe_pairs(data, part, n, rng) for part, n in zip(("train", "val", "test"), cfg["n_probe"])}
    for arm in arms:
        grid = list(cfg["lr_grid"])
        tried = {lr: _train_arm(arm, cfg, data, views, ic50, probe_sets, seed, lr) for lr in grid}
        if cfg["widen"]:
            best = max(tried, key=lambda k: tried[k]["val_auroc"])
            if best == min(tried):
                lr = best / 3
                tried[lr] = _train_arm(arm, cfg, data, views, ic50, probe_sets, seed, lr)
            elif best == max(tried):
                lr = best * 3
                tried[lr] = _train_arm(arm, cfg, data, views, ic50, probe_sets, seed, lr)
        best = max(tried, key=lambda k: tried[k]["val_auroc"])
        r = tried[best]
        name = prefix + arm
        auroc[name], aupr[name] = r["test_auroc"], r["test_aupr"]
        info["lr"][name] = best
        info["val_auroc"][name] = r["val_auroc"]
        info["drop_rates"][name] = r["drop_rates"]
        info["grid"][name] = {str(k): v["val_auroc"] for k, v in tried.items()}
    r = _train_arm("untrained", cfg, data, views, ic50, probe_sets, seed, None)
    auroc[prefix + "untrained"], aupr[prefix + "untrained"] = r["test_auroc"], r["test_aupr"]
    info["n_quadruplets"][prefix or "corpus"] = int(len(data.pretrain_pairs))


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    seed_everything(seed)
    t0 = time.time()
    auroc, aupr = {}, {}
    info = {"lr": {}, "val_auroc": {}, "drop_rates": {}, "grid": {}, "n_quadruplets": {}}
    for regime, (fractions, arms, prefix) in REGIMES.items():
        _run_regime(cfg, seed, fractions, arms, prefix, auroc, aupr, info)
    info["seconds"] = time.time() - t0
    return {"metrics": {"auroc": auroc, "aupr": aupr}, "info": info}
