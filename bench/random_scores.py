"""The random-policy scores of puffer.report.references: uniform random actions, 100 episodes per env on
seeds 0-99, mean and standard error. Needs the box2d extra.

    python bench/random_scores.py
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

ENVS = [("CartPole-v1", {}), ("Acrobot-v1", {}), ("MountainCar-v0", {}), ("Pendulum-v1", {}),
        ("LunarLander-v3", {}), ("LunarLander-v3", {"continuous": True}), ("BipedalWalker-v3", {}),
        ("MountainCarContinuous-v0", {})]


def random_returns(env_id: str, kwargs: dict, episodes: int = 100) -> np.ndarray:
    env = gym.make(env_id, **kwargs)
    env.action_space.seed(0)
    returns = []
    for episode in range(episodes):
        env.reset(seed=episode)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return np.asarray(returns)


def main() -> None:
    print(f"{'env':34} | {'random return':>13} | {'std error':>9}")
    for env_id, kwargs in ENVS:
        returns = random_returns(env_id, kwargs)
        name = env_id + ("(" + ",".join(f"{k}={v}" for k, v in kwargs.items()) + ")" if kwargs else "")
        print(f"{name:34} | {returns.mean():13.1f} | {returns.std(ddof=1) / np.sqrt(len(returns)):9.1f}")


if __name__ == "__main__":
    main()
