"""A study of N seeds, the unit a researcher waits for: the wall time of the whole study on this
machine, puffer's batch of members (one process) beside the same seeds as separate runs and
beside SB3 + rl-baselines3-zoo's settings; the final returns with intervals.

    python bench/study.py [--env classic/cartpole] [--seeds 16] [--jobs 2] [--solo all|none]
                          [--reference sb3|none] [--side-by-side P] [--repeat R] [--out DIR]
                          [puffer overrides ...]

Rows, each timed from its processes' start to their end (training and the final evaluation):
- `puffer members, vec=...`: the N seeds as one batch (puffer.batch.train_batch: what
  `python -m puffer -m hydra/launcher=members seed=0,...` runs), one process, its own threads;
  once with the shipped vec.backend (serial) and once with vec=multiprocessing (--members-vec).
- `puffer members, P batches side by side` (--side-by-side P): the N seeds through the members
  launcher with hydra.launcher.processes=P and vec=serial: P batches, each in a child process
  with its share of the CPUs.
- `puffer one seed`: seed 0 alone, the unit of the issue's targets (the batch against one run).
- `puffer solo x N`: the N seeds as separate `puffer.train` runs, --jobs at a time, one thread each
  (--solo none skips it).
- `SB3 + zoo x N`: SB3 PPO with the zoo's settings (bench/learn_suite.py), --jobs at a time, one
  thread each (needs `pip install -e ".[bench]"`; --reference none skips it).
Columns: wall seconds (with --repeat R, every row runs R times in turn, as this shared machine's
speed drifts by a third over minutes: the median [min, max]); that time in
units of one puffer seed (the medians'); the row's time over the faster
members batch's (how much longer the study takes that way); agent steps per second (all seeds' steps
over the wall time); the final return (10 held-out episodes of puffer's protocol per seed,
deterministic), mean and Student's t 95% interval over seeds; seeds at the env's score; the
row's mean final return minus the faster members batch's with Welch's t 95% interval (an interval
that holds 0: no difference detected).
Check `uptime` first: every row shares the machine, so run nothing else beside it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import print_table  # noqa: E402
from learn_suite import SUITE  # noqa: E402
from time_to_score import THRESHOLDS, budget  # noqa: E402

from puffer.report.stats import t_interval  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EPISODES = 10


def members_job(env: str, seeds: list[int], out: Path, overrides: list[str]) -> list[float]:
    from puffer.batch import train_batch

    results = train_batch(f"env={env}", f"eval.episodes={EPISODES}", *overrides, seeds=seeds, run_dir=out)
    return [r["eval/return_mean"] for r in results]


def side_by_side_job(env: str, seeds: list[int], out: Path, overrides: list[str]) -> list[float]:
    """The seeds through the members launcher with hydra.launcher.processes (in `overrides`): its
    batches side by side in child processes, each job's final evaluation read from its metrics."""
    from puffer.loggers.base import read_metrics

    sweep = out / "multirun"
    args = [sys.executable, "-m", "puffer", "-m", "hydra/launcher=members", f"env={env}",
            f"seed={','.join(map(str, seeds))}", f"eval.episodes={EPISODES}", *overrides, f"hydra.sweep.dir={sweep}"]
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"members launcher failed:\n{done.stderr[-3000:]}")
    return [read_metrics(sweep / str(job) / "metrics.jsonl")[-1]["eval/return_mean"] for job in range(len(seeds))]


def solo_job(env: str, seed: int, out: Path, overrides: list[str]) -> list[float]:
    import puffer

    result = puffer.train(f"env={env}", f"seed={seed}", f"eval.episodes={EPISODES}", *overrides, run_dir=out)
    return [result.metrics["eval/return_mean"]]


def sb3_job(env: str, seed: int, out: Path, overrides: list[str]) -> list[float]:
    from learn_suite import sb3_evaluate, sb3_setup

    model, venv, normalize = sb3_setup(env, seed)
    model.learn(SUITE[env][3])
    return [sb3_evaluate(model, venv if normalize else None, env, seed)]


JOBS = {"members": members_job, "side_by_side": side_by_side_job, "solo": solo_job, "sb3": sb3_job}


def launch(kind: str, env: str, seeds: list[int], out: Path, overrides: list[str], threads: int | None) -> list[float]:
    """One job in a process of its own (`threads`: its OMP/torch threads, None: its own choice)."""
    out.mkdir(parents=True, exist_ok=True)
    result = out / "returns.json"
    args = [sys.executable, __file__, "--job", kind, env, ",".join(map(str, seeds)), str(out), *overrides]
    if threads is not None and kind != "sb3":
        args.append(f"runtime.torch_threads={threads}")
    env_vars = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"}
    if threads is not None:
        env_vars["OMP_NUM_THREADS"] = str(threads)
    done = subprocess.run(args, capture_output=True, text=True, env=env_vars)
    if done.returncode != 0:
        raise RuntimeError(f"{kind} {env} {seeds} failed:\n{done.stderr[-3000:]}")
    return json.loads(result.read_text())


def timed(kind: str, env: str, groups: list[list[int]], out: Path, overrides: list[str], jobs: int,
          threads: int | None) -> tuple[float, list[float]]:
    """Wall seconds of running every group of seeds (one process each, `jobs` at a time), and
    the seeds' final returns."""
    started = time.perf_counter()
    with ThreadPoolExecutor(jobs) as pool:
        parts = list(pool.map(lambda seeds: launch(kind, env, seeds, out / f"{kind}-{seeds[0]}-{len(seeds)}",
                                                   overrides, threads), groups))
    wall = time.perf_counter() - started
    returns = [r for part in parts for r in part]
    logging.info("%s: %d seeds in %.1f s, returns %s", kind, len(returns), wall, [round(r, 1) for r in returns])
    return wall, returns


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--job":
        kind, env, seeds, out, *overrides = sys.argv[2:]
        chosen = [int(s) for s in seeds.split(",")]
        returns = JOBS[kind](env, chosen if kind in ("members", "side_by_side") else chosen[0], Path(out), overrides)
        (Path(out) / "returns.json").write_text(json.dumps(returns))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="classic/cartpole")
    parser.add_argument("--seeds", type=int, default=16)
    parser.add_argument("--jobs", type=int, default=2, help="separate runs at once")
    parser.add_argument("--solo", choices=["all", "none"], default="all")
    parser.add_argument("--reference", choices=["sb3", "none"], default="sb3")
    parser.add_argument("--members-vec", nargs="+", default=["vec=serial", "vec=multiprocessing"],
                        help="the members batch once with each (its N x vec.num_envs envs step in this process, "
                             "or in worker processes on the other cores)")
    parser.add_argument("--side-by-side", type=int, default=0, metavar="P",
                        help="also the seeds through the members launcher as P batches side by side "
                             "(hydra.launcher.processes=P, vec=serial)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run every row this many times, in turn; the rows show the median wall "
                             "time [min, max]")
    parser.add_argument("--out", default="outputs/study")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    out = Path(args.out) / time.strftime("%Y%m%d-%H%M%S")
    seeds = list(range(args.seeds))
    env_id = SUITE[args.env][0] if args.env in SUITE else args.env
    score = THRESHOLDS.get(env_id)
    # every row in turn, --repeat times: each ratio's two sides are measured through the same
    # slow and fast minutes of this shared machine (the SB3 row alone took 214 s and 288 s on two
    # runs of one day, the members' batch 46 s and 49 s)
    repeated: dict[str, list] = {}
    for _ in range(args.repeat):
        for vec in args.members_vec:
            repeated.setdefault(f"puffer members, {vec}", []).append(timed(
                "members", args.env, [seeds], out / vec.replace("=", "-"), [*args.overrides, vec], 1, None))
        if args.side_by_side > 1:
            repeated.setdefault(f"puffer members, {args.side_by_side} batches side by side, vec=serial", []).append(
                timed("side_by_side", args.env, [seeds], out / "side-by-side",
                      [*args.overrides, f"hydra.launcher.processes={args.side_by_side}", "vec=serial"], 1, None))
        repeated.setdefault("puffer one seed", []).append(
            timed("solo", args.env, [[0]], out / "one", args.overrides, 1, None))
        if args.solo == "all":
            repeated.setdefault(f"puffer solo x {args.seeds}, {args.jobs} at a time", []).append(timed(
                "solo", args.env, [[s] for s in seeds], out, args.overrides, args.jobs, 1))
        if args.reference == "sb3":
            repeated.setdefault(f"SB3 + zoo x {args.seeds}, {args.jobs} at a time", []).append(timed(
                "sb3", args.env, [[s] for s in seeds], out, [], args.jobs, 1))
    rows = {name: (float(np.median([wall for wall, _ in runs])), runs[0][1]) for name, runs in repeated.items()}
    spread = {name: [wall for wall, _ in runs] for name, runs in repeated.items()}
    one = rows["puffer one seed"][0]
    batch = min(wall for name, (wall, _) in rows.items() if name.startswith("puffer members"))
    steps = budget(args.env, args.overrides)  # one seed's training steps, as puffer composes them
    fastest = min((name for name in rows if name.startswith("puffer members")), key=lambda name: rows[name][0])
    table = []
    for name, (wall, returns) in rows.items():
        agent_steps = steps * len(returns)
        at_score = "-" if score is None else f"{sum(r >= score for r in returns)}/{len(returns)}"
        walls = spread.get(name, [wall])
        shown = f"{wall:.0f}" if len(walls) == 1 else f"{wall:.0f} [{min(walls):.0f}, {max(walls):.0f}]"
        table.append([name, shown, f"{wall / one:.2f}", f"{wall / batch:.2f}",
                      f"{agent_steps / wall:,.0f}",
                      f"{np.mean(returns):.1f} +- {t_interval(returns):.1f}", at_score,
                      welch(returns, rows[fastest][1])])
    print(f"{args.env}, {args.seeds} seeds, uptime {os.getloadavg()[0]:.2f} at the end; results in {out}")
    print_table(["study", "wall s", "x one seed", "x members", "agent steps/s", "final return (t95)", "at score",
                 "- members (Welch 95%)"], table)


def welch(returns: list[float], members: list[float]) -> str:
    """The row's mean final return minus the members batch's, with Welch's t 95% interval
    (exact where neither side varies); '-' with fewer than 2 seeds a side."""
    from scipy import stats

    x, y = np.asarray(returns, dtype=float), np.asarray(members, dtype=float)
    if len(x) < 2 or len(y) < 2:
        return "-"
    difference = x.mean() - y.mean()
    if x.std() == 0 and y.std() == 0:
        return f"{difference:+.1f} (exact)"
    interval = stats.ttest_ind(x, y, equal_var=False).confidence_interval(0.95)
    return f"{difference:+.1f} [{interval.low:+.1f}, {interval.high:+.1f}]"


if __name__ == "__main__":
    main()
