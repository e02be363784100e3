"""Gymnasium vector environments in the form the DQN learners of :mod:`iclr26.models.rl` step.

:func:`make_vec_env` builds ``gymnasium.vector.SyncVectorEnv`` over ``n_envs`` copies of a
registered gymnasium environment (``"CartPole-v1"``, ``"Acrobot-v1"``, ``"MinAtar/Breakout-v1"``)
with same-step autoreset (``AutoresetMode.SAME_STEP``: a finished copy is reset inside the step
that ended it and its true last observation is in ``info["final_obs"]``, the convention of
Stable-Baselines3's ``VecEnv`` and of gymnax, which the official SCORER code uses).
:class:`GymnasiumVecEnv` exposes that vector env with ``reset(seed) -> obs`` and
``step(actions) -> (obs, rewards, terminated, truncated, info)``, ``info["final_obs"]`` a list
(``None`` where the copy did not finish) and ``info["episode_returns"]`` the undiscounted returns
of the episodes that ended at this step. Observations are cast to float32 (MinAtar's are boolean
``10 x 10 x C`` grids).
"""
from __future__ import annotations

import numpy as np


class GymnasiumVecEnv:
    """A ``gymnasium.vector.VectorEnv`` with same-step autoreset, seen through the DQN's interface."""

    def __init__(self, vec_env):
        import gymnasium

        mode = getattr(vec_env, "metadata", {}).get("autoreset_mode")
        if mode != gymnasium.vector.AutoresetMode.SAME_STEP:
            raise ValueError(f"GymnasiumVecEnv needs a vector env with autoreset_mode=SAME_STEP, got {mode!r}")
        self.vec_env = vec_env
        self.num_envs = int(vec_env.num_envs)
        self.single_observation_space = vec_env.single_observation_space
        self.single_action_space = vec_env.single_action_space
        self._returns = np.zeros(self.num_envs)

    def reset(self, seed: int | None = None) -> np.ndarray:
        obs, _ = self.vec_env.reset(seed=seed)
        self._returns[:] = 0.0
        return np.asarray(obs, np.float32)

    def step(self, actions):
        actions = np.asarray(actions)
        if actions.shape != (self.num_envs,):
            raise ValueError(f"actions must have shape ({self.num_envs},), got {actions.shape}")
        obs, rew, term, trunc, info = self.vec_env.step(actions)
        rew = np.asarray(rew, float)
        term, trunc = np.asarray(term, bool), np.asarray(trunc, bool)
        self._returns += rew
        done = term | trunc
        final_obs = [None] * self.num_envs
        ep_returns = []
        for i in np.flatnonzero(done):
            final_obs[i] = np.asarray(info["final_obs"][i], np.float32)
            ep_returns.append(float(self._returns[i]))
            self._returns[i] = 0.0
        return (np.asarray(obs, np.float32), rew, term, trunc,
                {"final_obs": final_obs, "episode_returns": ep_returns})

    def close(self) -> None:
        self.vec_env.close()


def make_env(env_id: str, **kwargs):
    """``gymnasium.make(env_id, **kwargs)``, registering the ``MinAtar/*`` ids first when asked for."""
    import gymnasium

    if env_id.startswith("MinAtar/") and env_id not in gymnasium.registry:
        import minatar.gym

        minatar.gym.register_envs()         # MinAtar/<Game>-v0 (full action set) and -v1 (minimal)
    return gymnasium.make(env_id, **kwargs)


def make_vec_env(env_id: str, n_envs: int, **kwargs) -> GymnasiumVecEnv:
    """``n_envs`` copies of ``gymnasium.make(env_id, **kwargs)`` in a same-step-autoreset
    ``gymnasium.vector.SyncVectorEnv``, wrapped as :class:`GymnasiumVecEnv`."""
    import gymnasium

    if not (isinstance(n_envs, int) and n_envs >= 1):
        raise ValueError(f"n_envs must be an integer >= 1, got {n_envs!r}")
    vec = gymnasium.vector.SyncVectorEnv([lambda: make_env(env_id, **kwargs) for _ in range(n_envs)],
                                         autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP)
    return GymnasiumVecEnv(vec)
