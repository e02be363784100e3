"""``AuxDPOTrainer``: TRL's ``DPOTrainer`` with per-example auxiliary offsets (arXiv:2510.20413, Section 5).

Each training pair ``i`` owns two offsets ``delta[i] = (delta_w, delta_l)`` in a table trained
jointly with the policy. The preference term becomes
``-log sigmoid(beta * h_i + delta_w - delta_l)``; the loss adds
``lambda_null * ||A_B delta_B||^2 + lambda_amp * ||delta_B||^2`` over the batch ``B``. The offsets are
discarded after training (evaluation uses plain DPO).

Implementation: the offsets enter through TRL's own loss by shifting the precomputed reference
log-probabilities (``ref_w - delta_w / beta``, ``ref_l - delta_l / beta``), which changes the DPO
margin by exactly ``delta_w - delta_l``; so every other part of ``DPOTrainer`` (tokenisation,
PEFT reference handling, logging) is TRL's. The columns of ``A_B`` are the per-sequence gradients
``grad_theta log pi_theta(y|x)`` of the trainable parameters at the current step (see the README's
deviations: the paper's ``rho(s) pi0(a|s)`` weights and the evaluation at ``theta0`` are dropped).
"""
from __future__ import annotations

import torch
from trl import DPOTrainer

__all__ = ["AuxDPOTrainer", "INDEX_COLUMN", "sequence_logps", "heldout_margins"]

INDEX_COLUMN = "aux_index"


def sequence_logps(model, inputs) -> torch.Tensor:
    """Summed completion log-probabilities ``log pi(y|x)`` of the rows of a TRL preference batch
    (``input_ids``, ``attention_mask``, ``completion_mask``; chosen rows first)."""
    for k in ("input_ids", "attention_mask", "completion_mask"):
        if k not in inputs:
            raise KeyError(f"inputs lacks {k!r} (a batch from a trl.DPOTrainer data loader is needed)")
    mask = inputs["completion_mask"][:, 1:].float()
    logits = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                   use_cache=False).logits[:, :-1].float()
    lp = torch.log_softmax(logits, -1).gather(-1, inputs["input_ids"][:, 1:, None]).squeeze(-1)
    return (lp * mask).sum(1)


def heldout_margins(trainer, dataset=None) -> torch.Tensor:
    """Implicit-reward margins ``beta [(log pi - log pi_ref)(y_w) - (log pi - log pi_ref)(y_l)]`` (the DPO
    reward of Section 3, offsets not included) of every pair of ``dataset`` (default: the trainer's
    eval set), in order, with the trainer's current policy. Needs a ``trl.DPOTrainer`` (plain or
    :class:`AuxDPOTrainer`) built with ``precompute_ref_log_probs=True`` and the dataset passed as its
    ``eval_dataset`` (so its reference log-probabilities are precomputed)."""
    if not isinstance(trainer, DPOTrainer):
        raise TypeError(f"heldout_margins needs a trl.DPOTrainer, got {type(trainer).__name__}")
    if not getattr(trainer.args, "precompute_ref_log_probs", False):
        raise ValueError("heldout_margins needs a trainer built with precompute_ref_log_probs=True")
    if dataset is None and trainer.eval_dataset is None:
        raise ValueError("heldout_margins needs a dataset or a trainer with an eval_dataset")
    model = trainer.model
    was_training = model.training
    model.eval()
    out = []
    try:
        for batch in trainer.get_eval_dataloader(dataset):
            batch = trainer._prepare_inputs(batch)
            if "ref_chosen_logps" not in batch:
                raise ValueError("the evaluation batches carry no precomputed reference log-probabilities")
            with torch.no_grad():
                c, r = sequence_logps(model, batch).chunk(2)
            out.append(trainer.beta * ((c - batch["ref_chosen_logps"].float())
                                       - (r - batch["ref_rejected_logps"].float())))
    finally:
        model.train(was_training)
    return torch.cat(out).float().cpu()


class _IndexCollator:
    """Wraps TRL's preference collator and passes the pairs' row indices through."""

    def __init__(self, inner):
        self.inner = inner

    def __call__(self, examples):
        out = self.inner(examples)
        if examples and INDEX_COLUMN in examples[0]:
            out[INDEX_COLUMN] = torch.tensor([int(e[INDEX_COLUMN]) for e in examples], dtype=torch.long)
        return out


class AuxDPOTrainer(DPOTrainer):
    """``trl.DPOTrainer`` with AuxDPO's per-example offsets.

    Parameters (besides ``DPOTrainer``'s)
    ----------
    lambda_null : weight of the null-space penalty ``||A_B delta_B||^2`` (0 skips the per-example
        gradient computation it needs).
    lambda_amp : weight of the amplitude penalty ``||delta_B||^2``.
    delta_lr : learning rate of the offset table (default: the policy's learning rate).

    Needs ``args.precompute_ref_log_probs = True`` and ``loss_type = "sigmoid"`` (the DPO loss) with
    the reverse-KL divergence.
    """

    def __init__(self, *args, lambda_null: float = 0.0, lambda_amp: float = 0.0, delta_lr: float | None = None,
                 **kwargs):
        for name, lam in (("lambda_null", lambda_null), ("lambda_amp", lambda_amp)):
            if not (isinstance(lam, (int, float)) and lam >= 0):
                raise ValueError(f"{name} must be a non-negative number, got {lam!r}")
        if delta_lr is not None and not (isinstance(delta_lr, (int, float)) and delta_lr > 0):
            raise ValueError(f"delta_lr must be a positive number or None, got {delta_lr!r}")
        cfg = kwargs.get("args", args[1] if len(args) > 1 else None)
        if cfg is None or not getattr(cfg, "precompute_ref_log_probs", False):
            raise ValueError("AuxDPOTrainer needs a DPOConfig with precompute_ref_log_probs=True "
                             "(the offsets shift the precomputed reference log-probabilities)")
        loss_type = getattr(cfg, "loss_type", ["sigmoid"])
        loss_type = [loss_type] if isinstance(loss_type, str) else list(loss_type)
        if loss_type != ["sigmoid"]:
            raise ValueError(f"AuxDPOTrainer extends the DPO sigmoid loss; got loss_type={loss_type!r}, "
                             "allowed: ['sigmoid']")
        if getattr(cfg, "f_divergence_type", "reverse_kl") not in ("reverse_kl",):
            raise ValueError("AuxDPOTrainer needs f_divergence_type='reverse_kl'")
        ds = kwargs.get("train_dataset")
        if ds is None:
            raise ValueError("AuxDPOTrainer needs train_dataset as a keyword argument (it indexes its rows)")
        if INDEX_COLUMN not in ds.column_names:
            ds = ds.add_column(INDEX_COLUMN, list(range(len(ds))))
        kwargs["train_dataset"] = ds
        self.lambda_null, self.lambda_amp, self.delta_lr = float(lambda_null), float(lambda_amp), delta_lr
        super().__init__(*args, **kwargs)
        n = int(max(self.train_dataset[INDEX_COLUMN])) + 1
        self.aux_delta = torch.nn.Parameter(torch.zeros(n, 2, device=self.accelerator.device))
        self.data_collator = _IndexCollator(self.data_collator)

    def _set_signature_columns_if_needed(self):
        super()._set_signature_columns_if_needed()
        if INDEX_COLUMN not in self._signature_columns:
            self._signature_columns = list(self._signature_columns) + [INDEX_COLUMN]

    def create_optimizer(self, *args, **kwargs):
        opt = super().create_optimizer(*args, **kwargs)
        if not any(self.aux_delta is p for g in opt.param_groups for p in g["params"]):
            opt.add_param_group({"params": [self.aux_delta], "weight_decay": 0.0,
                                 "lr": self.delta_lr or self.args.learning_rate})
        return opt

    # ------------------------------------------------------------------ loss
    def _sequence_logps(self, model, inputs):
        return sequence_logps(model, inputs)

    def null_space_gram(self, model, inputs):
        """``G G^T`` for ``G`` the (2n, P) matrix of per-sequence gradients of the trainable parameters
        (chosen rows first); ``delta_B^T (G G^T) delta_B = ||A_B delta_B||^2``."""
        params = [p for p in model.parameters() if p.requires_grad]
        with torch.enable_grad():
            logps = self._sequence_logps(model, inputs)
            rows = []
            for j in range(logps.shape[0]):
                gs = torch.autograd.grad(logps[j], params, retain_graph=True, allow_unused=True)
                rows.append(torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1)
                                       for g, p in zip(gs, params)]))
        G = torch.stack(rows).detach()
        return G @ G.T

    def null_space_penalty(self, model, inputs, d_b: torch.Tensor) -> torch.Tensor:
        """``d_b^T (G G^T) d_b = ||A_B d_b||^2`` with ``G G^T`` held constant (as :meth:`null_space_gram`),
        from one backward pass instead of one per sequence: ``G^T d_b`` is the gradient of
        ``d_b . log pi`` and ``G G^T d_b`` the gradient of ``(G^T w) . (G^T d_b)`` with respect to ``w``
        (a second, double backward; models whose ops have no double backward, such as SDPA attention
        on CPU, fall back to :meth:`null_space_gram`: load them with ``attn_implementation="eager"`` for
        the fast path). Returns a scalar whose value is the penalty and whose gradient
        with respect to ``d_b`` is ``2 G G^T d_b``."""
        params = [p for p in model.parameters() if p.requires_grad]
        with torch.enable_grad():
            logps = self._sequence_logps(model, inputs)
            if logps.shape != d_b.shape:
                raise ValueError(f"d_b has shape {tuple(d_b.shape)}, the batch has {tuple(logps.shape)} sequences")
            w = d_b.detach().to(logps.dtype).clone().requires_grad_(True)
            u = [g for g in torch.autograd.grad(logps, params, grad_outputs=w, create_graph=True, allow_unused=True)
                 if g is not None]
            if not u:
                return (d_b * 0).sum()
            sq = sum((g * g.detach()).sum() for g in u)
            try:
                (kd,) = torch.autograd.grad(sq, w)
            except RuntimeError as err:  # an op without a double backward (e.g. SDPA attention on CPU)
                if "not implemented" not in str(err):
                    raise
                del u, sq
                kd = self.null_space_gram(model, inputs).to(w.dtype) @ w.detach()
        kd = kd.detach().to(d_b.dtype)
        return 2 * (d_b @ kd) - (d_b.detach() @ kd)

    def _compute_loss(self, model, inputs, return_outputs):
        inputs = dict(inputs)
        idx = inputs.pop(INDEX_COLUMN, None)
        if idx is None or not model.training:
            return super()._compute_loss(model, inputs, return_outputs)
        d = self.aux_delta[idx.to(self.aux_delta.device)]
        d_w, d_l = d[:, 0], d[:, 1]
        inputs["ref_chosen_logps"] = inputs["ref_chosen_logps"].to(d.dtype) - d_w / self.beta
        inputs["ref_rejected_logps"] = inputs["ref_rejected_logps"].to(d.dtype) - d_l / self.beta
        res = super()._compute_loss(model, inputs, return_outputs)
        loss = res[0] if return_outputs else res
        d_b = torch.cat([d_w, d_l])
        if self.lambda_amp > 0:
            loss = loss + self.lambda_amp * (d_b ** 2).sum()
        if self.lambda_null > 0:
            loss = loss + self.lambda_null * self.null_space_penalty(model, inputs, d_b)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"AuxDPOTrainer: non-finite loss {loss.item()} at step {self.state.global_step}")
        return (loss, res[1]) if return_outputs else loss
