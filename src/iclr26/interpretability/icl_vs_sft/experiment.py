"""ICL vs SFT claim check (ICLR 2026, OpenReview cJAtzOcAnd; Sec. 2-4 of the paper).

One unit (seed) = one independent draw of the exemplar set (``k`` per class, random order), of the
validation points, and of the LoRA initialisation, on one angle task. In each unit:
* ICL: the base model prompted with the exemplars; its accuracy on the validation points is the
  target of the fine-tuning run (matched accuracy by design, chosen on validation, never on test);
* SFT: a fresh LoRA adapter on the same base model, trained on the same exemplars without a prompt
  (:func:`finetune_to_accuracy`), stopped at the first step whose validation accuracy reaches ICL's;
* control (``base``): the untrained model on the bare queries (no prompt, no training), for the
  representational claim: it separates what fine-tuning does from what dropping the prompt does;
* the test set is the decision field on a sub-grid (every ``stride``-th value) that no exemplar or
  validation point touches; per arm: accuracy, confidence (mean max-softmax over the two labels),
  smoothness, and the label-collapse index of the last-token residual stream averaged over the
  middle third of the blocks (:func:`label_collapse_index`, true labels of the test inputs).
Every arm of a unit sees the same inputs; one value per arm and unit.
"""
from __future__ import annotations

import gc

import numpy as np

from iclr26.common.seeding import seed_everything

SCALES = {
    "smoke": dict(model="tiny", labels=("X", "Y"), theta=90.0, k=3, n_val=6, stride=50, offset=25, layers=(1,),
                  lora_r=4, lr=1e-2, max_steps=2),
    # SmolLM2-135M-Instruct has 30 blocks; "mid layers" = blocks 10..19. Labels " Bar"/" Rud": see README
    # (" Baz" splits into " B" + "az" in this tokenizer). theta = 90: boundary on n1.
    "quick": dict(model="smollm2-135m", labels=(" Bar", " Rud"), theta=90.0, k=16, n_val=40, stride=12, offset=6,
                  layers=tuple(range(10, 20)), lora_r=8, lr=5e-4, max_steps=40),
    # the paper: Llama-3-8B (also Qwen3-8B, Gemma-3), K up to 128+ per class, full 100 x 100 grid,
    # theta in {0, 30, 45, 60, 90}, full fine-tuning (LoRA as a variant), all blocks
    "paper": dict(model="meta-llama/Meta-Llama-3-8B", labels=(" Baz", " Rud"), theta=45.0, k=128, n_val=200,
                  stride=1, offset=0, layers=tuple(range(32)), lora_r=8, lr=1e-4, max_steps=500),
}
SEEDS = {"smoke": 1, "quick": 6, "paper": 5}
ARMS = ("icl", "sft")


def _model(cfg):
    import torch

    if cfg["model"] == "tiny":
        from iclr26.models import SimpleTokenizer, TinyLMConfig, build_tiny_lm
        from iclr26.models.testing import widen_

        tok = SimpleTokenizer.from_texts(["Input: 0123456789\nLabel:" + "".join(cfg["labels"])], level="char")
        torch.manual_seed(0)
        model = widen_(build_tiny_lm(TinyLMConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2),
                                     len(tok)), std=0.3).eval()
        return model, tok
    from iclr26.models import load

    return load(cfg["model"], dtype="float32")


def run(scale: str, seed: int) -> dict:
    import torch

    from iclr26.interpretability.icl_vs_sft import (angle_labels, decision_field, field_metrics,
                                                    finetune_to_accuracy, format_query, icl_context,
                                                    label_collapse_index, make_angle_task, score_queries)
    from iclr26.models.lora import with_lora

    cfg = SCALES[scale]
    rng = seed_everything(seed)
    torch.set_num_threads(1)
    theta, labels, layers = cfg["theta"], cfg["labels"], cfg["layers"]
    coords = np.arange(cfg["offset"], 100, cfg["stride"])
    n1, n2 = np.meshgrid(coords, coords, indexing="ij")
    test_x = np.stack([n1.ravel(), n2.ravel()], 1)
    test_y = angle_labels(test_x, theta)
    X_val, y_val = make_angle_task(theta, cfg["n_val"] // 2, rng, exclude=test_x)
    X_tr, y_tr = make_angle_task(theta, cfg["k"], rng, exclude=np.concatenate([test_x, X_val]))

    model, tok = _model(cfg)
    ctx = icl_context(X_tr, y_tr, labels)
    val_q = [format_query(x) for x in X_val]
    icl_val = float(np.mean((score_queries(model, tok, val_q, context=ctx, labels=labels).prob > 0.5) == y_val))
    kw = dict(stride=cfg["stride"], offset=cfg["offset"], labels=labels, layers=layers)
    fields = {"icl": decision_field(model, tok, context=ctx, **kw), "base": decision_field(model, tok, **kw)}
    peft = with_lora(model, r=cfg["lora_r"], seed=seed)
    ft = finetune_to_accuracy(peft, tok, X_tr, y_tr, X_val, y_val, icl_val, max_steps=cfg["max_steps"],
                              lr=cfg["lr"], labels=labels, seed=seed)
    fields["sft"] = decision_field(peft, tok, **kw)

    fm = {a: field_metrics(f.prob, f.coords, theta) for a, f in fields.items()}
    collapse = {a: [label_collapse_index(f.reps[l], test_y) for l in layers] for a, f in fields.items()}
    del model, peft
    gc.collect()
    arms = ("icl", "sft", "base")
    return {
        "metrics": {
            "accuracy": {a: fm[a]["accuracy"] for a in arms},
            "confidence": {a: fm[a]["confidence"] for a in arms},
            "smoothness": {a: fm[a]["smoothness"] for a in arms},
            "collapse_mid": {a: float(np.mean(collapse[a])) for a in arms},
        },
        "info": {
            "icl_val_accuracy": icl_val, "sft_val_accuracy": ft["val_accuracy"], "sft_steps": ft["steps"],
            "sft_reached": ft["reached"], "sft_history": ft["history"],
            "collapse_by_layer": {a: dict(zip(map(str, layers), map(float, v))) for a, v in collapse.items()},
            "angle": {a: (None if np.isnan(fm[a]["angle"]) else fm[a]["angle"]) for a in arms}, "theta": theta, "k_per_class": cfg["k"],
            "fields": {a: f.prob.round(4).tolist() for a, f in fields.items()},
        },
    }
