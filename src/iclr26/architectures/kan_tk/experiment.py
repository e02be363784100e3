"""Claim checks for the two-layer KAN with first-layer training (kan_tk).

One trial = one seed: random inputs on the unit sphere S^{d-1}, a B-spline KAN with fixed signs in
the second layer, full-batch GD on the first layer only (the shared loop ``common.training.train``
with ``torch.optim.SGD`` on the whole batch), and a two-layer ReLU network trained the same way.

Measurements (all per seed):
- ``log10_loss_ratio``: log10 L(T)/L(0) of the widest KAN on random labels (zero training error).
- ``residual_ratio``: ||y - u(T_lab)|| / ||y|| after a fixed number of steps for labels in the top
  quarter of the KAN-TK eigenvectors ("structured"), random labels, and labels in the bottom quarter
  ("anti"), all from the same initialisation (Thm 4.6: rate set by the label's spectrum).
- ``thm46_r2``: R^2 between the observed log residual curve and Thm 4.6's prediction from H(0).
- ``alpha_shift``: ||alpha(T) - alpha(0)||_inf after GD to convergence at a narrow and a wide
  width (n = ``shift_n``): the lazy-training shift the paper shows shrinking with m.
- ``width_exponent``: slope of log(width needed) against log(n), for the KAN and for the ReLU net.
  Width needed at a given n = the smallest width on a grid at which full-batch GD (step
  1/lambda_max(H(0))) reaches zero training error, L(T)/L(0) <= ``zero_tol``, within ``width_steps``
  steps, measured directly by training every grid width in increasing order until one succeeds.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import torch

from iclr26.common.seeding import seed_everything
from iclr26.common.training import train

from .layers import (
    KANTKConfig,
    TwoLayerKAN,
    TwoLayerReLU,
    kan_tangent_kernel,
    predicted_residual,
    relu_tangent_kernel,
)

SCALES = {
    "smoke": dict(d=5, n=8, width=32, eps=1e-3, label_steps=20, max_steps=150,
                  shift_n=8, shift_m=(16, 48), scan_n=(4, 8), grid_m=(2, 4, 8), width_steps=100,
                  zero_tol=1e-3),
    "quick": dict(d=10, n=32, width=512, eps=1e-4, label_steps=150, max_steps=3000,
                  shift_n=32, shift_m=(16, 256), scan_n=(8, 16, 32, 64),
                  grid_m=(2, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256), width_steps=1500,
                  zero_tol=1e-3),
    # Section 5 of the paper: n = 100, d = 100, m from 500 to 32000 (FastKAN); not run in CI.
    "paper": dict(d=100, n=100, width=32000, eps=1e-6, label_steps=500, max_steps=20000,
                  shift_n=100, shift_m=(500, 32000), scan_n=(25, 50, 100, 200),
                  grid_m=(2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192), width_steps=20000,
                  zero_tol=1e-6),
}
SEEDS = {"smoke": 1, "quick": 6, "paper": 10}

GRID_SIZE, SPLINE_ORDER = 5, 3   # pykan's defaults (G = 5, k = 3): g = 8 bases per edge
INIT_STD = 0.1                   # small alpha(0) as the paper asks; the value is ours
DTYPE = torch.float64


def _sphere(n: int, d: int, gen: torch.Generator) -> torch.Tensor:
    x = torch.randn(n, d, generator=gen, dtype=DTYPE)
    return x / x.norm(dim=1, keepdim=True)


def _kan(d: int, m: int, gen: torch.Generator) -> TwoLayerKAN:
    cfg = KANTKConfig(d, m, grid_size=GRID_SIZE, spline_order=SPLINE_ORDER, init_std=INIT_STD,
                      symmetric_init=True)
    return TwoLayerKAN(cfg, generator=gen).to(DTYPE)


def _relu(d: int, m: int, gen: torch.Generator) -> TwoLayerReLU:
    return TwoLayerReLU(d, m, init_std=1.0, symmetric_init=True, generator=gen).to(DTYPE)


class _Reached(Exception):
    """Raised by the GD callback to stop once the loss ratio target is met."""


def gradient_descent(model, x, y, steps: int, eta: float, stop_ratio: float | None = None) -> np.ndarray:
    """Full-batch GD on L = 1/2 ||y - u||^2 over the trainable (first-layer) parameters.

    Returns the loss L(t) for t = 0..T: T = ``steps``, or the first t with L(t)/L(0) <= ``stop_ratio``
    (found one update later, when that step's loss is computed; the extra update is not recorded).
    """
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=eta)

    def loss_fn(mdl, b):
        return 0.5 * ((mdl(b[0]) - b[1]) ** 2).sum()

    seen = []

    def callback(step, mdl, loss):          # loss = L(step - 1), computed before this step's update
        seen.append(loss)
        if stop_ratio is not None and loss <= stop_ratio * seen[0]:
            raise _Reached

    try:
        res = train(model, opt, itertools.repeat((x, y)), steps, loss_fn, callback=callback,
                    eval_fn=lambda mdl: {"loss": float(loss_fn(mdl, (x, y)))})
    except _Reached:
        return np.array(seen)
    return np.array(res.losses + [res.evals[-1][1]["loss"]])


def _steps_to(eps: float, eta: float, lam_min: float, cap: int) -> int:
    """Steps after which the linearised residual of Thm 4.2 has shrunk by ``eps``: (1 - eta lam)^t <= eps."""
    rate = eta * max(lam_min, 1e-12)
    return int(min(cap, max(1, math.ceil(math.log(1.0 / eps) / rate))))


def _model(arch: str, d: int, m: int, gen: torch.Generator):
    return (_kan(d, m, gen), kan_tangent_kernel) if arch == "kan" else (_relu(d, m, gen), relu_tangent_kernel)


def lazy_shift(x: torch.Tensor, y: torch.Tensor, m: int, cfg: dict, gen: torch.Generator) -> float:
    """||alpha(T) - alpha(0)||_inf of a KAN of width ``m`` after GD (eta = 1/lambda_max(H(0))) until the
    linearised residual has shrunk by sqrt(eps) (capped at ``max_steps``)."""
    model, kfn = _model("kan", x.shape[1], m, gen)
    lam = torch.linalg.eigvalsh(kfn(model, x))
    theta0 = model.alpha.detach().clone()
    eta = 1.0 / float(lam[-1])
    gradient_descent(model, x, y, _steps_to(cfg["eps"] ** 0.5, eta, float(lam[0]), cfg["max_steps"]), eta)
    return float((model.alpha.detach() - theta0).abs().max())


def width_needed(arch: str, x: torch.Tensor, y: torch.Tensor, cfg: dict, gen: torch.Generator) -> tuple[float, list]:
    """Smallest width on ``grid_m`` at which GD reaches zero training error (L(T)/L(0) <= zero_tol)
    within ``width_steps`` steps, trying widths in increasing order. Returns (width, runs); a scan in
    which no width succeeds returns twice the largest grid width (a lower bound, flagged in runs)."""
    runs = []
    for m in cfg["grid_m"]:
        model, kfn = _model(arch, x.shape[1], m, gen)
        lam_max = float(torch.linalg.eigvalsh(kfn(model, x))[-1])
        if not lam_max > 0:      # no hidden unit active on any point (narrow ReLU): the gradient is zero
            runs.append({"m": m, "loss_ratio": 1.0, "steps": 0})
            continue
        losses = gradient_descent(model, x, y, cfg["width_steps"], 1.0 / lam_max, stop_ratio=cfg["zero_tol"])
        ratio = float(losses[-1] / losses[0])
        runs.append({"m": m, "loss_ratio": ratio, "steps": len(losses) - 1})
        if ratio <= cfg["zero_tol"]:
            return float(m), runs
    runs.append({"censored": True})
    return 2.0 * cfg["grid_m"][-1], runs


def width_exponent(cfg: dict, gen: torch.Generator) -> tuple[dict, list]:
    """Slopes of log(width needed) on log(n) for the KAN and the ReLU network, on the same data."""
    needed = {"kan": [], "relu": []}
    rows = []
    for n in cfg["scan_n"]:
        x = _sphere(n, cfg["d"], gen)
        y = torch.randn(n, generator=gen, dtype=DTYPE)
        row = {"n": n}
        for arch in needed:
            m, runs = width_needed(arch, x, y, cfg, gen)
            needed[arch].append(m)
            row[arch] = {"width_needed": m, "runs": runs}
        rows.append(row)
    logn = np.log(cfg["scan_n"])
    return {a: float(np.polyfit(logn, np.log(v), 1)[0]) for a, v in needed.items()}, rows


def run(scale: str, seed: int) -> dict:
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {sorted(SCALES)}, got {scale!r}")
    seed_everything(seed)
    cfg = SCALES[scale]
    gen = torch.Generator().manual_seed(10_000 + seed)
    d, n, m = cfg["d"], cfg["n"], cfg["width"]

    # --- widest KAN: zero training error, label structure, Thm 4.6 ---------------------------
    x = _sphere(n, d, gen)
    init = _kan(d, m, gen).state_dict()
    model = _kan(d, m, gen)
    model.load_state_dict(init)
    H0 = kan_tangent_kernel(model, x).numpy()
    lam, vec = np.linalg.eigh(H0)
    eta = 1.0 / lam[-1]
    q = max(1, n // 4)
    rng = np.random.default_rng(seed)
    labels = {
        "random": rng.standard_normal(n),
        "structured": vec[:, -q:] @ rng.standard_normal(q),
        "anti": vec[:, :q] @ rng.standard_normal(q),
    }
    labels = {k: v / np.linalg.norm(v) * math.sqrt(n) for k, v in labels.items()}

    steps = _steps_to(cfg["eps"], eta, lam[0], cfg["max_steps"])
    y = torch.tensor(labels["random"], dtype=DTYPE)
    losses = gradient_descent(model, x, y, steps, eta)
    resid = np.sqrt(2 * losses)
    t = np.arange(len(losses))
    pred = predicted_residual(H0, labels["random"], eta, t)
    keep = resid > 1e-6 * resid[0]  # compare where the residual is above float noise
    lo, lp = np.log(resid[keep]), np.log(pred[keep])
    r2 = 1.0 - np.sum((lo - lp) ** 2) / max(np.sum((lo - lo.mean()) ** 2), 1e-300)

    T = cfg["label_steps"]
    ratio = {"random": float(resid[min(T, len(resid) - 1)] / resid[0])}
    for kind in ("structured", "anti"):
        mdl = _kan(d, m, gen)
        mdl.load_state_dict(init)
        ls = gradient_descent(mdl, x, torch.tensor(labels[kind], dtype=DTYPE), T, eta)
        ratio[kind] = float(math.sqrt(ls[-1] / ls[0]))

    # --- lazy-training shift: narrow vs wide KAN on the same data ------------------------------
    xs = _sphere(cfg["shift_n"], d, gen)
    ys = torch.randn(cfg["shift_n"], generator=gen, dtype=DTYPE)
    shift = [lazy_shift(xs, ys, mm, cfg, gen) for mm in cfg["shift_m"]]

    # --- width needed vs n: KAN against ReLU under the same protocol -------------------------
    exponents, width_rows = width_exponent(cfg, gen)

    return {
        "metrics": {
            "log10_loss_ratio": {"kan": float(np.log10(max(losses[-1], 1e-300) / losses[0]))},
            "residual_ratio": ratio,
            "thm46_r2": {"kan": float(r2)},
            "width_exponent": exponents,
            "alpha_shift": {"wide": shift[-1], "narrow": shift[0]},
        },
        "info": {
            "n": n, "d": d, "width": m, "steps": int(steps), "eta": float(eta),
            "lambda_min": float(lam[0]), "lambda_max": float(lam[-1]),
            "loss_curve": [float(v) for v in losses[:: max(1, len(losses) // 50)]],
            "predicted_curve": [float(v) ** 2 / 2 for v in pred[:: max(1, len(pred) // 50)]],
            "alpha_shift_widths": list(cfg["shift_m"]),
            "width_scan": {"grid": list(cfg["grid_m"]), "zero_tol": cfg["zero_tol"],
                           "steps": cfg["width_steps"], "rows": width_rows},
        },
    }
