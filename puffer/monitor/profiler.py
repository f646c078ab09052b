"""Where each second goes: wall time split into the phases of training.

What lives here: `Profiler` (plain timers per section), the breakdown table and the verdict. It
knows no logger and no terminal; it returns plain dicts and strings. Sections: env (stepping and
waiting for workers), forward (policy inference in the rollout), copy (host/device transfers and
buffer writes), learn (training forward, backward, optimizer), misc (the rest: logging,
checkpoints, the loop itself), so that the sections add up to wall time. Beside them, what the
machine did meanwhile (puffer.monitor.machine): CPU of the trainer, its workers and other processes,
memory, GPU; the verdict says when other processes held the cores, so that a profile taken on a
busy machine is not read as the run's own.
"""

from __future__ import annotations

import time

from puffer.monitor.machine import MachineUsage

SECTIONS = ("env", "forward", "copy", "learn")


class _Section:
    __slots__ = ("profiler", "name", "started")

    def __init__(self, profiler: Profiler, name: str):
        self.profiler, self.name, self.started = profiler, name, 0.0

    def __enter__(self):
        if self.profiler.sync:
            self.profiler.synchronize()
        self.started = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        if self.profiler.sync:
            self.profiler.synchronize()
        self.profiler.totals[self.name] += time.perf_counter() - self.started


class _Off:
    """A section that measures nothing (Profiler(enabled=False)), for overhead benchmarks."""

    __slots__ = ()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


class Profiler:
    """`with profiler.env: ...` adds the block's wall time to the `env` section.

    With `sync=True` on CUDA, the device is synchronised at section boundaries so that queued
    kernels are charged to the section that launched them.
    """

    def __init__(self, device: str = "cpu", sync: bool = False, enabled: bool = True):
        self.sync = sync and str(device).startswith("cuda")
        self.totals = dict.fromkeys(SECTIONS, 0.0)
        sections = (_Section(self, name) if enabled else _Off() for name in SECTIONS)
        self.env, self.forward, self.copy, self.learn = sections
        self.machine = MachineUsage(device) if enabled else None
        self.started = time.perf_counter()

    def restart(self) -> None:
        self.totals = dict.fromkeys(SECTIONS, 0.0)
        if self.machine is not None:
            self.machine.restart()
        self.started = time.perf_counter()

    def synchronize(self) -> None:
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
        """`perf/<section>_s` and `perf/<section>_pct` for every section, `perf/wall_s`, and the
        machine's use (puffer.monitor.machine) when enabled."""
        seconds = self.breakdown()
        wall = max(seconds.pop("wall"), 1e-12)
        out = {}
        for name, value in seconds.items():
            out[f"perf/{name}_s"] = value
            out[f"perf/{name}_pct"] = 100.0 * value / wall
        out["perf/wall_s"] = wall
        if self.machine is not None:
            out.update(self.machine.metrics())
        return out


def rows(metrics: dict[str, float]) -> list[tuple[str, float, float]]:
    """(section, seconds, percent) for each section, from `Profiler.metrics()` keys."""
    return [(name, metrics.get(f"perf/{name}_s", 0.0), metrics.get(f"perf/{name}_pct", 0.0))
            for name in (*SECTIONS, "misc")]


# Other processes' share of this run's CPUs from which a profile says it was taken under contention.
CONTENDED_PCT = 25.0


def verdict(metrics: dict[str, float]) -> str:
    """One plain sentence: what limits throughput and what to try; first, when other processes
    held a good share of the CPUs, that the times are inflated by them."""
    others = metrics.get("perf/cpu_others_pct", 0.0) + metrics.get("perf/cpu_steal_pct", 0.0)
    if others >= CONTENDED_PCT:
        return (f"contended: other processes used {others:.0f}% of this run's CPUs, so every "
                "section ran slower than it would alone; profile again on a quiet machine before "
                f"acting on the split. Their share aside: {_bottleneck(metrics)}")
    return _bottleneck(metrics)


def _bottleneck(metrics: dict[str, float]) -> str:
    pct = {name: p for name, _, p in rows(metrics)}
    model = pct["forward"] + pct["learn"]
    if pct["env"] >= max(model, pct["copy"], pct["misc"]):
        return (f"env-bound: {pct['env']:.0f}% of time in env; try vec=multiprocessing, more "
                "workers (vec.num_workers), or a native batched env")
    if model >= max(pct["copy"], pct["misc"]):
        return (f"model-bound: {model:.0f}% of time in the policy (forward {pct['forward']:.0f}%, "
                f"learn {pct['learn']:.0f}%); try larger minibatches (train.num_minibatches), "
                "fewer train.update_epochs, device=cuda or runtime.compile=true")
    if pct["copy"] >= pct["misc"]:
        return (f"copy-bound: {pct['copy']:.0f}% of time moving data; keep observations small "
                "(uint8 pixels) and the rollout on one device")
    return (f"overhead-bound: {pct['misc']:.0f}% of time outside env, model and copies "
            "(logging, checkpoints); raise runtime.log_interval or runtime.checkpoint_interval")


def table(metrics: dict[str, float]) -> str:
    """The breakdown as a plain-text table with bars."""
    lines = [f"{'section':<8} {'seconds':>9} {'share':>6}"]
    for name, seconds, pct in rows(metrics):
        lines.append(f"{name:<8} {seconds:>9.2f} {pct:>5.1f}% {'#' * round(pct / 2.5)}")
    lines.append(f"{'wall':<8} {metrics.get('perf/wall_s', 0.0):>9.2f}")
    if "perf/cpu_main_pct" in metrics:
        lines.append(machine_line(metrics))
    return "\n".join(lines)


def machine_line(metrics: dict[str, float]) -> str:
    """CPU shares of trainer, workers and other processes, threads and memory, in one line."""
    text = (f"cpu: trainer {metrics['perf/cpu_main_pct']:.0f}%, workers "
            f"{metrics['perf/cpu_workers_pct']:.0f}%, other processes "
            f"{metrics['perf/cpu_others_pct']:.0f}% of {metrics['perf/cpus']:.0f} CPUs")
    if "perf/threads_learn" in metrics:
        text += (f" | torch threads {metrics['perf/threads_learn']:.0f} learning, "
                 f"{metrics['perf/threads_rollout']:.0f} collecting")
    text += f" | memory {metrics['perf/mem_main_mb'] + metrics['perf/mem_workers_mb']:,.0f} MB"
    if "perf/gpu_mem_peak_mb" in metrics:
        text += f" | GPU peak {metrics['perf/gpu_mem_peak_mb']:,.0f} MB"
        if "perf/gpu_util_pct" in metrics:
            text += f", {metrics['perf/gpu_util_pct']:.0f}% busy"
    return text
