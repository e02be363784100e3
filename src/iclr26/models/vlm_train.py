"""Training the bundled tiny VLM in three stages, each checkpointed, all deterministic from seeds.

1. **Tower** (shared by every seed, no language model): the Idefics3 vision transformer of
   :data:`iclr26.models.vlm.DEFAULT_VISION` with heads on its pixel-shuffled tokens (exactly what
   the connector sees) learns procedural labels: the letters of rendered words, pseudo-words and
   consonant strings (five slots read by learned queries), and for every 16 px token cell whether an
   object is centred there, its colour, shape and box; plus the number of objects.
2. **Connector** (per seed): the tower and SmolLM2 frozen; only the connector's projection trains,
   on procedural questions (:mod:`iclr26.data.vision_tasks`) with the loss on the answer tokens.
3. **LoRA** (per seed): LoRA adapters on the text model (:func:`iclr26.models.lora.with_lora`)
   train with the connector; they are merged before saving, so each seed's folder is a plain
   ``Idefics3ForConditionalGeneration`` that :func:`iclr26.models.vlm.load_vlm` reads with
   ``from_pretrained``.

The batch of step ``k`` of a stage is drawn from ``(seed, stage, k)`` alone, so a run stopped
anywhere resumes from its last checkpoint (every ``checkpoint_every`` steps and at the end of each
stage) and gives the same weights. Each finished seed holds ``eval.json``: greedy-decoding accuracy
per task on held-out items of the ``test`` split beside the chance level.

>>> path = prepare_tiny_vlm(seed=0)       # doctest: +SKIP   (estimated 45 CPU-minutes the first time)
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from ..data import vision_tasks as vt
from .vlm import DEFAULT_VISION

__all__ = ["Recipe", "DEFAULT_RECIPE", "TowerPretrainer", "prepare_tiny_vlm", "tiny_vlm_root", "seed_dir",
           "is_built", "built_seeds", "evaluate_vlm", "evaluate_tower", "pixel_shuffle", "pixel_values_of",
           "FORMAT", "accuracy_table", "write_page", "LORA_TARGETS", "answer_batch", "answer_loss"]

#: bump when the recipe or layout changes, so stale folders are rebuilt
FORMAT = 3
_LETTERS = vt.ALPHABET
_END = 26            # "no more letters" class of a reading slot
_SLOTS = 5


@dataclass(frozen=True)
class Recipe:
    """Everything that decides the weights (the default is the bundled build)."""
    vision: dict = field(default_factory=lambda: dict(DEFAULT_VISION))
    scale_factor: int = 2
    tower_seed: int = 0
    tower_steps: int = 2000
    tower_batch: int = 64
    tower_lr: float = 1e-3
    #: weight of the "no letter" class in the patch-letter loss (60 of 64 patches hold no letter; at
    #: weight 1 the head predicts "no letter" everywhere and the tower learns no letter features)
    patch_none_weight: float = 0.05
    connector_steps: int = 400
    lora_steps: int = 300
    lm_batch: int = 8
    connector_lr: float = 2e-3
    lora_lr: float = 1e-3
    lora_rank: int = 8
    task_weights: dict = field(default_factory=lambda: dict(
        colour=1.0, shape=1.0, position=1.0, count=1.0, box=1.0, point=1.0, read=2.0, same_colour=0.7,
        which_image=0.7))
    eval_n: int = 40
    eval_tasks: tuple = vt.TASKS
    checkpoint_every: int = 50

    def key(self) -> dict:
        return asdict(self)


DEFAULT_RECIPE = Recipe()


# ------------------------------------------------------------------------------------------ paths
def tiny_vlm_root() -> Path:
    from .bundled import cache_root

    return cache_root() / f"tiny-vlm-v{FORMAT}"


def seed_dir(seed: int, root: Path | None = None) -> Path:
    return (root or tiny_vlm_root()) / f"seed-{int(seed)}"


def is_built(seed: int = 0, root: Path | None = None) -> bool:
    return (seed_dir(seed, root) / "eval.json").exists()


def built_seeds(root: Path | None = None) -> list[int]:
    root = root or tiny_vlm_root()
    if not root.exists():
        return []
    return sorted(int(p.name.split("-", 1)[1]) for p in root.glob("seed-*") if (p / "eval.json").exists())


# ------------------------------------------------------------------------------------ image tensors
def pixel_values_of(images, image_size: int):
    """``(n, 3, s, s)`` float tensor as the Idefics3 processor makes it for square images without
    splitting (resize to ``image_size`` with Lanczos, rescale to [0, 1], normalise with mean = std = 0.5)."""
    import torch
    from PIL import Image

    arrs = []
    for im in images:
        if im.size != (image_size, image_size):
            im = im.resize((image_size, image_size), Image.LANCZOS)
        arrs.append(np.asarray(im.convert("RGB"), dtype=np.float32))
    x = torch.from_numpy(np.stack(arrs)).permute(0, 3, 1, 2) / 255.0
    return (x - 0.5) / 0.5


def pixel_shuffle(x, scale_factor: int):
    """The Idefics3 connector's pixel shuffle: ``(B, n, d) -> (B, n / s^2, d s^2)``."""
    bsz, seq, dim = x.shape
    side = int(round(seq ** 0.5))
    s = scale_factor
    x = x.reshape(bsz, side, side // s, dim * s).permute(0, 2, 1, 3)
    x = x.reshape(bsz, side // s, side // s, dim * s * s).permute(0, 2, 1, 3)
    return x.reshape(bsz, seq // (s * s), dim * s * s)


# ------------------------------------------------------------------------------------------ stage 1
def _token_cells(side: int, s: int) -> list[tuple[int, int]]:
    """(row, col) on the ``side/s`` grid of each shuffled token (found by shuffling patch indices)."""
    import torch

    idx = torch.arange(side * side, dtype=torch.float32).reshape(1, side * side, 1)
    sh = pixel_shuffle(idx, s)[0]
    cells = []
    for t in range(sh.shape[0]):
        p = int(sh[t].min())
        cells.append(((p // side) // s, (p % side) // s))
    return cells


def _tower_module(vision: dict):
    from transformers import Idefics3VisionConfig
    from transformers.models.idefics3.modeling_idefics3 import Idefics3VisionTransformer

    return Idefics3VisionTransformer(Idefics3VisionConfig(**vision))


def _build_pretrainer(recipe: Recipe):
    import torch
    from torch import nn

    class TowerPretrainerModule(nn.Module):
        """The tower with its pretraining heads (reading slots, dense object cells, count)."""

        def __init__(self):
            super().__init__()
            v = recipe.vision
            self.tower = _tower_module(v)
            self.s = recipe.scale_factor
            d = v["hidden_size"] * self.s ** 2
            self.side = v["image_size"] // v["patch_size"]
            self.grid = self.side // self.s
            self.cells = _token_cells(self.side, self.s)
            self.norm = nn.LayerNorm(d)
            self.read_queries = nn.Parameter(torch.randn(_SLOTS, d) * 0.02)
            self.read_key = nn.Linear(d, d)
            self.read_val = nn.Linear(d, 256)
            self.read_out = nn.Sequential(nn.GELU(), nn.Linear(256, 27))
            self.dense = nn.Sequential(nn.Linear(d, 256), nn.GELU(), nn.Linear(256, 1 + len(vt.COLOURS) + len(vt.SHAPES) + 4))
            self.count = nn.Linear(d, 6)
            self.patch_letter = nn.Linear(v["hidden_size"], 27)   # the letter centred in each patch, or none
            self.patch_none_weight = float(recipe.patch_none_weight)

        def tokens(self, pixel_values):
            h = self.tower(pixel_values=pixel_values).last_hidden_state
            return pixel_shuffle(h, self.s)

        def forward(self, pixel_values, patches: bool = False):
            h = self.tower(pixel_values=pixel_values).last_hidden_state
            z = self.norm(pixel_shuffle(h, self.s))
            att = torch.einsum("qd,btd->bqt", self.read_queries, self.read_key(z)) / z.shape[-1] ** 0.5
            read = self.read_out(torch.einsum("bqt,btv->bqv", att.softmax(-1), self.read_val(z)))
            if patches:
                return read, self.dense(z), self.count(z.mean(1)), self.patch_letter(h)
            return read, self.dense(z), self.count(z.mean(1))

    torch.manual_seed(recipe.tower_seed)
    return TowerPretrainerModule()


TowerPretrainer = _build_pretrainer   # a factory: TowerPretrainer(recipe) -> nn.Module


def _tower_batch(recipe: Recipe, step: int, n: int, split: str = "train", kinds=None):
    """Images and targets of one tower batch, drawn from ``(tower_seed, step)``."""
    size = recipe.vision["image_size"]
    grid = size // recipe.vision["patch_size"] // recipe.scale_factor
    cell_px = size / grid
    rng = np.random.default_rng(np.random.SeedSequence([recipe.tower_seed, 11, 0 if split == "train" else 1, step]))
    seen, _ = vt.lexicon_split()
    side = size // recipe.vision["patch_size"]
    images, letters, dense_obj, dense_col, dense_shp, dense_box, counts = [], [], [], [], [], [], []
    patch_letters = []
    for i in range(n):
        kind = kinds[i % len(kinds)] if kinds else rng.choice(["scene", "cell", "word", "word", "pseudo"],
                                                               p=[0.35, 0.15, 0.25, 0.1, 0.15])
        obj = np.zeros((grid, grid), np.float32)
        col = np.full((grid, grid), -100, np.int64)
        shp = np.full((grid, grid), -100, np.int64)
        box = np.zeros((grid, grid, 4), np.float32)
        lab = np.full(_SLOTS, -100, np.int64)
        plab = np.full((side, side), _END, np.int64)
        cnt = -100
        if kind in ("scene", "cell"):
            if kind == "scene":
                sc = vt.render_scene(rng, n_objects=(1, 5), size=size, max_side=size // 4, distinct=bool(rng.random() < 0.5))
            else:
                sc = vt.render_scene(rng, n_objects=1, size=size, cell=str(rng.choice(list(vt.POSITIONS))))
            img = sc.image
            cnt = len(sc.objects)
            area = np.zeros((grid, grid))
            for o in sc.objects:
                cx, cy = o.centre
                r, c = min(grid - 1, int(cy / cell_px)), min(grid - 1, int(cx / cell_px))
                a = (o.box[2] - o.box[0]) * (o.box[3] - o.box[1])
                if a <= area[r, c]:
                    continue
                area[r, c] = a
                obj[r, c] = 1.0
                col[r, c] = list(vt.COLOURS).index(o.colour)
                shp[r, c] = vt.SHAPES.index(o.shape)
                box[r, c] = np.array(o.box, np.float32) / size
        else:
            if kind == "word":
                w = str(rng.choice(list(seen)))
            elif rng.random() < 0.6:
                w = vt.pseudowords(1, rng)[0]
            else:
                w = vt.consonant_strings(1, rng)[0]
            img, _, centres = vt.render_text(w, rng, size=size, layout=True)
            lab[:] = _END
            lab[:len(w)] = [_LETTERS.index(ch) for ch in w]
            patch = size / side
            for ch, (cx, cy) in zip(w, centres):
                plab[min(side - 1, int(cy / patch)), min(side - 1, int(cx / patch))] = _LETTERS.index(ch)
            cnt = 0
        images.append(img)
        letters.append(lab)
        dense_obj.append(obj.reshape(-1))
        dense_col.append(col.reshape(-1))
        dense_shp.append(shp.reshape(-1))
        dense_box.append(box.reshape(-1, 4))
        counts.append(cnt)
        patch_letters.append(plab.reshape(-1))
    return images, dict(letters=np.stack(letters), patch_letters=np.stack(patch_letters), obj=np.stack(dense_obj), col=np.stack(dense_col),
                        shp=np.stack(dense_shp), box=np.stack(dense_box), count=np.array(counts))


def _reorder_cells(t, cells, grid):
    """Targets laid out row-major on the grid -> the shuffled tokens' order."""
    order = [r * grid + c for r, c in cells]
    return t[:, order]


def _tower_loss(net, pixel_values, tg):
    import torch
    import torch.nn.functional as F

    read, dense, count, patch_letter = net(pixel_values, patches=True)
    T = torch.as_tensor
    cells, grid = net.cells, net.grid
    obj = T(_reorder_cells(tg["obj"], cells, grid))
    col = T(_reorder_cells(tg["col"], cells, grid))
    shp = T(_reorder_cells(tg["shp"], cells, grid))
    box = T(_reorder_cells(tg["box"], cells, grid))
    nc = len(vt.COLOURS)
    loss = F.binary_cross_entropy_with_logits(dense[..., 0], obj)
    if (col >= 0).any():
        loss = loss + F.cross_entropy(dense[..., 1:1 + nc].reshape(-1, nc), col.reshape(-1), ignore_index=-100)
        loss = loss + F.cross_entropy(dense[..., 1 + nc:1 + nc + len(vt.SHAPES)].reshape(-1, len(vt.SHAPES)),
                                      shp.reshape(-1), ignore_index=-100)
        m = obj > 0
        loss = loss + 5.0 * F.smooth_l1_loss(dense[..., -4:][m], box[m], beta=0.05)
    letters = T(tg["letters"])
    if (letters >= 0).any():
        loss = loss + F.cross_entropy(read.reshape(-1, 27), letters.reshape(-1), ignore_index=-100)
    loss = loss + 0.5 * F.cross_entropy(count, T(tg["count"]), ignore_index=-100)
    # every patch: the letter whose centre lies in it, or none (a local task that gives the tower
    # letter features early; the slot reader then only has to put them in order)
    w = torch.ones(27)
    w[_END] = net.patch_none_weight
    loss = loss + F.cross_entropy(patch_letter.reshape(-1, 27), T(tg["patch_letters"]).reshape(-1), weight=w)
    return loss


def evaluate_tower(net, recipe: Recipe, n: int = 200) -> dict:
    """Accuracy of the tower's own heads on held-out images: words read exactly (seen words,
    held-out words, pseudo-words), colour and shape of single objects, object counts."""
    import torch

    size = recipe.vision["image_size"]
    rng = np.random.default_rng(np.random.SeedSequence([recipe.tower_seed, 12]))
    seen, unseen = vt.lexicon_split()
    out = {}
    net.eval()
    with torch.no_grad():
        for kind in ("seen", "unseen", "pseudo"):
            words = (list(rng.choice(list(seen if kind == "seen" else unseen), size=n)) if kind != "pseudo"
                     else vt.pseudowords(n, rng))
            imgs = [vt.render_text(w, rng, size=size)[0] for w in words]
            read, _, _ = net(pixel_values_of(imgs, size))
            pred = read.argmax(-1).numpy()
            got = ["".join(_LETTERS[j] for j in r[:list(r).index(_END)] if j < 26) if _END in r else
                   "".join(_LETTERS[j] for j in r if j < 26) for r in pred.tolist()]
            out[f"read_{kind}"] = float(np.mean([g == w for g, w in zip(got, words)]))
        scenes = [vt.render_scene(rng, n_objects=1, size=size) for _ in range(n)]
        _, dense, _ = net(pixel_values_of([s.image for s in scenes], size))
        nc = len(vt.COLOURS)
        k = dense[..., 0].argmax(1)
        sel = dense[torch.arange(n), k]
        out["colour"] = float(np.mean([list(vt.COLOURS)[int(i)] == s.objects[0].colour
                                       for i, s in zip(sel[:, 1:1 + nc].argmax(-1), scenes)]))
        out["shape"] = float(np.mean([vt.SHAPES[int(i)] == s.objects[0].shape
                                      for i, s in zip(sel[:, 1 + nc:1 + nc + len(vt.SHAPES)].argmax(-1), scenes)]))
        multi = [vt.render_scene(rng, n_objects=(1, 5), size=size, max_side=size // 4) for _ in range(n)]
        _, _, count = net(pixel_values_of([s.image for s in multi], size))
        out["count"] = float(np.mean([int(c) == len(s.objects) for c, s in zip(count.argmax(-1), multi)]))
    net.train()
    return out


# ----------------------------------------------------------------------------------- checkpoints
def _save(obj, path: Path):
    import torch

    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def _load(path: Path):
    import torch

    return torch.load(path, map_location="cpu", weights_only=False)


class _Progress:
    """A tqdm bar over all steps of a build (ETA from the steps done in this process)."""

    def __init__(self, total: int, desc: str, enabled: bool):
        self.bar = None
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=desc, unit="step", file=sys.stderr, dynamic_ncols=True)

    def update(self, n=1, **post):
        if self.bar is not None:
            self.bar.update(n)
            if post:
                self.bar.set_postfix(post, refresh=False)

    def stage(self, name: str):
        if self.bar is not None:
            self.bar.set_description(name)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def _lr_at(step: int, total: int, lr: float, warmup: int = 10) -> float:
    if step < warmup:
        return lr * (step + 1) / warmup
    return lr * 0.5 * (1 + np.cos(np.pi * (step - warmup) / max(1, total - warmup)))


_TOWER_FIELDS = ("vision", "scale_factor", "tower_seed", "tower_steps", "tower_batch", "tower_lr", "patch_none_weight")


def _tower_key(recipe) -> dict:
    key = recipe.key() if isinstance(recipe, Recipe) else dict(recipe)
    return {k: key.get(k) for k in _TOWER_FIELDS}


def _run_tower(recipe: Recipe, root: Path, progress: _Progress) -> dict:
    import torch

    out = root / f"tower-{recipe.tower_seed}"
    final = out / "tower.pt"
    want = _tower_key(recipe)
    if final.exists():
        state = _load(final)
        if _tower_key(state["recipe"]) != want:
            raise RuntimeError(f"{final} was trained with another tower recipe; delete {out} to rebuild it")
        progress.update(recipe.tower_steps)
        return state
    out.mkdir(parents=True, exist_ok=True)
    net = _build_pretrainer(recipe)
    opt = torch.optim.AdamW(net.parameters(), lr=recipe.tower_lr, weight_decay=0.01)
    start, cpu0 = 0, 0.0
    ck = out / "progress.pt"
    if ck.exists() and "recipe" in (partial := _load(ck)) and _tower_key(partial["recipe"]) != want:
        ck.unlink()                              # a partial run of another recipe: start afresh
    if ck.exists():
        st = _load(ck)
        net.load_state_dict(st["net"])
        opt.load_state_dict(st["opt"])
        start, cpu0 = st["step"], st["cpu_s"]
        progress.update(start)
    t0 = time.process_time()
    progress.stage("tiny-vlm tower")
    net.train()
    for step in range(start, recipe.tower_steps):
        for g in opt.param_groups:
            g["lr"] = _lr_at(step, recipe.tower_steps, recipe.tower_lr, warmup=50)
        imgs, tg = _tower_batch(recipe, step, recipe.tower_batch)
        loss = _tower_loss(net, pixel_values_of(imgs, recipe.vision["image_size"]), tg)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        progress.update(1, loss=f"{loss.item():.3f}")
        if (step + 1) % recipe.checkpoint_every == 0 and step + 1 < recipe.tower_steps:
            _save(dict(net=net.state_dict(), opt=opt.state_dict(), step=step + 1,
                       cpu_s=cpu0 + time.process_time() - t0, recipe=recipe.key()), ck)
    cpu = cpu0 + time.process_time() - t0
    acc = evaluate_tower(net, recipe)
    state = dict(tower=net.tower.state_dict(), heads={k: v for k, v in net.state_dict().items()
                                                      if not k.startswith("tower.")},
                 eval=acc, cpu_s=cpu, recipe=recipe.key())
    _save(state, final)
    ck.unlink(missing_ok=True)
    return state


# --------------------------------------------------------------------------------------- stages 2-3
def _lm_batch(recipe: Recipe, seed: int, stage: int, step: int):
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 21, stage, step]))
    tasks = list(recipe.task_weights)
    p = np.array([recipe.task_weights[t] for t in tasks], float)
    p = p / p.sum()
    size = recipe.vision["image_size"]
    task = str(rng.choice(tasks, p=p))    # one task per batch: similar lengths, little padding
    return [vt.make_item(task, rng, size=size, words="mixed") for _ in range(recipe.lm_batch)]


def answer_batch(processor, items):
    """``(batch, answer_mask)`` for supervised training on ``items`` (:class:`VisionItem` or anything
    with ``images``, ``question`` and ``answer``): the chat prompt followed by
    ``" answer<end_of_utterance>"``; ``answer_mask`` is True at those answer tokens."""
    import torch

    from .vlm import vlm_inputs

    batch = vlm_inputs(processor, [it.images for it in items], [it.question for it in items],
                       [it.answer for it in items])
    tok = processor.tokenizer
    ids = batch["input_ids"]
    mask = torch.zeros_like(ids, dtype=torch.bool)
    for i, it in enumerate(items):
        ans = tok(" " + it.answer + "<end_of_utterance>", add_special_tokens=False)["input_ids"]
        if ids[i, -len(ans):].tolist() != ans:
            raise RuntimeError(f"answer tokens of {it.answer!r} do not close the prompt: tokenization not separable")
        mask[i, -len(ans):] = True
    return batch, mask


def answer_loss(model, batch, mask):
    """Mean cross-entropy of the tokens where ``mask`` is True, each predicted from the position before
    it (the output layer runs on those positions only)."""
    import torch.nn.functional as F

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    h = base.model(**batch).last_hidden_state
    pos = mask[:, 1:]
    logits = base.lm_head(h[:, :-1][pos])
    return F.cross_entropy(logits, batch["input_ids"][:, 1:][pos])


def _answer_loss(model, processor, items):
    return answer_loss(model, *answer_batch(processor, items))


def _trainables(model, stage: str):
    for p in model.parameters():
        p.requires_grad_(False)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    params = list(base.model.connector.parameters())
    if stage == "lora":
        params += [p for n, p in base.model.text_model.named_parameters() if "lora_" in n]
    for p in params:
        p.requires_grad_(True)
    return params


def _assemble(recipe: Recipe, tower_state: dict, seed: int, text_dir: Path):
    from .vlm import vlm_from_text_model

    model, proc = vlm_from_text_model(text_dir, vision=recipe.vision, scale_factor=recipe.scale_factor, seed=seed)
    model.model.vision_model.load_state_dict(tower_state["tower"], strict=True)
    return model, proc


#: LoRA targets: the text model's attention output and MLP projections (the tower's attention also
#: has q_proj/k_proj/v_proj, so those names would put adapters into the tower too)
LORA_TARGETS = ("o_proj", "gate_proj", "up_proj", "down_proj")


def _lora_wrap(model, recipe: Recipe, seed: int):
    from .lora import with_lora

    peft_model = with_lora(model, r=recipe.lora_rank, target_modules=LORA_TARGETS, seed=seed)
    names = [n for n, _ in peft_model.named_parameters() if "lora_" in n]
    if not names or any(".text_model." not in n for n in names):
        raise RuntimeError("LoRA adapters must sit in the text model only")
    return peft_model


def _run_lm_stage(name: str, stage: int, model, proc, recipe: Recipe, seed: int, work: Path,
                  progress: _Progress) -> float:
    import torch

    steps = recipe.connector_steps if name == "connector" else recipe.lora_steps
    lr = recipe.connector_lr if name == "connector" else recipe.lora_lr
    params = _trainables(model, name)
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    ck = work / f"{name}-progress.pt"
    start, cpu0 = 0, 0.0
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    if ck.exists():
        st = _load(ck)
        sd = dict(model.named_parameters())
        with torch.no_grad():
            for n, v in st["params"].items():
                sd[n].copy_(v)
        opt.load_state_dict(st["opt"])
        start, cpu0 = st["step"], st["cpu_s"]
        progress.update(start)
    progress.stage(f"tiny-vlm seed {seed} {name}")
    model.train()
    t0 = time.process_time()
    for step in range(start, steps):
        for g in opt.param_groups:
            g["lr"] = _lr_at(step, steps, lr)
        loss = _answer_loss(model, proc, _lm_batch(recipe, seed, stage, step))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        progress.update(1, loss=f"{loss.item():.3f}")
        if (step + 1) % recipe.checkpoint_every == 0 and step + 1 < steps:
            sd = dict(model.named_parameters())
            _save(dict(params={n: sd[n].detach().clone() for n in names}, opt=opt.state_dict(), step=step + 1,
                       cpu_s=cpu0 + time.process_time() - t0), ck)
    model.eval()
    return cpu0 + time.process_time() - t0


def evaluate_vlm(model, processor, *, n: int = 40, seed: int = 0, size: int = 64, tasks=vt.TASKS) -> dict:
    """Greedy-decoding accuracy per task on ``n`` items of the ``test`` split (seed ``seed``), with
    the chance level; ``read`` also on held-out words (``read_unseen``) and pseudo-words
    (``read_pseudo``)."""
    from .vlm import generate_answers

    rows = {}
    plan = [(t, t, None) for t in tasks]
    if "read" in tasks:
        plan += [("read_unseen", "read", "unseen"), ("read_pseudo", "read", "pseudo")]
    for key, task, words in plan:
        items = vt.make_items(task, n, seed=seed, split="test", size=size, words=words)
        answers = generate_answers(model, processor, [it.images for it in items], [it.question for it in items],
                                   max_new_tokens=24 if task in ("box", "point") else 8)
        ok = [vt.check_answer(it, a) for it, a in zip(items, answers)]
        chance = vt.chance_level(task, items) if task != "read" or words != "pseudo" else 0.0
        rows[key] = dict(accuracy=float(np.mean(ok)), chance=float(chance), n=n,
                         examples=[[it.answer, a] for it, a in zip(items[:3], answers[:3])])
    return rows


def _text_dir() -> Path:
    from .bundled import prepare

    return prepare("smollm2-135m")


def prepare_tiny_vlm(seed: int = 0, *, recipe: Recipe = DEFAULT_RECIPE, root: Path | None = None,
                     text_dir: str | os.PathLike | None = None, progress: bool = True,
                     threads: int | None = None, evaluate: bool = True) -> Path:
    """Build (once) and return the folder of the tiny VLM of ``seed`` (a plain Hugging Face folder).

    The tower (stage 1) is built once per ``recipe.tower_seed`` and shared; stages 2-3 run per seed.
    ``root`` defaults to ``$ICLR26_CACHE/tiny-vlm-v{FORMAT}``; ``text_dir`` to the cached SmolLM2-135M
    (:func:`iclr26.models.catalog.prepare`). ``threads`` sets ``torch.set_num_threads`` for the build.
    Interrupted builds resume from their last checkpoint. CPU seconds per stage go to ``build.json``.
    """
    import torch

    from .bundled import _file_lock
    from .vlm import save_vlm

    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    root = Path(root) if root is not None else tiny_vlm_root()
    out = seed_dir(seed, root)
    if (out / "eval.json").exists():
        return out
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if threads is not None:
        torch.set_num_threads(int(threads))
    root.mkdir(parents=True, exist_ok=True)
    with _file_lock(root / f".seed-{seed}.lock"):
        if (out / "eval.json").exists():
            return out
        wall0 = time.time()
        total = recipe.tower_steps + recipe.connector_steps + recipe.lora_steps
        bar = _Progress(total, "tiny-vlm", progress)
        try:
            with _file_lock(root / f".tower-{recipe.tower_seed}.lock"):
                tower_state = _run_tower(recipe, root, bar)
            text_dir = Path(text_dir) if text_dir is not None else _text_dir()
            work = root / f"seed-{seed}.work"
            work.mkdir(exist_ok=True)
            model, proc = _assemble(recipe, tower_state, seed, text_dir)
            cpu = {"tower": tower_state["cpu_s"]}
            conn_done = work / "connector.pt"
            if conn_done.exists():
                st = _load(conn_done)
                model.model.connector.load_state_dict(st["connector"])
                cpu["connector"] = st["cpu_s"]
                bar.update(recipe.connector_steps)
            else:
                cpu["connector"] = _run_lm_stage("connector", 2, model, proc, recipe, seed, work, bar)
                _save(dict(connector=model.model.connector.state_dict(), cpu_s=cpu["connector"]), conn_done)
                (work / "connector-progress.pt").unlink(missing_ok=True)
            peft_model = _lora_wrap(model, recipe, seed)
            cpu["lora"] = _run_lm_stage("lora", 3, peft_model, proc, recipe, seed, work, bar)
            model = peft_model.merge_and_unload()
            bar.close()
            build = out.with_name(out.name + ".build")
            shutil.rmtree(build, ignore_errors=True)
            save_vlm(model, proc, build)
            t_eval = time.process_time()
            ev = evaluate_vlm(model, proc, n=recipe.eval_n, seed=1000 + seed, size=recipe.vision["image_size"],
                              tasks=recipe.eval_tasks) if evaluate else {}
            cpu["eval"] = time.process_time() - t_eval
            meta = dict(seed=seed, recipe=recipe.key(), cpu_s=cpu, wall_s=time.time() - wall0,
                        threads=torch.get_num_threads(), tower_eval=tower_state["eval"],
                        text_model=str(text_dir), torch=torch.__version__)
            (build / "build.json").write_text(json.dumps(meta, indent=1))
            (build / "eval.json").write_text(json.dumps(ev, indent=1))
            (build / "SOURCE").write_text(
                "tiny VLM: Idefics3ForConditionalGeneration; text model SmolLM2-135M-Instruct (bundled, LoRA merged); "
                f"vision tower and connector trained on procedural images (iclr26.models.vlm_train, seed {seed})\n")
            shutil.rmtree(out, ignore_errors=True)
            os.replace(build, out)
            shutil.rmtree(work, ignore_errors=True)
        finally:
            bar.close()
    return out


# ------------------------------------------------------------------------------------------ the page
_PAGE_BEGIN, _PAGE_END = "<!-- tiny-vlm:begin -->", "<!-- tiny-vlm:end -->"
_ROW_NAMES = dict(read="read (seen words)", read_unseen="read (held-out words)", read_pseudo="read (pseudo-words)")


def accuracy_table(root: Path | None = None) -> str:
    """Markdown: accuracy per task of every built seed on held-out items (with chance levels), the
    tower's own head accuracies, and CPU seconds per stage, from each seed's ``eval.json`` /
    ``build.json``."""
    root = root or tiny_vlm_root()
    seeds = built_seeds(root)
    if not seeds:
        return "_No seed is built on this machine yet: `iclr26 models prepare tiny-vlm`._"
    evals = {s: json.loads((seed_dir(s, root) / "eval.json").read_text()) for s in seeds}
    builds = {s: json.loads((seed_dir(s, root) / "build.json").read_text()) for s in seeds}
    tasks = list(evals[seeds[0]])
    lines = ["| task | chance | " + " | ".join(f"seed {s}" for s in seeds) + " |",
             "|---|---|" + "---|" * len(seeds)]
    for t in tasks:
        ch = evals[seeds[0]][t]["chance"]
        accs = " | ".join(f"{evals[s][t]['accuracy']:.2f}" if t in evals[s] else "" for s in seeds)
        lines.append(f"| {_ROW_NAMES.get(t, t)} | {ch:.2f} | {accs} |")
    n = evals[seeds[0]][tasks[0]]["n"] if tasks else 0
    lines.append("")
    lines.append(f"Greedy decoding, {n} held-out items per task (test split, seed 1000 + model seed).")
    tower = builds[seeds[0]]["tower_eval"]
    lines += ["", "Tower heads alone (200 held-out images each): "
              + ", ".join(f"{k} {v:.2f}" for k, v in tower.items()) + "."]
    lines += ["", "| seed | tower CPU-s | connector CPU-s | LoRA CPU-s | eval CPU-s | threads |", "|---|---|---|---|---|---|"]
    for s in seeds:
        c = builds[s]["cpu_s"]
        lines.append(f"| {s} | {c['tower']:.0f} | {c['connector']:.0f} | {c['lora']:.0f} | {c['eval']:.0f} | "
                     f"{builds[s]['threads']} |")
    return "\n".join(lines)


def write_page(page: Path | None = None, root: Path | None = None) -> Path:
    """Rewrite the table between the markers of ``TINY_VLM.md`` from the built seeds."""
    page = page or Path(__file__).with_name("TINY_VLM.md")
    text = page.read_text()
    if _PAGE_BEGIN not in text or _PAGE_END not in text:
        raise ValueError(f"{page} lacks the markers {_PAGE_BEGIN} / {_PAGE_END}")
    head, rest = text.split(_PAGE_BEGIN, 1)
    _, tail = rest.split(_PAGE_END, 1)
    page.write_text(head + _PAGE_BEGIN + "\n" + accuracy_table(root) + "\n" + _PAGE_END + tail)
    return page
