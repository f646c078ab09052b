"""Profiler overhead: training steps/second with the profiler on vs off, in one run.

    python bench/profiler.py [--rounds 4] [--steps 131072]

Trains PPO on ocean/cartpole (the fastest loop, so the per-section cost weighs the most) with
the same seed, alternating on/off rounds; reports the median SPS of each and the overhead.
Target: <= 2%.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import print_table  # noqa: E402

import puffer.vector  # noqa: E402
from puffer.config import TrainConfig  # noqa: E402
from puffer.envs.ocean import CartPole  # noqa: E402
from puffer.monitor.profiler import Profiler  # noqa: E402
from puffer.policies.networks import Default  # noqa: E402
from puffer.training.ppo import PPO, seed_everything  # noqa: E402


def train_sps(enabled: bool, steps: int) -> float:
    seed_everything(0)
    vec = puffer.vector.make(CartPole, env_kwargs={"num_rows": 256}, num_envs=1)
    policy = Default(vec.single_observation_space, vec.single_action_space, activation="relu")
    config = TrainConfig(total_timesteps=steps, num_steps=32, num_minibatches=4, update_epochs=4,
                         learning_rate=0.003, clip_vloss=False)
    trainer = PPO(config, vec, policy, profiler=Profiler(enabled=enabled))
    metrics = trainer.train()
    vec.close()
    return metrics["perf/sps"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=131_072)
    args = parser.parse_args()
    torch.set_num_threads(1)
    on, off = [], []
    for _ in range(args.rounds):
        off.append(train_sps(False, args.steps))
        on.append(train_sps(True, args.steps))
    ratio = float(np.median(np.array(on) / np.array(off)))
    overhead = 100 * (1 - ratio)
    print_table(["profiler", "median SPS", "rounds"], [["off", float(np.median(off)), args.rounds],
                                                      ["on", float(np.median(on)), args.rounds]])
    print(f"overhead: {overhead:.2f}% (target <= 2%: {'ok' if overhead <= 2 else 'MISSED'})")


if __name__ == "__main__":
    main()
