"""What native batched envs whose rows are separate episodes share: per-row episode counters,
the random generator, the episode infos of the rows that just finished, and the step itself.

An env built on `BatchedEnv` writes three methods and gets `reset` and `step` (with puffer's
"next step" autoreset, puffer.emulation) from here:
- `start(rows)`: draw a new episode's state for those rows (indices); it must set all of a
  row's state, since a finished row is stepped once more before it starts again;
- `advance(actions)`: move every row one step; returns (rewards, terminated), float64 and bool
  arrays of one entry per row (`self.steps` still counts the steps before this one);
- `observe()`: write every row's observation into `self.observations`.
An episode is truncated after `max_steps` steps unless it terminated on that step. Rows whose
mask `start` sets False (no agent there this episode, in multi-agent envs) get no reward, no done
flag and no episode info; they restart with the rest when the episode ends.
"""

from __future__ import annotations

import numpy as np

from puffer.emulation import PufferEnv


class BatchedEnv(PufferEnv):
    independent_rows = True
    max_steps: int

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

    # -- the step template -----------------------------------------------------------------
    def start(self, rows: np.ndarray) -> None:
        raise NotImplementedError

    def advance(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def observe(self) -> None:
        raise NotImplementedError

    def reset(self, seed: int | None = None):
        self.restart_rows(seed)
        self.start(np.arange(self.num_agents))
        self.observe()
        return self.observations, []

    def step(self, actions):
        rewards, terminated = self.advance(np.asarray(actions))
        self.steps += 1
        truncated = (self.steps >= self.max_steps) & ~terminated
        resetting = self.needs_reset  # these ignore their action and start a new episode
        if resetting.any():
            rows = np.flatnonzero(resetting)
            self.start(rows)
            self.steps[rows] = 0
            self.returns[rows] = 0
            terminated[rows] = truncated[rows] = False
            rewards[rows] = 0
        done = terminated | truncated
        self.needs_reset = done
        if not self.masks.all():
            rewards *= self.masks
            terminated &= self.masks
            truncated &= self.masks
            done = done & self.masks
        self.returns += rewards
        self.observe()
        self.rewards[:] = rewards
        self.terminals[:] = terminated
        self.truncations[:] = truncated
        if not done.any():
            return self.outputs(())
        return self.outputs(self.episode_infos(done))
