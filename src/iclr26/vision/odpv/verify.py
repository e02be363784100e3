"""ODPV: PAC verification of a whole detection pipeline (network + confidence filter + NMS) against
object disappearance. "Certifying the Full YOLO Pipeline: A Probabilistic Verification Approach",
Liu, Chi, Yu, Lin and Zhang, ICLR 2026 (OpenReview AMCFpquOtZ; no official code found).

The paper's three steps, as implemented here (the full text was not available; the steps follow the
abstract and a secondary summary, the statistics are the standard scenario-approach results they name):

1. **Output range** (:func:`pac_output_range`): N perturbed inputs are sampled from the perturbation
   distribution and pushed through the network before NMS; the interval hull of the N output vectors
   (all candidate boxes and scores, D numbers) is the range. The hull is the solution of a convex
   scenario program with ``2D`` decision variables, so (Campi & Garatti 2008) with probability at least
   ``1 - eta`` over the samples, a fresh perturbation's output leaves it with probability at most
   ``eps`` when ``binom.cdf(2D - 1, N, eps) <= eta`` (:func:`scenario_confidence`). N depends on the
   output size, not on the input dimension.
2. **Formal NMS check** (:func:`certify_nms`): inside those intervals, interval arithmetic on IoU
   (:func:`~iclr26.vision.odpv.boxes.interval_box_iou` between candidates, the exact vertex minimum
   :func:`~iclr26.vision.odpv.boxes.min_iou_to_box` to the ground truth) shows that, for every output in the range, NMS
   keeps a box that matches the ground truth with IoU at least a bound, which is maximised.
3. **Refinement** (``refine=True``): sample discarding within the PAC budget (Campi & Garatti 2011):
   the largest k with ``C(k + 2D - 1, k) binom.cdf(k + 2D - 1, N, eps) <= eta`` outlying samples are
   removed one at a time (each the sample farthest outside the others in units of the coordinate's
   spread) and the hull and the check are recomputed.

:func:`deeppac_output_range` is the DeepPAC-style comparator (Li et al. 2022; its official code,
CAS-LRJ/DeepPAC): an affine surrogate of each output in the (grouped) input perturbation, fitted on one
sample set (Chebyshev linear program as DeepPAC, or least squares), its range over the whole perturbation
box widened by the largest absolute residual on a separate held-out set.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from scipy import stats
from scipy.special import gammaln

from .boxes import interval_box_iou, min_iou_to_box

__all__ = ["ODPVResult", "scenario_confidence", "pac_sample_size", "discard_budget", "pac_output_range",
           "certify_nms", "deeppac_output_range", "deeppac_margin_size", "verify_detection",
           "sample_perturbations"]


def _check_level(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a float in (0, 1), got {type(value).__name__}")
    if not 0.0 < float(value) < 1.0 or not math.isfinite(float(value)):
        raise ValueError(f"{name} must lie in (0, 1), got {value}")
    return float(value)


def _check_count(value, name, minimum=0):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def scenario_confidence(n_samples: int, n_params: int, eps_pac: float, n_discard: int = 0) -> float:
    """The probability (over the N samples) that the scenario solution violates more than ``eps_pac``:
    ``C(k + d - 1, k) * sum_{i < k + d} C(N, i) eps^i (1 - eps)^(N - i)`` (Campi & Garatti 2008 for
    k = 0, 2011 with k discarded samples), clipped to 1. ``n_params`` = d, the number of decision
    variables (2D for an interval hull of D outputs)."""
    n = _check_count(n_samples, "n_samples", 1)
    d = _check_count(n_params, "n_params", 1)
    k = _check_count(n_discard, "n_discard", 0)
    eps = _check_level(eps_pac, "eps_pac")
    if k + d > n:
        return 1.0
    log_choose = gammaln(k + d) - gammaln(k + 1) - gammaln(d)
    log_tail = stats.binom.logcdf(k + d - 1, n, eps)
    return float(min(1.0, math.exp(log_choose + log_tail)))


def pac_sample_size(n_params: int, eps_pac: float, eta: float, n_discard: int = 0) -> int:
    """The smallest N with ``scenario_confidence(N, n_params, eps_pac, n_discard) <= eta``."""
    d = _check_count(n_params, "n_params", 1)
    k = _check_count(n_discard, "n_discard", 0)
    eps, eta = _check_level(eps_pac, "eps_pac"), _check_level(eta, "eta")
    hi = max(k + d, 2)
    while scenario_confidence(hi, d, eps, k) > eta:
        hi *= 2
    lo = max(k + d - 1, 1)                  # conf(lo) > eta (or lo below k + d), conf(hi) <= eta
    return _bisect(lambda n: scenario_confidence(n, d, eps, k) > eta, lo, hi)[1]


def discard_budget(n_samples: int, n_params: int, eps_pac: float, eta: float) -> int:
    """The largest k (>= 0) of discarded samples that keeps the guarantee at ``(eps_pac, eta)``; -1 when
    even k = 0 does not (too few samples)."""
    eta = _check_level(eta, "eta")
    if scenario_confidence(n_samples, n_params, eps_pac, 0) > eta:
        return -1
    # conf(0) <= eta; conf(n_samples - n_params + 1) = 1 > eta
    return _bisect(lambda k: scenario_confidence(n_samples, n_params, eps_pac, k) <= eta,
                   0, n_samples - n_params + 1)[0]


def _bisect(holds, lo: int, hi: int) -> tuple[int, int]:
    """The adjacent pair ``(lo, hi)`` where the monotone predicate ``holds`` turns from true (at ``lo``)
    to false (at ``hi``); the given ``lo`` must hold and the given ``hi`` must not."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if holds(mid):
            lo = mid
        else:
            hi = mid
    return lo, hi


def _as_samples(samples) -> torch.Tensor:
    if not isinstance(samples, torch.Tensor):
        raise TypeError(f"samples must be a torch.Tensor of shape (N, D), got {type(samples).__name__}")
    if samples.ndim != 2 or samples.shape[0] < 1 or samples.shape[1] < 1:
        raise ValueError(f"samples must have shape (N, D) with N, D >= 1, got {tuple(samples.shape)}")
    if not torch.isfinite(samples).all():
        raise ValueError("samples hold non-finite values (the network output is NaN or inf)")
    return samples.double()


def pac_output_range(samples: torch.Tensor, n_discard: int = 0):
    """Interval hull ``(lo, hi)`` of the rows of ``samples`` (N, D) after removing ``n_discard`` outliers,
    and the indices of the kept rows.

    Discarding, one sample at a time: each remaining sample's outlyingness is how far it lies outside
    the hull of the others, per coordinate, in units of that coordinate's spread (its hull width over
    the current samples); the sample with the largest is removed. A sample that is not alone at an
    extreme of some coordinate cannot shrink the hull and is never picked while one that can exists.
    """
    y = _as_samples(samples)
    k = _check_count(n_discard, "n_discard", 0)
    if k >= y.shape[0]:
        raise ValueError(f"n_discard ({k}) must be smaller than the number of samples ({y.shape[0]})")
    keep = torch.ones(y.shape[0], dtype=torch.bool)
    for _ in range(k):
        cur = y[keep]
        idx = keep.nonzero().squeeze(1)
        top2 = torch.topk(cur, 2, dim=0).values if cur.shape[0] > 1 else cur.repeat(2, 1)
        bot2 = -torch.topk(-cur, 2, dim=0).values if cur.shape[0] > 1 else cur.repeat(2, 1)
        width = (top2[0] - bot2[0]).clamp(min=1e-12)
        # gain of removing the row: how much the max (min) of each coordinate drops, for the row at it
        up = torch.where(cur >= top2[0], (top2[0] - top2[1]) / width, torch.zeros_like(cur))
        down = torch.where(cur <= bot2[0], (bot2[1] - bot2[0]) / width, torch.zeros_like(cur))
        gain = (up + down).max(dim=1).values
        keep[idx[int(torch.argmax(gain))]] = False
    kept = y[keep]
    return kept.min(dim=0).values, kept.max(dim=0).values, keep.nonzero().squeeze(1)


def certify_nms(lo_boxes, hi_boxes, lo_scores, hi_scores, gt_box, *, conf_thr: float = 0.25,
                nms_iou: float = 0.45, iou_thr: float = 0.5):
    """Formal check of confidence filtering + greedy NMS over interval outputs.

    Candidates ``i`` have box corners in ``[lo_boxes[i], hi_boxes[i]]`` (K, 4) and scores in
    ``[lo_scores[i], hi_scores[i]]`` (K,). For a level tau, M(tau) holds the candidates surely above
    ``conf_thr`` with IoU lower bound to ``gt_box`` at least tau. The top-scoring member m* of M(tau)
    (whichever it is in a given output) can only be suppressed by a higher-scoring box outside M(tau);
    so NMS surely keeps a box with IoU >= tau when, for every member that can be the top one
    (``hi_score >= S``, S the largest lower score in M) and every non-member that can outrank it
    (``hi_score >= max(lo_score_m, S)`` and ``hi_score >= conf_thr``), the IoU upper bound of the pair is at
    most ``nms_iou``. Returns ``(verified, iou_lower_bound)``: the largest certified bound over the
    levels (0 when none holds) and whether it reaches ``iou_thr``.
    """
    for v, n in ((conf_thr, "conf_thr"), (nms_iou, "nms_iou"), (iou_thr, "iou_thr")):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0.0 <= float(v) <= 1.0:
            raise ValueError(f"{n} must be a number in [0, 1], got {v!r}")
    lo_b, hi_b = torch.as_tensor(lo_boxes, dtype=torch.float64), torch.as_tensor(hi_boxes, dtype=torch.float64)
    lo_s, hi_s = torch.as_tensor(lo_scores, dtype=torch.float64), torch.as_tensor(hi_scores, dtype=torch.float64)
    gt = torch.as_tensor(gt_box, dtype=torch.float64).reshape(-1)
    if gt.shape != (4,):
        raise ValueError(f"gt_box must hold 4 numbers (x0, y0, x1, y1), got shape {tuple(gt.shape)}")
    if lo_s.ndim != 1 or lo_s.shape != hi_s.shape or lo_b.shape != (lo_s.shape[0], 4) or hi_b.shape != lo_b.shape:
        raise ValueError("lo_boxes/hi_boxes must be (K, 4) and lo_scores/hi_scores (K,) for the same K")
    if not (torch.isfinite(lo_s).all() and torch.isfinite(hi_s).all()):
        raise ValueError("lo_scores/hi_scores hold NaN or inf (a NaN score cannot be ruled out as a threat)")
    if (lo_s > hi_s).any():
        raise ValueError("lo_scores must be <= hi_scores")
    iou_g = min_iou_to_box(lo_b, hi_b, gt)
    pair_hi = interval_box_iou(lo_b, hi_b, lo_b, hi_b)[1]
    confident = lo_s >= conf_thr
    maybe = hi_s >= conf_thr
    best = 0.0
    for tau in torch.unique(iou_g[confident]).tolist():
        if tau <= best:
            continue
        member = confident & (iou_g >= tau)
        s_top = float(lo_s[member].max())
        tops = (member & (hi_s >= s_top)).nonzero().squeeze(1)
        ok = True
        for m in tops.tolist():
            threat = maybe & ~member & (hi_s >= max(float(lo_s[m]), s_top))
            if bool((pair_hi[m, threat] > nms_iou).any()):
                ok = False
                break
        if ok:
            best = max(best, float(iou_g[tops].min()))
    return best >= iou_thr and best > 0, best


def deeppac_margin_size(eps_pac: float, eta: float) -> int:
    """Size of DeepPAC's held-out margin set, ``ceil(2 / eps (ln(1 / eta) + 1))`` (CAS-LRJ/DeepPAC,
    verify/mnist.py; 225 at eps 0.05, eta 0.01)."""
    eps, eta = _check_level(eps_pac, "eps_pac"), _check_level(eta, "eta")
    return int(math.ceil(2.0 / eps * (math.log(1.0 / eta) + 1.0)))


def _as_features(features, n, name):
    if not isinstance(features, torch.Tensor) or features.ndim != 2 or features.shape[0] != n:
        raise ValueError(f"{name} must be a (N, p) tensor with the same N ({n}) as its samples, got "
                         f"{tuple(features.shape) if isinstance(features, torch.Tensor) else type(features).__name__}")
    if not torch.isfinite(features).all():
        raise ValueError(f"{name} hold non-finite values")
    return features.double()


def _chebyshev_fit(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per output column of ``y`` (N, D), the coefficients (p + 1,) minimising the largest absolute
    residual of ``y ~ x @ c`` (x holds the intercept column): the linear program of DeepPAC's fit,
    ``min t  s.t.  -t <= y_i - x_i c <= t``, solved with scipy's HiGHS."""
    from scipy.optimize import linprog

    n, q = x.shape
    if q == 1:                                  # constant surrogate: the midrange, in closed form
        return ((y.max(0) + y.min(0)) / 2)[None]
    a_ub = np.block([[-x, -np.ones((n, 1))], [x, -np.ones((n, 1))]])
    cost = np.zeros(q + 1)
    cost[-1] = 1.0
    bounds = [(None, None)] * q + [(0, None)]
    coef = np.empty((q, y.shape[1]))
    for j in range(y.shape[1]):
        res = linprog(cost, A_ub=a_ub, b_ub=np.concatenate([-y[:, j], y[:, j]]), bounds=bounds, method="highs")
        if res.status != 0:
            raise RuntimeError(f"the Chebyshev fit's linear program failed for output {j}: {res.message}")
        coef[:, j] = res.x[:q]
    return coef


def deeppac_output_range(fit_features: torch.Tensor, fit_samples: torch.Tensor, margin_features: torch.Tensor,
                         margin_samples: torch.Tensor, feature_bound: float, *, fit: str = "lstsq",
                         ridge: float = 1e-6):
    """DeepPAC-style intervals (Li et al. 2022; CAS-LRJ/DeepPAC, verify/mnist.py), per output.

    1. Fit an affine surrogate ``a + w . f`` of the perturbation features ``f`` on one sample set
       (``fit_features`` (N1, p), ``fit_samples`` (N1, D)): ``fit="chebyshev"`` is DeepPAC's own
       fit, the linear program minimising the largest residual; ``fit="lstsq"`` is (ridge) least
       squares.
    2. The margin is ``max |residual|`` on a SEPARATE held-out set (``margin_features`` (N2, p),
       ``margin_samples`` (N2, D); DeepPAC uses :func:`deeppac_margin_size` samples).
    3. The surrogate's range over the input box ``|f_j| <= feature_bound`` widened by the margin:
       ``a -+ feature_bound ||w||_1 -+ margin``.
    ``p = 0`` (features of shape (N, 0)) is the constant surrogate. Returns ``(lo, hi)``, each (D,).
    """
    y = _as_samples(fit_samples)
    ym = _as_samples(margin_samples)
    if ym.shape[1] != y.shape[1]:
        raise ValueError(f"margin_samples must have the same D ({y.shape[1]}) as fit_samples, got {ym.shape[1]}")
    f = _as_features(fit_features, y.shape[0], "fit_features")
    fm = _as_features(margin_features, ym.shape[0], "margin_features")
    if fm.shape[1] != f.shape[1]:
        raise ValueError(f"margin_features must have the same p ({f.shape[1]}) as fit_features, got {fm.shape[1]}")
    if isinstance(feature_bound, bool) or not isinstance(feature_bound, (int, float)) \
            or not (0.0 <= float(feature_bound) < math.inf):
        raise ValueError(f"feature_bound must be a finite number >= 0, got {feature_bound!r}")
    if isinstance(ridge, bool) or not isinstance(ridge, (int, float)) or not (0.0 <= float(ridge) < math.inf):
        raise ValueError(f"ridge must be a finite number >= 0, got {ridge!r}")
    if fit not in ("lstsq", "chebyshev"):
        raise ValueError(f"fit must be 'lstsq' or 'chebyshev', got {fit!r}")
    x = torch.cat([torch.ones(len(y), 1, dtype=torch.float64), f], dim=1)
    if fit == "lstsq":
        gram = x.T @ x + float(ridge) * torch.eye(x.shape[1], dtype=torch.float64)
        coef = torch.linalg.solve(gram, x.T @ y)                   # (p + 1, D)
    else:
        coef = torch.from_numpy(_chebyshev_fit(x.numpy(), y.numpy()))
    xm = torch.cat([torch.ones(len(ym), 1, dtype=torch.float64), fm], dim=1)
    margin = (ym - xm @ coef).abs().max(dim=0).values
    spread = float(feature_bound) * coef[1:].abs().sum(dim=0) + margin
    return coef[0] - spread, coef[0] + spread


@dataclass
class ODPVResult:
    verified: bool
    iou_lower_bound: float
    n_samples: int
    n_discarded: int
    eps_pac: float
    eta: float
    lo_boxes: torch.Tensor
    hi_boxes: torch.Tensor
    lo_scores: torch.Tensor
    hi_scores: torch.Tensor

    def contains(self, boxes: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """Per output (B, K, 4) / (B, K): whether all of it lies inside the certified intervals."""
        kk = self.lo_scores.shape[0]
        if not isinstance(boxes, torch.Tensor) or boxes.ndim != 3 or boxes.shape[1:] != (kk, 4):
            raise ValueError(f"boxes must have shape (B, {kk}, 4), got "
                             f"{tuple(boxes.shape) if isinstance(boxes, torch.Tensor) else type(boxes).__name__}")
        if not isinstance(scores, torch.Tensor) or scores.shape != boxes.shape[:2]:
            raise ValueError(f"scores must have shape {tuple(boxes.shape[:2])}, got "
                             f"{tuple(scores.shape) if isinstance(scores, torch.Tensor) else type(scores).__name__}")
        b, s = boxes.detach().cpu().double(), scores.detach().cpu().double()
        inb = ((b >= self.lo_boxes) & (b <= self.hi_boxes)).flatten(1).all(1)
        ins = ((s >= self.lo_scores) & (s <= self.hi_scores)).all(1)
        return inb & ins


def sample_perturbations(image: torch.Tensor, radius: float, n: int, generator: torch.Generator):
    """``n`` copies of ``image`` (C, H, W) in [0, 1] plus i.i.d. uniform noise in ``[-radius, radius]``,
    clipped to [0, 1]; returns ``(perturbed, noise)`` on the image's device and in its dtype. The noise
    is drawn on the generator's device (the CPU for ``torch.Generator()``), so the draws do not
    depend on where the image lives."""
    if not isinstance(image, torch.Tensor) or not image.is_floating_point():
        raise TypeError(f"image must be a floating-point torch.Tensor, got "
                        f"{image.dtype if isinstance(image, torch.Tensor) else type(image).__name__}")
    dev = generator.device if generator is not None else torch.device("cpu")
    noise = (torch.rand((n, *image.shape), generator=generator, dtype=image.dtype, device=dev) * 2 - 1) * radius
    noise = noise.to(image.device)
    return (image[None] + noise).clamp(0.0, 1.0), noise


def _run(model_fn, x, batch_size):
    boxes, scores = [], []
    with torch.no_grad():
        for i in range(0, len(x), batch_size):
            b, s = model_fn(x[i:i + batch_size])
            boxes.append(b)
            scores.append(s)
    boxes, scores = torch.cat(boxes), torch.cat(scores)
    if boxes.ndim != 3 or boxes.shape[-1] != 4 or scores.shape != boxes.shape[:2]:
        raise ValueError(f"model_fn must return boxes (B, K, 4) and scores (B, K), got {tuple(boxes.shape)} "
                         f"and {tuple(scores.shape)}")
    return boxes, scores


def verify_detection(model_fn: Callable, image: torch.Tensor, gt_box, *, radius: float = 8 / 255,
                     eps_pac: float = 0.05, eta: float = 0.01, n_samples: int | None = None,
                     refine: bool = True, conf_thr: float = 0.25, nms_iou: float = 0.45, iou_thr: float = 0.5,
                     batch_size: int = 512, generator: torch.Generator | None = None) -> ODPVResult:
    """ODPV on one image: is the object in ``gt_box`` still detected (NMS keeps a box with IoU >=
    ``iou_thr``) for all but an ``eps_pac`` share of uniform L-inf perturbations of size ``radius``,
    with confidence ``1 - eta``? ``model_fn(x)`` maps a batch (B, C, H, W) to the pre-NMS candidates
    ``(boxes (B, K, 4) xyxy, scores (B, K))``. ``n_samples`` defaults to the smallest N that gives the
    guarantee without discarding; with ``refine`` the discard budget of N is spent on outliers."""
    if not isinstance(image, torch.Tensor) or image.ndim != 3:
        raise ValueError(f"image must be a (C, H, W) tensor, got "
                         f"{tuple(image.shape) if isinstance(image, torch.Tensor) else type(image).__name__}")
    if not torch.isfinite(image).all():
        raise ValueError("image holds non-finite values")
    if not image.is_floating_point():
        raise TypeError(f"image must be a floating-point tensor in [0, 1], got dtype {image.dtype}")
    if float(image.min()) < 0.0 or float(image.max()) > 1.0:
        raise ValueError(f"image must lie in [0, 1] (the perturbations are clipped to it), got values in "
                         f"[{float(image.min()):.4g}, {float(image.max()):.4g}]")
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size <= 0:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    if isinstance(model_fn, torch.nn.Module):
        p = next(iter(model_fn.parameters()), None)
        if p is not None and p.is_floating_point() and p.dtype != image.dtype:
            raise TypeError(f"image dtype {image.dtype} does not match the model's parameters ({p.dtype}); "
                            f"convert one of them")
    if not isinstance(radius, (int, float)) or isinstance(radius, bool) or not (0.0 <= radius < math.inf):
        raise ValueError(f"radius must be a finite number >= 0, got {radius!r}")
    eps_pac, eta = _check_level(eps_pac, "eps_pac"), _check_level(eta, "eta")
    gt_t = torch.as_tensor(gt_box, dtype=torch.float64).reshape(-1)
    if gt_t.shape != (4,) or not torch.isfinite(gt_t).all():
        raise ValueError(f"gt_box must hold 4 finite numbers (x0, y0, x1, y1), got {gt_box!r}")
    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    with torch.no_grad():
        b0, _ = model_fn(image[None])
    d = 2 * 5 * b0.shape[1]
    n = pac_sample_size(d, eps_pac, eta) if n_samples is None else _check_count(n_samples, "n_samples", 1)
    budget = discard_budget(n, d, eps_pac, eta)
    if budget < 0:
        raise ValueError(f"n_samples={n} is too few for eps_pac={eps_pac}, eta={eta} with {d // 2} outputs "
                         f"(at least {pac_sample_size(d, eps_pac, eta)} needed)")
    x, _ = sample_perturbations(image, float(radius), n, gen)
    boxes, scores = _run(model_fn, x, batch_size)
    k = budget if refine else 0
    flat = torch.cat([boxes.flatten(1), scores], dim=1).detach().cpu()
    lo, hi, _ = pac_output_range(flat, k)
    kk = boxes.shape[1]
    lo_b, hi_b = lo[:4 * kk].reshape(kk, 4), hi[:4 * kk].reshape(kk, 4)
    lo_s, hi_s = lo[4 * kk:], hi[4 * kk:]
    ok, bound = certify_nms(lo_b, hi_b, lo_s, hi_s, gt_box, conf_thr=conf_thr, nms_iou=nms_iou, iou_thr=iou_thr)
    return ODPVResult(ok, bound, n, k, eps_pac, eta, lo_b, hi_b, lo_s, hi_s)
