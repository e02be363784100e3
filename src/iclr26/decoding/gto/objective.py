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
- PPO-style surrogate along the longest accepted sequence S_i of T_i:
  s_i = pi_theta(S_i) / pi_old(S_i),  L_GTO = -mean_i min(s_i A_i, clip(s_i, 1-eps_c, 1+eps_c) A_i);
- total loss L = L_token + omega * L_GTO.
Defaults (eta = 1, G = 4, eps_c = 0.2, omega = 1) follow the paper's reported setting as summarised
in the README; every one is an argument.
"""
from __future__ import annotations

import torch

from iclr26.models.speculative import EagleDrafter, draft_tree, target_forward


def branch_values(accept_probs: torch.Tensor, lengths) -> torch.Tensor:
    """L_i = sum_j prod_{m<=j} a_{i,m} for each branch i: ``accept_probs`` (B, n), entries beyond
    ``lengths[i]`` ignored."""
    if accept_probs.dim() != 2 or len(lengths) != accept_probs.shape[0]:
        raise ValueError(f"accept_probs must be (branches, depth) with one length per branch; got "
                         f"{tuple(accept_probs.shape)} and {len(lengths)} lengths")
    mask = torch.arange(accept_probs.shape[1])[None] < torch.as_tensor(lengths)[:, None]
    a = torch.where(mask, accept_probs, torch.zeros_like(accept_probs))
    return torch.cumprod(a, dim=1).sum(1)


def draft_tree_reward(values: torch.Tensor, eta: float = 1.0) -> torch.Tensor:
    """r(T) = (1/eta) log sum_i exp(eta L_i) over the branch values ``values`` (..., B)."""
    if not eta > 0:
        raise ValueError(f"eta must be > 0, got {eta!r}")
    return torch.logsumexp(eta * values, dim=-1) / eta


def group_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-6) -> torch.Tensor:
    """Standardise ``rewards`` (N,) within consecutive groups of ``group_size`` (N divisible by it):
    (R - group mean) / (group std + eps), std with the 1/G normaliser."""
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 2:
        raise ValueError(f"group_size must be an integer >= 2, got {group_size!r}")
    if rewards.dim() != 1 or rewards.numel() % group_size:
        raise ValueError(f"rewards must be 1-D with a length divisible by group_size={group_size}, got "
                         f"shape {tuple(rewards.shape)}")
    g = rewards.view(-1, group_size)
    mu, sd = g.mean(1, keepdim=True), g.std(1, unbiased=False, keepdim=True)
    return ((g - mu) / (sd + eps)).reshape(-1)


def clipped_surrogate(log_ratio: torch.Tensor, advantages: torch.Tensor, clip_eps: float = 0.2) -> torch.Tensor:
    """-mean min(s A, clip(s, 1 - eps, 1 + eps) A) with s = exp(log_ratio) (PPO, Schulman et al. 2017)."""
    if not 0 < clip_eps < 1:
        raise ValueError(f"clip_eps must be in (0, 1), got {clip_eps!r}")
    s = torch.exp(log_ratio)
    return -torch.minimum(s * advantages, s.clamp(1 - clip_eps, 1 + clip_eps) * advantages).mean()


def path_logprob(head, feats: torch.Tensor, ids: torch.Tensor, path) -> torch.Tensor:
    """log pi(path | prefix) under the EAGLE head, drafting as at decoding time (its own predicted
    features for drafted positions), with gradients. ``ids`` (T,) the verified prefix, ``feats``
    (T-1, d) the target's features of all its positions but the last."""
    tok = ids[1:]
    own = feats.new_zeros(0, feats.shape[-1])
    total = feats.new_zeros(())
    for j, x in enumerate(path):
        g = head(torch.cat([feats, own])[None], torch.cat([tok, ids.new_tensor(path[:j])])[None])[0, -1]
        total = total + torch.log_softmax(head.lm_head(g).float(), -1)[x]
        own = torch.cat([own, g[None]])
    return total


class GTOLoss:
    """omega * L_GTO for a batch of training sequences, to be added to the token-level loss
    (``train_draft_head(..., extra_loss=GTOLoss(...))``).

    For each of the first ``n_groups`` sequences of a batch, ``group_size`` adjacent prefixes
    (start drawn with the loss's own generator, at least ``min_prefix`` tokens long) form a group.
    For every prefix the current draft and the frozen ``ref_head`` build draft trees
    (``depth``/``topk``/``total_tokens``, EAGLE-2), the target scores their branches
    (``temperature`` 0: greedy acceptance indicators; > 0: the target's probabilities at that
    temperature), and the clipped surrogate is taken along the longest greedily accepted sequence
    of the current tree."""

    def __init__(self, target, ref_head, *, group_size: int = 4, n_groups: int = 2, depth: int = 5, topk: int = 4,
                 total_tokens: int = 16, eta: float = 1.0, clip_eps: float = 0.2, omega: float = 1.0,
                 temperature: float = 0.0, min_prefix: int = 8, seed: int = 0):
        if not omega >= 0:
            raise ValueError(f"omega must be >= 0, got {omega!r}")
        if not temperature >= 0:
            raise ValueError(f"temperature must be >= 0, got {temperature!r}")
        group_advantages(torch.zeros(group_size), group_size)       # validates group_size
        draft_tree_reward(torch.zeros(1), eta)                       # validates eta
        clipped_surrogate(torch.zeros(1), torch.zeros(1), clip_eps)  # validates clip_eps
        self.target, self.ref_head = target, ref_head
        self.group_size, self.n_groups, self.min_prefix = group_size, n_groups, min_prefix
        self.tree = dict(depth=depth, topk=topk, total_tokens=total_tokens)
        self.eta, self.clip_eps, self.omega, self.temperature = eta, clip_eps, omega, temperature
        self.g = torch.Generator().manual_seed(seed)
        self.last: dict = {}

    @torch.no_grad()
    def _score(self, ids: torch.Tensor, tree) -> tuple[torch.Tensor, list[int]]:
        """Reward of ``tree`` after ``ids`` and the longest greedily accepted path."""
        paths = tree.paths()
        m = max(len(p) for p in paths)
        rows = ids.new_zeros(len(paths), len(ids) + m)
        rows[:, : len(ids)] = ids
        for r, p in enumerate(paths):
            rows[r, len(ids): len(ids) + len(p)] = torch.tensor(p)
        _, logits = target_forward(self.target, rows)
        lg = logits[:, len(ids) - 1: -1].float()                       # predicts each path position
        drafted = rows[:, len(ids):]
        greedy = (lg.argmax(-1) == drafted).float()
        if self.temperature == 0:
            acc = greedy
        else:
            acc = torch.softmax(lg / self.temperature, -1).gather(-1, drafted[..., None])[..., 0]
        lengths = [len(p) for p in paths]
        reward = draft_tree_reward(branch_values(acc, lengths), self.eta)
        n_acc = branch_values(greedy, lengths)
        best = int(n_acc.argmax())
        return reward, paths[best][: int(n_acc[best])]

    def __call__(self, head, feats: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        T = tokens.shape[1]
        if T < self.min_prefix + self.group_size:
            raise ValueError(f"sequences of {T} tokens are too short for min_prefix={self.min_prefix} and "
                             f"group_size={self.group_size}")
        was_training = head.training
        head.eval()
        rewards, logps, accepted = [], [], []
        for s in range(min(self.n_groups, tokens.shape[0])):
            start = int(torch.randint(self.min_prefix, T - self.group_size + 1, (1,), generator=self.g))
            for t in range(start, start + self.group_size):
                ids, f = tokens[s, :t], feats[s, : t - 1]
                with torch.no_grad():
                    tree = draft_tree(EagleDrafter(head), ids, f, **self.tree)
                    ref = draft_tree(EagleDrafter(self.ref_head), ids, f, **self.tree)
                r, best = self._score(ids, tree)
                r_ref, _ = self._score(ids, ref)
                rewards.append(float(r - r_ref))
                accepted.append(len(best))
                logps.append(path_logprob(head, f, ids, best) if best else feats.new_zeros(()))
        head.train(was_training)
        adv = group_advantages(torch.tensor(rewards), self.group_size)
        logp = torch.stack(logps)
        loss = clipped_surrogate(logp - logp.detach(), adv, self.clip_eps)
        self.last = dict(reward_gain=float(torch.tensor(rewards).mean()), accepted=float(sum(accepted) / len(accepted)))
        return self.omega * loss
