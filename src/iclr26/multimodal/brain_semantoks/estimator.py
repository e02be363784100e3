"""scikit-learn wrapper: ``BrainSemantoksEmbedder().fit(X_unlabelled).transform(X)`` -> probe features."""
from __future__ import annotations

import numpy as np
import torch
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from .model import SemantoksEncoder, SimDINO, crop_pair


def _check_x(X, n_rois=None, name="X"):
    X = np.asarray(X, dtype=np.float32)
    if X.ndim != 3 or X.shape[0] == 0:
        raise ValueError(f"{name} must be a non-empty (subjects, rois, time) array, got shape {X.shape}")
    if not np.isfinite(X).all():
        raise ValueError(f"{name} holds non-finite values")
    if n_rois is not None and X.shape[1] != n_rois:
        raise ValueError(f"{name} has {X.shape[1]} ROIs, the embedder was fitted on {n_rois}")
    return X


class BrainSemantoksEmbedder(TransformerMixin, BaseEstimator):
    """Pretrain a Brain-Semantoks encoder on unlabelled fMRI, then embed subjects for a linear probe.

    ``network_index`` maps each ROI to a network id (``None``: ROI tokens, every ROI its own
    network). ``objective``: ``"simdino"`` (the paper) or ``"masked_reconstruction"`` (baseline).
    Features: the teacher's ``cls_avg`` averaged over ``n_test_crops`` evenly spaced crops.
    Training stops with a ValueError at a non-finite loss.
    """

    def __init__(self, network_index=None, objective="simdino", dim=64, depth=2, crop_length=60, patch_size=12,
                 max_crop_distance=48, steps=300, batch_size=32, lr=5e-4, weight_decay=0.04, epochs_per_curriculum=None,
                 network_loss_weight=0.5, network_decay_epochs=5.0, mask_loss_weight=0.5, momentum=0.996,
                 n_test_crops=4, random_state=0):
        self.network_index = network_index
        self.objective = objective
        self.dim = dim
        self.depth = depth
        self.crop_length = crop_length
        self.patch_size = patch_size
        self.max_crop_distance = max_crop_distance
        self.steps = steps
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.epochs_per_curriculum = epochs_per_curriculum
        self.network_loss_weight = network_loss_weight
        self.network_decay_epochs = network_decay_epochs
        self.mask_loss_weight = mask_loss_weight
        self.momentum = momentum
        self.n_test_crops = n_test_crops
        self.random_state = random_state

    def _validate(self, X):
        if not isinstance(self.steps, (int, np.integer)) or self.steps < 0:
            raise ValueError(f"steps must be a non-negative integer (0: the untrained encoder), got {self.steps!r}")
        for name in ("batch_size", "crop_length", "patch_size", "n_test_crops", "dim", "depth"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.crop_length % self.patch_size:
            raise ValueError(f"crop_length {self.crop_length} must be a multiple of patch_size {self.patch_size}")
        if self.crop_length > X.shape[2]:
            raise ValueError(f"crop_length {self.crop_length} exceeds the series length {X.shape[2]}")
        if not (np.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be finite and > 0, got {self.lr}")
        if self.max_crop_distance < 0:
            raise ValueError(f"max_crop_distance must be >= 0, got {self.max_crop_distance}")

    def fit(self, X, y=None):
        X = _check_x(X)
        self._validate(X)
        idx = np.arange(X.shape[1]) if self.network_index is None else np.asarray(self.network_index)
        if idx.shape != (X.shape[1],):
            raise ValueError(f"network_index must have one entry per ROI ({X.shape[1]}), got shape {idx.shape}")
        torch.manual_seed(self.random_state)
        gen = torch.Generator().manual_seed(self.random_state)
        enc = SemantoksEncoder(idx, self.crop_length // self.patch_size, self.dim, self.depth, patch_size=self.patch_size)
        model = SimDINO(enc, self.objective, network_loss_weight=self.network_loss_weight,
                        network_decay_epochs=self.network_decay_epochs, mask_loss_weight=self.mask_loss_weight,
                        momentum=self.momentum)
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=self.lr, weight_decay=self.weight_decay)
        sched = (torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=self.lr, total_steps=self.steps, pct_start=0.1)
                 if self.steps else None)
        data = torch.as_tensor(X)
        n = len(data)
        bs = min(self.batch_size, n)
        # curriculum clock: "epochs" of the network-loss decay are passes over the data, or the
        # whole run split into epochs_per_curriculum parts when the data are too few for passes
        steps_per_epoch = max(n // bs, 1) if self.epochs_per_curriculum is None else self.steps / self.epochs_per_curriculum
        self.loss_curve_ = []
        model.train()
        for step in range(self.steps):
            idx_b = torch.randperm(n, generator=gen)[:bs]
            v1, v2 = crop_pair(data[idx_b], self.crop_length, self.max_crop_distance, gen)
            loss = model.loss(v1, v2, step / steps_per_epoch, gen)
            if not torch.isfinite(loss):
                raise ValueError(f"non-finite loss {loss.item()} at step {step}; training stopped")
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 3.0)
            opt.step()
            sched.step()
            model.update_teacher(step, self.steps)
            self.loss_curve_.append(loss.item())
        model.eval()
        self.model_ = model
        self.encoder_ = model.encoder_for_features()
        self.n_rois_ = X.shape[1]
        self.n_features_in_ = X.shape[1]
        return self

    @torch.no_grad()
    def transform(self, X):
        check_is_fitted(self, "encoder_")
        X = _check_x(X, self.n_rois_)
        data = torch.as_tensor(X)
        span = X.shape[2] - self.crop_length
        if span < 0:
            raise ValueError(f"series length {X.shape[2]} is shorter than crop_length {self.crop_length}")
        starts = np.unique(np.linspace(0, span, self.n_test_crops).round().astype(int))
        feats = [SemantoksEncoder.cls_avg(self.encoder_(data[:, :, s:s + self.crop_length])) for s in starts]
        return torch.stack(feats).mean(0).numpy().astype(np.float64)
