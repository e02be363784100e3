"""Brain-Semantoks (ICLR 2026): network tokenizer, transformer encoder, SimDINO/MCR self-distillation.

Written from the paper (arXiv 2512.11582) and the official code (SamGijsen/Brain-Semantoks:
``model/tokenizer.py``, ``model/simdino_loss.py``, ``simdino.py``, ``config/example_config.yaml``).
Shapes: fMRI input ``x`` is ``(batch, n_rois, time)``; ``network_index`` maps each ROI to its network.
"""
from __future__ import annotations

import copy
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


def _check_views(student: torch.Tensor, teacher: torch.Tensor) -> None:
    for name, t in (("student", student), ("teacher", teacher)):
        if not isinstance(t, torch.Tensor) or t.dim() != 3:
            raise ValueError(f"{name} must be a (views, batch, dim) tensor, got {getattr(t, 'shape', type(t))}")
        if not torch.isfinite(t).all():
            raise ValueError(f"{name} holds non-finite values")
    if student.shape != teacher.shape:
        raise ValueError(f"student {tuple(student.shape)} and teacher {tuple(teacher.shape)} must match")
    if student.shape[0] < 2:
        raise ValueError("student/teacher need at least 2 views (the compression term pairs distinct views)")


def coding_rate(z: torch.Tensor, eps: float = 0.05) -> torch.Tensor:
    """R(Z) = 1/2 logdet(I_p + p / (m eps) Z^T Z) for Z of shape (m, p) (simdino_loss.py calc_expansion)."""
    if eps <= 0:
        raise ValueError(f"eps must be > 0, got {eps}")
    m, p = z.shape
    cov = z.T @ z
    eye = torch.eye(p, dtype=z.dtype, device=z.device)
    chol = torch.linalg.cholesky_ex(eye + (p / (m * eps)) * cov)[0]
    return chol.diagonal().log().sum()


def mcr_loss(student: torch.Tensor, teacher: torch.Tensor, eps: float = 0.05, coeff: float = 1.0) -> torch.Tensor:
    """SimDINO's MCR loss (official ``MCRLoss`` with expa_type=1, no_diag=True, normalized inputs).

    ``student`` and ``teacher`` are (views, m, p) L2-normalised features. Compression: the mean
    cosine between student view i and teacher view j over the pairs i != j. Expansion: the coding
    rate of the student/teacher average per view, averaged over views and scaled by the balancing
    factor gamma = (p + m) / (p m). Loss = -coeff * compression - expansion.
    """
    _check_views(student, teacher)
    if coeff < 0:
        raise ValueError(f"coeff must be >= 0, got {coeff}")
    v, m, p = student.shape
    sim = torch.einsum("imp,jmp->ijm", teacher, student).mean(-1)  # teacher view i, student view j
    off = ~torch.eye(v, dtype=torch.bool, device=sim.device)
    comp = sim[off].sum() / (v * v - v)
    mid = (student + teacher) / 2
    expa = torch.stack([coding_rate(mid[i], eps) for i in range(v)]).mean() * (p + m) / (p * m)
    return -coeff * comp - expa


def network_weight(epoch: float, weight: float = 0.5, decay_epochs: float = 5.0) -> float:
    """Curriculum weight of the network-token MCR loss: cosine decay from ``weight`` to 0 over
    ``decay_epochs`` (config ssl.network_loss_weight 0.5, netloss_weight_decay_epochs 5, cosine)."""
    if decay_epochs <= 0:
        return 0.0
    if epoch >= decay_epochs:
        return 0.0
    return float(weight * 0.5 * (1.0 + math.cos(math.pi * max(epoch, 0.0) / decay_epochs)))


class NetworkTokenizer(nn.Module):
    """One token per functional network and time patch.

    Each network's ROIs go through their own dense Conv1d (kernel 3, 'same' padding; the dense
    branch of example_config.yaml), then GELU, mean pooling over each patch of ``patch_size`` TRs,
    and LayerNorm. All networks run as one convolution whose weight is masked block-diagonally, so
    network k's channels see only network k's ROIs. ``network_index = arange(n_rois)`` gives ROI
    tokens (the official ``max_spatial: true``).
    """

    def __init__(self, network_index, dim: int = 64, patch_size: int = 12, kernel_size: int = 3):
        super().__init__()
        idx = np.asarray(network_index)
        if idx.ndim != 1 or idx.size == 0 or not np.issubdtype(idx.dtype, np.integer):
            raise ValueError("network_index must be a non-empty 1-D integer array (one network id per ROI)")
        if idx.min() < 0:
            raise ValueError("network_index must hold non-negative network ids")
        uniq = np.unique(idx)
        if not np.array_equal(uniq, np.arange(uniq.size)):
            raise ValueError("network_index must use every id 0..K-1")
        for name, v in (("dim", dim), ("patch_size", patch_size), ("kernel_size", kernel_size)):
            if not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        self.n_rois, self.n_networks, self.dim, self.patch_size = idx.size, uniq.size, int(dim), int(patch_size)
        self.conv = nn.Conv1d(self.n_rois, self.n_networks * self.dim, kernel_size, padding="same")
        mask = torch.zeros(self.n_networks * self.dim, self.n_rois, 1)
        for k in range(self.n_networks):
            mask[k * self.dim:(k + 1) * self.dim, torch.as_tensor(idx == k)] = 1.0
        self.register_buffer("weight_mask", mask)
        with torch.no_grad():  # fan-in of each block is its own network's ROIs, not all ROIs
            fan = torch.as_tensor(np.bincount(idx), dtype=torch.float32).repeat_interleave(self.dim)
            bound = 1.0 / torch.sqrt(fan * kernel_size)
            self.conv.weight.uniform_(-1, 1).mul_(bound.view(-1, 1, 1))
            self.conv.bias.uniform_(-1, 1).mul_(bound)
        self.norm = nn.LayerNorm(self.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 3 or x.shape[1] != self.n_rois:
            raise ValueError(f"x must be (batch, {self.n_rois}, time), got {tuple(x.shape)}")
        if x.shape[-1] % self.patch_size:
            raise ValueError(f"time length {x.shape[-1]} must be a multiple of patch_size {self.patch_size}")
        h = F.gelu(F.conv1d(x, self.conv.weight * self.weight_mask, self.conv.bias, padding="same"))
        b, _, t = h.shape
        h = h.view(b, self.n_networks, self.dim, t // self.patch_size, self.patch_size).mean(-1)
        return self.norm(h.permute(0, 1, 3, 2))  # (batch, networks, patches, dim)


class SemantoksEncoder(nn.Module):
    """Tokenizer + learned network and patch embeddings + CLS + pre-norm transformer.

    ``forward(x, mask)`` returns (batch, 1 + networks * patches, dim); ``mask`` (batch, networks,
    patches) bool replaces those tokens by a learned mask token before the embeddings are added.
    """

    def __init__(self, network_index, n_patches: int, dim: int = 64, depth: int = 2, heads: int | None = None,
                 patch_size: int = 12, kernel_size: int = 3):
        super().__init__()
        if not isinstance(n_patches, (int, np.integer)) or n_patches < 1:
            raise ValueError(f"n_patches must be a positive integer, got {n_patches!r}")
        if not isinstance(depth, (int, np.integer)) or depth < 1:
            raise ValueError(f"depth must be a positive integer, got {depth!r}")
        heads = heads or max(1, dim // 64) * 2  # official: D / 64 heads; two at least at our small D
        if dim % heads:
            raise ValueError(f"dim {dim} must be divisible by heads {heads}")
        self.tokenizer = NetworkTokenizer(network_index, dim, patch_size, kernel_size)
        self.n_networks, self.n_patches, self.dim = self.tokenizer.n_networks, int(n_patches), int(dim)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.mask_token = nn.Parameter(torch.zeros(1, 1, 1, dim))
        self.net_embed = nn.Parameter(0.02 * torch.randn(1, self.n_networks, 1, dim))
        self.patch_embed = nn.Parameter(0.02 * torch.randn(1, 1, self.n_patches, dim))
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        tok = self.tokenizer(x)
        if tok.shape[2] != self.n_patches:
            raise ValueError(f"x gives {tok.shape[2]} patches, the encoder was built for {self.n_patches}")
        if mask is not None:
            if mask.shape != tok.shape[:3]:
                raise ValueError(f"mask must be {tuple(tok.shape[:3])}, got {tuple(mask.shape)}")
            tok = torch.where(mask.unsqueeze(-1), self.mask_token.expand_as(tok), tok)
        tok = (tok + self.net_embed + self.patch_embed).flatten(1, 2)
        tok = torch.cat([self.cls.expand(len(tok), -1, -1), tok], 1)
        return self.norm(self.blocks(tok))

    @staticmethod
    def cls_avg(tokens: torch.Tensor) -> torch.Tensor:
        """Probe features: CLS token concatenated with the mean of the other tokens (``cls_avg``)."""
        return torch.cat([tokens[:, 0], tokens[:, 1:].mean(1)], -1)


class ProjectionHead(nn.Module):
    """DINO-style head: MLP (GELU) to a bottleneck, L2-normalised (model/dino_head.py, 2 layers)."""

    def __init__(self, dim: int, hidden: int = 128, bottleneck: int = 32):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, bottleneck))

    def forward(self, x):
        return F.normalize(self.mlp(x), dim=-1)


def slice_mask(batch: int, n_networks: int, n_patches: int, ratio: tuple[float, float], generator) -> torch.Tensor:
    """Per sample, mask whole time slices (all networks of a patch): a share drawn from ``ratio``,
    at least one slice masked and one left visible."""
    lo, hi = ratio
    if not 0 <= lo <= hi < 1:
        raise ValueError(f"mask ratio must satisfy 0 <= low <= high < 1, got {ratio}")
    share = lo + (hi - lo) * torch.rand(batch, generator=generator)
    n_mask = (share * n_patches).round().clamp(1, max(n_patches - 1, 1)).long()
    order = torch.rand(batch, n_patches, generator=generator).argsort(1)
    cols = order < n_mask.unsqueeze(1)
    return cols.unsqueeze(1).expand(batch, n_networks, n_patches).clone()


def crop_pair(x: torch.Tensor, length: int, max_distance: int, generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Two temporal crops of ``length`` TRs per sample whose starts lie at most ``max_distance`` apart
    (config data.max_crop_distance; 'conditional_align' starts)."""
    b, _, t = x.shape
    if length > t:
        raise ValueError(f"crop length {length} exceeds the series length {t}")
    span = t - length
    s1 = torch.randint(0, span + 1, (b,), generator=generator)
    lo = (s1 - max_distance).clamp(min=0)
    hi = (s1 + max_distance).clamp(max=span)
    s2 = lo + (torch.rand(b, generator=generator) * (hi - lo + 1).float()).long().clamp(max=(hi - lo))
    ar = torch.arange(length)
    take = lambda s: torch.gather(x, 2, (s.view(-1, 1, 1) + ar.view(1, 1, -1)).expand(b, x.shape[1], length))
    return take(s1), take(s2)


class SimDINO(nn.Module):
    """Student/teacher self-distillation of Brain-Semantoks (simdino.py forward).

    loss = MCR(CLS heads) + w_net(epoch) * MCR(network tokens averaged over patches, heads)
         + mask_weight * (-cosine(student mask head on masked tokens, teacher mask head)).
    The teacher is an EMA of the student (cosine momentum schedule from ``momentum`` to 1).
    ``objective="masked_reconstruction"`` instead trains the student alone to reconstruct the
    masked patches' input signal (MSE; the mask-and-reconstruct baseline of BrainLM's kind).
    """

    def __init__(self, encoder: SemantoksEncoder, objective: str = "simdino", hidden: int = 128, bottleneck: int = 32,
                 network_loss_weight: float = 0.5, network_decay_epochs: float = 5.0, mask_loss_weight: float = 0.5,
                 mask_ratio=(0.65, 0.85), eps: float = 0.05, momentum: float = 0.996):
        super().__init__()
        if objective not in ("simdino", "masked_reconstruction"):
            raise ValueError(f"objective must be 'simdino' or 'masked_reconstruction', got {objective!r}")
        for name, v in (("network_loss_weight", network_loss_weight), ("mask_loss_weight", mask_loss_weight)):
            if not np.isfinite(v) or v < 0:
                raise ValueError(f"{name} must be finite and >= 0, got {v}")
        if not 0 <= momentum < 1:
            raise ValueError(f"momentum must lie in [0, 1), got {momentum}")
        self.objective, self.eps, self.momentum = objective, eps, momentum
        self.network_loss_weight, self.network_decay_epochs = network_loss_weight, network_decay_epochs
        self.mask_loss_weight, self.mask_ratio = mask_loss_weight, tuple(mask_ratio)
        self.student = encoder
        d = encoder.dim
        if objective == "simdino":
            self.head = ProjectionHead(d, hidden, bottleneck)
            self.mask_head = ProjectionHead(d, hidden, bottleneck)
            self.teacher = copy.deepcopy(encoder).requires_grad_(False)
            self.teacher_head = copy.deepcopy(self.head).requires_grad_(False)
            self.teacher_mask_head = copy.deepcopy(self.mask_head).requires_grad_(False)
        else:
            n_rois = encoder.tokenizer.n_rois
            self.decoder = nn.Linear(d, n_rois * encoder.tokenizer.patch_size)
            self.teacher = None

    def loss(self, view1: torch.Tensor, view2: torch.Tensor, epoch: float, generator) -> torch.Tensor:
        enc = self.student
        b, K, P = len(view1), enc.n_networks, enc.n_patches
        masks = [slice_mask(b, K, P, self.mask_ratio, generator) for _ in range(2)]
        if self.objective == "masked_reconstruction":
            total = 0.0
            ps = enc.tokenizer.patch_size
            for v, m in zip((view1, view2), masks):
                tok = enc(v, m)[:, 1:].reshape(b, K, P, -1)
                target = v.view(b, v.shape[1], P, ps).permute(0, 2, 1, 3).reshape(b, P, -1)  # patch signal, all ROIs
                pred = self.decoder(tok.mean(1))  # (b, P, rois * ps) from the patch's tokens
                sel = m[:, 0]  # slices masked for every network
                total = total + F.mse_loss(pred[sel], target[sel])
            return total / 2
        with torch.no_grad():
            t = [self.teacher(v) for v in (view1, view2)]
        s = [enc(v, m) for v, m in zip((view1, view2), masks)]
        cls_s = torch.stack([self.head(z[:, 0]) for z in s])
        cls_t = torch.stack([self.teacher_head(z[:, 0]) for z in t])
        total = mcr_loss(cls_s, cls_t, self.eps)
        w = network_weight(epoch, self.network_loss_weight, self.network_decay_epochs)
        if w > 0:
            net = lambda z, head: head(z[:, 1:].reshape(b, K, P, -1).mean(2).reshape(b * K, -1))
            net_s = torch.stack([net(z, self.head) for z in s])
            net_t = torch.stack([net(z, self.teacher_head) for z in t])
            total = total + w * mcr_loss(net_s, net_t, self.eps)
        if self.mask_loss_weight > 0:
            cos = []
            for zs, zt, m in zip(s, t, masks):
                flat = m.reshape(b, -1)
                c = F.cosine_similarity(self.mask_head(zs[:, 1:][flat]), self.teacher_mask_head(zt[:, 1:][flat]), dim=-1)
                wts = (1.0 / flat.sum(1).clamp(min=1)).unsqueeze(1).expand_as(flat)[flat]
                cos.append((c * wts).sum() / b)
            total = total - self.mask_loss_weight * torch.stack(cos).mean()
        return total

    @torch.no_grad()
    def update_teacher(self, step: int, total_steps: int) -> None:
        if self.teacher is None:
            return
        m = 1.0 - (1.0 - self.momentum) * (math.cos(math.pi * step / max(total_steps, 1)) + 1) / 2
        for src, dst in ((self.student, self.teacher), (self.head, self.teacher_head),
                         (self.mask_head, self.teacher_mask_head)):
            for ps, pt in zip(src.parameters(), dst.parameters()):
                pt.mul_(m).add_(ps.detach(), alpha=1 - m)

    def encoder_for_features(self) -> SemantoksEncoder:
        return self.teacher if self.teacher is not None else self.student
