"""Acting with a policy: the one rule the collector (puffer.training.rollout), the evaluation
(puffer.evaluation.protocol) and a loaded Agent (puffer.agent) share.

A step: the policy's output for a batch of flat observation rows (a recurrent policy from each
row's state, zeroed where an episode starts: `episode_starts`), then actions from the action
space's distribution, sampled (with their log-probabilities, for training) or its mode (the
deterministic policy), and their flat form for the env. What does not live here: what each
caller keeps of a step (the rollout's buffers, episode counts, an Agent's native actions).
"""

from __future__ import annotations

import numpy as np
import torch

from puffer.policies.distributions import GLOBAL_NOISE, Noise, policy_action_dist
from puffer.policies.protocol import is_recurrent


def episode_starts(prev_done: np.ndarray, before_done: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """Rows whose recurrent state restarts from zero at this step: the final observation of an
    episode (a dummy step follows it), the reset observation after it, and rows with no live
    agent, so that a new episode begins from a zero state."""
    return prev_done | before_done | ~masks


def restart(state: tuple, starts: torch.Tensor) -> tuple:
    """`state` with the rows where `starts` (bool, one per row) zeroed."""
    return tuple(x * ~starts[:, None] for x in state)


class Acting:
    """`policy` acting in `action_space` (flat). `forward` (default: the policy itself) is what
    a feed-forward step calls, e.g. a compiled policy; `noise` where sampling draws its random
    numbers (torch's global generator, or each member's own in a batch)."""

    def __init__(self, policy: torch.nn.Module, action_space, forward=None, noise: Noise = GLOBAL_NOISE):
        self.policy, self.forward, self.noise = policy, policy if forward is None else forward, noise
        self.dist = policy_action_dist(policy, action_space)
        self.recurrent = is_recurrent(policy)

    def initial_state(self, rows: int, device) -> tuple | None:
        return self.policy.initial_state(rows, device) if self.recurrent else None

    def outputs(self, obs: torch.Tensor, state: tuple | None = None, starts: torch.Tensor | None = None):
        """(dist_params, value, state after the step): a recurrent policy steps from `state`,
        restarted where `starts`; a feed-forward one returns state None."""
        if not self.recurrent:
            params, value = self.forward(obs)
            return params, value, None
        if starts is not None:
            state = restart(state, starts)
        return self.policy.step(obs, state)

    def choose(self, params, deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(action, its log-probability): sampled, or the mode with no log-probability."""
        if deterministic:
            return self.dist.mode(params), None
        return self.dist.sample(params, self.noise)

    def to_env(self, action: torch.Tensor) -> np.ndarray:
        """The actions as the vector env takes them (flat rows, numpy)."""
        return self.dist.to_env(action)
