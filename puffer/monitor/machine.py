"""What the machine did during a run: CPU time of the trainer, of its env workers and of everyone
else, memory, and the GPU's utilization and memory on CUDA.

What lives here: `MachineUsage`, sampled by the profiler (puffer.monitor.profiler) when it reports. It
returns plain `perf/*` numbers and knows no logger. What does not: the thread policy that keeps a
run from fighting itself for cores (puffer.runtime.threads).

CPU shares are percentages of the CPUs this process may use (its affinity mask), so that main +
workers + others + idle add up to 100: `perf/cpu_others_pct` of 60 on 2 CPUs means other
processes kept 1.2 cores busy, and a profile's times are then inflated by contention, not by
the run. "Workers" are this process's child processes (Multiprocessing workers) and the
processes a vector env names as its local workers (`VecEnv.local_worker_pids`: a local Ray's env
actors). Steal is time the hypervisor gave away.
"""

from __future__ import annotations

import time

import psutil

from puffer.runtime.threads import affinity_cpus

# Sampling walks the process tree; more often than this it would cost a fast loop (ocean
# CartPole logs an epoch every ~20 ms) a measurable share, and the numbers are averages anyway.
MIN_INTERVAL_S = 1.0


def _busy(times) -> float:
    """Seconds a CPU was busy (not idle, not waiting for I/O, not stolen)."""
    idle = times.idle + getattr(times, "iowait", 0.0) + getattr(times, "steal", 0.0)
    return sum(times) - idle - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)


def _cpu_seconds(process: psutil.Process) -> float:
    t = process.cpu_times()
    return t.user + t.system


class MachineUsage:
    """CPU, memory and GPU use since `restart()`, as `perf/*` metrics."""

    def __init__(self, device: str = "cpu"):
        self.process = psutil.Process()
        self.cpu_ids = affinity_cpus()
        self.cuda = str(device).startswith("cuda")
        self.last: dict[str, float] = {}
        self.tracked: dict[int, psutil.Process] = {}  # workers that are not our children
        self.restart()

    def track(self, pids: list[int]) -> None:
        """Count these processes as workers too (a local Ray's env actors are not children)."""
        for pid in pids:
            try:
                process = psutil.Process(pid)
                seconds = _cpu_seconds(process)
            except psutil.Error:  # already gone
                continue
            self.tracked[pid] = process
            self.children[pid] = (process, seconds, seconds)  # counted from now

    def restart(self) -> None:
        self.started = time.perf_counter()
        self.system_start = self._system()
        self.main_start = _cpu_seconds(self.process)
        self.children: dict[int, tuple[psutil.Process, float, float]] = {}  # pid: (proc, start, last)
        self._update_children(initial=True)
        self.sampled = float("-inf")
        if self.cuda:
            import torch

            torch.cuda.reset_peak_memory_stats()

    def _system(self) -> tuple[float, float]:
        """(busy seconds, stolen seconds) summed over this process's CPUs."""
        per_cpu = psutil.cpu_times(percpu=True)
        ours = [per_cpu[i] for i in self.cpu_ids if i < len(per_cpu)]
        return sum(_busy(t) for t in ours), sum(getattr(t, "steal", 0.0) for t in ours)

    def _update_children(self, initial: bool = False) -> None:
        """CPU seconds of each child process; a child born after restart() counts from zero,
        and one that exited keeps its last reading."""
        for child in [*self.process.children(recursive=True), *self.tracked.values()]:
            try:
                seconds = _cpu_seconds(child)
            except psutil.Error:  # exited meanwhile
                continue
            known = self.children.get(child.pid)
            start = known[1] if known else (seconds if initial else 0.0)
            self.children[child.pid] = (child, start, seconds)

    def _workers(self) -> tuple[float, float]:
        """(CPU seconds since restart, resident MB) of the child processes."""
        self._update_children()
        seconds = rss = 0.0
        for child, start, last in self.children.values():
            seconds += last - start
            try:
                rss += child.memory_info().rss
            except psutil.Error:
                pass
        return seconds, rss / 2**20

    def metrics(self) -> dict[str, float]:
        """perf/cpu_{main,workers,others,steal}_pct, perf/mem_*_mb, and perf/gpu_* on CUDA. At most
        one new sample per MIN_INTERVAL_S; in between, the last one."""
        now = time.perf_counter()
        if now - self.sampled < MIN_INTERVAL_S and self.last:
            return dict(self.last)
        self.sampled = now
        wall = max(now - self.started, 1e-9)
        capacity = wall * len(self.cpu_ids) / 100.0  # CPU seconds per percent
        busy, steal = (a - b for a, b in zip(self._system(), self.system_start, strict=True))
        main = _cpu_seconds(self.process) - self.main_start
        workers, workers_rss = self._workers()
        others = max(0.0, busy - main - workers)
        self.last = {
            "perf/cpus": len(self.cpu_ids),
            "perf/cpu_main_pct": main / capacity,
            "perf/cpu_workers_pct": workers / capacity,
            "perf/cpu_others_pct": others / capacity,
            "perf/cpu_steal_pct": steal / capacity,
            "perf/mem_main_mb": self.process.memory_info().rss / 2**20,
            "perf/mem_workers_mb": workers_rss,
            "perf/mem_available_mb": psutil.virtual_memory().available / 2**20,
            **self._gpu(),
        }
        return dict(self.last)

    def _gpu(self) -> dict[str, float]:
        if not self.cuda:
            return {}
        import torch

        out = {"perf/gpu_mem_peak_mb": torch.cuda.max_memory_allocated() / 2**20,
               "perf/gpu_mem_reserved_mb": torch.cuda.memory_reserved() / 2**20}
        try:  # NVML through the nvidia-ml-py package, when installed
            out["perf/gpu_util_pct"] = float(torch.cuda.utilization())
        except (ModuleNotFoundError, RuntimeError):
            pass
        return out
