"""The vector env contract and what every backend shares.

What lives here: `VecEnv` (the API: reset/step, async_reset/send/recv, spaces, close), argument
checks, and `EnvGroup` (a slice of envs stepped one after another, writing into buffer rows).
Backends differ only in who steps which `EnvGroup` and how the buffers are allocated: Serial
steps one group per batch in this process; Multiprocessing one group per worker, in shared memory.
"""

from __future__ import annotations

import logging
import os
import pickle
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import batch_space

from puffer.emulation import Buffers, PufferEnv

log = logging.getLogger(__name__)

# pop_restarted()'s answer when no worker was restarted (shared, never mutated)
NO_RESTARTS: list[int] = []


class Received(NamedTuple):
    """What `VecEnv.recv()` returns: one row per agent of the envs received (`env_ids`), as
    views of the backend's buffers until the next recv(). Unpacks like a 7-tuple."""

    obs: np.ndarray
    rewards: np.ndarray
    terminals: np.ndarray
    truncations: np.ndarray
    infos: list[dict]
    env_ids: np.ndarray
    masks: np.ndarray


class EnvError(RuntimeError):
    """An env raised; the message names the env and (in workers) carries the original traceback."""


class VecConfigError(ValueError):
    """Impossible vectorization settings, detected before any worker starts."""


def as_creators(env_creator_or_creators, num_envs: int) -> list[Callable]:
    if callable(env_creator_or_creators):
        return [env_creator_or_creators] * num_envs
    creators = list(env_creator_or_creators)
    if len(creators) != num_envs:
        raise VecConfigError(f"got {len(creators)} env creators for num_envs={num_envs}")
    return creators


def action_dtype(space: spaces.Space) -> np.dtype:
    if isinstance(space, (spaces.Discrete, spaces.MultiDiscrete)):
        return np.dtype(np.int64)
    return np.dtype(np.float32)


class SeedShifted:
    """A creator whose env takes `shift` more than its vector env's seed: member k of a batch
    whose envs are rows [k * E, (k + 1) * E) of one vector env seeded 0 gets shift seed_k - k * E,
    so its env i starts from seed_k + i, as in member k's solo run. Picklable (workers build it)."""

    def __init__(self, creator: Callable, shift: int):
        self.creator, self.shift = creator, shift

    def __call__(self, *args, **kwargs) -> PufferEnv:
        env = self.creator(*args, **kwargs)
        env.seed_shift = self.shift
        return env


def member_creators(creator: Callable, seeds: Sequence[int], envs_per_member: int) -> list[SeedShifted]:
    """One creator per env of a batch of members: member k's `envs_per_member` envs, seeded from
    seeds[k] as its solo run's (in a vector env seeded 0)."""
    return [SeedShifted(creator, seed - k * envs_per_member)
            for k, seed in enumerate(seeds) for _ in range(envs_per_member)]


def check_puffer_env(env: Any, index: int) -> PufferEnv:
    if not isinstance(env, PufferEnv):
        raise TypeError(
            f"env creator {index} returned {type(env).__name__}, not a puffer env; wrap it with "
            "puffer.emulation.GymnasiumPufferEnv(env=...) or PettingZooPufferEnv(env=...)"
        )
    return env


def build_envs(creators: Sequence[Callable], env_args, env_kwargs, first: int) -> list[PufferEnv]:
    return [
        check_puffer_env(creator(*(env_args or ()), **(env_kwargs or {})), first + offset)
        for offset, creator in enumerate(creators)
    ]


class EnvGroup:
    """Envs [first, first + len(envs)) of a vector env, stepped in a loop, writing into `buffers`."""

    def __init__(self, envs: list[PufferEnv], first: int, buffers: Buffers, agents_per_env: int):
        self.first = first
        self.buffers = buffers
        self.agents_per_env = agents_per_env
        self.envs = envs
        for offset, env in enumerate(envs):
            rows = buffers.rows(offset * agents_per_env, (offset + 1) * agents_per_env)
            try:
                env.set_buffers(rows)
            except ValueError as exc:
                raise EnvError(f"env {first + offset} does not match env 0: {exc}") from exc

    def reset(self, seed: int | None) -> list[dict]:
        infos = []
        for offset, env in enumerate(self.envs):
            env_seed = None if seed is None else seed + self.first + offset + env.seed_shift
            infos += self._tag(offset, self._call(offset, "reset", env.reset, env_seed)[1])
        return infos

    def step(self, actions: np.ndarray) -> list[dict]:
        infos, n = [], self.agents_per_env
        for offset, env in enumerate(self.envs):
            result = self._call(offset, "step", env.step, actions[offset * n : (offset + 1) * n])
            if result[-1]:
                infos += self._tag(offset, result[-1])
        return infos

    def _tag(self, offset: int, infos: list[dict]) -> list[dict]:
        """Each info says which env it came from (`env_id`)."""
        for info in infos:
            info["env_id"] = self.first + offset
        return infos

    def _call(self, offset: int, what: str, fn, arg):
        try:
            return fn(arg)
        except Exception as exc:
            env = self.envs[offset]
            raise EnvError(f"env {self.first + offset} ({env.name}) raised in {what}: {exc!r}") from exc

    def close(self) -> None:
        for env in self.envs:
            env.close()


class VecEnv:
    """Many puffer envs as one batch. Rows are agent slots: env i owns rows
    [i * agents_per_env, (i + 1) * agents_per_env).

    `step(actions)` = `send(actions)` then `recv()` for the whole batch; with `envs_per_batch < num_envs`
    (Multiprocessing), `recv()` returns the first ready envs and `send()` steps exactly those.
    """

    # The backend's name, as vec.backend spells it and as saved env states are tagged.
    backend_name = ""
    # Do the envs step in other processes (which need cores of their own)? The trainer gives
    # its rollout forward passes fewer threads when they do.
    steps_in_workers = False

    def __init__(self, driver: PufferEnv, num_envs: int, envs_per_batch: int | None, seed: int):
        if num_envs < 1:
            raise VecConfigError(f"num_envs={num_envs} must be at least 1")
        self.driver_env = driver
        self.num_envs = num_envs
        self.envs_per_batch = num_envs if envs_per_batch is None else envs_per_batch
        if not 1 <= self.envs_per_batch <= num_envs:
            raise VecConfigError(f"envs_per_batch={envs_per_batch} must be between 1 and num_envs={num_envs}")
        self.seed = seed
        self.agents_per_env = driver.num_agents
        self.num_rows = num_envs * self.agents_per_env
        self.rows_per_batch = self.envs_per_batch * self.agents_per_env
        self.single_observation_space = driver.single_observation_space
        self.single_action_space = driver.single_action_space
        self.observation_space = batch_space(self.single_observation_space, self.rows_per_batch)
        self.action_space = batch_space(self.single_action_space, self.rows_per_batch)
        self.action_dtype = action_dtype(self.single_action_space)
        self.action_shape = tuple(self.single_action_space.shape)
        self._closed = False

    # -- the synchronous API -----------------------------------------------------------------
    def reset(self, seed: int | None = None):
        self.async_reset(self.seed if seed is None else seed)
        received = self.recv()
        return received.obs, received.infos

    def step(self, actions):
        self.send(actions)
        r = self.recv()
        return r.obs, r.rewards, r.terminals, r.truncations, r.infos

    # -- backends implement these ------------------------------------------------------------
    def async_reset(self, seed: int | None = None) -> None:
        raise NotImplementedError

    def send(self, actions, env_ids=None) -> None:
        raise NotImplementedError

    def recv(self) -> Received:
        raise NotImplementedError

    def close(self) -> None:
        self._closed = True

    # -- checkpointing the envs themselves (see puffer.vector.base.workers_state) ----------
    def get_state(self) -> dict | None:
        """The envs mid-episode, for a bitwise resume; None where the backend can't capture it."""
        return None

    def set_state(self, state: dict) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot restore env state")

    # Self-healing (vec.restart_failed_workers; Multiprocessing and Ray): failed workers that may
    # be restarted in all, how many were, and the env ids restarted since pop_restarted().
    restart_budget = 0
    restarts = 0
    _restarted_envs: list[int] = NO_RESTARTS

    def pop_restarted(self) -> list[int]:
        """Env ids whose failed worker was restarted since the last call; their last step came
        back as a truncation (see count_restart)."""
        if not self._restarted_envs:  # every recv() of the collector asks: no allocation then
            return NO_RESTARTS
        restarted, self._restarted_envs = self._restarted_envs, []
        return restarted

    @property
    def restarts_left(self) -> int:
        return self.restart_budget - self.restarts

    def count_restart(self, worker: int, failure: str, name: str = "worker") -> bool:
        """Count a restart of failed `worker` against vec.restart_failed_workers and log it; False
        (nothing counted) when none is left. The backend then restarts it, resets its envs on fresh
        seeds (`restart_seed()`) and returns their step as a truncation with no reward; its env ids
        are reported by pop_restarted(), so that the collector drops the interrupted episodes."""
        if self.restarts_left <= 0:
            return False
        self.restarts += 1
        first, last = worker * self.envs_per_worker, (worker + 1) * self.envs_per_worker - 1
        reason = failure.strip().splitlines()[-1] if failure.strip() else failure
        log.warning("%s failed; restarting it (restart %d; %d more allowed by "
                    "vec.restart_failed_workers): %s", self.worker_label(worker, name), self.restarts,
                    self.restarts_left, reason)
        self._restarted_envs = [*self._restarted_envs, *range(first, last + 1)]
        return True

    def restart_seed(self) -> int:
        """Seeds for the envs of the k-th restart: seed + num_envs * k never repeats one in use."""
        return self.seed + self.num_envs * self.restarts

    def worker_label(self, worker: int, name: str = "worker", detail: str = "") -> str:
        """How messages name a worker: "worker 2 (envs 4..5, <detail>)" (backends with workers
        set envs_per_worker)."""
        per = self.envs_per_worker
        extra = f", {detail}" if detail else ""
        return f"{name} {worker} (envs {worker * per}..{(worker + 1) * per - 1}{extra})"

    def after_restarts(self) -> str:
        """For a final failure's message."""
        return f" after {self.restarts} restarts (vec.restart_failed_workers)" if self.restarts else ""

    def local_worker_pids(self) -> list[int]:
        """Processes on this machine that step envs for this vector env and are not children of
        this process (a local Ray's actors), so that the profiler counts them as workers."""
        return []

    def current(self) -> tuple[np.ndarray, np.ndarray]:
        """Observations and masks of every row as the last recv() left them."""
        return self.buffers.observations, self.buffers.masks

    # -- shared helpers ----------------------------------------------------------------------
    def check_actions(self, actions, rows: int) -> np.ndarray:
        actions = np.asarray(actions)
        expected = (rows, *self.action_shape)
        if actions.shape != expected:
            raise ValueError(f"send(actions): expected shape {expected}, got {actions.shape}")
        return actions

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(num_envs={self.num_envs}, envs_per_batch={self.envs_per_batch}, "
                f"agents_per_env={self.agents_per_env}, env={self.driver_env.name})")


def check_workers(num_envs: int, num_workers: int, envs_per_batch: int, overwork: bool) -> None:
    """Reject impossible worker layouts before any process starts."""
    if num_workers < 1:
        raise VecConfigError(f"num_workers={num_workers} must be at least 1")
    if num_envs % num_workers:
        raise VecConfigError(f"num_envs={num_envs} is not divisible by num_workers={num_workers}")
    per_worker = num_envs // num_workers
    if envs_per_batch % per_worker:
        raise VecConfigError(
            f"envs_per_batch={envs_per_batch} is not a multiple of the {per_worker} envs per worker "
            f"(num_envs={num_envs} / num_workers={num_workers})"
        )
    cores = os.cpu_count() or 1
    if num_workers > cores and not overwork:
        raise VecConfigError(
            f"num_workers={num_workers} is more than the {cores} cores of this machine; "
            "pass overwork=True (vec.overwork=true) to allow it"
        )


def prepare_workers(env_creators, env_args, env_kwargs, num_envs: int, num_workers: int | None,
                    envs_per_batch: int | None, overwork: bool) -> tuple[list[Callable], int, PufferEnv]:
    """What every worker backend does first: one creator per env, the worker count (checked
    before anything starts), and a driver env built here to read the spaces from."""
    creators = as_creators(env_creators, num_envs)
    num_workers = default_workers(num_envs) if num_workers is None else num_workers
    check_workers(num_envs, num_workers, num_envs if envs_per_batch is None else envs_per_batch, overwork)
    driver = check_puffer_env(creators[0](*(env_args or ()), **(env_kwargs or {})), 0)
    return creators, num_workers, driver


def default_workers(num_envs: int) -> int:
    """The largest divisor of num_envs that is at most the number of cores."""
    cores = os.cpu_count() or 1
    return max(d for d in range(1, min(num_envs, cores) + 1) if num_envs % d == 0)


def rows_of(ids, rows_per_id: int) -> slice | np.ndarray:
    """Buffer rows of sorted env or worker ids owning `rows_per_id` rows each: a slice (views,
    no copy) when the ids are contiguous, else an index array."""
    ids = np.asarray(ids)
    if ids[-1] - ids[0] + 1 == len(ids):
        return slice(int(ids[0]) * rows_per_id, (int(ids[-1]) + 1) * rows_per_id)
    return (ids[:, None] * rows_per_id + np.arange(rows_per_id)).reshape(-1)


def whole_groups(env_ids, per: int, what: str) -> list[int]:
    """The groups of `per` consecutive envs (workers, Serial's batches) that `env_ids` names,
    sorted; a ValueError unless it names every env of each."""
    groups = sorted({int(e) // per for e in np.asarray(env_ids).ravel()})
    if len(np.unique(env_ids)) != len(groups) * per:
        raise ValueError(f"send(env_ids=...): must name the envs of whole {what} ({per} envs "
                         f"each), got {list(env_ids)}")
    return groups


def pickled_by_arguments(env) -> str | None:
    """The name of an EzPickle layer in env's wrapper chain, if any: such an env unpickles by
    being built anew from its constructor arguments (MuJoCo, Box2D, most PettingZoo envs, a
    plain ALE env), so a pickled copy has lost the episode in progress. A layer that sets
    `pickles_mid_episode` (puffer's Atari envs) has replaced that pickling with its own."""
    from gymnasium.utils import EzPickle

    layer, seen = env, set()
    while layer is not None and id(layer) not in seen:
        if isinstance(layer, EzPickle) and not getattr(layer, "pickles_mid_episode", False):
            return type(layer).__name__
        seen.add(id(layer))
        layer = getattr(layer, "env", None) or getattr(layer, "aec_env", None)
    return None


def pickled_envs(envs) -> dict:
    """Envs for a checkpoint: {"envs": bytes}, or {"envs": None, "why": ...} when pickling
    would not keep them mid-episode (an EzPickle layer) or fails (the run goes on; a resume
    restarts them from their seeds)."""
    for env in envs:
        layer = pickled_by_arguments(env)
        if layer is not None:
            return {"envs": None, "why": f"{layer} pickles as its constructor arguments "
                    "(gymnasium/pettingzoo EzPickle), which would resume a fresh game as if "
                    "mid-episode"}
    try:
        return {"envs": pickle.dumps(envs)}
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        return {"envs": None, "why": repr(exc)}


def stepping(workers) -> bool:
    """Warn and return True when some workers are stepping: their envs can't be saved now."""
    if workers:
        log.warning("workers %s are stepping, so their envs can't be saved; a resume will "
                    "restart the envs from their seeds", sorted(workers))
    return bool(workers)


def workers_state(backend: str, replies: list[dict], buffers) -> dict | None:
    """The saved state of a backend from each worker's `pickled_envs` reply (in worker order;
    Serial is one worker) and its buffers; None, with a warning, when some envs did not pickle."""
    problems = [reply["why"] for reply in replies if reply["envs"] is None]
    if problems:
        log.warning("cannot pickle the envs (%s); a resume will restart them from their seeds",
                    problems[0])
        return None
    return {"backend": backend, "workers": [reply["envs"] for reply in replies],
            "buffers": snapshot(buffers)}


def check_saved_workers(state: dict, num_workers: int) -> list[bytes]:
    # Serial checkpoints written before the backends shared this format hold "envs"
    saved = state["workers"] if "workers" in state else [state["envs"]]
    if len(saved) != num_workers:
        raise ValueError(f"the saved state has {len(saved)} workers, this vector env {num_workers}")
    return saved


def snapshot(buffers) -> dict[str, np.ndarray]:
    """Copies of every buffer (observations the next step starts from, masks, ...)."""
    return {f.name: getattr(buffers, f.name).copy() for f in fields(buffers)}


def restore(buffers, saved: dict[str, np.ndarray]) -> None:
    for name, value in saved.items():
        getattr(buffers, name)[...] = value
