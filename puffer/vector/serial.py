"""Serial backend: every env stepped in this process, one after another. The reference backend:
deterministic, no processes, and the fastest when the env steps in microseconds."""

from __future__ import annotations

import contextlib
from collections import deque

import numpy as np

from puffer import renamed
from puffer.emulation import Buffers
from puffer.vector.base import (
    EnvError,
    EnvGroup,
    Received,
    VecConfigError,
    VecEnv,
    as_creators,
    build_envs,
    check_puffer_env,
    check_saved_workers,
    pickled_envs,
    restore,
    whole_groups,
    workers_state,
)
from puffer.vector.watchdog import StepTimeout, Watchdog


class Serial(VecEnv):
    """With `envs_per_batch < num_envs`, the envs are stepped a batch at a time: `send` steps the
    batch it is given at once and `recv` returns batches in the order they were sent. That is
    the trainer's async loop without the overlap, so one config (e.g. Atari's half batches)
    runs on every backend."""

    backend_name = "serial"

    def __init__(self, env_creators, env_args=None, env_kwargs=None, num_envs: int = 1,
                 num_workers: int | None = None, envs_per_batch: int | None = None,
                 zero_copy: bool = True, seed: int = 0, step_timeout: float | None = None, **unused):
        creators = as_creators(env_creators, num_envs)
        if envs_per_batch is not None and not (0 < envs_per_batch <= num_envs and num_envs % envs_per_batch == 0):
            raise VecConfigError(
                f"envs_per_batch={envs_per_batch}: expected a divisor of num_envs={num_envs} (Serial "
                "steps whole batches), or null for all envs at once"
            )
        driver = check_puffer_env(creators[0](*(env_args or ()), **(env_kwargs or {})), 0)
        super().__init__(driver, num_envs, envs_per_batch, seed)
        self.zero_copy = zero_copy
        self.buffers = Buffers.allocate(self.single_observation_space, self.num_rows)
        self.envs = [driver, *build_envs(creators[1:], env_args, env_kwargs, first=1)]
        self._group_envs()
        self._sent: deque[tuple[int, list[dict]]] = deque()  # (batch, infos), oldest first
        self._idle: set[int] = set()  # batches received and not sent since
        # a step (or reset) past step_timeout seconds raises, with where it is stuck
        self._watchdog = Watchdog(step_timeout) if step_timeout else None

    def _group_envs(self) -> None:
        size, n = self.envs_per_batch, self.agents_per_env
        firsts = range(0, self.num_envs, size)
        batches = [self.buffers.rows(first * n, (first + size) * n) for first in firsts]
        self.groups = [EnvGroup(self.envs[first : first + size], first, rows, n)
                       for first, rows in zip(firsts, batches, strict=True)]
        self._batch_ids = [np.arange(first, first + size) for first in firsts]
        # what recv() returns, made once: slicing five arrays per recv() cost ~3% of Serial
        # CartPole throughput (8 envs)
        self._batch_views = [(r.observations, r.rewards, r.terminals, r.truncations, r.masks)
                             for r in batches]

    def async_reset(self, seed: int | None = None) -> None:
        seed = self.seed if seed is None else seed
        with self._watched(range(self.num_envs)):
            self._sent = deque((k, group.reset(seed)) for k, group in enumerate(self.groups))
        self._idle = set()

    def send(self, actions, env_ids=None) -> None:
        if env_ids is None:
            batches = sorted(self._idle)
        else:
            batches = whole_groups(env_ids, self.envs_per_batch, "batches")
        if not batches or not set(batches) <= self._idle:
            raise RuntimeError("send() steps envs the last recv() returned; call recv() first")
        rows = self.envs_per_batch * self.agents_per_env
        actions = self.check_actions(actions, len(batches) * rows)
        for i, k in enumerate(batches):
            self._idle.discard(k)
            part = actions if len(batches) == 1 else actions[i * rows : (i + 1) * rows]
            if self._watchdog is None:
                self._sent.append((k, self.groups[k].step(part)))
                continue
            self._watchdog.start()  # not a `with`: a generator per step costs ~1 us
            try:
                self._sent.append((k, self.groups[k].step(part)))
            except StepTimeout:
                raise self._stuck(self._batch_ids[k]) from None
            finally:
                self._watchdog.stop()

    def recv(self):
        if not self._sent:
            raise RuntimeError("recv() called before async_reset() or send()")
        k, infos = self._sent.popleft()
        self._idle.add(k)
        obs, rewards, terminals, truncations, masks = (
            self._batch_views[k] if self.zero_copy else (x.copy() for x in self._batch_views[k]))
        return Received(obs, rewards, terminals, truncations, infos, self._batch_ids[k], masks)

    @contextlib.contextmanager
    def _watched(self, env_ids):
        if self._watchdog is None:
            yield
            return
        try:
            with self._watchdog.watching():
                yield
        except StepTimeout:
            raise self._stuck(env_ids) from None

    def _stuck(self, env_ids) -> EnvError:
        return EnvError(f"envs {env_ids[0]}..{env_ids[-1]} (stepped in this process) "
                        f"{self._watchdog.describe()}")

    def get_state(self) -> dict | None:
        """Pickled envs (their RNGs and physics mid-episode) and a copy of the buffers, in the
        worker backends' format with this process as the one worker."""
        return workers_state(self.backend_name, [pickled_envs(self.envs)], self.buffers)

    def set_state(self, state: dict) -> None:
        (saved,) = check_saved_workers(state, 1)
        envs = renamed.loads(saved)
        if len(envs) != self.num_envs:
            raise ValueError(f"the saved state has {len(envs)} envs, this vector env {self.num_envs}")
        for env in self.envs:
            env.close()
        self.envs = envs
        self._group_envs()
        # as after a recv() of every batch: the restored observations await their actions
        self._sent, self._idle = deque(), set(range(len(self.groups)))
        restore(self.buffers, state["buffers"])
        self.driver_env = envs[0]

    def close(self) -> None:
        if not self._closed:
            if self._watchdog is not None:
                self._watchdog.close()
            for group in self.groups:
                group.close()
        super().close()

