"""Learning on Atari: train a game for a number of agent steps, report the full-game return.

    python bench/learn_atari.py [--game breakout] [--steps 1000000] [--seeds 0 1 2]

Each seed is one `python -m puffer env=atari/<game> vec=multiprocessing` run (CleanRL's
ppo_atari settings) evaluated on full games with true rewards (10 episodes, deterministic and
stochastic policies, seeds apart from training's). Prints one row per seed and the mean with
its spread over seeds. Target for Breakout at 1M steps: >= 10.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import print_table  # noqa: E402

import puffer.config  # noqa: E402,F401
from puffer.run import run  # noqa: E402

CONF = Path(__file__).resolve().parents[1] / "conf"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--game", default="breakout")
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--seeds", type=int, nargs="*", default=[0])
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    rows, returns = [], []
    for seed in args.seeds:
        overrides = [f"env=atari/{args.game}", "vec=multiprocessing", f"seed={seed}",
                     f"train.total_timesteps={args.steps}", *args.overrides]
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose(config_name="config", overrides=overrides)
        started = time.perf_counter()
        run_dir = tempfile.mkdtemp(prefix=f"puffer-{args.game}-{seed}-")
        m = run(cfg, run_dir)
        returns.append(m["eval/return_mean"])
        rows.append([seed, m["eval/return_mean"], m["eval/return_ci95"],
                     m["eval/stochastic_return_mean"], m["env/episode_return"], m["perf/sps"],
                     time.perf_counter() - started, run_dir])
    print_table(["seed", "eval return", "+- 95%", "stochastic", "last train games", "SPS",
                 "wall s", "run dir"], rows)
    spread = float(np.std(returns, ddof=1)) if len(returns) > 1 else 0.0
    print(f"{args.game} at {args.steps:,} steps: {np.mean(returns):.1f} +- {spread:.1f} "
          f"(mean +- std over {len(returns)} seeds)")


if __name__ == "__main__":
    main()
