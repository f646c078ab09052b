"""Ocean envs' speed: rows stepped per second on one core, each env at its default batch (the
config's rows), beside gymnasium's CartPole-v1 in a Python loop as the reference.

    python bench/ocean.py [--seconds 2] [--rounds 3]

Each row steps the env with uniformly random actions drawn beforehand (so the policy costs
nothing) and reports the best of `rounds` timings. Targets (issue 36): every sanity env at least
1M rows/s, the games (pong, snake) 300k, ocean/cartpole 5M; the script exits 1 when one is missed. Pin the machine's other
work away first (`uptime`): the numbers are one core's.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # numpy's own threads would not be one core

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import best_of, print_table, rate  # noqa: E402

from puffer.config.schema import OCEAN_ENVS  # noqa: E402
from puffer.envs import ocean  # noqa: E402

SANITY = ("memory", "bandit", "password", "stochastic", "continuous", "spaces", "multiagent", "nim")
GAMES = ("pong", "snake")
TARGETS = {**dict.fromkeys(SANITY, 1e6), **dict.fromkeys(GAMES, 3e5), "cartpole": 5e6}


def random_actions(env, rng: np.random.Generator, count: int) -> list[np.ndarray]:
    """`count` batches of uniformly random flat actions, one per row."""
    space = env.single_action_space
    space.seed(int(rng.integers(1 << 31)))
    return [np.stack([space.sample() for _ in range(env.num_agents)]) for _ in range(count)]


def ocean_rate(name: str, seconds: float, rounds: int) -> tuple[float, int]:
    cls, defaults = OCEAN_ENVS[name]
    sizes = {k: v for k, v in defaults.items() if k in ("num_rows", "num_games", "num_agents", "num_arenas")}
    env = getattr(ocean, cls)(**sizes)
    env.reset(0)
    batches = random_actions(env, np.random.default_rng(0), 16)

    def steps() -> int:
        for actions in batches:
            env.step(actions)
        return len(batches) * env.num_agents

    return best_of(rounds, lambda: rate(steps, seconds)), env.num_agents


def gymnasium_rate(seconds: float, rounds: int) -> float:
    reference = gym.make("CartPole-v1")
    reference.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 2, 1000).tolist()

    def steps() -> int:
        for action in actions:
            _, _, term, trunc, _ = reference.step(action)
            if term or trunc:
                reference.reset()
        return len(actions)

    return best_of(rounds, lambda: rate(steps, seconds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    gym_sps = gymnasium_rate(args.seconds, args.rounds)
    rows, missed = [["gymnasium CartPole-v1, Python loop (reference)", 1, gym_sps, "1x", "-", "-"]], []
    for name in OCEAN_ENVS:
        sps, batch = ocean_rate(name, args.seconds, args.rounds)
        target = TARGETS.get(name)
        verdict = "-" if target is None else "ok" if sps >= target else "MISSED"
        if verdict == "MISSED":
            missed.append(name)
        rows.append([f"ocean/{name}", batch, sps, f"{sps / gym_sps:.0f}x",
                     "-" if target is None else f"{target:,.0f}", verdict])
    print_table(["env", "rows per step", "rows/s", "vs gymnasium CartPole", "target", ""], rows)
    if missed:
        print(f"missed the target: {', '.join(missed)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
