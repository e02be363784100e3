"""Synthetic compositional scenes, a GenEval-like checker, and a tiny unified text+image model.

The CPU stand-in for the paper's setting (MILR, arXiv:2509.22761, Section 4: Janus-Pro, GenEval):

* a **prompt** ``(n, colour_a, shape_a, relation, colour_b, shape_b)`` reads "``n`` ``colour_a``
  ``shape_a``\\ s ``relation`` one ``colour_b`` ``shape_b``" (relations: left of, right of, above,
  below) on a ``side x side`` grid;
* the **text** (reasoning / plan) tokens name cells: ``[cell of b, cells of the a's (sorted),
  NONE padding]``, ``1 + MAX_COUNT`` tokens;
* the **image** tokens are the grid, row-major, each cell empty or one of the ``colour x shape``
  object tokens.

:func:`check_scenes` is the critic: like GenEval's evaluator it reads only the image (which objects,
how many, where) and scores three sub-checks (object binding, counts, relation); a scene is correct
when all three hold. :class:`TinyUnifiedTransformer` is a decoder-only transformer with one
embedding table for all tokens and two output heads (text and image, as Janus-Pro has a language
head and an image-generation head); it implements the interface :class:`LatentReasoner` uses.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

COLOURS = ("red", "green", "blue", "yellow")
SHAPES = ("square", "circle", "triangle")
RELATIONS = ("left of", "right of", "above", "below")
MAX_COUNT = 3
N_TYPES = len(COLOURS) * len(SHAPES)            # object tokens; image token 0 is "empty"


def object_token(colour: int, shape: int) -> int:
    """Image token of an object (1-based; 0 is the empty cell)."""
    return 1 + colour * len(SHAPES) + shape


@dataclass(frozen=True)
class SceneSpec:
    """Sizes of the scene language: grid ``side x side``; text = ``1 + MAX_COUNT`` cell tokens."""

    side: int = 4

    def __post_init__(self):
        if not isinstance(self.side, int) or self.side < 2:
            raise ValueError(f"side must be an integer >= 2, got {self.side!r}")

    @property
    def n_cells(self) -> int:
        return self.side * self.side

    @property
    def n_text(self) -> int:
        return 1 + MAX_COUNT

    @property
    def n_image(self) -> int:
        return self.n_cells

    @property
    def text_vocab(self) -> int:          # cells + NONE
        return self.n_cells + 1

    @property
    def image_vocab(self) -> int:
        return N_TYPES + 1

    @property
    def none_token(self) -> int:
        return self.n_cells


def relation_holds(rel, ra, ca, rb, cb):
    """Whether an object at (row ``ra``, column ``ca``) is ``RELATIONS[rel]`` the one at (rb, cb)."""
    rel = np.asarray(rel)
    return np.select([rel == 0, rel == 1, rel == 2, rel == 3], [ca < cb, ca > cb, ra < rb, ra > rb], False)


def all_prompts() -> np.ndarray:
    """Every prompt ``(n, colour_a, shape_a, relation, colour_b, shape_b)`` with ``a != b`` types."""
    out = [(n, ca, sa, r, cb, sb)
           for n in range(1, MAX_COUNT + 1) for ca in range(len(COLOURS)) for sa in range(len(SHAPES))
           for r in range(len(RELATIONS)) for cb in range(len(COLOURS)) for sb in range(len(SHAPES))
           if (ca, sa) != (cb, sb)]
    return np.array(out, dtype=np.int64)


def relation_matrix(spec: SceneSpec) -> np.ndarray:
    """(n_relations, n_cells, n_cells) booleans: cell a is ``RELATIONS[r]`` cell b."""
    rows, cols = np.divmod(np.arange(spec.n_cells), spec.side)
    return np.stack([relation_holds(r, rows[:, None], cols[:, None], rows[None], cols[None])
                     for r in range(len(RELATIONS))])


def sample_layouts(prompts: np.ndarray, spec: SceneSpec, rng: np.random.Generator):
    """A uniformly random correct layout per prompt: (text tokens (B, n_text), image tokens (B, n_image))."""
    prompts = np.asarray(prompts)
    B, C = len(prompts), spec.n_cells
    n, ca, sa, rel, cb, sb = prompts.T
    R = relation_matrix(spec)[rel]                                  # (B, a-cell, b-cell)
    ok_b = R.sum(1) >= n[:, None]                                   # b-cells with room for n a's
    b = np.argmax(np.where(ok_b, rng.random((B, C)), -1.0), 1)      # uniform among them
    ok_a = R[np.arange(B), :, b]
    order = np.argsort(np.where(ok_a, rng.random((B, C)), 2.0), 1)  # random order of allowed a-cells
    take = np.arange(MAX_COUNT)[None] < n[:, None]
    a = np.where(take, order[:, :MAX_COUNT], C + 1)                 # first n of them
    a = np.sort(a, 1)
    text = np.concatenate([b[:, None], np.where(a > C, spec.none_token, a)], 1).astype(np.int64)
    image = np.zeros((B, C + 2), dtype=np.int64)
    np.put_along_axis(image, a, object_token(ca, sa)[:, None], 1)
    image[np.arange(B), b] = object_token(cb, sb)
    return text, image[:, :C]


def check_scenes(prompts, image, spec: SceneSpec) -> np.ndarray:
    """GenEval-like critic on the image tokens: (B, 3) booleans [binding, counts, relation].

    binding: every object drawn has the a-type or the b-type (no wrong colour/shape);
    counts: exactly ``n`` a-objects and one b-object; relation: every a-object is ``relation`` the
    b-object (needs one b-object and at least one a-object). A scene is correct when all three hold.
    """
    prompts = np.asarray(prompts)
    image = np.asarray(image)
    if image.ndim != 2 or image.shape[1] != spec.n_image or len(image) != len(prompts):
        raise ValueError(f"image must have shape (len(prompts), {spec.n_image}), got {image.shape}")
    n, ca, sa, rel, cb, sb = prompts.T
    ta, tb = object_token(ca, sa)[:, None], object_token(cb, sb)[:, None]
    is_a, is_b = image == ta, image == tb
    binding = ((image == 0) | is_a | is_b).all(1)
    counts = (is_a.sum(1) == n) & (is_b.sum(1) == 1)
    rows, cols = np.divmod(np.arange(spec.n_cells), spec.side)
    bcell = is_b.argmax(1)
    rel_ok = relation_holds(rel[:, None], rows[None], cols[None], rows[bcell][:, None], cols[bcell][:, None])
    relation = (is_b.sum(1) == 1) & is_a.any(1) & ~(is_a & ~rel_ok).any(1)
    return np.stack([binding, counts, relation], 1)


def scene_reward(prompts, text, image, spec: SceneSpec) -> torch.Tensor:
    """Reward in [-1, 0]: the share of the three sub-checks passed, minus 1 (0 = correct scene)."""
    del text                                       # the critic sees the image only, as GenEval does
    img = image.detach().cpu().numpy() if torch.is_tensor(image) else image
    return torch.as_tensor(check_scenes(prompts, img, spec).mean(1) - 1.0, dtype=torch.float32)


_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser on uint64 arrays (a fixed bijection; used as a deterministic hash)."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


class DetectorCritic:
    """An imperfect critic: the GenEval-like checker applied to the image as a noisy detector sees it.

    The paper optimises against one scorer and reports benchmark scores; when the reward is the
    evaluator itself, "the method raises the score" is the critic grading its own search. Here the
    critic (the reward MILR and best-of-N select with) perceives each drawn object through a
    detector that misses it with probability ``miss`` and reads its colour as the next colour with
    probability ``confuse``; the held-out evaluator is the exact :func:`check_scenes`. The detector
    is deterministic given the image (a hash of the whole grid and the cell, salted by ``seed``):
    the same image always gets the same score, so re-sampling an image does not re-roll the noise,
    while a different image does. A correct scene with ``k`` objects passes the critic with
    probability about ``((1 - miss)(1 - confuse))^k``; a wrong scene passes when the detector hides
    the error (a missed extra object, a misread colour).
    """

    def __init__(self, spec: SceneSpec, miss: float = 0.05, confuse: float = 0.05, seed: int = 0):
        for name, val in (("miss", miss), ("confuse", confuse)):
            if not 0.0 <= val < 1.0:
                raise ValueError(f"{name} must lie in [0, 1), got {val!r}")
        self.spec, self.miss, self.confuse = spec, miss, confuse
        rng = np.random.default_rng([seed, 0x5EED])
        C = spec.n_cells
        self._w = rng.integers(1, 2 ** 62, size=(C,), dtype=np.int64).astype(np.uint64) | np.uint64(1)
        self._cell = rng.integers(1, 2 ** 62, size=(2, C), dtype=np.int64).astype(np.uint64)

    def _uniforms(self, image: np.ndarray) -> np.ndarray:
        """(2, B, C) deterministic uniforms in [0, 1) per image and cell."""
        with np.errstate(over="ignore"):
            key = _mix64((image.astype(np.uint64) + np.uint64(1)) * self._w[None])
            key = np.bitwise_xor.reduce(_mix64(key + np.arange(key.shape[1], dtype=np.uint64)), axis=1)
            u = _mix64(key[None, :, None] ^ self._cell[:, None, :])
        return (u >> np.uint64(11)).astype(np.float64) / float(2 ** 53)

    def perceive(self, image) -> np.ndarray:
        """The image as the detector reports it: missed objects empty, misread colours shifted."""
        img = np.asarray(image.detach().cpu().numpy() if torch.is_tensor(image) else image).astype(np.int64)
        if img.ndim != 2 or img.shape[1] != self.spec.n_image:
            raise ValueError(f"image must have shape (B, {self.spec.n_image}), got {img.shape}")
        u_miss, u_col = self._uniforms(img)
        obj = img > 0
        colour, shape = np.divmod(np.maximum(img - 1, 0), len(SHAPES))
        shifted = object_token((colour + 1) % len(COLOURS), shape)
        out = np.where(obj & (u_col < self.confuse), shifted, img)
        return np.where(obj & (u_miss < self.miss), 0, out)

    def __call__(self, prompts, text, image) -> torch.Tensor:
        """Reward in [-1, 0] on the perceived image (0 = the critic sees a correct scene)."""
        del text
        return torch.as_tensor(check_scenes(prompts, self.perceive(image), self.spec).mean(1) - 1.0,
                               dtype=torch.float32)


class _Block(nn.Module):
    """Pre-LayerNorm causal self-attention block with a key/value cache for decoding."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv, self.proj = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x, past=None):
        B, T, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        n_past = 0 if past is None else past[0].shape[2]
        if past is not None:
            k, v = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)
        if n_past == 0:
            a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            mask = torch.arange(n_past + T)[None] <= (n_past + torch.arange(T))[:, None]
            a = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, d))
        return x + self.mlp(self.ln2(x)), (k, v)


class TinyUnifiedTransformer(nn.Module):
    """Decoder-only transformer over ``[prompt | text | image]`` with a text head and an image head.

    The final-layer states (after the final LayerNorm, just before the heads) are the latents ``z``
    that MILR optimises; the state at position ``p - 1`` predicts token ``p``.
    """

    N_PROMPT = 6

    def __init__(self, spec: SceneSpec = SceneSpec(), d_model: int = 64, n_layers: int = 2, n_heads: int = 4):
        super().__init__()
        self.spec = spec
        self.n_text, self.n_image = spec.n_text, spec.n_image
        sizes = (MAX_COUNT + 1, len(COLOURS), len(SHAPES), len(RELATIONS), len(COLOURS), len(SHAPES))
        self.prompt_offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        self.text_offset = int(sum(sizes))
        self.image_offset = self.text_offset + spec.text_vocab
        self.seq_len = self.N_PROMPT + spec.n_text + spec.n_image
        self.embed = nn.Embedding(self.image_offset + spec.image_vocab, d_model)
        self.pos = nn.Parameter(torch.randn(self.seq_len, d_model) * 0.02)
        self.blocks = nn.ModuleList(_Block(d_model, n_heads) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model)
        self.text_head = nn.Linear(d_model, spec.text_vocab)
        self.image_head = nn.Linear(d_model, spec.image_vocab)

    # -- the interface used by LatentReasoner ------------------------------------------------
    def head(self, modality: str, z: torch.Tensor) -> torch.Tensor:
        """Logits of the ``"text"`` or ``"image"`` head on latents ``z`` (..., d_model)."""
        if modality == "text":
            return self.text_head(z)
        if modality == "image":
            return self.image_head(z)
        raise ValueError(f"modality must be 'text' or 'image', got {modality!r}")

    def _ids(self, prompts, text, image):
        p = torch.as_tensor(np.asarray(prompts) + self.prompt_offsets, dtype=torch.long)
        return torch.cat([p, torch.as_tensor(text, dtype=torch.long).reshape(len(p), -1) + self.text_offset,
                          torch.as_tensor(image, dtype=torch.long).reshape(len(p), -1) + self.image_offset], 1)

    def _forward(self, ids, cache=None):
        start = 0 if cache is None else cache[0][0].shape[2]
        h = self.embed(ids) + self.pos[start:start + ids.shape[1]]
        new = []
        for i, blk in enumerate(self.blocks):
            h, kv = blk(h, None if cache is None else cache[i])
            new.append(kv)
        return self.norm(h), new

    def hidden(self, prompts, text, image) -> torch.Tensor:
        """Final-layer latents (B, L, d) of the sequence ``[prompt | text | image]`` (prefixes allowed)."""
        return self._forward(self._ids(prompts, text, image))[0]

    @torch.no_grad()
    def continue_sequences(self, prompts, text_prefix, image_prefix, generator=None, temperature: float = 1.0,
                           greedy_text: bool = False):
        """Decode the rest of the text after ``text_prefix`` (B, kt) (sampled, or argmax tokens when
        ``greedy_text``), then sample the image after ``image_prefix`` (B, kv); returns
        (text (B, n_text), image (B, n_image), z_text, z_image)."""
        B = len(prompts)
        text = torch.as_tensor(text_prefix, dtype=torch.long).reshape(B, -1)
        image = torch.as_tensor(image_prefix, dtype=torch.long).reshape(B, -1)
        if text.shape[1] > self.n_text or image.shape[1] > self.n_image:
            raise ValueError(f"prefixes may hold at most {self.n_text} text and {self.n_image} image tokens")
        h, cache = self._forward(self._ids(prompts, text, image[:, :0]))
        for mod, n in (("text", self.n_text), ("image", self.n_image)):
            if mod == "image" and image.shape[1]:
                h, cache = self._forward(image + self.image_offset, cache)
            while (text if mod == "text" else image).shape[1] < n:
                logits = self.head(mod, h[:, -1]) / temperature
                if mod == "text" and greedy_text:
                    tok = logits.argmax(-1, keepdim=True)
                else:
                    tok = torch.multinomial(torch.softmax(logits, -1), 1, generator=generator)
                if mod == "text":
                    text = torch.cat([text, tok], 1)
                    ids = tok + self.text_offset
                else:
                    image = torch.cat([image, tok], 1)
                    ids = tok + self.image_offset
                if text.shape[1] + image.shape[1] < self.n_text + self.n_image:
                    h, cache = self._forward(ids, cache)
        h = self.hidden(prompts, text, image)
        zt = h[:, self.N_PROMPT - 1:self.N_PROMPT - 1 + self.n_text]
        zv = h[:, self.N_PROMPT - 1 + self.n_text:self.seq_len - 1]
        return text, image, zt, zv

    def loss(self, prompts, text, image) -> torch.Tensor:
        """Teacher-forced cross-entropy of the text and image tokens."""
        h = self.hidden(prompts, text, image)
        zt, zv = h[:, self.N_PROMPT - 1:self.N_PROMPT - 1 + self.n_text], h[:, self.N_PROMPT - 1 + self.n_text:-1]
        ce = nn.functional.cross_entropy
        lt = ce(self.text_head(zt).flatten(0, 1), torch.as_tensor(text).flatten())
        lv = ce(self.image_head(zv).flatten(0, 1), torch.as_tensor(image).flatten())
        return lt + lv


def train_scene_model(prompts, spec: SceneSpec, steps: int, seed: int, batch_size: int = 128,
                      lr: float = 3e-3, d_model: int = 64, n_layers: int = 2) -> TinyUnifiedTransformer:
    """Train a :class:`TinyUnifiedTransformer` on fresh random correct layouts of ``prompts``."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = TinyUnifiedTransformer(spec, d_model=d_model, n_layers=n_layers)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, lr, total_steps=steps, pct_start=0.1)
    prompts = np.asarray(prompts)
    for _ in range(steps):
        p = prompts[rng.integers(0, len(prompts), batch_size)]
        t, v = sample_layouts(p, spec, rng)
        loss = model.loss(p, t, v)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    return model.eval().requires_grad_(False)
