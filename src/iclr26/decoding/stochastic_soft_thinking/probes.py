"""The paper's replacement probe of soft tokens (Sec. 4, "single-threaded reasoners").

For a soft thought ``S_1..S_n`` and a step ``k``, replace ``S_k`` by the embedding of its top-1
token ``T_k^1`` (or its second token ``T_k^2``) and compare the next-token distribution with the
one the soft token produced, by Jensen-Shannon divergence. If the model is driven by the top
component of the soft input, ``JS(P_soft, P_top1)`` is small and ``JS(P_soft, P_top2)`` is large.
"""
from __future__ import annotations

import math

import torch

__all__ = ["js_divergence", "replacement_probe"]


def js_divergence(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Jensen-Shannon divergence (natural log, in [0, ln 2]) along the last axis."""
    m = 0.5 * (p + q)

    def kl(a, b):
        return torch.where(a > 0, a * (a.clamp_min(1e-30).log() - b.clamp_min(1e-30).log()), torch.zeros_like(a)).sum(-1)

    return (0.5 * kl(p, m) + 0.5 * kl(q, m)).clamp(0.0, math.log(2.0))


@torch.no_grad()
def replacement_probe(model, tokenizer, prompt: str, think_weights, probe_logits: dict) -> list[dict]:
    """For each probed step ``k`` (keys of ``probe_logits``, 1-based), the JS divergence between the
    next-token distribution after the soft ``S_k`` and after replacing ``S_k`` by its top-1 / top-2
    token. Steps whose soft token has a single support token have no top-2 and are skipped.
    ``think_weights`` and ``probe_logits`` are one row of :class:`SoftThinkingOutput`."""
    E = model.get_input_embeddings().weight
    ids = torch.tensor(tokenizer(prompt, add_special_tokens=True)["input_ids"], dtype=torch.long)
    if ids.numel() == 0:
        raise ValueError(f"prompt {prompt!r} has no tokens: the probe needs the prompt the soft thought followed")
    bad = [k for k in probe_logits if not 1 <= int(k) <= len(think_weights)]
    if bad:
        raise ValueError(f"probe steps {bad} are outside 1..{len(think_weights)} (the soft steps of this row)")
    base = E[ids]
    rows = []
    for k, logits_soft in sorted(probe_logits.items()):
        sup, w = think_weights[k - 1]
        if sup.numel() < 2:
            continue
        order = w.argsort(descending=True)
        t1, t2 = int(sup[order[0]]), int(sup[order[1]])
        prev = [(wj.to(E.dtype) @ E[sj]) for sj, wj in think_weights[: k - 1]]
        ctx = torch.cat([base] + ([torch.stack(prev)] if prev else []), dim=0)
        batch = torch.stack([torch.cat([ctx, E[t][None]], 0) for t in (t1, t2)])
        out = model(inputs_embeds=batch, use_cache=False).logits[:, -1, :].float()
        p_soft = torch.softmax(logits_soft.float(), -1)
        p1, p2 = torch.softmax(out, -1)
        rows.append({
            "step": k,
            "w_top1": float(w[order[0]]),
            "w_top2": float(w[order[1]]),
            "js_top1": float(js_divergence(p_soft, p1)),
            "js_top2": float(js_divergence(p_soft, p2)),
            "argmax_agree_top1": bool(p_soft.argmax() == p1.argmax()),
            "argmax_agree_top2": bool(p_soft.argmax() == p2.argmax()),
        })
    return rows
