"""Password: guess a fixed string of bits, one per step; the only reward is at the very end.

Isolates: exploration with a sparse reward (the entropy bonus, and enough rows and steps to
stumble on the reward at all).

Rules: the password is `length` bits drawn once from `key` (the same for every row and episode).
Each step the policy guesses the next bit; a wrong guess ends the episode with 0, the last right
guess ends it with 1. Observation: the one-hot of how many bits are already right, Box(0, 1,
(length,)); actions Discrete(2).

Scores: random play returns 2 ** -length in expectation (1/256 with the default 8 bits).
Solved: 1 (the password every time); the learning test asks for 0.95.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from puffer.emulation import Buffers
from puffer.envs.ocean.base import BatchedEnv


class Password(BatchedEnv):
    def __init__(self, num_rows: int = 1024, length: int = 8, key: int = 0, seed: int = 0,
                 buf: Buffers | None = None):
        if length < 1:
            raise ValueError(f"ocean/password: length={length}; expected 1 or more bits")
        self.name = "ocean/password"
        self.length, self.max_steps = length, length
        self.password = np.random.default_rng(key).integers(0, 2, length)
        self.single_observation_space = spaces.Box(0, 1, (length,), np.float32)
        self.single_action_space = spaces.Discrete(2)
        self.init_rows(num_rows, seed)
        self.set_buffers(buf)

    def start(self, rows: np.ndarray) -> None:
        pass  # an episode's only state is its step count

    def advance(self, actions: np.ndarray):
        position = np.minimum(self.steps, self.length - 1)
        right = actions.reshape(-1) == self.password[position]
        last = self.steps == self.length - 1
        return np.where(right & last, 1.0, 0.0), ~right | last

    def observe(self) -> None:
        self.observations[:] = 0
        live = np.flatnonzero(self.steps < self.length)
        self.observations[live, self.steps[live]] = 1
