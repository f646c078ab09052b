"""Native batched CartPole vs gymnasium's CartPole: env steps/second on one core, one run.

    python bench/ocean.py [--seconds 2] [--num-envs 4096]

Rows: gymnasium CartPole-v1 stepped in a Python loop (the reference), and puffer's
ocean/cartpole stepping `num_rows` carts per call with numpy. Target: >= 5M steps/s.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import print_table, rate  # noqa: E402

from puffer.envs.ocean import CartPole  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--num-rows", type=int, default=4096)
    args = parser.parse_args()

    reference = gym.make("CartPole-v1")
    reference.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 2, 1000).tolist()

    def gym_steps() -> int:
        for action in actions:
            _, _, term, trunc, _ = reference.step(action)
            if term or trunc:
                reference.reset()
        return len(actions)

    env = CartPole(num_rows=args.num_rows)
    env.reset(0)
    batch = np.random.default_rng(0).integers(0, 2, (16, args.num_rows))

    def ocean_steps() -> int:
        for row in batch:
            env.step(row)
        return batch.size

    gym_sps, ocean_sps = rate(gym_steps, args.seconds), rate(ocean_steps, args.seconds)
    print_table(["env", "steps/second", "vs gymnasium"], [
        ["gymnasium CartPole-v1, Python loop", gym_sps, "1.0x"],
        [f"ocean/cartpole, {args.num_rows} carts per step", ocean_sps, f"{ocean_sps / gym_sps:.0f}x"],
    ])
    print(f"target >= 5M steps/s: {'ok' if ocean_sps >= 5e6 else 'MISSED'}")


if __name__ == "__main__":
    main()
