"""Native batched envs: written against puffer's buffers, every instance stepped at once with
numpy (no per-env Python loop), autoresetting in place on the step after an episode ends."""

from puffer.envs.ocean.cartpole import CartPole
from puffer.envs.ocean.herd import Herd
from puffer.envs.ocean.squares import Squares

__all__ = ["CartPole", "Herd", "Squares"]
