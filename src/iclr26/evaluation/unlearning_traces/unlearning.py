"""The two unlearning methods whose traces arXiv:2506.14003 detects: NPO and RMU.

* NPO, Negative Preference Optimization (Zhang et al. 2024, arXiv:2404.05868, Eq. 3):
  ``L_NPO = -(2/beta) E_forget[ log sigmoid( -beta log(pi_theta(y|x) / pi_ref(y|x)) ) ]``,
  with ``beta = 0.1`` (Zhang et al., Sec. 5; the setting the trace paper uses for WMDP), usually plus a
  retain NLL term (NPO+RT). As ``beta -> 0`` its gradient is gradient ascent's, ``grad log pi_theta``.
* RMU, Representation Misdirection for Unlearning (Li et al. 2024, WMDP, arXiv:2403.03218, Sec. 5):
  at layer ``l`` push the updated model's activations on forget tokens toward ``c * u`` (``u`` uniform
  on [0, 1)^d, normalised once) and keep them on retain tokens equal to the frozen model's:
  ``L = mean ||M_upd(x_f) - c u||^2 + alpha mean ||M_upd(x_r) - M_frozen(x_r)||^2``; only the MLP
  output projections of layers ``l-2 .. l`` train. Zephyr-7B setting: ``l = 7``, ``c = 6.5``,
  ``alpha = 1200`` (Li et al., Appendix B.4).

The losses are pure tensor functions; :class:`UnlearningTrainer` is a thin ``transformers.Trainer``
subclass that computes them on (forget, retain) batches of any causal LM.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from iclr26.models.hooks import decoder_layers

__all__ = ["NPO_BETA", "RMU_LAYER", "RMU_COEFF", "RMU_ALPHA", "sequence_logps", "npo_loss", "gradient_ascent_loss",
           "control_vector", "masked_mse", "rmu_loss", "layer_activations", "rmu_parameters", "unlearning_rows",
           "collate_unlearning", "UnlearningTrainer"]

#: NPO inverse temperature (Zhang et al. 2024, Sec. 5)
NPO_BETA = 0.1
#: RMU layer, steering coefficient and retain weight for Zephyr-7B (Li et al. 2024, Appendix B.4)
RMU_LAYER, RMU_COEFF, RMU_ALPHA = 7, 6.5, 1200.0


def sequence_logps(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``log pi(y|x)`` per row: the sum of next-token log-probabilities over positions whose (shifted)
    label is not -100. ``logits``: (B, T, V); ``labels``: (B, T), aligned with the inputs."""
    if logits.dim() != 3 or labels.shape != logits.shape[:2]:
        raise ValueError(f"logits must be (B, T, V) and labels (B, T); got {tuple(logits.shape)} and "
                         f"{tuple(labels.shape)}")
    lab = labels[:, 1:]
    mask = lab != -100
    lp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    tok = torch.gather(lp, 2, lab.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return (tok * mask).sum(-1)


def npo_loss(policy_logps: torch.Tensor, ref_logps: torch.Tensor, beta: float = NPO_BETA) -> torch.Tensor:
    """NPO forget loss (Zhang et al. 2024, Eq. 3), averaged over the batch:
    ``-(2/beta) mean log sigmoid(-beta (policy_logps - ref_logps))``."""
    if not beta > 0:
        raise ValueError(f"NPO beta must be > 0, got {beta!r}")
    if policy_logps.shape != ref_logps.shape:
        raise ValueError(f"policy_logps {tuple(policy_logps.shape)} and ref_logps {tuple(ref_logps.shape)} differ")
    return -(2.0 / beta) * F.logsigmoid(-beta * (policy_logps - ref_logps)).mean()


def gradient_ascent_loss(policy_logps: torch.Tensor) -> torch.Tensor:
    """Gradient ascent on the forget NLL (the loss NPO reduces to as beta -> 0): ``mean log pi(y|x)``."""
    return policy_logps.mean()


def control_vector(dim: int, coeff: float = RMU_COEFF, generator: torch.Generator | None = None) -> torch.Tensor:
    """RMU's target ``c * u``: ``u`` drawn uniform on [0, 1)^dim and scaled to unit norm (Li et al., Sec. 5)."""
    if not isinstance(dim, int) or isinstance(dim, bool) or dim < 1:
        raise ValueError(f"dim must be a positive integer, got {dim!r}")
    if not coeff > 0:
        raise ValueError(f"the steering coefficient must be > 0, got {coeff!r}")
    u = torch.rand(dim, generator=generator)
    return coeff * u / u.norm()


def masked_mse(x: torch.Tensor, target: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean of ``(x - target)^2`` over the hidden dimension and the token positions where ``mask`` is 1
    (all positions when ``mask`` is None). ``x``: (B, T, d); ``target`` broadcasts to it."""
    sq = (x.float() - target.float()) ** 2
    if mask is None:
        return sq.mean()
    m = mask.to(sq.dtype).unsqueeze(-1)
    n = m.sum() * sq.shape[-1]
    if n == 0:
        raise ValueError("the mask selects no token")
    return (sq * m).sum() / n


def rmu_loss(forget_acts, retain_acts, frozen_retain_acts, control, alpha: float = RMU_ALPHA,
             forget_mask=None, retain_mask=None):
    """RMU objective (Li et al. 2024, Sec. 5): ``mse(forget_acts, control) + alpha * mse(retain_acts,
    frozen_retain_acts)``. Returns ``(total, forget_term, retain_term)``."""
    if alpha < 0:
        raise ValueError(f"alpha must be >= 0, got {alpha!r}")
    if retain_acts.shape != frozen_retain_acts.shape:
        raise ValueError(f"retain activations {tuple(retain_acts.shape)} and frozen ones "
                         f"{tuple(frozen_retain_acts.shape)} differ")
    lf = masked_mse(forget_acts, control, forget_mask)
    lr = masked_mse(retain_acts, frozen_retain_acts.detach(), retain_mask)
    return lf + alpha * lr, lf, lr


METHODS = ("npo", "rmu", "retain")


class _Stop(Exception):
    pass


def layer_activations(model, layer: int, input_ids, attention_mask=None) -> torch.Tensor:
    """The output of decoder block ``layer`` (0-based) for ``input_ids``: (B, T, d). The forward pass
    stops after that block, so later blocks cost nothing."""
    layers = decoder_layers(model)
    if not 0 <= layer < len(layers):
        raise ValueError(f"layer must be in [0, {len(layers) - 1}], got {layer!r}")
    box = []

    def hook(_m, _a, out):
        box.append(out[0] if isinstance(out, tuple) else out)
        raise _Stop

    h = layers[layer].register_forward_hook(hook)
    try:
        model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
    except _Stop:
        pass
    finally:
        h.remove()
    return box[0]


def rmu_parameters(model, layer: int = RMU_LAYER, span: int = 3) -> list:
    """Freeze ``model`` except the MLP output projections (``down_proj``) of blocks
    ``layer - span + 1 .. layer`` (RMU's choice: layers 5, 6, 7 for layer 7); return those weights."""
    layers = decoder_layers(model)
    if not 0 <= layer < len(layers) or not 1 <= span <= layer + 1:
        raise ValueError(f"need 0 <= layer < {len(layers)} and 1 <= span <= layer + 1; got layer={layer!r}, "
                         f"span={span!r}")
    for p in model.parameters():
        p.requires_grad_(False)
    out = []
    for i in range(layer - span + 1, layer + 1):
        w = layers[i].mlp.down_proj.weight
        w.requires_grad_(True)
        out.append(w)
    return out


def unlearning_rows(tokenizer, forget: list[dict], retain: list[dict], n_rows: int) -> list[dict]:
    """``n_rows`` training rows, each pairing a forget and a retain example (cycled in order).
    Examples are ``{"prompt", "answer"}`` strings; labels cover the answer tokens only."""
    if not forget or not retain:
        raise ValueError("both the forget and the retain set need at least one example")

    def enc(ex):
        p = tokenizer(ex["prompt"], add_special_tokens=False).input_ids
        a = tokenizer(ex["answer"], add_special_tokens=False).input_ids
        return p + a, [-100] * len(p) + a

    rows = []
    for i in range(n_rows):
        fi, fl = enc(forget[i % len(forget)])
        ri, rl = enc(retain[i % len(retain)])
        rows.append(dict(forget_input_ids=fi, forget_labels=fl, retain_input_ids=ri, retain_labels=rl))
    return rows


def collate_unlearning(rows: list[dict], pad_id: int) -> dict:
    """Right-pad the forget and retain halves of ``rows`` into tensors (labels padded with -100)."""
    out = {}
    for part in ("forget", "retain"):
        ids = [r[f"{part}_input_ids"] for r in rows]
        T = max(len(x) for x in ids)
        out[f"{part}_input_ids"] = torch.tensor([x + [pad_id] * (T - len(x)) for x in ids])
        out[f"{part}_attention_mask"] = torch.tensor([[1] * len(x) + [0] * (T - len(x)) for x in ids])
        out[f"{part}_labels"] = torch.tensor([r[f"{part}_labels"] + [-100] * (T - len(r[f"{part}_labels"]))
                                              for r in rows])
    return out


def _trainer_base():
    from transformers import Trainer
    return Trainer


class UnlearningTrainer(_trainer_base()):
    """``transformers.Trainer`` whose loss is NPO (+ retain NLL) or RMU on (forget, retain) batches.

    ``method="npo"``: ``model`` must be a peft model (the reference policy is the model with its
    adapters disabled); loss ``npo_loss + retain_weight * NLL(retain)``.
    ``method="rmu"``: ``frozen_model`` is a frozen copy of the original; call :func:`rmu_parameters`
    on ``model`` first; loss :func:`rmu_loss` at ``layer`` with target ``control``.
    ``method="retain"``: the control arm, NPO+RT with its forget term removed: the loss is the retain
    NLL alone (a benign continued fine-tune with the same data stream, steps and adapters), so that
    a detector's accuracy on it measures what any update leaves, not what unlearning leaves.
    Rows come from :func:`unlearning_rows`.
    """

    def __init__(self, *args, method: str, beta: float = NPO_BETA, retain_weight: float = 1.0,
                 frozen_model=None, layer: int = RMU_LAYER, control=None, alpha: float = RMU_ALPHA, **kwargs):
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        if method == "rmu" and (frozen_model is None or control is None):
            raise ValueError("method 'rmu' needs frozen_model and control (see control_vector)")
        tok = kwargs.get("processing_class")
        pad = tok.pad_token_id if tok is not None and tok.pad_token_id is not None else 0
        kwargs.setdefault("data_collator", lambda rows: collate_unlearning(rows, pad))
        super().__init__(*args, **kwargs)
        self.method, self.beta, self.retain_weight = method, beta, retain_weight
        self.frozen_model, self.layer, self.rmu_control, self.alpha = frozen_model, layer, control, alpha

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        f_ids, f_mask = inputs["forget_input_ids"], inputs["forget_attention_mask"]
        r_ids, r_mask = inputs["retain_input_ids"], inputs["retain_attention_mask"]
        if self.method == "npo":
            pol = sequence_logps(model(input_ids=f_ids, attention_mask=f_mask).logits, inputs["forget_labels"])
            with torch.no_grad(), model.disable_adapter():
                ref = sequence_logps(model(input_ids=f_ids, attention_mask=f_mask).logits, inputs["forget_labels"])
            loss = npo_loss(pol, ref, self.beta)
            if self.retain_weight:
                out = model(input_ids=r_ids, attention_mask=r_mask, labels=inputs["retain_labels"])
                loss = loss + self.retain_weight * out.loss
        elif self.method == "retain":
            loss = model(input_ids=r_ids, attention_mask=r_mask, labels=inputs["retain_labels"]).loss
        else:
            h_f = layer_activations(model, self.layer, f_ids, f_mask)
            h_r = layer_activations(model, self.layer, r_ids, r_mask)
            with torch.no_grad():
                h_r0 = layer_activations(self.frozen_model, self.layer, r_ids, r_mask)
            loss, _, _ = rmu_loss(h_f, h_r, h_r0, self.rmu_control.to(h_f.dtype), self.alpha, f_mask, r_mask)
        return (loss, None) if return_outputs else loss
