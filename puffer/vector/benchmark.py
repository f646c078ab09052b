"""Random-action benchmarks of envs: how fast they step, before any learning.

`RLBenchmark({name: env_creator}, ...)` steps each env's vector env with random actions for a few
seconds and reports steps/second, the average episode return and the number of episodes.
`python -m puffer mode=benchmark env=... vec=...` runs it on the configured env.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

import puffer.vector


class RLBenchmark:
    def __init__(self, env_creators: dict[str, Callable], seconds: float = 5.0, num_envs: int = 8,
                 backend="serial", seed: int = 0, **vec_kwargs):
        self.env_creators = env_creators
        self.seconds = seconds
        self.vec_kwargs = {"num_envs": num_envs, "backend": backend, "seed": seed, **vec_kwargs}

    def run_one(self, creator: Callable) -> dict[str, float]:
        with puffer.vector.make(creator, **self.vec_kwargs) as vec:
            vec.action_space.seed(self.vec_kwargs["seed"])
            vec.reset()
            returns, steps = [], 0
            started = time.perf_counter()
            while (elapsed := time.perf_counter() - started) < self.seconds:
                _, _, _, _, infos = vec.step(vec.action_space.sample())
                steps += vec.num_rows
                returns += [i["episode_return"] for i in infos if "episode_return" in i]
        return {"sps": steps / elapsed, "episode_return": float(np.mean(returns)) if returns else float("nan"),
                "episodes": len(returns)}

    def run(self) -> dict[str, dict[str, float]]:
        return {name: self.run_one(creator) for name, creator in self.env_creators.items()}
