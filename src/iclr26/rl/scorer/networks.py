"""The MinAtar Q-network of the official SCORER code, split into ``encoder`` and ``head``.

Official code: ``DQN_SCORER.py`` (github.com/fernando-ml/SCORER), ``PerceptionNetwork`` and
``QNetwork`` with ``is_minatar=True``; arXiv:2508.07452, Sec. 5 (the same network for DQN and
DQN-SCORER, so that gains come from the update dynamics and not from capacity).

* ``encoder`` (perception, ``f_phi``): flatten the ``10 x 10 x C`` grid, L1Norm, Linear(100 C, 128),
  ReLU, Linear(128, 128), ReLU, L1Norm;
* ``head`` (control, ``Q_theta``): Linear(128, 128), ReLU, Linear(128, n_actions).

Orthogonal initialisation with gain sqrt(2) (0.01 on the last layer), zero biases; ReLU is the
official script's default ``--activation``. It is a multilayer perceptron, not a convolutional
network: the official MinAtar branch has no convolution.
"""
from __future__ import annotations

import math

from torch import nn

from iclr26.models.rl import L1Norm


def _ortho(layer: nn.Linear, gain: float) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class MinAtarQNetwork(nn.Module):
    """``Q(s, .) = head(encoder(s))`` for MinAtar observations of shape ``obs_shape`` (e.g. ``(10, 10, 4)``)."""

    def __init__(self, obs_shape, n_actions: int, latent_dim: int = 128, hidden: int = 128):
        super().__init__()
        obs_dim = math.prod(obs_shape)
        if min(obs_dim, n_actions, latent_dim, hidden) < 1:
            raise ValueError(f"obs_shape, n_actions, latent_dim and hidden must all be positive, got "
                             f"{tuple(obs_shape)}, {n_actions}, {latent_dim}, {hidden}")
        self.encoder = nn.Sequential(nn.Flatten(), L1Norm(), _ortho(nn.Linear(obs_dim, latent_dim), math.sqrt(2)),
                                     nn.ReLU(), _ortho(nn.Linear(latent_dim, latent_dim), math.sqrt(2)), nn.ReLU(),
                                     L1Norm())
        self.head = nn.Sequential(_ortho(nn.Linear(latent_dim, hidden), math.sqrt(2)), nn.ReLU(),
                                  _ortho(nn.Linear(hidden, n_actions), 0.01))

    def forward(self, obs):
        return self.head(self.encoder(obs))
