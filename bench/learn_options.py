"""Trainer options against the default, env by env: does V-trace, prioritized sampling, Muon, a
cosine schedule or the second algorithm (SPO, `train=spo`) learn better at the same env steps?

    python bench/learn_options.py [--options vtrace prio muon cosine spo] [--envs cartpole ...]
                                  [--seeds 0 1 2] [--out DIR]

Each (env, option, seed) is one `python -m puffer` run of the env's shipped config with the
option's overrides, evaluated with the standard protocol (bench/learn_suite.py: 10 deterministic
episodes on held-out seeds). Results are kept as JSON files in --out, so a second invocation with
more options or seeds reuses the runs already made. Runs alternate between options seed by seed,
so a busy machine slows all options alike.

Prints per env and option: the mean evaluation return over seeds with its Student's t 95%
interval, the wall time, and the verdict against the default: "better"/"worse" only where the
two intervals do not overlap, else "same". An option becomes a default only on "better".
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import compare, print_table  # noqa: E402
from learn_suite import run_puffer  # noqa: E402

from puffer.report.stats import t_interval  # noqa: E402

# env config -> (its short name, the steps of this benchmark, overrides every run of it takes).
# Short budgets for this 2-core CPU; Breakout uses its workers' half batches.
ENVS = {
    "cartpole": ("classic/cartpole", 100_000, []),
    "acrobot": ("classic/acrobot", 100_000, []),
    "lunarlander": ("box2d/lunarlander", 300_000, []),
    "breakout": ("atari/breakout", 50_000, ["vec=multiprocessing", "vec.num_workers=2"]),
}
# option -> overrides (PufferLib 3.0's values for its options: rho and c clips 1, alpha 0.8,
# beta annealed from 0.2)
OPTIONS = {
    "default": [],
    "vtrace": ["train.vtrace=true"],
    "prio": ["train.prioritized=true"],
    "muon": ["train.optimizer=muon"],
    # annealed along a cosine, also where the env's config keeps the LR constant (zoo settings)
    "cosine": ["train.anneal_lr=true", "train.lr_schedule=cosine"],
    "spo": ["train=spo"],  # the second algorithm (puffer.training.spo), not an option of PPO
}


def result(out: Path, env: str, option: str, seed: int) -> dict:
    """One run's {return, wall}, made now unless --out already holds it."""
    path = out / f"{env}-{option}-{seed}.json"
    if path.exists():
        return json.loads(path.read_text())
    config, steps, overrides = ENVS[env]
    value, wall = run_puffer(config, seed, steps, out / option, [*overrides, *OPTIONS[option]])
    record = {"return": value, "wall": wall}
    path.write_text(json.dumps(record))
    logging.info("%s %s seed %d: %.1f in %.0f s", env, option, seed, value, wall)
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--options", nargs="*", default=[o for o in OPTIONS if o != "default"],
                        choices=[o for o in OPTIONS if o != "default"])
    parser.add_argument("--envs", nargs="*", default=list(ENVS), choices=list(ENVS))
    parser.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2])
    parser.add_argument("--out", default="outputs/learn_options", help="where the runs and results go")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    options = ["default", *args.options]
    rows = []
    for env in args.envs:
        runs = {option: [] for option in options}
        for seed in args.seeds:
            for option in options:
                runs[option].append(result(out, env, option, seed))
        default = [r["return"] for r in runs["default"]]
        for option in options:
            returns = [r["return"] for r in runs[option]]
            wall = sum(r["wall"] for r in runs[option])
            rows.append([env, f"{ENVS[env][1] // 1000}k", option, len(returns),
                         f"{np.mean(returns):.1f} +- {t_interval(returns):.1f}", f"{wall:.0f}",
                         "-" if option == "default" else compare(returns, default)])
    print_table(["env", "steps", "option", "seeds", "return (t 95%)", "wall s (all seeds)",
                 "vs default"], rows)
    print(f"runs in {out}")


if __name__ == "__main__":
    main()
