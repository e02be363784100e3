"""Multi-marginal flow matching with adversarially learnt interpolants (ALI-CFM), with the OT-CFM and
cubic-spline MMFM baselines, in the ``torchcfm`` style.

Paper: Kviman, Tamogashev, Branchini, Elvira, Lagergren, Malkin, "Multi-Marginal Flow Matching with
Adversarially Learnt Interpolants" (ICLR 2026, arXiv 2510.01159).

* Interpolant (Sec. 3.1): ``G(x0, x1, t) = (1 - t) x0 + t x1 + t (1 - t) f(x0, x1, t)``, so that
  ``G(., ., 0) = x0`` and ``G(., ., 1) = x1``; its time derivative is
  ``dG/dt = x1 - x0 + (1 - 2t) f + t (1 - t) df/dt``.
* Adversarial stage (Sec. 3.1): for each observed intermediate time ``t_i`` a time-conditioned
  discriminator ``D(x, t)`` separates snapshots ``x ~ q_{t_i}`` from ``G(x0, x1, t_i)`` with
  ``(x0, x1)`` drawn from a coupling of the end marginals (here the exact OT plan, the official
  code's ``ot='border'``); non-saturating (softplus) GAN losses.
* Flow-matching stage (Sec. 3.2): ``t ~ U[0, 1]``, ``x_t = G(x0, x1, t)``, ``u_t = dG/dt``, loss
  ``||v(x_t, t) - u_t||^2``; inference integrates ``dx/dt = v(x, t)`` (RK4).

Baselines: OT-CFM on consecutive snapshots (Tong et al. 2024: the piecewise-linear interpolant
between OT-paired points of consecutive times, ``u = (x_{k+1} - x_k) / (t_{k+1} - t_k)``) and MMFM
(Rohbeck et al. 2025: a cubic spline through chains of points matched by OT between consecutive
snapshots). Exact OT plans come from POT (``ot.emd``), the plan ``torchcfm``'s ``OTPlanSampler``
uses with ``method="exact"``; ``torchcfm`` itself is not a dependency.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from scipy.interpolate import CubicSpline
from torch import nn

INTERPOLANTS = ("adversarial", "ot_linear", "cubic_spline")


def _mlp(d_in: int, d_out: int, width: int, depth: int) -> nn.Sequential:
    layers, d = [], d_in
    for _ in range(depth):
        layers += [nn.Linear(d, width), nn.SiLU()]
        d = width
    layers.append(nn.Linear(d, d_out))
    return nn.Sequential(*layers)


def _as_time(t, n: int, like: torch.Tensor) -> torch.Tensor:
    t = torch.as_tensor(t, dtype=like.dtype, device=like.device)
    if t.dim() == 0:
        t = t.expand(n)
    if t.shape != (n,):
        raise ValueError(f"t must be a scalar or have shape ({n},), got {tuple(t.shape)}")
    return t


def exact_ot_plan(x0, x1) -> torch.Tensor:
    """The exact OT plan (squared Euclidean cost, uniform weights) between two point sets, as a dense
    ``(n, m)`` tensor summing to one (POT ``ot.emd``; the plan of ``torchcfm``'s
    ``OTPlanSampler(method="exact")``)."""
    import ot

    x0, x1 = torch.as_tensor(x0), torch.as_tensor(x1)
    if x0.dim() != 2 or x1.dim() != 2 or x0.shape[1] != x1.shape[1]:
        raise ValueError(f"x0 and x1 must be (n, d) and (m, d) with the same d, got {tuple(x0.shape)} "
                         f"and {tuple(x1.shape)}")
    a, b = x0.detach().double().cpu().numpy(), x1.detach().double().cpu().numpy()
    cost = ot.dist(a, b)
    plan = ot.emd(np.full(len(a), 1.0 / len(a)), np.full(len(b), 1.0 / len(b)), cost / max(cost.max(), 1e-12))
    return torch.from_numpy(plan / plan.sum())


def sample_plan(plan: torch.Tensor, n: int, generator=None):
    """``n`` index pairs ``(i, j)`` drawn from a coupling ``plan``."""
    k = torch.multinomial(plan.ravel(), n, replacement=True, generator=generator)
    return k // plan.shape[1], k % plan.shape[1]


def sample_conditional(plan: torch.Tensor, i: torch.Tensor, generator=None) -> torch.Tensor:
    """For each row index ``i``, a column ``j`` drawn from ``plan[i, :]`` (the plan's conditional)."""
    return torch.multinomial(plan[i], 1, generator=generator).squeeze(1)


class AdversarialInterpolant(nn.Module):
    """``G(x0, x1, t) = (1 - t) x0 + t x1 + t (1 - t) f(x0, x1, t)`` (Sec. 3.1) with ``f`` an MLP on
    ``[x0, x1, t]``. ``zero_init=True`` zeroes the last layer, so that training starts from the linear
    interpolant (``f = 0``)."""

    def __init__(self, dim: int, width: int = 64, depth: int = 3, zero_init: bool = True):
        super().__init__()
        if dim < 1 or width < 1 or depth < 1:
            raise ValueError(f"dim, width and depth must be >= 1, got {dim}, {width}, {depth}")
        self.dim = dim
        self.f = _mlp(2 * dim + 1, dim, width, depth)
        if zero_init:
            nn.init.zeros_(self.f[-1].weight)
            nn.init.zeros_(self.f[-1].bias)

    def correction(self, x0, x1, t):
        """``f(x0, x1, t)``."""
        return self.f(torch.cat([x0, x1, t[:, None]], dim=1))

    def forward(self, x0, x1, t):
        t = _as_time(t, len(x0), x0)
        tt = t[:, None]
        return (1 - tt) * x0 + tt * x1 + tt * (1 - tt) * self.correction(x0, x1, t)

    def velocity(self, x0, x1, t, create_graph: bool = False):
        """``dG/dt = x1 - x0 + (1 - 2t) f + t (1 - t) df/dt`` (``df/dt`` by forward-mode AD)."""
        t = _as_time(t, len(x0), x0)
        f, df = torch.func.jvp(lambda s: self.correction(x0, x1, s), (t,), (torch.ones_like(t),))
        if not create_graph:
            f, df = f.detach(), df.detach()
        tt = t[:, None]
        return x1 - x0 + (1 - 2 * tt) * f + tt * (1 - tt) * df


class Discriminator(nn.Module):
    """Time-conditioned discriminator ``D(x, t)`` (a logit) on intermediate marginals (Sec. 3.1)."""

    def __init__(self, dim: int, width: int = 64, depth: int = 3):
        super().__init__()
        self.net = _mlp(dim + 1, 1, width, depth)

    def forward(self, x, t):
        t = _as_time(t, len(x), x)
        return self.net(torch.cat([x, t[:, None]], dim=1)).squeeze(1)


class VectorField(nn.Module):
    """``v(x, t)``: an MLP on ``[x, t]``."""

    def __init__(self, dim: int, width: int = 64, depth: int = 3):
        super().__init__()
        self.net = _mlp(dim + 1, dim, width, depth)

    def forward(self, x, t):
        t = _as_time(t, len(x), x)
        return self.net(torch.cat([x, t[:, None]], dim=1))


def _check_snapshots(snapshots, times):
    if len(snapshots) != len(times):
        raise ValueError(f"got {len(snapshots)} snapshots but {len(times)} times")
    if len(times) < 2:
        raise ValueError("need at least two snapshots (the end marginals)")
    times = np.asarray(times, dtype=float)
    if not np.all(np.diff(times) > 0):
        raise ValueError(f"times must be strictly increasing, got {times.tolist()}")
    xs = [torch.as_tensor(np.asarray(s), dtype=torch.float32) for s in snapshots]
    d = xs[0].shape[1] if xs[0].dim() == 2 else None
    if any(x.dim() != 2 or x.shape[1] != d or len(x) < 2 for x in xs):
        raise ValueError("every snapshot must be an (n_i, d) array with n_i >= 2 and one common d, got "
                         f"shapes {[tuple(x.shape) for x in xs]}")
    return xs, times


def _batch(x, n, g):
    return x[torch.randint(len(x), (n,), generator=g)]


class MultiMarginalFlowMatcher:
    """Conditional flow matching across snapshots ``q_{t_0}, ..., q_{t_K}`` (torchcfm style:
    :meth:`sample_location_and_conditional_flow` returns ``(t, x_t, u_t)``).

    ``interpolant``: ``"adversarial"`` (ALI-CFM: ``x_t = G(x0, x1, t)`` with the learnt
    :class:`AdversarialInterpolant`, pairs from the OT plan of the end marginals); ``"ot_linear"``
    (OT-CFM on consecutive snapshots); ``"cubic_spline"`` (MMFM: a not-a-knot cubic spline, scipy's
    default, through chains drawn from the OT plans of consecutive snapshots). Times are rescaled to
    ``[0, 1]``. The exact OT plans are computed once on the whole snapshots.
    """

    def __init__(self, snapshots, times, interpolant: str = "adversarial",
                 model: AdversarialInterpolant | None = None, n_chains: int = 1000, generator=None):
        if interpolant not in INTERPOLANTS:
            raise ValueError(f"interpolant must be one of {INTERPOLANTS}, got {interpolant!r}")
        self.xs, times = _check_snapshots(snapshots, times)
        self.times = (times - times[0]) / (times[-1] - times[0])
        self.interpolant = interpolant
        if interpolant == "adversarial" and model is None:
            raise ValueError("interpolant='adversarial' needs a model (an AdversarialInterpolant)")
        self.model = model
        if interpolant == "adversarial":
            self.plans = [exact_ot_plan(self.xs[0], self.xs[-1])]
        else:
            self.plans = [exact_ot_plan(a, b) for a, b in zip(self.xs[:-1], self.xs[1:])]
        if interpolant == "cubic_spline":
            self.chains = self.ot_chains(n_chains, generator)
            self.spline = CubicSpline(self.times, self.chains.double().numpy(), axis=0)

    def ot_chains(self, n: int, generator=None) -> torch.Tensor:
        """Chains ``x_{t_0} -> x_{t_1} -> ...``: ``n`` draws from the first consecutive plan, each link
        after it from the next plan's conditional (MMFM's coupling); shape ``(K + 1, n, d)``."""
        i, j = sample_plan(self.plans[0], n, generator)
        idx = [i, j]
        for p in self.plans[1:]:
            idx.append(sample_conditional(p, idx[-1], generator))
        return torch.stack([x[k] for x, k in zip(self.xs, idx)])

    def sample_location_and_conditional_flow(self, batch_size: int, generator=None):
        g = generator
        t = torch.rand(batch_size, generator=g)
        if self.interpolant == "adversarial":
            i, j = sample_plan(self.plans[0], batch_size, g)
            x0, x1 = self.xs[0][i], self.xs[-1][j]
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
                i, j = sample_plan(self.plans[s], len(m), g)
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


def train_interpolant(model: AdversarialInterpolant, disc: Discriminator, snapshots, times, steps: int = 2000,
                      batch_size: int = 256, lr: float = 1e-3, reg: float = 0.0, generator=None) -> dict:
    """Adversarial learning of the interpolant (Sec. 3.1, non-saturating GAN losses): each step
    draws pairs from the exact OT plan of the end marginals, one observed intermediate time per
    sample, and updates ``D`` on ``softplus(-D(real)) + softplus(D(G))`` and ``G`` on
    ``softplus(-D(G)) + reg * |f|^2``. Returns the loss history."""
    xs, times = _check_snapshots(snapshots, times)
    if len(xs) < 3:
        raise ValueError("adversarial interpolants need at least one intermediate snapshot")
    if steps < 0 or batch_size < 2:
        raise ValueError(f"steps must be >= 0 and batch_size >= 2, got {steps}, {batch_size}")
    tn = torch.as_tensor((times - times[0]) / (times[-1] - times[0]), dtype=torch.float32)
    inner = torch.arange(1, len(xs) - 1)
    plan = exact_ot_plan(xs[0], xs[-1])
    og = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.5, 0.9))
    od = torch.optim.Adam(disc.parameters(), lr=lr, betas=(0.5, 0.9))
    hist = {"d": [], "g": []}
    g = generator
    for _ in range(steps):
        i, j = sample_plan(plan, batch_size, g)
        x0, x1 = xs[0][i], xs[-1][j]
        k = inner[torch.randint(len(inner), (batch_size,), generator=g)]
        t = tn[k]
        real = torch.empty_like(x0)
        for s in inner.tolist():
            m = (k == s).nonzero().squeeze(1)
            real[m] = _batch(xs[s], len(m), g)
        fake = model(x0, x1, t)
        ld = F.softplus(-disc(real, t)).mean() + F.softplus(disc(fake.detach(), t)).mean()
        od.zero_grad()
        ld.backward()
        od.step()
        lg = F.softplus(-disc(fake, t)).mean()
        if reg > 0:
            lg = lg + reg * model.correction(x0, x1, t).pow(2).sum(1).mean()
        og.zero_grad()
        lg.backward()
        og.step()
        hist["d"].append(ld.item())
        hist["g"].append(lg.item())
    return hist


def train_vector_field(field: VectorField, matcher: MultiMarginalFlowMatcher, steps: int = 2000,
                       batch_size: int = 256, lr: float = 1e-3, generator=None) -> list:
    """Flow matching (Sec. 3.2): regress ``v(x_t, t)`` on ``u_t`` from ``matcher``."""
    opt = torch.optim.Adam(field.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        t, xt, ut = matcher.sample_location_and_conditional_flow(batch_size, generator)
        loss = (field(xt, t) - ut).pow(2).sum(1).mean()
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
    """Estimator: ``fit(snapshots, times)`` learns the interpolant (``interpolant="adversarial"``
    only) and the vector field; ``predict(x0, t_eval)`` integrates ``x0`` (points at ``times[0]``) to
    ``t_eval``. ``interpolant="ot_linear"`` / ``"cubic_spline"`` give the OT-CFM / MMFM baselines with
    the same vector-field network and budget. Defaults are small-scale choices for 2-D toys (the
    paper's networks are larger; see the README)."""

    def __init__(self, interpolant: str = "adversarial", width: int = 64, depth: int = 3,
                 gan_steps: int = 2000, cfm_steps: int = 2000, batch_size: int = 256, lr: float = 1e-3,
                 reg: float = 0.0, ode_steps: int = 50, seed: int = 0):
        if interpolant not in INTERPOLANTS:
            raise ValueError(f"interpolant must be one of {INTERPOLANTS}, got {interpolant!r}")
        self.interpolant, self.width, self.depth = interpolant, width, depth
        self.gan_steps, self.cfm_steps, self.batch_size, self.lr = gan_steps, cfm_steps, batch_size, lr
        self.reg, self.ode_steps, self.seed = reg, ode_steps, seed

    def fit(self, snapshots, times):
        xs, times = _check_snapshots(snapshots, times)
        self.times_ = times
        dim = xs[0].shape[1]
        g = torch.Generator().manual_seed(self.seed)
        torch.manual_seed(self.seed)
        self.interpolant_model_ = None
        if self.interpolant == "adversarial":
            self.interpolant_model_ = AdversarialInterpolant(dim, self.width, self.depth)
            self.discriminator_ = Discriminator(dim, self.width, self.depth)
            self.gan_history_ = train_interpolant(self.interpolant_model_, self.discriminator_, xs, times,
                                                  self.gan_steps, self.batch_size, self.lr, self.reg, g)
        self.matcher_ = MultiMarginalFlowMatcher(xs, times, self.interpolant, self.interpolant_model_,
                                               generator=g)
        self.field_ = VectorField(dim, self.width, self.depth)
        self.cfm_losses_ = train_vector_field(self.field_, self.matcher_, self.cfm_steps, self.batch_size,
                                              self.lr, g)
        return self

    def predict(self, x0, t_eval: float) -> np.ndarray:
        if not hasattr(self, "field_"):
            raise RuntimeError("call fit() before predict()")
        lo, hi = self.times_[0], self.times_[-1]
        if not lo <= t_eval <= hi:
            raise ValueError(f"t_eval must lie in [{lo}, {hi}], got {t_eval}")
        s = (t_eval - lo) / (hi - lo)
        n = max(1, int(round(self.ode_steps * s)))
        return integrate(self.field_, np.asarray(x0), s, n).numpy()
