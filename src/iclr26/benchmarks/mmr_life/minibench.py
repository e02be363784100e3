"""A procedural mini benchmark in MMR-Life's schema: five-way multiple choice over several "images",
one generator per reasoning type (the seven types of ``utils/config.py``), each image given as a text
description (a perception-oracle rendering: the model is told what each image shows, so only the
reasoning across images is tested, not perception).

An item is a dict: ``id`` ("<TASK>_<n>", as the release's ids), ``type``, ``task``, ``images``
(descriptions, in order), ``question``, ``options`` (five strings), ``golden_answer`` (a letter).
The generators are ours (the release's images are real photographs, out of reach offline); the
answer of every item follows from its images by the rule named in its generator.
"""
from __future__ import annotations

import numpy as np

from .evaluation import LETTERS, REASONING_TYPES

# ---- small lexicons (ours)
_PROCESSES = [  # (subject, quantity phrase, unit, increases over time?)
    ("a candle burning on a table", "the candle is {v} cm tall", "cm", False),
    ("a sunflower growing in a pot", "the sunflower is {v} cm tall", "cm", True),
    ("a bathtub filling with water", "the water is {v} cm deep", "cm", True),
    ("a snowman melting in the sun", "the snowman is {v} cm tall", "cm", False),
    ("a pile of firewood being used up", "{v} logs are left in the pile", "", False),
    ("a jar being filled with coins", "the jar holds {v} coins", "", True),
]
_OBJECTS = ["lamp", "vase", "clock", "book", "mug", "plant", "radio", "bowl", "candle", "shoe"]
_ANALOGIES = [("puppy", "dog"), ("kitten", "cat"), ("calf", "cow"), ("foal", "horse"), ("lamb", "sheep"),
              ("chick", "hen"), ("cub", "bear"), ("duckling", "duck"), ("piglet", "pig"), ("tadpole", "frog")]
_CAUSES = [  # (cause scene 1, cause scene 2, effect)
    ("an ice cube on a sunny windowsill", "the sun shining on it for an hour", "a small puddle of water"),
    ("a glass at the edge of a table", "a cat brushing past the glass", "broken glass on the floor"),
    ("a slice of bread in a toaster", "the toaster left on for ten minutes", "a black burnt slice of toast"),
    ("a child holding a balloon", "the balloon touching a cactus", "a popped balloon"),
    ("a seed planted in wet soil", "two weeks of sun and water", "a green sprout in the soil"),
    ("a phone at 3 % battery", "a long video call on the phone", "a phone with a black, dead screen"),
    ("a pot of water on a hot stove", "twenty minutes passing", "bubbling, boiling water"),
    ("a sandcastle near the sea", "the tide coming in", "a flat wet patch of sand"),
]
_ABDUCTIONS = [  # (observation 1, observation 2, explanation)
    ("a wet street", "people closing their umbrellas", "it has just rained"),
    ("an empty plate with crumbs", "a child with chocolate on his face", "the child ate the cake"),
    ("footprints in fresh snow", "the footprints ending at a front door", "someone walked to the house"),
    ("a flat bicycle tyre", "a nail on the road behind the bicycle", "the tyre ran over the nail"),
    ("a dog covered in mud", "muddy paw prints across the kitchen", "the dog came in from the garden"),
    ("smoke coming from an oven", "a cook rushing to open the oven", "the food in the oven is burning"),
    ("a crowd cheering in a stadium", "a player with raised arms", "the team has just scored"),
    ("a torn-open parcel on a doorstep", "a new pair of shoes in a box", "a delivery of shoes arrived"),
]
_COLORS = ["red", "blue", "green", "yellow", "white", "black", "orange"]
_ROOMS = ["kitchen", "library", "garden", "garage", "attic", "cellar", "studio", "office"]


def _shuffle_options(rng, correct: str, distractors: list[str]) -> tuple[list[str], str]:
    opts = [correct] + list(distractors[:4])
    order = rng.permutation(5)
    opts = [opts[i] for i in order]
    return opts, LETTERS[int(np.flatnonzero(order == 0)[0])]


def _temporal(rng):
    subj, phrase, _u, up = _PROCESSES[rng.integers(len(_PROCESSES))]
    vals = np.sort(rng.choice(np.arange(2, 60), size=5, replace=False))
    if not up:
        vals = vals[::-1]          # vals[0] is the first moment in time
    shown = rng.permutation(5)     # image k shows moment shown[k]
    images = [f"{subj}; " + phrase.format(v=int(vals[m])) for m in shown]
    first = int(np.flatnonzero(shown == 0)[0])
    opts = [f"Image {k + 1}" for k in range(5)]
    return "CTR", images, "Which image was taken first?", opts, LETTERS[first]


def _spatial(rng):
    objs = list(rng.choice(_OBJECTS, size=5, replace=False))   # objs in left-to-right order
    pairs = [(objs[i], objs[i + 1]) for i in range(4)]
    order = rng.permutation(4)
    images = [f"a shelf seen from the front: the {pairs[i][0]} stands directly left of the {pairs[i][1]}" for i in order]
    opts, ans = _shuffle_options(rng, f"the {objs[0]}", [f"the {o}" for o in objs[1:]])
    return "RPE", images, "Which object stands furthest to the left on the shelf?", opts, ans


def _inductive(rng):
    start, step = int(rng.integers(1, 8)), int(rng.integers(2, 6))
    seq = [start + step * k for k in range(4)]
    nxt = start + step * 4
    images = [f"a card with {v} dots" for v in seq]
    cand = [nxt - step, nxt + 1, nxt + step, nxt - 1, nxt + 2, nxt - 2]
    cand = [c for c in dict.fromkeys(cand) if c > 0 and c != nxt]
    dis = [str(c) for c in rng.permutation(cand)[:4]]
    opts, ans = _shuffle_options(rng, str(nxt), dis)
    return "PDI", images, "The cards follow a pattern. How many dots will the next card show?", opts, ans


def _deductive(rng):
    cols = list(rng.choice(_COLORS, size=3, replace=False))
    rooms = list(rng.choice(_ROOMS, size=5, replace=False))
    images = [f"a sign on a wall: 'the {c} door leads to the {r}'" for c, r in zip(cols, rooms[:3])]
    pick = int(rng.integers(3))
    images.append(f"a woman opening the {cols[pick]} door and walking through it")
    opts, ans = _shuffle_options(rng, f"the {rooms[pick]}", [f"the {r}" for i, r in enumerate(rooms) if i != pick])
    return "RSD", images, "Following the signs, which room does the woman enter?", opts, ans


def _analogical(rng):
    idx = rng.choice(len(_ANALOGIES), size=2, replace=False)
    (a, b), (c, d) = _ANALOGIES[idx[0]], _ANALOGIES[idx[1]]
    images = [f"a {a}", f"a {b}", f"a {c}"]
    others = [p for k, p in enumerate(_ANALOGIES) if k not in idx]
    pool = [f"a {x}" for x, _ in others] + [f"a {y}" for _, y in others]
    dis = [f"a {c}"] + list(rng.permutation(pool)[:3])
    opts, ans = _shuffle_options(rng, f"a {d}", dis)
    return "ARI", images, "Image 1 is to Image 2 as Image 3 is to which option?", opts, ans


def _causal(rng):
    k = int(rng.integers(len(_CAUSES)))
    c1, c2, eff = _CAUSES[k]
    others = [e for j, (_, _, e) in enumerate(_CAUSES) if j != k]
    opts, ans = _shuffle_options(rng, eff, list(rng.permutation(others)[:4]))
    return "CIP", [c1, c2], "What will the next image most likely show?", opts, ans


def _abductive(rng):
    k = int(rng.integers(len(_ABDUCTIONS)))
    o1, o2, expl = _ABDUCTIONS[k]
    others = [e for j, (_, _, e) in enumerate(_ABDUCTIONS) if j != k]
    opts, ans = _shuffle_options(rng, expl, list(rng.permutation(others)[:4]))
    return "HAA", [o1, o2], "What most likely happened, given these images?", opts, ans


GENERATORS = {"abductive": _abductive, "analogical": _analogical, "causal": _causal, "deductive": _deductive,
              "inductive": _inductive, "spatial": _spatial, "temporal": _temporal}
assert tuple(GENERATORS) == REASONING_TYPES


def make_items(n_per_type: int, seed: int, types=REASONING_TYPES) -> list[dict]:
    """``n_per_type`` items of each reasoning type in ``types``, drawn with ``seed`` (deterministic)."""
    if not isinstance(n_per_type, int) or n_per_type < 1:
        raise ValueError(f"n_per_type must be a positive integer, got {n_per_type!r}")
    unknown = [t for t in types if t not in GENERATORS]
    if unknown or not types:
        raise ValueError(f"types must be a non-empty subset of {REASONING_TYPES}, got {list(types)}")
    rng = np.random.default_rng(seed)
    items = []
    for t in types:
        for n in range(n_per_type):
            task, images, q, opts, ans = GENERATORS[t](rng)
            items.append({"id": f"{task}_{n}", "type": t, "task": task, "images": list(images),
                          "question": q, "options": [str(o) for o in opts], "golden_answer": ans})
    return items
