"""Stochastic: the best policy is a fixed mixture of two actions, and any deterministic one
scores less.

Isolates: a policy that keeps a calibrated distribution (the entropy term, the categorical head,
PPO's clipping) instead of collapsing onto one action. Use it without policy.rnn: with a memory
the policy could count its actions and the mixture would no longer be needed.

Rules, for each row: an episode is `horizon` steps and the observation is always 0, so a
feed-forward policy plays the same distribution every step. The last step pays
1 - |k / horizon - p| / max(p, 1 - p), where k counts the episode's actions 0.

Scores (exact, from the binomial law of k; the defaults p = 0.75, horizon = 16):
- always action 0: 2/3; always action 1: 0 (the deterministic policies);
- uniformly random: 0.6645;
- action 0 with probability p: 0.8874 (the best mixture, q = 0.76, returns 0.8879). The learning
  test asks the stochastic policy for 0.8, more than any deterministic policy can return.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from puffer.emulation import Buffers
from puffer.envs.ocean.base import BatchedEnv


class Stochastic(BatchedEnv):
    def __init__(self, num_rows: int = 1024, p: float = 0.75, horizon: int = 16, seed: int = 0,
                 buf: Buffers | None = None):
        if not 0 < p < 1 or horizon < 1:
            raise ValueError(f"ocean/stochastic: p={p}, horizon={horizon}; expected 0 < p < 1 and horizon >= 1")
        self.name = "ocean/stochastic"
        self.p, self.horizon, self.max_steps = p, horizon, horizon
        self.single_observation_space = spaces.Box(0, 1, (1,), np.float32)
        self.single_action_space = spaces.Discrete(2)
        self.zeros = np.zeros(num_rows, dtype=np.int64)
        self.init_rows(num_rows, seed)
        self.set_buffers(buf)

    def start(self, rows: np.ndarray) -> None:
        self.zeros[rows] = 0

    def advance(self, actions: np.ndarray):
        self.zeros += actions.reshape(-1) == 0
        last = self.steps == self.horizon - 1
        score = 1 - np.abs(self.zeros / self.horizon - self.p) / max(self.p, 1 - self.p)
        return np.where(last, score, 0.0), last

    def observe(self) -> None:
        self.observations[:] = 0


def expected_score(q: float, p: float = 0.75, horizon: int = 16) -> float:
    """The exact expected return of playing action 0 with probability q every step."""
    from math import comb

    return sum(comb(horizon, k) * q**k * (1 - q) ** (horizon - k)
               * (1 - abs(k / horizon - p) / max(p, 1 - p)) for k in range(horizon + 1))
