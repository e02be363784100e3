"""Claim checks for NID dataset inference and the post-hoc DP audit on byte-level LMs trained here.

Per seed (one seed = one training set and its models, the unit of replication):
- a training set of ``n_train`` records, each one hex NID (``generate_identifiers("hex")``: 16 IID
  hex characters, a hash prefix);
- a small character LM (an MLP over the previous ``window`` characters) trained on it four times:
  without privacy (epsilon = inf) and with DP-SGD (opacus, Poisson sampling, per-record clipping)
  at epsilon in {1, 4, 8}, delta = 1e-5, with the same steps, batch and learning rate.
Every string is scored by :func:`mia_features` from the model's next-character log-probabilities.

(a) Dataset inference (Sec. 5), on the non-private model: a member suspect set (``n_suspect`` NIDs
    of the training set) and a non-member suspect set (as many fresh NIDs), each NID with
    ``k_suspect`` GIDs; :func:`dataset_inference` (GBDT, grouped K-fold, KS), and its split-sample
    form (``split="half"``: GBDT fitted on half the NIDs, the other half tested). Metric: -log10 p.
(b) Type-I error: ``null_draws`` independent non-member suspect sets of ``n_null`` fresh NIDs with
    ``k_null`` GIDs each, on the same model; reject at p < 0.01 (the paper's threshold). Arms: the
    cross-fitted GBDT pipeline, its split-sample form and the single-score (neg. loss) ranking.
(c) DP audit (Sec. 4): every training record is an audited NID with 31 GIDs; the top-1 hit of the
    NID among the first c - 1 GIDs, c in {2, 8, 32}; :func:`dp_audit_epsilon` at beta = 0.05 and
    the training delta.
"""
from __future__ import annotations

import numpy as np

from iclr26.common.seeding import seed_everything

from .audit import count_hits, dp_audit_epsilon, hit_bound
from .identifiers import KINDS, generate_identifiers
from .inference import dataset_inference, mia_features

ALPHABET = KINDS["hex"][0]
EPSILONS = (1.0, 4.0, 8.0)
CARDINALITIES = (2, 8, 32)
ALPHA_DI = 0.01   # Sec. 5: "trained on" when p < 0.01
BETA = 0.05       # audit level
_BASE = dict(length=16, window=6, emb=16, hidden=256, batch=128, lr=3e-3, clip=1.0, delta=1e-5,
             n_splits=5, gbdt_trees=20)
SCALES = {
    "smoke": dict(_BASE, n_train=128, epochs=3, n_suspect=10, k_suspect=7, n_null=6, k_null=3,
                  null_draws=4, epsilons=EPSILONS),
    # 5 seeds x 300 null draws = 1,500 draws at alpha = 0.01: a test of size exactly alpha keeps the
    # Clopper-Pearson upper bound below alpha + 0.01 with probability ~0.92 (see claims.toml)
    "quick": dict(_BASE, n_train=512, epochs=40, n_suspect=100, k_suspect=31, n_null=20, k_null=15,
                  null_draws=300, epsilons=EPSILONS),
    # the paper audits Pythia/OLMo LLMs on the Pile/Dolma (GPU); written down, not run here
    "paper": dict(_BASE, n_train=100_000, epochs=1, n_suspect=1000, k_suspect=127, n_null=1000,
                  k_null=127, null_draws=100, epsilons=EPSILONS, gbdt_trees=100),
}
SEEDS = {"smoke": 1, "quick": 5, "paper": 5}


def encode(ids, window: int):
    """Contexts (N, L, window) and targets (N, L) of hex strings; symbol 16 pads before the start."""
    import torch

    x = np.array([[ALPHABET.index(ch) for ch in s] for s in ids], dtype=np.int64)
    pad = np.full((len(ids), window), len(ALPHABET), dtype=np.int64)
    full = np.concatenate([pad, x], axis=1)
    L = x.shape[1]
    ctx = np.stack([full[:, t:t + window] for t in range(L)], axis=1)
    return torch.from_numpy(ctx), torch.from_numpy(x)


def make_model(cfg):
    import torch.nn as nn

    return nn.Sequential(nn.Embedding(len(ALPHABET) + 1, cfg["emb"]), nn.Flatten(start_dim=2),
                         nn.Linear(cfg["window"] * cfg["emb"], cfg["hidden"]), nn.Tanh(),
                         nn.Linear(cfg["hidden"], len(ALPHABET)))


def train(ids, cfg, epsilon: float, seed: int):
    """The LM trained on ``ids``: non-private (epsilon = inf) or DP-SGD with opacus at (epsilon, delta).

    The privacy unit is one record (one NID string): the loss of a record sums over its characters.
    """
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(seed)
    ctx, tgt = encode(ids, cfg["window"])
    model = make_model(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
    gen = torch.Generator().manual_seed(seed)
    loader = DataLoader(TensorDataset(ctx, tgt), batch_size=cfg["batch"], shuffle=True, generator=gen)
    if np.isfinite(epsilon):
        import warnings

        from opacus import PrivacyEngine

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            engine = PrivacyEngine(accountant="rdp")
            model, opt, loader = engine.make_private_with_epsilon(
                module=model, optimizer=opt, data_loader=loader, target_epsilon=epsilon,
                target_delta=cfg["delta"], epochs=cfg["epochs"], max_grad_norm=cfg["clip"])
    lossf = torch.nn.CrossEntropyLoss(reduction="none")
    model.train()
    import warnings

    warnings.filterwarnings("ignore", message="Full backward hook")  # opacus hooks on integer inputs
    for _ in range(cfg["epochs"]):
        for c, t in loader:
            if len(t) == 0:
                continue
            out = model(c)
            loss = lossf(out.reshape(-1, out.shape[-1]), t.reshape(-1)).reshape(t.shape).sum(1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    return getattr(model, "_module", model)


def featurize(model, ids, cfg, batch: int = 8192) -> np.ndarray:
    """(N, 4) membership features (:data:`FEATURES`) of the strings ``ids`` under ``model``."""
    import torch

    ctx, tgt = encode(ids, cfg["window"])
    out = []
    with torch.no_grad():
        for i in range(0, len(ids), batch):
            lp = torch.log_softmax(model(ctx[i:i + batch]).double(), dim=-1)
            out.append(mia_features(lp, tgt[i:i + batch]))
    return np.concatenate(out)


def gids_for(n: int, k: int, cfg, rng) -> list[str]:
    return generate_identifiers("hex", n * k, rng, length=cfg["length"])


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    rng = seed_everything(seed)
    from sklearn.ensemble import GradientBoostingClassifier

    gbdt = GradientBoostingClassifier(n_estimators=cfg["gbdt_trees"], max_depth=2, random_state=seed)
    L = cfg["length"]
    members = generate_identifiers("hex", cfg["n_train"], rng, length=L)
    models = {"inf": train(members, cfg, np.inf, seed)}
    for eps in cfg["epsilons"]:
        models[f"{eps:g}"] = train(members, cfg, eps, seed)

    metrics: dict = {}
    info: dict = {"epsilon_hat": {}, "hit_rate": {}, "di_pvalue": {}}
    # (a) dataset inference: member vs non-member suspect sets, same model, same GID budget
    ns, ks = cfg["n_suspect"], cfg["k_suspect"]
    suspect_member = list(rng.choice(members, ns, replace=False))
    suspect_non = generate_identifiers("hex", ns, rng, length=L)
    g_mem, g_non = gids_for(ns, ks, cfg, rng), gids_for(ns, ks, cfg, rng)
    neglog, neglog_split = {}, {}
    info["di_pvalue_split"] = {}
    for name, model in models.items():
        res, res_split = {}, {}
        for arm, sus, g in (("member", suspect_member, g_mem), ("nonmember", suspect_non, g_non)):
            f_nid = featurize(model, sus, cfg)
            f_gid = featurize(model, g, cfg).reshape(ns, ks, -1)
            r = dataset_inference(f_nid, f_gid, n_splits=cfg["n_splits"], classifier=gbdt, random_state=seed)
            res[arm] = r.pvalue
            if name == "inf":
                res_split[arm] = dataset_inference(f_nid, f_gid, classifier=gbdt, split="half",
                                                   random_state=seed).pvalue
        info["di_pvalue"][name] = res
        if name == "inf":
            info["di_pvalue_split"][name] = res_split
            neglog = {a: float(-np.log10(max(p, 1e-300))) for a, p in res.items()}
            neglog_split = {a: float(-np.log10(max(p, 1e-300))) for a, p in res_split.items()}
    metrics["di_neglog10p"] = neglog
    metrics["di_neglog10p_split"] = neglog_split

    # (b) type-I error on independent non-member suspect sets (non-private model)
    nn_, kn, D = cfg["n_null"], cfg["k_null"], cfg["null_draws"]
    null_ids = generate_identifiers("hex", D * nn_ * (kn + 1), rng, length=L)
    feats = featurize(models["inf"], null_ids, cfg).reshape(D, nn_, kn + 1, -1)
    rej_gbdt, rej_split, rej_loss = [], [], []
    for d in range(D):
        f_nid, f_gid = feats[d, :, 0], feats[d, :, 1:]
        r = dataset_inference(f_nid, f_gid, n_splits=cfg["n_splits"], classifier=gbdt, random_state=seed * 100_003 + d)
        rej_gbdt.append(int(r.reject(ALPHA_DI)))
        rs = dataset_inference(f_nid, f_gid, classifier=gbdt, split="half", random_state=seed * 100_003 + d)
        rej_split.append(int(rs.reject(ALPHA_DI)))
        r1 = dataset_inference(f_nid[:, 0], f_gid[..., 0], random_state=seed * 100_003 + d)
        rej_loss.append(int(r1.reject(ALPHA_DI)))
    metrics["null_reject"] = {"gbdt": rej_gbdt, "gbdt_split": rej_split, "loss_rank": rej_loss}

    # (c) DP audit: every training record is an audited NID with 31 GIDs
    m, cmax = len(members), max(CARDINALITIES)
    gid_audit = gids_for(m, cmax - 1, cfg, rng)
    eps_hat = {}
    for name, model in models.items():
        s_nid = featurize(model, members, cfg)[:, 0]
        s_gid = featurize(model, gid_audit, cfg)[:, 0].reshape(m, cmax - 1)
        info["epsilon_hat"][name], info["hit_rate"][name] = {}, {}
        for c in CARDINALITIES:
            hits = count_hits(s_nid, s_gid[:, :c - 1], rng=rng)
            a = dp_audit_epsilon(hits, cardinality=c, delta=cfg["delta"], beta=BETA)
            info["epsilon_hat"][name][c] = a.epsilon
            info["hit_rate"][name][c] = a.hit_rate
            eps_hat[f"{name}_c{c}"] = a.epsilon
    metrics["eps_hat"] = eps_hat
    info["hit_bound_c32"] = {f"{e:g}": hit_bound(e, cmax) for e in cfg["epsilons"]}
    info["null_reject_rate"] = {"gbdt": float(np.mean(rej_gbdt)), "gbdt_split": float(np.mean(rej_split)),
                                "loss_rank": float(np.mean(rej_loss))}
    return {"metrics": metrics, "info": info}
