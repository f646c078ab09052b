"""Runs side by side: does each run keep its speed when others run beside it on the same machine?

    python bench/contention.py [--cases cartpole,ocean,breakout] [--max-runs 3] [--reference]

For each case, one run alone, then 2 and 3 identical runs at once (`python -m puffer` with the
case's default settings and a short budget), and each run's wall time. Target (issue 24): with k
runs on c CPUs, each run within 1.25 * max(1, k * t / c) of its solo time, t being the CPUs a run
keeps busy alone (its CPU seconds / wall time, rounded). `--reference` repeats 1 and 2 runs at
once with the thread settings puffer had before its thread policy (torch threads = all CPUs for
learning and, with Serial envs, collecting; libgomp's default OpenMP spin), side by side. Last, a
Hydra sweep of 3 seeds through the joblib launcher (3 jobs at once) against the basic launcher
(one after another): the parallel launcher should be at least as fast.

Check `uptime` first: the point is the runs' effect on each other, not a third party's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import print_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CASES = {
    "cartpole": ["env=classic/cartpole"],  # gymnasium CartPole-v1, rl-zoo settings, 100k steps
    "ocean": ["env=ocean/cartpole"],  # native batched CartPole, 500k steps
    "breakout": ["env=atari/breakout", "vec=multiprocessing", "train.total_timesteps=8192",
                 "eval.episodes=0"],
}
SERIAL = {"cartpole", "ocean"}


def reference_overrides(case: str, cpus: int) -> tuple[list[str], dict[str, str]]:
    """The thread settings before the thread policy: all CPUs, libgomp's default spin."""
    overrides = [f"runtime.torch_threads={cpus}"]
    if case in SERIAL:
        overrides.append(f"runtime.rollout_threads={cpus}")
    return overrides, {"GOMP_SPINCOUNT": "300000"}


def run_at_once(overrides: list[str], k: int, env: dict[str, str], workdir: Path) -> list[tuple[float, float]]:
    """(wall seconds, CPU seconds incl. its workers) of each of k runs started together."""
    started, procs = time.perf_counter(), []
    for i in range(k):
        args = [sys.executable, "-m", "puffer", *overrides, f"hydra.run.dir={workdir / f'run{i}'}"]
        procs.append(subprocess.Popen(args, cwd=ROOT, env={**os.environ, **env},
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    results: dict[int, tuple[float, float]] = {}
    while len(results) < k:
        pid, status, usage = os.wait4(-1, 0)
        proc = next(p for p in procs if p.pid == pid)
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"a run failed: {proc.args}\n{proc.stderr.read().decode()[-2000:]}")
        results[pid] = (time.perf_counter() - started, usage.ru_utime + usage.ru_stime)
    for proc in procs:
        proc.returncode = 0  # reaped by wait4 above
        proc.stderr.close()
    return [results[p.pid] for p in procs]


def contention_rows(case: str, max_runs: int, cpus: int, reference: bool, workdir: Path) -> list[list]:
    rows = []
    policies = [("puffer", CASES[case], {})]
    if reference:
        extra, env = reference_overrides(case, cpus)
        policies.append(("before", CASES[case] + extra, env))
    for name, overrides, env in policies:
        (solo, cpu_s), = run_at_once(overrides, 1, env, workdir)
        t = max(1, min(cpus, round(cpu_s / solo)))
        rows.append([case, name, 1, solo, 1.0, 1.25, "ok"])
        for k in range(2, (2 if name == "before" else max_runs) + 1):
            walls = [wall for wall, _ in run_at_once(overrides, k, env, workdir)]
            bound = 1.25 * max(1.0, k * t / cpus)
            ratio = max(walls) / solo
            rows.append([case, name, k, max(walls), ratio, bound, "ok" if ratio <= bound else "MISSED"])
    return rows


def sweep_wall(launcher: list[str], workdir: Path) -> float:
    args = [sys.executable, "-m", "puffer", "-m", *launcher, "seed=0,1,2", f"hydra.sweep.dir={workdir}"]
    started = time.perf_counter()
    subprocess.run(args, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default="cartpole,ocean,breakout")
    parser.add_argument("--max-runs", type=int, default=3)
    parser.add_argument("--reference", action="store_true")
    parser.add_argument("--no-sweep", action="store_true")
    args = parser.parse_args()
    cpus = len(os.sched_getaffinity(0))
    print(f"{cpus} CPUs; load average {os.getloadavg()[0]:.2f} before")
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for case in args.cases.split(","):
            rows += contention_rows(case, args.max_runs, cpus, args.reference, Path(tmp) / case)
        print_table(["case", "threads", "runs at once", "slowest run s", "x solo", "target <=", ""], rows)
        if args.no_sweep:
            return
        joblib = sweep_wall(["hydra/launcher=local_parallel", "hydra.launcher.n_jobs=3"], Path(tmp) / "joblib")
        basic = sweep_wall([], Path(tmp) / "basic")
        print()
        print_table(["CartPole sweep, seeds 0-2", "wall s", "x basic", ""],
                    [["basic launcher (one at a time)", basic, 1.0, ""],
                     ["joblib launcher, n_jobs=3", joblib, joblib / basic, "ok" if joblib <= basic else "MISSED"]])


if __name__ == "__main__":
    main()
