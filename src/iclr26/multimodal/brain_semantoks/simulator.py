"""fMRI simulator with functional-network structure, a phenotype in one network coupling, and two sites.

Per subject: 9 latent network signals follow a VAR(1), z_t = A z_{t-1} + e_t, with A = 0.5 I plus
subject-specific random couplings (sd ``coupling_sd``) plus ``effect * y`` on the coupling between
networks 0 and 1 and ``ar_effect * y`` on network 2's own autoregression (its timescale; y = +-1
the phenotype). The latents are convolved with a gamma HRF (TR 2 s,
peak about 5 s); each ROI reads its network's latent with a loading and adds white noise at the
given SNR (signal variance / noise variance); ROIs are z-scored. A second site draws other
loadings, a lower SNR and an additive site-wide ROI artefact (a structured confound).
"""
from __future__ import annotations

import numpy as np

N_NETWORKS = 9


def network_index(rois_per_network: int = 5) -> np.ndarray:
    return np.repeat(np.arange(N_NETWORKS), rois_per_network)


def _hrf(tr: float = 2.0, length: float = 20.0) -> np.ndarray:
    t = np.arange(0, length, tr)
    h = t ** 5 * np.exp(-t) / 120.0  # gamma(6, 1): peak at 5 s
    return h / h.sum()


def simulate(n: int, rng: np.random.Generator, T: int = 120, rois_per_network: int = 5, snr: float = 0.2,
             effect: float = 0.12, ar_effect: float = 0.35, coupling_sd: float = 0.08, site: int = 0, labels=None):
    """Return X (n, 9 * rois_per_network, T) float32 and y (n,) in {0, 1}."""
    if n < 1 or T < 2:
        raise ValueError(f"n and T must be positive (T >= 2), got n={n}, T={T}")
    if snr <= 0:
        raise ValueError(f"snr must be > 0, got {snr}")
    if site not in (0, 1):
        raise ValueError(f"site must be 0 or 1, got {site}")
    y = rng.integers(0, 2, n) if labels is None else np.asarray(labels)
    K, R = N_NETWORKS, N_NETWORKS * rois_per_network
    idx = network_index(rois_per_network)
    burn = 20
    A = 0.5 * np.eye(K) + coupling_sd * rng.standard_normal((n, K, K))
    s = effect * (2 * y - 1)
    A[:, 0, 1] += s
    A[:, 1, 0] += s
    A[:, 2, 2] += ar_effect * (2 * y - 1)  # the phenotype also changes network 2's timescale
    z = np.zeros((n, K, T + burn))
    e = rng.standard_normal((n, K, T + burn))
    for t in range(1, T + burn):
        z[:, :, t] = np.einsum("nij,nj->ni", A, z[:, :, t - 1]) + e[:, :, t]
    z = z[:, :, burn:]
    h = _hrf()
    z = np.apply_along_axis(lambda v: np.convolve(v, h)[:T], 2, z)
    z = (z - z.mean(2, keepdims=True)) / z.std(2, keepdims=True)
    site_rng = np.random.default_rng(1000 + site)  # the site's scanner: fixed for all its subjects
    lo, hi = ((0.8, 1.2), (0.4, 1.6))[site]
    load = site_rng.uniform(lo, hi, R) * rng.uniform(0.9, 1.1, (n, R))
    sig = load[:, :, None] * z[:, idx]
    snr_eff = snr if site == 0 else 0.7 * snr
    X = sig + rng.standard_normal((n, R, T)) * np.sqrt(sig.var(2, keepdims=True) / snr_eff)
    if site == 1:  # a slow site-wide artefact with a fixed spatial pattern
        pattern = site_rng.standard_normal(R)
        drift = np.cumsum(rng.standard_normal((n, T)), 1) / np.sqrt(T)
        X += 0.5 * pattern[None, :, None] * drift[:, None, :] * X.std()
    X = (X - X.mean(2, keepdims=True)) / X.std(2, keepdims=True)
    return X.astype(np.float32), y.astype(int)
