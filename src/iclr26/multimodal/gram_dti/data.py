"""Synthetic four-view drug-target data and a drug-cold split (ours; the paper's data, 50,968
TRIDENT + BindingDB quadruplets embedded by MoLFormer / MolT5 / ESM-2, cannot be obtained here).

Generative model (one independent draw per seed):
- drug latents ``u_d ~ N(0, I_r)``, protein latents ``v_p ~ N(0, I_r)``, ``r = latent_dim``;
- interaction score ``s_dp = u_d^T W v_p`` with ``W_ij ~ N(0, 1/r)``; label ``y_dp = 1[s_dp > q]``,
  ``q`` the ``1 - positive_rate`` quantile of all scores;
- four views, each a random two-layer tanh network of its latent plus Gaussian noise drawn once per
  drug / protein (a frozen encoder's embedding of a fixed molecule is fixed): ``smiles`` and
  ``text`` see ``u_d`` (independent maps and noise), ``protein`` sees ``v_p``, and ``hta`` is the
  low-information view: a random embedding of a coarse class of the drug (the sign pattern of
  ``hta_bits`` random projections of ``u_d``, i.e. ``2^hta_bits`` classes), plus noise;
- drug split: with three ``split_fractions`` (train, val, test) the pre-training quadruplets are
  the interacting (``y = 1``) pairs of the train drugs, i.e. exactly the positives of the
  downstream training labels (the ``labels`` regime); with four (corpus, train, val, test) they
  are the interacting pairs of a separate group of ``corpus`` drugs that the downstream task never
  sees, as the paper pre-trains on TRIDENT + BindingDB quadruplets and evaluates on other
  benchmarks (the ``corpus`` regime);
- the quadruplets are known drug-target pairs, as the paper's are; an IC50 class (terciles of a noisy potency
  ``s_dp + noise``) on a random ``ic50_fraction`` of them, -1 elsewhere.

Nothing in the generator refers to volumes, pairs or dropout: every pre-training arm sees the same
quadruplets, and which objective extracts more of ``u_d`` from the views is left to the data.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


def _random_net(rng: np.random.Generator, d_in: int, d_out: int, hidden: int = 64):
    A1 = rng.normal(size=(d_in, hidden)) / np.sqrt(d_in)
    b1 = rng.normal(size=hidden) * 0.5
    A2 = rng.normal(size=(hidden, d_out)) / np.sqrt(hidden)

    def f(z):
        h = np.tanh(1.5 * z @ A1 + b1)
        out = h @ A2
        return (out - out.mean(0)) / (out.std(0) + 1e-8)  # unit variance per feature

    return f


@dataclass
class DTIData:
    drug_views: dict  # modality -> (n_drugs, d) float32 tensor (smiles, text, hta)
    protein_view: torch.Tensor  # (n_proteins, d)
    labels: np.ndarray  # (n_drugs, n_proteins) 0/1
    scores: np.ndarray  # (n_drugs, n_proteins) bilinear score
    split: dict  # "train" / "val" / "test" (and "corpus" with four split fractions) -> drug indices
    pretrain_pairs: np.ndarray  # (n, 2) drug, protein indices of the quadruplets
    pretrain_ic50: np.ndarray  # (n,) 0/1/2 or -1

    def quadruplets(self) -> tuple[dict, torch.Tensor]:
        d, p = self.pretrain_pairs[:, 0], self.pretrain_pairs[:, 1]
        views = {m: v[d] for m, v in self.drug_views.items()}
        views["protein"] = self.protein_view[p]
        return views, torch.as_tensor(self.pretrain_ic50, dtype=torch.long)


def make_dti_data(n_drugs: int = 600, n_proteins: int = 200, latent_dim: int = 16, view_dim: int = 64,
                  noise: dict | None = None, hta_bits: int = 3, positive_rate: float = 0.1,
                  ic50_fraction: float = 0.3, split_fractions=(0.6, 0.2, 0.2), seed: int = 0) -> DTIData:
    """Draw one synthetic dataset (see the module docstring); every argument is checked."""
    for name, v in (("n_drugs", n_drugs), ("n_proteins", n_proteins), ("latent_dim", latent_dim),
                    ("view_dim", view_dim), ("hta_bits", hta_bits)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if n_drugs < 10 or n_proteins < 5:
        raise ValueError(f"need n_drugs >= 10 and n_proteins >= 5, got {n_drugs}, {n_proteins}")
    if not (0 < positive_rate < 1):
        raise ValueError(f"positive_rate must be in (0, 1), got {positive_rate!r}")
    if not (0 <= ic50_fraction <= 1):
        raise ValueError(f"ic50_fraction must be in [0, 1], got {ic50_fraction!r}")
    fr = np.asarray(split_fractions, dtype=float)
    if fr.shape not in ((3,), (4,)) or not np.isfinite(fr).all() or (fr <= 0).any() or abs(fr.sum() - 1) > 1e-9:
        raise ValueError(f"split_fractions must be three (train, val, test) or four (corpus, train, val, test) "
                         f"positive fractions summing to 1, got {split_fractions!r}")
    sd = {"smiles": 1.0, "text": 1.0, "hta": 0.3, "protein": 0.5}
    if noise is not None:
        unknown = set(noise) - set(sd)
        if unknown:
            raise ValueError(f"noise names unknown views {sorted(unknown)}; expected {sorted(sd)}")
        for k, v in noise.items():
            if not np.isfinite(v) or v < 0:
                raise ValueError(f"noise[{k!r}] must be a non-negative finite number, got {v!r}")
        sd.update(noise)
    rng = np.random.default_rng(seed)
    u = rng.normal(size=(n_drugs, latent_dim))
    v = rng.normal(size=(n_proteins, latent_dim))
    W = rng.normal(size=(latent_dim, latent_dim)) / np.sqrt(latent_dim)
    s = u @ W @ v.T
    q = np.quantile(s, 1 - positive_rate)
    y = (s > q).astype(np.int64)

    views = {}
    views["smiles"] = _random_net(rng, latent_dim, view_dim)(u) + sd["smiles"] * rng.normal(size=(n_drugs, view_dim))
    views["text"] = _random_net(rng, latent_dim, view_dim)(u) + sd["text"] * rng.normal(size=(n_drugs, view_dim))
    P = rng.normal(size=(latent_dim, hta_bits))
    code = ((u @ P) > 0).astype(float) @ (2 ** np.arange(hta_bits))
    onehot = np.eye(2 ** hta_bits)[code.astype(int)]
    views["hta"] = _random_net(rng, 2 ** hta_bits, view_dim)(onehot) + sd["hta"] * rng.normal(size=(n_drugs, view_dim))
    prot = _random_net(rng, latent_dim, view_dim)(v) + sd["protein"] * rng.normal(size=(n_proteins, view_dim))

    order = rng.permutation(n_drugs)
    names = ("train", "val", "test") if len(fr) == 3 else ("corpus", "train", "val", "test")
    bounds = np.round(np.cumsum(fr) * n_drugs).astype(int)
    split = {nm: np.sort(order[lo:hi]) for nm, lo, hi in zip(names, np.r_[0, bounds[:-1]], bounds)}
    for nm, idx in split.items():
        if len(idx) < 2:
            raise ValueError(f"split {nm!r} holds {len(idx)} drugs; raise n_drugs or its fraction")
    pre = split["corpus" if "corpus" in split else "train"]

    pos = np.argwhere(y[pre] == 1)
    if len(pos) < 2:
        raise ValueError("the pre-training drugs have fewer than 2 interacting pairs; raise n_drugs or positive_rate")
    pairs = np.stack([pre[pos[:, 0]], pos[:, 1]], axis=1)
    potency = s[pairs[:, 0], pairs[:, 1]]
    potency = potency + 0.5 * potency.std() * rng.normal(size=len(potency))
    t1, t2 = np.quantile(potency, [1 / 3, 2 / 3])
    ic50 = np.where(potency > t2, 0, np.where(potency > t1, 1, 2))  # 0: most potent (< 10 uM)
    ic50 = np.where(rng.random(len(pairs)) < ic50_fraction, ic50, -1)

    f32 = lambda a: torch.as_tensor(a, dtype=torch.float32)
    return DTIData({m: f32(x) for m, x in views.items()}, f32(prot), y, s, split, pairs, ic50.astype(np.int64))


def probe_pairs(data: DTIData, part: str, n_pairs: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n_pairs`` random (drug, protein) pairs of the ``part`` drugs (all proteins), and labels."""
    drugs = data.split[part]
    n_p = data.labels.shape[1]
    total = len(drugs) * n_p
    flat = rng.choice(total, size=min(int(n_pairs), total), replace=False)
    d, p = drugs[flat // n_p], flat % n_p
    return np.stack([d, p], axis=1), data.labels[d, p]
