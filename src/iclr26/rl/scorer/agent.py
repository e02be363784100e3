"""SCORER: Stackelberg coupling of representation learning and Q-learning, as a DQN wrapper.

Martinez, Li, Lu, Chen, "Stackelberg Coupling of Online Representation Learning and Reinforcement
Learning", ICLR 2026, arXiv:2508.07452 (v3); official code https://github.com/fernando-ml/SCORER
(JAX, ``DQN_SCORER.py``).

The Q-network is split as ``Q_theta(f_phi(s), .)`` (:class:`iclr26.models.rl.QNetwork`:
``encoder`` = ``f_phi``, ``head`` = ``Q_theta``). Two players update in sequence on the TD error

    delta(s, a, r, s') = r + gamma (1 - d) max_a' Q_theta-(f_phi-(s'), a') - Q_theta(f_phi(s), a)

(``theta-``, ``phi-``: target copies):

* **leader** (Q-head, slow timescale, learning rate ``lr_q``): one Adam step on the mean squared
  Bellman error ``E[delta^2]`` with the features ``f_phi(s)`` held fixed (stop-gradient), every
  ``leader_interval`` updates;
* **follower** (encoder, fast timescale, learning rate ``lr_enc > lr_q``): given the leader's
  committed ``theta`` (no gradient to it), ``follower_steps`` Adam steps, each on its own batch, on
  the variance of the Bellman error ``E[(delta - E delta)^2]`` (``follower_loss="be_variance"``,
  the paper's objective) or on the MSBE (``follower_loss="msbe"``, the paper's ablation), every
  ``follower_interval`` updates.

Defaults are the official code's classic-control settings: ``lr_q = 1e-4``, ``lr_enc = 3e-4``,
both players once per update, one follower step, independent batches for the two players (its
MinAtar settings use ``lr_enc = 5e-4`` and the network of :mod:`.networks`).
"""
from __future__ import annotations

import torch

from iclr26.models.rl import DQN

FOLLOWER_LOSSES = ("be_variance", "msbe")


def bellman_error_variance(delta: torch.Tensor) -> torch.Tensor:
    """``mean((delta - mean(delta))^2)``: the follower's objective (population variance of the batch)."""
    return ((delta - delta.mean()) ** 2).mean()


def msbe(delta: torch.Tensor) -> torch.Tensor:
    """``mean(delta^2)``: the mean squared Bellman error, the leader's objective."""
    return (delta**2).mean()


class ScorerDQN(DQN):
    """DQN whose Q-head (leader) and encoder (follower) play SCORER's two-timescale Stackelberg game.

    Parameters beyond :class:`iclr26.models.rl.DQN`'s (whose ``learning_rate`` is unused here):
    ``lr_q`` (leader), ``lr_enc`` (follower), ``leader_interval`` and ``follower_interval`` (in
    updates), ``follower_steps`` (best-response steps per follower turn) and ``follower_loss``
    (``"be_variance"`` or ``"msbe"``).
    """

    def __init__(self, env, lr_q: float = 1e-4, lr_enc: float = 3e-4, leader_interval: int = 1,
                 follower_interval: int = 1, follower_steps: int = 1, follower_loss: str = "be_variance",
                 **dqn_kwargs):
        if follower_loss not in FOLLOWER_LOSSES:
            raise ValueError(f"follower_loss must be one of {FOLLOWER_LOSSES}, got {follower_loss!r}")
        for name, v in (("lr_q", lr_q), ("lr_enc", lr_enc)):
            if not v > 0:
                raise ValueError(f"{name} must be > 0, got {v!r}")
        for name, v in (("leader_interval", leader_interval), ("follower_interval", follower_interval),
                        ("follower_steps", follower_steps)):
            if not (isinstance(v, int) and v >= 1):
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        q_net = dqn_kwargs.get("q_net")
        missing = [part for part in ("encoder", "head") if q_net is not None and not hasattr(q_net, part)]
        if missing:
            raise ValueError(f"ScorerDQN needs a q_net with .encoder and .head sub-modules; missing: {missing}")
        self.lr_q, self.lr_enc = float(lr_q), float(lr_enc)
        self.leader_interval, self.follower_interval = leader_interval, follower_interval
        self.follower_steps, self.follower_loss = follower_steps, follower_loss
        self._k = 0
        super().__init__(env, **dqn_kwargs)

    def make_optimizers(self) -> list:
        """``[leader Adam over head params (lr_q), follower Adam over encoder params (lr_enc)]``."""
        return [torch.optim.Adam(self.q_net.head.parameters(), lr=self.lr_q),
                torch.optim.Adam(self.q_net.encoder.parameters(), lr=self.lr_enc)]

    def leader_step(self, batch) -> torch.Tensor:
        """One leader step: MSBE on the head, the features of ``s`` detached."""
        z = self.q_net.encoder(batch["obs"]).detach()
        q = self.q_net.head(z).gather(-1, batch["actions"].long().unsqueeze(-1)).squeeze(-1)
        loss = msbe(self.td_target(batch) - q)
        self._apply(self.optimizers[0], loss, self.q_net.head.parameters())
        return loss.detach()

    def follower_step(self, batch) -> torch.Tensor:
        """One follower step: the follower loss on the encoder, the leader's head fixed."""
        head = list(self.q_net.head.parameters())
        flags = [p.requires_grad for p in head]
        for p in head:                      # the leader's strategy is committed: no gradient to theta
            p.requires_grad_(False)
        try:
            delta = self.td_target(batch) - self.q_selected(batch)
            loss = bellman_error_variance(delta) if self.follower_loss == "be_variance" else msbe(delta)
            self._apply(self.optimizers[1], loss, self.q_net.encoder.parameters())
        finally:
            for p, g in zip(head, flags):
                p.requires_grad_(g)
        return loss.detach()

    def train_step(self) -> dict:
        out = {}
        if self._k % self.leader_interval == 0:
            out["leader_loss"] = float(self.leader_step(self.buffer.sample(self.batch_size)))
        if self._k % self.follower_interval == 0:
            for _ in range(self.follower_steps):
                out["follower_loss"] = float(self.follower_step(self.buffer.sample(self.batch_size)))
        self._k += 1
        return out
