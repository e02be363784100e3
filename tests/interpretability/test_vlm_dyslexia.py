"""vlm_dyslexia: the VWF localiser (Welch t, top share of units), unit ablation through hooks, the
teacher-forced scorer, and the experiment at smoke scale. Every model here is a tiny randomly
initialised VLM of the tiny-vlm class (seconds), never the trained one."""
import math

import numpy as np
import pytest
import torch
from scipy import stats
from torch import nn

from iclr26.data import vision_tasks as vt
from iclr26.interpretability.vlm_dyslexia import (OFFICIAL_FRACTION, UnitAblation, UnitLocalisation, gate_proj_modules,
                                                  greedy_exact, localise_from_activations, localise_units,
                                                  random_unit_masks, selectivity_tstat, unit_activations)
from iclr26.interpretability.vlm_dyslexia import experiment
from iclr26.models.hooks import drop_blocks, record_activations
from iclr26.models.vlm import random_vlm, text_model, vlm_inputs


@pytest.fixture(scope="module")
def vlm():
    torch.manual_seed(0)
    return random_vlm(0, image_size=32, text_layers=2)


def _batch(proc, cat, n, seed=0):
    ims, _ = vt.localiser_stimuli(cat, n, seed=seed)
    return vlm_inputs(proc, [[im] for im in ims], ["Describe the image."] * n)


# ------------------------------------------------------------------------------------- equations
def test_welch_t_matches_scipy_and_hand_formula():
    rng = np.random.default_rng(0)
    a, b = rng.normal(1.0, 1.0, (12, 7)), rng.normal(0.0, 2.0, (20, 7))
    res = selectivity_tstat(a, b)
    ref = stats.ttest_ind(a, b, axis=0, equal_var=False)
    np.testing.assert_allclose(res.statistic, ref.statistic, rtol=1e-12)
    np.testing.assert_allclose(res.pvalue, ref.pvalue, rtol=1e-10)
    # hand formula on one unit: t = (m1 - m2) / sqrt(s1^2/n1 + s2^2/n2), Welch-Satterthwaite df
    x, y = np.array([1.0, 2.0, 4.0]), np.array([0.0, 1.0, 1.0, 2.0])
    se2 = x.var(ddof=1) / 3 + y.var(ddof=1) / 4
    t = (x.mean() - y.mean()) / math.sqrt(se2)
    df = se2 ** 2 / ((x.var(ddof=1) / 3) ** 2 / 2 + (y.var(ddof=1) / 4) ** 2 / 3)
    r = selectivity_tstat(x, y)
    assert r.statistic[0] == pytest.approx(t, rel=1e-12)
    assert r.df[0] == pytest.approx(df, rel=1e-12)
    assert r.pvalue[0] == pytest.approx(2 * stats.t.sf(abs(t), df), rel=1e-10)
    assert r.mean_target[0] == pytest.approx(x.mean()) and r.mean_other[0] == pytest.approx(y.mean())


def test_constant_units_get_t_zero_p_one():
    a = np.ones((5, 3)); b = np.ones((6, 3)); a[:, 2] = np.arange(5)
    r = selectivity_tstat(a, b)
    assert r.statistic[0] == 0 and r.pvalue[0] == 1 and r.statistic[2] > 0


def test_top_share_is_global_over_modules_and_int_of_fraction():
    rng = np.random.default_rng(1)
    acts = {"words": {"l0": rng.normal(0, 1, (10, 20)), "l1": rng.normal(0, 1, (10, 30))},
            "faces": {"l0": rng.normal(0, 1, (10, 20)), "l1": rng.normal(0, 1, (10, 30))},
            "lines": {"l0": rng.normal(0, 1, (10, 20)), "l1": rng.normal(0, 1, (10, 30))}}
    acts["words"]["l1"][:, [3, 9]] += 5.0          # two planted word-selective units in l1
    loc = localise_from_activations(acts, "words", fraction=0.21)
    assert loc.k == int(0.21 * 50) == 10 and loc.n_units == 50
    assert loc.masks["l1"][3] and loc.masks["l1"][9]
    # the selected units are exactly the 10 largest t over both modules (words vs pooled controls)
    t_all = np.concatenate([selectivity_tstat(acts["words"][m], np.concatenate([acts["faces"][m], acts["lines"][m]]))
                            .statistic for m in ("l0", "l1")])
    sel = np.concatenate([loc.masks["l0"].numpy(), loc.masks["l1"].numpy()])
    assert set(np.flatnonzero(sel)) == set(np.argsort(-t_all, kind="stable")[:10])
    assert loc.controls == ("faces", "lines") and sum(loc.counts().values()) == 10
    assert localise_from_activations(acts, "words", k=3).k == 3


def test_ties_are_broken_by_position():
    acts = {"words": {"m": np.tile([1.0, 1.0, 1.0, 0.0], (4, 1)) + np.arange(4)[:, None] * 0.01},
            "other": {"m": np.tile([0.0, 0.0, 0.0, 0.0], (4, 1)) + np.arange(4)[:, None] * 0.01}}
    loc = localise_from_activations(acts, "words", k=2)
    assert loc.masks["m"].tolist() == [True, True, False, False]


# ----------------------------------------------------------------------------------- the model path
def test_gate_proj_modules_are_the_text_model_gates(vlm):
    model, _ = vlm
    mods = gate_proj_modules(model)
    assert list(mods) == [f"model.text_model.layers.{i}.mlp.gate_proj" for i in range(2)]
    with pytest.raises(ValueError, match="gate_proj"):
        gate_proj_modules(nn.Linear(2, 2))


def test_padded_batch_mean_equals_one_at_a_time(vlm):
    model, proc = vlm
    ims, _ = vt.localiser_stimuli("words", 3, seed=0)
    qs = ["Describe the image.", "What is this?", "Describe it briefly, please, in words."]
    mods = gate_proj_modules(model)
    batched = unit_activations(model, mods, [vlm_inputs(proc, [[im] for im in ims], qs)])
    singles = unit_activations(model, mods, [vlm_inputs(proc, [[im]], [q]) for im, q in zip(ims, qs)])
    for k in mods:
        assert batched[k].shape == (3, model.config.text_config.intermediate_size)
        torch.testing.assert_close(batched[k], singles[k], atol=1e-5, rtol=1e-4)


def test_tower_units_are_averaged_over_patches(vlm):
    model, proc = vlm
    name = "model.vision_model.encoder.layers.0.mlp.fc1"
    batch = _batch(proc, "words", 3)
    acts = unit_activations(model, [name], [batch])
    with torch.no_grad(), record_activations(model, [name]) as raw:
        model(**batch)
    torch.testing.assert_close(acts[name], raw[name][0].mean(1))
    assert acts[name].shape == (3, model.get_submodule(name).out_features)


def test_localise_units_on_a_vlm(vlm):
    model, proc = vlm
    stim = {c: [_batch(proc, c, 4)] for c in ("words", "false_font", "shapes")}
    loc = localise_units(model, gate_proj_modules(model), stim, fraction=0.25)
    assert isinstance(loc, UnitLocalisation)
    assert loc.k == int(0.25 * loc.n_units) and loc.fraction == pytest.approx(loc.k / loc.n_units)
    assert all(m.dtype == torch.bool for m in loc.masks.values())
    assert not model.training


def test_localiser_finds_a_planted_unit():
    class Toy(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 6, bias=False)
            with torch.no_grad():
                self.proj.weight.zero_(); self.proj.weight[2, 0] = 1.0      # unit 2 reads feature 0
                self.proj.weight[:, 1:] = torch.randn(6, 3) * 0.1

        def forward(self, x):
            return self.proj(x)

    torch.manual_seed(0)
    toy = Toy()
    words = torch.randn(16, 5, 4); words[..., 0] += 3.0
    other = torch.randn(16, 5, 4)
    loc = localise_units(toy, ["proj"], {"words": [{"x": words}], "noise": [{"x": other}]}, k=1)
    assert loc.masks["proj"].tolist() == [False, False, True, False, False, False]
    assert loc.pvalues["proj"][2] < 1e-6


# --------------------------------------------------------------------------------------- ablation
def test_empty_mask_changes_nothing_and_full_gate_mask_equals_dropping_the_mlps(vlm):
    model, proc = vlm
    batch = _batch(proc, "words", 2)
    mods = gate_proj_modules(model)
    with torch.no_grad():
        ref = model(**batch).logits
        with UnitAblation(model, {k: torch.zeros(m.out_features, dtype=torch.bool) for k, m in mods.items()}) as ab:
            same = model(**batch).logits
            assert ab.n_ablated == 0
        torch.testing.assert_close(same, ref, atol=0, rtol=0)
        full = {k: torch.ones(m.out_features, dtype=torch.bool) for k, m in mods.items()}
        with UnitAblation(model, full):
            ablated = model(**batch).logits
        with drop_blocks(text_model(model), [0, 1], part="mlp"):
            dropped = model(**batch).logits
    torch.testing.assert_close(ablated, dropped, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(ablated, ref)


def test_ablation_zeroes_exactly_the_masked_units_and_unhooks(vlm):
    model, proc = vlm
    batch = _batch(proc, "words", 2)
    name = "model.text_model.layers.1.mlp.gate_proj"
    n = model.get_submodule(name).out_features
    mask = torch.zeros(n, dtype=torch.bool); mask[[0, 5, n - 1]] = True
    with torch.no_grad():
        with record_activations(model, [name]) as before:
            model(**batch)
        with UnitAblation(model, {name: mask}):
            with record_activations(model, [name]) as after:
                model(**batch)
    a, b = after[name][0], before[name][0]
    assert torch.all(a[..., mask] == 0)
    torch.testing.assert_close(a[..., ~mask], b[..., ~mask])   # layer-1 input is unchanged (layer 0 intact)
    with pytest.raises(RuntimeError):
        with UnitAblation(model, {name: mask}):
            raise RuntimeError("body fails")
    assert not model.get_submodule(name)._forward_hooks


def test_ablation_value_fills_the_units(vlm):
    model, proc = vlm
    batch = _batch(proc, "words", 1)
    name = "model.text_model.layers.0.mlp.gate_proj"
    n = model.get_submodule(name).out_features
    mask = torch.zeros(n, dtype=torch.bool); mask[:3] = True
    fill = torch.arange(n, dtype=torch.float32)
    with torch.no_grad():
        with UnitAblation(model, {name: mask}, value=2.5), record_activations(model, [name]) as a:
            model(**batch)
        with UnitAblation(model, {name: mask}, value={name: fill}), record_activations(model, [name]) as b:
            model(**batch)
    assert torch.all(a[name][0][..., :3] == 2.5)
    assert torch.all(b[name][0][..., :3] == fill[:3])


def test_ablation_is_active_during_generate_with_cache_and_batches(vlm):
    model, proc = vlm
    batch = _batch(proc, "words", 3)
    full = {k: torch.ones(m.out_features, dtype=torch.bool) for k, m in gate_proj_modules(model).items()}
    with torch.no_grad():
        with UnitAblation(model, full):
            g1 = model.generate(**batch, max_new_tokens=4, do_sample=False, use_cache=True)
        with drop_blocks(text_model(model), [0, 1], part="mlp"):
            g2 = model.generate(**batch, max_new_tokens=4, do_sample=False, use_cache=True)
    assert torch.equal(g1, g2)


# ----------------------------------------------------------------------------------------- random
def test_random_masks_match_counts_and_are_reproducible():
    ref = {"a": torch.zeros(40, dtype=torch.bool), "b": torch.zeros(60, dtype=torch.bool)}
    ref["a"][:10] = True; ref["b"][:2] = True
    r1 = random_unit_masks(ref, seed=3)
    assert sum(int(m.sum()) for m in r1.values()) == 12
    assert all(torch.equal(r1[k], random_unit_masks(ref, seed=3)[k]) for k in ref)
    assert any(not torch.equal(r1[k], random_unit_masks(ref, seed=4)[k]) for k in ref)
    r2 = random_unit_masks(ref, seed=0, match="module")
    assert int(r2["a"].sum()) == 10 and int(r2["b"].sum()) == 2
    r3 = random_unit_masks(ref, seed=0, exclude_reference=True)
    assert not any(bool((r3[k] & ref[k]).any()) for k in ref)
    # uniform over all units: module b (60 % of the units) gets about 60 % of the draws
    share = np.mean([int(random_unit_masks(ref, seed=s)["b"].sum()) / 12 for s in range(200)])
    assert 0.55 < share < 0.65


# --------------------------------------------------------------------------------------- scoring
class _Oracle(nn.Module):
    """Logits that predict the next input token at every position; ``wrong_at`` marks positions
    (counted from the end) where it predicts something else."""

    def __init__(self, vocab, wrong_at=()):
        super().__init__()
        self.vocab, self.wrong_at = vocab, wrong_at

    def forward(self, input_ids, **kw):
        nxt = torch.roll(input_ids, -1, dims=1)
        for j in self.wrong_at:
            nxt[:, -j] = (nxt[:, -j] + 1) % self.vocab
        return type("Out", (), {"logits": torch.nn.functional.one_hot(nxt, self.vocab).float()})()


def test_greedy_exact_counts_only_answer_positions(vlm):
    _, proc = vlm
    items = vt.make_items("colour", 3, seed=0, split="test")
    vocab = len(proc.tokenizer)
    assert greedy_exact(_Oracle(vocab), proc, items) == [1, 1, 1]
    n_prompt_wrong = 6      # far before the answer: inside the prompt
    ans_len = len(proc.tokenizer(" " + items[0].answer + "<end_of_utterance>", add_special_tokens=False)["input_ids"])
    assert greedy_exact(_Oracle(vocab, wrong_at=(ans_len + n_prompt_wrong,)), proc, items) == [1, 1, 1]
    # wrong at the position predicting the last answer token (<end_of_utterance>): not an exact answer
    assert greedy_exact(_Oracle(vocab, wrong_at=(2,)), proc, items) == [0, 0, 0]


def test_greedy_exact_agrees_with_generate(vlm):
    model, proc = vlm
    items = vt.make_items("shape", 4, seed=1, split="test")
    scores = greedy_exact(model, proc, items, batch_size=3)
    tok = proc.tokenizer
    for it, s in zip(items, scores):
        ans = tok(" " + it.answer + "<end_of_utterance>", add_special_tokens=False)["input_ids"]
        b = vlm_inputs(proc, [it.images], [it.question])
        with torch.no_grad():
            g = model.generate(**b, max_new_tokens=len(ans), do_sample=False, use_cache=True, eos_token_id=None,
                               min_new_tokens=len(ans))
        assert s == int(g[0, b["input_ids"].shape[1]:].tolist() == ans)


# -------------------------------------------------------------------------------------- rejection
def test_bad_input_is_rejected(vlm):
    model, _ = vlm
    with pytest.raises(ValueError, match="non-finite"):
        selectivity_tstat(np.array([[1.0], [np.nan]]), np.ones((3, 1)))
    with pytest.raises(ValueError, match="at least 2"):
        selectivity_tstat(np.ones((1, 2)), np.ones((3, 2)))
    with pytest.raises(ValueError, match="same unit shape"):
        selectivity_tstat(np.ones((3, 2)), np.ones((3, 4)))
    acts = {"words": {"m": np.random.rand(4, 5)}, "x": {"m": np.random.rand(4, 5)}}
    for bad in (0, 1.5, float("nan"), True, "0.2"):
        with pytest.raises(ValueError, match="fraction"):
            localise_from_activations(acts, fraction=bad)
    with pytest.raises(ValueError, match="k must"):
        localise_from_activations(acts, k=6)
    with pytest.raises(ValueError, match="selects no unit"):
        localise_from_activations(acts, fraction=0.1)
    with pytest.raises(ValueError, match="target category"):
        localise_from_activations(acts, target="faces")
    with pytest.raises(ValueError, match="control"):
        localise_from_activations({"words": acts["words"]})
    name = "model.text_model.layers.0.mlp.gate_proj"
    n = model.get_submodule(name).out_features
    with pytest.raises(ValueError, match="units"):
        UnitAblation(model, {name: torch.zeros(n + 1, dtype=torch.bool)})
    with pytest.raises(TypeError, match="bool"):
        UnitAblation(model, {name: torch.zeros(n)})
    with pytest.raises(ValueError, match="value"):
        UnitAblation(model, {name: torch.zeros(n, dtype=torch.bool)}, value=float("nan"))
    with pytest.raises(ValueError, match="value"):
        UnitAblation(model, {name: torch.zeros(n, dtype=torch.bool)}, value={name: torch.zeros(n - 1)})
    with pytest.raises(ValueError, match="non-empty"):
        UnitAblation(model, {})
    with pytest.raises(ValueError, match="submodule"):
        UnitAblation(model, {"no.such.module": torch.zeros(3, dtype=torch.bool)})
    with pytest.raises(TypeError, match="nn.Module"):
        UnitAblation("model", {name: torch.zeros(n, dtype=torch.bool)})
    ref = {"m": torch.ones(3, dtype=torch.bool)}
    with pytest.raises(ValueError, match="match"):
        random_unit_masks(ref, match="layer")
    with pytest.raises(ValueError, match="seed"):
        random_unit_masks(ref, seed=-1)
    with pytest.raises(ValueError, match="cannot draw"):
        random_unit_masks(ref, exclude_reference=True)
    with pytest.raises(ValueError, match="batch_size"):
        greedy_exact(model, None, [1], batch_size=0)
    with pytest.raises(ValueError, match="empty"):
        greedy_exact(model, None, [])
    with pytest.raises(ValueError, match="empty"):
        unit_activations(model, [name], [])


def test_ablation_is_not_reentrant(vlm):
    model, _ = vlm
    name = "model.text_model.layers.0.mlp.gate_proj"
    ab = UnitAblation(model, {name: torch.ones(model.get_submodule(name).out_features, dtype=torch.bool)})
    with ab:
        with pytest.raises(RuntimeError, match="already active"):
            ab.__enter__()


# ------------------------------------------------------------------------------------- experiment
def test_smoke_run_is_deterministic_and_paired():
    r1 = experiment.run("smoke", 0)
    r2 = experiment.run("smoke", 0)
    assert r1["metrics"] == r2["metrics"]
    m = r1["metrics"]
    for task in experiment.TASKS:
        assert set(m[task]) == {"intact", "vwf", "random", "random_layer"}
        assert len({len(v) for v in m[task].values()}) == 1
    assert set(m["drop"]) == {"read", "other"}
    info = r1["info"]
    assert info["k"] == int(OFFICIAL_FRACTION * info["n_units"])


def test_quick_refuses_an_unbuilt_seed_instead_of_building_it():
    with pytest.raises(RuntimeError, match="models prepare tiny-vlm:9999"):
        experiment.run("quick", 9999)


def test_experiment_wiring_arms_masks_drops_and_prompt(monkeypatch):
    """run() with a recording ablation and a stub scorer: the VWF arm zeroes exactly the localised
    masks, the random arms draw as many units (in total / per layer) and differ from them, each
    arm's scores land under its own name, the drops have the sign intact - vwf, and the localiser
    batches carry the official prompt."""
    import iclr26.models.vlm as vlm_mod

    prompts, active, seen = [], [], []
    real_inputs = vlm_mod.vlm_inputs

    def inputs(processor, images, questions, *a, **kw):
        prompts.extend(questions)
        return real_inputs(processor, images, questions, *a, **kw)

    class Recording:
        def __init__(self, model, masks, value=0.0):
            self.masks = {k: v.clone() for k, v in (masks.masks if hasattr(masks, "masks") else masks).items()}

        def __enter__(self):
            active.append(self.masks)
            seen.append(self.masks)
            return self

        def __exit__(self, *exc):
            active.pop()
            return False

    loc_box = {}
    real_localise = experiment.localise_units

    def localise(*a, **kw):
        loc_box["loc"] = real_localise(*a, **kw)
        return loc_box["loc"]

    def scorer(model, processor, items, batch_size=16):
        if not active:
            arm = "intact"
        elif all(torch.equal(active[-1][k], loc_box["loc"].masks[k]) for k in active[-1]):
            arm = "vwf"
        else:
            arm = "random"
        value = {"intact": 1.0, "vwf": 0.25, "random": 0.75}[arm]
        if arm == "vwf" and items[0].task != "read":               # non-reading tasks: a smaller drop
            value = 0.9
        return [value] * len(items)

    monkeypatch.setattr(vlm_mod, "vlm_inputs", inputs)
    monkeypatch.setattr(experiment, "UnitAblation", Recording)
    monkeypatch.setattr(experiment, "localise_units", localise)
    monkeypatch.setattr(experiment, "greedy_exact", scorer)
    out = experiment.run("smoke", 0)
    m, loc = out["metrics"], loc_box["loc"]
    n_loc = 4 * len(experiment.CONTROLS + (experiment.TARGET,))
    assert prompts[:n_loc] == [experiment.PROMPT] * n_loc and experiment.PROMPT == "Describe the image."
    assert m["read"]["intact"] == [1.0] * 4 and m["read"]["vwf"] == [0.25] * 4
    assert m["read"]["random"] == [0.75] * 4 and m["read"]["random_layer"] == [0.75] * 4
    assert m["colour"]["vwf"] == [0.9] * 3
    assert m["drop"]["read"] == pytest.approx(0.75) and m["drop"]["other"] == pytest.approx(0.1)
    n_tasks = len(experiment.TASKS)
    vwf, rand = seen[:n_tasks], seen[n_tasks:]
    assert all(all(torch.equal(s[k], loc.masks[k]) for k in loc.masks) for s in vwf)
    per = loc.counts()
    total = [s for i, s in enumerate(rand) if (i // n_tasks) % 2 == 0]        # random, then random_layer
    layer = [s for i, s in enumerate(rand) if (i // n_tasks) % 2 == 1]
    assert total and layer
    assert all(sum(int(v.sum()) for v in s.values()) == loc.k for s in total)
    assert any({k: int(v.sum()) for k, v in s.items()} != per for s in total)   # drawn over all units
    assert all({k: int(v.sum()) for k, v in s.items()} == per for s in layer)  # as many per layer
    assert all(any(not torch.equal(s[k], loc.masks[k]) for k in loc.masks) for s in total + layer)
