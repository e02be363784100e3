"""The VLM substrate on tiny randomly initialised models of the same class (Idefics3) as the bundled
tiny VLM and SmolVLM-256M: attention maps, 4-D masks, hooks on tower and text units, multi-image
prompts, image splitting, boxes and points as text, cached generation, save/load, the hub path.
The trained model is never built or loaded here."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from PIL import Image  # noqa: E402

from iclr26.data import vision_tasks as vt  # noqa: E402
from iclr26.models import hooks  # noqa: E402
from iclr26.models import vlm  # noqa: E402


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    model, proc = vlm.random_vlm(seed=0)
    return model, proc


def _items(task, n, seed=0):
    return vt.make_items(task, n, seed=seed)


def _batch(proc, items):
    return vlm.vlm_inputs(proc, [it.images for it in items], [it.question for it in items])


def test_random_vlm_is_the_smolvlm_class(tiny):
    model, proc = tiny
    from transformers import Idefics3ForConditionalGeneration, Idefics3Processor

    assert isinstance(model, Idefics3ForConditionalGeneration) and isinstance(proc, Idefics3Processor)
    assert model.config.image_token_id == proc.tokenizer.convert_tokens_to_ids("<image>")
    assert proc.image_seq_len == vlm.image_seq_len(32, 8, 2) == 4
    with pytest.raises(ValueError, match="divisible"):
        vlm.image_seq_len(64, 8, 3)


def test_prompt_has_the_chat_template_and_image_tokens(tiny):
    model, proc = tiny
    b = _batch(proc, _items("colour", 2))
    text = proc.tokenizer.decode(b["input_ids"][0], skip_special_tokens=False)
    assert "User:<fake_token_around_image><global-img>" + "<image>" * 4 + "<fake_token_around_image>What colour" in text
    assert text.endswith("<end_of_utterance>\nAssistant:")
    assert vlm.image_token_mask(b["input_ids"], model).sum(1).tolist() == [4, 4]


def test_eager_attention_maps_cover_image_tokens(tiny):
    model, proc = tiny
    b = _batch(proc, _items("colour", 2))
    with torch.no_grad():
        out = model(**b, output_attentions=True)
    L = b["input_ids"].shape[1]
    assert len(out.attentions) == model.config.text_config.num_hidden_layers
    a = out.attentions[-1]
    assert a.shape == (2, model.config.text_config.num_attention_heads, L, L)
    torch.testing.assert_close(a.sum(-1)[:, :, -1], torch.ones(2, a.shape[1]))
    img = vlm.image_token_mask(b["input_ids"], model)
    assert (a[:, :, -1][img[:, None, :].expand_as(a[:, :, -1])] > 0).all()


def test_four_d_mask_blocks_attention_to_image_tokens(tiny):
    model, proc = tiny
    b = _batch(proc, _items("colour", 1))
    ids = b["input_ids"]
    L = ids.shape[1]
    neg = torch.finfo(torch.float32).min
    causal = torch.full((L, L), neg).triu(1)[None, None]
    with torch.no_grad():
        ref = model(**b, output_attentions=True)
        same = model(**{**b, "attention_mask": causal.clone()}, output_attentions=True)
    torch.testing.assert_close(same.logits, ref.logits)          # 4-D causal mask == the 2-D mask
    blocked = causal.clone()
    img = vlm.image_token_mask(ids, model)[0]
    blocked[0, 0, -1, img] = neg
    with torch.no_grad():
        out = model(**{**b, "attention_mask": blocked}, output_attentions=True)
    for layer in out.attentions:
        assert layer[0, :, -1, img].abs().max() == 0
    assert not torch.allclose(out.logits[0, -1], ref.logits[0, -1])
    torch.testing.assert_close(out.logits[0, :-1], ref.logits[0, :-1])


def test_hooks_on_tower_and_text_units(tiny):
    model, proc = tiny
    b = _batch(proc, _items("colour", 2))
    tower_mlp = vlm.vision_layers(model)[0].mlp.fc1
    text_block = vlm.text_layers(model)[1]
    with hooks.record_activations(model, {"tower": tower_mlp, "text": text_block}) as acts:
        with torch.no_grad():
            ref = model(**b).logits
    assert acts["tower"][0].shape == (2, 16, model.config.vision_config.intermediate_size)
    assert acts["text"][0].shape == (*b["input_ids"].shape, model.config.text_config.hidden_size)
    units = [0, 3, 5]

    def ablate(x):
        x = x.clone()
        x[..., units] = 0
        return x

    with hooks.record_activations(model, {"tower": tower_mlp}) as seen:
        with hooks.patch_activations(model, {tower_mlp: ablate}):
            with torch.no_grad():
                out = model(**b).logits
    assert not torch.allclose(out, ref)
    with torch.no_grad():
        torch.testing.assert_close(model(**b).logits, ref)           # hooks removed
    n_layers, n_heads, _ = hooks.head_layout(vlm.text_model(model))
    mask = torch.ones(n_layers, n_heads)
    mask[0, 1] = 0
    with hooks.zero_heads(vlm.text_model(model), mask):
        with torch.no_grad():
            zh = model(**b).logits
    assert not torch.allclose(zh, ref)
    assert seen["tower"][0].shape[-1] == model.config.vision_config.intermediate_size


def test_multi_image_prompts(tiny):
    model, proc = tiny
    items = _items("which_image", 6)
    items = [it for it in items if len(it.images) == 3][:1] + [it for it in items if len(it.images) == 2][:1]
    assert [len(it.images) for it in items] == [3, 2]
    b = _batch(proc, items)
    assert vlm.image_token_mask(b["input_ids"], model).sum(1).tolist() == [12, 8]
    assert b["pixel_values"].shape[:2] == (2, 3)
    answers = vlm.generate_answers(model, proc, [it.images for it in items], [it.question for it in items],
                                   max_new_tokens=3)
    assert len(answers) == 2


def test_image_splitting_adds_tiles_with_row_col_tokens():
    model, proc = vlm.random_vlm(seed=1, do_image_splitting=True)
    img = Image.fromarray(np.full((48, 64, 3), 200, np.uint8))
    b = vlm.vlm_inputs(proc, [[img]], ["What is this?"])
    text = proc.tokenizer.decode(b["input_ids"][0])
    assert "<row_1_col_1>" in text and "<row_2_col_2>" in text and "<global-img>" in text
    n_tiles = b["pixel_values"].shape[1]
    assert n_tiles == 5                                            # 2 x 2 tiles + the global view
    assert vlm.image_token_mask(b["input_ids"], model).sum() == n_tiles * proc.image_seq_len
    with torch.no_grad():
        out = model(**b)
    assert torch.isfinite(out.logits).all()
    # a processor without splitting, switched on afterwards, makes the same inputs
    _, plain = vlm.random_vlm(seed=1)
    b2 = vlm.vlm_inputs(vlm.with_image_splitting(plain), [[img]], ["What is this?"])
    assert torch.equal(b2["input_ids"], b["input_ids"]) and torch.equal(b2["pixel_values"], b["pixel_values"])
    assert not plain.image_processor.do_image_splitting


def test_generate_with_cache_matches_without(tiny):
    model, proc = tiny
    b = _batch(proc, _items("count", 3))
    with torch.no_grad():
        a = model.generate(**b, max_new_tokens=6, do_sample=False, use_cache=True)
        c = model.generate(**b, max_new_tokens=6, do_sample=False, use_cache=False)
    assert torch.equal(a, c)


def test_boxes_and_points_generated_as_text():
    """A tiny VLM fitted to two items answers with a box and a point the checker accepts."""
    from iclr26.models.vlm_train import answer_batch, answer_loss

    model, proc = vlm.random_vlm(seed=2, text_hidden=48)
    items = [_items("box", 1)[0], _items("point", 1)[0]]
    batch, mask = answer_batch(proc, items)
    assert proc.tokenizer.decode(batch["input_ids"][0][mask[0]]) == " " + items[0].answer + "<end_of_utterance>"
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(80):
        loss = answer_loss(model, batch, mask)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    answers = vlm.generate_answers(model, proc, [it.images for it in items], [it.question for it in items],
                                   max_new_tokens=24)
    assert answers == [it.answer for it in items]
    assert all(vt.check_answer(it, a) for it, a in zip(items, answers))
    assert vt.parse_box(answers[0]) == tuple(float(v) for v in items[0].meta["box"])


def test_save_load_round_trip_offline(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, proc = tiny
    vlm.save_vlm(model, proc, tmp_path / "m")
    m2, p2 = vlm.load_vlm(str(tmp_path / "m"))
    assert type(m2) is type(model) and type(p2).__name__ == "Idefics3Processor"
    b = _batch(proc, _items("shape", 2))
    b2 = _batch(p2, _items("shape", 2))
    assert torch.equal(b["input_ids"], b2["input_ids"]) and torch.equal(b["pixel_values"], b2["pixel_values"])
    with torch.no_grad():
        torch.testing.assert_close(m2(**b2).logits, model(**b).logits)
    assert m2.config._attn_implementation == "eager"


def test_hub_model_config_path(tmp_path, monkeypatch):
    """SmolVLM-256M-Instruct's architecture fields build the class ``load_vlm`` loads, and a hub id
    goes to the same two ``from_pretrained`` calls (intercepted: nothing is downloaded)."""
    from transformers import AutoConfig, AutoModelForImageTextToText, Idefics3ForConditionalGeneration

    cfg = AutoConfig.for_model(**vlm.hub_config())
    assert type(cfg).__name__ == "Idefics3Config"
    assert vlm.image_seq_len(cfg.vision_config.image_size, cfg.vision_config.patch_size, cfg.scale_factor) == 64
    assert AutoModelForImageTextToText._model_mapping[type(cfg)] is Idefics3ForConditionalGeneration
    # a shrunk copy (same class, scale factor 4, 16 px patches) saved and loaded through load_vlm
    small = vlm.hub_config()
    small["text_config"].update(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                num_key_value_heads=2, vocab_size=300)
    small["vision_config"].update(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                                  image_size=128)
    small["image_token_id"] = 257
    m = Idefics3ForConditionalGeneration(AutoConfig.for_model(**small))
    m.save_pretrained(tmp_path / "hub-like")
    (tmp_path / "hub-like" / "preprocessor_config.json").write_text("{}")
    calls = []
    monkeypatch.setattr("transformers.AutoProcessor.from_pretrained", lambda path, **kw: calls.append(path) or "proc")
    m2, p2 = vlm.load_vlm(str(tmp_path / "hub-like"))
    assert isinstance(m2, Idefics3ForConditionalGeneration) and m2.config.scale_factor == 4 and p2 == "proc"

    def fake(path, **kw):
        calls.append(path)
        return m2
    monkeypatch.setattr(AutoModelForImageTextToText, "from_pretrained", fake)
    vlm.load_vlm(vlm.HUB_MODEL)
    assert calls[-2:] == [vlm.HUB_MODEL, vlm.HUB_MODEL]
    with pytest.raises(ValueError, match="unknown VLM"):
        vlm.load_vlm("no-such-model")


def test_text_only_prompt_keeps_the_text_models_logits(tmp_path):
    """vlm_from_text_model copies a causal LM into the text model: text-only logits are unchanged."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = vlm.byte_tokenizer()
    torch.manual_seed(0)
    lm = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                                      pad_token_id=tok.pad_token_id)).eval()
    lm.save_pretrained(tmp_path / "lm")
    tok.save_pretrained(tmp_path / "lm")
    model, proc = vlm.vlm_from_text_model(tmp_path / "lm", vision=dict(hidden_size=16, intermediate_size=32,
                                          num_hidden_layers=1, num_attention_heads=2, image_size=64, patch_size=16))
    ids = tok("Hello there", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        a = lm(ids).logits
        b = model(input_ids=ids).logits
    torch.testing.assert_close(b[..., :a.shape[-1]], a)
    assert model.config.tie_word_embeddings and model.lm_head.weight.data_ptr() == \
        model.model.text_model.embed_tokens.weight.data_ptr()
    # <end_of_utterance> starts as the text model's end-of-sequence row, the other new tokens do not
    eou, eos = proc.tokenizer.convert_tokens_to_ids("<end_of_utterance>"), proc.tokenizer.eos_token_id
    emb = model.get_input_embeddings().weight
    assert eou >= a.shape[-1] and eos < a.shape[-1]
    torch.testing.assert_close(emb[eou], lm.get_input_embeddings().weight[eos])
    img = proc.tokenizer.convert_tokens_to_ids("<image>")
    assert not torch.equal(emb[img], emb[eos])
    ids = proc.tokenizer("Hi<end_of_utterance>", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, -1]
    assert logits[eou] == pytest.approx(float(logits[eos]), abs=1e-5)


# ------------------------------------------------------------------------------------ training code
def test_pixel_values_and_shuffle_match_the_processor_and_connector(tiny):
    from iclr26.models.vlm_train import _token_cells, pixel_shuffle, pixel_values_of

    model, proc = tiny
    items = _items("colour", 3)
    b = _batch(proc, items)
    torch.testing.assert_close(b["pixel_values"][:, 0], pixel_values_of([it.images[0] for it in items], 32))
    x = torch.randn(2, 64, 5)
    torch.testing.assert_close(pixel_shuffle(x, 2), vlm.connector(model).pixel_shuffle(x, 2))
    assert _token_cells(8, 2)[:5] == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0)]


def _tiny_recipe():
    from iclr26.models.vlm_train import DEFAULT_RECIPE

    return replace(DEFAULT_RECIPE, vision=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                               num_attention_heads=2, image_size=64, patch_size=16),
                   tower_steps=3, tower_batch=4, connector_steps=2, lora_steps=3, lm_batch=2, eval_n=1,
                   checkpoint_every=1, task_weights=dict(colour=1.0, count=1.0), eval_tasks=("colour",))


@pytest.mark.slow
def test_staged_build_is_deterministic_and_resumes(tmp_path, monkeypatch):
    """Stages on a tiny text model: two builds agree bit for bit, and a build killed in the LoRA stage
    resumes from its checkpoint to the same weights."""
    from safetensors.torch import load_file
    from transformers import LlamaConfig, LlamaForCausalLM

    from iclr26.models import vlm_train

    tok = vlm.byte_tokenizer()
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                                 pad_token_id=tok.pad_token_id)).save_pretrained(tmp_path / "lm")
    tok.save_pretrained(tmp_path / "lm")
    r = _tiny_recipe()
    kw = dict(recipe=r, text_dir=tmp_path / "lm", progress=False)
    a = vlm_train.prepare_tiny_vlm(1, root=tmp_path / "a", **kw)
    assert vlm_train.built_seeds(tmp_path / "a") == [1]
    ev = json.loads((a / "eval.json").read_text())
    assert set(ev) == {"colour"} and ev["colour"]["chance"] == pytest.approx(1 / 6) and ev["colour"]["n"] == 1
    build = json.loads((a / "build.json").read_text())
    assert set(build["cpu_s"]) == {"tower", "connector", "lora", "eval"}

    real = vlm_train._answer_loss
    calls = {"n": 0}

    def dying(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 4:                     # the 2nd step of the LoRA stage (2 connector steps first)
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(vlm_train, "_answer_loss", dying)
    with pytest.raises(KeyboardInterrupt):
        vlm_train.prepare_tiny_vlm(1, root=tmp_path / "b", evaluate=False, **kw)
    assert (tmp_path / "b" / "seed-1.work" / "lora-progress.pt").exists()
    monkeypatch.setattr(vlm_train, "_answer_loss", real)
    b = vlm_train.prepare_tiny_vlm(1, root=tmp_path / "b", evaluate=False, **kw)
    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    m, p = vlm.load_vlm(str(b))
    assert not any("lora" in n for n, _ in m.named_parameters())
    with pytest.raises(ValueError, match="seed"):
        vlm_train.prepare_tiny_vlm(-1, root=tmp_path / "c", evaluate=False, **kw)


def test_models_prepare_dispatches_tiny_vlm(monkeypatch):
    from iclr26.models import catalog as models
    from iclr26.models import vlm_train

    seen = []
    monkeypatch.setattr(vlm_train, "prepare_tiny_vlm", lambda seed=0, **kw: seen.append(seed) or f"seed{seed}")
    assert models.prepare("tiny-vlm") == "seed0" and models.prepare("tiny-vlm:3") == "seed3"
    rows = {r["name"]: r for r in models.available_models()}
    assert rows["tiny-vlm"]["arch"] == "idefics3"
    with pytest.raises(ValueError, match="unknown bundled model"):
        models.prepare("tiny-vlm:x")


def test_accuracy_table_and_page(tmp_path):
    from iclr26.models import vlm_train

    assert "No seed is built" in vlm_train.accuracy_table(tmp_path)
    for s, acc in ((0, 0.9), (2, 0.7)):
        d = vlm_train.seed_dir(s, tmp_path)
        d.mkdir(parents=True)
        (d / "eval.json").write_text(json.dumps({"colour": dict(accuracy=acc, chance=1 / 6, n=40, examples=[]),
                                                 "read_pseudo": dict(accuracy=0.1, chance=0.0, n=40, examples=[])}))
        (d / "build.json").write_text(json.dumps(dict(cpu_s=dict(tower=600, connector=300, lora=900, eval=60),
                                                      threads=1, tower_eval=dict(read_seen=0.8))))
    table = vlm_train.accuracy_table(tmp_path)
    assert "| colour | 0.17 | 0.90 | 0.70 |" in table and "| read (pseudo-words) | 0.00 | 0.10 | 0.10 |" in table
    assert "read_seen 0.80" in table and "| 2 | 600 | 300 | 900 | 60 | 1 |" in table
    page = tmp_path / "PAGE.md"
    page.write_text("x\n<!-- tiny-vlm:begin -->\nold\n<!-- tiny-vlm:end -->\ny\n")
    vlm_train.write_page(page, tmp_path)
    assert "old" not in page.read_text() and table in page.read_text() and page.read_text().endswith("y\n")
    page.write_text("no markers")
    with pytest.raises(ValueError, match="markers"):
        vlm_train.write_page(page, tmp_path)


def test_a_tower_of_another_recipe_is_not_reused(tmp_path):
    from iclr26.models import vlm_train

    r = _tiny_recipe()
    out = tmp_path / "tower-0"
    out.mkdir()
    vlm_train._save(dict(recipe=replace(r, tower_steps=99).key(), tower={}, eval={}, cpu_s=0.0), out / "tower.pt")
    with pytest.raises(RuntimeError, match="another tower recipe"):
        vlm_train._run_tower(r, tmp_path, vlm_train._Progress(1, "t", False))
    # LM-stage settings are not part of the tower's identity
    assert vlm_train._tower_key(replace(r, lora_steps=7)) == vlm_train._tower_key(r)


def test_patch_letter_loss_weights_the_no_letter_class_by_the_recipe():
    import torch.nn.functional as F
    from iclr26.models import vlm_train

    r = _tiny_recipe()
    imgs, tg = vlm_train._tower_batch(r, 0, 6, kinds=["word"])
    px = vlm_train.pixel_values_of(imgs, r.vision["image_size"])
    target = torch.as_tensor(tg["patch_letters"]).reshape(-1)
    assert (target == vlm_train._END).any() and (target != vlm_train._END).any()
    losses, patch_terms = {}, {}
    for wnone in (1.0, 0.05):
        net = vlm_train._build_pretrainer(replace(r, patch_none_weight=wnone))   # same init (tower_seed)
        with torch.no_grad():
            losses[wnone] = float(vlm_train._tower_loss(net, px, tg))
            logits = net(px, patches=True)[3].reshape(-1, 27)
        w = torch.ones(27)
        w[vlm_train._END] = wnone
        patch_terms[wnone] = float(F.cross_entropy(logits, target, weight=w))
    assert losses[0.05] - losses[1.0] == pytest.approx(patch_terms[0.05] - patch_terms[1.0], rel=1e-4, abs=1e-6)
    assert abs(patch_terms[0.05] - patch_terms[1.0]) > 1e-3
    # the weight is part of the tower's identity: a tower trained at another weight is not reused
    assert vlm_train._tower_key(replace(r, patch_none_weight=1.0)) != vlm_train._tower_key(r)
