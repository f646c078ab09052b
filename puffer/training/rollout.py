"""Collecting experience: the rollout storage and the one collector that fills it from a vector env.

What lives here: `Rollout` (the (num_steps, rows) tensors an on-policy update learns from),
`Collector` (acts in the vector env with the policy, asynchronously where the backend is, and
stores each row's steps). How a policy acts, and where a recurrent state restarts, is
puffer.policies.acting's, shared with evaluation and the Agent. What does not: advantages and the loss (an
algorithm such as puffer.training.ppo), evaluation's episode bookkeeping.

Rows and validity. The vector env gives one row per agent slot. Envs autoreset on the step after
an episode ends (see puffer.emulation): that step's action is ignored and it returns the reset
observation. So row t is *valid* when its agent is alive (mask) and the row's previous step was not
the end of an episode; invalid rows are left out of GAE and of the loss. The observation returned
with a done flag is the true final one: on truncation its value is the bootstrap, for free.
"""

from __future__ import annotations

import contextlib
import logging
from collections import defaultdict

import numpy as np
import torch
from torch import nn

from puffer.monitor.profiler import Profiler
from puffer.policies.acting import Acting, episode_starts, restart
from puffer.policies.distributions import GLOBAL_NOISE, Noise
from puffer.policies.protocol import is_recurrent
from puffer.training.reward_scaler import RewardScaler
from puffer.vector.base import EnvError, Received, rows_of

log = logging.getLogger(__name__)


def float32_params(params):
    """Distribution parameters (a tensor or a tuple of them) in float32."""
    if isinstance(params, tuple):
        return tuple(p.float() for p in params)
    return params.float()


class Rollout:
    """num_steps steps of every row: what the policy saw and did, what came back, and which
    steps count (`valid`). Recurrent policies also keep where episodes start and the state at t=0."""

    def __init__(self, num_steps: int, num_rows: int, observation_space, action_shape: tuple,
                 action_dtype, device: torch.device, policy: nn.Module):
        T, N = num_steps, num_rows
        obs_dtype = torch.from_numpy(np.empty(0, observation_space.dtype)).dtype
        act_dtype = torch.from_numpy(np.empty(0, action_dtype)).dtype
        on = {"device": device}
        self.num_steps, self.num_rows = T, N
        self.obs = torch.zeros((T, N, *observation_space.shape), dtype=obs_dtype, **on)
        self.actions = torch.zeros((T, N, *action_shape), dtype=act_dtype, **on)
        self.logprobs = torch.zeros((T, N), **on)
        self.values = torch.zeros((T, N), **on)
        self.rewards = torch.zeros((T, N), **on)
        self.terminals = torch.zeros((T, N), **on)
        self.dones = torch.zeros((T, N), **on)
        self.valid = torch.zeros((T, N), dtype=torch.bool, **on)
        self.next_value = torch.zeros(N, **on)  # the value of each row's observation after step T
        # whether that observation is a valid step (its agent alive, to move, not a reset step)
        self.next_valid = torch.ones(N, dtype=torch.bool, **on)
        if is_recurrent(policy):  # the state at t=0, and where episodes start
            self.state0 = policy.initial_state(N, device)
            self.starts = torch.zeros((T, N), dtype=torch.bool, **on)


class Collector:
    """Fills a `Rollout` from `vecenv` with `policy` (through `forward`, e.g. a compiled one).

    Rows arrive in groups from `vecenv.recv()`: all of them at once (Serial, or a synchronous
    Multiprocessing), or the first ready workers' (`vec.envs_per_batch` < `vec.num_envs`), so that
    some envs step while the policy acts for others. Each row keeps its own step counter; a row
    that has stored num_steps actions has its next observation valued for the bootstrap and is
    held, unsent, until the next rollout. `steps` counts every action sent (the global step)."""

    def __init__(self, vecenv, policy: nn.Module, rollout: Rollout, seed: int = 0, forward=None,
                 profiler: Profiler | None = None, autocast=None,
                 reward_scaler: RewardScaler | None = None, on_step=None, noise: Noise = GLOBAL_NOISE,
                 choose=None):
        self.vecenv = vecenv
        self.policy = policy
        self.rollout = rollout
        self.seed = seed
        self.device = rollout.obs.device
        self.profiler = profiler or Profiler(self.device.type, enabled=False)
        self.autocast = autocast or contextlib.nullcontext  # e.g. bf16 autocast (runtime.amp)
        self.reward_scaler = reward_scaler  # rewards are stored scaled when given
        self.on_step = on_step  # on_step(t, index, params, value): what an algorithm keeps more
        self.acting = Acting(policy, vecenv.single_action_space, forward, noise)
        # choose(dist_params) -> (actions, log-probabilities): sampled from the policy's
        # distribution, or an algorithm's own rule (a Q-learner's epsilon-greedy)
        self.choose = choose or self.acting.choose
        self.recurrent = self.acting.recurrent
        N = vecenv.num_rows
        self.state = self.acting.initial_state(N, self.device)  # per row, recurrent policies only
        self.steps = 0
        self._prev_done = np.zeros(N, dtype=bool)  # did each row's last step end an episode?
        self._before_done = np.zeros(N, dtype=bool)  # ... and the step before (recurrent resets)
        self._awaiting = np.zeros(N, dtype=bool)  # an action was sent, its result not yet stored
        self._ptr = np.zeros(N, dtype=np.int64)  # actions stored this rollout, per row
        # Groups of rows received but not yet sent an action (all of them between rollouts):
        # (rows, observations, masks). None until the first reset.
        self._held: list[tuple[slice | np.ndarray, np.ndarray, np.ndarray]] | None = None
        self.episode_stats: dict[str, list[float]] = defaultdict(list)
        self.episode_envs: dict[str, list[int]] = defaultdict(list)  # the env of each stat

    @torch.inference_mode()
    def collect(self) -> None:
        """Fill the rollout with num_steps steps of every row, then bootstrap values."""
        T, prof, r = self.rollout.num_steps, self.profiler, self.rollout
        if self._held is None:
            self.vecenv.async_reset(self.seed)
            self._held = []
        self._ptr[:] = 0
        remaining = self.vecenv.num_rows
        held, self._held = self._held, []
        for rows, obs, masks in held:
            self._act(rows, obs, masks)
        while remaining:
            with prof.env:
                received = self.vecenv.recv()
                restarted = self.vecenv.pop_restarted()
            if restarted:
                self._drop_interrupted(restarted)
            self._record(received.infos)
            for rows, (obs, rewards, terminals, truncations, masks) in self._by_step(received):
                with prof.copy:
                    if self._awaiting[rows].any():
                        self._store_result(rows, rewards, terminals, truncations)
                if self._ptr[rows][0] < T:
                    self._act(rows, obs, masks)
                    continue
                with prof.forward:
                    index = rows if isinstance(rows, slice) else torch.from_numpy(rows)
                    obs_t = torch.from_numpy(obs).to(self.device)
                    if self.recurrent:
                        r.next_value[index] = self._recurrent_step(None, rows, index, obs_t, masks)[1]
                    else:
                        r.next_value[index] = self.acting.outputs(obs_t)[1]
                    r.next_valid[index] = torch.from_numpy(masks & ~self._prev_done[rows]).to(self.device)
                self._held.append((rows, obs.copy(), masks.copy()))
                remaining -= len(self._ptr[rows])

    def next_obs(self) -> torch.Tensor:
        """Each row's observation after the last rollout: what the next one starts from (an
        off-policy learner's next observation of each row's last step)."""
        out = torch.empty_like(self.rollout.obs[0])
        for rows, obs, _ in self._held or ():
            out[rows if isinstance(rows, slice) else torch.from_numpy(rows)] = torch.from_numpy(obs).to(self.device)
        return out

    def _rows(self, env_ids: np.ndarray) -> slice | np.ndarray:
        """Agent rows of these envs: a slice when contiguous (views, no gather)."""
        return rows_of(env_ids, self.vecenv.agents_per_env)

    def _by_step(self, received: Received):
        """A recv()'s envs as groups at the same rollout step: (rows, (obs, rewards, terminals,
        truncations, masks)). Usually one group; envs of several workers can arrive together at
        different steps when those workers were sent at different times."""
        per_row = (received.obs, received.rewards, received.terminals, received.truncations,
                   received.masks)
        env_ids = np.asarray(received.env_ids)
        n = self.vecenv.agents_per_env
        steps = self._ptr[env_ids * n]  # an env's rows always move together
        if (steps == steps[0]).all():
            yield self._rows(env_ids), per_row
            return
        row_steps = np.repeat(steps, n)
        for t in np.unique(steps):
            yield self._rows(env_ids[steps == t]), tuple(x[row_steps == t] for x in per_row)

    def _act(self, rows, obs: np.ndarray, masks: np.ndarray) -> None:
        """Store the observations of `rows` at their next step, sample actions, send them."""
        prof, r = self.profiler, self.rollout
        t = int(self._ptr[rows].min())
        index = rows if isinstance(rows, slice) else torch.from_numpy(rows)
        with prof.copy:
            r.obs[t, index] = torch.from_numpy(obs).to(self.device, non_blocking=True)
            r.valid[t, index] = torch.from_numpy(masks & ~self._prev_done[rows]).to(self.device)
        with prof.forward:
            with self.autocast():
                if self.recurrent:
                    params, value = self._recurrent_step(t, rows, index, r.obs[t, index], masks,
                                                         commit=True)
                else:
                    params, value, _ = self.acting.outputs(r.obs[t, index])
            params, value = float32_params(params), value.float()
            action, logprob = self.choose(params)
            r.values[t, index] = value
            r.actions[t, index] = action
            r.logprobs[t, index] = logprob
            if self.on_step is not None:
                self.on_step(t, index, params, value)
            env_actions = self.acting.to_env(action)
        with prof.env:
            self.vecenv.send(env_actions, self._env_ids(rows))
        self._ptr[rows] += 1
        self._awaiting[rows] = True
        self.steps += len(self._ptr[rows])

    def _recurrent_step(self, t, rows, index, obs, masks, commit: bool = False):
        """One LSTM step for `rows` on `obs`: state zeroed where an episode starts
        (`episode_starts`); with `commit`, the new state is kept and step t's start flags (and the
        t=0 state) recorded for training."""
        starts = episode_starts(self._prev_done[rows], self._before_done[rows], masks)
        starts = torch.from_numpy(starts).to(self.device)
        h, c = restart((self.state[0][index], self.state[1][index]), starts)
        if commit:
            r = self.rollout
            r.starts[t, index] = starts
            if t == 0:
                r.state0[0][index], r.state0[1][index] = h, c
        params, value, (h, c) = self.acting.outputs(obs, (h, c))
        if commit:
            self.state[0][index], self.state[1][index] = h, c
        return params, value

    def _env_ids(self, rows) -> np.ndarray:
        n = self.vecenv.agents_per_env
        if isinstance(rows, slice):
            return np.arange(rows.start // n, rows.stop // n)
        return np.unique(rows // n)

    def _store_result(self, rows, rewards, terminals, truncations) -> None:
        r = self.rollout
        t = int(self._ptr[rows].min()) - 1
        index = rows if isinstance(rows, slice) else torch.from_numpy(rows)
        done = terminals | truncations
        if self.reward_scaler is not None:
            # (the step's validity as stored, after any drop by a worker restart)
            rewards = self.reward_scaler(rows, rewards, done, r.valid[t, index].cpu().numpy())
        r.rewards[t, index] = torch.from_numpy(rewards).to(self.device)
        r.terminals[t, index] = torch.from_numpy(terminals).to(self.device, torch.float32)
        r.dones[t, index] = torch.from_numpy(done).to(self.device, torch.float32)
        self._before_done[rows] = self._prev_done[rows]
        self._prev_done[rows] = done
        self._awaiting[rows] = False

    def _drop_interrupted(self, env_ids: list[int]) -> None:
        """The envs of a restarted worker lost the episode they were in (their failed step came
        back as a truncation): its steps in this rollout are made invalid, so that nothing is
        learned from an episode cut by a crash. Earlier rollouts already learned from its start."""
        r = self.rollout
        rows = self._rows(np.sort(np.asarray(env_ids)))
        for row in (range(rows.start, rows.stop) if isinstance(rows, slice) else rows):
            end = int(self._ptr[row])  # steps acted this rollout; the last one's result is the failure
            ended = torch.nonzero(r.dones[: max(end - 1, 0), row]).flatten()
            start = int(ended[-1]) + 1 if len(ended) else 0
            r.valid[start:end, row] = False
        log.warning("envs %s lost their episode to a worker restart; its steps in this rollout are "
                    "left out", env_ids)

    def _record(self, infos) -> None:
        for info in infos:
            for key, value in info.items():
                if key != "env_id" and key != "row":
                    self.episode_stats[key].append(value)
                    self.episode_envs[key].append(info.get("env_id", 0))

    def pop_episode_stats(self) -> dict[str, list[float]]:
        """Episode stats (return, length, ...) of the episodes that ended since the last call."""
        stats, self.episode_stats = self.episode_stats, defaultdict(list)
        self.episode_envs = defaultdict(list)
        return stats

    def pop_episode_stats_by_env(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """As pop_episode_stats, each stat with the env it came from: {key: (values, env ids)}."""
        envs = self.episode_envs
        return {key: (np.asarray(values, dtype=np.float64), np.asarray(envs[key], dtype=np.int64))
                for key, values in self.pop_episode_stats().items()}

    # -- checkpoints -------------------------------------------------------------------------
    def state_dict(self) -> dict | None:
        """Where every row stands between rollouts, and the envs mid-episode where the backend
        can capture them; None before the first rollout."""
        if not self._held:
            return None
        try:
            env_state = self.vecenv.get_state()
        except EnvError as exc:  # e.g. a local Ray's actors killed by the same SIGTERM
            log.warning("the envs could not be saved (%s); the checkpoint is written without them "
                        "and a resume restarts them from their seeds", str(exc).splitlines()[0])
            env_state = None
        return {
            "prev_done": self._prev_done.copy(),
            "before_done": self._before_done.copy(),
            "recurrent_state": [x.clone() for x in self.state] if self.recurrent else None,
            "env_state": env_state,
            "reward_scaler": self.reward_scaler.state_dict() if self.reward_scaler else None,
        }

    def load_state_dict(self, state: dict | None) -> None:
        """Continue from `state_dict()`; envs saved by another backend restart from their seeds."""
        if state is None:
            return
        env_state = state["env_state"]
        backend = self.vecenv.backend_name
        saved = "none" if env_state is None else env_state.get("backend", "serial")
        continues = saved == backend
        if self.reward_scaler is not None and state.get("reward_scaler") is not None:
            # the statistics always; each row's running return only if its episode continues
            self.reward_scaler.load_state_dict(state["reward_scaler"], returns=continues)
        if not continues:
            log.warning("the checkpoint holds no env state for backend %s (it has %s); envs restart "
                        "from their seeds", backend, saved)
            return
        self.vecenv.set_state(env_state)
        self._prev_done = state["prev_done"].copy()
        self._before_done = state["before_done"].copy()
        if self.recurrent:
            self.state = tuple(x.to(self.device) for x in state["recurrent_state"])
        obs, masks = self.vecenv.current()
        self._held = [(slice(0, self.vecenv.num_rows), obs.copy(), masks.copy())]
