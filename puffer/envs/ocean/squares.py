"""Squares: a pixel env cheap enough to show that a CNN policy learns, in seconds on a CPU.

Each row sees a (1, 36, 36) uint8 image with a bright square in one of four quadrants and must
name the quadrant (Discrete(4)): reward 1 if right, 0 if not; a new square every step, 8 steps an
episode. Random play returns 2 per episode; a policy that reads the image returns 8.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from puffer.emulation import Buffers, PufferEnv

SIZE, SQUARE = 36, 8
CORNERS = [(4, 4), (4, 22), (22, 4), (22, 22)]  # top-left corner of each quadrant's square


class Squares(PufferEnv):
    independent_rows = True

    def __init__(self, num_envs: int = 64, episode_length: int = 8, seed: int = 0,
                 buf: Buffers | None = None):
        self.name = "ocean/squares"
        self.num_agents = num_envs
        self.episode_length = episode_length
        self.seed = seed
        self.single_observation_space = spaces.Box(0, 255, (1, SIZE, SIZE), np.uint8)
        self.single_action_space = spaces.Discrete(4)
        self.targets = np.zeros(num_envs, dtype=np.int64)
        self.steps = np.zeros(num_envs, dtype=np.int64)
        self.returns = np.zeros(num_envs)
        self.needs_reset = np.zeros(num_envs, dtype=bool)
        self.rng = np.random.default_rng(seed)
        self.set_buffers(buf)

    def _draw(self, rows: np.ndarray) -> None:
        self.targets[rows] = self.rng.integers(0, 4, len(rows))
        self.observations[rows] = 0
        for quadrant, (top, left) in enumerate(CORNERS):
            hit = rows[self.targets[rows] == quadrant]
            self.observations[hit, 0, top : top + SQUARE, left : left + SQUARE] = 255

    def reset(self, seed: int | None = None):
        self.rng = np.random.default_rng(self.seed if seed is None else seed)
        self.steps[:] = 0
        self.returns[:] = 0
        self.needs_reset[:] = False
        self._draw(np.arange(self.num_agents))
        self.rewards[:] = 0
        self.terminals[:] = False
        self.truncations[:] = False
        self.masks[:] = True
        return self.observations, []

    def step(self, actions):
        actions = np.asarray(actions).reshape(-1)
        rewards = (actions == self.targets).astype(np.float32)
        resetting = self.needs_reset
        rewards[resetting] = 0
        self.steps[resetting] = 0
        self.returns[resetting] = 0
        self.steps += ~resetting
        self.returns += rewards
        done = (self.steps >= self.episode_length) & ~resetting
        self.needs_reset = done
        self._draw(np.arange(self.num_agents))
        self.rewards[:] = rewards
        self.terminals[:] = done
        self.truncations[:] = False
        rows = np.flatnonzero(done)
        infos = [{"episode_return": r, "episode_length": n, "row": int(i)}
                 for r, n, i in zip(self.returns[rows].tolist(), self.steps[rows].tolist(), rows, strict=True)]
        return self.outputs(infos)
