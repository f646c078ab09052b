"""Agents with different spaces as rows of one shared space (PettingZoo's MPE simple_adversary:
adversaries see 8 numbers, good agents 10).

What lives here: `AgentPadding`, which gives every agent's row the same layout: a Dict of the
agent's index (`agent`, so that one shared policy knows whose row it acts for), its observation
flattened as gymnasium flattens it (one-hot for discrete leaves) and zero-padded to the longest
(`obs`), and, where the agents have Discrete action spaces of different sizes, an
`action_mask` that masks the actions an agent does not have (the policy's logits, as any action
mask: puffer.policies.wrappers.ActionMasked). Box actions of different sizes are padded, and each agent
gets its own leading entries. What does not: the rows themselves (puffer.emulation).
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from puffer.emulation.spaces import SpaceError


class AgentPadding:
    def __init__(self, name: str, agents: list[str], observation_spaces: dict, action_spaces: dict):
        self.agents = list(agents)
        self.observation_spaces, self.action_spaces = observation_spaces, action_spaces
        sizes = {}
        for agent, space in observation_spaces.items():
            try:
                sizes[agent] = spaces.flatdim(space)
            except (ValueError, NotImplementedError) as exc:
                raise SpaceError(f"{name}: agent {agent!r} has observation space {space}, which cannot be "
                                 f"flattened to pad it to the other agents' ({exc}); agents with different "
                                 "spaces need spaces of fixed size") from None
        self.obs_size = max(sizes.values())
        leaves = {"agent": spaces.Discrete(len(self.agents)),
                  "obs": spaces.Box(-np.inf, np.inf, (self.obs_size,), np.float32)}
        self.action_space, self.action_counts = self._common_action_space(name)
        if self.action_counts is not None:
            leaves["action_mask"] = spaces.Box(0, 1, (self.action_space.n,), np.int8)
        self.observation_space = spaces.Dict(leaves)

    def _common_action_space(self, name: str):
        """The shared action space, and each agent's Discrete count (None: no mask needed)."""
        kinds = list(self.action_spaces.values())
        if all(isinstance(s, spaces.Discrete) for s in kinds):
            counts = {agent: int(s.n) for agent, s in self.action_spaces.items()}
            same = len(set(counts.values())) == 1
            return spaces.Discrete(max(counts.values())), None if same else counts
        if all(isinstance(s, spaces.Box) and len(s.shape) == 1 for s in kinds):
            size = max(s.shape[0] for s in kinds)
            low, high = np.full(size, np.inf, np.float32), np.full(size, -np.inf, np.float32)
            for s in kinds:  # the union of the agents' bounds; entries no agent has: [-1, 1]
                low[: s.shape[0]] = np.minimum(low[: s.shape[0]], s.low)
                high[: s.shape[0]] = np.maximum(high[: s.shape[0]], s.high)
            low[np.isinf(low) & (low > 0)], high[np.isinf(high) & (high < 0)] = -1.0, 1.0
            return spaces.Box(low, high, (size,), np.float32), None
        described = ", ".join(f"{agent}: {space}" for agent, space in self.action_spaces.items())
        raise SpaceError(f"{name}: the agents' action spaces differ ({described}); puffer pads them to one "
                         "row only when all are Discrete or all are one-dimensional Box spaces")

    @classmethod
    def from_agent_spaces(cls, name: str, agent_spaces: dict) -> AgentPadding:
        """The padding of agents given as {agent: (observation space, action space)}."""
        return cls(name, list(agent_spaces), {a: obs for a, (obs, _) in agent_spaces.items()},
                   {a: act for a, (_, act) in agent_spaces.items()})

    @property
    def agent_spaces(self) -> dict:
        """{agent: (its own observation space, its own action space)}, in the env's agent order."""
        return {agent: (self.observation_spaces[agent], self.action_spaces[agent]) for agent in self.agents}

    def observation(self, agent: str, obs, check: bool = False) -> dict:
        """`agent`'s native observation in the shared layout."""
        space = self.observation_spaces[agent]
        if check and not space.contains(obs):
            raise SpaceError(f"agent {agent!r}: observation {obs!r} is not in its space {space}")
        flat = np.zeros(self.obs_size, np.float32)
        values = spaces.flatten(space, obs)
        flat[: len(values)] = values
        common = {"agent": self.agents.index(agent), "obs": flat}
        if self.action_counts is not None:
            mask = np.zeros(self.action_space.n, np.int8)
            mask[: self.action_counts[agent]] = 1
            common["action_mask"] = mask
        return common

    def action(self, agent: str, action):
        """The shared action back in `agent`'s own space."""
        space = self.action_spaces[agent]
        if isinstance(space, spaces.Discrete):
            if not 0 <= int(action) < space.n:
                raise SpaceError(f"agent {agent!r}: action {int(action)} is outside its {space} (masked in "
                                 "its row's action_mask: a policy never samples it)")
            return int(space.start) + int(action)
        return np.asarray(action, dtype=space.dtype)[: space.shape[0]]
