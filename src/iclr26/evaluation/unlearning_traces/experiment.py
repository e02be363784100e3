"""Claim checks for arXiv:2506.14003 (unlearning-trace detection) with SmolLM2-135M-Instruct.

One trial (seed) is one independent replication of the whole pipeline:

1. draw ``n_people`` fictitious people (:func:`.make_people`, seeded by the trial) and split off a
   forget set of ``n_forget`` of them; the rest is the retain set;
2. fine-tune SmolLM2-135M-Instruct with LoRA (TRL ``SFTTrainer``) on the question/answer pairs of all
   people, and merge the adapter: this is the trial's *original* model; forget/retain QA accuracy is
   measured for the base model and the original model (so there is knowledge to unlearn);
3. unlearn the forget set from the original model twice: NPO (+ retain NLL) with a fresh LoRA, and
   RMU on the ``down_proj`` weights of layers 5-7 (:class:`.UnlearningTrainer`); and, as the control
   arm, update it once more with NPO's LoRA, data stream and budget but the retain NLL alone (a benign
   continued fine-tune, ``method="retain"``); QA accuracy again;
4. each of the four models answers the same prompts greedily: ``n_irr_train + n_irr_test``
   forget-irrelevant everyday questions and the forget set's own questions;
5. per updated model, two detectors (original = 0, updated = 1) are trained on the responses to
   the training prompts (the irrelevant training questions plus the forget questions: the paper's
   mixed training set) and scored on the responses to the held-out irrelevant questions (never seen
   in training): text (TF-IDF + logistic regression) and activations (mean pre-logit state + logistic
   regression).

Unit of replication: the trial. Each trial has its own people, its own fine-tuned original model and
its own two unlearned models, so the per-trial detection accuracy (over held-out prompts of that one
model pair) is one value; claims pair these values over seeds. No prompt is in both the training and
the test split of a detector; nothing is tuned on the test prompts.
"""
from __future__ import annotations

import copy
import tempfile
import time

import numpy as np
import torch

from iclr26.common.seeding import seed_everything

from .biographies import answer_is_correct, irrelevant_prompts, make_people, person_examples
from .detector import activation_detector, detection_accuracy, prelogit_activations, text_detector
from .unlearning import (NPO_BETA, RMU_ALPHA, RMU_COEFF, RMU_LAYER, UnlearningTrainer, control_vector,
                         rmu_parameters, unlearning_rows)

MODEL = "smollm2-135m"
ARMS = ("original", "npo", "rmu", "retain")
UNLEARNED = ("npo", "rmu")

_COMMON = dict(lora_r=16, ft_lr=5e-3, npo_lr=3e-3, npo_beta=NPO_BETA, retain_weight=1.0, rmu_layer=RMU_LAYER,
               rmu_coeff=RMU_COEFF, rmu_alpha=RMU_ALPHA, rmu_lr=5e-3, max_new_tokens=12, qa_tokens=16, n_retain_eval=12)
SCALES = {
    # seconds: every code path once
    "smoke": dict(_COMMON, n_people=3, n_forget=1, ft_steps=1, ft_batch=4, unlearn_steps=1, unlearn_batch=2,
                  n_irr_train=4, n_irr_test=4, max_new_tokens=4, qa_tokens=4),
    # the CPU claim check (sized by the power estimate in the README)
    "quick": dict(_COMMON, n_people=12, n_forget=4, ft_steps=24, ft_batch=8, unlearn_steps=8, unlearn_batch=4,
                  n_irr_train=30, n_irr_test=30),
    # the paper's scale (Sec. 4: Llama-3.1-8B / Zephyr-7B on WMDP, MMLU, UltraChat), written down, not run
    "paper": dict(_COMMON, n_retain_eval=400, n_people=200, n_forget=40, ft_steps=2000, ft_batch=32, unlearn_steps=500,
                  unlearn_batch=16, n_irr_train=2000, n_irr_test=1000, max_new_tokens=256, qa_tokens=32),
}
SEEDS = {"smoke": 1, "quick": 5, "paper": 5}


def chat(question: str) -> str:
    """SmolLM2's chat format for one user turn, without the default system message."""
    return f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"


def _qa(people):
    return [dict(e, prompt=chat(e["prompt"]), answer=e["answer"] + "<|im_end|>") for p in people
            for e in person_examples(p)]


def qa_accuracy(model, tok, examples, max_new_tokens, cached=False) -> float:
    """Share of questions whose greedy answer contains the person's fact."""
    from iclr26.models.generation import generate
    from iclr26.models.generation_cache import generate_cached
    gen = generate_cached if cached else generate
    outs = gen(model, tok, [e["prompt"] for e in examples], max_new_tokens, batch_size=64)
    return float(np.mean([answer_is_correct(o, e["fact"]) for o, e in zip(outs, examples)]))


def finetune(base, tok, examples, cfg, seed):
    """LoRA fine-tune with TRL's SFTTrainer on prompt/completion pairs; return the merged model."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from iclr26.models.lora import trl_args, with_lora
    model = with_lora(base, r=cfg["lora_r"], seed=seed)
    ds = Dataset.from_list([dict(prompt=e["prompt"], completion=e["answer"]) for e in examples])
    with tempfile.TemporaryDirectory() as out:
        args = trl_args(SFTConfig, out, max_steps=cfg["ft_steps"], learning_rate=cfg["ft_lr"],
                        per_device_train_batch_size=cfg["ft_batch"], seed=seed, logging_steps=10 ** 6,
                        completion_only_loss=True, lr_scheduler_type="constant", gradient_checkpointing=False)
        SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tok).train()
    return _unwrap(model.merge_and_unload()).eval()


def _unwrap(model):
    """Drop the forward wrapper the Trainer's accelerator leaves in the instance dict (a deep copy
    would otherwise keep calling the original object's forward)."""
    model.__dict__.pop("forward", None)
    return model


def unlearn(original, tok, forget, retain, method, cfg, seed):
    """NPO (fresh LoRA, merged after), the retain-only control (the same LoRA and data stream, retain NLL
    alone) or RMU (down_proj of layers l-2..l) applied to a copy of ``original``."""
    from transformers import TrainingArguments

    from iclr26.models.lora import trl_args, with_lora
    model = copy.deepcopy(original)
    if method in ("npo", "retain"):
        for p in model.parameters():
            p.requires_grad_(False)
        model = with_lora(model, r=cfg["lora_r"], seed=seed)
        kw = dict(beta=cfg["npo_beta"], retain_weight=cfg["retain_weight"])
        lr = cfg["npo_lr"]
    else:
        rmu_parameters(model, cfg["rmu_layer"])
        g = torch.Generator().manual_seed(seed)
        kw = dict(frozen_model=original, layer=cfg["rmu_layer"], alpha=cfg["rmu_alpha"],
                  control=control_vector(model.config.hidden_size, cfg["rmu_coeff"], g))
        lr = cfg["rmu_lr"]
    rows = unlearning_rows(tok, forget, retain, cfg["unlearn_steps"] * cfg["unlearn_batch"])
    with tempfile.TemporaryDirectory() as out:
        args = trl_args(TrainingArguments, out, max_steps=cfg["unlearn_steps"], learning_rate=lr,
                        per_device_train_batch_size=cfg["unlearn_batch"], seed=seed, logging_steps=10 ** 6,
                        remove_unused_columns=False, lr_scheduler_type="constant")
        model.train()
        UnlearningTrainer(model=model, args=args, train_dataset=rows, processing_class=tok, method=method,
                          **kw).train()
    if method in ("npo", "retain"):
        model = model.merge_and_unload()
    return _unwrap(model).eval()


def respond(model, tok, prompts, cfg, cached=False):
    """Greedy responses and their token ids (the original model's through the generation cache)."""
    from iclr26.models.generation import generate
    from iclr26.models.generation_cache import generate_cached
    gen = generate_cached if cached else generate
    return gen(model, tok, prompts, cfg["max_new_tokens"], batch_size=64, return_token_ids=True)


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    seed_everything(seed)
    torch.set_num_threads(1)
    import transformers

    from iclr26.models import load
    transformers.logging.set_verbosity_error()
    t0 = time.perf_counter()
    people = make_people(cfg["n_people"], seed=seed)
    forget, retain = _qa(people[: cfg["n_forget"]]), _qa(people[cfg["n_forget"]:])
    irr = [chat(q) for q in irrelevant_prompts(cfg["n_irr_train"] + cfg["n_irr_test"], seed=seed)]
    irr_train, irr_test = irr[: cfg["n_irr_train"]], irr[cfg["n_irr_train"]:]
    train_prompts = irr_train + [e["prompt"] for e in forget]

    base, tok = load(MODEL)
    base.eval()
    acc = {"forget": {}, "retain": {}}
    evals = (("forget", forget), ("retain", retain[: cfg["n_retain_eval"]]))
    for part, ex in evals:
        acc[part]["base"] = qa_accuracy(base, tok, ex, cfg["qa_tokens"], cached=True)
    original = finetune(base, tok, forget + retain, cfg, seed)
    for p in original.parameters():
        p.requires_grad_(False)
    models = {"original": original}
    secs = {"finetune": time.perf_counter() - t0}
    for m in ARMS[1:]:
        t = time.perf_counter()
        models[m] = unlearn(original, tok, forget, retain, m, cfg, seed)
        secs[m] = time.perf_counter() - t
    prompts = train_prompts + irr_test
    p_ids = [tok(p, add_special_tokens=False).input_ids for p in prompts]
    texts, feats = {}, {}
    t = time.perf_counter()
    for name, model in models.items():
        for part, ex in evals:
            acc[part][name] = qa_accuracy(model, tok, ex, cfg["qa_tokens"])
        texts[name], c_ids = respond(model, tok, prompts, cfg, cached=name == "original")
        feats[name] = prelogit_activations(model, p_ids, c_ids, pad_id=tok.pad_token_id)
    secs["respond"] = time.perf_counter() - t
    n_tr = len(train_prompts)
    y_tr, y_te = np.r_[np.zeros(n_tr), np.ones(n_tr)], np.r_[np.zeros(len(irr_test)), np.ones(len(irr_test))]
    metrics = {"forget_acc": acc["forget"], "retain_acc": acc["retain"]}
    info = {"identical_responses": {}, "examples": {}}
    by_arm = {"text_detect": {}, "activation_detect": {}}
    for m in ARMS[1:]:
        a, b = texts["original"], texts[m]
        text_acc = detection_accuracy(text_detector(), a[:n_tr] + b[:n_tr], y_tr, a[n_tr:] + b[n_tr:], y_te)
        act_acc = detection_accuracy(activation_detector(), np.r_[feats["original"][:n_tr], feats[m][:n_tr]], y_tr,
                                     np.r_[feats["original"][n_tr:], feats[m][n_tr:]], y_te)
        metrics[f"detect_{m}"] = {"text": text_acc, "activation": act_acc}
        by_arm["text_detect"][m], by_arm["activation_detect"][m] = text_acc, act_acc
        info["identical_responses"][m] = float(np.mean([x == y for x, y in zip(a[n_tr:], b[n_tr:])]))
        info["examples"][m] = [[prompts[n_tr], a[n_tr], b[n_tr]]]
    metrics.update(by_arm)
    info["seconds"] = {k: round(v, 1) for k, v in secs.items()}
    info["seconds"]["total"] = round(time.perf_counter() - t0, 1)
    del models, original, base
    return {"metrics": metrics, "info": info}
