"""Reaching inside transformers language models: read and patch activations, zero attention heads,
drop decoder blocks (or only their attention / MLP sub-block), and take gradients per layer.

Every intervention is a context manager that registers forward hooks (or, for dropping, a temporary
instance-level ``forward``) and removes them in a ``finally`` clause, so the model is left exactly as
it was even when the body raises.

Supported layouts (found by attribute, no architecture table): decoder stacks at
``model.model.layers`` (Llama, Qwen2, Gemma-3, Mistral, OLMo-2 ...), ``model.transformer.h`` (GPT-2)
or ``model.gpt_neox.layers``; attention at ``layer.self_attn`` / ``layer.attn`` / ``layer.attention``
with its output projection ``o_proj`` / ``c_proj`` / ``out_proj`` / ``dense``; MLP at ``layer.mlp``.

>>> with record_activations(model, {"l3": decoder_layers(model)[3]}) as acts:   # doctest: +SKIP
...     model(ids)
>>> acts["l3"][0].shape                                                         # doctest: +SKIP
"""
from __future__ import annotations

import contextlib
import operator
from typing import Callable, Iterable, Mapping

import torch
from torch import nn

__all__ = [
    "decoder_layers", "attention_module", "output_projection", "mlp_module", "head_layout", "get_module",
    "record_activations", "patch_activations", "zero_heads", "drop_blocks", "layer_gradients",
    "param_grads_by_layer",
]

_STACKS = ("model.layers", "model.decoder.layers", "transformer.h", "gpt_neox.layers", "layers")
_ATTN = ("self_attn", "attn", "attention")
_OPROJ = ("o_proj", "c_proj", "out_proj", "dense")
_PARTS = ("layer", "attention", "mlp")


def get_module(model: nn.Module, name: str) -> nn.Module:
    """The submodule called ``name`` (dotted path as in ``model.named_modules()``)."""
    if name == "":
        return model
    try:
        return model.get_submodule(name)
    except AttributeError as e:
        raise ValueError(f"model has no submodule {name!r} (names are those of model.named_modules())") from e


def _attr_path(obj, path: str):
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The list of decoder blocks of ``model`` (a causal LM or its base model)."""
    for path in _STACKS:
        found = _attr_path(model, path)
        if isinstance(found, nn.ModuleList) and len(found) > 0:
            return found
    raise ValueError(
        f"cannot find the decoder blocks of {type(model).__name__}: looked for a non-empty ModuleList at "
        f"{', '.join(_STACKS)}"
    )


def attention_module(layer: nn.Module) -> nn.Module:
    """The attention sub-block of a decoder block."""
    for name in _ATTN:
        mod = getattr(layer, name, None)
        if isinstance(mod, nn.Module):
            return mod
    raise ValueError(f"{type(layer).__name__} has no attention sub-block (looked for {', '.join(_ATTN)})")


def mlp_module(layer: nn.Module) -> nn.Module:
    """The MLP sub-block of a decoder block."""
    mod = getattr(layer, "mlp", None)
    if not isinstance(mod, nn.Module):
        raise ValueError(f"{type(layer).__name__} has no MLP sub-block (looked for 'mlp')")
    return mod


def output_projection(attn: nn.Module) -> nn.Module:
    """The attention output projection, whose input is the concatenation of the heads' outputs."""
    for name in _OPROJ:
        mod = getattr(attn, name, None)
        if isinstance(mod, nn.Module):
            return mod
    raise ValueError(f"{type(attn).__name__} has no output projection (looked for {', '.join(_OPROJ)})")


def head_layout(model: nn.Module) -> tuple[int, int, int]:
    """``(n_layers, n_heads, head_dim)`` of the model's self-attention (query heads)."""
    cfg = getattr(model, "config", None)
    cfg = getattr(cfg, "text_config", None) or cfg
    n_heads = getattr(cfg, "num_attention_heads", None) or getattr(cfg, "n_head", None)
    hidden = getattr(cfg, "hidden_size", None) or getattr(cfg, "n_embd", None)
    if not n_heads or not hidden:
        raise ValueError("model.config must give num_attention_heads (n_head) and hidden_size (n_embd)")
    head_dim = getattr(cfg, "head_dim", None) or hidden // n_heads
    return len(decoder_layers(model)), int(n_heads), int(head_dim)


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def _replace_first(out, new):
    if isinstance(out, tuple):
        return (new,) + tuple(out[1:])
    if isinstance(out, list):
        return [new] + list(out[1:])
    return new


def _as_modules(model: nn.Module, modules) -> dict[str, nn.Module]:
    if isinstance(modules, Mapping):
        items = dict(modules)
    elif isinstance(modules, str):
        items = {modules: modules}
    else:
        items = {m if isinstance(m, str) else str(i): m for i, m in enumerate(modules)}
    out = {}
    for key, mod in items.items():
        mod = get_module(model, mod) if isinstance(mod, str) else mod
        if not isinstance(mod, nn.Module):
            raise ValueError(f"{key!r}: expected an nn.Module or a submodule name, got {type(mod).__name__}")
        out[str(key)] = mod
    if not out:
        raise ValueError("no modules given")
    return out


@contextlib.contextmanager
def record_activations(model: nn.Module, modules, *, which: str = "output", detach: bool = True):
    """Record what ``modules`` receive or return on every forward pass inside the block.

    ``modules``: a dict ``name -> module or submodule name``, or a list of names. ``which``:
    ``"output"`` (the module's output, first element when it returns a tuple) or ``"input"`` (its
    first positional argument, or ``hidden_states`` when passed by keyword). Yields
    ``{name: [tensor per call]}``; tensors are detached unless ``detach=False``.
    """
    if which not in ("output", "input"):
        raise ValueError(f"which must be 'output' or 'input', got {which!r}")
    mods = _as_modules(model, modules)
    store: dict[str, list] = {k: [] for k in mods}
    handles = []

    def make(key):
        if which == "output":
            def hook(_m, _args, out):
                t = _first(out)
                store[key].append(t.detach() if detach else t)
            return hook

        def pre(_m, args, kwargs):
            t = args[0] if args else kwargs.get("hidden_states", kwargs.get("input"))
            if t is None:
                raise ValueError(f"{key!r}: could not find the module's input (no positional argument)")
            store[key].append(t.detach() if detach else t)
        return pre

    try:
        for key, mod in mods.items():
            if which == "output":
                handles.append(mod.register_forward_hook(make(key)))
            else:
                handles.append(mod.register_forward_pre_hook(make(key), with_kwargs=True))
        yield store
    finally:
        for h in handles:
            h.remove()


@contextlib.contextmanager
def patch_activations(model: nn.Module, patches: Mapping):
    """Replace module outputs: ``patches`` maps a module (or submodule name) to ``fn(output) -> new``.

    For a module that returns a tuple, ``fn`` receives and replaces the first element only. ``fn``
    may also return a tensor of the same shape built from stored activations (activation patching).
    """
    if not isinstance(patches, Mapping) or not patches:
        raise ValueError("patches must be a non-empty mapping module (or name) -> callable")
    handles = []
    try:
        for key, fn in patches.items():
            mod = get_module(model, key) if isinstance(key, str) else key
            if not isinstance(mod, nn.Module):
                raise ValueError(f"patch key {key!r} is neither a module nor a submodule name")
            if not callable(fn):
                raise ValueError(f"patch for {key!r} must be callable, got {type(fn).__name__}")

            def hook(_m, _args, out, fn=fn, key=key):
                old = _first(out)
                new = fn(old)
                if not isinstance(new, torch.Tensor) or new.shape != old.shape:
                    raise ValueError(
                        f"patch for {key!r} must return a tensor of shape {tuple(old.shape)}, "
                        f"got {getattr(new, 'shape', type(new).__name__)}"
                    )
                return _replace_first(out, new)

            handles.append(mod.register_forward_hook(hook))
        yield
    finally:
        for h in handles:
            h.remove()


def _head_mask(model: nn.Module, mask) -> torch.Tensor:
    n_layers, n_heads, _ = head_layout(model)
    if isinstance(mask, Mapping):
        m = torch.ones(n_layers, n_heads)
        for layer, heads in mask.items():
            if not 0 <= int(layer) < n_layers:
                raise ValueError(f"layer {layer} out of range [0, {n_layers})")
            for h in ([heads] if isinstance(heads, int) else heads):
                if not 0 <= int(h) < n_heads:
                    raise ValueError(f"head {h} of layer {layer} out of range [0, {n_heads})")
                m[int(layer), int(h)] = 0.0
        return m
    m = torch.as_tensor(mask)
    if tuple(m.shape) != (n_layers, n_heads):
        raise ValueError(f"head mask must have shape (n_layers, n_heads) = {(n_layers, n_heads)}, got {tuple(m.shape)}")
    if m.dtype == torch.bool:
        return (~m).float()  # True = zero this head
    m = m.float()
    if not torch.isfinite(m).all():
        raise ValueError("head mask must be finite")
    return m


@contextlib.contextmanager
def zero_heads(model: nn.Module, mask):
    """Zero (or scale) attention heads at the input of the output projection (pre-``o_proj``).

    ``mask``: a bool tensor ``[n_layers, n_heads]`` with True for the heads to zero, a float tensor of
    the same shape with the multiplier of each head's output (1 keeps, 0 zeroes), or a dict
    ``{layer: [heads]}`` of heads to zero. Only layers with some head not kept unchanged get a hook.
    """
    m = _head_mask(model, mask)
    n_layers, n_heads, head_dim = head_layout(model)
    layers = decoder_layers(model)
    handles = []
    try:
        for li in range(n_layers):
            if torch.all(m[li] == 1.0):
                continue
            proj = output_projection(attention_module(layers[li]))

            def pre(_m, args, scale=m[li]):
                x = args[0]
                if x.shape[-1] != n_heads * head_dim:
                    raise ValueError(
                        f"o_proj input has {x.shape[-1]} features, expected n_heads*head_dim = {n_heads * head_dim}"
                    )
                s = scale.to(device=x.device, dtype=x.dtype).repeat_interleave(head_dim)
                return (x * s,) + tuple(args[1:])

            handles.append(proj.register_forward_pre_hook(pre))
        yield m
    finally:
        for h in handles:
            h.remove()


def _identity_layer_forward(*args, **kwargs):
    hidden = args[0] if args else kwargs["hidden_states"]
    return hidden


def _zero_attention_forward(*args, **kwargs):
    hidden = args[0] if args else kwargs["hidden_states"]
    return torch.zeros_like(hidden), None


def _zero_mlp_forward(*args, **kwargs):
    hidden = args[0] if args else kwargs["hidden_states" if "hidden_states" in kwargs else "x"]
    return torch.zeros_like(hidden)


@contextlib.contextmanager
def drop_blocks(model: nn.Module, layers: Iterable[int], part: str = "layer"):
    """Skip decoder blocks: ``part="layer"`` makes each listed block the identity on its hidden state
    (ShortGPT-style layer removal); ``"attention"`` removes only the attention sub-block (its output
    becomes 0, so the residual passes unchanged: LLMDrop / EntroDrop attention dropping); ``"mlp"``
    removes only the MLP sub-block.

    The dropped modules are not run at all (their ``forward`` is replaced on the instance for the
    duration of the block), so dropping also saves their compute. Negative indices count from the end.
    """
    if part not in _PARTS:
        raise ValueError(f"part must be one of {_PARTS}, got {part!r}")
    stack = decoder_layers(model)
    n = len(stack)
    idx = []
    for li in layers:
        if isinstance(li, bool) or not hasattr(li, "__index__"):
            raise ValueError(f"layer indices must be integers, got {li!r}")
        li = operator.index(li)
        if not -n <= li < n:
            raise ValueError(f"layer index {li} out of range for {n} decoder blocks")
        idx.append(li % n)
    if len(set(idx)) != len(idx):
        raise ValueError(f"duplicate layer indices in {list(layers)}")
    targets = []
    for li in idx:
        if part == "layer":
            targets.append((stack[li], _identity_layer_forward))
        elif part == "attention":
            targets.append((attention_module(stack[li]), _zero_attention_forward))
        else:
            targets.append((mlp_module(stack[li]), _zero_mlp_forward))
    saved = []
    try:
        for mod, fwd in targets:
            saved.append((mod, "forward" in mod.__dict__, mod.__dict__.get("forward")))
            mod.forward = fwd
        yield sorted(idx)
    finally:
        for mod, had, old in reversed(saved):
            if had:
                mod.forward = old
            else:
                del mod.forward


@contextlib.contextmanager
def layer_gradients(model: nn.Module, layers: Iterable[int] | None = None):
    """Gradients of the loss with respect to each decoder block's output hidden state.

    Yields ``{layer_index: [grad tensor per forward call]}``, filled when ``backward`` runs inside
    the block. ``layers`` defaults to all blocks.
    """
    stack = decoder_layers(model)
    n = len(stack)
    idx = list(range(n)) if layers is None else [int(li) % n if -n <= int(li) < n else None for li in layers]
    if any(i is None for i in idx):
        raise ValueError(f"layer indices out of range for {n} decoder blocks: {list(layers)}")
    grads: dict[int, list] = {i: [] for i in idx}
    handles = []

    def make(i):
        def hook(_m, _args, out):
            t = _first(out)
            if t.requires_grad:
                t.register_hook(lambda g: grads[i].append(g.detach()))
        return hook

    try:
        for i in idx:
            handles.append(stack[i].register_forward_hook(make(i)))
        yield grads
    finally:
        for h in handles:
            h.remove()


def param_grads_by_layer(model: nn.Module, reduce: str | None = None) -> dict:
    """The parameter gradients after ``backward``, grouped by decoder block.

    Returns ``{layer_index: {param_name: grad}}`` (names relative to the block); with
    ``reduce="norm"`` the value per block is the L2 norm over all its parameter gradients,
    and with ``reduce="sum_abs"`` the sum of absolute gradient entries. Parameters without a
    gradient are skipped.
    """
    if reduce not in (None, "norm", "sum_abs"):
        raise ValueError(f"reduce must be None, 'norm' or 'sum_abs', got {reduce!r}")
    out = {}
    for i, layer in enumerate(decoder_layers(model)):
        g = {name: p.grad.detach() for name, p in layer.named_parameters() if p.grad is not None}
        if reduce == "norm":
            out[i] = float(torch.sqrt(sum((v.double() ** 2).sum() for v in g.values()))) if g else 0.0
        elif reduce == "sum_abs":
            out[i] = float(sum(v.double().abs().sum() for v in g.values())) if g else 0.0
        else:
            out[i] = g
    return out
