"""AutoDeco claim check on Qwen2.5-Coder-0.5B-Instruct (bf16) with few-shot integer arithmetic.

Per trial (seed):
1. Problems from :func:`iclr26.data.math.arithmetic_problems` (difficulty 3: two or three terms of
   one or two digits with ``+ - *``; greedy solves about half), split into disjoint train,
   validation and test sets. Prompts are :func:`iclr26.data.math.arithmetic_prompt` (three chat
   shots; the reply is started with the expression and ``" ="``), the completion is the value.
2. Training traces, as in the paper, are the frozen model's *own correct samples*: every train
   problem is sampled ``k`` times with default sampling (T = 1, p = 1) and the correct ones are kept.
   A sample is correct exactly when it follows the gold digits and then a token that does not
   continue the number, so the number of accepted copies is ``Binomial(k, q)`` with ``q`` the
   model's probability of that event; the count is drawn from it (same distribution as decoding
   ``k`` samples, without the decoding), and the token that ends the number is drawn from the
   model's distribution restricted to non-digit tokens.
3. The heads are trained with the paper's losses (soft top-p, easy-token masking, p(y) weighting)
   through :func:`train_heads`.
4. Test metric: pass@1 per problem under each decoding policy, computed *exactly* from one
   teacher-forced pass (the probability that one sample gives the gold digits and then ends the
   number), which is the paper's pass@1 over infinitely many samples. Arms: AutoDeco (per-token T,
   P from the heads, :func:`autodeco_step`), default sampling (T = 1, p = 1), greedy, the static
   (T, p) of a grid chosen on the validation problems (``tuned``: what a user would tune), and the
   grid point chosen on the test problems themselves (``oracle``, the paper's "hacking the test set").
5. A sampled check with the real ``generate`` + :class:`AutoDecoLogitsProcessor` on a few test
   prompts (``info`` only): decoded answers, read with ``first_number``, against the exact values.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from iclr26.common.seeding import seed_everything

from .heads import AutoDecoHeads, autodeco_step
from .processor import AutoDecoLogitsProcessor
from .training import TracePositions, teacher_forced, train_heads

SCALES = {
    "smoke": dict(model="smollm2-135m", dtype=None, difficulty=1, n_train=12, n_val=6, n_test=8, k=4, steps=3,
                  batch_size=16, sample_check=2),
    # 4 seeds x (200 train, 80 validation, 200 test): what the shared CPU finishes in the time given
    # (see README, "Compute")
    "quick": dict(model="qwen2.5-coder-0.5b", dtype="bfloat16", difficulty=3, n_train=200, n_val=80, n_test=200,
                  k=4, steps=150, batch_size=32, sample_check=8),
    # the paper: R1-Distill-Qwen-7B etc., DeepMath-103K rejection-sampled traces, ~400 steps,
    # pass@1 from 128 samples on AIME/BRUMO/HMMT/BeyondAIME; not runnable on a CPU
    "paper": dict(model="qwen2.5-coder-1.5b", dtype="bfloat16", difficulty=4, n_train=5000, n_val=500, n_test=1000,
                  k=16, steps=400, batch_size=32, sample_check=200),
}
SEEDS = {"smoke": 1, "quick": 4, "paper": 3}

T_GRID = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.2, 1.5)
P_GRID = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)


def digit_token_ids(tokenizer) -> torch.Tensor:
    """Ids of the tokens that would continue a number: their text starts with a digit."""
    vocab = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    return torch.tensor([i for i, t in enumerate(vocab) if t and t[0].isdigit()], dtype=torch.long)


def split_problems(cfg, seed: int):
    """Disjoint train / validation / test problems (distinct expressions) for one seed."""
    from iclr26.data.math import arithmetic_problems

    need = cfg["n_train"] + cfg["n_val"] + cfg["n_test"]
    seen, out = set(), []
    for p in arithmetic_problems(2 * need + 20, seed=seed, difficulty=cfg["difficulty"]):
        if p.metadata["expression"] not in seen:
            seen.add(p.metadata["expression"])
            out.append(p)
    if len(out) < need:
        raise ValueError(f"only {len(out)} distinct problems at difficulty {cfg['difficulty']}, {need} needed")
    a, b = cfg["n_train"], cfg["n_train"] + cfg["n_val"]
    return out[:a], out[a:b], out[b:need]


def _item_logprob(logp_pos: torch.Tensor, item: torch.Tensor, n_items: int) -> torch.Tensor:
    """Sum per-position log-probabilities into per-item log-probabilities (``..., N -> ..., n_items``)."""
    out = torch.zeros(*logp_pos.shape[:-1], n_items, dtype=torch.float64)
    return out.index_add_(-1, item, logp_pos.double())


def _policy_logprob(lp_sorted, top_ps, rank, digit_rank, terminal):
    """log-probability of the event at each position under ``softmax(l / T)`` cut to its top-``P``
    nucleus, for each column of ``top_ps`` (``(N, K)``), from the sorted log-probabilities
    ``lp_sorted`` (``(N, V)``): the gold token (``rank``) or, at terminal positions, any token that
    is not a digit (``digit_rank``, ``(N, D)``). Returns ``(N, K)``.

    The nucleus keeps the sorted tokens whose preceding mass is below ``P`` (the top token always,
    every token when ``P = 1``, as :func:`~.heads.top_p_filter`); since the preceding mass is
    non-decreasing, its size is one ``searchsorted`` per row, with no pass over the vocabulary per ``P``.
    """
    prob = lp_sorted.exp()
    c = prob.cumsum(-1)
    before = torch.cat([torch.zeros_like(c[:, :1]), c[:, :-1]], -1)  # mass strictly before each token
    v = prob.shape[-1]
    size = torch.searchsorted(before.contiguous(), top_ps.contiguous(), side="left")  # tokens with before < P
    size = torch.where(top_ps >= 1, v, size).clamp(1, v)
    log_z = torch.log(c.gather(-1, size - 1))
    gold_lp = lp_sorted.gather(-1, rank[:, None])
    gold = torch.where(rank[:, None] < size, gold_lp, torch.tensor(float("-inf"))) - log_z
    dprob = prob.gather(-1, digit_rank)  # (N, D)
    digit_mass = (dprob[:, None, :] * (digit_rank[:, None, :] < size[:, :, None])).sum(-1) / log_z.exp()
    end = torch.log((1.0 - digit_mass).clamp_min(0.0))
    return torch.where(terminal[:, None], end, gold)


@torch.no_grad()
def exact_policy_logprobs(model, heads, pos, terminal, digit_ids, n_items: int, chunk: int = 32):
    """Per-item log-probability of a correct answer (gold path, then a token that ends the number)
    under: every static (T, p) of the grid, greedy, and AutoDeco (``heads`` may be None to skip it).
    Returns ``(grid (nT, nP, n_items), greedy (n_items,), autodeco (n_items,) or None, mean_T, mean_P)``."""
    lm_head = model.get_output_embeddings()
    n = pos.hidden.shape[0]
    grid = torch.zeros(len(T_GRID), len(P_GRID), n)
    greedy = torch.zeros(n)
    auto = torch.zeros(n)
    ts, ps = [], []
    p_grid = torch.tensor(P_GRID, dtype=torch.float32)
    for s in range(0, n, chunk):
        h = pos.hidden[s : s + chunk]
        y = pos.labels[s : s + chunk]
        term = terminal[s : s + chunk]
        logits = lm_head(h.to(lm_head.weight.dtype)).float()
        sorted_l, order = logits.sort(dim=-1, descending=True, stable=True)
        inv = torch.empty_like(order).scatter_(-1, order, torch.arange(order.shape[-1]).expand_as(order))
        rank = inv.gather(-1, y[:, None]).squeeze(-1)  # position of the gold token in the sorted order
        digit_rank = inv[:, digit_ids]
        top_is_digit = (digit_rank == 0).any(-1)
        greedy[s : s + chunk] = torch.where(torch.where(term, ~top_is_digit, rank == 0), 0.0, float("-inf"))
        cols = p_grid.expand(h.shape[0], -1)
        for i, t in enumerate(T_GRID):
            grid[i, :, s : s + chunk] = _policy_logprob(torch.log_softmax(sorted_l / t, -1), cols, rank,
                                                        digit_rank, term).T
        if heads is not None:
            _, temp, top_p = autodeco_step(heads, h, logits)
            ts.append(temp)
            ps.append(top_p)
            lp = torch.log_softmax(sorted_l / temp.clamp_min(1e-6)[:, None], -1)
            auto[s : s + chunk] = _policy_logprob(lp, top_p[:, None], rank, digit_rank, term)[:, 0]
    return (
        _item_logprob(grid, pos.item, n_items),
        _item_logprob(greedy, pos.item, n_items),
        _item_logprob(auto, pos.item, n_items) if heads is not None else None,
        float(torch.cat(ts).mean()) if ts else float("nan"),
        float(torch.cat(ps).mean()) if ps else float("nan"),
    )


def _positions(model, tok, problems, batch_size):
    """Teacher-forced positions of ``" <answer>"`` plus one terminal position per problem (the
    state after the last digit), flagged in the returned boolean tensor."""
    from iclr26.data.math import arithmetic_prompt

    prompts = [arithmetic_prompt(tok, p) for p in problems]
    # one extra character after the answer so that the position after the last digit is computed;
    # its label is ignored (the event there is "any non-digit token")
    pos = teacher_forced(model, tok, prompts, [f" {p.answer}\n" for p in problems], batch_size=batch_size)
    n_ans = [len(tok(f" {p.answer}", add_special_tokens=False)["input_ids"]) for p in problems]
    n_full = torch.bincount(pos.item, minlength=len(problems))
    if any(int(n_full[i]) != n_ans[i] + 1 for i in range(len(problems))):
        raise RuntimeError("the answer's tokens are not a prefix of the answer followed by a newline")
    terminal = pos.step == torch.as_tensor(n_ans)[pos.item]
    return pos, terminal


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    rng = seed_everything(seed)
    torch.set_num_threads(1)
    t0 = time.time()
    from iclr26.data.math import arithmetic_prompt, first_number, is_correct
    from iclr26.models import load

    model, tok = load(cfg["model"], dtype=cfg["dtype"])
    for prm in model.parameters():
        prm.requires_grad_(False)
    digit_ids = digit_token_ids(tok)
    train_p, val_p, test_p = split_problems(cfg, seed)
    bs = cfg["batch_size"]

    # 1-2. the model's own correct samples on the train split (rejection sampling, see module doc)
    tr, tr_term = _positions(model, tok, train_p, bs)
    lm_head = model.get_output_embeddings()
    lp_pos, end_tok = [], []
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for s in range(0, tr.hidden.shape[0], 128):
            lp = torch.log_softmax(lm_head(tr.hidden[s : s + 128].to(lm_head.weight.dtype)).float(), -1)
            term = tr_term[s : s + 128]
            gold = lp.gather(-1, tr.labels[s : s + 128, None]).squeeze(-1)
            non_digit = lp.clone()
            non_digit[:, digit_ids] = float("-inf")
            end_mass = torch.logsumexp(non_digit, -1)
            lp_pos.append(torch.where(term, end_mass, gold))
            end_tok.append(torch.multinomial(torch.softmax(non_digit, -1), 1, generator=g).squeeze(-1))
    lp_pos, end_tok = torch.cat(lp_pos), torch.cat(end_tok)
    q_train = _item_logprob(lp_pos, tr.item, len(train_p)).exp().numpy()
    copies = rng.binomial(cfg["k"], np.clip(q_train, 0.0, 1.0))
    w = torch.as_tensor(copies, dtype=torch.float32)[tr.item]
    keep = w > 0
    labels = torch.where(tr_term, end_tok, tr.labels)  # the sampled token that ends the number
    tr_kept = TracePositions(tr.hidden[keep], labels[keep], tr.item[keep], tr.step[keep])

    # 3. heads
    heads = AutoDecoHeads.from_base(model)
    torch.manual_seed(seed)
    t_train = time.time()
    if int(keep.sum()) > 0:
        res = train_heads(heads, model, tr_kept, steps=cfg["steps"], weights=w[keep], seed=seed, presort=True)
        losses = [res.losses[0], res.final_loss]
    else:  # no accepted sample (only possible at smoke scale): heads stay at their initialisation
        losses = []
    t_train = time.time() - t_train
    heads.eval()

    # 4. static (T, p) tuned on the validation split; exact pass@1 on the test split
    va, va_term = _positions(model, tok, val_p, bs)
    grid_val, _, _, _, _ = exact_policy_logprobs(model, None, va, va_term, digit_ids, len(val_p))
    val_means = grid_val.exp().mean(-1)
    ti, tj = np.unravel_index(int(val_means.argmax()), val_means.shape)
    te, te_term = _positions(model, tok, test_p, bs)
    grid, greedy, auto, mean_t, mean_p = exact_policy_logprobs(model, heads, te, te_term, digit_ids, len(test_p))
    grid_acc = grid.exp()  # (nT, nP, items)
    default = grid_acc[T_GRID.index(1.0), P_GRID.index(1.0)]
    means = grid_acc.mean(-1)
    bi, bj = np.unravel_index(int(means.argmax()), means.shape)
    oracle, tuned = grid_acc[bi, bj], grid_acc[ti, tj]
    auto_acc, greedy_acc = auto.exp(), greedy.exp()

    # 5. sampled check with the real decoding hook
    from iclr26.models.generation import generate
    from iclr26.models.generation_cache import generate_cached

    m = cfg["sample_check"]
    prompts = [arithmetic_prompt(tok, p) for p in test_p[:m]]
    golds = [p.answer for p in test_p[:m]]
    t_gen = time.time()
    plain = generate_cached(model, tok, prompts, 6, do_sample=True, seed=seed, batch_size=bs)
    t_plain = time.time() - t_gen
    with AutoDecoLogitsProcessor(model, heads) as proc:
        t_gen = time.time()
        adeco = generate(model, tok, prompts, 6, do_sample=True, seed=seed, logits_processor=proc, batch_size=bs)
        t_auto = time.time() - t_gen
    sampled = {
        "default": float(np.mean([is_correct(first_number(s), gd) for s, gd in zip(plain, golds)])),
        "autodeco": float(np.mean([is_correct(first_number(s), gd) for s, gd in zip(adeco, golds)])),
        "exact_default": float(default[:m].mean()),
        "exact_autodeco": float(auto_acc[:m].mean()),
        "n": m,
        "seconds_autodeco": t_auto,
        "seconds_default_maybe_cached": t_plain,
    }

    return {
        "metrics": {
            "pass1": {
                "autodeco": auto_acc.tolist(),
                "default": default.tolist(),
                "tuned": tuned.tolist(),
                "oracle": oracle.tolist(),
                "greedy": greedy_acc.tolist(),
            },
        },
        "info": {
            "model": cfg["model"],
            "n_train": len(train_p),
            "n_train_accepted_problems": int((copies > 0).sum()),
            "n_train_accepted_samples": int(copies.sum()),
            "train_default_pass1": float(q_train.mean()),
            "n_val": len(val_p),
            "n_test": len(test_p),
            "mean_pass1": {
                "autodeco": float(auto_acc.mean()),
                "default": float(default.mean()),
                "tuned": float(tuned.mean()),
                "oracle": float(oracle.mean()),
                "greedy": float(greedy_acc.mean()),
            },
            "tuned_T": T_GRID[ti],
            "tuned_P": P_GRID[tj],
            "oracle_T": T_GRID[bi],
            "oracle_P": P_GRID[bj],
            "grid_mean_pass1_test": {f"T={t},p={p}": float(means[i, j]) for i, t in enumerate(T_GRID)
                                     for j, p in enumerate(P_GRID)},
            "autodeco_mean_T_test": mean_t,
            "autodeco_mean_P_test": mean_p,
            "train_loss_first_last": losses,
            "train_seconds": t_train,
            "sampled_check": sampled,
            "seconds": time.time() - t0,
        },
    }
