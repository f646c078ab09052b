"""Native batched envs: written against puffer's buffers, every instance stepped at once with
numpy (no per-env Python loop), autoresetting in place on the step after an episode ends.

The sanity envs each isolate one capability of an RL system, with scores provable from their
rules (each module's docstring): Memory (recurrent state), Bandit (delayed credit), Password
(exploration, sparse reward), Stochastic (a mixed optimal policy), Continuous (the Gaussian head),
Spaces (structured observations and hybrid actions), Multiagent (rows, masks, a shared policy)
and Nim (a turn-based game with action masks). The games, Pong and Snake, show speed and learning
beyond them, and render for videos."""

from puffer.envs.ocean.bandit import Bandit
from puffer.envs.ocean.cartpole import CartPole
from puffer.envs.ocean.continuous import Continuous
from puffer.envs.ocean.herd import Herd
from puffer.envs.ocean.memory import Memory
from puffer.envs.ocean.multiagent import Multiagent
from puffer.envs.ocean.nim import Nim
from puffer.envs.ocean.password import Password
from puffer.envs.ocean.pong import Pong
from puffer.envs.ocean.snake import Snake
from puffer.envs.ocean.squares import Squares
from puffer.envs.ocean.stochastic import Stochastic
from puffer.envs.ocean.structured import Spaces

# What solved means for each sanity env (its docstring proves the random and the best scores): the
# evaluation return to reach, by the deterministic policy or by the stochastic one (where the
# best policy is a mixture, or its spread is what is tested). tests/test_ocean_sanity.py trains
# each to it; bench/time_to_score.py times it.
SOLVED = {
    "memory": (0.9, "deterministic"), "bandit": (0.95, "deterministic"),
    "password": (0.95, "deterministic"), "stochastic": (0.8, "stochastic"),
    "continuous": (7.5, "stochastic"), "spaces": (7.5, "deterministic"),
    "multiagent": (7.5, "deterministic"), "nim": (0.85, "deterministic"),
}

__all__ = ["Bandit", "CartPole", "Continuous", "Herd", "Memory", "Multiagent", "Nim", "Password",
           "Pong", "SOLVED", "Snake", "Spaces", "Squares", "Stochastic"]
