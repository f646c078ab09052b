"""Native batched envs: written against puffer's buffers, every instance stepped at once with
numpy (no per-env Python loop), autoresetting in place on the step after an episode ends.

The sanity envs each isolate one capability of an RL system, with scores provable from their
rules (each module's docstring): Memory (recurrent state), Bandit (delayed credit), Password
(exploration, sparse reward), Stochastic (a mixed optimal policy), Continuous (the Gaussian head),
Spaces (structured observations and hybrid actions), Multiagent (rows, masks, a shared policy)
and Nim (a turn-based game with action masks)."""

from puffer.envs.ocean.bandit import Bandit
from puffer.envs.ocean.cartpole import CartPole
from puffer.envs.ocean.continuous import Continuous
from puffer.envs.ocean.herd import Herd
from puffer.envs.ocean.memory import Memory
from puffer.envs.ocean.multiagent import Multiagent
from puffer.envs.ocean.nim import Nim
from puffer.envs.ocean.password import Password
from puffer.envs.ocean.squares import Squares
from puffer.envs.ocean.stochastic import Stochastic
from puffer.envs.ocean.structured import Spaces

__all__ = ["Bandit", "CartPole", "Continuous", "Herd", "Memory", "Multiagent", "Nim", "Password",
           "Spaces", "Squares", "Stochastic"]
