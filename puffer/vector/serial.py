"""Serial backend: every env stepped in this process, one after another. The reference backend:
deterministic, no processes, and the fastest when the env steps in microseconds."""

from __future__ import annotations

import logging
import pickle
from dataclasses import fields

import numpy as np

from puffer.emulation import Buffers
from puffer.vector.base import (
    EnvGroup,
    VecConfigError,
    VecEnv,
    as_creators,
    build_envs,
    check_puffer_env,
)

log = logging.getLogger(__name__)


class Serial(VecEnv):
    def __init__(self, env_creators, env_args=None, env_kwargs=None, num_envs: int = 1,
                 num_workers: int | None = None, batch_size: int | None = None,
                 zero_copy: bool = True, seed: int = 0, **unused):
        creators = as_creators(env_creators, num_envs)
        if batch_size not in (None, num_envs):
            raise VecConfigError(
                f"batch_size={batch_size}: the Serial backend steps all num_envs={num_envs} envs "
                "at once; use backend=Multiprocessing for async batches"
            )
        driver = check_puffer_env(creators[0](*(env_args or ()), **(env_kwargs or {})), 0)
        super().__init__(driver, num_envs, batch_size, seed)
        self.zero_copy = zero_copy
        self.buffers = Buffers.allocate(self.single_observation_space, self.num_agents)
        envs = [driver, *build_envs(creators[1:], env_args, env_kwargs, first=1)]
        self.group = EnvGroup(envs, 0, self.buffers, self.agents_per_env)
        self.env_ids = np.arange(num_envs)
        self.envs = self.group.envs
        self._infos: list[dict] | None = None

    def async_reset(self, seed: int | None = None) -> None:
        self._infos = self.group.reset(self.seed if seed is None else seed)

    def send(self, actions, env_ids=None) -> None:
        if self._infos is not None:
            raise RuntimeError("send() called twice without recv()")
        if env_ids is not None and len(env_ids) != self.num_envs:
            raise ValueError("Serial steps every env at once; env_ids must name them all")
        self._infos = self.group.step(self.check_actions(actions, self.num_agents))

    def recv(self):
        if self._infos is None:
            raise RuntimeError("recv() called before async_reset() or send()")
        infos, self._infos = self._infos, None
        b = self.buffers
        out = (b.observations, b.rewards, b.terminals, b.truncations)
        if not self.zero_copy:
            out = tuple(x.copy() for x in out)
        return (*out, infos, self.env_ids, b.masks)

    def get_state(self) -> dict | None:
        """Pickled envs (their RNGs and physics mid-episode) and a copy of the buffers."""
        try:
            envs = pickle.dumps(self.envs)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            log.warning("cannot pickle the envs (%r); a resume will restart them from their seeds", exc)
            return None
        buffers = {f.name: getattr(self.buffers, f.name).copy() for f in fields(self.buffers)}
        return {"envs": envs, "buffers": buffers}

    def set_state(self, state: dict) -> None:
        envs = pickle.loads(state["envs"])
        if len(envs) != self.num_envs:
            raise ValueError(f"the saved state has {len(envs)} envs, this vector env {self.num_envs}")
        for env in self.envs:
            env.close()
        self.group = EnvGroup(envs, 0, self.buffers, self.agents_per_env)
        for name, saved in state["buffers"].items():
            getattr(self.buffers, name)[...] = saved
        self.envs = self.group.envs
        self.driver_env = envs[0]

    def close(self) -> None:
        if not self._closed:
            self.group.close()
        super().close()
