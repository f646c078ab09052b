"""Vectorization: many puffer envs as one batch, behind one `make()`.

Backends: `Serial` (this process), `Multiprocessing` (shared-memory workers, async batches) and
`Ray` (actors, for clusters; needs the `ray` extra). See `base.py` for the contract.
"""

from __future__ import annotations

from puffer.vector.base import EnvError, VecConfigError, VecEnv
from puffer.vector.multiprocessing import Multiprocessing, WorkerError
from puffer.vector.ray import Ray
from puffer.vector.serial import Serial

BACKENDS = {"serial": Serial, "multiprocessing": Multiprocessing, "ray": Ray}

__all__ = ["make", "Serial", "Multiprocessing", "Ray", "VecEnv", "EnvError", "WorkerError",
           "VecConfigError", "BACKENDS"]


def resolve_backend(backend) -> type[VecEnv]:
    if isinstance(backend, type) and issubclass(backend, VecEnv):
        return backend
    if isinstance(backend, str) and backend.lower() in BACKENDS:
        return BACKENDS[backend.lower()]
    raise VecConfigError(
        f"vec.backend={backend!r} is not a backend; expected one of {sorted(BACKENDS)} "
        "or a VecEnv subclass"
    )


def make(env_creator_or_creators, env_args=None, env_kwargs=None, backend=Serial,
         num_envs: int = 1, num_workers: int | None = None, envs_per_batch: int | None = None,
         zero_copy: bool = True, seed: int = 0, **backend_kwargs) -> VecEnv:
    """Build `num_envs` envs from a creator (or one creator per env) on the chosen backend.

    Each creator returns a puffer env (e.g. `GymnasiumPufferEnv(env=gym.make(...))`); env i is
    seeded with `seed + i` on reset.
    """
    cls = resolve_backend(backend)
    return cls(env_creator_or_creators, env_args=env_args, env_kwargs=env_kwargs,
               num_envs=num_envs, num_workers=num_workers, envs_per_batch=envs_per_batch,
               zero_copy=zero_copy, seed=seed, **backend_kwargs)
