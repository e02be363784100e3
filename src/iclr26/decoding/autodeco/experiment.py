"""AutoDeco claim check on a real small LM (SmolLM2-135M-Instruct) with few-shot arithmetic.

Per trial (seed):
1. Few-shot prompts ``"Q: a + b = ?\\nA: c\\n..."`` with a disjoint train and test split of problems.
2. Training traces, as in the paper, are the frozen model's *own correct samples*: each train
   problem is sampled ``k`` times with default sampling (T=1, p=1) and the correct samples are
   kept. For a single exact answer every correct sample is the gold token path, so the number of
   accepted copies is exactly ``Binomial(k, q)`` with ``q`` the model's probability of the gold
   path; we draw that count instead of decoding ``k`` times (same distribution, no decoding cost).
3. Heads are trained with the paper's losses (soft top-p, easy-token masking, p(y) weighting).
4. Test metric: pass@1 per problem under each decoding policy, computed *exactly* (the
   probability that one sample is exactly the gold answer followed by a newline) from one
   teacher-forced pass, which equals the paper's pass@1 averaged over infinitely many samples.
   Arms: default sampling (T=1, p=1), AutoDeco (per-token T, P from the heads), greedy, and the
   best static (T, p) of a grid chosen on the test set itself (the paper's oracle).
5. A sampled sanity check with the real ``generate`` + :class:`AutoDecoLogitsProcessor` on a few
   test prompts (reported in ``info`` only).
"""
from __future__ import annotations

import time

import numpy as np
import torch

from iclr26.common.seeding import seed_everything

from .heads import AutoDecoHeads
from .processor import AutoDecoLogitsProcessor
from .training import teacher_forced, train_heads

SCALES = {
    "smoke": dict(model="smollm2-135m", n_train=12, n_test=8, k=16, steps=3, shots=4, max_operand=20,
                  sample_check=2, batch_size=16),
    # max_operand 30: 1,365 distinct problems (20 allowed only 610, fewer than the 654 needed here)
    "quick": dict(model="smollm2-135m", n_train=400, n_test=250, k=4, steps=300, shots=4, max_operand=30,
                  sample_check=32, batch_size=32),
    # the paper: R1-Distill-Qwen-7B etc., DeepMath-103K rejection-sampled traces, ~400 steps,
    # pass@1 from 128 samples on AIME/BRUMO/HMMT/BeyondAIME; not runnable on a CPU
    "paper": dict(model="qwen2.5-coder-1.5b", n_train=5000, n_test=1000, k=16, steps=400, shots=4,
                  max_operand=999, sample_check=200, batch_size=32),
}
SEEDS = {"smoke": 1, "quick": 2, "paper": 3}

T_GRID = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.2, 1.5)
P_GRID = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)


def make_problems(rng: np.random.Generator, n: int, max_operand: int, exclude=()) -> list[tuple[int, str, int]]:
    """Distinct problems ``(a, op, b)`` with ``op`` in ``+ -``, operands in ``[1, max_operand]``
    and a non-negative answer, none of them in ``exclude``."""
    n_plus, n_minus = max_operand * max_operand, max_operand * (max_operand + 1) // 2
    free = n_plus + n_minus - len({p for p in exclude if 1 <= min(p[0], p[2]) and max(p[0], p[2]) <= max_operand})
    if n > free:
        raise ValueError(
            f"asked for {n} distinct problems with operands up to {max_operand}, but only {free} remain "
            f"({n_plus + n_minus} exist, {n_plus + n_minus - free} excluded); raise max_operand or lower n"
        )
    seen, out = set(exclude), []
    while len(out) < n:
        a, b = (int(v) for v in rng.integers(1, max_operand + 1, size=2))
        op = "+" if rng.random() < 0.5 else "-"
        if op == "-" and b > a:
            a, b = b, a
        key = (a, op, b)
        if key in seen:
            continue
        seen.add(key)
        out.append(key)
    return out


def answer(p) -> int:
    a, op, b = p
    return a + b if op == "+" else a - b


def prompt_for(p, shots) -> str:
    head = "".join(f"Q: {a} {op} {b} = ?\nA: {answer((a, op, b))}\n" for a, op, b in shots)
    a, op, b = p
    return f"{head}Q: {a} {op} {b} = ?\nA:"


def _load(name):
    from iclr26.models import load

    model, tok = load(name)
    model.eval()
    for prm in model.parameters():
        prm.requires_grad_(False)
    return model, tok


def _item_logprob(logp_pos: torch.Tensor, item: torch.Tensor, n_items: int) -> torch.Tensor:
    """Sum per-position log-probabilities into per-item log-probabilities (``..., N -> ..., n_items``)."""
    out = torch.zeros(*logp_pos.shape[:-1], n_items, dtype=torch.float64)
    return out.index_add_(-1, item, logp_pos.double())


@torch.no_grad()
def exact_policy_logprobs(model, heads, pos, n_items: int, chunk: int = 64):
    """Per-item log-probability of the gold path under: every static (T, p) of the grid, greedy,
    and AutoDeco. Returns ``(grid (nT, nP, n_items), greedy (n_items,), autodeco (n_items,),
    mean_T, mean_P)``."""
    lm_head = model.get_output_embeddings()
    n = pos.hidden.shape[0]
    grid = torch.zeros(len(T_GRID), len(P_GRID), n)
    greedy = torch.zeros(n)
    auto = torch.zeros(n)
    ts, ps = [], []
    for s in range(0, n, chunk):
        h = pos.hidden[s : s + chunk]
        y = pos.labels[s : s + chunk]
        logits = lm_head(h.to(lm_head.weight.dtype)).float()
        sorted_l, order = logits.sort(-1, descending=True)
        rank = (order == y[:, None]).float().argmax(-1)  # position of the gold token in the sorted order
        greedy[s : s + chunk] = torch.where(rank == 0, 0.0, float("-inf"))
        for i, t in enumerate(T_GRID):
            lp = torch.log_softmax(sorted_l / t, -1)
            prob = lp.exp()
            before = prob.cumsum(-1) - prob
            gold_before = before.gather(-1, rank[:, None]).squeeze(-1)  # mass ranked above gold
            gold_lp = lp.gather(-1, rank[:, None]).squeeze(-1)
            for j, pv in enumerate(P_GRID):
                kept = (before < pv) | (torch.arange(prob.shape[-1]) == 0)
                z = (prob * kept).sum(-1)
                in_nucleus = (gold_before < pv) | (rank == 0)
                grid[i, j, s : s + chunk] = torch.where(in_nucleus, gold_lp - z.log(), float("-inf"))
        temp, top_p = heads(h, logits)
        ts.append(temp)
        ps.append(top_p)
        lp = torch.log_softmax(sorted_l / temp[:, None], -1)
        prob = lp.exp()
        before = prob.cumsum(-1) - prob
        kept = (before < top_p[:, None])
        kept[:, 0] = True
        z = (prob * kept).sum(-1)
        gold_before = before.gather(-1, rank[:, None]).squeeze(-1)
        in_nucleus = (gold_before < top_p) | (rank == 0)
        auto[s : s + chunk] = torch.where(in_nucleus, lp.gather(-1, rank[:, None]).squeeze(-1) - z.log(), float("-inf"))
    return (
        _item_logprob(grid, pos.item, n_items),
        _item_logprob(greedy, pos.item, n_items),
        _item_logprob(auto, pos.item, n_items),
        float(torch.cat(ts).mean()),
        float(torch.cat(ps).mean()),
    )


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    rng = seed_everything(seed)
    t0 = time.time()
    model, tok = _load(cfg["model"])
    shots = make_problems(rng, cfg["shots"], cfg["max_operand"])
    train_p = make_problems(rng, cfg["n_train"], cfg["max_operand"], exclude=shots)
    test_p = make_problems(rng, cfg["n_test"], cfg["max_operand"], exclude=shots + train_p)
    completion = lambda p: f" {answer(p)}\n"  # noqa: E731

    # 1-2. the model's own correct samples on the train split (rejection sampling, see module doc)
    tr = teacher_forced(model, tok, [prompt_for(p, shots) for p in train_p], [completion(p) for p in train_p],
                        batch_size=cfg["batch_size"])
    lm_head = model.get_output_embeddings()
    with torch.no_grad():
        lp_pos = torch.cat([
            torch.log_softmax(lm_head(tr.hidden[s : s + 256].to(lm_head.weight.dtype)).float(), -1)
            .gather(-1, tr.labels[s : s + 256, None]).squeeze(-1)
            for s in range(0, tr.hidden.shape[0], 256)
        ])
    q_train = _item_logprob(lp_pos, tr.item, len(train_p)).exp().numpy()
    copies = rng.binomial(cfg["k"], np.clip(q_train, 0.0, 1.0))
    w = torch.as_tensor(copies, dtype=torch.float32)[tr.item]
    keep = w > 0
    from .training import TracePositions

    tr_kept = TracePositions(tr.hidden[keep], tr.labels[keep], tr.item[keep], tr.step[keep])

    # 3. heads
    heads = AutoDecoHeads.from_base(model)
    torch.manual_seed(seed)
    t_train = time.time()
    if int(keep.sum()) > 0:
        res = train_heads(heads, model, tr_kept, steps=cfg["steps"], weights=w[keep], seed=seed)
        losses = [res.losses[0], res.final_loss]
    else:  # no accepted sample (only possible at smoke scale): heads stay at their initialisation
        losses = []
    t_train = time.time() - t_train
    heads.eval()

    # 4. exact pass@1 on the test split
    te = teacher_forced(model, tok, [prompt_for(p, shots) for p in test_p], [completion(p) for p in test_p],
                        batch_size=cfg["batch_size"])
    grid, greedy, auto, mean_t, mean_p = exact_policy_logprobs(model, heads, te, len(test_p))
    grid_acc = grid.exp()  # (nT, nP, items)
    i1, j1 = T_GRID.index(1.0), P_GRID.index(1.0)
    default = grid_acc[i1, j1]
    means = grid_acc.mean(-1)
    bi, bj = np.unravel_index(int(means.argmax()), means.shape)
    oracle = grid_acc[bi, bj]

    # 5. sampled sanity check with the real decoding hook
    from iclr26.models.generation import generate

    m = cfg["sample_check"]
    prompts = [prompt_for(p, shots) for p in test_p[:m]]
    golds = [str(answer(p)) for p in test_p[:m]]
    first_line = lambda s: s.split("\n")[0].strip()  # noqa: E731
    t_gen = time.time()
    plain = generate(model, tok, prompts, 6, do_sample=True, seed=seed, batch_size=cfg["batch_size"])
    t_plain = time.time() - t_gen
    with AutoDecoLogitsProcessor(model, heads) as proc:
        t_gen = time.time()
        adeco = generate(model, tok, prompts, 6, do_sample=True, seed=seed, logits_processor=proc,
                         batch_size=cfg["batch_size"])
        t_auto = time.time() - t_gen
    sampled = {
        "default": float(np.mean([first_line(s) == g for s, g in zip(plain, golds)])),
        "autodeco": float(np.mean([first_line(s) == g for s, g in zip(adeco, golds)])),
        "n": m,
        "seconds_default": t_plain,
        "seconds_autodeco": t_auto,
    }

    return {
        "metrics": {
            "pass1": {
                "autodeco": auto.exp().tolist(),
                "default": default.tolist(),
                "oracle": oracle.tolist(),
                "greedy": greedy.exp().tolist(),
            },
        },
        "info": {
            "model": cfg["model"],
            "n_train": len(train_p),
            "n_train_accepted_problems": int((copies > 0).sum()),
            "n_test": len(test_p),
            "mean_pass1": {
                "autodeco": float(auto.exp().mean()),
                "default": float(default.mean()),
                "oracle": float(oracle.mean()),
                "greedy": float(greedy.exp().mean()),
            },
            "oracle_T": T_GRID[bi],
            "oracle_P": P_GRID[bj],
            "grid_mean_pass1": {f"T={t},p={p}": float(means[i, j]) for i, t in enumerate(T_GRID)
                                for j, p in enumerate(P_GRID)},
            "autodeco_mean_T_test": mean_t,
            "autodeco_mean_P_test": mean_p,
            "train_loss_first_last": losses,
            "train_seconds": t_train,
            "sampled_check": sampled,
            "seconds": time.time() - t0,
        },
    }
