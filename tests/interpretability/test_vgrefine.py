"""vgrefine: diagnostics against hand references, the knockout's arithmetic on a tiny random VLM,
reductions to the plain model, and rejection of bad input."""
import math

import numpy as np
import pytest
import torch

from iclr26.data.vision_tasks import render_scene
from iclr26.interpretability.vgrefine import (VGRefine, VisualTokenKnockout, box_token_mask, grounding_metrics,
                                              head_kl, image_positions, keep_count, paper_layer, random_heads,
                                              random_keep_mask, relevance_mask, select_grounding_heads,
                                              visual_attention)
from iclr26.models.vlm import random_vlm, vlm_inputs


@pytest.fixture(scope="module")
def vlm():
    torch.set_num_threads(1)
    model, proc = random_vlm(0, text_layers=3)
    rng = np.random.default_rng(0)
    scenes = [render_scene(rng, n_objects=1, size=32) for _ in range(3)]
    batch = vlm_inputs(proc, [[s.image] for s in scenes], ["What colour?", "What colour is it?", "Colour"])
    return model, proc, scenes, batch


def _ref(a, m):
    p = np.asarray(a, float) / np.sum(a)
    q = np.asarray(m, float) / np.sum(m)
    ar = p[np.asarray(m) > 0].sum()
    kl = sum(qi * math.log(qi / pi) for qi, pi in zip(q, p) if qi > 0)
    mid = (p + q) / 2
    kpm = sum(pi * math.log(pi / mi) for pi, mi in zip(p, mid) if pi > 0)
    kqm = sum(qi * math.log(qi / mi) for qi, mi in zip(q, mid) if qi > 0)
    return ar, kl, (kpm + kqm) / 2


def test_metrics_match_reference():
    a = torch.tensor([0.1, 0.4, 0.2, 0.3])
    m = torch.tensor([0.0, 1.0, 1.0, 0.0])
    g = grounding_metrics(a, m, eps=0.0)
    ar, kl, js = _ref(a.numpy(), m.numpy())
    assert g["ar"].item() == pytest.approx(0.6)
    assert g["ar"].item() == pytest.approx(ar)
    assert g["kl"].item() == pytest.approx(kl, rel=1e-5)
    assert g["js"].item() == pytest.approx(js, rel=1e-5)


def test_metrics_perfect_and_bounds():
    m = torch.tensor([0.0, 1.0, 1.0, 0.0])
    g = grounding_metrics(m * 5, m)                         # attention equal to the box: perfect
    assert g["ar"].item() == pytest.approx(1.0)
    assert g["kl"].item() == pytest.approx(0.0, abs=1e-6)
    assert g["js"].item() == pytest.approx(0.0, abs=1e-6)
    g = grounding_metrics(torch.tensor([1.0, 0, 0, 1.0]), m)   # disjoint: JS at log 2
    assert g["ar"].item() == 0.0
    assert g["js"].item() == pytest.approx(math.log(2), rel=1e-4)


def test_metrics_batched_and_scale_invariant():
    a = torch.rand(5, 7, 16) + 0.01
    m = (torch.rand(5, 1, 16) > 0.6).float()
    m[..., 0] = 1
    g = grounding_metrics(a, m)
    g2 = grounding_metrics(a * 3.7, m)
    assert g["kl"].shape == (5, 7)
    assert torch.allclose(g["kl"], g2["kl"], atol=1e-5)
    ar, kl, js = _ref(a[2, 3].numpy(), m[2, 0].numpy())
    assert g["kl"][2, 3].item() == pytest.approx(kl, rel=1e-4)
    assert g["js"][2, 3].item() == pytest.approx(js, rel=1e-4)


def test_box_token_mask():
    m = box_token_mask((0, 0, 16, 16), 64, 4)
    assert m.tolist() == [1.0] + [0.0] * 15
    m = box_token_mask((10, 20, 30, 40), 64, 4)             # cols 0-1, rows 1-2
    grid = m.reshape(4, 4)
    assert grid[1:3, 0:2].sum() == 4 and grid.sum() == 4
    m = box_token_mask((16, 16, 17, 17), 64, 4)             # one pixel, row 1 col 1
    assert m.reshape(4, 4)[1, 1] == 1 and m.sum() == 1


def test_head_selection_picks_lowest_kl():
    masks = torch.zeros(6, 4)
    masks[:, 1] = 1
    att = torch.full((6, 2, 3, 4), 0.25)
    att[:, 1, 2] = torch.tensor([0.01, 0.97, 0.01, 0.01])   # best
    att[:, 0, 1] = torch.tensor([0.1, 0.7, 0.1, 0.1])       # second
    att[:, 0, 0] = torch.tensor([0.4, 0.05, 0.4, 0.15])     # worst
    heads = select_grounding_heads(att, masks, k=2)
    assert heads.tolist() == [[1, 2], [0, 1]]
    scores = head_kl(att, masks)
    assert scores.shape == (2, 3) and scores.argmax().item() == 0
    assert select_grounding_heads(att, masks, k=0).shape == (0, 2)


def test_relevance_mask_and_counts():
    att = torch.zeros(1, 1, 2, 4)
    att[0, 0, 0] = torch.tensor([0.1, 0.5, 0.3, 0.1])
    att[0, 0, 1] = torch.tensor([0.4, 0.1, 0.4, 0.1])
    keep = relevance_mask(att, [[0, 0], [0, 1]], 50)        # mean: .25 .3 .35 .1 -> tokens 1, 2
    assert keep.tolist() == [[False, True, True, False]]
    keep = relevance_mask(att, [[0, 0]], 50)
    assert keep.tolist() == [[False, True, True, False]]
    assert relevance_mask(att, [[0, 0]], 75).tolist() == [[False, True, False, False]]
    assert relevance_mask(att, torch.zeros(0, 2), 50).all()  # K = 0: nothing masked
    assert relevance_mask(att, [[0, 0]], 0).all()
    assert keep_count(16, 50) == 8 and keep_count(16, 0) == 16 and keep_count(5, 50) == 3
    r = random_keep_mask(3, 16, 8, torch.Generator().manual_seed(0))
    assert (r.sum(1) == 8).all()


def test_paper_layer():
    assert paper_layer(32) == 16 and paper_layer(30) == 15 and paper_layer(2) == 1 and paper_layer(1) == 0


def test_visual_attention_shape_and_rows(vlm):
    model, _, _, batch = vlm
    maps = visual_attention(model, batch)
    assert maps.shape == (3, 3, 4, 4)
    assert (maps >= 0).all() and (maps.sum(-1) <= 1 + 1e-5).all()
    out = model(**batch, output_attentions=True)
    pos = image_positions(batch["input_ids"], model.config.image_token_id)
    assert torch.allclose(maps[1, 2, 3], out.attentions[2][1, 3, -1, pos[1]])


def test_knockout_zeroes_and_renormalises(vlm):
    model, _, _, batch = vlm
    pos = image_positions(batch["input_ids"], model.config.image_token_id)
    keep = torch.zeros(3, 4, dtype=torch.bool)
    keep[:, 0] = True
    keep[1, 3] = True
    with torch.no_grad():
        base = model(**batch, output_attentions=True)
        with VisualTokenKnockout(model, 1, keep):
            ko = model(**batch, output_attentions=True)
    for b in range(3):
        w = ko.attentions[1][b]                            # (heads, L, L)
        first_q = int(pos[b, -1]) + 1
        dropped = pos[b][~keep[b]]
        assert w[:, first_q:, dropped].abs().max() == 0
        ref = base.attentions[1][b, :, first_q:].clone()
        ref[..., dropped] = 0
        ref = ref / ref.sum(-1, keepdim=True)
        assert torch.allclose(w[:, first_q:], ref, atol=1e-6)
        # image tokens and text before the image keep their attention at the knockout layer
        assert torch.allclose(w[:, :first_q], base.attentions[1][b, :, :first_q], atol=1e-6)
    assert torch.allclose(ko.attentions[0], base.attentions[0])   # earlier layer untouched
    assert not torch.allclose(ko.logits, base.logits)
    # the hooks are gone after the block
    with torch.no_grad():
        again = model(**batch)
    assert torch.equal(again.logits, base.logits)


def test_knockout_reductions(vlm):
    model, _, _, batch = vlm
    with torch.no_grad():
        base = model(**batch).logits
        with VisualTokenKnockout(model, 1, torch.ones(3, 4, dtype=torch.bool)):
            ones = model(**batch).logits
        with VisualTokenKnockout(model, 1, None):
            none = model(**batch).logits
        maps = visual_attention(model, batch)
        with VGRefine(model, torch.zeros(0, 2), layer=1).apply(batch):
            k0 = model(**batch).logits
    assert torch.equal(ones, base) and torch.equal(none, base) and torch.equal(k0, base)
    heads = select_grounding_heads(maps, torch.ones(3, 4), k=2)
    ref = VGRefine(model, heads, layer=2)
    assert torch.equal(ref.mask(batch), relevance_mask(maps, heads, 50))


def test_knockout_generate_with_cache(vlm):
    model, _, _, batch = vlm
    keep = torch.zeros(3, 4, dtype=torch.bool)
    keep[:, 1] = True
    with torch.no_grad(), VisualTokenKnockout(model, 1, keep):
        g1 = model.generate(**batch, max_new_tokens=4, do_sample=False, use_cache=True)
        g2 = model.generate(**batch, max_new_tokens=4, do_sample=False, use_cache=False)
    assert torch.equal(g1, g2)


def test_rejects_bad_input(vlm):
    model, _, _, batch = vlm
    with pytest.raises(ValueError, match="non-finite"):
        grounding_metrics(torch.tensor([float("nan"), 1.0]), torch.tensor([1.0, 0.0]))
    with pytest.raises(ValueError, match="non-negative"):
        grounding_metrics(torch.tensor([-1.0, 1.0]), torch.tensor([1.0, 0.0]))
    with pytest.raises(ValueError, match="mask is empty"):
        grounding_metrics(torch.tensor([1.0, 1.0]), torch.tensor([0.0, 0.0]))
    with pytest.raises(ValueError, match="mask must lie"):
        grounding_metrics(torch.tensor([1.0, 1.0]), torch.tensor([2.0, 0.0]))
    with pytest.raises(ValueError, match="do not broadcast"):
        grounding_metrics(torch.ones(3), torch.ones(4))
    with pytest.raises(TypeError, match="attention"):
        grounding_metrics([1.0, 2.0], torch.ones(2))
    with pytest.raises(ValueError, match="k must be"):
        select_grounding_heads(torch.ones(2, 1, 2, 4), torch.ones(2, 4), k=-1)
    with pytest.raises(ValueError, match="exceeds"):
        select_grounding_heads(torch.ones(2, 1, 2, 4), torch.ones(2, 4), k=3)
    with pytest.raises(ValueError, match="masks must be"):
        head_kl(torch.ones(2, 1, 2, 4), torch.ones(3, 4))
    with pytest.raises(ValueError, match="percentile"):
        relevance_mask(torch.ones(1, 1, 1, 4), [[0, 0]], 100)
    with pytest.raises(ValueError, match="heads out of range"):
        relevance_mask(torch.ones(1, 1, 1, 4), [[0, 5]], 50)
    with pytest.raises(ValueError, match="layer must be"):
        VisualTokenKnockout(model, 7)
    with pytest.raises(ValueError, match="keep must be"):
        VisualTokenKnockout(model, 0, torch.ones(3, 4))
    with pytest.raises(ValueError, match="keep has shape"):
        with torch.no_grad(), VisualTokenKnockout(model, 0, torch.ones(2, 4, dtype=torch.bool)):
            model(**batch)
    with pytest.raises(ValueError, match="grid must be"):
        box_token_mask((0, 0, 4, 4), 64, 5)
    with pytest.raises(ValueError, match="box must be"):
        box_token_mask((4, 0, 4, 4), 64, 4)
    with pytest.raises(ValueError, match="k must be"):
        random_heads(2, 2, 5)


def test_smoke_experiment_deterministic():
    from iclr26.interpretability.vgrefine.experiment import run

    r1, r2 = run("smoke", 0), run("smoke", 0)
    assert r1["metrics"] == r2["metrics"]
    c = r1["metrics"]["correct"]
    assert len({len(v) for v in c.values()}) == 1
    assert set(r1["metrics"]) >= {"correct", "changed", "ar", "kl", "js", "kl_after_layer"}
