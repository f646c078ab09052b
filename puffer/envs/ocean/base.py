"""What native batched envs whose rows are separate episodes share: per-row episode counters,
the random generator, and the episode infos of the rows that just finished."""

from __future__ import annotations

import numpy as np

from puffer.emulation import PufferEnv


class BatchedEnv(PufferEnv):
    independent_rows = True

    def init_rows(self, num_rows: int, seed: int) -> None:
        self.num_agents = num_rows
        self.seed = seed
        self.steps = np.zeros(num_rows, dtype=np.int64)
        self.returns = np.zeros(num_rows)
        self.needs_reset = np.zeros(num_rows, dtype=bool)
        self.rng = np.random.default_rng(seed)

    def restart_rows(self, seed: int | None) -> None:
        """reset(): a fresh generator from `seed` (or the env's own), zeroed counters, every row
        live with reward 0 and no done flag (the subclass writes the observations)."""
        self.rng = np.random.default_rng(self.seed if seed is None else seed)
        self.steps[:] = 0
        self.returns[:] = 0
        self.needs_reset[:] = False
        self.rewards[:] = 0
        self.terminals[:] = False
        self.truncations[:] = False
        self.masks[:] = True

    def episode_infos(self, done: np.ndarray) -> list[dict]:
        rows = np.flatnonzero(done)
        return [{"episode_return": r, "episode_length": n, "row": int(i)}
                for r, n, i in zip(self.returns[rows].tolist(), self.steps[rows].tolist(), rows,
                                   strict=True)]
