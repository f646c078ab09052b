"""The thread policy: how many CPU threads torch may use, so that a run never oversubscribes.

What lives here: the CPUs this process may use (affinity, cgroup quota), its share of them (jobs a
Hydra launcher runs side by side, an explicit `OMP_NUM_THREADS` such as torchrun's), the work of
one learning step (FLOPs, by torch's formulas), and `plan()`, which turns these into a `ThreadPlan`:
torch intra-op threads while learning and while collecting. What does not: applying the plan
(puffer.training.ppo switches threads between its phases) or the OpenMP wait policy (puffer/__init__.py,
which must run before torch loads OpenMP).

Why: OpenMP threads that wait on each other for a core another process holds make torch 6-17x
slower on a busy machine (2 cores: the default CartPole run 23 s alone, 166 s each with a second
one beside it). So a run takes only the threads that measurably help its model (bench/threads.py:
small MLPs gain nothing from a second thread), never more than its share of the CPUs. The plan
depends on the machine, the launcher and the model, never on the momentary load: the same seed
gives the same result on a quiet or a busy machine. It is logged once and saved in checkpoints, so
that a resumed run keeps the thread counts (and so the float summation order) it started with.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path

log = logging.getLogger(__name__)

# A learner gets one more thread per this many FLOPs of one minibatch step (forward and
# backward); below it a second thread costs more in synchronisation than it saves. bench/threads.py
# on 2 cores, 2 threads vs 1: 14 MFLOP (CartPole's MLP) 0.81x, 111 MFLOP 0.97x, 1.0 GFLOP (MLP
# 256x2) 1.08x, 1.4 GFLOP (a small CNN) 1.43x, 14 GFLOP (Nature CNN) 1.78x, 31 GFLOP 1.98x.
FLOPS_PER_EXTRA_THREAD = 1e9


@dataclass(frozen=True)
class ThreadPlan:
    """Torch intra-op threads while learning and while collecting, and why."""

    learn: int
    rollout: int
    cpus: int  # CPUs this process may use
    share: int  # of which this job may use (parallel jobs, OMP_NUM_THREADS)
    why: str  # where the share came from, for the log

    def describe(self) -> str:
        return (f"torch threads: {self.learn} learning, {self.rollout} collecting "
                f"({self.share} of {self.cpus} usable CPUs for this job: {self.why})")

    def metrics(self) -> dict[str, float]:
        return {"perf/threads_learn": self.learn, "perf/threads_rollout": self.rollout,
                "perf/cpu_share": self.share}

    def state_dict(self) -> dict:
        return asdict(self)


def cgroup_cpu_limit(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """CPUs allowed by a cgroup quota (v2 `cpu.max`, v1 `cpu.cfs_quota_us`); None if unlimited."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota <= 0 or period <= 0 else quota / period


def affinity_cpus() -> list[int]:
    """The ids of the CPUs this process may run on (its affinity mask; every CPU off Linux)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return list(range(os.cpu_count() or 1))


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity mask, capped by a cgroup quota."""
    cpus = len(affinity_cpus())
    limit = cgroup_cpu_limit()
    if limit is not None:
        cpus = min(cpus, max(1, math.ceil(limit)))
    return max(1, cpus)


def launcher_jobs(cpus: int) -> tuple[int | None, str]:
    """(CPUs per job, why) when a Hydra launcher runs jobs side by side, else (None, '').

    joblib runs `n_jobs` jobs on this machine at once; Ray reserves `remote.num_cpus` per job.
    The basic launcher runs one job at a time, and SLURM gives each job its own CPUs (the
    affinity mask already says how many)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None, ""
    launcher = HydraConfig.get().get("launcher") or {}
    target = str(launcher.get("_target_", ""))
    if "joblib" in target.lower():
        n_jobs = launcher.get("n_jobs")
        n_jobs = cpus + 1 + n_jobs if isinstance(n_jobs, int) and n_jobs < 0 else n_jobs or 1
        n_jobs = max(1, min(int(n_jobs), cpus))
        return max(1, cpus // n_jobs), f"joblib launcher, n_jobs={launcher.get('n_jobs')}"
    if "ray" in target.lower():
        num_cpus = (launcher.get("ray") or {}).get("remote", {}).get("num_cpus")
        if num_cpus:
            return max(1, int(num_cpus)), f"Ray launcher, remote.num_cpus={num_cpus}"
    return None, ""


def env_thread_limit() -> int | None:
    """An explicit OMP_NUM_THREADS (torchrun sets 1 for each rank, joblib's workers their share)."""
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def cpu_share() -> tuple[int, int, str]:
    """(usable CPUs, this job's share of them, why)."""
    cpus = usable_cpus()
    share, why = launcher_jobs(cpus)
    share, why = (cpus, "the whole machine") if share is None else (min(share, cpus), why)
    limit = env_thread_limit()
    if limit is not None and limit < share:
        share, why = limit, f"OMP_NUM_THREADS={limit}"
    return cpus, share, why


def forward_flops(policy, observation_space, rows: int) -> int:
    """FLOPs of one forward pass of `policy` over `rows` observations (counted with torch's
    FLOP formulas on a single zero observation, times rows)."""
    import numpy as np
    import torch

    device = next(iter(policy.parameters()), torch.empty(0)).device
    counter = _flop_counter()
    with torch.no_grad():
        obs = torch.from_numpy(np.zeros((1, *observation_space.shape), observation_space.dtype))
        with counter:
            policy(obs.to(device))
    return int(counter.flops) * rows


def _flop_counter():
    """A dispatch mode that adds up torch's FLOP formulas (torch.utils.flop_counter's registry)
    over the ops run inside it. Not torch's FlopCounterMode: any dispatch mode of torch's default
    kind imports torch._dynamo on its first op (1 s of every run's start-up, for a count of a few
    microseconds), and its module tracker hooks gradients that a count does not need."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import flop_registry

    class FlopCount(TorchDispatchMode):
        @classmethod
        def _should_skip_dynamo(cls) -> bool:  # (nothing here is compiled)
            return False

        def __init__(self):
            super().__init__()
            self.flops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func._overloadpacket not in flop_registry:  # an op without a formula, in ops with one
                with self:
                    out = func.decompose(*args, **kwargs)
                if out is not NotImplemented:
                    return out
            out = func(*args, **kwargs)
            if func._overloadpacket in flop_registry:
                self.flops += flop_registry[func._overloadpacket](*args, **kwargs, out_val=out)
            return out

    return FlopCount()


def learn_step_flops(policy, observation_space, rows: int) -> int:
    """FLOPs of one minibatch step: the forward pass and a backward pass of twice its cost."""
    return 3 * forward_flops(policy, observation_space, rows)


def threads_for(flops: float, share: int) -> int:
    """Threads that help a step of `flops`: one per FLOPS_PER_EXTRA_THREAD, within the share."""
    return max(1, min(share, 1 + int(flops // FLOPS_PER_EXTRA_THREAD)))


def plan(policy, observation_space, minibatch_rows: int, rollout_rows: int,
         env_processes: int = 0, torch_threads: int = 0, rollout_threads: int = 0,
         device: str = "cpu") -> ThreadPlan:
    """The thread plan of a trainer.

    `minibatch_rows`: samples per learning step; `rollout_rows`: observations per forward pass
    while collecting; `env_processes`: other processes stepping envs while the trainer collects
    (they need cores of their own then, and sleep while it learns). `torch_threads` and
    `rollout_threads` > 0 are the user's explicit choice and win. On a GPU the model's work is
    not the CPU's: one thread each, unless asked for more."""
    import torch

    cpus, share, why = cpu_share()
    if torch.device(device).type != "cpu":
        return ThreadPlan(learn=torch_threads or 1, rollout=rollout_threads or 1, cpus=cpus,
                          share=share, why=f"{why}; the model runs on {device}")
    learn = torch_threads or threads_for(learn_step_flops(policy, observation_space, minibatch_rows), share)
    if rollout_threads:
        rollout = rollout_threads
    else:
        rollout_share = max(1, share - env_processes)
        rollout = min(learn, threads_for(forward_flops(policy, observation_space, rollout_rows), rollout_share))
    return ThreadPlan(learn=learn, rollout=rollout, cpus=cpus, share=share, why=why)


def resumed(current: ThreadPlan, saved: dict, runtime) -> ThreadPlan:
    """The plan of a resumed run: the checkpoint's thread counts (thread counts change float
    summation order, so keeping them keeps a resume bit-identical), unless runtime.torch_threads
    or runtime.rollout_threads now ask for others explicitly."""
    learn = runtime.torch_threads or saved["learn"]
    rollout = runtime.rollout_threads or saved["rollout"]
    if (learn, rollout) != (current.learn, current.rollout):
        log.warning("resuming with %d learning and %d collecting torch threads as the checkpoint "
                    "ran (this machine and job would pick %d and %d)", learn, rollout,
                    current.learn, current.rollout)
    return replace(current, learn=learn, rollout=rollout)


def inference_threads(policy, observation_space, rows: int) -> int:
    """Threads for forward passes over `rows` observations (evaluation), within this job's share."""
    return threads_for(forward_flops(policy, observation_space, rows), cpu_share()[1])


@contextlib.contextmanager
def using(n: int):
    """Torch intra-op threads set to `n` inside the block, restored after."""
    import torch

    before = torch.get_num_threads()
    if n != before:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if n != before:
            torch.set_num_threads(before)
