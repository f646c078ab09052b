"""Spaces: a Dict/Tuple observation and a Dict action of a category and a number, scored so that
only a policy that reads every observation leaf can solve it.

Isolates: emulation end to end for structured spaces (the flat row and its unflattening in the
model), the per-leaf encoders (floats, one-hots) and the hybrid action head (a categorical and a
Gaussian part sampled, scored and trained together).

Rules, for each row: an episode is `horizon` steps, each with a new observation
  {"grid": Box(0, 1, (4, 4)) with one cell lit, "shift": Discrete(4),
   "level": Tuple(Discrete(2) sign, Box(0, 1, (1,)) size)}
and the action {"choice": Discrete(4), "value": Box(-1, 1, (1,))}. A step pays
[choice == (row of the lit cell + shift) mod 4] + 1 - (value - level)^2 with
level = (2 sign - 1) * size, and value clipped to [-1, 1]: the choice needs the grid and the
shift, the value both parts of the level.

Scores: uniformly random actions return horizon * (1/4 + 1/3) in expectation (level is uniform
on [-1, 1], so E(value - level)^2 = 2/3): 7/3 with the default 4 steps. Solved: 2 * horizon (8);
the learning test asks the deterministic policy for 7.5.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from puffer.emulation import Buffers
from puffer.emulation.actions import ActionLayout
from puffer.emulation.spaces import ObsLayout
from puffer.envs.ocean.base import BatchedEnv

SIDE = 4
OBSERVATION = spaces.Dict({
    "grid": spaces.Box(0, 1, (SIDE, SIDE), np.float32),
    "shift": spaces.Discrete(SIDE),
    "level": spaces.Tuple((spaces.Discrete(2), spaces.Box(0, 1, (1,), np.float32))),
})
ACTION = spaces.Dict({"choice": spaces.Discrete(SIDE), "value": spaces.Box(-1, 1, (1,), np.float32)})


class Spaces(BatchedEnv):
    def __init__(self, num_rows: int = 1024, horizon: int = 4, seed: int = 0, buf: Buffers | None = None):
        self.name = "ocean/spaces"
        self.horizon = self.max_steps = horizon
        self.obs_layout, self.action_layout = ObsLayout(OBSERVATION), ActionLayout(ACTION)
        self.single_observation_space = self.obs_layout.flat_space
        self.single_action_space = self.action_layout.flat_space  # [choice, value]
        self.answer = np.zeros(num_rows, dtype=np.int64)
        self.level = np.zeros(num_rows)
        self.init_rows(num_rows, seed)
        self.set_buffers(buf)

    def set_buffers(self, buffers: Buffers | None) -> None:
        super().set_buffers(buffers)
        views = self.obs_layout.leaf_views(self.observations)
        self.leaf = {leaf.path: view for leaf, view in zip(self.obs_layout.leaves, views, strict=True)}

    def start(self, rows: np.ndarray) -> None:
        pass  # every step shows a new observation (observe)

    def advance(self, actions: np.ndarray):
        actions = actions.reshape(-1, 2)
        value = np.clip(actions[:, 1].astype(np.float64), -1, 1)
        rewards = (actions[:, 0] == self.answer) + 1 - np.square(value - self.level)
        return rewards, self.steps == self.horizon - 1

    def observe(self) -> None:
        n, rng = self.num_agents, self.rng
        lit = rng.integers(0, SIDE * SIDE, n)
        shift = rng.integers(0, SIDE, n)
        sign = rng.integers(0, 2, n)
        size = rng.uniform(0, 1, n).astype(np.float32)
        grid = self.leaf[("grid",)]
        grid[:] = 0
        grid.reshape(n, -1)[np.arange(n), lit] = 1
        self.leaf[("shift",)][:] = shift
        self.leaf[("level", 0)][:] = sign
        self.leaf[("level", 1)][:, 0] = size
        self.answer = (lit // SIDE + shift) % SIDE
        self.level = (2 * sign - 1) * size.astype(np.float64)
