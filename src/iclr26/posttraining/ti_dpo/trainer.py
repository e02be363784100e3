"""``TIDPOTrainer``: TRL's ``DPOTrainer`` with the TI-DPO loss (arXiv:2505.19653, Algorithm 1).

Each training step, for a batch of pairs ``(x, y_w, y_l)``:

1. per-token log-probabilities of ``y_w`` and ``y_l`` under the policy and the frozen reference (TRL's
   own fused log-prob path, so with uniform weights and ``gamma = 0`` the loss is TRL's DPO loss);
2. hybrid token weights (Eq. 7): gradient attribution of the current policy (Eq. 5-6, one extra
   forward and backward pass, :func:`.token_importance`) mixed with the Gaussian position prior;
3. an anchor ``y ~ pi_theta(.|x)`` sampled from the current policy for each prompt (Section 4.3),
   and its log-ratio ``log pi/pi_ref``;
4. ``L = L_DPO-w + gamma * L_triplet`` (Eq. 11, :func:`.ti_dpo_loss`).

Tokenisation, batching, PEFT reference handling (the adapter-free base model is the reference) and
the optimiser are ``DPOTrainer``'s.
"""
from __future__ import annotations

import contextlib

import torch
from trl import DPOTrainer

from .importance import token_importance
from .loss import (DEFAULT_GAMMA, DEFAULT_LAMBDA, DEFAULT_TRIPLET_MARGIN, hybrid_weights, ti_dpo_loss,
                   weighted_logratio)

__all__ = ["TIDPOTrainer", "WEIGHTINGS", "preference_margins"]

#: token weighting schemes: the paper's hybrid (Eq. 7), or uniform (plain DPO token sums)
WEIGHTINGS = ("hybrid", "uniform")


def _ref_context(trainer):
    """The reference: the adapter-free (or initial "ref" adapter) model of a PEFT policy trained
    without a separate ``ref_model``, as in ``DPOTrainer``."""
    from accelerate.utils import is_peft_model
    from trl.trainer.utils import use_adapter

    if trainer.ref_model is None and is_peft_model(trainer.model):
        unwrapped = trainer.accelerator.unwrap_model(trainer.model)
        return use_adapter(unwrapped, adapter_name="ref" if "ref" in unwrapped.peft_config else None)
    return contextlib.nullcontext()


class TIDPOTrainer(DPOTrainer):
    """``trl.DPOTrainer`` with the TI-DPO loss.

    Parameters (besides ``DPOTrainer``'s; ``beta`` is ``DPOConfig.beta``, 0.1 in Table B12)
    ----------
    lam : hybrid mix of gradient attribution and Gaussian prior (0.7, Table B12).
    gamma : triplet weight (0.1, Table B12); 0 is the no-triplet ablation.
    triplet_margin : triplet margin ``alpha`` (0.01, the official run script).
    weighting : "hybrid" (the paper) or "uniform" (all token weights 1).
    anchor_max_new_tokens, anchor_temperature, anchor_top_k, anchor_top_p : sampling of the anchor
        from the current policy (64 / 0.8 / 50 / 0.95 in the official code).

    Needs ``precompute_ref_log_probs=False`` (per-token reference log-probabilities are used),
    ``loss_type="sigmoid"``, ``f_divergence_type="reverse_kl"`` and no ``ld_alpha``.
    """

    def __init__(self, *args, lam: float = DEFAULT_LAMBDA, gamma: float = DEFAULT_GAMMA,
                 triplet_margin: float = DEFAULT_TRIPLET_MARGIN, weighting: str = "hybrid",
                 anchor_max_new_tokens: int = 64, anchor_temperature: float = 0.8, anchor_top_k: int = 50,
                 anchor_top_p: float = 0.95, **kwargs):
        if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not 0 <= lam <= 1:
            raise ValueError(f"lam must be a number in [0, 1], got {lam!r}")
        for name, v in (("gamma", gamma), ("triplet_margin", triplet_margin)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
                raise ValueError(f"{name} must be a non-negative number, got {v!r}")
        if weighting not in WEIGHTINGS:
            raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}")
        if isinstance(anchor_max_new_tokens, bool) or not isinstance(anchor_max_new_tokens, int) \
                or anchor_max_new_tokens < 1:
            raise ValueError(f"anchor_max_new_tokens must be a positive integer, got {anchor_max_new_tokens!r}")
        if not (isinstance(anchor_temperature, (int, float)) and anchor_temperature > 0):
            raise ValueError(f"anchor_temperature must be > 0, got {anchor_temperature!r}")
        if not (isinstance(anchor_top_p, (int, float)) and 0 < anchor_top_p <= 1):
            raise ValueError(f"anchor_top_p must be in (0, 1], got {anchor_top_p!r}")
        if isinstance(anchor_top_k, bool) or not isinstance(anchor_top_k, int) or anchor_top_k < 0:
            raise ValueError(f"anchor_top_k must be a non-negative integer (0 = off), got {anchor_top_k!r}")
        cfg = kwargs.get("args", args[1] if len(args) > 1 else None)
        if cfg is None:
            raise ValueError("TIDPOTrainer needs args=DPOConfig(...)")
        if getattr(cfg, "precompute_ref_log_probs", False):
            raise ValueError("TIDPOTrainer needs precompute_ref_log_probs=False: the loss uses per-token "
                             "reference log-probabilities, which TRL's precomputation sums away")
        loss_type = getattr(cfg, "loss_type", ["sigmoid"])
        loss_type = [loss_type] if isinstance(loss_type, str) else list(loss_type)
        if loss_type != ["sigmoid"]:
            raise ValueError(f"TIDPOTrainer extends the DPO sigmoid loss; got loss_type={loss_type!r}, "
                             "allowed: ['sigmoid']")
        if getattr(cfg, "f_divergence_type", "reverse_kl") != "reverse_kl":
            raise ValueError("TIDPOTrainer needs f_divergence_type='reverse_kl'")
        if getattr(cfg, "ld_alpha", None) is not None:
            raise ValueError("TIDPOTrainer does not support ld_alpha (LD-DPO length weighting); leave it None")
        self.lam, self.gamma, self.triplet_margin, self.weighting = float(lam), float(gamma), \
            float(triplet_margin), weighting
        self.anchor_kwargs = dict(max_new_tokens=anchor_max_new_tokens, temperature=float(anchor_temperature),
                                  top_k=anchor_top_k, top_p=float(anchor_top_p))
        super().__init__(*args, **kwargs)

    # ------------------------------------------------------------------ pieces
    def token_logps(self, model, input_ids, attention_mask, completion_mask, reference: bool = False):
        """Per-token log-probabilities of the completion tokens, shape (n, L - 1) (position ``t`` scores
        token ``t + 1``); 0 off the completion. ``reference=True`` scores with the frozen reference."""
        labels = input_ids.masked_fill(completion_mask == 0, -100)
        kw = dict(input_ids=input_ids, attention_mask=attention_mask, labels=labels, use_cache=False,
                  fused_lm_head=True)
        n = input_ids.shape[1] - 1
        if not reference:
            return model(**kw).log_probs[:, -n:]
        with torch.no_grad():
            if self.ref_model is None:
                with _ref_context(self):
                    out = self.model(**kw)
            else:
                out = self.ref_model(**kw)
        return out.log_probs[:, -n:]

    def token_weights(self, model, input_ids, attention_mask, completion_mask):
        """Hybrid weights (Eq. 7) of the completion tokens, aligned with :meth:`token_logps`."""
        mask = completion_mask[:, 1:]
        if self.weighting == "uniform":
            return None
        imp = token_importance(model, input_ids, attention_mask)[:, 1:]
        return hybrid_weights(imp, mask, self.lam)

    def sample_anchors(self, model, input_ids, attention_mask, completion_mask):
        """One anchor ``y ~ pi_theta(.|x)`` per prompt, returned in TRL's flush-left layout:
        ``(input_ids, attention_mask, completion_mask)`` of prompt + anchor."""
        tok = self.processing_class
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        eos = tok.eos_token_id
        prompt_mask = (attention_mask > 0) & (completion_mask == 0)
        prompts = [input_ids[i][prompt_mask[i]] for i in range(input_ids.shape[0])]
        P = max(len(p) for p in prompts)
        left = torch.full((len(prompts), P), pad, dtype=input_ids.dtype, device=input_ids.device)
        left_mask = torch.zeros_like(left)
        for i, p in enumerate(prompts):
            left[i, P - len(p):] = p
            left_mask[i, P - len(p):] = 1
        gen_model = self.accelerator.unwrap_model(model)
        was_training = gen_model.training
        gen_model.eval()
        try:
            with torch.no_grad():
                out = gen_model.generate(input_ids=left, attention_mask=left_mask, do_sample=True,
                                         pad_token_id=pad, eos_token_id=eos, **self.anchor_kwargs)
        finally:
            gen_model.train(was_training)
        new = out[:, P:]
        rows, comps = [], []
        for i, p in enumerate(prompts):
            g = new[i]
            hit = (g == eos).nonzero()
            g = g[: int(hit[0]) + 1] if len(hit) else g
            rows.append(torch.cat([p, g]))
            comps.append(torch.cat([torch.zeros(len(p), dtype=torch.long, device=g.device),
                                    torch.ones(len(g), dtype=torch.long, device=g.device)]))
        L = max(len(r) for r in rows)
        ids = torch.full((len(rows), L), pad, dtype=input_ids.dtype, device=input_ids.device)
        am = torch.zeros_like(ids)
        cm = torch.zeros_like(ids)
        for i, (r, c) in enumerate(zip(rows, comps)):
            ids[i, : len(r)] = r
            am[i, : len(r)] = 1
            cm[i, : len(r)] = c
        return ids, am, cm

    def anchor_logratio(self, model, input_ids, attention_mask, completion_mask):
        """``log pi/pi_ref`` of a fresh policy sample per prompt (uniform token weights), shape (n,)."""
        ids, am, cm = self.sample_anchors(model, input_ids, attention_mask, completion_mask)
        pol = self.token_logps(model, ids, am, cm)
        ref = self.token_logps(model, ids, am, cm, reference=True)
        return weighted_logratio(pol, ref, cm[:, 1:])

    # ------------------------------------------------------------------ loss
    def _compute_loss(self, model, inputs, return_outputs):
        mode = "train" if self.model.training else "eval"
        ids, am, cm = inputs["input_ids"], inputs["attention_mask"], inputs["completion_mask"]
        pol = self.token_logps(model, ids, am, cm)
        ref = self.token_logps(model, ids, am, cm, reference=True)
        mask = cm[:, 1:]
        w = self.token_weights(model, ids, am, cm)
        pol_c, pol_r = pol.chunk(2, dim=0)
        ref_c, ref_r = ref.chunk(2, dim=0)
        m_c, m_r = mask.chunk(2, dim=0)
        w_c, w_r = (None, None) if w is None else w.chunk(2, dim=0)
        anchor = None
        if self.gamma > 0:
            n = ids.shape[0] // 2
            anchor = self.anchor_logratio(model, ids[:n], am[:n], cm[:n])
        loss = ti_dpo_loss(pol_c, ref_c, m_c, pol_r, ref_r, m_r, w_c, w_r, beta=self.beta, gamma=self.gamma,
                           anchor_logratio=anchor, margin=self.triplet_margin)
        with torch.no_grad():
            r_c = self.beta * weighted_logratio(pol_c, ref_c, m_c)
            r_r = self.beta * weighted_logratio(pol_r, ref_r, m_r)
            self._metrics[mode]["rewards/accuracies"].append((r_c > r_r).float().mean().item())
            self._metrics[mode]["rewards/margins"].append((r_c - r_r).mean().item())
        if return_outputs:
            return loss, {"chosen_rewards": r_c, "rejected_rewards": r_r}
        return loss


def preference_margins(trainer, dataset=None) -> torch.Tensor:
    """Implicit-reward margins ``beta * (log pi/pi_ref (y_w) - log pi/pi_ref (y_l))`` (uniform token
    weights, the DPO reward of Rafailov et al. 2023) of every pair of ``dataset`` (default: the
    trainer's eval set), in dataset order, with the trainer's current policy and its reference.

    Works with any ``trl.DPOTrainer`` (plain DPO or :class:`TIDPOTrainer`) built with
    ``precompute_ref_log_probs=False``; held-out preference accuracy is ``(margins > 0).mean()``.
    """
    if not isinstance(trainer, DPOTrainer):
        raise TypeError(f"preference_margins needs a trl.DPOTrainer, got {type(trainer).__name__}")
    loader = trainer.get_eval_dataloader(dataset)
    model = trainer.model
    was_training = model.training
    model.eval()
    out = []
    try:
        for batch in loader:
            batch = trainer._prepare_inputs(batch)
            ids, am, cm = batch["input_ids"], batch["attention_mask"], batch["completion_mask"]
            with torch.no_grad():
                pol = TIDPOTrainer.token_logps(trainer, model, ids, am, cm)
                ref = TIDPOTrainer.token_logps(trainer, model, ids, am, cm, reference=True)
            lr = weighted_logratio(pol, ref, cm[:, 1:])
            c, r = lr.chunk(2, dim=0)
            out.append(trainer.beta * (c - r))
    finally:
        model.train(was_training)
    return torch.cat(out).float().cpu()
