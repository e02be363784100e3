"""Tests of GradPruner (arXiv:2601.19503): the simulated LoRA gradient (Eq. 1) against the true
full-weight gradient, the IGIA-Matrix and layer score (Eqs. 2-3), layer selection, IGIA
sparsification, the same-sign merge, layer removal (reduction to block dropping, save/load round
trip, KV-cache generation), the Block Influence baseline, and the experiment's task."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from iclr26.compression.gradpruner import (IGIA, KEEP, GradPrunerCallback, block_influence_scores,
                                           official_merge_layers, prune_layers, same_sign_merge, select_prune_layers,
                                           select_prune_run, simulated_gradients, sparsify)
from iclr26.models import hooks
from iclr26.models.lora import with_lora
from iclr26.models.testing import wide_llama


def _tiny(layers=4, seed=0):
    return wide_llama(num_layers=layers, seed=seed, scale=lambda i, part: {
        "q_proj": 0.6, "k_proj": 0.6, "o_proj": 0.15 * (1 + (3 * i) % 5)}.get(part, 0.35))


def _ids(seed=1, shape=(3, 10)):
    return torch.randint(0, 40, shape, generator=torch.Generator().manual_seed(seed))


def _lora_step(pm, ids):
    """One backward pass of a next-token loss."""
    out = pm(input_ids=ids, labels=ids)
    out.loss.backward()
    return out.loss


def _lora_model(seed=0, layers=3, r=2):
    """A LoRA model whose B factors are drawn non-zero, so that grad_A != 0 from the first step."""
    pm = with_lora(_tiny(layers, seed), r=r, seed=seed)
    g = torch.Generator().manual_seed(seed + 7)
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_B" in n:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
    return pm


# ---------------------------------------------------------------- Eq. (1): simulated gradient
def test_simulated_gradient_matches_chain_rule_reference():
    """grad_A = s B^T G and grad_B = s G A^T with G = dL/dW, so grad_B @ grad_A = s^2 G A^T B^T G."""
    pm = _lora_model()
    ids = _ids()
    base_w = {}
    for i, layer in enumerate(hooks.decoder_layers(pm.get_base_model())):
        for name, mod in layer.named_modules():
            if hasattr(mod, "lora_A") and isinstance(mod.lora_A, torch.nn.ModuleDict) and "default" in mod.lora_A:
                mod.base_layer.weight.requires_grad_(True)
                base_w[(i, name)] = mod
    _lora_step(pm, ids)
    sims = simulated_gradients(pm)
    assert set(sims) == set(base_w)
    assert (0, "self_attn.q_proj") in sims and (2, "mlp.down_proj") in sims
    for key, mod in base_w.items():
        G = mod.base_layer.weight.grad.double()
        A, B = mod.lora_A["default"].weight.double(), mod.lora_B["default"].weight.double()
        s = mod.scaling["default"]
        ref = (s * G @ A.T) @ (s * B.T @ G)
        assert sims[key].shape == mod.base_layer.weight.shape
        torch.testing.assert_close(sims[key].double(), ref, rtol=1e-3, atol=1e-5 * float(ref.abs().max()))
        assert ref.abs().max() > 0


def test_simulated_gradient_zero_at_lora_init():
    """At LoRA's init B = 0, so grad_A = 0 and the simulated gradient vanishes (why warm-up needs
    more than one step)."""
    pm = with_lora(_tiny(2), r=2, seed=0)
    _lora_step(pm, _ids())
    for v in simulated_gradients(pm).values():
        assert torch.count_nonzero(v) == 0


def test_simulated_gradient_rejections():
    with pytest.raises(ValueError, match=r"^model has no LoRA adapter 'default' on its decoder blocks: wrap it with "
                                         r"iclr26\.models\.lora\.with_lora \(peft\) first$"):
        simulated_gradients(_tiny(2))
    pm = _lora_model(layers=2)
    with pytest.raises(ValueError, match="^model has no LoRA adapter 'other'"):
        simulated_gradients(pm, adapter="other")
    with pytest.raises(ValueError, match=r"^no LoRA gradients found: call after loss\.backward\(\) and before "
                                         r"zero_grad\(\)$"):
        simulated_gradients(pm)
    with pytest.raises(ValueError, match="^model has no LoRA adapter 'other'"):
        IGIA(adapter="other").update(pm)


def test_simulated_gradient_skips_modules_without_gradient():
    pm = _lora_model(layers=2)
    attn = pm.get_base_model().model.layers[0].self_attn
    attn.q_proj.lora_A["default"].weight.requires_grad_(False)     # grad_A is None, grad_B is not
    _lora_step(pm, _ids())
    sims = simulated_gradients(pm)
    assert (0, "self_attn.q_proj") not in sims
    assert (0, "self_attn.k_proj") in sims and (0, "mlp.down_proj") in sims and (1, "self_attn.q_proj") in sims


# ---------------------------------------------------------------- Eqs. (2)-(3): IGIA
def test_igia_is_mean_of_squared_simulated_gradients_and_layer_sum():
    pm = _lora_model(layers=3)
    opt = torch.optim.SGD([p for p in pm.parameters() if p.requires_grad], lr=0.5)
    igia, ref = IGIA(), []
    for step in range(3):
        _lora_step(pm, _ids(seed=step))
        ref.append({k: v.double() for k, v in simulated_gradients(pm).items()})
        assert igia.update(pm) is igia
        opt.step()
        opt.zero_grad()
    assert igia.steps_ == 3 and igia.n_layers_ == 3
    F = igia.matrices()
    assert set(F) == set(ref[0])
    for k in F:
        expect = sum(r[k] ** 2 for r in ref) / 3
        torch.testing.assert_close(F[k].double(), expect, rtol=1e-5, atol=1e-12)
    scores = igia.layer_scores(norm="squared")                  # the paper's Eq. (3)
    assert scores.shape == (3,)
    for i in range(3):
        expect = sum(float(F[k].double().sum()) for k in F if k[0] == i)
        assert scores[i] == pytest.approx(expect, rel=1e-5)
    assert len(set(np.round(scores / scores.max(), 6))) == 3   # layers differ
    # the official layer_important.py: sum over steps and matrices of the Frobenius norm (not squared)
    fro = igia.layer_scores()
    for i in range(3):
        expect = sum(float(torch.sqrt((r[k] ** 2).sum())) for r in ref for k in r if k[0] == i) / 3
        assert fro[i] == pytest.approx(expect, rel=1e-6)
    assert not np.allclose(fro / fro.sum(), scores / scores.sum())   # the two norms rank differently in scale
    with pytest.raises(ValueError, match="norm must be 'frobenius' or 'squared'"):
        igia.layer_scores(norm="l1")


def test_igia_rejects_non_finite_gradient():
    pm = _lora_model(layers=2)
    _lora_step(pm, _ids())
    for n, p in pm.named_parameters():
        if "lora_A" in n:
            p.grad[0, 0] = float("nan")
            break
    with pytest.raises(FloatingPointError, match="non-finite LoRA gradient"):
        IGIA().update(pm)


def test_igia_first_update_is_not_aliased():
    pm = _lora_model(layers=2)
    _lora_step(pm, _ids())
    igia = IGIA().update(pm)
    stored = igia.sum_[(0, "self_attn.q_proj")].clone()
    sim = simulated_gradients(pm)[(0, "self_attn.q_proj")]
    torch.testing.assert_close(stored, sim.float() ** 2)
    igia.update(pm)    # same gradients again: the mean stays, the sum doubles
    torch.testing.assert_close(igia.sum_[(0, "self_attn.q_proj")], 2 * stored)
    torch.testing.assert_close(igia.matrices()[(0, "self_attn.q_proj")], stored)


def test_igia_rejections():
    igia = IGIA()
    assert igia.n_layers_ == 0 and igia.steps_ == 0 and igia.sum_ == {}
    with pytest.raises(RuntimeError, match=r"^IGIA has no steps: call update\(model\) after backward on at least one "
                                           r"step$"):
        igia.matrices()
    with pytest.raises(RuntimeError, match="^IGIA has no steps"):
        igia.layer_scores()
    with pytest.raises(ValueError, match="no LoRA adapter"):
        igia.update(_tiny(2))


# ---------------------------------------------------------------- selection
def test_select_prune_layers_lowest_unprotected():
    s = [0.1, 5.0, 0.3, 0.2, 4.0, 0.3]
    assert select_prune_layers(s, 2) == [2, 3]
    assert select_prune_layers(s, 3) == [2, 3, 5]          # tie 0.3 at 2 and 5: both, lower first
    assert select_prune_layers(s, 2, protect=()) == [0, 3]
    assert select_prune_layers(s, 2, protect=(0, -3)) == [2, 5]
    assert select_prune_layers(s, 0) == []
    assert select_prune_layers([1.0, 2.0, 2.0, 2.0], 1) == [1]   # ties go to the lower index
    assert select_prune_layers(np.array(s), np.int64(1)) == [3]
    assert select_prune_layers([1.0, 3.0, 2.0], 2) == [1, 2]          # every unprotected block


@pytest.mark.parametrize("args,match", [
    (([], 1), "non-empty"), (([[1.0, 2.0]], 1), "non-empty"), (([1.0, float("nan")], 1), "^scores must be finite$"),
    (([1.0, 2.0], -1), "non-negative"), (([1.0, 2.0], True), "non-negative"), (([1.0, 2.0], 1.0), "non-negative"),
    (([1.0, 2.0, 3.0], 3), "exceeds the 2 unprotected"),
])
def test_select_prune_layers_rejections(args, match):
    with pytest.raises(ValueError, match=match):
        select_prune_layers(*args)


def test_select_prune_layers_protect_out_of_range():
    with pytest.raises(ValueError, match="protected index 3 out of range for 3"):
        select_prune_layers([1.0, 2.0, 3.0], 1, protect=(3,))
    with pytest.raises(ValueError, match="protected index -4"):
        select_prune_layers([1.0, 2.0, 3.0], 1, protect=(-4,))
    assert select_prune_layers([1.0, 2.0, 3.0], 1, protect=(-3,)) == [1]


# ---------------------------------------------------------------- sparsify / merge
def test_sparsify_keeps_top_fraction_by_importance():
    w = torch.tensor([[1.0, -2.0, 3.0], [-4.0, 5.0, -6.0]])
    imp = torch.tensor([[0.5, 0.1, 0.9], [0.3, 0.0, 0.7]])
    out = sparsify(w, imp, 0.5)
    torch.testing.assert_close(out, torch.tensor([[1.0, 0.0, 3.0], [0.0, 0.0, -6.0]]))
    torch.testing.assert_close(sparsify(w, imp, 1.0), w)
    torch.testing.assert_close(sparsify(w, imp, 0.34), torch.tensor([[0.0, 0.0, 3.0], [0.0, 0.0, -6.0]]))
    assert torch.count_nonzero(sparsify(w, imp, 0.01)) == 0       # int(0.06) = 0 entries kept
    # the official spars(): k = int(numel * keep), floor, not round (6 * 0.25 = 1.5 -> 1)
    torch.testing.assert_close(sparsify(w, imp, 0.25), torch.tensor([[0.0, 0.0, 3.0], [0.0, 0.0, 0.0]]))
    assert KEEP == 0.2
    torch.testing.assert_close(sparsify(w, imp, 1 / 6), torch.tensor([[0.0, 0.0, 3.0], [0.0, 0.0, 0.0]]))
    assert out is not w and w[0, 1] == -2.0
    big = torch.randn(40, 50, generator=torch.Generator().manual_seed(0))
    imp = big.abs() + torch.rand(40, 50, generator=torch.Generator().manual_seed(1))
    kept = sparsify(big, imp, 0.2) != 0
    assert int(kept.sum()) == 400
    assert imp[kept].min() >= imp[~kept].max()


def test_sparsify_rejects_nan():
    with pytest.raises(ValueError, match="finite"):
        sparsify(torch.ones(2, 2), torch.tensor([[1.0, float("nan")], [0.0, 1.0]]), 0.5)
    with pytest.raises(ValueError, match="finite"):
        sparsify(torch.tensor([[1.0, float("nan")], [0.0, 1.0]]), torch.ones(2, 2), 0.5)


@pytest.mark.parametrize("keep", [0.0, -0.1, 1.5, float("nan"), True, "0.2"])
def test_sparsify_rejects_bad_keep(keep):
    with pytest.raises(ValueError, match=r"keep must be in \(0, 1\]"):
        sparsify(torch.ones(2, 2), torch.ones(2, 2), keep)


def test_sparsify_rejects_shape_mismatch():
    with pytest.raises(ValueError, match="same shape"):
        sparsify(torch.ones(2, 2), torch.ones(2, 3), 0.5)


def test_same_sign_merge():
    t = torch.tensor([1.0, -2.0, 3.0, -4.0, 0.0, 2.0])
    s = torch.tensor([0.5, 0.5, -1.0, -1.0, 1.0, 0.0])
    out = same_sign_merge(t, s)
    torch.testing.assert_close(out, torch.tensor([1.5, -2.0, 3.0, -5.0, 0.0, 2.0]))
    assert t[0] == 1.0
    with pytest.raises(ValueError, match="same shape"):
        same_sign_merge(torch.ones(2), torch.ones(3))


# ---------------------------------------------------------------- pruning
def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_prune_without_merge_equals_block_dropping():
    """Reduction: removing blocks = running the model with those blocks as the identity."""
    model, ids = _tiny(5), _ids()
    with hooks.drop_blocks(model, [1, 3]):
        ref = _logits(model, ids)
    full = _logits(model, ids)
    pruned = prune_layers(copy.deepcopy(model), [3, 1], merge=False)
    assert len(hooks.decoder_layers(pruned)) == 3 and pruned.config.num_hidden_layers == 3
    torch.testing.assert_close(_logits(pruned, ids), ref)
    assert (ref - full).abs().max() > 1e-2
    assert [l.self_attn.layer_idx for l in pruned.model.layers] == [0, 1, 2]
    assert prune_layers(copy.deepcopy(model), [-1], merge=False).config.num_hidden_layers == 4


def _imp(model, layers, seed=4):
    g = torch.Generator().manual_seed(seed)
    return {(j, name): torch.rand(mod.weight.shape, generator=g) for j in layers
            for name, mod in model.model.layers[j].named_modules() if isinstance(mod, torch.nn.Linear)}


def _w(model, block, name):
    return dict(model.model.layers[block].named_modules())[name].weight.data


def test_prune_with_merge_matches_manual_official_merge():
    """Run 1-4 of 6 blocks: blocks 1, 2 and 4 (first two and last) merge into block 0, block 3 does not;
    each through its top-20 % IGIA mask AND sign agreement with block 0's original weight."""
    model = _tiny(6)
    imp = _imp(model, [1, 2, 3, 4])
    orig = copy.deepcopy(model)
    pruned = prune_layers(model, [1, 2, 3, 4], importance=imp)
    assert pruned is model and len(pruned.model.layers) == 2
    for name in ("self_attn.q_proj", "self_attn.o_proj", "mlp.down_proj", "mlp.up_proj"):
        w0 = _w(orig, 0, name)
        expect = w0.clone()
        for j in (1, 2, 4):
            wj = _w(orig, j, name)
            k = int(0.2 * wj.numel())
            top = torch.zeros(wj.numel(), dtype=torch.bool)
            top[torch.argsort(imp[(j, name)].reshape(-1), descending=True)[:k]] = True
            mask = top.reshape(wj.shape) & (w0 * wj > 0)
            expect = expect + wj * mask
        torch.testing.assert_close(_w(pruned, 0, name), expect)
        wrong = expect + _w(orig, 3, name) * (w0 * _w(orig, 3, name) > 0) * (imp[(3, name)] > 0.8)
        assert not torch.allclose(_w(pruned, 0, name), wrong)       # block 3 is not merged
    torch.testing.assert_close(pruned.model.layers[1].mlp.up_proj.weight, orig.model.layers[5].mlp.up_proj.weight)
    torch.testing.assert_close(pruned.model.layers[0].input_layernorm.weight, orig.model.layers[0].input_layernorm.weight)


def test_merge_sign_is_against_the_original_target():
    """Two merged blocks whose first flips a target entry's sign: the second is judged against the
    original sign (the official code adds all masked blocks in one sum)."""
    model = _tiny(4)
    L = model.model.layers
    with torch.no_grad():
        L[0].mlp.gate_proj.weight.fill_(1.0)
        L[1].mlp.gate_proj.weight.fill_(2.0)
        L[1].mlp.gate_proj.weight[0, 0] = -3.0
        L[2].mlp.gate_proj.weight.fill_(0.5)
        L[2].mlp.gate_proj.weight[0, 0] = -0.5
    ones = {k: torch.ones_like(v) for k, v in _imp(model, [1, 2]).items()}
    pruned = prune_layers(model, [1, 2], importance=ones, keep=1.0)
    w = pruned.model.layers[0].mlp.gate_proj.weight
    assert float(w[0, 0]) == 1.0            # -3 and -0.5 disagree with the original +1: nothing added
    assert float(w[0, 1]) == 3.5            # 1 + 2 + 0.5


def test_merge_layers_subset_and_rejections():
    model = _tiny(5)
    imp = _imp(model, [1, 2, 3])
    orig = copy.deepcopy(model)
    pruned = prune_layers(copy.deepcopy(model), [1, 2, 3], importance=imp, merge_layers=[2])
    name = "mlp.down_proj"
    w0, w2 = _w(orig, 0, name), _w(orig, 2, name)
    expect = same_sign_merge(w0, sparsify(w2, imp[(2, name)], KEEP))
    torch.testing.assert_close(_w(pruned, 0, name), expect)
    none = prune_layers(copy.deepcopy(model), [1, 2, 3], importance=imp, merge_layers=[])
    torch.testing.assert_close(_w(none, 0, name), w0)
    with pytest.raises(ValueError, match=r"merge_layers \[4\] are not among the pruned layers"):
        prune_layers(copy.deepcopy(model), [1, 2, 3], importance=imp, merge_layers=[4])
    bad = dict(imp)
    bad.pop((1, "mlp.up_proj"))
    with pytest.raises(ValueError, match="no IGIA-Matrix for block 1 'mlp.up_proj'"):
        prune_layers(copy.deepcopy(model), [1, 2, 3], importance=bad)
    with pytest.raises(ValueError, match="keep must be in"):
        prune_layers(copy.deepcopy(model), [1], importance=imp, keep=0.0)


def test_merge_goes_to_nearest_preceding_kept_block():
    model = _tiny(5)
    imp = {(4, name): torch.ones_like(m.weight) for name, m in model.model.layers[4].named_modules()
           if isinstance(m, torch.nn.Linear)}
    orig = copy.deepcopy(model)
    pruned = prune_layers(model, [4], importance=imp, keep=1.0)
    w3, w4 = orig.model.layers[3].mlp.gate_proj.weight, orig.model.layers[4].mlp.gate_proj.weight
    torch.testing.assert_close(pruned.model.layers[3].mlp.gate_proj.weight, same_sign_merge(w3, w4))
    torch.testing.assert_close(pruned.model.layers[2].mlp.gate_proj.weight, orig.model.layers[2].mlp.gate_proj.weight)


def test_two_runs_merge_into_their_own_preceding_blocks():
    model = _tiny(6)
    imp = {k: torch.ones_like(v) for k, v in _imp(model, [1, 4]).items()}
    orig = copy.deepcopy(model)
    pruned = prune_layers(model, [1, 4], importance=imp, keep=1.0)
    name = "self_attn.o_proj"
    torch.testing.assert_close(_w(pruned, 0, name), same_sign_merge(_w(orig, 0, name), _w(orig, 1, name)))
    torch.testing.assert_close(_w(pruned, 2, name), same_sign_merge(_w(orig, 3, name), _w(orig, 4, name)))


def test_official_merge_layers():
    assert official_merge_layers(range(18, 31)) == [18, 19, 30]     # process_important.py, Llama-3.1-8B
    assert official_merge_layers([5, 3, 4]) == [3, 4, 5]
    assert official_merge_layers([7, 8]) == [7, 8]
    assert official_merge_layers([7]) == [7]
    assert official_merge_layers([]) == []


def test_select_prune_run():
    s = [9.0, 1.0, 5.0, 0.5, 0.4, 0.6, 3.0, 0.1]
    assert select_prune_run(s, 3) == [3, 4, 5]               # last block (0.1) protected
    assert select_prune_run(s, 3, protect_last=0) == [3, 4, 5]
    assert select_prune_run(s, 2, protect_last=0) == [3, 4]  # 0.5 + 0.4 = 0.9 < 0.4 + 0.6 < 3.0 + 0.1
    assert select_prune_run(s, 1, protect_last=0) == [7]
    assert select_prune_run(s, 1) == [4]
    assert select_prune_run(s, 6) == [1, 2, 3, 4, 5, 6]
    assert select_prune_run(s, 0) == []
    assert select_prune_run([5.0, 1.0, 1.0, 1.0, 1.0, 5.0], 2) == [1, 2]    # ties: the earlier run
    assert select_prune_run(s, 2, protect_first=3) == [3, 4]
    with pytest.raises(ValueError, match="exceeds the 6 unprotected"):
        select_prune_run(s, 7)
    with pytest.raises(ValueError, match="protect_first must be >= 1"):
        select_prune_run(s, 2, protect_first=0)
    with pytest.raises(ValueError, match="n_prune must be a non-negative integer"):
        select_prune_run(s, 2.0)
    with pytest.raises(ValueError, match="n_prune must be a non-negative integer"):
        select_prune_run(s, -1)
    with pytest.raises(ValueError, match="protect_last must be a non-negative integer"):
        select_prune_run(s, 1, protect_last=True)
    with pytest.raises(ValueError, match="finite"):
        select_prune_run([1.0, float("nan"), 2.0], 1)
    with pytest.raises(ValueError, match="non-empty 1-D"):
        select_prune_run([], 1)


def test_callback_collects_igia_in_trainer_and_stops(tmp_path):
    """The callback inside a transformers Trainer reads exactly the first ``steps`` optimiser steps
    and, with ``stop=True``, ends training there."""
    from transformers import Trainer, TrainingArguments

    class DS(torch.utils.data.Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            ids = _ids(seed=i % 2, shape=(1, 10))[0]       # every batch holds the same two sequences
            return {"input_ids": ids, "labels": ids}

    pm = _lora_model(layers=3)
    cb = GradPrunerCallback(steps=2)
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=2, max_steps=4,
                             learning_rate=0.1, lr_scheduler_type="constant", warmup_steps=0, optim="sgd",
                             weight_decay=0.0, max_grad_norm=0.0, report_to=[], save_strategy="no",
                             logging_strategy="no", use_cpu=True, seed=0)
    trainer = Trainer(model=pm, args=args, train_dataset=DS(), callbacks=[cb])
    trainer.train()
    assert cb.igia.steps_ == 2 and trainer.state.global_step == 2          # stopped after the warm-up
    scores = cb.igia.layer_scores()
    assert scores.shape == (3,) and np.isfinite(scores).all() and (scores > 0).all()
    cb2 = GradPrunerCallback(steps=1, stop=False)
    t2 = Trainer(model=_lora_model(layers=3), args=args, train_dataset=DS(), callbacks=[cb2])
    t2.train()
    assert cb2.igia.steps_ == 1 and t2.state.global_step == 4                # keeps training, one step read
    with pytest.raises(ValueError, match="steps must be a positive integer"):
        GradPrunerCallback(steps=0)
    with pytest.raises(ValueError, match="steps must be a positive integer"):
        GradPrunerCallback(steps=1.5)
    with pytest.raises(ValueError, match="needs the model"):
        cb.on_pre_optimizer_step(args, trainer.state, trainer.control)


def test_pruned_model_round_trips_and_generates(tmp_path):
    from transformers import AutoModelForCausalLM

    model, ids = _tiny(4), _ids()
    pruned = prune_layers(model, [1], merge=False)
    pruned.save_pretrained(tmp_path)
    again = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert again.config.num_hidden_layers == 3
    torch.testing.assert_close(_logits(again, ids), _logits(pruned, ids))
    sd = pruned.state_dict()
    assert not any(k.startswith("model.layers.3.") for k in sd)
    out = pruned.generate(ids[:1, :4], max_new_tokens=3, do_sample=False, use_cache=True)
    out2 = pruned.generate(ids[:1, :4], max_new_tokens=3, do_sample=False, use_cache=False)
    assert torch.equal(out, out2)


def test_prune_updates_layer_types():
    model = _tiny(4)
    model.config.layer_types = ["a", "b", "c", "d"]
    prune_layers(model, [2], merge=False)
    assert model.config.layer_types == ["a", "b", "d"]


def test_prune_rejections():
    model = _tiny(3)
    with pytest.raises(TypeError, match="merge_and_unload"):
        prune_layers(with_lora(_tiny(2), r=2), [1], merge=False)
    with pytest.raises(ValueError, match="integers"):
        prune_layers(model, [1.0], merge=False)
    with pytest.raises(ValueError, match="integers"):
        prune_layers(model, [True], merge=False)
    with pytest.raises(ValueError, match="out of range for 3"):
        prune_layers(model, [3], merge=False)
    with pytest.raises(ValueError, match="out of range"):
        prune_layers(model, [-4], merge=False)
    with pytest.raises(ValueError, match="duplicate"):
        prune_layers(model, [1, -2], merge=False)
    with pytest.raises(ValueError, match="cannot prune all 3"):
        prune_layers(model, [0, 1, 2], merge=False)
    with pytest.raises(ValueError, match="needs the IGIA matrices"):
        prune_layers(model, [1])
    with pytest.raises(ValueError, match="no preceding kept block"):
        prune_layers(model, [0], importance={})
    assert len(model.model.layers) == 3     # nothing removed by a rejected call


# ---------------------------------------------------------------- Block Influence baseline
def test_block_influence_matches_hidden_states():
    model, ids = _tiny(4), _ids(shape=(2, 8))
    bi = block_influence_scores(model, ids)
    with torch.no_grad():
        hs = model(input_ids=ids, output_hidden_states=True).hidden_states
    for i in range(3):     # the last entry of hidden_states is after the final norm
        x, y = hs[i].reshape(-1, hs[i].shape[-1]), hs[i + 1].reshape(-1, hs[i].shape[-1])
        ref = 1 - torch.nn.functional.cosine_similarity(x.double(), y.double(), dim=-1).mean()
        assert bi[i] == pytest.approx(float(ref), rel=1e-6)
    assert bi.shape == (4,) and np.all(bi > 0) and np.ptp(bi) > 0.01
    # a peft model gives the same scores (LoRA B = 0 at init)
    np.testing.assert_allclose(block_influence_scores(with_lora(copy.deepcopy(model), r=2), ids), bi, rtol=1e-6)


def test_block_influence_ignores_padding():
    model = _tiny(3)
    a, b = _ids(seed=2, shape=(1, 8)), _ids(seed=3, shape=(1, 5))
    ids = torch.cat([a, torch.cat([torch.zeros(1, 3, dtype=torch.long), b], 1)])
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    got = block_influence_scores(model, ids, mask)
    # reference: token-weighted mean over the two sequences run alone
    per = []
    for x in (a, b):
        with torch.no_grad():
            hs = model(input_ids=x, output_hidden_states=True).hidden_states
        per.append([1 - torch.nn.functional.cosine_similarity(hs[i][0].double(), hs[i + 1][0].double(), dim=-1)
                    for i in range(2)])
    for i in range(2):
        ref = torch.cat([per[0][i], per[1][i]]).mean()
        assert got[i] == pytest.approx(float(1 - (1 - ref)), rel=1e-5)
    with pytest.raises(ValueError, match=r"\[batch, seq\]"):
        block_influence_scores(model, ids[0])


# ---------------------------------------------------------------- experiment pieces
def test_task_items_labels_and_disjoint_splits():
    import re

    from iclr26.compression.gradpruner.experiment import _NEG, _POS, make_items

    rng = np.random.default_rng(0)
    items = make_items(300, rng)
    assert len({p for p, _ in items}) == 300
    pat = re.compile(r"^Review: The (\w+) was (not |never |really )?(\w+), and the (\w+) was (not |never |really )?"
                     r"(\w+)\.\nAspect: (\w+)\nSentiment:$")
    asked_second = 0
    for p, y in items:
        m = pat.match(p)
        assert m, p
        n1, m1, a1, n2, m2, a2, q = m.groups()
        assert n1 != n2 and q in (n1, n2)
        mod, adj = (m1, a1) if q == n1 else (m2, a2)
        asked_second += q == n2
        assert adj in _POS + _NEG
        negated = mod in ("not ", "never ")
        assert y == int((adj in _POS) == negated), p
    assert 0.4 < np.mean([y for _, y in items]) < 0.6
    assert 0.4 < asked_second / 300 < 0.6
    test = make_items(50, rng, exclude={p for p, _ in items})
    assert not {p for p, _ in test} & {p for p, _ in items}
    assert set(_POS) & set(_NEG) == set()
    with pytest.raises(ValueError, match="n must be a non-negative integer"):
        make_items(-1, rng)
