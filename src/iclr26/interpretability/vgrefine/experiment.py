"""VGRefine on the tiny VLM: grounding heads chosen on clean procedural scenes ("natural"), the fix
applied to a shifted domain (the same scenes at low contrast on a grey, speckled background: a
"medical-like" shift), against the plain model and two controls (random heads, a random mask of the
same sparsity).

Per item (one rendered scene, seen clean and shifted): colour answered right or not for each arm
(the answer is the colour word with the highest next-token logit among the six), and the grounding
diagnostics (attention ratio, KL, JS of the selected heads' last-token attention vs the box mask).
Items are paired by position across arms. This module measures; it decides nothing.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from iclr26.common.seeding import seed_everything
from iclr26.data.vision_tasks import COLOURS, render_scene

from .grounding import DEFAULT_K, box_token_mask, grounding_metrics, head_kl, random_heads, select_grounding_heads
from .knockout import (DEFAULT_PERCENTILE, VisualTokenKnockout, keep_count, paper_layer, random_keep_mask,
                       relevance_mask, visual_attention)

QUESTION = "What colour is the shape?"       # the tiny VLM's colour question (iclr26.data.vision_tasks)

SCALES = {
    # every code path in seconds, on a tiny random VLM (never trained)
    "smoke": dict(model="random", image_size=32, n_select=8, n_eval=8, k=4, percentile=DEFAULT_PERCENTILE,
                  layer=0, n_val=0, layer_grid=(), batch=8, contrast=0.75, noise=10.0),
    # the CPU claim check: the trained tiny VLM (seed 0), K = 20 heads, median mask; the knockout
    # layer chosen on a validation stream of shifted scenes from every third layer (the paper's
    # relative depth, layer 15 of 30, included), and used by every knockout arm
    "quick": dict(model="tiny-vlm", image_size=64, n_select=160, n_eval=640, k=DEFAULT_K,
                  percentile=DEFAULT_PERCENTILE, layer="validate", n_val=64, layer_grid=(0, 3, 6, 9, 12, 15, 18, 21, 24, 27),
                  batch=16, contrast=0.75, noise=10.0),
    # the paper's setting (Sec. 5): a 7B medical MLLM (HuatuoGPT-Vision-7B), heads ranked on
    # box-annotated COCO questions, knockout at layer 16, evaluated on six Med-VQA benchmarks; needs
    # those models and data (not available offline), written down, not run
    "paper": dict(model="FreedomIntelligence/HuatuoGPT-Vision-7B", image_size=None, n_select=None, n_eval=None,
                  k=20, percentile=50.0, layer=16, n_val=0, layer_grid=(), batch=1, contrast=None, noise=None),
}
#: one trained model per trial; only tiny-vlm seed 0 is built here, so quick has one unit
SEEDS = {"smoke": 1, "quick": 1, "paper": 1}


def _load(cfg: dict, seed: int):
    if cfg["model"] == "random":
        from iclr26.models.vlm import random_vlm

        return random_vlm(seed, image_size=cfg["image_size"], text_layers=2)
    if cfg["model"] == "tiny-vlm":
        from iclr26.models.vlm import load_vlm
        from iclr26.models.vlm_train import is_built

        if not is_built(seed):
            raise RuntimeError(f"tiny-vlm seed {seed} is not built: run `iclr26 models prepare tiny-vlm:{seed}` "
                               "first (tens of CPU-minutes)")
        return load_vlm("tiny-vlm", seed=seed)
    from pathlib import Path

    if Path(cfg["model"]).expanduser().is_dir():                     # a local model folder (pilots)
        from iclr26.models.vlm import load_vlm

        return load_vlm(cfg["model"])
    raise RuntimeError(f"model {cfg['model']!r} is the paper's setting and is not available here")


def shift_image(image, rng: np.random.Generator, *, contrast: float, noise: float):
    """The shifted ("medical-like") rendering of a clean scene: pixels pulled towards a random grey
    level (``contrast`` kept of the original deviation) plus Gaussian speckle of std ``noise``."""
    from PIL import Image

    arr = np.asarray(image, dtype=np.float64)
    grey = float(rng.uniform(90, 150))
    out = grey + contrast * (arr - grey) + rng.normal(0, noise, size=arr.shape[:2] + (1,))
    return Image.fromarray(np.clip(out, 0, 255).astype(np.uint8), "RGB")


def make_scenes(n: int, seed: int, stream: int, cfg: dict):
    """``n`` items: (clean image, shifted image, colour, box), one object per scene."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, stream]))
    items = []
    for _ in range(n):
        sc = render_scene(rng, n_objects=1, size=cfg["image_size"])
        o = sc.objects[0]
        items.append((sc.image, shift_image(sc.image, rng, contrast=cfg["contrast"], noise=cfg["noise"]),
                      o.colour, o.box))
    return items


def answer_tokens(tokenizer, answers) -> tuple[str, list[int]]:
    """``(prefix, ids)``: the shared leading text of the answers (" " + word) and the first token of
    each after it; the ids must be distinct (else the first-token scoring would be ambiguous)."""
    seqs = [tokenizer(" " + a, add_special_tokens=False)["input_ids"] for a in answers]
    j = 0
    while len({s[j] for s in seqs}) == 1:
        j += 1
    ids = [s[j] for s in seqs]
    if len(set(ids)) != len(ids):
        raise RuntimeError(f"answers {answers} share a first token after their common prefix")
    prefix = tokenizer.decode(seqs[0][:j]) if j else ""
    return prefix, ids


def _batch(processor, images, prefix: str):
    from iclr26.models.vlm import chat_prompt

    tok = processor.tokenizer
    tok.padding_side = "left"
    texts = [chat_prompt(processor, QUESTION, 1) + prefix for _ in images]
    return processor(text=texts, images=[[im] for im in images], return_tensors="pt", padding=True)


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    seed_everything(seed)
    torch.set_num_threads(1)
    t0 = time.process_time()
    model, processor = _load(cfg, seed)
    colours = list(COLOURS)
    prefix, ids = answer_tokens(processor.tokenizer, colours)
    tcfg = getattr(model.config, "text_config", model.config)
    n_layers, n_heads = int(tcfg.num_hidden_layers), int(tcfg.num_attention_heads)
    gen = torch.Generator().manual_seed(10_000 + seed)

    def correct(out, chunk):
        pred = out.logits[:, -1, ids].argmax(-1)
        return [float(colours[int(p)] == c[2]) for p, c in zip(pred, chunk)]

    def masks_for(items):
        n_tok = None
        out = []
        for *_, box in items:
            m = box_token_mask(box, cfg["image_size"], _grid(model, cfg))
            n_tok = m.numel()
            out.append(m)
        return torch.stack(out), n_tok

    # step 1: rank heads on clean scenes (their own stream, never the evaluation items)
    sel = make_scenes(cfg["n_select"], seed, 1, cfg)
    sel_maps = []
    for i in range(0, len(sel), cfg["batch"]):
        chunk = sel[i:i + cfg["batch"]]
        sel_maps.append(visual_attention(model, _batch(processor, [c[0] for c in chunk], prefix)))
    sel_maps = torch.cat(sel_maps)
    sel_masks, n_tok = masks_for(sel)
    scores = head_kl(sel_maps, sel_masks)
    heads = select_grounding_heads(sel_maps, sel_masks, cfg["k"])
    rand_heads = random_heads(n_layers, n_heads, cfg["k"], generator=gen)
    n_keep = keep_count(n_tok, cfg["percentile"])

    # the knockout layer: fixed, or the best of layer_grid for VGRefine on a validation stream of
    # shifted scenes (stream 3; never the evaluation items); every knockout arm uses it
    val_acc = {}
    if cfg["layer"] == "validate":
        val = make_scenes(cfg["n_val"], seed, 3, cfg)
        for i in range(0, len(val), cfg["batch"]):
            chunk = val[i:i + cfg["batch"]]
            bv = _batch(processor, [c[1] for c in chunk], prefix)
            keep = relevance_mask(visual_attention(model, bv), heads, cfg["percentile"])
            for cand in cfg["layer_grid"]:
                with torch.no_grad(), VisualTokenKnockout(model, cand, keep):
                    val_acc.setdefault(cand, []).extend(correct(model(**bv), chunk))
        val_acc = {c: float(np.mean(v)) for c, v in val_acc.items()}
        layer = max(cfg["layer_grid"], key=lambda c: (val_acc[c], -abs(c - paper_layer(n_layers))))
    else:
        layer = paper_layer(n_layers) if cfg["layer"] is None else int(cfg["layer"])
    late = [(l, h) for l in range(layer + 1, n_layers) for h in range(n_heads)]
    late_idx = torch.tensor(late, dtype=torch.long).reshape(-1, 2)

    ev = make_scenes(cfg["n_eval"], seed, 2, cfg)
    ev_masks, _ = masks_for(ev)
    rec = {k: [] for k in ("natural", "shifted", "vgrefine", "random_heads", "random_mask")}
    changed = []
    diag = {f"{m}_{d}": [] for m in ("ar", "kl", "js") for d in ("natural", "shifted", "uniform")}
    late_kl = {"shifted": [], "vgrefine": []}
    kept_in_box = []

    def heads_metrics(maps, masks, hs):
        a = maps[:, hs[:, 0], hs[:, 1], :]                               # (B, K, N)
        g = grounding_metrics(a, masks[:, None, :])
        return {k: v.mean(1) for k, v in g.items()}

    for i in range(0, len(ev), cfg["batch"]):
        chunk = ev[i:i + cfg["batch"]]
        bm = ev_masks[i:i + cfg["batch"]]
        bn = _batch(processor, [c[0] for c in chunk], prefix)
        bs = _batch(processor, [c[1] for c in chunk], prefix)
        maps_n, out_n = visual_attention(model, bn, return_output=True)
        maps_s, out_s = visual_attention(model, bs, return_output=True)
        rec["natural"] += correct(out_n, chunk)
        rec["shifted"] += correct(out_s, chunk)
        gn, gs = heads_metrics(maps_n, bm, heads), heads_metrics(maps_s, bm, heads)
        gu = grounding_metrics(torch.ones_like(bm), bm)
        for m in ("ar", "kl", "js"):
            diag[f"{m}_natural"] += gn[m].tolist()
            diag[f"{m}_shifted"] += gs[m].tolist()
            diag[f"{m}_uniform"] += gu[m].tolist()
        keep = relevance_mask(maps_s, heads, cfg["percentile"])
        kept_in_box += ((keep & (bm > 0)).sum(1).float() / (bm > 0).sum(1).float()).tolist()
        arms = {"vgrefine": keep,
                "random_heads": relevance_mask(maps_s, rand_heads, cfg["percentile"]),
                "random_mask": random_keep_mask(len(chunk), n_tok, n_keep, generator=gen)}
        for arm, km in arms.items():
            with torch.no_grad(), VisualTokenKnockout(model, layer, km):
                if arm == "vgrefine" and len(late_idx):
                    maps_k, out = visual_attention(model, bs, return_output=True)
                    late_kl["vgrefine"] += heads_metrics(maps_k, bm, late_idx)["kl"].tolist()
                else:
                    out = model(**bs)
            rec[arm] += correct(out, chunk)
            if arm == "vgrefine":
                changed += (out.logits[:, -1, ids].argmax(-1) != out_s.logits[:, -1, ids].argmax(-1)).float().tolist()
        if len(late_idx):
            late_kl["shifted"] += heads_metrics(maps_s, bm, late_idx)["kl"].tolist()

    metrics = {
        "correct": rec,
        "changed": {"vgrefine": changed},
        "ar": {"natural": diag["ar_natural"], "shifted": diag["ar_shifted"], "uniform": diag["ar_uniform"]},
        "kl": {"natural": diag["kl_natural"], "shifted": diag["kl_shifted"], "uniform": diag["kl_uniform"]},
        "js": {"natural": diag["js_natural"], "shifted": diag["js_shifted"], "uniform": diag["js_uniform"]},
    }
    if late_kl["vgrefine"]:
        metrics["kl_after_layer"] = late_kl
    acc = {k: float(np.mean(v)) for k, v in rec.items()}
    info = {"accuracy": acc, "chance": 1 / len(colours), "layer": layer, "validation_accuracy_by_layer": {str(k): v for k, v in val_acc.items()}, "k": cfg["k"], "n_tokens": n_tok,
            "n_keep": n_keep, "heads": heads.tolist(), "random_heads": rand_heads.tolist(),
            "head_kl_best": [float(scores[l, h]) for l, h in heads.tolist()],
            "head_kl_median": float(scores.median()), "box_tokens_kept": float(np.mean(kept_in_box)),
            "cpu_s": time.process_time() - t0}
    return {"metrics": metrics, "info": info}


def _grid(model, cfg: dict) -> int:
    vc = model.config.vision_config
    return int(cfg["image_size"] // vc.patch_size // model.config.scale_factor)
