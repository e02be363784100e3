"""Group Tree Optimization (GTO): a draft-tree reward added to token-level draft training.

Hu, Li, Lu, Zhou, "Bridging Draft Policy Misalignment: Group Tree Optimization for Speculative
Decoding", ICLR 2026 (arXiv:2509.22134); official code https://github.com/hsj576/GTO.

Pieces (Sec. 3 of the paper; symbols as there):
- draft tree T for a prefix, built as at decoding time (EAGLE-2 expansion and reranking,
  :func:`iclr26.models.speculative.draft_tree`);
- expected acceptance length of branch i (root-to-leaf path x_1..x_n):
  L_i = sum_{j=1..n} prod_{m<=j} P_target(x_m | prefix, x_<m)                        (branch value)
  (at temperature 0, P_target is the indicator of the target's argmax: L_i is the exact accepted
  length of the branch);
- Draft Tree Reward: r(T) = (1/eta) log sum_i exp(eta L_i), eta = 1              (soft maximum)
- debiased reward of prefix i: R_i = r(T_i) - r(T_i^ref), T_i^ref the tree of the frozen
  reference draft M_0 (the starting draft) on the same prefix;
- group-standardised advantages over groups of G adjacent prefixes: A_i = (R_i - mean_G) / (std_G + eps);
- PPO-style surrogate along the longest accepted sequence S_i of T_i, with the ratio taken to the
  frozen reference draft M_0 (the same model that debiases the reward; the paper's Sec. 3.2 as
  summarised in the research notes, ``s_i = pi_theta(S_i) / pi_0(S_i)``):
  s_i = pi_theta(S_i) / pi_0(S_i),  L_GTO = -mean_i min(s_i A_i, clip(s_i, 1-eps_c, 1+eps_c) A_i);
  the clip therefore binds once the draft has moved more than a factor 1 +- eps_c away from M_0 on
  a path, a trust region around the starting draft;
- total loss L = L_token + omega * L_GTO.
Defaults (eta = 1, G = 4, eps_c = 0.2, omega = 1) follow the paper's reported setting as summarised
in the README (eps_c = 0.2 is PPO's default, Schulman et al. 2017); every one is an argument.
Every function rejects non-finite input (``ValueError`` naming the argument), and
:func:`finetune_draft` stops with ``FloatingPointError`` on a non-finite loss or gradient.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from iclr26.models.speculative import EagleDrafter, draft_head_loss, draft_tree, target_forward


def _finite(x: torch.Tensor, name: str) -> None:
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} must be finite (got NaN or inf)")


def branch_values(accept_probs: torch.Tensor, lengths) -> torch.Tensor:
    """L_i = sum_j prod_{m<=j} a_{i,m} for each branch i: ``accept_probs`` (B, n), entries beyond
    ``lengths[i]`` ignored."""
    if accept_probs.dim() != 2 or len(lengths) != accept_probs.shape[0]:
        raise ValueError(f"accept_probs must be (branches, depth) with one length per branch; got "
                         f"{tuple(accept_probs.shape)} and {len(lengths)} lengths")
    _finite(accept_probs, "accept_probs")
    if bool(((accept_probs < 0) | (accept_probs > 1)).any()):
        raise ValueError("accept_probs must be probabilities in [0, 1]")
    if any(int(n) < 0 or int(n) > accept_probs.shape[1] for n in lengths):
        raise ValueError(f"lengths must lie in [0, {accept_probs.shape[1]}], got {list(lengths)}")
    mask = torch.arange(accept_probs.shape[1])[None] < torch.as_tensor(lengths)[:, None]
    a = torch.where(mask, accept_probs, torch.zeros_like(accept_probs))
    return torch.cumprod(a, dim=1).sum(1)


def draft_tree_reward(values: torch.Tensor, eta: float = 1.0) -> torch.Tensor:
    """r(T) = (1/eta) log sum_i exp(eta L_i) over the branch values ``values`` (..., B)."""
    if not eta > 0:
        raise ValueError(f"eta must be > 0, got {eta!r}")
    _finite(values, "values")
    return torch.logsumexp(eta * values, dim=-1) / eta


def group_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-6) -> torch.Tensor:
    """Standardise ``rewards`` (N,) within consecutive groups of ``group_size`` (N divisible by it):
    (R - group mean) / (group std + eps), std with the 1/G normaliser."""
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 2:
        raise ValueError(f"group_size must be an integer >= 2, got {group_size!r}")
    if rewards.dim() != 1 or rewards.numel() % group_size:
        raise ValueError(f"rewards must be 1-D with a length divisible by group_size={group_size}, got "
                         f"shape {tuple(rewards.shape)}")
    _finite(rewards, "rewards")
    g = rewards.view(-1, group_size)
    mu, sd = g.mean(1, keepdim=True), g.std(1, unbiased=False, keepdim=True)
    return ((g - mu) / (sd + eps)).reshape(-1)


def clipped_surrogate(log_ratio: torch.Tensor, advantages: torch.Tensor, clip_eps: float = 0.2) -> torch.Tensor:
    """-mean min(s A, clip(s, 1 - eps, 1 + eps) A) with s = exp(log_ratio) (PPO, Schulman et al. 2017,
    eq. 7; the paper's L_GTO). Where the clip binds (s A beyond the clipped value) the gradient is 0."""
    if not 0 < clip_eps < 1:
        raise ValueError(f"clip_eps must be in (0, 1), got {clip_eps!r}")
    if log_ratio.shape != advantages.shape:
        raise ValueError(f"log_ratio and advantages must have the same shape, got {tuple(log_ratio.shape)} "
                         f"and {tuple(advantages.shape)}")
    _finite(log_ratio.detach(), "log_ratio")
    _finite(advantages, "advantages")
    s = torch.exp(log_ratio)
    return -torch.minimum(s * advantages, s.clamp(1 - clip_eps, 1 + clip_eps) * advantages).mean()


def path_logprob(head, feats: torch.Tensor, ids: torch.Tensor, path) -> torch.Tensor:
    """log pi(path | prefix) under the EAGLE head, drafting as at decoding time (its own predicted
    features for drafted positions), with gradients. ``ids`` (T,) the verified prefix, ``feats``
    (T-1, d) the target's features of all its positions but the last."""
    if feats.dim() != 2 or feats.shape[0] != len(ids) - 1:
        raise ValueError(f"feats must be (len(ids) - 1, d) = ({len(ids) - 1}, d), got {tuple(feats.shape)}")
    _finite(feats, "feats")
    tok = ids[1:]
    own = feats.new_zeros(0, feats.shape[-1])
    total = feats.new_zeros(())
    for j, x in enumerate(path):
        g = head(torch.cat([feats, own])[None], torch.cat([tok, ids.new_tensor(path[:j])])[None])[0, -1]
        total = total + torch.log_softmax(head.lm_head(g).float(), -1)[x]
        own = torch.cat([own, g[None]])
    return total


@torch.no_grad()
def score_tree(target, ids: torch.Tensor, tree, *, eta: float = 1.0, temperature: float = 0.0
               ) -> tuple[torch.Tensor, list[int]]:
    """Draft Tree Reward r(T) of ``tree`` after the prefix ``ids`` under ``target`` (all branches
    verified in one batched call) and the longest greedily accepted path S of the tree.

    ``temperature`` 0: a_{i,m} is the indicator that the branch token is the target's argmax (the
    greedy regime; L_i is then the exact accepted length of branch i); > 0: the target's probability
    of the token at that temperature."""
    if not temperature >= 0:
        raise ValueError(f"temperature must be >= 0, got {temperature!r}")
    paths = tree.paths()
    if not paths:
        raise ValueError("tree must hold at least one drafted token")
    m = max(len(p) for p in paths)
    rows = ids.new_zeros(len(paths), len(ids) + m)
    rows[:, : len(ids)] = ids
    for r, p in enumerate(paths):
        rows[r, len(ids): len(ids) + len(p)] = torch.tensor(p)
    _, logits = target_forward(target, rows)
    lg = logits[:, len(ids) - 1: -1].float()                       # predicts each path position
    drafted = rows[:, len(ids):]
    greedy = (lg.argmax(-1) == drafted).float()
    if temperature == 0:
        acc = greedy
    else:
        acc = torch.softmax(lg / temperature, -1).gather(-1, drafted[..., None])[..., 0]
    lengths = [len(p) for p in paths]
    reward = draft_tree_reward(branch_values(acc, lengths), eta)
    n_acc = branch_values(greedy, lengths)
    best = int(n_acc.argmax())
    return reward, paths[best][: int(n_acc[best])]


@torch.no_grad()
def tree_rewards(target, head, feats: torch.Tensor, tokens: torch.Tensor, prefix_lengths, *, depth: int = 5,
                 topk: int = 4, total_tokens: int = 16, eta: float = 1.0, temperature: float = 0.0) -> torch.Tensor:
    """r(T) of the EAGLE-2 tree that ``head`` drafts after each prefix ``tokens[i, :t]`` for every
    sequence i and every t in ``prefix_lengths``: shape (N, len(prefix_lengths)). The objective GTO
    optimises, evaluated on held-out text (the mechanism check of the experiment)."""
    if tokens.dim() != 2 or feats.shape[:2] != tokens.shape:
        raise ValueError(f"feats (N, T, d) and tokens (N, T) disagree: {tuple(feats.shape)} vs {tuple(tokens.shape)}")
    T = tokens.shape[1]
    if not prefix_lengths or any(not 2 <= int(t) <= T for t in prefix_lengths):
        raise ValueError(f"prefix_lengths must be non-empty and lie in [2, {T}], got {list(prefix_lengths)}")
    was = head.training
    head.eval()
    out = torch.zeros(len(tokens), len(prefix_lengths), dtype=torch.float64)
    for i in range(len(tokens)):
        for j, t in enumerate(prefix_lengths):
            ids, f = tokens[i, :t], feats[i, : t - 1]
            tree = draft_tree(EagleDrafter(head), ids, f, depth=depth, topk=topk, total_tokens=total_tokens)
            out[i, j] = float(score_tree(target, ids, tree, eta=eta, temperature=temperature)[0])
    head.train(was)
    return out


def finetune_draft(head, feats: torch.Tensor, tokens: torch.Tensor, steps: int, *, batch_size: int = 16,
                   lr: float = 1e-3, seed: int = 0, extra_loss: Callable | None = None, clip_grad: float = 0.5,
                   w_reg: float = 1.0, w_cls: float = 0.1) -> list[float]:
    """Continue training an EAGLE head with the token-level loss
    (:func:`iclr26.models.speculative.draft_head_loss`) + ``extra_loss(head, feats_b, tokens_b)``
    (``GTOLoss``: L = L_token + omega * L_GTO), AdamW, gradient-norm clip ``clip_grad`` (0.5, as
    ``train_draft_head``). The same loop as ``train_draft_head`` (batches drawn by a generator seeded
    with ``seed``, so two arms see the same batches), but it stops with ``FloatingPointError`` at the
    first non-finite loss or gradient norm. Returns the losses."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    if not lr > 0:
        raise ValueError(f"lr must be > 0, got {lr!r}")
    if feats.shape[:2] != tokens.shape:
        raise ValueError(f"feats (N, T, d) and tokens (N, T) disagree: {tuple(feats.shape)} vs {tuple(tokens.shape)}")
    _finite(feats, "feats")
    g = torch.Generator().manual_seed(seed)
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    losses = []
    head.train()
    for step in range(steps):
        idx = torch.randint(0, len(tokens), (batch_size,), generator=g)
        fb, tb = feats[idx], tokens[idx]
        loss, _ = draft_head_loss(head, fb, tb, w_reg=w_reg, w_cls=w_cls)
        if extra_loss is not None:
            loss = loss + extra_loss(head, fb, tb)
        if not bool(torch.isfinite(loss)):
            raise FloatingPointError(f"non-finite loss {float(loss)} at step {step}")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = nn.utils.clip_grad_norm_(params, clip_grad)
        if not bool(torch.isfinite(norm)):
            raise FloatingPointError(f"non-finite gradient norm at step {step}")
        opt.step()
        losses.append(float(loss.detach()))
    head.eval()
    return losses


class GTOLoss:
    """omega * L_GTO for a batch of training sequences, to be added to the token-level loss
    (``train_draft_head(..., extra_loss=GTOLoss(...))``).

    For each of the first ``n_groups`` sequences of a batch, ``group_size`` adjacent prefixes
    (start drawn with the loss's own generator, at least ``min_prefix`` tokens long) form a group.
    For every prefix the current draft and the frozen ``ref_head`` build draft trees
    (``depth``/``topk``/``total_tokens``, EAGLE-2), the target scores their branches
    (``temperature`` 0: greedy acceptance indicators; > 0: the target's probabilities at that
    temperature), and the clipped surrogate is taken along the longest greedily accepted sequence
    S of the current tree, with the ratio s = pi_theta(S) / pi_0(S) to the frozen ``ref_head``.

    ``last`` holds, after each call, the debiased rewards R (``rewards``), the prefix lengths and
    the accepted sequences S (``paths``) in the order of the groups, the mean reward gain, the mean accepted length of S and the share of ratios outside the clip
    range (``clipped``)."""

    def __init__(self, target, ref_head, *, group_size: int = 4, n_groups: int = 2, depth: int = 5, topk: int = 4,
                 total_tokens: int = 16, eta: float = 1.0, clip_eps: float = 0.2, omega: float = 1.0,
                 temperature: float = 0.0, min_prefix: int = 8, seed: int = 0):
        if not omega >= 0:
            raise ValueError(f"omega must be >= 0, got {omega!r}")
        if not temperature >= 0:
            raise ValueError(f"temperature must be >= 0, got {temperature!r}")
        for name, v, lo in (("n_groups", n_groups, 1), ("min_prefix", min_prefix, 2)):
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
        group_advantages(torch.zeros(group_size), group_size)       # validates group_size
        draft_tree_reward(torch.zeros(1), eta)                       # validates eta
        clipped_surrogate(torch.zeros(1), torch.zeros(1), clip_eps)  # validates clip_eps
        self.target, self.ref_head = target, ref_head
        self.group_size, self.n_groups, self.min_prefix = group_size, n_groups, min_prefix
        self.tree = dict(depth=depth, topk=topk, total_tokens=total_tokens)
        self.eta, self.clip_eps, self.omega, self.temperature = eta, clip_eps, omega, temperature
        self.g = torch.Generator().manual_seed(seed)
        self.last: dict = {}

    def _score(self, ids: torch.Tensor, tree) -> tuple[torch.Tensor, list[int]]:
        """Reward of ``tree`` after ``ids`` and the longest greedily accepted path (:func:`score_tree`)."""
        return score_tree(self.target, ids, tree, eta=self.eta, temperature=self.temperature)

    def __call__(self, head, feats: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        T = tokens.shape[1]
        if T < self.min_prefix + self.group_size:
            raise ValueError(f"sequences of {T} tokens are too short for min_prefix={self.min_prefix} and "
                             f"group_size={self.group_size}")
        was_training = head.training
        head.eval()
        rewards, logps, ref_logps, accepted, lengths, paths = [], [], [], [], [], []
        for s in range(min(self.n_groups, tokens.shape[0])):
            start = int(torch.randint(self.min_prefix, T - self.group_size + 1, (1,), generator=self.g))
            for t in range(start, start + self.group_size):
                ids, f = tokens[s, :t], feats[s, : t - 1]
                with torch.no_grad():
                    tree = draft_tree(EagleDrafter(head), ids, f, **self.tree)
                    ref = draft_tree(EagleDrafter(self.ref_head), ids, f, **self.tree)
                r, best = self._score(ids, tree)
                r_ref, _ = self._score(ids, ref)
                rewards.append(float(r - r_ref))                  # R = r(T) - r(T_ref)
                accepted.append(len(best))
                lengths.append(t)
                paths.append(list(best))
                if best:
                    logps.append(path_logprob(head, f, ids, best))
                    with torch.no_grad():
                        ref_logps.append(path_logprob(self.ref_head, f, ids, best))
                else:                                              # nothing accepted: s = 1, no gradient
                    logps.append(feats.new_zeros(()))
                    ref_logps.append(feats.new_zeros(()))
        head.train(was_training)
        adv = group_advantages(torch.tensor(rewards, dtype=torch.float64), self.group_size).float()
        log_ratio = torch.stack(logps) - torch.stack(ref_logps)
        loss = clipped_surrogate(log_ratio, adv, self.clip_eps)
        lr = log_ratio.detach()
        self.last = dict(reward_gain=float(torch.tensor(rewards).mean()), accepted=float(sum(accepted) / len(accepted)),
                         rewards=rewards, prefix_lengths=lengths, paths=paths,
                         clipped=float(((torch.exp(lr) - 1).abs() > self.clip_eps).float().mean()))
        return self.omega * loss
