"""A small DQN substrate in the Stable-Baselines3 / CleanRL style, shared by the RL papers.

What it holds:

* :class:`Discrete`, :class:`Box`: the two gymnasium spaces the agents read (``.n``, ``.shape``);
  any gymnasium environment with these attributes works in their place.
* :class:`CartPoleEnv`: the classic cart-pole task (Barto, Sutton & Anderson 1983) with the
  constants, termination and 500-step truncation of gymnasium's ``CartPole-v1``, in plain numpy,
  so that the RL papers run where ``gymnasium`` is not installed (pass ``gymnasium.make(...)``
  instead where it is).
* :class:`SyncVectorEnv`: ``n`` copies of a gymnasium-API environment stepped together, with
  same-step autoreset (the Stable-Baselines3 ``VecEnv`` convention: a finished copy is reset at
  once and its true last observation is returned in ``info["final_obs"]``).
* :class:`ReplayBuffer`: a uniform replay of ``(s, a, r, s', done)``.
* :func:`linear_schedule`: the epsilon (and learning-rate) schedule of DQN.
* :class:`QNetwork`: a Q-network split into ``encoder`` (perception) and ``head`` (Q-values), the
  split that value-based representation papers act on.
* :class:`DQN`: double-free, target-network DQN (Mnih et al. 2015) with ``learn(total_timesteps)``,
  ``predict(obs)``, ``evaluate(env, n_episodes)``; subclasses change :meth:`DQN.train_step` only.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn


# ----------------------------------------------------------------------------- spaces
class Discrete:
    """``{0, ..., n-1}``, as ``gymnasium.spaces.Discrete``."""

    def __init__(self, n: int):
        if not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"Discrete needs a positive integer n, got {n!r}")
        self.n = int(n)

    def sample(self, rng: np.random.Generator) -> int:
        return int(rng.integers(self.n))


class Box:
    """A real box of a fixed shape, as ``gymnasium.spaces.Box`` (bounds are informative only)."""

    def __init__(self, low, high, shape=None, dtype=np.float32):
        low, high = np.asarray(low, dtype), np.asarray(high, dtype)
        self.shape = tuple(shape) if shape is not None else low.shape
        self.low = np.broadcast_to(low, self.shape).astype(dtype)
        self.high = np.broadcast_to(high, self.shape).astype(dtype)
        self.dtype = dtype


# ----------------------------------------------------------------------------- environments
class CartPoleEnv:
    """Cart-pole balancing with gymnasium ``CartPole-v1``'s constants and rules.

    State ``(x, x_dot, theta, theta_dot)``; action 0 pushes left, 1 right, with force 10 N; Euler
    integration with ``tau = 0.02`` s; reward 1 per step (the step that terminates included); the
    episode terminates when ``|x| > 2.4`` or ``|theta| > 12`` degrees and is truncated after
    ``max_episode_steps = 500`` steps; the reset state is uniform on ``[-0.05, 0.05]^4``.
    """

    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    theta_threshold = 12 * 2 * math.pi / 360
    x_threshold = 2.4

    def __init__(self, max_episode_steps: int = 500):
        if max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be >= 1, got {max_episode_steps}")
        self.max_episode_steps = int(max_episode_steps)
        self.total_mass = self.masspole + self.masscart
        self.polemass_length = self.masspole * self.length
        high = np.array([self.x_threshold * 2, np.inf, self.theta_threshold * 2, np.inf], np.float32)
        self.observation_space = Box(-high, high)
        self.action_space = Discrete(2)
        self._rng = np.random.default_rng()
        self.state = None
        self._t = 0

    def reset(self, seed: int | None = None, options=None):
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.state = self._rng.uniform(-0.05, 0.05, 4)
        self._t = 0
        return self.state.astype(np.float32), {}

    def step(self, action):
        if self.state is None:
            raise RuntimeError("call reset() before step()")
        if int(action) not in (0, 1):
            raise ValueError(f"CartPole action must be 0 or 1, got {action!r}")
        x, x_dot, theta, theta_dot = self.state
        force = self.force_mag if int(action) == 1 else -self.force_mag
        cos, sin = math.cos(theta), math.sin(theta)
        temp = (force + self.polemass_length * theta_dot**2 * sin) / self.total_mass
        thetaacc = (self.gravity * sin - cos * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * cos**2 / self.total_mass))
        xacc = temp - self.polemass_length * thetaacc * cos / self.total_mass
        x = x + self.tau * x_dot
        x_dot = x_dot + self.tau * xacc
        theta = theta + self.tau * theta_dot
        theta_dot = theta_dot + self.tau * thetaacc
        self.state = np.array([x, x_dot, theta, theta_dot])
        self._t += 1
        terminated = bool(abs(x) > self.x_threshold or abs(theta) > self.theta_threshold)
        truncated = bool(self._t >= self.max_episode_steps and not terminated)
        return self.state.astype(np.float32), 1.0, terminated, truncated, {}


class SyncVectorEnv:
    """``n`` gymnasium-API environments stepped in lockstep with same-step autoreset.

    ``step(actions)`` returns ``(obs, rewards, terminated, truncated, info)`` as arrays of length
    ``n``; where an episode ended, ``obs`` is already the next episode's first observation and
    ``info["final_obs"][i]`` is the true last observation; ``info["episode_returns"]`` lists the
    undiscounted returns of the episodes that ended at this step.
    """

    def __init__(self, env_fns):
        self.envs = [fn() for fn in env_fns]
        if not self.envs:
            raise ValueError("SyncVectorEnv needs at least one environment")
        self.num_envs = len(self.envs)
        self.single_observation_space = self.envs[0].observation_space
        self.single_action_space = self.envs[0].action_space
        self._returns = np.zeros(self.num_envs)

    def reset(self, seed: int | None = None):
        obs = [e.reset(seed=None if seed is None else seed + i)[0] for i, e in enumerate(self.envs)]
        self._returns[:] = 0.0
        return np.stack(obs).astype(np.float32)

    def step(self, actions):
        actions = np.asarray(actions)
        if actions.shape != (self.num_envs,):
            raise ValueError(f"actions must have shape ({self.num_envs},), got {actions.shape}")
        obs, rew, term, trunc = [], np.zeros(self.num_envs), np.zeros(self.num_envs, bool), np.zeros(self.num_envs, bool)
        final_obs = [None] * self.num_envs
        ep_returns = []
        for i, (env, a) in enumerate(zip(self.envs, actions)):
            o, r, te, tr, _ = env.step(int(a))
            rew[i], term[i], trunc[i] = r, te, tr
            self._returns[i] += r
            if te or tr:
                final_obs[i] = np.asarray(o, np.float32)
                ep_returns.append(float(self._returns[i]))
                self._returns[i] = 0.0
                o, _ = env.reset()
            obs.append(o)
        info = {"final_obs": final_obs, "episode_returns": ep_returns}
        return np.stack(obs).astype(np.float32), rew, term, trunc, info


# ----------------------------------------------------------------------------- replay and schedules
class ReplayBuffer:
    """Uniform experience replay of ``(obs, action, reward, next_obs, done)`` (Lin 1992; DQN).

    ``done`` is the *termination* flag only: a truncated episode still bootstraps from
    ``next_obs``. Oldest transitions are overwritten once ``capacity`` is reached.
    """

    def __init__(self, capacity: int, obs_shape, rng: np.random.Generator | None = None):
        if not isinstance(capacity, (int, np.integer)) or capacity < 1:
            raise ValueError(f"capacity must be a positive integer, got {capacity!r}")
        self.capacity = int(capacity)
        self.obs = np.zeros((self.capacity, *obs_shape), np.float32)
        self.next_obs = np.zeros((self.capacity, *obs_shape), np.float32)
        self.actions = np.zeros(self.capacity, np.int64)
        self.rewards = np.zeros(self.capacity, np.float32)
        self.dones = np.zeros(self.capacity, np.float32)
        self.pos = 0
        self.size = 0
        self.rng = rng if rng is not None else np.random.default_rng()

    def __len__(self) -> int:
        return self.size

    def add(self, obs, actions, rewards, next_obs, dones) -> None:
        """Add a batch of transitions (leading axis = transitions)."""
        obs = np.asarray(obs, np.float32)
        n = obs.shape[0]
        for name, arr in (("actions", actions), ("rewards", rewards), ("next_obs", next_obs), ("dones", dones)):
            if np.asarray(arr).shape[0] != n:
                raise ValueError(f"{name} has {np.asarray(arr).shape[0]} rows but obs has {n}")
        idx = (self.pos + np.arange(n)) % self.capacity
        self.obs[idx] = obs
        self.next_obs[idx] = np.asarray(next_obs, np.float32)
        self.actions[idx] = np.asarray(actions)
        self.rewards[idx] = np.asarray(rewards)
        self.dones[idx] = np.asarray(dones, np.float32)
        self.pos = int((self.pos + n) % self.capacity)
        self.size = int(min(self.size + n, self.capacity))

    def sample(self, batch_size: int) -> dict:
        """A uniform batch (with replacement) as float32/int64 torch tensors."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty ReplayBuffer")
        idx = self.rng.integers(0, self.size, batch_size)
        return {
            "obs": torch.from_numpy(self.obs[idx]),
            "actions": torch.from_numpy(self.actions[idx]),
            "rewards": torch.from_numpy(self.rewards[idx]),
            "next_obs": torch.from_numpy(self.next_obs[idx]),
            "dones": torch.from_numpy(self.dones[idx]),
        }


def linear_schedule(start: float, end: float, duration: int, t: int) -> float:
    """``start`` moving linearly to ``end`` over ``duration`` steps, then constant (CleanRL)."""
    if duration <= 0:
        return float(end)
    slope = (end - start) / duration
    return float(max(slope * t + start, end) if end <= start else min(slope * t + start, end))


# ----------------------------------------------------------------------------- networks
class L1Norm(nn.Module):
    """Divide each row by its mean absolute value (the official SCORER code's ``L1Norm``)."""

    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        return x / (x.abs().mean(-1, keepdim=True) + self.eps)


def _ortho(layer: nn.Linear, gain: float) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class QNetwork(nn.Module):
    """``Q(s, .) = head(encoder(s))``.

    ``encoder``: Linear(obs, latent) - ReLU - L1Norm; ``head``: Linear(latent, hidden) - ReLU -
    Linear(hidden, n_actions), orthogonal init with gain sqrt(2) and 0.01 on the last layer (the
    classic-control networks of the official SCORER code: latent 64, hidden 64).
    """

    def __init__(self, obs_dim: int, n_actions: int, latent_dim: int = 64, hidden: int = 64):
        super().__init__()
        if min(obs_dim, n_actions, latent_dim, hidden) < 1:
            raise ValueError("obs_dim, n_actions, latent_dim and hidden must all be >= 1")
        self.encoder = nn.Sequential(_ortho(nn.Linear(obs_dim, latent_dim), math.sqrt(2)), nn.ReLU(), L1Norm())
        self.head = nn.Sequential(_ortho(nn.Linear(latent_dim, hidden), math.sqrt(2)), nn.ReLU(),
                                  _ortho(nn.Linear(hidden, n_actions), 0.01))

    def forward(self, obs):
        return self.head(self.encoder(obs))


# ----------------------------------------------------------------------------- the agent
@dataclass
class DQNLog:
    """What ``learn`` records: every finished episode's return and the env step it ended at."""

    episode_returns: list
    episode_steps: list
    n_updates: int = 0


class DQN:
    """DQN (Mnih et al. 2015) with a target network, in the CleanRL / Stable-Baselines3 style.

    ``learn(total_timesteps)`` collects ``n_envs`` transitions per vector step with epsilon-greedy
    actions (epsilon linear from ``exploration_initial_eps`` to ``exploration_final_eps`` over
    ``exploration_steps`` env steps); once ``learning_starts`` env steps are stored it runs
    :meth:`train_step` on a fresh batch every ``train_frequency`` vector steps, and copies
    (``tau = 1``) or averages the online weights into the target every ``target_update_interval``
    env steps. Loss: ``mean((r + gamma (1 - d) max_a' Q_target(s', a') - Q(s, a))^2)``, Adam with
    gradient-norm clipping and (``lr_decay``) the learning rate decayed linearly to 0.

    Defaults are the classic-control settings of the official SCORER code (10 envs, buffer 50k,
    batch 64, epsilon 1 -> 0.05 over 50k steps, target every 1000 steps, lr 1e-4, learning starts
    1000, gamma 0.99, max grad norm 0.5, linear lr decay).
    """

    def __init__(self, env, q_net: QNetwork | None = None, learning_rate: float = 1e-4,
                 buffer_size: int = 50_000, batch_size: int = 64, gamma: float = 0.99,
                 target_update_interval: int = 1000, tau: float = 1.0, learning_starts: int = 1000,
                 train_frequency: int = 1, exploration_initial_eps: float = 1.0,
                 exploration_final_eps: float = 0.05, exploration_steps: int = 50_000,
                 max_grad_norm: float = 0.5, lr_decay: bool = True, seed: int = 0):
        if not hasattr(env, "num_envs"):
            env = SyncVectorEnv([lambda: env])
        if not hasattr(env.single_action_space, "n"):
            raise ValueError("DQN needs a discrete action space (an action_space with attribute n)")
        for name, v in (("learning_rate", learning_rate), ("batch_size", batch_size), ("buffer_size", buffer_size),
                        ("train_frequency", train_frequency), ("target_update_interval", target_update_interval)):
            if not v > 0:
                raise ValueError(f"{name} must be > 0, got {v!r}")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must lie in [0, 1], got {gamma!r}")
        if not 0.0 < tau <= 1.0:
            raise ValueError(f"tau must lie in (0, 1], got {tau!r}")
        self.env = env
        self.n_envs = env.num_envs
        self.obs_shape = tuple(env.single_observation_space.shape)
        self.n_actions = int(env.single_action_space.n)
        self.seed = int(seed)
        self.rng = np.random.default_rng(self.seed)
        torch.manual_seed(self.seed)
        self.q_net = q_net if q_net is not None else QNetwork(int(np.prod(self.obs_shape)), self.n_actions)
        self.target_net = copy.deepcopy(self.q_net)
        for p in self.target_net.parameters():
            p.requires_grad_(False)
        self.learning_rate = float(learning_rate)
        self.buffer_size, self.batch_size, self.gamma = int(buffer_size), int(batch_size), float(gamma)
        self.target_update_interval, self.tau = int(target_update_interval), float(tau)
        self.learning_starts, self.train_frequency = int(learning_starts), int(train_frequency)
        self.eps0, self.eps1, self.eps_steps = exploration_initial_eps, exploration_final_eps, int(exploration_steps)
        self.max_grad_norm, self.lr_decay = float(max_grad_norm), bool(lr_decay)
        self.buffer = ReplayBuffer(self.buffer_size, self.obs_shape, self.rng)
        self.optimizers = self.make_optimizers()
        self.base_lrs = [[g["lr"] for g in o.param_groups] for o in self.optimizers]
        self.log = DQNLog([], [])
        self.num_timesteps = 0
        self._total = 1

    # -- hooks a subclass may override
    def make_optimizers(self) -> list:
        return [torch.optim.Adam(self.q_net.parameters(), lr=self.learning_rate)]

    def td_target(self, batch) -> torch.Tensor:
        """``r + gamma (1 - done) max_a' Q_target(s', a')`` (no gradient)."""
        with torch.no_grad():
            nxt = self.target_net(batch["next_obs"]).max(-1).values
            return batch["rewards"] + self.gamma * (1.0 - batch["dones"]) * nxt

    def q_selected(self, batch, net: nn.Module | None = None) -> torch.Tensor:
        net = self.q_net if net is None else net
        return net(batch["obs"]).gather(-1, batch["actions"].long().unsqueeze(-1)).squeeze(-1)

    def train_step(self) -> dict:
        """One gradient step of the whole Q-network on the mean squared TD error."""
        batch = self.buffer.sample(self.batch_size)
        loss = ((self.td_target(batch) - self.q_selected(batch)) ** 2).mean()
        self._apply(self.optimizers[0], loss, self.q_net.parameters())
        return {"loss": loss.item()}

    # -- machinery
    def _apply(self, opt, loss, params) -> None:
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.max_grad_norm > 0:
            nn.utils.clip_grad_norm_(list(params), self.max_grad_norm)
        opt.step()

    def _set_lr(self) -> None:
        frac = max(0.0, 1.0 - self.num_timesteps / self._total) if self.lr_decay else 1.0
        for opt, lrs in zip(self.optimizers, self.base_lrs):
            for g, lr in zip(opt.param_groups, lrs):
                g["lr"] = lr * frac

    def epsilon(self) -> float:
        return linear_schedule(self.eps0, self.eps1, self.eps_steps, self.num_timesteps)

    def predict(self, obs, deterministic: bool = True):
        """Greedy (or epsilon-greedy) actions for a batch of observations (SB3's ``predict``)."""
        obs = np.asarray(obs, np.float32)
        single = obs.shape == self.obs_shape
        batch = obs[None] if single else obs
        with torch.no_grad():
            act = self.q_net(torch.from_numpy(batch)).argmax(-1).numpy()
        if not deterministic:
            explore = self.rng.random(len(act)) < self.epsilon()
            act = np.where(explore, self.rng.integers(0, self.n_actions, len(act)), act)
        return (int(act[0]) if single else act), None

    def _update_target(self) -> None:
        with torch.no_grad():
            for t, p in zip(self.target_net.parameters(), self.q_net.parameters()):
                t.mul_(1.0 - self.tau).add_(p, alpha=self.tau)

    def learn(self, total_timesteps: int):
        """Train for ``total_timesteps`` environment steps (all copies counted); returns ``self``."""
        if total_timesteps < self.n_envs:
            raise ValueError(f"total_timesteps must be >= n_envs = {self.n_envs}, got {total_timesteps}")
        self._total = int(total_timesteps)
        obs = self.env.reset(seed=self.seed)
        vec_steps = self._total // self.n_envs
        for k in range(vec_steps):
            actions, _ = self.predict(obs, deterministic=False)
            next_obs, rew, term, trunc, info = self.env.step(actions)
            self.num_timesteps += self.n_envs
            real_next = next_obs.copy()
            for i, fo in enumerate(info["final_obs"]):
                if fo is not None:
                    real_next[i] = fo
            self.buffer.add(obs, actions, rew, real_next, term)
            for r in info["episode_returns"]:
                self.log.episode_returns.append(r)
                self.log.episode_steps.append(self.num_timesteps)
            obs = next_obs
            if self.num_timesteps > self.learning_starts and len(self.buffer) >= self.batch_size \
                    and k % self.train_frequency == 0:
                self._set_lr()
                self.train_step()
                self.log.n_updates += 1
            # target update when the env-step counter crosses a multiple of the interval
            if (self.num_timesteps // self.target_update_interval) != \
                    ((self.num_timesteps - self.n_envs) // self.target_update_interval):
                self._update_target()
        return self

    def evaluate(self, env, n_episodes: int = 10, seed: int = 0) -> np.ndarray:
        """Undiscounted returns of ``n_episodes`` greedy episodes on a single (non-vector) env."""
        out = []
        for e in range(n_episodes):
            o, _ = env.reset(seed=seed + e)
            done, total = False, 0.0
            while not done:
                a, _ = self.predict(o, deterministic=True)
                o, r, te, tr, _ = env.step(a)
                total += r
                done = te or tr
            out.append(total)
        return np.asarray(out)


def iqm(x) -> float:
    """Interquartile mean: ``scipy.stats.trim_mean(x, 0.25)``, as ``rliable`` computes it (Agarwal et al. 2021)."""
    from scipy.stats import trim_mean

    x = np.asarray(x, float).ravel()
    if x.size == 0:
        raise ValueError("iqm of an empty array")
    return float(trim_mean(x, 0.25))
