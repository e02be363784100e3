"""Multi-marginal flow matching with adversarially learnt interpolants (ALI-CFM), with the OT-CFM and
cubic-spline MMFM baselines, in the ``torchcfm`` style.

Paper: Kviman, Tamogashev, Branchini, Elvira, Lagergren, Malkin, "Multi-Marginal Flow Matching with
Adversarially Learnt Interpolants" (ICLR 2026, arXiv 2510.01159). Defaults follow the official code
(``mmacosha/adversarially-learned-interpolants``: ``ali_cfm/nets.py``, ``ali_cfm/training/``,
``configs/st/st_cfg.yaml``) unless a docstring says otherwise; the README lists every departure.

* Interpolant (Sec. 3.1): ``G(x0, x1, t) = (1 - t) x0 + t x1 + t (1 - t) f(x0, x1, t)``, so that
  ``G(., ., 0) = x0`` and ``G(., ., 1) = x1``; ``dG/dt = x1 - x0 + (1 - 2t) f + t (1 - t) df/dt``.
  During GAN training the network sees a jittered time ``t + 0.01 * eps`` (official ``t_smooth``).
* Coupling (official ``interpolant_ot: full``): chains ``x_{t_0} -> x_{t_1} -> ... -> x_{t_K}`` whose
  consecutive links are OT-matched; ``(x0, x1)`` are the chain's ends and ``x_{t_i}`` its point at the
  intermediate time the step trains.
* MSE pretraining (official ``pretain_interpolant``, 1001 steps at lr 1e-3): ``|G(x0, x1, t_i) - x_{t_i}|^2``.
* Adversarial stage (Sec. 3.1, official ``train_interpolant_with_gan``, ``gan_loss: vanilla``): one
  observed intermediate time per step; ``D`` on ``softplus(-D(real)) + softplus(D(G))``, ``G`` on
  ``softplus(-D(G)) + lambda R`` with ``R`` the piecewise regulariser (official
  ``picewise_oskar_version``, ``correct_coeff = 10``): for ``s ~ U[0, 1]``, the mean squared distance
  between ``G(x0, x1, s)`` and the piecewise-linear path through ``(0, x0), (t_i, x_{t_i}), (1, x1)``.
* Flow-matching stage (Sec. 3.2): ``t ~ U[0, 1]``, ``x_t = G(x0, x1, t)``, ``u_t = dG/dt``, loss
  ``||v(x_t, t) - u_t||^2``; inference integrates ``dx/dt = v(x, t)`` (RK4).

Baselines: OT-CFM on consecutive snapshots (Tong et al. 2024: piecewise-linear paths between OT-paired
points of consecutive times) and MMFM (Rohbeck et al. 2025: a cubic spline through OT-matched chains).
Exact OT plans come from POT (``ot.emd``), the plan of ``torchcfm``'s ``OTPlanSampler("exact")``;
``torchcfm`` itself is not a dependency.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from scipy.interpolate import CubicSpline
from torch import nn

INTERPOLANTS = ("adversarial", "ot_linear", "cubic_spline")
COUPLINGS = ("chain", "border")


def _mlp(d_in: int, d_out: int, width: int, depth: int, act=nn.SiLU) -> nn.Sequential:
    layers, d = [], d_in
    for _ in range(depth):
        layers += [nn.Linear(d, width), act()]
        d = width
    layers.append(nn.Linear(d, d_out))
    return nn.Sequential(*layers)


def _as_time(t, n: int, like: torch.Tensor) -> torch.Tensor:
    t = torch.as_tensor(t, dtype=like.dtype, device=like.device)
    if t.dim() == 2 and t.shape[1] == 1:
        t = t[:, 0]
    if t.dim() == 0:
        t = t.expand(n)
    if t.shape != (n,):
        raise ValueError(f"t must be a scalar or have shape ({n},), got {tuple(t.shape)}")
    return t


def _finite(name: str, value: torch.Tensor) -> None:
    if not bool(torch.isfinite(value).all()):
        raise FloatingPointError(f"non-finite {name}; stopping training")


def exact_ot_plan(x0, x1) -> torch.Tensor:
    """The exact OT plan (squared Euclidean cost, uniform weights) between two point sets, as a dense
    ``(n, m)`` tensor summing to one (POT ``ot.emd``; the plan of ``torchcfm``'s
    ``OTPlanSampler(method="exact")``)."""
    import ot

    x0, x1 = torch.as_tensor(x0), torch.as_tensor(x1)
    if x0.dim() != 2 or x1.dim() != 2 or x0.shape[1] != x1.shape[1]:
        raise ValueError(f"x0 and x1 must be (n, d) and (m, d) with the same d, got {tuple(x0.shape)} "
                         f"and {tuple(x1.shape)}")
    if not (bool(torch.isfinite(x0).all()) and bool(torch.isfinite(x1).all())):
        raise ValueError("x0 and x1 must be finite (got NaN or inf)")
    a, b = x0.detach().double().cpu().numpy(), x1.detach().double().cpu().numpy()
    cost = ot.dist(a, b)
    plan = ot.emd(np.full(len(a), 1.0 / len(a)), np.full(len(b), 1.0 / len(b)), cost / max(cost.max(), 1e-12))
    return torch.from_numpy(plan / plan.sum())


class SparsePlan:
    """A coupling kept as its non-zero entries sorted by row (an exact OT plan between ``n`` and ``m``
    points has at most ``n + m - 1``), for fast sampling of pairs and of row conditionals."""

    def __init__(self, plan: torch.Tensor):
        plan = torch.as_tensor(plan, dtype=torch.float64)
        if plan.dim() != 2 or not bool(torch.isfinite(plan).all()) or bool((plan < 0).any()):
            raise ValueError("plan must be a finite, non-negative (n, m) matrix")
        if float(plan.sum()) <= 0:
            raise ValueError("plan must have positive mass")
        self.shape = tuple(plan.shape)
        rows, cols = plan.nonzero(as_tuple=True)           # row-major, so sorted by row
        self.rows, self.cols, self.vals = rows, cols, plan[rows, cols]
        self.cum = torch.cumsum(self.vals, 0)
        counts = torch.bincount(rows, minlength=plan.shape[0])
        self.end = torch.cumsum(counts, 0)
        self.start = self.end - counts
        self.row_mass = plan.sum(1)

    def pairs(self, n: int, generator=None):
        k = torch.multinomial(self.vals, n, replacement=True, generator=generator)
        return self.rows[k], self.cols[k]

    def conditional(self, i: torch.Tensor, generator=None) -> torch.Tensor:
        i = torch.as_tensor(i, dtype=torch.long)
        if bool((self.row_mass[i] <= 0).any()):
            raise ValueError("a row index with zero mass in the plan has no conditional")
        base = torch.where(self.start[i] > 0, self.cum[(self.start[i] - 1).clamp(min=0)],
                           torch.zeros((), dtype=self.cum.dtype))
        u = torch.rand(len(i), generator=generator, dtype=torch.float64)
        k = torch.searchsorted(self.cum, base + u * self.row_mass[i], right=True)
        k = torch.minimum(torch.maximum(k, self.start[i]), self.end[i] - 1)
        return self.cols[k]


def _sparse(plan) -> SparsePlan:
    return plan if isinstance(plan, SparsePlan) else SparsePlan(plan)


def sample_plan(plan, n: int, generator=None):
    """``n`` index pairs ``(i, j)`` drawn from a coupling ``plan`` (dense or :class:`SparsePlan`)."""
    return _sparse(plan).pairs(n, generator)


def sample_conditional(plan, i: torch.Tensor, generator=None) -> torch.Tensor:
    """For each row index ``i``, a column ``j`` drawn from ``plan[i, :]`` (the plan's conditional)."""
    return _sparse(plan).conditional(i, generator)


def ot_chain_indices(plans, n: int, generator=None) -> list:
    """Index chains through consecutive couplings: ``(i_0, i_1)`` from ``plans[0]``, each later index
    from the next plan's conditional given the previous one (the multi-marginal OT coupling of MMFM and
    of the official ``ot='full'``); a list of ``len(plans) + 1`` index tensors of length ``n``."""
    plans = [_sparse(p) for p in plans]
    i, j = sample_plan(plans[0], n, generator)
    idx = [i, j]
    for p in plans[1:]:
        idx.append(sample_conditional(p, idx[-1], generator))
    return idx


class AdversarialInterpolant(nn.Module):
    """``G(x0, x1, t) = (1 - t) x0 + t x1 + t (1 - t) f(x0, x1, t)`` (Sec. 3.1). ``f`` is an MLP on
    ``[x0, x1, t]`` with ELU activations, two hidden layers of width 64 (official
    ``TrainableInterpolant``, ``net_hidden: 64`` in the ST config). ``t_smooth`` (official 0.01) is the
    standard deviation of the Gaussian jitter added to the network's time input when ``smooth=True``
    (training); the factors ``(1 - t), t, t (1 - t)`` always use the exact ``t``. ``zero_init=True``
    zeroes the last layer (``f = 0``, the linear interpolant; not the official default)."""

    def __init__(self, dim: int, width: int = 64, depth: int = 2, t_smooth: float = 0.01,
                 zero_init: bool = False):
        super().__init__()
        if dim < 1 or width < 1 or depth < 1:
            raise ValueError(f"dim, width and depth must be >= 1, got {dim}, {width}, {depth}")
        if not np.isfinite(t_smooth) or t_smooth < 0:
            raise ValueError(f"t_smooth must be finite and >= 0, got {t_smooth}")
        self.dim, self.t_smooth = dim, float(t_smooth)
        self.f = _mlp(2 * dim + 1, dim, width, depth, nn.ELU)
        if zero_init:
            nn.init.zeros_(self.f[-1].weight)
            nn.init.zeros_(self.f[-1].bias)

    def correction(self, x0, x1, t):
        """``f(x0, x1, t)`` for ``t`` of shape ``(n,)``."""
        return self.f(torch.cat([x0, x1, t[:, None]], dim=1))

    def forward(self, x0, x1, t, smooth: bool = False, generator=None):
        t = _as_time(t, len(x0), x0)
        t_in = t
        if smooth and self.t_smooth > 0:
            t_in = t + self.t_smooth * torch.randn(t.shape, generator=generator, dtype=t.dtype)
        tt = t[:, None]
        return (1 - tt) * x0 + tt * x1 + tt * (1 - tt) * self.correction(x0, x1, t_in)

    def velocity(self, x0, x1, t, create_graph: bool = False):
        """``dG/dt = x1 - x0 + (1 - 2t) f + t (1 - t) df/dt`` (``df/dt`` by forward-mode AD; the official
        ``dI_dt`` uses ``jacrev``, the same derivative)."""
        t = _as_time(t, len(x0), x0)
        f, df = torch.func.jvp(lambda s: self.correction(x0, x1, s), (t,), (torch.ones_like(t),))
        if not create_graph:
            f, df = f.detach(), df.detach()
        tt = t[:, None]
        return x1 - x0 + (1 - 2 * tt) * f + tt * (1 - tt) * df


class Discriminator(nn.Module):
    """Time-conditioned discriminator ``D(x, t)`` (a logit; Sec. 3.1): the official
    ``Discriminator(dim + 1, 64, apply_sigmoid=False)``, two ELU hidden layers of width 64."""

    def __init__(self, dim: int, width: int = 64, depth: int = 2):
        super().__init__()
        self.net = _mlp(dim + 1, 1, width, depth, nn.ELU)

    def forward(self, x, t):
        t = _as_time(t, len(x), x)
        return self.net(torch.cat([x, t[:, None]], dim=1)).squeeze(1)


class VectorField(nn.Module):
    """``v(x, t)``: an MLP on ``[x, t]``, three SELU hidden layers of width 128 (the official ``MLP``
    with ``cfm_dim: 128``)."""

    def __init__(self, dim: int, width: int = 128, depth: int = 3):
        super().__init__()
        self.net = _mlp(dim + 1, dim, width, depth, nn.SELU)

    def forward(self, x, t):
        t = _as_time(t, len(x), x)
        return self.net(torch.cat([x, t[:, None]], dim=1))


def _check_snapshots(snapshots, times):
    if len(snapshots) != len(times):
        raise ValueError(f"got {len(snapshots)} snapshots but {len(times)} times")
    if len(times) < 2:
        raise ValueError("need at least two snapshots (the end marginals)")
    times = np.asarray(times, dtype=float)
    if not np.all(np.isfinite(times)):
        raise ValueError(f"times must be finite, got {times.tolist()}")
    if not np.all(np.diff(times) > 0):
        raise ValueError(f"times must be strictly increasing, got {times.tolist()}")
    xs = [torch.as_tensor(np.asarray(s), dtype=torch.float32) for s in snapshots]
    d = xs[0].shape[1] if xs[0].dim() == 2 else None
    if any(x.dim() != 2 or x.shape[1] != d or len(x) < 2 for x in xs):
        raise ValueError("every snapshot must be an (n_i, d) array with n_i >= 2 and one common d, got "
                         f"shapes {[tuple(x.shape) for x in xs]}")
    bad = [k for k, x in enumerate(xs) if not bool(torch.isfinite(x).all())]
    if bad:
        raise ValueError(f"snapshots must be finite: snapshot(s) {bad} hold NaN or inf")
    return xs, times


def _unit_times(times: np.ndarray) -> np.ndarray:
    return (times - times[0]) / (times[-1] - times[0])


def piecewise_target(x0, xm, x1, t_mid, s) -> torch.Tensor:
    """The piecewise-linear path through ``(0, x0), (t_mid, xm), (1, x1)`` at times ``s`` (shape ``(n,)``),
    the target of the official piecewise regulariser."""
    s = s[:, None]
    left = x0 + (s / t_mid) * (xm - x0)
    right = xm + ((s - t_mid) / (1 - t_mid)) * (x1 - xm)
    return torch.where(s < t_mid, left, right)


def piecewise_regulariser(model: AdversarialInterpolant, x0, xm, x1, t_mid: float, generator=None):
    """``E_s |G(x0, x1, s) - L(s)|^2`` (mean over batch and coordinates, official ``.mean()``), ``s ~ U[0,1]``,
    ``L`` the piecewise-linear path through the coupled triple (official ``picewise_oskar_version``,
    network evaluated without time jitter)."""
    s = torch.rand(len(x0), generator=generator, dtype=x0.dtype)
    return (model(x0, x1, s) - piecewise_target(x0, xm, x1, t_mid, s)).pow(2).mean()


def pretrain_interpolant(model: AdversarialInterpolant, snapshots, times, steps: int = 1001,
                         batch_size: int = 256, lr: float = 1e-3, generator=None) -> list:
    """MSE pretraining (official ``pretain_interpolant``, ``pretain_ot: full``, 1001 steps, Adam lr 1e-3):
    ``mean |G(x0, x1, t_i) - x_{t_i}|^2`` on OT chains, one intermediate time per step."""
    xs, times = _check_snapshots(snapshots, times)
    if len(xs) < 3:
        raise ValueError("pretraining needs at least one intermediate snapshot")
    if steps < 0 or batch_size < 2:
        raise ValueError(f"steps must be >= 0 and batch_size >= 2, got {steps}, {batch_size}")
    tn = _unit_times(times)
    plans = [SparsePlan(exact_ot_plan(a, b)) for a, b in zip(xs[:-1], xs[1:])]
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        idx = ot_chain_indices(plans, batch_size, generator)
        k = int(torch.randint(1, len(xs) - 1, (1,), generator=generator))
        x0, xk, x1 = xs[0][idx[0]], xs[k][idx[k]], xs[-1][idx[-1]]
        loss = (model(x0, x1, float(tn[k])) - xk).pow(2).mean()
        _finite("pretraining loss", loss)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def train_interpolant(model: AdversarialInterpolant, disc: Discriminator, snapshots, times, steps: int = 2000,
                      batch_size: int = 256, lr: float = 1e-5, reg: float = 10.0, adversarial: bool = True,
                      generator=None) -> dict:
    """Adversarial learning of the interpolant (Sec. 3.1; official ``train_interpolant_with_gan`` with
    ``gan_loss: vanilla``, ``interpolant_ot: full``, ``regulariser: piecewise``, ``correct_coeff: 10``,
    Adam lr 1e-5 for ``G`` and ``D`` with torch's default betas). Each step draws a batch of OT chains
    and one observed intermediate time ``t_i``; ``D`` is updated on
    ``softplus(-D(x_{t_i}, t_i)) + softplus(D(G, t_i))``, then ``G`` on
    ``softplus(-D(G, t_i)) + reg * R`` (:func:`piecewise_regulariser`), ``G`` drawn with time jitter.
    ``adversarial=False`` drops the GAN term (``G`` on ``reg * R`` only; the no-GAN control).
    Raises ``FloatingPointError`` on a non-finite loss or gradient. Returns the loss history."""
    xs, times = _check_snapshots(snapshots, times)
    if len(xs) < 3:
        raise ValueError("adversarial interpolants need at least one intermediate snapshot")
    if steps < 0 or batch_size < 2:
        raise ValueError(f"steps must be >= 0 and batch_size >= 2, got {steps}, {batch_size}")
    if not (np.isfinite(lr) and lr > 0) or not (np.isfinite(reg) and reg >= 0):
        raise ValueError(f"lr must be > 0 and reg >= 0 (finite), got {lr}, {reg}")
    tn = _unit_times(times)
    plans = [SparsePlan(exact_ot_plan(a, b)) for a, b in zip(xs[:-1], xs[1:])]
    og = torch.optim.Adam(model.parameters(), lr=lr)
    od = torch.optim.Adam(disc.parameters(), lr=lr)
    hist = {"d": [], "g": [], "reg": []}
    g = generator
    for _ in range(steps):
        idx = ot_chain_indices(plans, batch_size, g)
        k = int(torch.randint(1, len(xs) - 1, (1,), generator=g))
        x0, real, x1 = xs[0][idx[0]], xs[k][idx[k]], xs[-1][idx[-1]]
        t = float(tn[k])
        fake = model(x0, x1, t, smooth=True, generator=g)
        ld = torch.zeros(())
        if adversarial:
            ld = F.softplus(-disc(real, t)).mean() + F.softplus(disc(fake.detach(), t)).mean()
            _finite("discriminator loss", ld)
            od.zero_grad()
            ld.backward()
            od.step()
        r = piecewise_regulariser(model, x0, real, x1, t, g)
        lg = reg * r
        if adversarial:
            lg = lg + F.softplus(-disc(fake, t)).mean()
        _finite("generator loss", lg)
        og.zero_grad()
        lg.backward()
        _finite("generator gradient", torch.stack([p.grad.norm() for p in model.parameters()
                                                   if p.grad is not None]))
        og.step()
        hist["d"].append(ld.item())
        hist["g"].append(lg.item())
        hist["reg"].append(r.item())
    return hist


class MultiMarginalFlowMatcher:
    """Conditional flow matching across snapshots ``q_{t_0}, ..., q_{t_K}`` (torchcfm style:
    :meth:`sample_location_and_conditional_flow` returns ``(t, x_t, u_t)``).

    ``interpolant``: ``"adversarial"`` (ALI-CFM: ``x_t = G(x0, x1, t)`` with the learnt
    :class:`AdversarialInterpolant`); ``"ot_linear"`` (OT-CFM on consecutive snapshots);
    ``"cubic_spline"`` (MMFM: a not-a-knot cubic spline, scipy's default, through OT chains). Times are
    rescaled to ``[0, 1]``; exact OT plans are computed once on the whole snapshots. ``coupling`` (ALI
    only): ``"border"`` draws ``(x0, x1)`` from the OT plan of the end marginals (the official ST script's
    CFM stage, ``cfm_ot: full`` there reduces to the end-point plan), ``"chain"`` from the ends of the OT
    chains the interpolant was trained on.
    """

    def __init__(self, snapshots, times, interpolant: str = "adversarial",
                 model: AdversarialInterpolant | None = None, n_chains: int = 1000, coupling: str = "border",
                 generator=None):
        if interpolant not in INTERPOLANTS:
            raise ValueError(f"interpolant must be one of {INTERPOLANTS}, got {interpolant!r}")
        if coupling not in COUPLINGS:
            raise ValueError(f"coupling must be one of {COUPLINGS}, got {coupling!r}")
        self.xs, times = _check_snapshots(snapshots, times)
        self.times = _unit_times(times)
        self.interpolant, self.coupling = interpolant, coupling
        if interpolant == "adversarial" and model is None:
            raise ValueError("interpolant='adversarial' needs a model (an AdversarialInterpolant)")
        self.model = model
        if interpolant == "adversarial" and coupling == "border":
            self.plans = [exact_ot_plan(self.xs[0], self.xs[-1])]
        else:
            self.plans = [exact_ot_plan(a, b) for a, b in zip(self.xs[:-1], self.xs[1:])]
        self.sparse_plans = [SparsePlan(p) for p in self.plans]
        if interpolant == "cubic_spline":
            self.chains = self.ot_chains(n_chains, generator)
            self.spline = CubicSpline(self.times, self.chains.double().numpy(), axis=0)

    def ot_chains(self, n: int, generator=None) -> torch.Tensor:
        """``n`` chains ``x_{t_0} -> x_{t_1} -> ...`` through the consecutive plans; ``(K + 1, n, d)``."""
        idx = ot_chain_indices(self.sparse_plans, n, generator)
        return torch.stack([x[k] for x, k in zip(self.xs, idx)])

    def end_pairs(self, n: int, generator=None):
        """``n`` pairs ``(x0, x1)`` from this matcher's coupling of the end marginals."""
        if len(self.plans) == 1:
            i, j = sample_plan(self.sparse_plans[0], n, generator)
            return self.xs[0][i], self.xs[-1][j]
        idx = ot_chain_indices(self.sparse_plans, n, generator)
        return self.xs[0][idx[0]], self.xs[-1][idx[-1]]

    def sample_location_and_conditional_flow(self, batch_size: int, generator=None):
        g = generator
        t = torch.rand(batch_size, generator=g)
        if self.interpolant == "adversarial":
            x0, x1 = self.end_pairs(batch_size, g)
            with torch.no_grad():
                xt = self.model(x0, x1, t)
            return t, xt, self.model.velocity(x0, x1, t)
        if self.interpolant == "ot_linear":
            k = torch.as_tensor(np.searchsorted(self.times, t.numpy(), side="right") - 1)
            k = k.clamp(0, len(self.times) - 2)
            xt = torch.empty(batch_size, self.xs[0].shape[1])
            ut = torch.empty_like(xt)
            for s in range(len(self.times) - 1):
                m = (k == s).nonzero().squeeze(1)
                if len(m) == 0:
                    continue
                i, j = sample_plan(self.sparse_plans[s], len(m), g)
                a, b = self.xs[s][i], self.xs[s + 1][j]
                ta, tb = self.times[s], self.times[s + 1]
                lam = ((t[m] - ta) / (tb - ta))[:, None]
                xt[m] = (1 - lam) * a + lam * b
                ut[m] = (b - a) / (tb - ta)
            return t, xt, ut
        c = torch.randint(self.chains.shape[1], (batch_size,), generator=g).numpy()
        tn = t.double().numpy()
        r = np.arange(batch_size)
        xt = torch.from_numpy(self.spline(tn)[r, c]).float()
        ut = torch.from_numpy(self.spline(tn, 1)[r, c]).float()
        return t, xt, ut


def train_vector_field(field: VectorField, matcher: MultiMarginalFlowMatcher, steps: int = 2000,
                       batch_size: int = 256, lr: float = 1e-3, generator=None) -> list:
    """Flow matching (Sec. 3.2): regress ``v(x_t, t)`` on ``u_t`` from ``matcher`` (Adam; official
    ``lr_CFM: 1e-3``). Raises ``FloatingPointError`` on a non-finite loss."""
    if steps < 0 or batch_size < 1 or not (np.isfinite(lr) and lr > 0):
        raise ValueError(f"steps must be >= 0, batch_size >= 1 and lr > 0, got {steps}, {batch_size}, {lr}")
    opt = torch.optim.Adam(field.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        t, xt, ut = matcher.sample_location_and_conditional_flow(batch_size, generator)
        loss = (field(xt, t) - ut).pow(2).sum(1).mean()
        _finite("flow-matching loss", loss)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@torch.no_grad()
def integrate(field: VectorField, x0, t_end: float, n_steps: int = 50, t_start: float = 0.0) -> torch.Tensor:
    """RK4 integration of ``dx/dt = v(x, t)`` from ``t_start`` to ``t_end`` (rescaled time)."""
    if n_steps < 1:
        raise ValueError(f"n_steps must be >= 1, got {n_steps}")
    x = torch.as_tensor(x0, dtype=torch.float32).clone()
    if not bool(torch.isfinite(x).all()):
        raise ValueError("x0 must be finite (got NaN or inf)")
    h = (t_end - t_start) / n_steps
    t = t_start
    for _ in range(n_steps):
        k1 = field(x, torch.tensor(t))
        k2 = field(x + 0.5 * h * k1, torch.tensor(t + 0.5 * h))
        k3 = field(x + 0.5 * h * k2, torch.tensor(t + 0.5 * h))
        k4 = field(x + h * k3, torch.tensor(t + h))
        x = x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        t += h
    return x


class ALICFM:
    """Estimator: ``fit(snapshots, times)`` learns the interpolant (``interpolant="adversarial"``: MSE
    pretraining, then the GAN stage) and the vector field; ``predict(x, t_eval, t_start)`` integrates
    points observed at ``t_start`` (default ``times[0]``) to ``t_eval``. ``interpolant="ot_linear"`` /
    ``"cubic_spline"`` give the OT-CFM / MMFM baselines with the same vector-field network and budget.

    Defaults are the official ST configuration (``configs/st/st_cfg.yaml``: GAN lr 1e-5, pretraining
    1001 steps at 1e-3, ``correct_coeff`` 10, ``t_smooth`` 0.01, CFM lr 1e-3, batch 256) except the
    step counts (official 70,000 GAN / 10,001 CFM steps; here ``gan_steps=5000``, ``cfm_steps=2000``,
    CPU choices). ``adversarial=False`` trains the interpolant on the regulariser alone (a control)."""

    def __init__(self, interpolant: str = "adversarial", width: int = 64, cfm_width: int = 128,
                 pretrain_steps: int = 1001, pretrain_lr: float = 1e-3, gan_steps: int = 5000,
                 gan_lr: float = 1e-5, reg: float = 10.0, t_smooth: float = 0.01, cfm_steps: int = 2000,
                 cfm_lr: float = 1e-3, batch_size: int = 256, coupling: str = "border",
                 adversarial: bool = True, ode_steps: int = 100, seed: int = 0):
        if interpolant not in INTERPOLANTS:
            raise ValueError(f"interpolant must be one of {INTERPOLANTS}, got {interpolant!r}")
        if coupling not in COUPLINGS:
            raise ValueError(f"coupling must be one of {COUPLINGS}, got {coupling!r}")
        self.interpolant, self.width, self.cfm_width = interpolant, width, cfm_width
        self.pretrain_steps, self.pretrain_lr = pretrain_steps, pretrain_lr
        self.gan_steps, self.gan_lr, self.reg, self.t_smooth = gan_steps, gan_lr, reg, t_smooth
        self.cfm_steps, self.cfm_lr, self.batch_size = cfm_steps, cfm_lr, batch_size
        self.coupling, self.adversarial, self.ode_steps, self.seed = coupling, adversarial, ode_steps, seed

    def fit(self, snapshots, times):
        xs, times = _check_snapshots(snapshots, times)
        self.times_ = times
        dim = xs[0].shape[1]
        g = torch.Generator().manual_seed(self.seed)
        torch.manual_seed(self.seed)
        self.interpolant_model_ = None
        if self.interpolant == "adversarial":
            self.interpolant_model_ = AdversarialInterpolant(dim, self.width, t_smooth=self.t_smooth)
            self.discriminator_ = Discriminator(dim)
            self.pretrain_losses_ = pretrain_interpolant(self.interpolant_model_, xs, times, self.pretrain_steps,
                                                         self.batch_size, self.pretrain_lr, g)
            self.gan_history_ = train_interpolant(self.interpolant_model_, self.discriminator_, xs, times,
                                                  self.gan_steps, self.batch_size, self.gan_lr, self.reg,
                                                  self.adversarial, g)
        self.matcher_ = MultiMarginalFlowMatcher(xs, times, self.interpolant, self.interpolant_model_,
                                               coupling=self.coupling, generator=g)
        self.field_ = VectorField(dim, self.cfm_width)
        self.cfm_losses_ = train_vector_field(self.field_, self.matcher_, self.cfm_steps, self.batch_size,
                                              self.cfm_lr, g)
        return self

    def _unit(self, t, name):
        lo, hi = self.times_[0], self.times_[-1]
        if not np.isfinite(t) or not lo <= t <= hi:
            raise ValueError(f"{name} must lie in [{lo}, {hi}], got {t}")
        return (t - lo) / (hi - lo)

    def predict(self, x0, t_eval: float, t_start: float | None = None) -> np.ndarray:
        """Integrate ``x0`` (points at ``t_start``, default ``times[0]``) to ``t_eval`` with RK4,
        ``ode_steps`` steps per unit of rescaled time (at least one)."""
        if not hasattr(self, "field_"):
            raise RuntimeError("call fit() before predict()")
        s0 = self._unit(self.times_[0] if t_start is None else t_start, "t_start")
        s1 = self._unit(t_eval, "t_eval")
        n = max(1, int(round(self.ode_steps * abs(s1 - s0))))
        return integrate(self.field_, np.asarray(x0, dtype=np.float32), s1, n, t_start=s0).numpy()
