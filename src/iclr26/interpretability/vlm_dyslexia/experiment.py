"""VWF-unit ablation vs random-unit ablation in a SmolVLM-class model (arXiv 2509.24597).

One trial ``seed`` is one trained VLM: ``tiny-vlm`` seed ``seed`` (:mod:`iclr26.models.vlm`), whose
connector and LoRA adapters (merged into the text model, among them ``gate_proj``/``up_proj``/
``down_proj`` of every block) were trained from that seed on one shared, frozen vision tower. The
units localised and ablated are the text model's ``mlp.gate_proj`` outputs (the official choice),
so each seed has its own units: the seed is the unit of replication. Items answered by one seed are
one cluster. Units of the shared tower would be one model for every seed, and new localiser or
evaluation stimuli drawn for the same model are not new models.

Per trial:

1. localiser: ``n_localiser`` images each of words, false-font strings, 8x8-block-scrambled words
   and shape scenes (:func:`iclr26.data.vision_tasks.localiser_stimuli`, drawn from the trial seed),
   prompt "Describe the image." (official ``extract_activations.py``); words vs the pooled three
   controls, Welch t per unit, the top ``fraction`` of all gate units (official 21 %);
2. evaluation on held-out test items (:func:`iclr26.data.vision_tasks.make_items`, split ``test``):
   reading (``read``, lexicon words), colour, shape and position, scored by :func:`.scoring.greedy_exact`;
3. arms: ``intact``; ``vwf`` (the localised units zeroed); ``random`` (as many units drawn
   uniformly over all gate units, the paper's control; ``n_random`` draws, the per-item score is
   the mean over draws); ``random_layer`` (as many units per layer as the VWF mask, drawn at random
   in each layer: a control for where the VWF units sit, ``n_random`` draws).

Metrics (per item, arms paired by position): ``read``, ``colour``, ``shape``, ``position``; per
seed: ``drop`` with arms ``read`` (intact - vwf reading accuracy) and ``other`` (the mean of the
same drop over colour, shape and position). ``info`` holds the selected-unit count per layer, the
median t of the selected units and the accuracies.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from iclr26.common.seeding import seed_everything
from iclr26.data import vision_tasks as vt

from .ablation import UnitAblation
from .localiser import OFFICIAL_FRACTION, gate_proj_modules, localise_units, random_unit_masks
from .scoring import greedy_exact

#: localiser categories: the target and the controls (official: words vs faces, line drawings and
#: scrambled words; faces are not available offline, false fonts are the classic VWFA control)
TARGET = "words"
CONTROLS = ("false_font", "scrambled", "shapes")
PROMPT = "Describe the image."          # official extract_activations.py
TASKS = ("read", "colour", "shape", "position")
OTHER = ("colour", "shape", "position")

SCALES = {
    # seconds: a tiny randomly initialised model of the same class (never the trained one)
    "smoke": dict(model="random", n_localiser=4, n_eval={"read": 4, "colour": 3, "shape": 3, "position": 3},
                  n_random=1, fraction=OFFICIAL_FRACTION, batch=8),
    # the CPU claim check on the bundled tiny VLM (needs `iclr26 models prepare tiny-vlm:<seed>`)
    # (measured: 78 CPU-s per trial with 24 localiser images per category and 120 items, on an
    # untrained model of the same size; this setting measured 114 CPU-s per trial)
    "quick": dict(model="tiny-vlm", n_localiser=48, n_eval={"read": 80, "colour": 32, "shape": 32, "position": 32},
                  n_random=2, fraction=OFFICIAL_FRACTION, batch=16),
    # the paper's setting (official scripts): Qwen2-VL-72B, 72 images per localiser category,
    # 21 % of gate units, 100 ROAR items; not runnable here (no hub, no GPU)
    "paper": dict(model="Qwen/Qwen2-VL-72B-Instruct", n_localiser=72, n_eval={"read": 100, "colour": 100, "shape": 100,
                  "position": 100}, n_random=5, fraction=OFFICIAL_FRACTION, batch=1),
}
SEEDS = {"smoke": 1, "quick": 5, "paper": 5}


def _load(cfg: dict, seed: int):
    name = cfg["model"]
    if name == "random":
        from iclr26.models.vlm import random_vlm

        return random_vlm(seed, image_size=32, text_layers=2)
    if name == "tiny-vlm":
        from iclr26.models.vlm import load_vlm
        from iclr26.models.vlm_train import is_built

        if not is_built(seed):
            raise RuntimeError(
                f"tiny-vlm seed {seed} is not built: run `iclr26 models prepare tiny-vlm:{seed}` first "
                f"(about 45 CPU-minutes for seed 0 with the tower, about 28 for each further seed)")
        return load_vlm("tiny-vlm", seed=seed)
    from iclr26.models.vlm import load_vlm

    return load_vlm(name)


def _batches(processor, images, batch: int):
    from iclr26.models.vlm import vlm_inputs

    for i in range(0, len(images), batch):
        ims = images[i:i + batch]
        yield vlm_inputs(processor, [[im] for im in ims], [PROMPT] * len(ims))


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    seed_everything(seed)
    torch.set_num_threads(1)
    t0 = time.process_time()
    model, processor = _load(cfg, seed)
    model.eval()
    modules = gate_proj_modules(model)

    stim = {}
    for cat in (TARGET,) + CONTROLS:
        images, _ = vt.localiser_stimuli(cat, cfg["n_localiser"], seed=seed)
        stim[cat] = list(_batches(processor, images, cfg["batch"]))
    loc = localise_units(model, modules, stim, TARGET, fraction=cfg["fraction"])
    t_loc = time.process_time() - t0

    items = {task: vt.make_items(task, cfg["n_eval"][task], seed=seed, split="test") for task in TASKS}

    def score(masks=None):
        out = {}
        for task in TASKS:
            if masks is None:
                out[task] = greedy_exact(model, processor, items[task], batch_size=cfg["batch"])
            else:
                with UnitAblation(model, masks):
                    out[task] = greedy_exact(model, processor, items[task], batch_size=cfg["batch"])
        return out

    res = {"intact": score(), "vwf": score(loc)}
    for arm, match in (("random", "total"), ("random_layer", "module")):
        draws = [score(random_unit_masks(loc, seed=1000 * (seed + 1) + 17 * d + (match == "module"), match=match))
                 for d in range(cfg["n_random"])]
        res[arm] = {task: [float(np.mean([dr[task][i] for dr in draws])) for i in range(len(items[task]))]
                    for task in TASKS}

    metrics = {task: {arm: [float(v) for v in res[arm][task]] for arm in res} for task in TASKS}
    acc = {arm: {task: float(np.mean(res[arm][task])) for task in TASKS} for arm in res}
    drop_read = acc["intact"]["read"] - acc["vwf"]["read"]
    drop_other = float(np.mean([acc["intact"][t] - acc["vwf"][t] for t in OTHER]))
    metrics["drop"] = {"read": drop_read, "other": drop_other}
    sel_t = torch.cat([loc.tstats[n][loc.masks[n]] for n in loc.masks])
    info = dict(
        accuracy=acc, n_units=loc.n_units, k=loc.k,
        selected_per_layer={n.split(".layers.")[-1].split(".")[0]: c for n, c in loc.counts().items()},
        selected_t_median=float(sel_t.median()), selected_t_min=float(sel_t.min()),
        share_selected_p_below_0_05=float(torch.cat([loc.pvalues[n][loc.masks[n]] for n in loc.masks]).lt(0.05).float().mean()),
        chance={t: vt.chance_level(t) for t in TASKS},
        cpu_s_localiser=t_loc, cpu_s_total=time.process_time() - t0,
    )
    return {"metrics": metrics, "info": info}
