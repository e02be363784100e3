"""Fit the convex-bound law on loss curves, predict held-out curves (CPU proxy of paper Sec. 5).

A 32-h-10 ReLU MLP is trained with plain SGD (batch 32) and a linear-decay schedule in one pass
over an online teacher-student classification stream (noisy labels, so the loss has a floor, as in
single-epoch LM pre-training), for every (horizon T, peak learning rate) pair of a grid. The
population loss of each run (on one fixed set of fresh samples) is recorded at ``n_points``
points of its curve, t = T/n, 2T/n, ..., T. All runs of one seed share the initial weights and the
minibatch sequence; they are trained as one stacked ensemble (one batched forward/backward per
step through the shared training loop), and a run stops moving after its own horizon.

Fitting window. The paper's premise (abstract) is that training "quickly becomes weakly
convex after a short period of training": the law is a statement about the curve after that
initial phase, not about the first steps. Every protocol therefore fits and scores only the curve
points with ``t >= fit_from * T`` (``fit_from = 1/4`` at the quick scale: the first quarter of
each run is the pre-convex phase and is left out). The window of earlier versions (every point
from t = T/8 on) is reported beside the default in ``info["from_T_over_8"]``.

Everything the law is scored on is fixed before any held-out loss is seen. Protocols, all fitting
:class:`ConvexScalingLaw` on loss curves (each point's law term is the last-iterate bound of the
schedule up to that step) and scoring R^2 only on points the fit never saw:
- horizon extrapolation: one law fitted on the curves of the runs with T <= ``fit_max_T``,
  predicting the curves of the longer runs (``heldout_r2``), their final losses, and their optimal
  learning rate;
- sequence to sequence, pooled: one law fitted on the first halves (t <= T/2) of the selected
  runs of every horizon, predicting their second halves (``seq2seq_r2`` / ``convex_law``);
- sequence to sequence, per run: one law per run, fitted on that run's first half only,
  predicting its own second half; the per-seed value is the median over runs of the R^2 of each
  run's second half (``seq2seq_r2`` / ``convex_law_per_run``).
Premises: the runs learn (``gap_closed``: the share of the gap between the initial loss and the
teacher's Bayes loss closed by the best run at ``fit_max_T``) and the law fits its own fitting
points at all (``fit_r2``, in-sample; never used as evidence for the paper's R^2).
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

N_POINTS = 8   # default number of points recorded per loss curve: t = T/8, ..., T

SCALES = {
    "smoke": dict(horizons=[16, 32, 64, 128], fit_max_T=32, lr_grid_log2=list(range(-4, 2)),
                  hidden=32, batch=32, n_eval=2000, window=2, n_points=16, fit_from=0.25),
    "quick": dict(horizons=[100, 200, 400, 800, 1600, 3200, 6400], fit_max_T=400,
                  lr_grid_log2=list(range(-5, 3)), hidden=64, batch=32, n_eval=8192, window=2,
                  n_points=32, fit_from=0.25),
    # paper: GPT-2 / ResNet / ViT, horizons 100..8000 steps (80x), AdamW/SGD/Muon, several schedules
    "paper": dict(horizons=[100, 200, 400, 800, 1600, 3200, 8000], fit_max_T=400,
                  lr_grid_log2=list(range(-8, 4)), hidden=512, batch=32, n_eval=50000, window=2,
                  n_points=32, fit_from=0.25),
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


def checkpoints(T: int, n_points: int = N_POINTS) -> list[int]:
    """The steps of a run of horizon T at which its loss is recorded: round(T j / n_points),
    j = 1..n_points (``n_points`` distinct steps; T must be at least ``n_points``)."""
    if isinstance(n_points, bool) or not isinstance(n_points, (int, np.integer)) or n_points < 2:
        raise ValueError(f"n_points must be an integer >= 2, got {n_points!r}")
    if isinstance(T, bool) or not isinstance(T, (int, np.integer)) or T < n_points:
        raise ValueError(f"T must be an integer horizon >= n_points = {n_points}, got {T!r}")
    return [int(round(T * j / n_points)) for j in range(1, n_points + 1)]


def check_config(cfg: dict) -> None:
    """Reject a configuration the protocols cannot use, naming the offending key."""
    need = ("horizons", "fit_max_T", "lr_grid_log2", "hidden", "batch", "n_eval", "window",
            "n_points", "fit_from")
    missing = [k for k in need if k not in cfg]
    if missing:
        raise ValueError(f"cfg is missing {missing}")
    Ts = list(cfg["horizons"])
    if len(Ts) < 2 or sorted(set(Ts)) != Ts:
        raise ValueError(f"cfg['horizons'] must be at least two increasing horizons, got {Ts}")
    n = cfg["n_points"]
    for T in Ts:
        checkpoints(T, n)
    if cfg["fit_max_T"] not in Ts or cfg["fit_max_T"] == Ts[-1]:
        raise ValueError(f"cfg['fit_max_T'] must be one of the horizons below the longest, got {cfg['fit_max_T']}")
    f = cfg["fit_from"]
    if not (isinstance(f, (int, float)) and not isinstance(f, bool) and 0 < f <= 0.5 - 2.0 / n):
        raise ValueError(f"cfg['fit_from'] must be a fraction of the horizon in (0, 1/2 - 2/n_points] "
                         f"(at least three first-half points to fit), got {f!r}")
    if len(cfg["lr_grid_log2"]) < 3:
        raise ValueError(f"cfg['lr_grid_log2'] must have at least 3 learning rates, got {cfg['lr_grid_log2']}")
    for k in ("hidden", "batch", "n_eval"):
        if not isinstance(cfg[k], int) or cfg[k] < 1:
            raise ValueError(f"cfg[{k!r}] must be a positive integer, got {cfg[k]!r}")
    if not isinstance(cfg["window"], int) or cfg["window"] < 0:
        raise ValueError(f"cfg['window'] must be an integer >= 0, got {cfg['window']!r}")


def run_grid(cfg: dict, seed: int):
    """Population loss curves of every (horizon, lr) run: array (n_T, n_lr, n_points) at the steps
    :func:`checkpoints`, NaN where a run diverged; plus the loss at initialisation and the Bayes
    loss of the teacher. A run diverges from the first step where its loss or any of its
    gradients is non-finite; the step raises if every run has diverged."""
    check_config(cfg)
    n_pt = cfg["n_points"]
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
        with torch.no_grad():
            for p in m.parameters():          # a non-finite gradient diverges its run
                alive.mul_(torch.isfinite(p.grad).flatten(1).all(1))
        if not bool(alive.any()):
            raise FloatingPointError(f"every run of the grid diverged by step {step_no[0] + 1}: "
                                     "the learning-rate grid has no stable rate")
        scale = table[step_no[0]] * alive
        step_no[0] += 1
        with torch.no_grad():
            for p in m.parameters():
                p.grad.nan_to_num_(0.0, 0.0, 0.0)
                p.grad.mul_(scale.view(-1, *([1] * (p.ndim - 1))))
        o.step()
        return torch.where(alive, losses.detach(), torch.zeros(())).sum()

    curves = np.full((K, n_pt), np.nan)
    horizon_of = np.array([m[0] for m in members])
    slot = {}                                  # step -> [(member indices, curve column)]
    for T in Ts:
        for j, s in enumerate(checkpoints(T, n_pt)):
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
    curves = curves.reshape(len(Ts), len(lrs), n_pt)
    # a run that diverged (non-finite or worse than at the start) stays diverged afterwards
    bad = np.cumsum(~np.isfinite(curves), axis=2) > 0
    curves[bad] = np.nan
    return curves, init_loss, bayes


def empirical_best_log2(final_row: np.ndarray, grid_log2: np.ndarray) -> float:
    """The empirical optimal log2 learning rate of one horizon: the vertex of the parabola through
    the grid minimum and its two neighbours (log2 lr vs loss), kept within one grid step of the
    minimum; the grid minimum itself at the grid's edge or when the parabola does not open up."""
    final_row, grid_log2 = np.asarray(final_row, float), np.asarray(grid_log2, float)
    if final_row.shape != grid_log2.shape or final_row.ndim != 1:
        raise ValueError(f"final_row and grid_log2 must be 1-D of the same length, got "
                         f"{final_row.shape} and {grid_log2.shape}")
    ok = np.isfinite(final_row)
    if not ok.any():
        raise ValueError("final_row has no finite loss: every run of this horizon diverged")
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
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {sorted(SCALES)}, got {scale!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    cfg = SCALES[scale]
    seed_everything(seed)
    curves, init_loss, bayes = run_grid(cfg, seed)
    return analyse(cfg, curves, init_loss, bayes)


def _window(center: int, n: int, w: int) -> np.ndarray:
    m = np.zeros(n, bool)
    m[max(0, center - w): center + w + 1] = True
    return m


def _protocols(cfg, curves, init_loss, in_win):
    """The pooled horizon-extrapolation and sequence-to-sequence fits on the curve points marked by
    ``in_win`` (n_T, n_points). Returns the fitted laws, their held-out R^2 and the runs used."""
    Ts = np.array(cfg["horizons"])
    e2 = np.array(cfg["lr_grid_log2"])
    lrs = 2.0 ** e2
    w = cfg["window"]
    n_T, n_lr, n_pt = curves.shape
    steps = np.array([checkpoints(int(T), n_pt) for T in Ts])          # (n_T, n_points)
    TT = np.broadcast_to(Ts[:, None, None], curves.shape)
    LL = np.broadcast_to(lrs[None, :, None], curves.shape)
    SS = np.broadcast_to(steps[:, None, :], curves.shape)
    finite = np.isfinite(curves)
    scored = np.where(finite, curves, init_loss)
    win = np.broadcast_to(in_win[:, None, :], curves.shape)
    short = Ts <= cfg["fit_max_T"]

    # horizon extrapolation: fit on the windowed curves of the short runs near each short optimum
    fit_runs = np.zeros((n_T, n_lr), bool)
    for i in np.where(short)[0]:
        if np.isfinite(curves[i, :, -1]).any():
            fit_runs[i] = _window(int(np.nanargmin(curves[i, :, -1])), n_lr, w)
    fit_runs &= finite.all(axis=2)
    fit_pts = fit_runs[:, :, None] & win
    law = ConvexScalingLaw("linear").fit(TT[fit_pts], LL[fit_pts], curves[fit_pts], t=SS[fit_pts])
    # a law with B = 0 puts eta* at infinity: clip to one step beyond the grid (a miss, counted)
    law_eta = np.clip(np.log2(law.optimal_peak_lr(Ts)), e2.min() - 1.0, e2.max() + 1.0)
    held_runs = np.zeros((n_T, n_lr), bool)
    for i in np.where(~short)[0]:
        held_runs[i] = _window(int(np.argmin(np.abs(e2 - law_eta[i]))), n_lr, w)
    held_pts = held_runs[:, :, None] & win
    heldout_r2 = r2_score(scored[held_pts], law.predict(TT[held_pts], LL[held_pts], t=SS[held_pts]))

    # sequence to sequence: first half of the windowed curves -> second half, near each horizon's
    # optimum at T/2 (the last point of the first half)
    half = n_pt // 2
    s2s_runs = np.zeros((n_T, n_lr), bool)
    for i in range(n_T):
        if np.isfinite(curves[i, :, half - 1]).any():
            s2s_runs[i] = _window(int(np.nanargmin(curves[i, :, half - 1])), n_lr, w)
    s2s_runs &= finite[:, :, :half].all(axis=2)
    first_pt = win & (np.arange(n_pt) < half)
    second_pt = win & (np.arange(n_pt) >= half)
    first = s2s_runs[:, :, None] & first_pt
    second = s2s_runs[:, :, None] & second_pt
    law_s2s = ConvexScalingLaw("linear").fit(TT[first], LL[first], curves[first], t=SS[first])
    seq2seq_r2 = r2_score(scored[second], law_s2s.predict(TT[second], LL[second], t=SS[second]))
    return dict(law=law, law_eta=law_eta, fit_runs=fit_runs, held_runs=held_runs,
                heldout_r2=heldout_r2, law_s2s=law_s2s, s2s_runs=s2s_runs, seq2seq_r2=seq2seq_r2,
                first_pt=first_pt, second_pt=second_pt, TT=TT, LL=LL, SS=SS, scored=scored)


def _per_run_seq2seq(curves, pr):
    """One law per run of the sequence-to-sequence selection, fitted on that run's own windowed
    first half and scored on its own second half. Returns (median per-run R^2, R^2 of all
    second-half points pooled, per-run R^2 list)."""
    TT, LL, SS, scored = pr["TT"], pr["LL"], pr["SS"], pr["scored"]
    r2s, ys, preds = [], [], []
    for i, j in zip(*np.where(pr["s2s_runs"])):
        f, s = pr["first_pt"][i, j], pr["second_pt"][i, j]
        law = ConvexScalingLaw("linear").fit(TT[i, j, f], LL[i, j, f], curves[i, j, f], t=SS[i, j, f])
        p = law.predict(TT[i, j, s], LL[i, j, s], t=SS[i, j, s])
        y = scored[i, j, s]
        ys.append(y)
        preds.append(p)
        r = r2_score(y, p)
        if np.isfinite(r):
            r2s.append(r)
    if not r2s:
        raise ValueError("no run of the sequence-to-sequence selection has a second half with any "
                         "variance: the per-run R^2 is undefined")
    return float(np.median(r2s)), r2_score(np.concatenate(ys), np.concatenate(preds)), r2s


def analyse(cfg: dict, curves: np.ndarray, init_loss: float, bayes: float) -> dict:
    """Fit the law and the baselines on the recorded curves and score them (module docstring).

    Which runs the law is fitted and scored on is decided from fitted data only: the learning
    rates within ``window`` grid steps of the optimum, where the optimum is the empirical one for
    fitted horizons (final loss; for the sequence-to-sequence protocols, the loss at T/2) and the
    law's ``eta*(T)`` for held-out horizons. Only the curve points with ``t >= fit_from * T`` are
    fitted or scored. A held-out run that diverged is scored at the loss of the initialisation."""
    check_config(cfg)
    curves = np.asarray(curves, float)
    Ts = np.array(cfg["horizons"])
    e2 = np.array(cfg["lr_grid_log2"])
    lrs = 2.0 ** e2
    n_pt = cfg["n_points"]
    if curves.shape != (len(Ts), len(e2), n_pt):
        raise ValueError(f"curves must have shape (n_horizons, n_lrs, n_points) = "
                         f"{(len(Ts), len(e2), n_pt)}, got {curves.shape}")
    if not (np.isfinite(init_loss) and np.isfinite(bayes) and init_loss > bayes):
        raise ValueError(f"init_loss must be finite and above the Bayes loss, got {init_loss!r} and {bayes!r}")
    frac = np.arange(1, n_pt + 1) / n_pt
    in_win = np.broadcast_to(frac[None, :] >= cfg["fit_from"] - 1e-12, (len(Ts), n_pt))
    pr = _protocols(cfg, curves, init_loss, in_win)
    # the window of earlier versions: every point from the first one they recorded (t = T/8)
    early = _protocols(cfg, curves, init_loss,
                       np.broadcast_to(frac[None, :] >= 1.0 / 8 - 1e-12, (len(Ts), n_pt)))
    per_run_median, per_run_pooled, per_run_all = _per_run_seq2seq(curves, pr)
    law, law_eta, held_runs = pr["law"], pr["law_eta"], pr["held_runs"]

    finite = np.isfinite(curves)
    scored = pr["scored"]
    short = Ts <= cfg["fit_max_T"]
    held_idx = np.where(~short)[0]
    i_last = int(np.where(short)[0].max())

    # final losses of the held-out runs: the law vs baselines fitted on the short final losses
    final = scored[:, :, -1]
    pw = np.full(final.shape, np.nan)
    for j in range(len(lrs)):
        m = short & np.isfinite(curves[:, j, -1])
        if m.sum() >= 2:
            c = np.polyfit(np.log(Ts[m]), np.log(curves[m, j, -1]), 1)
            pw[:, j] = np.exp(np.polyval(c, np.log(Ts)))
    persist = np.broadcast_to(curves[i_last, :, -1][None, :], final.shape)
    # runs every arm can predict (decided from the short runs only)
    comp = held_runs & np.isfinite(pw) & np.isfinite(persist)
    if not comp.any():
        raise ValueError("no held-out run can be predicted by every arm (the short runs near the "
                         "law's optimum diverged)")
    pred_final = {"convex_law": law.predict(np.broadcast_to(Ts[:, None], final.shape)[comp],
                                            np.broadcast_to(lrs[None, :], final.shape)[comp]),
                  "power_law": pw[comp], "persistence": persist[comp],
                  # the trivial predictor (no learning at all), for the comparators' floor
                  "initial_loss": np.full(int(comp.sum()), init_loss)}
    actual = final[comp]
    best_short = np.nanmin(curves[i_last, :, -1])
    metrics = {"heldout_r2": {"convex_law": pr["heldout_r2"]},
               "seq2seq_r2": {"convex_law": pr["seq2seq_r2"], "convex_law_per_run": per_run_median},
               "fit_r2": {"convex_law": min(pr["law"].r2_, pr["law_s2s"].r2_)},
               "gap_closed": {"sgd": float((init_loss - best_short) / (init_loss - bayes))},
               "extrap_log_error": {arm: float(np.mean(np.abs(np.log(p) - np.log(actual))))
                                    for arm, p in pred_final.items()}}

    # optimal peak LR at the held-out horizons, in log2 units (a factor 2 = 1)
    best = np.array([empirical_best_log2(curves[i, :, -1], e2.astype(float)) for i in held_idx])
    const = empirical_best_log2(curves[i_last, :, -1], e2.astype(float))
    metrics["lr_log2_error"] = {"convex_law": float(np.mean(np.abs(law_eta[held_idx] - best))),
                                "constant_transfer": float(np.mean(np.abs(const - best)))}
    steps = np.array([checkpoints(int(T), n_pt) for T in Ts])
    fit_info = lambda lw: {"L_inf": lw.L_inf_, "A": lw.A_, "B": lw.B_, "r2_fit": lw.r2_}  # noqa: E731
    info = {"horizons": Ts.tolist(), "lr_grid_log2": e2.tolist(), "checkpoints": steps.tolist(),
            "fit_from": cfg["fit_from"],
            "curves": np.where(finite, curves, -1.0).round(5).tolist(),
            "init_loss": init_loss, "bayes_loss": bayes,
            "fit": fit_info(law), "fit_seq2seq": fit_info(pr["law_s2s"]),
            "seq2seq_per_run_r2": np.round(per_run_all, 4).tolist(),
            "seq2seq_per_run_pooled_r2": per_run_pooled,
            # the same protocols on the window of earlier versions (t >= T/8)
            "from_T_over_8": {"heldout_r2": early["heldout_r2"], "seq2seq_r2": early["seq2seq_r2"],
                              "fit": fit_info(early["law"]), "fit_seq2seq": fit_info(early["law_s2s"]),
                              "eta_star_log2_pred": early["law_eta"][held_idx].tolist()},
            "eta_star_log2_pred": law_eta[held_idx].tolist(), "best_lr_log2_heldout": best.tolist(),
            "best_lr_log2_at_fit_max_T": const,
            "fit_runs": pr["fit_runs"].astype(int).tolist(), "heldout_runs": held_runs.astype(int).tolist(),
            "seq2seq_runs": pr["s2s_runs"].astype(int).tolist(),
            "n_heldout_diverged": int(np.sum(held_runs & ~finite.all(axis=2)))}
    return {"metrics": metrics, "info": info}
