"""Reference scores that put every env on one scale: a random policy's score (0) and a published
agent's (1), each with where it comes from. puffer.report normalizes evaluation returns with them.

Sources:
- RANDOM_HERE: uniform random actions, 100 episodes on seeds 0-99, measured on this project's
  machines with `python bench/random_scores.py` (gymnasium 1.4).
- ZOO: rl-baselines3-zoo benchmark.md, PPO row (one trained agent, deterministic evaluation over
  ~150k steps; its n_timesteps given as `steps`). Its -v2 Box2D and -v3 MuJoCo envs are the -v3
  and -v5 of gymnasium 1.x.
- ATARI_RANDOM: the random-agent scores of Mnih et al. 2015 (Nature), as used for human-normalized
  scores; ATARI references are the ZOO's PPO rows at 10M steps.
- D4RL: REF_MIN_SCORE (random policy) of Fu et al. 2020's D4RL for MuJoCo locomotion.
"""

from __future__ import annotations

from dataclasses import dataclass

RANDOM_HERE = "random actions, measured here (bench/random_scores.py)"
ZOO = "rl-baselines3-zoo benchmark.md, PPO"
ATARI_RANDOM = "random agent, Mnih et al. 2015"
D4RL = "D4RL REF_MIN_SCORE (random policy)"


@dataclass(frozen=True)
class Reference:
    random: float
    reference: float
    steps: int  # env steps the reference agent trained for
    random_source: str
    reference_source: str


REFERENCES: dict[str, Reference] = {
    "CartPole-v1": Reference(23.7, 500.0, 100_000, RANDOM_HERE, ZOO),
    "Acrobot-v1": Reference(-497.1, -73.506, 1_000_000, RANDOM_HERE, ZOO),
    "MountainCar-v0": Reference(-200.0, -110.423, 1_000_000, RANDOM_HERE, ZOO),
    "Pendulum-v1": Reference(-1207.6, -172.225, 100_000, RANDOM_HERE, ZOO),
    "MountainCarContinuous-v0": Reference(-33.3, 88.343, 20_000, RANDOM_HERE, ZOO),
    "LunarLander-v3": Reference(-192.0, 242.119, 1_000_000, RANDOM_HERE, ZOO),
    "LunarLander-v3(continuous=True)": Reference(-212.7, 270.863, 1_000_000, RANDOM_HERE, ZOO),
    "BipedalWalker-v3": Reference(-102.8, 213.299, 5_000_000, RANDOM_HERE, ZOO),
    "HalfCheetah-v5": Reference(-280.178953, 5819.099, 1_000_000, D4RL, ZOO),
    "Hopper-v5": Reference(-20.272305, 2410.435, 1_000_000, D4RL, ZOO),
    "breakout": Reference(1.7, 398.033, 10_000_000, ATARI_RANDOM, ZOO),
    "pong": Reference(-20.7, 20.989, 10_000_000, ATARI_RANDOM, ZOO),
    "space_invaders": Reference(148.0, 960.331, 10_000_000, ATARI_RANDOM, ZOO),
    "beam_rider": Reference(363.9, 3397.0, 10_000_000, ATARI_RANDOM, ZOO),
}


def lookup(env: str) -> Reference | None:
    """The reference of an env name as puffer.envs.describe gives it, or None."""
    return REFERENCES.get(env)
