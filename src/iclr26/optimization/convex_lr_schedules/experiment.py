"""Fit the convex-bound law on loss curves, predict held-out curves (CPU proxy of paper Sec. 5).

A 32-h-10 ReLU MLP is trained with plain SGD (batch 32) and a linear-decay schedule in one pass
over an online teacher-student classification stream (noisy labels, so the loss has a floor, as in
single-epoch LM pre-training), for every (horizon T, peak learning rate) pair of a grid. The
population loss of each run (on one fixed set of fresh samples) is recorded at eight points of
its curve, t = T/8, 2T/8, ..., T. All runs of one seed share the initial weights and the
minibatch sequence; they are trained as one stacked ensemble (one batched forward/backward per
step through the shared training loop), and a run stops moving after its own horizon.

Everything the law is scored on is fixed before any held-out loss is seen: the learning rates are
those that did not diverge on the short runs, and every held-out run at those rates is scored on
every recorded point of its curve. Two protocols, both fitting :class:`ConvexScalingLaw` on whole
loss curves (each point's law term is the last-iterate bound of the schedule up to that step):
- horizon extrapolation: fit on the curves of the runs with T <= ``fit_max_T``, predict the whole
  curves of the longer runs (``heldout_r2``), their final losses, and their optimal learning rate;
- sequence to sequence: fit on the first half of every run's curve, predict the second half
  (``seq2seq_r2``).
Baselines for the final-loss extrapolation (exploratory, the paper makes no such comparison),
fitted on the short runs' final losses: a per-learning-rate power law ``log L = a - c log T`` and
persistence (the loss at ``fit_max_T``); for the optimal learning rate, reusing the best grid
rate at ``fit_max_T``.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from iclr26.common.seeding import seed_everything
from iclr26.common.training import batches, train

from .law import ConvexScalingLaw, r2_score

N_POINTS = 8   # points recorded per loss curve: t = T/8, ..., T

SCALES = {
    "smoke": dict(horizons=[16, 32, 64, 128], fit_max_T=32, lr_grid_log2=list(range(-4, 2)),
                  hidden=32, batch=32, n_eval=2000, window=2),
    "quick": dict(horizons=[100, 200, 400, 800, 1600, 3200, 6400], fit_max_T=400,
                  lr_grid_log2=list(range(-5, 3)), hidden=64, batch=32, n_eval=8192, window=2),
    # paper: GPT-2 / ResNet / ViT, horizons 100..8000 steps (80x), AdamW/SGD/Muon, several schedules
    "paper": dict(horizons=[100, 200, 400, 800, 1600, 3200, 8000], fit_max_T=400,
                  lr_grid_log2=list(range(-8, 4)), hidden=512, batch=32, n_eval=50000, window=2),
}
SEEDS = {"smoke": 1, "quick": 5, "paper": 5}


class StackedMLP(nn.Module):
    """K independent d_in-h-10 MLPs evaluated with batched matmuls; output (K, N, 10)."""

    def __init__(self, k: int, hidden: int, d_in: int = 64, d_out: int = 10):
        super().__init__()
        one = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, d_out))
        # the same default torch initialisation, copied to every member
        self.w1 = nn.Parameter(one[0].weight.detach().T.repeat(k, 1, 1).clone())
        self.b1 = nn.Parameter(one[0].bias.detach().repeat(k, 1)[:, None, :].clone())
        self.w2 = nn.Parameter(one[2].weight.detach().T.repeat(k, 1, 1).clone())
        self.b2 = nn.Parameter(one[2].bias.detach().repeat(k, 1)[:, None, :].clone())

    def forward(self, x):
        h = torch.relu(torch.matmul(x, self.w1) + self.b1)
        return torch.matmul(h, self.w2) + self.b2


def _per_member_loss(out, y):
    k, n, c = out.shape
    return F.cross_entropy(out.reshape(k * n, c), y.repeat(k), reduction="none").view(k, n).mean(1)


def teacher_task(seed: int, n: int, d_in: int = 32, n_classes: int = 10, temperature: float = 1.0):
    """Samples of an online classification task: x ~ N(0, I), y ~ softmax(teacher(x) / temperature)
    for a fixed random two-layer teacher. Labels are noisy, so no model reaches zero loss (the
    single-pass, non-interpolating regime of LM pre-training the paper studies)."""
    g = torch.Generator().manual_seed(10_000 + seed)
    w1 = torch.randn(d_in, 64, generator=g) / math.sqrt(d_in)
    w2 = torch.randn(64, n_classes, generator=g) * (3.0 / math.sqrt(64))
    x = torch.randn(n, d_in, generator=g)
    logits = torch.tanh(x @ w1) @ w2 / temperature
    y = torch.multinomial(torch.softmax(logits, -1), 1, generator=g).squeeze(1)
    bayes = float(-(torch.log_softmax(logits, -1).gather(1, y[:, None])).mean())
    return x, y, bayes


def checkpoints(T: int) -> list[int]:
    """The steps of a run of horizon T at which its loss is recorded: round(T j / 8), j = 1..8."""
    return sorted({max(1, int(round(T * j / N_POINTS))) for j in range(1, N_POINTS + 1)})


def run_grid(cfg: dict, seed: int):
    """Population loss curves of every (horizon, lr) run: array (n_T, n_lr, N_POINTS) at the steps
    :func:`checkpoints`, NaN where a run diverged; plus the loss at initialisation."""
    Ts = list(cfg["horizons"])
    lrs = [2.0 ** e for e in cfg["lr_grid_log2"]]
    members = [(T, lr) for T in Ts for lr in lrs]
    K, T_max = len(members), max(Ts)
    n_train = T_max * cfg["batch"]
    x_all, y_all, bayes = teacher_task(seed, n_train + cfg["n_eval"])
    x, y = x_all[:n_train], y_all[:n_train]            # one pass: every sample is seen once
    x_ev, y_ev = x_all[n_train:], y_all[n_train:]      # population loss estimate
    model = StackedMLP(K, cfg["hidden"], d_in=x.shape[1])
    with torch.no_grad():
        init_loss = float(_per_member_loss(model(x_ev), y_ev)[0])
    opt = torch.optim.SGD(model.parameters(), lr=1.0)   # the per-member lr is applied in step_fn
    # linear decay eta_t = peak (T + 1 - t)/T for t <= T, then frozen: lr table (T_max, K)
    t = torch.arange(1, T_max + 1, dtype=torch.float64)[:, None]
    Tm = torch.tensor([m[0] for m in members], dtype=torch.float64)[None, :]
    peak = torch.tensor([m[1] for m in members], dtype=torch.float64)[None, :]
    table = torch.where(t <= Tm, peak * (Tm + 1 - t) / Tm, torch.zeros(())).float()
    alive = torch.ones(K, dtype=torch.bool)
    step_no = [0]

    def step_fn(m, o, batch):
        xb, yb = batch
        o.zero_grad(set_to_none=True)
        losses = _per_member_loss(m(xb), yb)
        finite = torch.isfinite(losses) & alive
        alive.copy_(finite)
        loss = torch.where(finite, losses, torch.zeros(())).sum()
        loss.backward()
        scale = table[step_no[0]] * alive
        step_no[0] += 1
        with torch.no_grad():
            for p in m.parameters():
                p.grad.mul_(scale.view(-1, *([1] * (p.ndim - 1))))
                p.grad.nan_to_num_(0.0, 0.0, 0.0)
        o.step()
        return loss.detach()

    curves = np.full((K, N_POINTS), np.nan)
    horizon_of = np.array([m[0] for m in members])
    slot = {}                                  # step -> [(member indices, curve column)]
    for T in Ts:
        for j, s in enumerate(checkpoints(T)):
            slot.setdefault(s, []).append((np.where(horizon_of == T)[0], j))

    def callback(step, m, value):
        if step in slot:
            with torch.no_grad():
                full = _per_member_loss(m(x_ev), y_ev).numpy()
            ok = alive.numpy() & np.isfinite(full) & (full <= init_loss)
            for idx, j in slot[step]:
                curves[idx, j] = np.where(ok[idx], full[idx], np.nan)

    gen = torch.Generator().manual_seed(seed)
    train(model, opt, batches(x, y, cfg["batch"], gen), T_max, loss_fn=None,
          step_fn=step_fn, callback=callback)
    curves = curves.reshape(len(Ts), len(lrs), N_POINTS)
    # a run that diverged (non-finite or worse than at the start) stays diverged afterwards
    bad = np.cumsum(~np.isfinite(curves), axis=2) > 0
    curves[bad] = np.nan
    return curves, init_loss, bayes


def empirical_best_log2(final_row: np.ndarray, grid_log2: np.ndarray) -> float:
    """The empirical optimal log2 learning rate of one horizon: the vertex of the parabola through
    the grid minimum and its two neighbours (log2 lr vs loss), kept within one grid step of the
    minimum; the grid minimum itself at the grid's edge or when the parabola does not open up."""
    ok = np.isfinite(final_row)
    i = int(np.nanargmin(final_row))
    if i == 0 or i == len(final_row) - 1 or not (ok[i - 1] and ok[i + 1]):
        return float(grid_log2[i])
    x, y = grid_log2[i - 1: i + 2].astype(float), final_row[i - 1: i + 2]
    a, b, _ = np.polyfit(x, y, 2)
    if a <= 0:
        return float(grid_log2[i])
    step = float(grid_log2[i + 1] - grid_log2[i])
    return float(np.clip(-b / (2 * a), grid_log2[i] - step, grid_log2[i] + step))


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    seed_everything(seed)
    curves, init_loss, bayes = run_grid(cfg, seed)
    return analyse(cfg, curves, init_loss, bayes)


def _window(center: int, n: int, w: int) -> np.ndarray:
    m = np.zeros(n, bool)
    m[max(0, center - w): center + w + 1] = True
    return m


def analyse(cfg: dict, curves: np.ndarray, init_loss: float, bayes: float) -> dict:
    """Fit the law and the baselines on the recorded curves and score them (module docstring).

    Which runs the law is fitted and scored on is decided from fitted data only: the learning
    rates within ``window`` grid steps of the optimum, where the optimum is the empirical one for
    fitted horizons (final loss; for the sequence-to-sequence protocol, the loss at T/2) and the
    law's ``eta*(T)`` for held-out horizons. A held-out run that diverged is scored at the loss of
    the initialisation."""
    Ts = np.array(cfg["horizons"])
    e2 = np.array(cfg["lr_grid_log2"])
    lrs = 2.0 ** e2
    w = cfg["window"]
    n_T, n_lr, n_pt = curves.shape
    steps = np.array([checkpoints(T) for T in Ts])                    # (n_T, N_POINTS)
    TT = np.broadcast_to(Ts[:, None, None], curves.shape)
    LL = np.broadcast_to(lrs[None, :, None], curves.shape)
    SS = np.broadcast_to(steps[:, None, :], curves.shape)
    finite = np.isfinite(curves)
    scored = np.where(finite, curves, init_loss)
    all_pts = np.ones(n_pt, bool)
    short = Ts <= cfg["fit_max_T"]
    held_idx = np.where(~short)[0]
    i_last = int(np.where(short)[0].max())

    # horizon extrapolation: fit on the whole curves of the short runs near each short optimum
    fit_runs = np.zeros((n_T, n_lr), bool)
    for i in np.where(short)[0]:
        if np.isfinite(curves[i, :, -1]).any():
            fit_runs[i] = _window(int(np.nanargmin(curves[i, :, -1])), n_lr, w)
    fit_runs &= finite.all(axis=2)
    fit_pts = fit_runs[:, :, None] & all_pts
    law = ConvexScalingLaw("linear").fit(TT[fit_pts], LL[fit_pts], curves[fit_pts], t=SS[fit_pts])
    # a law with B = 0 puts eta* at infinity: clip to one step beyond the grid (a miss, counted)
    law_eta = np.clip(np.log2(law.optimal_peak_lr(Ts)), e2.min() - 1.0, e2.max() + 1.0)
    held_runs = np.zeros((n_T, n_lr), bool)
    for i in held_idx:
        held_runs[i] = _window(int(np.argmin(np.abs(e2 - law_eta[i]))), n_lr, w)
    held_pts = held_runs[:, :, None] & all_pts
    heldout_r2 = r2_score(scored[held_pts], law.predict(TT[held_pts], LL[held_pts], t=SS[held_pts]))

    # sequence to sequence: first half of the curves -> second half, near each horizon's optimum
    # at T/2 (the last point of the first half)
    half = n_pt // 2
    s2s_runs = np.zeros((n_T, n_lr), bool)
    for i in range(n_T):
        if np.isfinite(curves[i, :, half - 1]).any():
            s2s_runs[i] = _window(int(np.nanargmin(curves[i, :, half - 1])), n_lr, w)
    s2s_runs &= finite[:, :, :half].all(axis=2)
    first = s2s_runs[:, :, None] & (np.arange(n_pt) < half)
    second = s2s_runs[:, :, None] & (np.arange(n_pt) >= half)
    law_s2s = ConvexScalingLaw("linear").fit(TT[first], LL[first], curves[first], t=SS[first])
    seq2seq_r2 = r2_score(scored[second], law_s2s.predict(TT[second], LL[second], t=SS[second]))

    # final losses of the held-out runs: the law vs baselines fitted on the short final losses
    final = scored[:, :, -1]
    pw = np.full(final.shape, np.nan)
    for j in range(n_lr):
        m = short & np.isfinite(curves[:, j, -1])
        if m.sum() >= 2:
            c = np.polyfit(np.log(Ts[m]), np.log(curves[m, j, -1]), 1)
            pw[:, j] = np.exp(np.polyval(c, np.log(Ts)))
    persist = np.broadcast_to(curves[i_last, :, -1][None, :], final.shape)
    # runs every arm can predict (decided from the short runs only)
    comp = held_runs & np.isfinite(pw) & np.isfinite(persist)
    pred_final = {"convex_law": law.predict(np.broadcast_to(Ts[:, None], final.shape)[comp],
                                            np.broadcast_to(lrs[None, :], final.shape)[comp]),
                  "power_law": pw[comp], "persistence": persist[comp]}
    actual = final[comp]
    metrics = {"heldout_r2": {"convex_law": heldout_r2}, "seq2seq_r2": {"convex_law": seq2seq_r2},
               "extrap_log_error": {arm: float(np.mean(np.abs(np.log(p) - np.log(actual))))
                                    for arm, p in pred_final.items()}}

    # optimal peak LR at the held-out horizons, in log2 units (a factor 2 = 1)
    best = np.array([empirical_best_log2(curves[i, :, -1], e2.astype(float)) for i in held_idx])
    const = empirical_best_log2(curves[i_last, :, -1], e2.astype(float))
    metrics["lr_log2_error"] = {"convex_law": float(np.mean(np.abs(law_eta[held_idx] - best))),
                                "constant_transfer": float(np.mean(np.abs(const - best)))}
    info = {"horizons": Ts.tolist(), "lr_grid_log2": e2.tolist(), "checkpoints": steps.tolist(),
            "curves": np.where(finite, curves, -1.0).round(5).tolist(),
            "init_loss": init_loss, "bayes_loss": bayes,
            "fit": {"L_inf": law.L_inf_, "A": law.A_, "B": law.B_, "r2_fit": law.r2_},
            "fit_seq2seq": {"L_inf": law_s2s.L_inf_, "A": law_s2s.A_, "B": law_s2s.B_, "r2_fit": law_s2s.r2_},
            "eta_star_log2_pred": law_eta[held_idx].tolist(), "best_lr_log2_heldout": best.tolist(),
            "best_lr_log2_at_fit_max_T": const,
            "fit_runs": fit_runs.astype(int).tolist(), "heldout_runs": held_runs.astype(int).tolist(),
            "seq2seq_runs": s2s_runs.astype(int).tolist(),
            "n_heldout_diverged": int(np.sum(held_runs & ~finite.all(axis=2)))}
    return {"metrics": metrics, "info": info}
