"""Evaluation: the protocol (full episodes on held-out seeds), the win rate against a random
player, and videos of episodes."""

from puffer.evaluation.protocol import (
    EVAL_SEED_OFFSET,
    against_random,
    episode_quotas,
    eval_envs,
    evaluate,
)

__all__ = ["EVAL_SEED_OFFSET", "against_random", "episode_quotas", "eval_envs", "evaluate"]
