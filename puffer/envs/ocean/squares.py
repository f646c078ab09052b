"""Squares: a pixel env cheap enough to show that a CNN policy learns, in seconds on a CPU.

Each row sees a (1, 36, 36) uint8 image with a bright square in one of four quadrants and must
name the quadrant (Discrete(4)): reward 1 if right, 0 if not; a new square every step, 8 steps an
episode. Random play returns 2 per episode; a policy that reads the image returns 8.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from puffer.emulation import Buffers
from puffer.envs.ocean.base import BatchedEnv

SIZE, SQUARE = 36, 8
CORNERS = [(4, 4), (4, 22), (22, 4), (22, 22)]  # top-left corner of each quadrant's square


class Squares(BatchedEnv):
    def __init__(self, num_rows: int = 64, episode_length: int = 8, seed: int = 0,
                 buf: Buffers | None = None):
        self.name = "ocean/squares"
        self.episode_length = self.max_steps = episode_length
        self.single_observation_space = spaces.Box(0, 255, (1, SIZE, SIZE), np.uint8)
        self.single_action_space = spaces.Discrete(4)
        self.targets = np.zeros(num_rows, dtype=np.int64)
        self.init_rows(num_rows, seed)
        self.set_buffers(buf)

    def start(self, rows: np.ndarray) -> None:
        pass  # every step shows a new square (observe): an episode has no state of its own

    def advance(self, actions: np.ndarray):
        rewards = (actions.reshape(-1) == self.targets).astype(np.float64)
        return rewards, self.steps + 1 >= self.episode_length

    def observe(self) -> None:
        """A new square for every row."""
        self.targets[:] = self.rng.integers(0, 4, self.num_agents)
        self.observations[:] = 0
        for quadrant, (top, left) in enumerate(CORNERS):
            hit = self.targets == quadrant
            self.observations[hit, 0, top : top + SQUARE, left : left + SQUARE] = 255
