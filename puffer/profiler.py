"""Where each second goes: wall time split into the phases of training.

What lives here: `Profiler`, plain timers per section. It knows no logger and no terminal; it
returns plain dicts. Sections: env (stepping and waiting for workers), forward (policy inference
in the rollout), copy (host/device transfers and buffer writes), learn (training forward,
backward, optimizer), misc (the rest, so the sections add up to wall time).
"""

from __future__ import annotations

import time

SECTIONS = ("env", "forward", "copy", "learn")


class _Section:
    __slots__ = ("profiler", "name", "started")

    def __init__(self, profiler: Profiler, name: str):
        self.profiler, self.name, self.started = profiler, name, 0.0

    def __enter__(self):
        self.profiler.synchronize()
        self.started = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.profiler.synchronize()
        self.profiler.totals[self.name] += time.perf_counter() - self.started


class Profiler:
    """`with profiler.env: ...` adds the block's wall time to the `env` section.

    With `sync=True` on CUDA, the device is synchronised at section boundaries so that queued
    kernels are charged to the section that launched them.
    """

    def __init__(self, device: str = "cpu", sync: bool = False):
        self.sync = sync and str(device).startswith("cuda")
        self.totals = dict.fromkeys(SECTIONS, 0.0)
        self.env, self.forward, self.copy, self.learn = (_Section(self, name) for name in SECTIONS)
        self.started = time.perf_counter()

    def synchronize(self) -> None:
        if self.sync:
            import torch

            torch.cuda.synchronize()

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def breakdown(self) -> dict[str, float]:
        """Seconds per section since the start, with `misc` = wall time minus the rest."""
        wall = self.elapsed()
        seconds = dict(self.totals)
        seconds["misc"] = max(0.0, wall - sum(seconds.values()))
        seconds["wall"] = wall
        return seconds

    def metrics(self) -> dict[str, float]:
        """`perf/<section>_s` and `perf/<section>_pct` for every section."""
        seconds = self.breakdown()
        wall = max(seconds.pop("wall"), 1e-12)
        out = {}
        for name, value in seconds.items():
            out[f"perf/{name}_s"] = value
            out[f"perf/{name}_pct"] = 100.0 * value / wall
        out["perf/wall_s"] = wall
        return out
