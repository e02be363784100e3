"""A tiny single-scale YOLO-style detector (one box per grid cell, one class) trained here, the
network under verification in the CPU check (the paper verifies pretrained YOLO models at 640 x 640,
which cannot be loaded offline)."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from iclr26.data.vision_tasks import render_scene

__all__ = ["TinyYOLO", "yolo_loss", "make_scenes", "train_detector", "NonFiniteTrainingError"]


class NonFiniteTrainingError(FloatingPointError):
    """The detector's training loss became NaN or inf."""


class TinyYOLO(nn.Module):
    """Input (B, 3, S, S) in [0, 1]; output the pre-NMS candidates of a ``grid x grid`` map:
    boxes (B, grid^2, 4) as pixel ``(x0, y0, x1, y1)`` and objectness scores (B, grid^2) in (0, 1).
    Cell (r, c) predicts its box centre as ``((c + sigmoid(tx)) s, (r + sigmoid(ty)) s)`` with cell size s
    and side lengths ``sigmoid(tw) S``, ``sigmoid(th) S`` (YOLOv2-style centre offsets; a bounded size in
    place of the anchor's exp, so no overflow)."""

    def __init__(self, size: int = 32, grid: int = 4, width: int = 16):
        super().__init__()
        if size % grid:
            raise ValueError(f"size ({size}) must be a multiple of grid ({grid})")
        self.size, self.grid = size, grid
        layers, c_in, s = [], 3, size
        while s > grid:
            layers += [nn.Conv2d(c_in, width, 3, padding=1), nn.BatchNorm2d(width), nn.LeakyReLU(0.1), nn.MaxPool2d(2)]
            c_in, s = width, s // 2
            width = min(2 * width, 64)
        if s != grid:
            raise ValueError(f"size / grid must be a power of two, got {size} / {grid}")
        layers += [nn.Conv2d(c_in, c_in, 3, padding=1), nn.LeakyReLU(0.1), nn.Conv2d(c_in, 5, 1)]
        self.net = nn.Sequential(*layers)
        r, c = torch.meshgrid(torch.arange(grid), torch.arange(grid), indexing="ij")
        self.register_buffer("cells", torch.stack([c.flatten(), r.flatten()], -1).float(), persistent=False)

    def raw(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).flatten(2).transpose(1, 2)        # (B, grid^2, 5)

    def decode(self, raw: torch.Tensor):
        cell = self.size / self.grid
        cxy = (self.cells + torch.sigmoid(raw[..., 1:3])) * cell
        wh = torch.sigmoid(raw[..., 3:5]) * self.size
        boxes = torch.cat([cxy - wh / 2, cxy + wh / 2], dim=-1)
        return boxes, torch.sigmoid(raw[..., 0])

    def forward(self, x: torch.Tensor):
        return self.decode(self.raw(x))


def make_scenes(n: int, rng: np.random.Generator, size: int = 32, n_objects=(1, 3), min_side: int = 7,
                max_side: int = 13):
    """``n`` procedural scenes (:func:`iclr26.data.vision_tasks.render_scene`): images (n, 3, S, S) in
    [0, 1] and a list of per-image box arrays (pixel xyxy)."""
    imgs, boxes = [], []
    for _ in range(n):
        sc = render_scene(rng, n_objects=n_objects, size=size, min_side=min_side, max_side=max_side)
        imgs.append(np.asarray(sc.image, dtype=np.float32).transpose(2, 0, 1) / 255.0)
        boxes.append(np.array([o.box for o in sc.objects], dtype=np.float32).reshape(-1, 4))
    return torch.tensor(np.stack(imgs)), boxes


def targets(boxes: list, size: int, grid: int):
    """YOLO targets: objectness (n, grid^2) and the box (n, grid^2, 4) of the cell holding each centre."""
    obj = torch.zeros(len(boxes), grid * grid)
    tgt = torch.zeros(len(boxes), grid * grid, 4)
    cell = size / grid
    for i, bx in enumerate(boxes):
        for b in bx:
            cx, cy = (b[0] + b[2]) / 2, (b[1] + b[3]) / 2
            j = int(min(grid - 1, cy // cell)) * grid + int(min(grid - 1, cx // cell))
            obj[i, j] = 1.0
            tgt[i, j] = torch.as_tensor(b)
    return obj, tgt


def yolo_loss(model: TinyYOLO, x, obj, tgt, box_weight: float = 5.0):
    """Objectness BCE over all cells + ``box_weight`` x mean L1 (in cell units) on the responsible cells
    (YOLOv1's lambda_coord = 5)."""
    raw = model.raw(x)
    boxes, _ = model.decode(raw)
    bce = nn.functional.binary_cross_entropy_with_logits(raw[..., 0], obj)
    pos = obj > 0
    cell = model.size / model.grid
    l1 = ((boxes[pos] - tgt[pos]).abs().sum(-1) / cell).mean() if pos.any() else raw.sum() * 0
    return bce + box_weight * l1


def train_detector(x, boxes, *, size=32, grid=4, steps=600, lr=3e-3, batch_size=64, seed=0):
    """Adam, full-data minibatches; stops with :class:`NonFiniteTrainingError` on a non-finite loss."""
    torch.manual_seed(seed)
    model = TinyYOLO(size, grid)
    obj, tgt = targets(boxes, size, grid)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    g = torch.Generator().manual_seed(seed)
    losses = []
    model.train()
    for step in range(steps):
        idx = torch.randint(0, len(x), (batch_size,), generator=g)
        loss = yolo_loss(model, x[idx], obj[idx], tgt[idx])
        if not torch.isfinite(loss):
            raise NonFiniteTrainingError(f"detector loss is not finite at step {step}")
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    return model.eval(), losses
