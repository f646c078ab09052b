"""Nim: a two-player game of turns, with action masks, against a fixed opponent that plays a
uniformly random legal move.

Isolates: action masks (an `action_mask` observation entry, read by puffer.policies.wrappers.ActionMasked)
and a turn-based game seen from one seat.

Rules, for each row (one game): a pile of stones, uniformly min_pile..max_pile; the players take
turns removing 1, 2 or 3 stones, and whoever takes the last stone wins. Half the games, drawn at
random, the opponent moves first. The learner's action a takes a + 1 stones; its mask allows just
the legal ones (an illegal action loses at once). Each step is the learner's move and then the
opponent's reply; the game ends with +1 for a win and -1 for a loss. Observation
{"action_mask": Box(0, 1, (3,)), "pile": the one-hot of the pile, Box(0, 1, (max_pile + 1,))}.

Scores (exact, by dynamic programming over the piles; `expected_return` computes them): a
learner that plays uniformly among legal moves wins half the games, returning 0. Solved: the
best reply to this opponent (leave a multiple of 4 stones where it can, the winning strategy
of Nim) returns 0.9428 with the default piles 5..15; the learning test asks for 0.85.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from gymnasium import spaces

from puffer.emulation import Buffers
from puffer.emulation.spaces import ObsLayout
from puffer.envs.ocean.base import BatchedEnv

MOST = 3  # stones one move may take


class Nim(BatchedEnv):
    def __init__(self, num_rows: int = 1024, min_pile: int = 5, max_pile: int = 15, seed: int = 0,
                 buf: Buffers | None = None):
        if not 1 <= min_pile <= max_pile:
            raise ValueError(f"ocean/nim: min_pile={min_pile}, max_pile={max_pile}; expected 1 <= min_pile <= max_pile")
        self.name = "ocean/nim"
        self.min_pile, self.max_pile = min_pile, max_pile
        self.max_steps = max_pile + 1  # never reached: every step takes a stone
        self.obs_layout = ObsLayout(spaces.Dict({
            "action_mask": spaces.Box(0, 1, (MOST,), np.float32),
            "pile": spaces.Box(0, 1, (max_pile + 1,), np.float32)}))
        self.single_observation_space = self.obs_layout.flat_space
        self.single_action_space = spaces.Discrete(MOST)
        self.pile = np.zeros(num_rows, dtype=np.int64)
        self.init_rows(num_rows, seed)
        self.set_buffers(buf)

    def _opponent_moves(self, rows: np.ndarray) -> None:
        """The opponent takes a uniformly random legal number of stones from these piles."""
        legal = np.minimum(self.pile[rows], MOST)
        self.pile[rows] -= 1 + (self.rng.random(len(rows)) * legal).astype(np.int64)

    def start(self, rows: np.ndarray) -> None:
        self.pile[rows] = self.rng.integers(self.min_pile, self.max_pile + 1, len(rows))
        self._opponent_moves(rows[self.rng.random(len(rows)) < 0.5])

    def advance(self, actions: np.ndarray):
        take = actions.reshape(-1).astype(np.int64) + 1
        illegal = take > self.pile
        self.pile = np.where(illegal, self.pile, self.pile - take)
        won = ~illegal & (self.pile == 0)
        replying = np.flatnonzero(~illegal & ~won)
        self._opponent_moves(replying)
        lost = illegal | (self.pile == 0) & ~won
        return np.where(won, 1.0, np.where(lost, -1.0, 0.0)), won | lost

    def observe(self) -> None:
        mask, pile = self.obs_layout.leaf_views(self.observations)
        mask[:] = np.arange(1, MOST + 1) <= self.pile[:, None]
        pile[:] = 0
        pile[np.arange(self.num_agents), self.pile] = 1


def expected_return(best: bool, min_pile: int = 5, max_pile: int = 15) -> float:
    """The exact expected return against the random opponent of the best policy (`best`), or of
    one that plays uniformly among legal moves."""

    @lru_cache(None)
    def learner(n: int) -> float:  # the learner to move at pile n: its probability to win
        wins = [1.0 if a == n else opponent(n - a) for a in range(1, min(MOST, n) + 1)]
        return max(wins) if best else sum(wins) / len(wins)

    @lru_cache(None)
    def opponent(n: int) -> float:
        wins = [0.0 if b == n else learner(n - b) for b in range(1, min(MOST, n) + 1)]
        return sum(wins) / len(wins)

    piles = range(min_pile, max_pile + 1)
    win = sum(learner(n) + opponent(n) for n in piles) / (2 * len(piles))
    return 2 * win - 1
