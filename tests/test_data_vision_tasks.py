"""Procedural vision data: determinism, geometry, and the answer checkers (right answers pass, wrong
ones fail, for every task)."""
from __future__ import annotations

import numpy as np
import pytest

from iclr26.data import vision_tasks as vt


def _pixels(items):
    return [np.asarray(im) for it in items for im in it.images]


@pytest.mark.parametrize("task", vt.TASKS)
def test_items_are_deterministic_and_splits_differ(task):
    a, b = vt.make_items(task, 6, seed=3), vt.make_items(task, 6, seed=3)
    assert [it.answer for it in a] == [it.answer for it in b]
    assert all(np.array_equal(x, y) for x, y in zip(_pixels(a), _pixels(b)))
    c = vt.make_items(task, 6, seed=3, split="test")
    d = vt.make_items(task, 6, seed=4)
    assert not all(np.array_equal(x, y) for x, y in zip(_pixels(a), _pixels(c)))
    assert not all(np.array_equal(x, y) for x, y in zip(_pixels(a), _pixels(d)))
    assert all(im.size == (64, 64) and im.mode == "RGB" for it in a for im in it.images)


@pytest.mark.parametrize("task", vt.TASKS)
def test_checker_accepts_the_answer_and_rejects_others(task):
    items = vt.make_items(task, 30, seed=0)
    assert all(vt.check_answer(it, it.answer) for it in items)
    assert all(vt.check_answer(it, "  " + it.answer.upper() + ".\nmore text") for it in items
               if task not in ("box", "point"))
    assert not any(vt.check_answer(it, "") for it in items)
    answers = sorted({it.answer for it in items})
    if task not in ("box", "point"):
        assert len(answers) > 1
        for it in items:
            other = next(a for a in answers if a != it.answer)
            assert not vt.check_answer(it, other)


def test_scene_geometry_boxes_and_attributes():
    rng = np.random.default_rng(0)
    for _ in range(50):
        sc = vt.render_scene(rng, n_objects=(1, 5), size=64, max_side=16, distinct=True)
        arr = np.asarray(sc.image).astype(int)
        names = [o.name for o in sc.objects]
        assert len(names) == len(set(names))
        for o in sc.objects:
            x0, y0, x1, y1 = o.box
            assert 0 <= x0 < x1 <= 64 and 0 <= y0 < y1 <= 64
            cx, cy = int(o.centre[0]), int(o.centre[1])
            # the centre pixel of every shape (all five are filled there) has the object's colour
            assert np.abs(arr[cy, cx] - np.array(vt.COLOURS[o.colour])).max() <= 12
        for i, a in enumerate(sc.objects):
            for b in sc.objects[i + 1:]:
                assert vt.iou(a.box, b.box) == 0


def test_position_cells_and_counts():
    for it in vt.make_items("position", 40, seed=1):
        o = it.meta["objects"][0]
        assert vt.position_of(o.centre, 64) == it.answer
    counts = [int(it.answer) for it in vt.make_items("count", 200, seed=1)]
    assert set(counts) == {1, 2, 3, 4, 5}
    assert vt.position_of((0, 0), 63) == "top left" and vt.position_of((62, 62), 63) == "bottom right"


def test_box_and_point_parsing():
    it = vt.make_items("box", 1, seed=2)[0]
    x0, y0, x1, y1 = it.meta["box"]
    assert vt.parse_box(it.answer) == (x0, y0, x1, y1)
    assert vt.parse_box(f"[{x1}, {y1}, {x0}, {y0}]") == (x0, y0, x1, y1)      # corners sorted
    assert vt.check_answer(it, f"the box is ({x0 + 1}, {y0}, {x1}, {y1 + 1})")
    assert not vt.check_answer(it, f"[{x1}, {y1}, {x1 + 20}, {y1 + 20}]")
    assert not vt.check_answer(it, "[1, 2, 3]")
    assert vt.iou((0, 0, 10, 10), (5, 0, 15, 10)) == pytest.approx(1 / 3)
    assert vt.iou((0, 0, 0, 0), (0, 0, 0, 0)) == 0.0
    p = vt.make_items("point", 1, seed=2)[0]
    bx = p.meta["box"]
    assert vt.check_answer(p, f"({bx[0]}, {bx[3]})") and not vt.check_answer(p, f"({bx[2] + 1}, {bx[3]})")


def test_words_pseudowords_and_false_fonts():
    seen, unseen = vt.lexicon_split()
    assert not set(seen) & set(unseen) and len(seen) + len(unseen) == len(vt.LEXICON)
    assert all(3 <= len(w) <= 5 for w in vt.LEXICON)
    rng = np.random.default_rng(0)
    pw = vt.pseudowords(200, rng)
    assert not set(pw) & set(vt.LEXICON) and all(3 <= len(w) <= 5 for w in pw)
    cs = vt.consonant_strings(50, rng)
    assert all(not set(s) & set("aeiouy") for s in cs)
    reads = vt.make_items("read", 20, seed=0, split="test", words="unseen")
    assert all(it.answer in unseen for it in reads)
    # a false-font string has the ink of the word, in other shapes
    for w in ("house", "tree", "milk"):
        img, box = vt.render_text(w, np.random.default_rng(5), font_size=13)
        ff, fbox = vt.render_text(w, np.random.default_rng(5), font_size=13, false_font=True)
        ink, fink = (np.asarray(img).sum(-1) < 300).sum(), (np.asarray(ff).sum(-1) < 300).sum()
        assert abs(int(ink) - int(fink)) <= 0.05 * ink
        assert box[2] - box[0] == fbox[2] - fbox[0]
        assert not np.array_equal(np.asarray(img), np.asarray(ff))
    with pytest.raises(ValueError, match="does not fit"):
        vt.render_text("abcdefghijklmnopqrstuvwxyz", rng, font_size=14)


@pytest.mark.parametrize("category", vt.LOCALISER_CATEGORIES)
def test_localiser_stimuli(category):
    images, strings = vt.localiser_stimuli(category, 8, seed=0)
    again, _ = vt.localiser_stimuli(category, 8, seed=0)
    assert len(images) == 8 and all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(images, again))
    if category in ("shapes", "noise"):
        assert strings == [""] * 8
    else:
        assert all(3 <= len(s) <= 5 for s in strings)
    if category == "words":
        assert set(strings) <= set(vt.LEXICON)


def test_chance_levels_and_bad_input():
    assert vt.chance_level("colour") == pytest.approx(1 / 6)
    assert vt.chance_level("position") == pytest.approx(1 / 9)
    items = vt.make_items("box", 20, seed=0)
    assert vt.chance_level("box", items) == pytest.approx(np.mean([1 / len(it.meta["objects"]) for it in items]))
    with pytest.raises(ValueError, match="unknown task"):
        vt.make_items("colours", 1)
    with pytest.raises(ValueError, match="split"):
        vt.make_items("colour", 1, split="val")
    with pytest.raises(ValueError, match="seed"):
        vt.make_items("colour", 1, seed=-1)
    with pytest.raises(ValueError, match="words"):
        vt.make_items("read", 1, words="rare")
    with pytest.raises(ValueError, match="category"):
        vt.localiser_stimuli("faces", 1)
    with pytest.raises(ValueError, match="cell"):
        vt.render_scene(np.random.default_rng(0), n_objects=1, cell="north")


def test_text_starts_at_the_left_and_wide_strings_fit():
    rng = np.random.default_rng(1)
    for w in ("wwwww", "mmmmm", "house", "ant"):
        img, box = vt.render_text(w, rng, font_size=14)
        assert 1 <= box[0] <= 4 and box[2] <= 64 - 2
        dark = np.flatnonzero((np.asarray(img).sum(-1) < 300).any(0))
        assert dark[0] == box[0] and dark[-1] == box[2] - 1          # the box is the ink's extent
    img, box, centres = vt.render_text("house", rng, layout=True)
    assert len(centres) == 5 and all(box[0] <= x <= box[2] and box[1] <= y <= box[3] for x, y in centres)
    assert [x for x, _ in centres] == sorted(x for x, _ in centres)
    starts = {vt.render_text("cat", rng, anywhere=True)[1][0] for _ in range(20)}
    assert max(starts) > 10
