"""Procedural vision data: scenes of coloured shapes with boxes and attributes, rendered words,
pseudo-words, consonant strings and false fonts, multi-image items, and a checker for every answer.

Everything is drawn with numpy and PIL from a seed, so the same ``(task, n, seed, split)`` gives the
same images and answers on every machine with the same Pillow. Text is rendered with the font
embedded in Pillow (Aileron, ``ImageFont.load_default(size)``, needs FreeType) and with Pillow's
bitmap font; no system font is used.

>>> items = make_items("colour", 4, seed=0)
>>> items[0].question, items[0].answer in COLOURS, check_answer(items[0], items[0].answer)
('What colour is the shape?', True, True)

Tasks (:data:`TASKS`; ``chance_level(task)`` gives the accuracy of guessing):

====================  ==========================================================  =================
task                  question / answer                                           chance
====================  ==========================================================  =================
``colour``            one shape; its colour name                                  1/6
``shape``             one shape; its shape name                                   1/5
``position``          one shape in a 3x3 grid cell; ``"top left"`` ... ``"bottom right"``  1/9
``count``             1-5 shapes; the count as a digit                            1/5
``box``               2-4 shapes; the box ``[x0, y0, x1, y1]`` of the named one    1/n shapes (IoU >= 0.5)
``point``             2-4 shapes; a point ``(x, y)`` inside the named one          1/n shapes
``read``              a rendered word (seen or held-out words, or pseudo-words)   1/lexicon
``same_colour``       two images of one shape each; ``yes`` / ``no``              1/2
``which_image``       2-3 images; the number (1-based) of the one showing a shape 1/k
====================  ==========================================================  =================

Localiser stimuli for category-selectivity analyses (:func:`localiser_stimuli`): ``words``,
``pseudowords``, ``consonants``, ``false_font`` (the same strings drawn in glyphs made by cutting and
re-arranging each letter: the same ink and strokes, no letters), ``scrambled`` (word images with their
8x8 blocks shuffled), ``shapes`` (object scenes) and ``noise``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw, ImageFont

__all__ = [
    "COLOURS", "SHAPES", "ROWS", "COLS", "POSITIONS", "TASKS", "LOCALISER_CATEGORIES", "LEXICON", "ALPHABET",
    "ShapeObject", "Scene", "VisionItem", "render_scene", "render_text", "make_items", "make_item",
    "localiser_stimuli", "check_answer", "chance_level", "format_box", "parse_box", "format_point",
    "parse_point", "iou", "lexicon_split", "pseudowords", "consonant_strings", "position_of",
]

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (215, 40, 40), "green": (40, 165, 60), "blue": (45, 85, 220),
    "yellow": (235, 205, 35), "purple": (145, 60, 185), "orange": (245, 135, 25),
}
SHAPES: tuple[str, ...] = ("circle", "square", "triangle", "diamond", "cross")
ROWS: tuple[str, ...] = ("top", "middle", "bottom")
COLS: tuple[str, ...] = ("left", "center", "right")
POSITIONS: tuple[str, ...] = tuple(f"{r} {c}" for r in ROWS for c in COLS)
TASKS: tuple[str, ...] = ("colour", "shape", "position", "count", "box", "point", "read", "same_colour", "which_image")
LOCALISER_CATEGORIES: tuple[str, ...] = ("words", "pseudowords", "consonants", "false_font", "scrambled", "shapes", "noise")
ALPHABET = "abcdefghijklmnopqrstuvwxyz"
_VOWELS = "aeiou"
_CONSONANTS = "".join(c for c in ALPHABET if c not in _VOWELS + "y")

#: common English words of 3-5 letters (the reading lexicon; a fixed part is held out as "unseen")
LEXICON: tuple[str, ...] = tuple(w for w in """
act add age air all and ant any arm art ask bad bag bed bee big bird bit black blue boat body bone book
box boy bread bus cake call can car card care cat chair city cold cow cry cup cut dark day desk dog door
down draw dream dress drink dry duck ear earth east eat egg end eye face fall farm fast fire fish five
flag floor fly food foot fox free frog fun game girl give glass goat gold good grass green hand hat head
heart help hill home horse hot house ice iron jam jump key king kite lake lamp land leaf leg light line
lion lip long love low man map meat milk moon mouse name neck nest new night nose oil old open pen pig
pink plant play rain red ring river road rock roof room rose run salt sand sea seed ship shoe shop sing
sit sky sleep slow small snow sock song star stone sun table tail talk tea tent three tiger time toe
tooth town tree truck two wall warm water west wet wheel white wind window wing wolf wood word yard
year zoo
""".split() if 3 <= len(w) <= 5)

#: drawn font sizes (px). At 11-14 px a tower trained from scratch stayed at the letter prior after
#: 1,200 steps; at 18-22 px its patch-letter accuracy reached 0.93 after 1,200 word-only steps
#: (see ``iclr26/models/TINY_VLM.md``). A string too wide for the canvas falls back to smaller sizes.
_FONT_SIZES = (18, 19, 20, 21, 22)


@lru_cache(maxsize=None)
def _font(size: int):
    if size == 0:
        return ImageFont.load_default_imagefont()
    try:
        return ImageFont.load_default(size=size)
    except (TypeError, OSError):  # Pillow without FreeType: only the bitmap font
        return ImageFont.load_default_imagefont()


def lexicon_split(held_out: float = 0.2) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(seen, unseen)`` words: a fixed, seed-independent split of :data:`LEXICON` (every fifth word,
    in alphabetical order, is held out by default)."""
    if not 0 < held_out < 1:
        raise ValueError(f"held_out must be in (0, 1), got {held_out!r}")
    words = sorted(LEXICON)
    step = max(2, round(1 / held_out))
    unseen = tuple(w for i, w in enumerate(words) if i % step == step - 1)
    seen = tuple(w for w in words if w not in unseen)
    return seen, unseen


def pseudowords(n: int, rng: np.random.Generator, *, min_len: int = 3, max_len: int = 5) -> list[str]:
    """``n`` pronounceable non-words (consonant-vowel patterns, never a word of :data:`LEXICON`)."""
    lex = set(LEXICON)
    out = []
    while len(out) < n:
        length = int(rng.integers(min_len, max_len + 1))
        start_vowel = bool(rng.random() < 0.3)
        s = "".join(
            (rng.choice(list(_VOWELS)) if (i % 2 == 0) == start_vowel else rng.choice(list(_CONSONANTS)))
            for i in range(length)
        )
        if s not in lex:
            out.append(s)
    return out


def consonant_strings(n: int, rng: np.random.Generator, *, min_len: int = 3, max_len: int = 5) -> list[str]:
    """``n`` unpronounceable strings of consonants."""
    return ["".join(rng.choice(list(_CONSONANTS), size=int(rng.integers(min_len, max_len + 1)))) for _ in range(n)]


# --------------------------------------------------------------------------------------------- scenes
@dataclass
class ShapeObject:
    shape: str
    colour: str
    box: tuple[int, int, int, int]      # x0, y0, x1, y1 in pixels, x1/y1 exclusive

    @property
    def centre(self) -> tuple[float, float]:
        x0, y0, x1, y1 = self.box
        return (x0 + x1) / 2, (y0 + y1) / 2

    @property
    def name(self) -> str:
        return f"{self.colour} {self.shape}"


@dataclass
class Scene:
    image: Image.Image
    objects: list[ShapeObject]
    size: int


def position_of(centre: tuple[float, float], size: int) -> str:
    """The 3x3 grid cell (``"top left"`` ... ``"bottom right"``) of a point in a ``size`` image."""
    cx, cy = centre
    c = min(2, int(3 * cx / size))
    r = min(2, int(3 * cy / size))
    return f"{ROWS[r]} {COLS[c]}"


def _draw_shape(draw: ImageDraw.ImageDraw, shape: str, box, fill):
    x0, y0, x1, y1 = box
    x1, y1 = x1 - 1, y1 - 1
    w, h = x1 - x0, y1 - y0
    if shape == "circle":
        draw.ellipse((x0, y0, x1, y1), fill=fill)
    elif shape == "square":
        draw.rectangle((x0, y0, x1, y1), fill=fill)
    elif shape == "triangle":
        draw.polygon([(x0 + w / 2, y0), (x1, y1), (x0, y1)], fill=fill)
    elif shape == "diamond":
        draw.polygon([(x0 + w / 2, y0), (x1, y0 + h / 2), (x0 + w / 2, y1), (x0, y0 + h / 2)], fill=fill)
    elif shape == "cross":
        tw, th = max(2, round(w / 3)), max(2, round(h / 3))
        mx, my = x0 + (w - tw) / 2, y0 + (h - th) / 2
        draw.rectangle((mx, y0, mx + tw, y1), fill=fill)
        draw.rectangle((x0, my, x1, my + th), fill=fill)
    else:
        raise ValueError(f"unknown shape {shape!r}; shapes are {SHAPES}")


def _background(rng: np.random.Generator, size: int) -> Image.Image:
    base = rng.integers(225, 256, size=3)
    noise = rng.integers(-6, 7, size=(size, size, 1))
    arr = np.clip(base[None, None, :] + noise, 0, 255).astype(np.uint8)
    return Image.fromarray(arr, "RGB")


def render_scene(rng: np.random.Generator, *, n_objects: int | tuple[int, int] = (1, 4), size: int = 64,
                 min_side: int | None = None, max_side: int | None = None, cell: str | None = None,
                 distinct: bool = False, shapes=SHAPES, colours=tuple(COLOURS)) -> Scene:
    """A scene of non-overlapping coloured shapes on a light, slightly noisy background.

    ``n_objects``: a count or an inclusive ``(low, high)`` range. ``cell``: put the (single) object's
    centre in this 3x3 cell (one of :data:`POSITIONS`). ``distinct``: no two objects share both colour
    and shape (so each can be named). Boxes are pixel boxes ``[x0, y0, x1)``.
    """
    if isinstance(n_objects, tuple):
        n = int(rng.integers(n_objects[0], n_objects[1] + 1))
    else:
        n = int(n_objects)
    if n < 0:
        raise ValueError(f"n_objects must be >= 0, got {n}")
    if cell is not None and cell not in POSITIONS:
        raise ValueError(f"cell must be one of {POSITIONS}, got {cell!r}")
    min_side = min_side or max(6, size // 7)
    max_side = max_side or max(min_side + 1, size // 3)
    img = _background(rng, size)
    draw = ImageDraw.Draw(img)
    objects: list[ShapeObject] = []
    used = set()
    for _ in range(n):
        for _attempt in range(200):
            side = int(rng.integers(min_side, max_side + 1))
            if cell is not None:
                # integer corners whose box centre x0 + side/2 lies in the cell: c*size/3 <= . < (c+1)*size/3
                r, c = POSITIONS.index(cell) // 3, POSITIONS.index(cell) % 3
                xs = [x for x in range(0, size - side + 1) if position_of((x + side / 2, size / 2), size).endswith(COLS[c])]
                ys = [y for y in range(0, size - side + 1) if position_of((size / 2, y + side / 2), size).startswith(ROWS[r])]
                if not xs or not ys:
                    continue
                x0, y0 = int(rng.choice(xs)), int(rng.choice(ys))
            else:
                x0, y0 = int(rng.integers(0, size - side + 1)), int(rng.integers(0, size - side + 1))
            box = (x0, y0, x0 + side, y0 + side)
            if any(iou(box, o.box) > 0 for o in objects):
                continue
            shape, colour = str(rng.choice(list(shapes))), str(rng.choice(list(colours)))
            if distinct and (shape, colour) in used:
                continue
            break
        else:
            raise RuntimeError(f"could not place {n} objects in a {size}px image; lower n_objects or max_side")
        used.add((shape, colour))
        jitter = rng.integers(-12, 13, size=3)
        fill = tuple(int(v) for v in np.clip(np.array(COLOURS[colour]) + jitter, 0, 255))
        _draw_shape(draw, shape, box, fill)
        objects.append(ShapeObject(shape, colour, box))
    return Scene(img, objects, size)


# ----------------------------------------------------------------------------------------------- text
def _glyph(ch: str, font, false_font: bool) -> np.ndarray:
    """Ink mask (bool, h x w) of one character; with ``false_font`` the mask is cut into halves that
    are flipped upside down and swapped left for right, so ink and stroke width match the letter but its
    form does not."""
    l, t, r, b = font.getbbox(ch)
    w, h = max(1, r - l), max(1, b - t)
    im = Image.new("L", (w + 2, h + 2), 0)
    ImageDraw.Draw(im).text((1 - l, 1 - t), ch, fill=255, font=font)
    m = np.array(im) > 96
    cols = np.flatnonzero(m.any(0))
    if cols.size:
        m = m[:, cols[0]:cols[-1] + 1]           # the ink's own width: letters and false glyphs alike
    if false_font:
        m = m[::-1, :]
        half = m.shape[1] // 2
        m = np.concatenate([m[:, half:], m[:, :half]], axis=1)
    return m


def _text_mask(text: str, fs: int, false_font: bool, centres: list | None = None) -> np.ndarray:
    font = _font(fs)
    glyphs = [_glyph(ch, font, false_font) for ch in text]
    gap = 2
    height = max(g.shape[0] for g in glyphs)
    width = sum(g.shape[1] for g in glyphs) + gap * (len(glyphs) - 1)
    mask = np.zeros((height, width), bool)
    x = 0
    for g in glyphs:
        y = height - g.shape[0] if not false_font else 0   # a false glyph hangs from the top
        mask[y:y + g.shape[0], x:x + g.shape[1]] |= g
        if centres is not None:
            centres.append((x + g.shape[1] / 2, y + g.shape[0] / 2))
        x += g.shape[1] + gap
    return mask


def render_text(text: str, rng: np.random.Generator, *, size: int = 64, false_font: bool = False,
                font_size: int | None = None, anywhere: bool = False, layout: bool = False):
    """Draw ``text`` (dark ink, random font size and shade) on a light background.

    The text starts 1-4 px from the left edge at a random height (``anywhere=True``: at a random
    place), so the k-th letter sits at about the same place in every image. A drawn font size too
    large for the string falls back to smaller ones (down to 8). Returns ``(image, box)`` with the pixel
    box of the ink (``layout=True``: ``(image, box, centres)`` with each character's centre in pixels). ``false_font`` draws each character as its false-font glyph (see
    :func:`_glyph`). Raises ValueError when the text cannot fit at any size.
    """
    if not text or not isinstance(text, str):
        raise ValueError("text must be a non-empty string")
    fs = int(font_size if font_size is not None else rng.choice(_FONT_SIZES))
    sizes = list(range(fs, 7, -1))
    for f in sizes:
        centres: list = []
        mask = _text_mask(text, f, false_font, centres)
        height, width = mask.shape
        if width <= size - 6 and height <= size - 2:
            break
    else:
        raise ValueError(f"text {text!r} at font size {fs} is {width}x{height}px: does not fit in {size}px")
    img = _background(rng, size)
    arr = np.array(img)
    x0 = int(rng.integers(1, size - width)) if anywhere else int(rng.integers(1, 5))
    y0 = int(rng.integers(1, size - height))
    ink = rng.integers(0, 70, size=3)
    region = arr[y0:y0 + height, x0:x0 + width]
    region[mask] = ink
    img, box = Image.fromarray(arr, "RGB"), (x0, y0, x0 + width, y0 + height)
    if layout:
        return img, box, [(x0 + cx, y0 + cy) for cx, cy in centres]
    return img, box


# ---------------------------------------------------------------------------------------------- items
@dataclass
class VisionItem:
    """One question about one or more images, with its answer and what the checker needs."""
    images: list[Image.Image]
    question: str
    answer: str
    task: str
    meta: dict = field(default_factory=dict)


def format_box(box) -> str:
    """``[x0, y0, x1, y1]`` with integer pixel coordinates."""
    return "[" + ", ".join(str(int(round(v))) for v in box) + "]"


def format_point(point) -> str:
    return "(" + ", ".join(str(int(round(v))) for v in point) + ")"


_NUM = re.compile(r"-?\d+(?:\.\d+)?")


def parse_box(text: str):
    """The first four numbers of ``text`` as a box ``(x0, y0, x1, y1)`` (corners sorted), or None."""
    nums = [float(v) for v in _NUM.findall(text or "")]
    if len(nums) < 4:
        return None
    x0, y0, x1, y1 = nums[:4]
    return (min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1))


def parse_point(text: str):
    nums = [float(v) for v in _NUM.findall(text or "")]
    return (nums[0], nums[1]) if len(nums) >= 2 else None


def iou(a, b) -> float:
    """Intersection over union of two ``(x0, y0, x1, y1)`` boxes (0 for empty boxes)."""
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return float(inter / union) if union > 0 else 0.0


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9 ]", " ", (text or "").lower()).split("\n")[0].strip()


def check_answer(item: VisionItem, text: str, *, iou_threshold: float = 0.5) -> bool:
    """Whether the model's answer ``text`` is right for ``item``.

    Names (colour, shape, position, word, yes/no) must be the first words of the answer (case and
    punctuation ignored); counts and image numbers the first number; a box must reach IoU >=
    ``iou_threshold`` with the target's box; a point must fall inside the target's box.
    """
    task = item.task
    if task == "box":
        box = parse_box(text)
        return box is not None and iou(box, item.meta["box"]) >= iou_threshold
    if task == "point":
        p = parse_point(text)
        if p is None:
            return False
        x0, y0, x1, y1 = item.meta["box"]
        return x0 <= p[0] <= x1 and y0 <= p[1] <= y1
    if task in ("count", "which_image"):
        nums = _NUM.findall(text or "")
        return bool(nums) and float(nums[0]) == float(item.answer)
    words = _norm(text).split()
    target = item.answer.split()
    return words[:len(target)] == target


def chance_level(task: str, items: list[VisionItem] | None = None) -> float:
    """Accuracy of a guesser: uniform over the answer set (``box``/``point``: one of the scene's
    shapes at random; ``which_image``: one of the images; both averaged over ``items`` when given)."""
    fixed = {"colour": 1 / len(COLOURS), "shape": 1 / len(SHAPES), "position": 1 / len(POSITIONS),
             "count": 1 / 5, "read": 1 / len(LEXICON), "same_colour": 0.5}
    if task in fixed:
        return fixed[task]
    if task in ("box", "point"):
        return float(np.mean([1 / len(it.meta["objects"]) for it in items])) if items else 1 / 3
    if task == "which_image":
        return float(np.mean([1 / len(it.images) for it in items])) if items else 0.4
    raise ValueError(f"unknown task {task!r}; tasks are {TASKS}")


def _rng(seed: int, split: str, task: str) -> np.random.Generator:
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    key = [int(seed), 0 if split == "train" else 1] + [ord(c) for c in task]
    return np.random.default_rng(np.random.SeedSequence(key))


def make_item(task: str, rng: np.random.Generator, *, size: int = 64, words: str = "seen") -> VisionItem:
    """One item of ``task`` drawn from ``rng`` (see :data:`TASKS`). ``words`` (task ``read``):
    ``"seen"`` or ``"unseen"`` lexicon words, ``"pseudo"`` pseudo-words, or ``"mixed"``
    (seen words and pseudo-words)."""
    if task in ("colour", "shape"):
        sc = render_scene(rng, n_objects=1, size=size)
        o = sc.objects[0]
        q = "What colour is the shape?" if task == "colour" else "What shape is this?"
        return VisionItem([sc.image], q, o.colour if task == "colour" else o.shape, task,
                          dict(objects=sc.objects))
    if task == "position":
        cell = str(rng.choice(list(POSITIONS)))
        sc = render_scene(rng, n_objects=1, size=size, cell=cell, max_side=size // 4)
        return VisionItem([sc.image], "Where is the shape?", cell, task, dict(objects=sc.objects))
    if task == "count":
        sc = render_scene(rng, n_objects=(1, 5), size=size, max_side=size // 4)
        return VisionItem([sc.image], "How many shapes are there?", str(len(sc.objects)), task,
                          dict(objects=sc.objects))
    if task in ("box", "point"):
        sc = render_scene(rng, n_objects=(2, 4), size=size, distinct=True)
        target = sc.objects[int(rng.integers(len(sc.objects)))]
        if task == "box":
            q, a = f"Give the box of the {target.name}.", format_box(target.box)
        else:
            q, a = f"Point to the {target.name}.", format_point(target.centre)
        return VisionItem([sc.image], q, a, task, dict(objects=sc.objects, box=target.box, target=target.name))
    if task == "read":
        if words not in ("seen", "unseen", "pseudo", "mixed"):
            raise ValueError(f"words must be 'seen', 'unseen', 'pseudo' or 'mixed', got {words!r}")
        seen, unseen = lexicon_split()
        kind = words if words != "mixed" else ("pseudo" if rng.random() < 0.3 else "seen")
        w = pseudowords(1, rng)[0] if kind == "pseudo" else str(rng.choice(list(seen if kind == "seen" else unseen)))
        img, box = render_text(w, rng, size=size)
        return VisionItem([img], "What word is written?", w, task, dict(kind=kind, box=box))
    if task == "same_colour":
        same = bool(rng.random() < 0.5)
        c1 = str(rng.choice(list(COLOURS)))
        c2 = c1 if same else str(rng.choice([c for c in COLOURS if c != c1]))
        s1 = render_scene(rng, n_objects=1, size=size, colours=(c1,))
        s2 = render_scene(rng, n_objects=1, size=size, colours=(c2,))
        return VisionItem([s1.image, s2.image], "Are the two shapes the same colour?", "yes" if same else "no",
                          task, dict(objects=s1.objects + s2.objects))
    if task == "which_image":
        k = int(rng.integers(2, 4))
        shapes = list(rng.choice(list(SHAPES), size=k, replace=False))
        target = int(rng.integers(k))
        scenes = [render_scene(rng, n_objects=1, size=size, shapes=(s,)) for s in shapes]
        return VisionItem([s.image for s in scenes], f"Which image shows a {shapes[target]}?", str(target + 1),
                          task, dict(shapes=[str(s) for s in shapes]))
    raise ValueError(f"unknown task {task!r}; tasks are {TASKS}")


def make_items(task: str, n: int, seed: int = 0, *, split: str = "train", size: int = 64,
               words: str | None = None) -> list[VisionItem]:
    """``n`` items of ``task``, the same for the same ``(task, n, seed, split, size, words)``; the
    ``train`` and ``test`` splits of one seed are drawn from different streams. ``words`` defaults
    to ``"mixed"`` for train and ``"seen"`` for test (pass ``"unseen"`` for held-out words)."""
    if not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    if size < 32:
        raise ValueError(f"size must be >= 32 pixels, got {size}")
    rng = _rng(seed, split, task + (words or ""))
    words = words or ("mixed" if split == "train" else "seen")
    return [make_item(task, rng, size=size, words=words) for _ in range(n)]


def localiser_stimuli(category: str, n: int, seed: int = 0, *, size: int = 64):
    """``(images, strings)`` for a category-selectivity localiser: ``n`` images of ``category``
    (:data:`LOCALISER_CATEGORIES`); ``strings`` holds the drawn letter strings (empty for shapes and
    noise). Words, pseudo-words, consonant strings and false fonts share length (3-5) and font sizes."""
    if category not in LOCALISER_CATEGORIES:
        raise ValueError(f"unknown category {category!r}; categories are {LOCALISER_CATEGORIES}")
    rng = _rng(seed, "test", "localiser-" + category)
    images, strings = [], []
    for _ in range(n):
        if category in ("words", "false_font", "scrambled"):
            s = str(rng.choice(list(LEXICON)))
        elif category == "pseudowords":
            s = pseudowords(1, rng)[0]
        elif category == "consonants":
            s = consonant_strings(1, rng)[0]
        else:
            s = ""
        if category == "shapes":
            img = render_scene(rng, n_objects=(1, 3), size=size).image
        elif category == "noise":
            img = Image.fromarray(rng.integers(0, 256, size=(size, size, 3)).astype(np.uint8), "RGB")
        else:
            img, _ = render_text(s, rng, size=size, false_font=category == "false_font")
            if category == "scrambled":
                arr = np.array(img)
                b = 8
                blocks = [arr[i:i + b, j:j + b] for i in range(0, size, b) for j in range(0, size, b)]
                order = rng.permutation(len(blocks))
                per_row = size // b
                rows = [np.concatenate([blocks[order[r * per_row + c]] for c in range(per_row)], axis=1)
                        for r in range(per_row)]
                img = Image.fromarray(np.concatenate(rows, axis=0), "RGB")
        images.append(img)
        strings.append(s)
    return images, strings
