"""Multiagent: agents of one game are paid for choosing differently from each other.

Isolates: multi-agent rows (one per agent slot), masks for the slots with no agent, and a policy
shared by every agent that tells them apart by the agent's index in its observation.

Rules: `num_games` games of `num_agents` slots each, one row per slot. Each episode a game draws
how many agents play, uniformly from min_agents..num_agents, in its first slots; the other rows
are masked (zero observation, no reward, no done flag). An episode is `horizon` steps. Every step
each agent picks one of `num_agents` actions and earns 1 if no other agent of its game picked
the same. Observation: the one-hot of the agent's index, Box(0, 1, (num_agents,)).

Scores, per agent-episode: with n agents, a uniformly random agent is alone on its action with
probability ((A - 1) / A) ** (n - 1) for A = num_agents, so random play returns
horizon * sum_n n ((A - 1) / A) ** (n - 1) / sum_n n, over n = min_agents..A: 13/3 with the
defaults (A = 4, n = 2..4, 8 steps). Solved: horizon (every agent on an action of its own, e.g.
its index); the learning test asks for 7.5.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from puffer.emulation import Buffers
from puffer.envs.ocean.base import BatchedEnv


class Multiagent(BatchedEnv):
    def __init__(self, num_games: int = 256, num_agents: int = 4, min_agents: int = 2, horizon: int = 8,
                 seed: int = 0, buf: Buffers | None = None):
        if not 1 <= min_agents <= num_agents:
            raise ValueError(f"ocean/multiagent: min_agents={min_agents}, num_agents={num_agents}; "
                             "expected 1 <= min_agents <= num_agents")
        self.name = "ocean/multiagent"
        self.num_games, self.agents_per_game, self.min_agents = num_games, num_agents, min_agents
        self.horizon = self.max_steps = horizon
        self.single_observation_space = spaces.Box(0, 1, (num_agents,), np.float32)
        self.single_action_space = spaces.Discrete(num_agents)
        self.slot = np.tile(np.arange(num_agents), num_games)  # each row's index in its game
        self.init_rows(num_games * num_agents, seed)
        self.set_buffers(buf)

    def start(self, rows: np.ndarray) -> None:
        games = np.unique(rows // self.agents_per_game)  # a game's rows always restart together
        playing = self.rng.integers(self.min_agents, self.agents_per_game + 1, len(games))
        slots = self.masks.reshape(self.num_games, self.agents_per_game)
        slots[games] = np.arange(self.agents_per_game) < playing[:, None]

    def advance(self, actions: np.ndarray):
        a = self.agents_per_game
        chosen = actions.reshape(self.num_games, a)
        live = self.masks.reshape(self.num_games, a)
        picks = (chosen[:, :, None] == np.arange(a)) & live[:, :, None]  # game, agent, action
        counts = picks.sum(axis=1)  # how many live agents of the game took each action
        alone = np.take_along_axis(counts, chosen, axis=1) == 1
        return (alone & live).astype(np.float64).reshape(-1), self.steps == self.horizon - 1

    def observe(self) -> None:
        self.observations[:] = 0
        self.observations[np.arange(self.num_agents), self.slot] = self.masks
