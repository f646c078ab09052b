"""Herd: a native multi-agent env; every agent of one game stepped at once with numpy.

`num_agents` agents on a ring of `size` cells each walk to their own target (actions: left,
stay, right). Reaching it gives +1 and ends that agent (terminal; its row is masked from the next
step on, with zero observation and reward); each step costs 0.01. The game ends when every agent
is home, or is truncated after `max_steps`. Observation per agent: its position, its target and
the time left, scaled to [0, 1]. Rows are the agents of one shared game, as with PettingZoo envs.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from puffer.emulation import Buffers, PufferEnv


class Herd(PufferEnv):
    def __init__(self, num_agents: int = 4, size: int = 16, max_steps: int = 32, seed: int = 0,
                 buf: Buffers | None = None):
        self.name = "ocean/herd"
        self.num_agents = num_agents
        self.size, self.max_steps, self.seed = size, max_steps, seed
        self.single_observation_space = spaces.Box(0, 1, (3,), np.float32)
        self.single_action_space = spaces.Discrete(3)
        self.rng = np.random.default_rng(seed)
        self.alive = np.zeros(num_agents, dtype=bool)
        self.needs_reset = True
        self.set_buffers(buf)

    def _observe(self) -> None:
        obs = np.stack([self.position / self.size, self.target / self.size,
                        np.full(self.num_agents, 1 - self.t / self.max_steps)], axis=1)
        self.observations[:] = np.where(self.alive[:, None], obs, 0)
        self.masks[:] = self.alive

    def _start(self) -> None:
        self.position = self.rng.integers(0, self.size, self.num_agents)
        self.target = (self.position + self.rng.integers(1, self.size, self.num_agents)) % self.size
        self.alive[:] = True
        self.returns = np.zeros(self.num_agents)
        self.t, self.needs_reset = 0, False
        self._observe()
        self.rewards[:] = 0
        self.terminals[:] = False
        self.truncations[:] = False

    def reset(self, seed: int | None = None):
        self.rng = np.random.default_rng(self.seed if seed is None else seed)
        self._start()
        return self.observations, []

    def step(self, actions):
        if self.needs_reset:
            self._start()
            return self.outputs(())
        was_alive = self.alive.copy()
        moves = np.asarray(actions).reshape(-1) - 1  # -1, 0, +1; absent agents' actions are dropped
        self.position = np.where(was_alive, (self.position + moves) % self.size, self.position)
        self.t += 1
        home = was_alive & (self.position == self.target)
        rewards = np.where(was_alive, home.astype(np.float64) - 0.01, 0.0)
        self.returns += rewards
        truncated = was_alive & ~home & (self.t >= self.max_steps)
        # Rows that just finished still show their final observation (mask on) this step.
        self._observe_final(was_alive)
        self.rewards[:] = rewards
        self.terminals[:] = home
        self.truncations[:] = truncated
        self.alive &= ~(home | truncated)
        if self.alive.any():
            return self.outputs(())
        self.needs_reset = True
        return self.outputs([{"episode_return": float(self.returns.mean()), "episode_length": self.t,
                              **{f"episode_return/agent_{i}": float(r) for i, r in enumerate(self.returns)}}])

    def _observe_final(self, was_alive: np.ndarray) -> None:
        alive, self.alive = self.alive, was_alive
        self._observe()
        self.alive = alive
