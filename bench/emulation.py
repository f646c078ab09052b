"""Emulation overhead: steps/second of a raw gymnasium env vs the same env wrapped by puffer.

    python bench/emulation.py [--seconds 0.5] [--rounds 12]

Both are stepped in one process with the same pre-sampled random actions, in short alternating
rounds; the table shows medians, and the ratio is the median of the per-round ratios, so that
machine drift hits both alike. Target: overhead <= 10% on CartPole, <= 3% on Breakout.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import print_table, rate  # noqa: E402

from puffer.emulation import GymnasiumPufferEnv  # noqa: E402

TARGETS = {"CartPole-v1": 10.0, "ALE/Breakout-v5": 3.0}


def make(env_id: str) -> gym.Env:
    if env_id.startswith("ALE/"):
        import ale_py

        gym.register_envs(ale_py)
    return gym.make(env_id)


def raw_loop(env_id: str, actions: np.ndarray):
    env = make(env_id)
    env.reset(seed=0)
    cursor = iter(np.resize(actions, 10**7).reshape(-1, 1))

    def step() -> int:
        for _ in range(100):
            _, _, term, trunc, _ = env.step(int(next(cursor)[0]))
            if term or trunc:
                env.reset()
        return 100

    return step


def puffer_loop(env_id: str, actions: np.ndarray):
    env = GymnasiumPufferEnv(env=make(env_id))
    env.reset(0)
    cursor = iter(np.resize(actions, 10**7).reshape(-1, 1))

    def step() -> int:
        for _ in range(100):
            env.step(next(cursor))  # resets itself on the step after an episode ends
        return 100

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=0.5, help="length of one round")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--envs", nargs="*", default=list(TARGETS))
    args = parser.parse_args()
    rows = []
    for env_id in args.envs:
        actions = np.random.default_rng(0).integers(0, make(env_id).action_space.n, 100_000)
        raw, wrapped = raw_loop(env_id, actions), puffer_loop(env_id, actions)
        raws, puffers = [], []
        for _ in range(args.rounds):  # short alternating rounds: drift hits both alike
            raws.append(rate(raw, args.seconds))
            puffers.append(rate(wrapped, args.seconds))
        ratio = float(np.median(np.array(puffers) / np.array(raws)))
        raw_sps, puffer_sps = float(np.median(raws)), float(np.median(puffers))
        overhead = 100 * (1 - ratio)
        target = TARGETS.get(env_id, 10.0)
        rows.append([env_id, raw_sps, puffer_sps, ratio, f"{overhead:.1f}%",
                     f"<= {target:.0f}%", "ok" if overhead <= target else "MISSED"])
    print_table(["env", "raw SPS", "puffer SPS", "ratio", "overhead", "target", ""], rows)


if __name__ == "__main__":
    main()
