"""Bandit: a contextual bandit whose reward comes `delay` steps after the choice that earns it.

Isolates: credit assignment over time (gamma, gae_lambda, the value function's bootstrap).

Rules, for each row: an episode is `delay + 1` steps. The first observation shows a random cue c
of `arms` as a one-hot; the first action is the choice. The actions after it change nothing.
The last step pays 1 if the choice was c, else 0, and ends the episode. Observation: the cue's
one-hot (zeros after the first step) and the fraction of the episode gone, Box(0, 1, (arms + 1,));
actions Discrete(arms).

Scores: random play returns 1 / arms in expectation (0.25 with the default 4 arms). Solved: 1
(the cue's arm every time); the learning test asks for 0.95.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from puffer.emulation import Buffers
from puffer.envs.ocean.base import BatchedEnv


class Bandit(BatchedEnv):
    def __init__(self, num_rows: int = 1024, arms: int = 4, delay: int = 8, seed: int = 0,
                 buf: Buffers | None = None):
        if arms < 2 or delay < 0:
            raise ValueError(f"ocean/bandit: arms={arms}, delay={delay}; expected arms >= 2 and delay >= 0")
        self.name = "ocean/bandit"
        self.arms, self.delay, self.max_steps = arms, delay, delay + 1
        self.single_observation_space = spaces.Box(0, 1, (arms + 1,), np.float32)
        self.single_action_space = spaces.Discrete(arms)
        self.cue = np.zeros(num_rows, dtype=np.int64)
        self.choice = np.zeros(num_rows, dtype=np.int64)
        self.init_rows(num_rows, seed)
        self.set_buffers(buf)

    def start(self, rows: np.ndarray) -> None:
        self.cue[rows] = self.rng.integers(0, self.arms, len(rows))

    def advance(self, actions: np.ndarray):
        first = self.steps == 0
        self.choice = np.where(first, actions.reshape(-1), self.choice)
        paid = self.steps == self.delay
        return np.where(paid & (self.choice == self.cue), 1.0, 0.0), paid

    def observe(self) -> None:
        self.observations[:] = 0
        first = np.flatnonzero(self.steps == 0)
        self.observations[first, self.cue[first]] = 1
        self.observations[:, self.arms] = self.steps / self.max_steps
