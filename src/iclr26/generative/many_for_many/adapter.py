"""Many-for-Many (MfM): the light condition adapter and the unified condition input.

Paper: "Many-for-Many: Unify the Training of Multiple Video and Image Generation and Manipulation
Tasks", Li, Yang, Shi, Feng, Wen, Peng, Zhang (arXiv:2506.01758); official code
https://github.com/leeruibin/MfM (``mfm/modeling/light_adapter.py``, ``transformer_3d.py``,
``embeddings.py``, ``pipelines/pipeline_mfm.py``).

The paper unifies the conditions of many tasks into one input of the DiT (Sec. 3, "lightweight
adapter"): every visual condition is a pixel-space video with a binary mask of the given pixels
(``images_cond = frames * masks``, concatenated on the channel axis with the masks; a text-to-video
task has an all-zero mask, image-to-video a mask on the first frame, inpainting a mask outside the
hole). A small convolutional network maps this tensor to the DiT's token width on the token grid,
and its output is *added* to the patch embedding of the noisy latent (``PatchEmbed3D.forward``:
``latent = latent + conditional_input``). Text (here: the class label) enters as before.

This module holds

* :class:`MfMConditionAdapter`: the light adapter (``ConvitConditioningEmbedding``), with the
  official structure: ``conv_in`` (3x3) -> SiLU -> for each channel step a 3x3 conv at the same
  width and a stride-2 conv to the next width, alternating ``Conv3d`` (down-sampling time and
  space) and ``Conv2d`` (space only), each followed by SiLU -> ``conv_out`` (3x3) to the token width;
* :func:`task_mask` / :func:`unified_condition`: the task conditions mapped to one
  ``(B, C + 1, F, H, W)`` input (conditioned video and mask), the paper's unified condition;
* :class:`MfMVideoTransformer`: a :class:`iclr26.models.video.TinyVideoDiT` whose patch embedding
  receives the adapter's output (the hook point is the output of ``patch_in``);
* :func:`bind_condition`: the model with a fixed condition as an ``(x, t, y)`` denoiser, so that
  the shared samplers and losses of :mod:`iclr26.models.diffusion` run unchanged.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn
from torch.nn import functional as F

from iclr26.models import diffusion as D
from iclr26.models.video import TinyVideoDiT

TASKS = ("c2v", "i2v", "inpaint")
"""Tasks of the toy: class-to-video (the text-to-video stand-in: no visual condition),
image-to-video (the first frame given) and video inpainting (a box hole in every frame)."""


class MfMConditionAdapter(nn.Module):
    """The light condition adapter of MfM (``ConvitConditioningEmbedding`` in the official code).

    ``forward(cond)``: ``cond`` ``(B, conditioning_channels, F, H, W)`` -> ``(B,
    embedding_channels, F', H / 2^k, W / 2^k)`` with ``k = len(block_out_channels) - 1`` stride-2
    steps. Step ``i`` is a 3x3 ``Conv2d`` at width ``block_out_channels[i]`` followed by a stride-2
    conv to ``block_out_channels[i + 1]``: a ``Conv3d`` (kernel 3, stride ``(temporal_stride, 2,
    2)``) for even ``i`` and a ``Conv2d`` (per frame) for odd ``i``; every conv but ``conv_out`` is
    followed by SiLU. Defaults from the official code: ``conditioning_channels = 4`` (RGB + mask),
    ``block_out_channels = (16, 32, 96, 256)``, stride 2 in time (the official ``Conv3d`` has
    ``stride=2`` in all three axes, matching the VAE's temporal compression); the toy has no VAE
    and passes ``temporal_stride=1``.
    """

    def __init__(self, embedding_channels: int, conditioning_channels: int = 4,
                 block_out_channels: Sequence[int] = (16, 32, 96, 256), temporal_stride: int = 2):
        super().__init__()
        block_out_channels = tuple(int(c) for c in block_out_channels)
        if len(block_out_channels) < 1 or min(block_out_channels) < 1:
            raise ValueError(f"block_out_channels must be a non-empty sequence of positive ints, got {block_out_channels}")
        if embedding_channels < 1 or conditioning_channels < 1:
            raise ValueError(f"embedding_channels and conditioning_channels must be >= 1, got "
                             f"{embedding_channels}, {conditioning_channels}")
        if temporal_stride not in (1, 2):
            raise ValueError(f"temporal_stride must be 1 or 2, got {temporal_stride}")
        self.embedding_channels, self.conditioning_channels = embedding_channels, conditioning_channels
        self.block_out_channels, self.temporal_stride = block_out_channels, temporal_stride
        self.conv_in = nn.Conv2d(conditioning_channels, block_out_channels[0], 3, padding=1)
        self.blocks = nn.ModuleList()
        for i in range(len(block_out_channels) - 1):
            c_in, c_out = block_out_channels[i], block_out_channels[i + 1]
            self.blocks.append(nn.Conv2d(c_in, c_in, 3, padding=1))
            if i % 2 == 0:
                self.blocks.append(nn.Conv3d(c_in, c_out, 3, padding=1, stride=(temporal_stride, 2, 2)))
            else:
                self.blocks.append(nn.Conv2d(c_in, c_out, 3, padding=1, stride=2))
        self.conv_out = nn.Conv2d(block_out_channels[-1], embedding_channels, 3, padding=1)

    @property
    def spatial_factor(self) -> int:
        """How much the adapter shrinks height and width (``2^k``)."""
        return 2 ** (len(self.block_out_channels) - 1)

    def forward(self, cond: torch.Tensor) -> torch.Tensor:
        if cond.dim() != 5 or cond.shape[1] != self.conditioning_channels:
            raise ValueError(f"cond must have shape (B, {self.conditioning_channels}, F, H, W), got {tuple(cond.shape)}")
        B, _, n_frames, H, W = cond.shape
        if H % self.spatial_factor or W % self.spatial_factor:
            raise ValueError(f"H and W ({H}, {W}) must be divisible by {self.spatial_factor}")

        def frames_to_batch(e):                     # b c f h w -> (b f) c h w
            return e.permute(0, 2, 1, 3, 4).reshape(-1, e.shape[1], e.shape[3], e.shape[4])

        def batch_to_frames(e, f):                  # (b f) c h w -> b c f h w
            return e.reshape(B, f, *e.shape[1:]).permute(0, 2, 1, 3, 4)

        e = F.silu(self.conv_in(frames_to_batch(cond)))
        f = n_frames
        for block in self.blocks:
            if isinstance(block, nn.Conv3d):
                e = block(batch_to_frames(e, f))
                f = e.shape[2]
                e = frames_to_batch(e)
            else:
                e = block(e)
            e = F.silu(e)
        return batch_to_frames(self.conv_out(e), f)


# --------------------------------------------------------------------------- unified condition


def task_mask(task: str, batch: int, frames: int, size: int, hole: int | None = None) -> torch.Tensor:
    """The mask of given pixels for ``task``, ``(batch, frames, 1, size, size)``, 1 = given.

    ``"c2v"``: nothing given (all zeros, the pipeline's text-to-video case); ``"i2v"``: the first
    frame (the official pipeline's ``masks[0] = 255`` for ``i2v``); ``"inpaint"``: everything but a
    centred ``hole x hole`` box in every frame (default ``size // 2``).
    """
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    if min(batch, frames, size) < 1:
        raise ValueError(f"batch, frames and size must be >= 1, got {batch}, {frames}, {size}")
    m = torch.zeros(batch, frames, 1, size, size)
    if task == "i2v":
        m[:, 0] = 1.0
    elif task == "inpaint":
        hole = size // 2 if hole is None else int(hole)
        if not 1 <= hole < size:
            raise ValueError(f"hole must be in 1..{size - 1}, got {hole}")
        lo = (size - hole) // 2
        m[:] = 1.0
        m[..., lo:lo + hole, lo:lo + hole] = 0.0
    return m


def unified_condition(video: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The unified condition input ``(B, C + 1, F, H, W)``: ``cat(video * mask, mask)`` on the channel
    axis (the official pipeline's ``images_cond = frames * masks`` followed by the concatenation
    with the masks in the transformer), from ``video`` ``(B, F, C, H, W)`` and ``mask``
    ``(B, F, 1, H, W)`` in ``{0, 1}``. Pixels not given are 0 in the condition whatever the video
    holds there, NaN and inf included (a ``torch.where``, not ``video * mask``, which would carry
    ``0 * nan = nan`` into the condition); a non-finite *given* pixel is rejected."""
    if video.dim() != 5 or mask.dim() != 5:
        raise ValueError(f"video and mask must be (B, F, C, H, W) and (B, F, 1, H, W), got "
                         f"{tuple(video.shape)} and {tuple(mask.shape)}")
    if mask.shape[2] != 1 or mask.shape[:2] != video.shape[:2] or mask.shape[3:] != video.shape[3:]:
        raise ValueError(f"mask {tuple(mask.shape)} must match video {tuple(video.shape)} with one channel")
    if not torch.all((mask == 0) | (mask == 1)):
        raise ValueError("mask must hold only 0 and 1")
    given = (mask == 1).expand_as(video)
    if not torch.isfinite(video[given]).all():
        raise ValueError("video must be finite where the mask gives pixels (it holds NaN or inf there)")
    shown = torch.where(given, video, torch.zeros((), dtype=video.dtype))
    return torch.cat([shown, mask.to(video.dtype)], 2).permute(0, 2, 1, 3, 4)


def task_condition(video: torch.Tensor, tasks, hole: int | None = None):
    """``(cond, mask)`` for a batch of videos ``(B, F, C, H, W)`` and one task per video (a task
    name or a sequence of ``B`` names): the masks of :func:`task_mask` and the
    :func:`unified_condition` built from them."""
    B, n_frames, _, H, W = video.shape
    if H != W:
        raise ValueError(f"frames must be square, got {H}x{W}")
    tasks = [tasks] * B if isinstance(tasks, str) else list(tasks)
    if len(tasks) != B:
        raise ValueError(f"need one task per video: {B} videos, {len(tasks)} tasks")
    mask = torch.empty(B, n_frames, 1, H, W)
    for name in set(tasks):
        rows = [i for i, t in enumerate(tasks) if t == name]
        mask[rows] = task_mask(name, len(rows), n_frames, H, hole)
    return unified_condition(video, mask), mask


# ------------------------------------------------------------------------------------ model


class MfMVideoTransformer(nn.Module):
    """A video DiT with the MfM condition adapter: ``forward(x, t, y, cond=None)``.

    ``x`` ``(B, F, C, H, W)``, ``t`` ``(B,)``, ``y`` ``(B,)`` (``n_classes`` = no label) as for
    :class:`iclr26.models.video.TinyVideoDiT`; ``cond`` the unified condition ``(B, C + 1, F, H,
    W)``. The adapter maps ``cond`` to the token grid (its stride-2 steps match the patch size, its
    temporal stride is 1 because every frame is one token layer here) and its output is added to
    the patch embedding, as ``PatchEmbed3D`` does in the official code; ``cond=None`` skips it.
    ``block_out_channels`` needs ``log2(patch) + 1`` entries.
    """

    def __init__(self, frames: int = 4, config: D.DiTConfig | None = None,
                 block_out_channels: Sequence[int] = (8, 16, 32)):
        super().__init__()
        self.dit = TinyVideoDiT(frames, config or D.DiTConfig(image_size=16, patch=4, width=64, depth=4, heads=4))
        c = self.dit.config
        self.frames, self.n_classes = frames, c.n_classes
        self.adapter = MfMConditionAdapter(c.width, c.channels + 1, block_out_channels, temporal_stride=1)
        if self.adapter.spatial_factor != c.patch:
            raise ValueError(f"the adapter shrinks space by {self.adapter.spatial_factor} but the patch is {c.patch}: "
                             f"block_out_channels needs log2(patch) + 1 entries")
        self._cond_tokens = None
        self.dit.patch_in.register_forward_hook(self._add_condition)

    def _add_condition(self, module, inputs, output):
        if self._cond_tokens is None:
            return output
        return output + self._cond_tokens

    def condition_tokens(self, cond: torch.Tensor) -> torch.Tensor:
        """The adapter's output as tokens ``(B, F * g * g, width)`` in the DiT's token order (frame,
        row, column)."""
        e = self.adapter(cond)                                     # (B, width, F, g, g)
        return e.permute(0, 2, 3, 4, 1).reshape(e.shape[0], -1, e.shape[1])

    def forward(self, x, t, y, cond=None):
        if cond is None:
            return self.dit(x, t, y)
        if cond.shape[0] != x.shape[0]:
            raise ValueError(f"cond has batch {cond.shape[0]} but x has {x.shape[0]}")
        self._cond_tokens = self.condition_tokens(cond)
        try:
            return self.dit(x, t, y)
        finally:
            self._cond_tokens = None


class _Bound(nn.Module):
    def __init__(self, model, cond):
        super().__init__()
        self.model, self.cond, self.n_classes = model, cond, model.n_classes

    def forward(self, x, t, y):
        reps = x.shape[0] // self.cond.shape[0]
        if reps * self.cond.shape[0] != x.shape[0]:
            raise ValueError(f"batch {x.shape[0]} is not a multiple of the condition's {self.cond.shape[0]}")
        cond = self.cond.repeat(reps, 1, 1, 1, 1) if reps > 1 else self.cond
        return self.model(x, t, y, cond)


def bind_condition(model: MfMVideoTransformer, cond: torch.Tensor) -> nn.Module:
    """``model`` with the fixed condition ``cond`` as an ``(x, t, y)`` denoiser (with
    ``n_classes``) for :func:`iclr26.models.diffusion.sample` and
    :func:`~iclr26.models.diffusion.diffusion_loss`. A batch that is a multiple of the
    condition's (classifier-free guidance stacks the conditional and unconditional halves) repeats
    the condition."""
    return _Bound(model, cond)
