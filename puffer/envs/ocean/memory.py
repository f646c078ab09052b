"""Memory: answer with a bit shown `delay` steps before the question.

Isolates: the recurrent state (policy.rnn=lstm) and its training over sequences.

Rules, for each row: an episode is `delay + 1` steps. The first observation shows a random bit b
as (2b - 1, 0); the next `delay - 1` observations are (0, 0); the last one is the question
(0, 1). Only the action taken at the question counts: +1 if it equals b, -1 if not, and the
episode ends. Observation Box(-1, 1, (2,)), actions Discrete(2).

Scores: random play returns 0 in expectation (each answer is right with probability 1/2). A
feed-forward policy cannot do better: the question looks the same whatever b was, so it is right
half the time. Solved: 1 (always right); the learning test asks for 0.9.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from puffer.emulation import Buffers
from puffer.envs.ocean.base import BatchedEnv


class Memory(BatchedEnv):
    def __init__(self, num_rows: int = 1024, delay: int = 4, seed: int = 0, buf: Buffers | None = None):
        if delay < 1:
            raise ValueError(f"ocean/memory: delay={delay}; expected 1 or more steps")
        self.name = "ocean/memory"
        self.delay, self.max_steps = delay, delay + 1
        self.single_observation_space = spaces.Box(-1, 1, (2,), np.float32)
        self.single_action_space = spaces.Discrete(2)
        self.bit = np.zeros(num_rows, dtype=np.int64)
        self.init_rows(num_rows, seed)
        self.set_buffers(buf)

    def start(self, rows: np.ndarray) -> None:
        self.bit[rows] = self.rng.integers(0, 2, len(rows))

    def advance(self, actions: np.ndarray):
        asked = self.steps == self.delay
        right = actions.reshape(-1) == self.bit
        return np.where(asked, np.where(right, 1.0, -1.0), 0.0), asked

    def observe(self) -> None:
        self.observations[:, 0] = np.where(self.steps == 0, 2 * self.bit - 1, 0)
        self.observations[:, 1] = self.steps == self.delay
