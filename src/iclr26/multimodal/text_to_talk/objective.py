"""TtT: autoregressive text plus absorbing discrete diffusion for audio in one causal Transformer.

Liu, Li, Wang, Li, Chen, Luo, Liu, "From Text to Talk: Audio-Language Model Needs Non-Autoregressive
Joint Training", ICLR 2026, arXiv:2509.20072. Official code: https://github.com/ai4ed/TtT (no copy of
it could be obtained here; this is written from the paper's description, see the README for what
that leaves open).

- :func:`audio_span_ids`: which audio span (``<SOA> ... <EOA>``, both included) each token is in.
- :func:`modality_aware_mask`: the paper's attention mask: causal everywhere, bidirectional inside
  one audio span (a 4-D boolean mask a transformers Llama/Qwen accepts as ``attention_mask``).
- :class:`TtTLoss`: L = L_AR(text) + L_AO(audio): text positions get the next-token cross-entropy,
  audio tokens of the target spans are absorbed into ``[MASK]`` with probability lambda ~ U(0, 1)
  and the masked ones get a 1/lambda-weighted cross-entropy (the lambda-denoising form of the
  any-order-AR objective). The three training strategies: BANOM (with probability ``p_mix`` a batch
  is left clean: the text that follows an audio span sees clean audio, as at inference), PPM (with
  probability ``p_prefix`` the earlier target audio spans of a sample stay clean and only the later
  ones are noised) and SST (with probability ``p_trunc`` the last target audio span is cut at a random
  length and its ``<EOA>`` dropped, so the number of masks does not reveal where the span ends).
  ``objective="ar"`` gives the pure-AR baseline (next-token cross-entropy on every target token).
- :class:`TtTTrainer`: a ``transformers.Trainer`` whose ``compute_loss`` is :class:`TtTLoss`.
"""
from __future__ import annotations

import math

import torch
from torch import nn


def _check_ids(name, x):
    if not isinstance(x, torch.Tensor) or x.ndim != 2:
        raise ValueError(f"{name} must be a 2-D (batch, length) tensor, got "
                         f"{type(x).__name__ if not isinstance(x, torch.Tensor) else tuple(x.shape)}")
    if x.dtype.is_floating_point:
        raise TypeError(f"{name} must hold integer token ids, got dtype {x.dtype}")


def audio_span_ids(input_ids: torch.Tensor, soa_id: int, eoa_id: int) -> torch.Tensor:
    """Index of the audio span each position lies in (``<SOA>`` and ``<EOA>`` included), -1 for text.

    A span opened by ``<SOA>`` and not yet closed (a span being generated, or a truncated one) runs to
    the end of the sequence.
    """
    _check_ids("input_ids", input_ids)
    n_open = (input_ids == soa_id).long().cumsum(1)
    n_closed_before = torch.nn.functional.pad((input_ids == eoa_id).long().cumsum(1)[:, :-1], (1, 0))
    inside = n_open > n_closed_before
    return torch.where(inside, n_open - 1, torch.full_like(n_open, -1))


def modality_aware_mask(span_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Boolean mask ``(batch, 1, T, T)``, True = may attend: key <= query, or both in one audio span.

    ``span_ids`` (batch, T): audio span index per position, -1 for text (:func:`audio_span_ids`).
    ``attention_mask`` (batch, T), 1 for real tokens, 0 for padding: padded keys are hidden (each
    position still sees itself, so no row is empty). With all ``span_ids`` = -1 this is the causal mask.
    """
    _check_ids("span_ids", span_ids)
    B, T = span_ids.shape
    pos = torch.arange(T, device=span_ids.device)
    causal = pos[None, :] <= pos[:, None]                                   # (T, T): key <= query
    same_span = (span_ids[:, :, None] == span_ids[:, None, :]) & (span_ids[:, :, None] >= 0)
    mask = causal[None] | same_span
    if attention_mask is not None:
        if attention_mask.shape != span_ids.shape:
            raise ValueError(f"attention_mask must have shape {tuple(span_ids.shape)}, got "
                             f"{tuple(attention_mask.shape)}")
        keep = attention_mask.bool()
        mask = (mask & keep[:, None, :]) | torch.eye(T, dtype=torch.bool, device=span_ids.device)[None]
    return mask[:, None]


class TtTLoss(nn.Module):
    """The TtT training loss for a causal LM (``model(input_ids, attention_mask=4-D mask).logits``).

    Call with ``input_ids`` (B, T), ``loss_mask`` (B, T; 1 = a response token the model must produce),
    optional ``attention_mask`` (B, T; 1 = real token). Targets follow the causal-LM convention: the
    logits at position i - 1 predict token i, for text and audio alike (so a pretrained LM head is
    reused unchanged). The audio tokens that are diffused are the target-span tokens after ``<SOA>``
    up to and including ``<EOA>``; ``<SOA>`` itself is a text-side (AR) target.

    The loss is (sum of text cross-entropies + sum over masked audio tokens of CE / lambda) divided by
    the number of target tokens in the batch. Defaults of ``p_mix``, ``p_prefix``, ``p_trunc`` are
    our choice (0.3 each): the rates in the paper's training section could not be read here.

    ``objective="ar"`` is the pure-AR baseline; ``bidirectional_input_audio`` (AR only) keeps the
    modality-aware mask on audio spans that are not targets (the input audio of an ASR sample), the
    control that isolates the mask from the diffusion objective.
    """

    def __init__(self, mask_token_id: int, soa_id: int, eoa_id: int, pad_token_id: int = 0, *,
                 objective: str = "ttt", p_mix: float = 0.3, p_prefix: float = 0.3, p_trunc: float = 0.3,
                 min_lambda: float = 1e-3, bidirectional_input_audio: bool = False):
        super().__init__()
        if objective not in ("ttt", "ar"):
            raise ValueError(f"objective must be 'ttt' or 'ar', got {objective!r}")
        for name, p in (("p_mix", p_mix), ("p_prefix", p_prefix), ("p_trunc", p_trunc)):
            if not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0 or p != p:
                raise ValueError(f"{name} must be a probability in [0, 1], got {p!r}")
        if not 0.0 < min_lambda < 1.0:
            raise ValueError(f"min_lambda must lie in (0, 1), got {min_lambda!r}")
        ids = (mask_token_id, soa_id, eoa_id)
        if len(set(ids)) != 3 or pad_token_id in ids:
            raise ValueError(f"mask_token_id, soa_id, eoa_id and pad_token_id must be distinct, got "
                             f"{ids + (pad_token_id,)}")
        self.mask_token_id, self.soa_id, self.eoa_id, self.pad_token_id = mask_token_id, soa_id, eoa_id, pad_token_id
        self.objective = objective
        self.p_mix, self.p_prefix, self.p_trunc = float(p_mix), float(p_prefix), float(p_trunc)
        self.min_lambda = float(min_lambda)
        self.bidirectional_input_audio = bool(bidirectional_input_audio)
        self.last_stats: dict = {}

    # ------------------------------------------------------------------ pieces (public for tests)
    def target_spans(self, input_ids, loss_mask):
        """span ids, and the span ids restricted to target spans (-1 elsewhere)."""
        spans = audio_span_ids(input_ids, self.soa_id, self.eoa_id)
        tgt = loss_mask.bool() & (spans >= 0)
        # a span is a target span when any of its tokens is a target
        n_span = int(spans.max()) + 1 if spans.numel() else 0
        is_target = torch.zeros(input_ids.shape[0], max(n_span, 1), dtype=torch.bool, device=input_ids.device)
        if n_span:
            b, t = tgt.nonzero(as_tuple=True)
            is_target[b, spans[b, t]] = True
        span_target = torch.where(spans >= 0, is_target.gather(1, spans.clamp(min=0)), torch.zeros_like(tgt))
        return spans, torch.where(span_target, spans, torch.full_like(spans, -1))

    def truncate_last_span(self, input_ids, loss_mask, attention_mask, tspans, which, generator=None):
        """SST: for rows in ``which``, cut the last target audio span at a uniform length in [1, n - 1]
        of its audio tokens (n = tokens after ``<SOA>`` before ``<EOA>``) and drop everything after."""
        B, T = input_ids.shape
        pos = torch.arange(T, device=input_ids.device).expand(B, T)
        last = tspans.max(1).values                                           # -1: no target span
        in_last = (tspans == last[:, None]) & (last[:, None] >= 0)
        content = in_last & (input_ids != self.soa_id) & (input_ids != self.eoa_id)
        n = content.sum(1)
        ok = which & (n >= 2)
        first = torch.where(in_last, pos, torch.full_like(pos, T)).min(1).values   # <SOA> position
        u = torch.rand(B, generator=generator, device=input_ids.device)
        keep = 1 + (u * (n - 1).clamp(min=1)).floor().long()                  # in [1, n - 1]
        cut = first + 1 + keep                                                 # first dropped position
        drop = ok[:, None] & (pos >= cut[:, None])
        input_ids = input_ids.masked_fill(drop, self.pad_token_id)
        loss_mask = loss_mask.masked_fill(drop, 0)
        attention_mask = attention_mask.masked_fill(drop, 0)
        return input_ids, loss_mask, attention_mask, ok

    # ------------------------------------------------------------------ forward
    def forward(self, model, input_ids, loss_mask, attention_mask=None, generator=None):
        _check_ids("input_ids", input_ids)
        if loss_mask.shape != input_ids.shape:
            raise ValueError(f"loss_mask must have shape {tuple(input_ids.shape)}, got {tuple(loss_mask.shape)}")
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        elif attention_mask.shape != input_ids.shape:
            raise ValueError(f"attention_mask must have shape {tuple(input_ids.shape)}, got "
                             f"{tuple(attention_mask.shape)}")
        if (input_ids == self.mask_token_id).any():
            raise ValueError("input_ids already hold mask_token_id: pass clean sequences, the loss noises them")
        dev = input_ids.device
        loss_mask = loss_mask.long() * attention_mask.long()
        attention_mask = attention_mask.long()
        B, T = input_ids.shape
        spans, tspans = self.target_spans(input_ids, loss_mask)
        stats = {"clean_batch": 0.0, "truncated": 0.0, "prefix_kept": 0.0}

        if self.objective == "ar":
            span_for_mask = torch.where(tspans >= 0, torch.full_like(spans, -1), spans) \
                if self.bidirectional_input_audio else torch.full_like(spans, -1)
            mask4 = modality_aware_mask(span_for_mask, attention_mask)
            logits = model(input_ids=input_ids, attention_mask=mask4).logits
            tgt = loss_mask[:, 1:].bool()
            ce = nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), input_ids[:, 1:].flatten(),
                                             reduction="none").view(B, T - 1)
            n = tgt.sum().clamp(min=1)
            loss = (ce * tgt).sum() / n
            self._check(loss)
            self.last_stats = stats | {"text_loss": float(loss.detach()), "audio_loss": 0.0}
            return loss

        # SST: truncate the last target span of some rows
        if self.p_trunc > 0:
            which = torch.rand(B, generator=generator, device=dev) < self.p_trunc
            input_ids, loss_mask, attention_mask, ok = self.truncate_last_span(
                input_ids, loss_mask, attention_mask, tspans, which, generator)
            spans, tspans = self.target_spans(input_ids, loss_mask)
            stats["truncated"] = float(ok.float().mean())
        diffusable = (tspans >= 0) & (input_ids != self.soa_id) & loss_mask.bool()
        # BANOM: one draw per batch
        clean_batch = bool(torch.rand((), generator=generator, device=dev) < self.p_mix) if self.p_mix > 0 else False
        lam = torch.rand(B, generator=generator, device=dev).clamp(min=self.min_lambda)
        noisy = diffusable.clone()
        if clean_batch:
            noisy.zero_()
            stats["clean_batch"] = 1.0
        elif self.p_prefix > 0:
            # PPM: keep spans with index < m clean, m uniform over 1..(number of target spans - 1)
            n_spans = torch.where(tspans >= 0, tspans, torch.full_like(tspans, -1)).max(1).values  # last index
            first_t = torch.where(tspans >= 0, tspans, torch.full_like(tspans, 1 << 30)).min(1).values
            n_t = (n_spans - first_t + 1).clamp(min=0)
            prefix = (torch.rand(B, generator=generator, device=dev) < self.p_prefix) & (n_t >= 2)
            u = torch.rand(B, generator=generator, device=dev)
            m = first_t + 1 + (u * (n_t - 1).clamp(min=1)).floor().long()
            keep_clean = prefix[:, None] & (tspans >= 0) & (tspans < m[:, None])
            noisy &= ~keep_clean
            stats["prefix_kept"] = float(prefix.float().mean())
        masked = noisy & (torch.rand(B, T, generator=generator, device=dev) < lam[:, None])
        noised_ids = input_ids.masked_fill(masked, self.mask_token_id)
        mask4 = modality_aware_mask(spans, attention_mask)
        logits = model(input_ids=noised_ids, attention_mask=mask4).logits
        ce = nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), input_ids[:, 1:].flatten(),
                                         reduction="none").view(B, T - 1)
        text_t = (loss_mask.bool() & ~diffusable)[:, 1:]
        audio_t = masked[:, 1:]
        n_target = (loss_mask.bool()[:, 1:]).sum().clamp(min=1)
        text_sum = (ce * text_t).sum()
        audio_sum = (ce * audio_t / lam[:, None]).sum()
        loss = (text_sum + audio_sum) / n_target
        self._check(loss)
        self.last_stats = stats | {"text_loss": float(text_sum.detach() / n_target),
                                   "audio_loss": float(audio_sum.detach() / n_target),
                                   "masked_audio": float(audio_t.sum())}
        return loss

    @staticmethod
    def _check(loss):
        if not torch.isfinite(loss):
            raise FloatingPointError(f"TtT loss is not finite ({float(loss)}): stopping")


def _trainer_base():
    from transformers import Trainer
    return Trainer


class TtTTrainer(_trainer_base()):
    """``transformers.Trainer`` with the TtT loss: pass ``ttt_loss=TtTLoss(...)``; batches carry
    ``input_ids``, ``loss_mask`` and ``attention_mask`` (keep ``remove_unused_columns=False``)."""

    def __init__(self, *args, ttt_loss: TtTLoss, **kwargs):
        if not isinstance(ttt_loss, TtTLoss):
            raise TypeError(f"ttt_loss must be a TtTLoss, got {type(ttt_loss).__name__}")
        super().__init__(*args, **kwargs)
        self.ttt_loss = ttt_loss

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss = self.ttt_loss(model, inputs["input_ids"], inputs["loss_mask"], inputs.get("attention_mask"))
        return (loss, None) if return_outputs else loss


def lambda_weight_mean(min_lambda: float = 1e-3) -> float:
    """E[1 / max(lambda, min_lambda)] for lambda ~ U(0, 1) (a reference for tests)."""
    return 1.0 + math.log(1.0 / min_lambda)
