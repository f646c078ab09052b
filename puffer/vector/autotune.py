"""vec=auto: measure the candidate backends on this env and machine, keep the fastest.

Candidates: Serial; Multiprocessing with every worker count that divides num_envs (up to the
cores), synchronous and, with two or more workers, async batches of half the envs; and twice
as many workers as cores in async batches of half the envs (`overwork`): while the main process
turns one batch around, the other half's workers keep every core stepping (`bench/vector.py`,
Breakout, 2 cores: 1.42x the raw env against 1.34x with a worker per core). Each is stepped
with random actions for `seconds` in all, in interleaved rounds, and scored by its best round
(see `autotune`); the table of measurements is logged.
"""

from __future__ import annotations

import logging
import os
import time

import puffer.vector

log = logging.getLogger(__name__)


def candidates(num_envs: int) -> list[dict]:
    cores = os.cpu_count() or 1
    found = [{"backend": "serial", "num_workers": None, "envs_per_batch": None}]
    for workers in range(1, min(num_envs, cores) + 1):
        if num_envs % workers:
            continue
        found.append({"backend": "multiprocessing", "num_workers": workers, "envs_per_batch": None})
        if workers >= 2 and workers % 2 == 0:
            found.append({"backend": "multiprocessing", "num_workers": workers,
                          "envs_per_batch": num_envs // 2})
    doubled = 2 * cores
    if doubled <= num_envs and num_envs % doubled == 0 and (num_envs // 2) % (num_envs // doubled) == 0:
        found.append({"backend": "multiprocessing", "num_workers": doubled,
                      "envs_per_batch": num_envs // 2, "overwork": True})
    return found


def measure(env_creator, num_envs: int, settings: dict, seconds: float, seed: int) -> float:
    """Steps/second of random actions on `settings` for `seconds`, after the first results
    (worker start-up is not counted)."""
    with puffer.vector.make(env_creator, num_envs=num_envs, seed=seed, **settings) as vec:
        vec.action_space.seed(seed)
        vec.async_reset(seed)
        *_, env_ids, _ = vec.recv()
        steps, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            per_batch = len(env_ids) * vec.agents_per_env
            vec.send(vec.action_space.sample()[:per_batch] if per_batch < vec.rows_per_batch
                     else vec.action_space.sample())
            *_, env_ids, _ = vec.recv()
            steps += len(env_ids) * vec.agents_per_env
        return steps / (time.perf_counter() - started)


def autotune(env_creator, num_envs: int, seconds: float = 1.0, seed: int = 0,
             rounds: int = 3) -> dict:
    """The fastest settings ({backend, num_workers, envs_per_batch}) for puffer.vector.make.

    The candidates are measured in `rounds` interleaved rounds of `seconds / rounds` each (a
    candidate is rebuilt every round: holding all of them open would hold every candidate's
    envs at once), and each keeps its best round. Interleaving spreads a slow minute of the
    machine over all candidates instead of sinking the one measured in it, and a noisy machine
    only ever slows a round, so the best is the truest figure of what a layout can do."""
    options = candidates(num_envs)
    rates = [0.0] * len(options)
    for _ in range(rounds):
        for i, settings in enumerate(options):
            rates[i] = max(rates[i], measure(env_creator, num_envs, settings, seconds / rounds, seed))
    for sps, c in zip(rates, options, strict=True):
        log.info("vec=auto: %-15s workers=%-4s envs_per_batch=%-4s%s %10.0f steps/s", c["backend"],
                 c["num_workers"], c["envs_per_batch"], " overwork" if c.get("overwork") else "", sps)
    sps, best = max(zip(rates, options, strict=True), key=lambda r: r[0])
    log.info("vec=auto picked %s (%.0f steps/s)", best, sps)
    return dict(best)
