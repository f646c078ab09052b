"""Emulation: wrap Gymnasium and PettingZoo envs into puffer's flat, fixed-shape env protocol.

What lives here: the protocol every puffer env follows (`PufferEnv`, `Buffers`), and the wrappers
`GymnasiumPufferEnv`, `PettingZooPufferEnv` (parallel) and `TurnBasedPufferEnv` (AEC). What does not: the layout math of spaces
(puffer.emulation.spaces), batching many envs (puffer.vector), native batched envs (puffer.envs.ocean).

The protocol, shared by every backend and env:
- `num_agents` rows per env; `single_observation_space` / `single_action_space` are flat.
- The env writes observations, rewards, terminals, truncations and masks in place into `Buffers`
  that the vector backend hands it (shared memory in Multiprocessing), so no copy is made per step.
- `step(actions)` takes one flat action per row, shape (num_agents, *action_shape).
- Autoreset is "next step": the step after an episode ends ignores its action and returns the reset
  observation with reward 0 and no done flags. So the observation returned *with* a done flag is
  the true final observation, and the trainer bootstraps truncations from it for free; it masks the
  reset transition out of the loss and GAE (a row is valid when `mask` is set and the previous step
  of that row was not done).
- Masks: False for rows with no live agent (multi-agent), which get zero obs and reward 0.
- Infos: a sequence of dicts (often an empty tuple), one per finished episode, with
  `episode_return` and `episode_length`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import gymnasium
import numpy as np

from puffer.emulation.actions import ActionLayout
from puffer.emulation.padding import AgentPadding
from puffer.emulation.spaces import SEQUENCE_LENGTH, ObsLayout, SpaceError

__all__ = [
    "Buffers", "PufferEnv", "GymnasiumPufferEnv", "PettingZooPufferEnv", "TurnBasedPufferEnv", "SpaceError",
    "nativize",
]


@dataclass
class Buffers:
    """The per-row arrays an env writes into; one row per agent slot."""

    observations: np.ndarray
    rewards: np.ndarray
    terminals: np.ndarray
    truncations: np.ndarray
    masks: np.ndarray

    @staticmethod
    def specs(observation_space: gymnasium.spaces.Box, rows: int) -> dict[str, tuple[tuple, np.dtype]]:
        return {
            "observations": ((rows, *observation_space.shape), np.dtype(observation_space.dtype)),
            "rewards": ((rows,), np.dtype(np.float32)),
            "terminals": ((rows,), np.dtype(bool)),
            "truncations": ((rows,), np.dtype(bool)),
            "masks": ((rows,), np.dtype(bool)),
        }

    @classmethod
    def allocate(cls, observation_space: gymnasium.spaces.Box, rows: int) -> Buffers:
        return cls(**{k: np.zeros(s, d) for k, (s, d) in cls.specs(observation_space, rows).items()})

    def rows(self, start: int, stop: int) -> Buffers:
        """Views of rows [start, stop): what one env (or one worker) writes into."""
        return Buffers(**{f.name: getattr(self, f.name)[start:stop] for f in fields(self)})


class PufferEnv:
    """Base of every puffer env (wrapped or native). Subclasses set the spaces and `num_agents`,
    call `set_buffers`, and implement `reset` and `step` writing into the buffers."""

    single_observation_space: gymnasium.spaces.Space
    single_action_space: gymnasium.spaces.Space
    num_agents: int = 1
    name: str = "env"
    # True for native batched envs whose rows are separate episodes (each info names its `row`);
    # False when the rows are agents of one shared episode.
    independent_rows: bool = False
    # Added to the seed its vector env gives it on reset (env i of a vector env seeded s gets
    # s + i + seed_shift): members of one batch (puffer.training.batched) seed their envs as
    # their solo runs would, within one vector env.
    seed_shift: int = 0

    def set_buffers(self, buffers: Buffers | None) -> None:
        if buffers is None:
            buffers = Buffers.allocate(self.single_observation_space, self.num_agents)
        expected = Buffers.specs(self.single_observation_space, self.num_agents)
        for key, (shape, dtype) in expected.items():
            got = getattr(buffers, key)
            if got.shape != shape or got.dtype != dtype:
                raise ValueError(
                    f"{self.name}: buffer {key} must have shape {shape} and dtype {dtype}, "
                    f"got {got.shape} {got.dtype}"
                )
        self.buffers = buffers
        self.observations = buffers.observations
        self.rewards = buffers.rewards
        self.terminals = buffers.terminals
        self.truncations = buffers.truncations
        self.masks = buffers.masks

    def outputs(self, infos) -> tuple:
        return self.observations, self.rewards, self.terminals, self.truncations, infos

    def __setstate__(self, state: dict) -> None:
        # Pickle turns views into arrays of their own: without this an unpickled env would write
        # its observations into copies and return stale buffers.
        self.__dict__.update(state)
        if "buffers" in state:
            self.set_buffers(self.buffers)

    def reset(self, seed: int | None = None) -> tuple[np.ndarray, list[dict]]:
        raise NotImplementedError

    def step(self, actions: np.ndarray) -> tuple:
        raise NotImplementedError

    def close(self) -> None:
        pass


def _build(env: Any, env_creator, env_args, env_kwargs, kind: str) -> Any:
    if (env is None) == (env_creator is None):
        raise ValueError(f"{kind}: pass exactly one of env= or env_creator=")
    return env if env is not None else env_creator(*(env_args or ()), **(env_kwargs or {}))


def _env_name(env: Any) -> str:
    spec = getattr(env, "spec", None)
    if spec is not None and getattr(spec, "id", None):
        return spec.id
    metadata = getattr(env, "metadata", None) or {}
    return metadata.get("name") or type(getattr(env, "unwrapped", env)).__name__


class GymnasiumPufferEnv(PufferEnv):
    """One Gymnasium env as a single-agent puffer env (one row)."""

    def __init__(self, env: gymnasium.Env | None = None, env_creator=None, env_args=(),
                 env_kwargs=None, buf: Buffers | None = None, seed: int = 0,
                 validate_steps: int = 1000, max_sequence_length: int = SEQUENCE_LENGTH):
        self.env = _build(env, env_creator, env_args, env_kwargs, "GymnasiumPufferEnv")
        self.name = _env_name(self.env)
        self.obs_layout = ObsLayout(self.env.observation_space, max_sequence_length=max_sequence_length)
        self.action_layout = ActionLayout(self.env.action_space)
        self.single_observation_space = self.obs_layout.flat_space
        self.single_action_space = self.action_layout.flat_space
        self.num_agents = 1
        self.validate_steps = validate_steps
        self.seed = seed
        self._decode = self.action_layout.fast_decoder()
        # Envs that count their own episodes (Atari's GameStats: whole games, while the learner
        # sees one episode per life) are trusted; their done steps without stats report nothing.
        self._reports_episodes = _wrapper_attr(self.env, "reports_episodes", False)
        self._checked = 0
        self._needs_reset = True
        self._started = False
        self.set_buffers(buf)

    def set_buffers(self, buffers: Buffers | None) -> None:
        super().set_buffers(buffers)
        self._obs_views = self.obs_layout.leaf_views(self.observations[0, ...])
        self._write = self.obs_layout.writer()
        self._running = self.outputs(())  # a step inside an episode: no infos (immutable)

    def _write_obs(self, obs: Any) -> None:
        if self._checked < self.validate_steps:
            self._checked += 1
            self.obs_layout.check(obs, self.name)
        self._write(self._obs_views, obs)

    def reset(self, seed: int | None = None):
        self._start_episode(self.seed if seed is None else seed)
        return self.observations, []

    def _start_episode(self, seed: int | None) -> None:
        obs, _ = self.env.reset(seed=seed)
        self._write_obs(obs)
        self.rewards[0] = 0.0
        self.terminals[0] = False
        self.truncations[0] = False
        self.masks[0] = True
        self._needs_reset, self._started = False, True
        self._return, self._length = 0.0, 0

    def step(self, actions):
        if self._needs_reset:
            if not self._started:
                raise RuntimeError(f"{self.name}: call reset() before step()")
            self._start_episode(None)
            return self.outputs([])
        if self._checked < self.validate_steps:
            actions = np.asarray(actions).reshape(self.single_action_space.shape)
            action = self.action_layout.decode(actions, self.name, check=True)
        else:
            action = self._decode(actions)
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._write_obs(obs)
        self.rewards[0] = reward
        self._return += reward
        self._length += 1
        if not (terminated or truncated):  # the done flags are already False: skip two writes
            return self._running
        self.terminals[0] = terminated
        self.truncations[0] = truncated
        self._needs_reset = True
        if self._reports_episodes:
            return self.outputs([_episode_info(info["episode_return"], info["episode_length"], info)]
                                if "episode_return" in info else ())
        raw = _wrapper_attr(self.env, "raw_return", None)
        if raw is None:
            return self.outputs([_episode_info(self._return, self._length, info)])
        # the user's reward wrappers (NormalizeReward, ...) sit above RawReturn: the return in the
        # env's own units, and the one the learner saw beside it
        return self.outputs([{**_episode_info(raw, self._length, info), "episode_return_wrapped": float(self._return)}])

    def render(self):
        return self.env.render()

    def close(self) -> None:
        self.env.close()


class RawReturn(gymnasium.Wrapper):
    """Sums the env's own rewards since its last reset (`raw_return`), under the user's wrappers
    (puffer.envs.make_gymnasium puts it there): the episode return is then reported in the env's
    units, whatever reward scaling, clipping or normalising the wrappers above it do. Read at the
    end of the episode the learner sees (a wrapper above may end it early: TimeLimit)."""

    def reset(self, **kwargs):
        self.raw_return = 0.0
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.raw_return += float(reward)
        return obs, reward, terminated, truncated, info


def _wrapper_attr(env, name: str, default):
    try:
        return env.get_wrapper_attr(name)
    except AttributeError:
        return default


def _episode_info(episode_return: float, length: int, info: dict | None = None) -> dict:
    """Episode statistics plus the env's own scalar numeric infos at the end of an episode."""
    out = {}
    for key, value in (info or {}).items():
        if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
            out[str(key)] = float(value)
    out["episode_return"] = float(episode_return)
    out["episode_length"] = int(length)
    return out


class _AgentRows(PufferEnv):
    """What both PettingZoo wrappers share: one row per possible agent, all agents of one
    observation and one action space (padded to one, with the agent's index, where their spaces
    differ: puffer.emulation.padding), episode bookkeeping and the "next step" autoreset.
    Subclasses reset their env in `_reset_env` and step it in `step`."""

    def __init__(self, env, buf: Buffers | None, seed: int, validate_steps: int, max_sequence_length: int):
        self.env = env
        self.name = _env_name(env)
        self.possible_agents = list(env.possible_agents)
        self.agent_ids = self.possible_agents
        observation_spaces = {agent: env.observation_space(agent) for agent in self.possible_agents}
        action_spaces = {agent: env.action_space(agent) for agent in self.possible_agents}
        first = self.possible_agents[0]
        observation_space, action_space = observation_spaces[first], action_spaces[first]
        # Agents whose spaces differ share one padded layout with their index in it (puffer.emulation.padding)
        self.padding = None
        if any(observation_spaces[agent] != observation_space or action_spaces[agent] != action_space
               for agent in self.possible_agents):
            self.padding = AgentPadding(self.name, self.possible_agents, observation_spaces, action_spaces)
            observation_space, action_space = self.padding.observation_space, self.padding.action_space
        self.obs_layout = ObsLayout(observation_space, max_sequence_length=max_sequence_length)
        self.action_layout = ActionLayout(action_space)
        self.single_observation_space = self.obs_layout.flat_space
        self.single_action_space = self.action_layout.flat_space
        self.num_agents = len(self.possible_agents)
        self.validate_steps, self.seed = validate_steps, seed
        self._checked, self._needs_reset, self._started = 0, True, False
        self.set_buffers(buf)

    def set_buffers(self, buffers: Buffers | None) -> None:
        super().set_buffers(buffers)
        self._obs_views = [self.obs_layout.leaf_views(self.observations[row, ...])
                           for row in range(self.num_agents)]

    def __setstate__(self, state: dict) -> None:
        returns = state.get("_returns")
        if isinstance(returns, dict):  # pickled before the returns were an array by row
            state["_returns"] = np.array([returns[agent] for agent in state["possible_agents"]], np.float64)
        super().__setstate__(state)

    def _write_obs(self, row: int, agent: str, obs, check: bool) -> None:
        """`agent`'s observation into its row (in the padded layout when the agents' spaces differ)."""
        if self.padding is not None:
            obs = self.padding.observation(agent, obs, check)
        if check:
            self.obs_layout.check(obs, f"{self.name} agent {agent!r}")
        self.obs_layout.write(self._obs_views[row], obs)

    def _native_action(self, row: int, agent: str, actions: np.ndarray, check: bool):
        action = self.action_layout.decode(actions[row], f"{self.name} agent {agent!r}", check)
        return action if self.padding is None else self.padding.action(agent, action)

    def _reset_env(self, seed: int | None) -> None:
        raise NotImplementedError

    def _start_episode(self, seed: int | None) -> None:
        self._reset_env(seed)
        self.rewards[...] = 0
        self.terminals[...] = False
        self.truncations[...] = False
        self._returns = np.zeros(self.num_agents)
        self._length = 0
        self._needs_reset, self._started = False, True

    def reset(self, seed: int | None = None):
        self._start_episode(self.seed if seed is None else seed)
        return self.observations, []

    def _autoreset(self) -> bool:
        """The step after an episode's end: the reset observation, the action ignored."""
        if not self._started:
            raise RuntimeError(f"{self.name}: call reset() before step()")
        if self._needs_reset:
            self._start_episode(None)
            return True
        return False

    def _end_episode(self) -> tuple:
        self._needs_reset = True
        info = _episode_info(float(np.mean(self._returns)), self._length)
        info.update({f"episode_return/{a}": float(r) for a, r in zip(self.possible_agents, self._returns, strict=True)})
        return self.outputs([info])

    def render(self):
        return self.env.render()

    def close(self) -> None:
        self.env.close()


class PettingZooPufferEnv(_AgentRows):
    """A PettingZoo parallel env (or an AEC env that aec_to_parallel accepts) as a puffer env
    with one row per possible agent. Agents that are not alive get zero observations, reward 0
    and mask False; their actions are dropped."""

    def __init__(self, env=None, env_creator=None, env_args=(), env_kwargs=None,
                 buf: Buffers | None = None, seed: int = 0, validate_steps: int = 1000,
                 max_sequence_length: int = SEQUENCE_LENGTH):
        env = _build(env, env_creator, env_args, env_kwargs, "PettingZooPufferEnv")
        from pettingzoo.utils.env import AECEnv

        if isinstance(env, AECEnv):
            from pettingzoo.utils.conversions import aec_to_parallel

            env = aec_to_parallel(env)
        super().__init__(env, buf, seed, validate_steps, max_sequence_length)

    def _write_rows(self, observations: dict) -> None:
        self.observations[...] = 0
        self.masks[...] = False
        for row, agent in enumerate(self.possible_agents):
            if agent not in observations:
                continue
            self._write_obs(row, agent, observations[agent], self._checked < self.validate_steps)
            self.masks[row] = True
        self._checked += 1

    def _reset_env(self, seed: int | None) -> None:
        observations, _ = self.env.reset(seed=seed)
        self._write_rows(observations)

    def step(self, actions):
        if self._autoreset():
            return self.outputs([])
        actions = np.asarray(actions).reshape((self.num_agents, *self.single_action_space.shape))
        check = self._checked < self.validate_steps
        native = {agent: self._native_action(row, agent, actions, check)
                  for row, agent in enumerate(self.possible_agents) if agent in self.env.agents}
        observations, rewards, terminations, truncations, _ = self.env.step(native)
        self._write_rows(observations)
        for row, agent in enumerate(self.possible_agents):
            self.rewards[row] = rewards.get(agent, 0.0)
            self.terminals[row] = terminations.get(agent, False)
            self.truncations[row] = truncations.get(agent, False)
            self._returns[row] += float(rewards.get(agent, 0.0))
        self._length += 1
        if self.env.agents:
            return self.outputs([])
        return self._end_episode()


class TurnBasedPufferEnv(_AgentRows):
    """A turn-based PettingZoo (AEC) env, such as the classic board games, with one row per
    possible agent. Every row holds its agent's own observation each step (so its value can be
    estimated), but only the row whose turn it is has mask True: it alone acts, and the other
    rows' actions are dropped. Each step's rewards go to every agent's row, so an agent is
    credited with what its opponents' moves did to it. `turn_based` tells the trainer to
    compute advantages over each agent's own turns (puffer.training.ppo), carrying the rewards between
    two of its moves to the first. An `action_mask` in the observation masks the policy's logits
    (puffer.policies.wrappers.ActionMasked)."""

    turn_based = True

    def __init__(self, env=None, env_creator=None, env_args=(), env_kwargs=None,
                 buf: Buffers | None = None, seed: int = 0, validate_steps: int = 1000,
                 max_sequence_length: int = SEQUENCE_LENGTH):
        env = _build(env, env_creator, env_args, env_kwargs, "TurnBasedPufferEnv")
        super().__init__(env, buf, seed, validate_steps, max_sequence_length)

    def _write_rows(self) -> None:
        """Every agent's observation; mask True on the row whose turn it is."""
        check = self._checked < self.validate_steps
        for row, agent in enumerate(self.possible_agents):
            self._write_obs(row, agent, self.env.observe(agent), check)
        self.masks[...] = False
        if self.env.agents:
            self.masks[self.possible_agents.index(self.env.agent_selection)] = True
        self._checked += 1

    def _skip_finished(self) -> np.ndarray:
        """Step agents whose game is over (PettingZoo's None actions) until a live agent is to
        move or none is left; the rewards that arrive meanwhile, per row."""
        extra = np.zeros(self.num_agents, np.float32)
        env = self.env
        while env.agents and (env.terminations[env.agent_selection] or env.truncations[env.agent_selection]):
            env.step(None)
            extra += [env.rewards.get(agent, 0.0) for agent in self.possible_agents]
        return extra

    def _reset_env(self, seed: int | None) -> None:
        self.env.reset(seed=seed)
        self._write_rows()

    def step(self, actions):
        if self._autoreset():
            return self.outputs([])
        env = self.env
        actions = np.asarray(actions).reshape((self.num_agents, *self.single_action_space.shape))
        agent = env.agent_selection
        row = self.possible_agents.index(agent)
        env.step(self._native_action(row, agent, actions, self._checked < self.validate_steps))
        self.rewards[...] = [env.rewards.get(a, 0.0) for a in self.possible_agents]
        over = not env.agents or all(env.terminations.get(a, False) or env.truncations.get(a, False)
                                     for a in env.agents)
        if not over:  # an agent out of a game that goes on: PettingZoo wants its None step
            self.rewards[...] += self._skip_finished()
            over = not env.agents
        self._write_rows()
        self._returns += self.rewards
        self._length += 1
        self.terminals[...] = over and any(env.terminations.values())
        self.truncations[...] = over and not self.terminals[0]
        if not over:
            return self.outputs([])
        self.masks[...] = False
        return self._end_episode()


def nativize(flat, observation_space: gymnasium.spaces.Space):
    """Flat observations (numpy or torch, any leading batch dims) -> the native Dict/Tuple nest.

    `observation_space` is the emulated flat space (it remembers its native space) or the native
    space itself. Leaves are views, not copies, where memory allows."""
    return ObsLayout(getattr(observation_space, "native", observation_space)).unflatten(flat)

