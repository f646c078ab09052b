"""What wraps a network and keeps its interface (puffer.policies.protocol): `LSTMWrapper` (a
recurrent core between the encoder and the heads), `PolicyWrapper` (the base of wrappers that
change what goes in or comes out) and `ActionMasked` (logits of illegal actions masked from an
`action_mask` entry of a Dict observation). Observation normalization, a PolicyWrapper too, is
puffer.policies.normalize's.
"""

from __future__ import annotations

import torch
from gymnasium import spaces
from torch import nn

from puffer.emulation.spaces import ObsLayout
from puffer.policies.distributions import ActionDist
from puffer.policies.protocol import is_recurrent


class LSTMWrapper(nn.Module):
    """Any policy with `encode`/`decode` and an LSTM between them (`policy.rnn=lstm`).

    The trainer keeps one (h, c) per row, zeroes it where an episode starts, and trains by
    backpropagating through each row's whole rollout from the state it started with."""

    is_recurrent = True

    def __init__(self, policy: nn.Module):
        super().__init__()
        self.policy = policy
        self.hidden_size = policy.hidden_out
        self.cell = nn.LSTMCell(self.hidden_size, self.hidden_size)
        for name, param in self.cell.named_parameters():
            if "weight" in name:
                nn.init.orthogonal_(param, 1.0)
            else:
                nn.init.constant_(param, 0.0)

    def initial_state(self, batch: int, device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
        zeros = torch.zeros(batch, self.hidden_size, device=device)
        return zeros, zeros.clone()

    def step(self, obs: torch.Tensor, state):
        h, c = self.cell(self.policy.encode(obs), state)
        params, value = self.policy.decode(h)
        return params, value, (h, c)

    def forward_sequence(self, obs: torch.Tensor, state, starts: torch.Tensor):
        """obs (T, B, ...) from `state` at t=0, zeroing it where `starts` (T, B); returns the
        (T*B)-flattened dist params and values."""
        steps, batch = obs.shape[:2]
        features = self.policy.encode(obs.reshape(steps * batch, *obs.shape[2:]))
        features = features.reshape(steps, batch, -1)
        h, c = state
        outputs = []
        for t in range(steps):
            keep = (~starts[t]).float()[:, None]
            h, c = self.cell(features[t], (h * keep, c * keep))
            outputs.append(h)
        return self.policy.decode(torch.cat(outputs))

    def forward(self, obs: torch.Tensor):
        """Without state (e.g. evaluation of one step from zeros)."""
        return self.step(obs, self.initial_state(obs.shape[0], obs.device))[:2]


MASK_KEY = "action_mask"
MASKED_LOGIT = -1e8  # not -inf: exp() of it is 0, and 0 * it stays 0 in the entropy


def mask_leaf(observation_space: spaces.Space, action_space: spaces.Space) -> int | None:
    """The index (in leaf order) of an `action_mask` entry of a Dict observation whose size is
    the number of logits (Discrete: n; MultiDiscrete: sum of nvec, each part's mask in turn)."""
    native = getattr(observation_space, "native", None)
    if not isinstance(native, spaces.Dict) or MASK_KEY not in native.spaces:
        return None
    layout = ObsLayout(native)
    index = next(i for i, leaf in enumerate(layout.leaves) if leaf.path == (MASK_KEY,))
    logits = ActionDist(action_space).num_logits
    if layout.leaves[index].size != logits:
        raise ValueError(f"obs['{MASK_KEY}'] has {layout.leaves[index].size} entries but the action "
                         f"space {action_space} has {logits} choices; expected one entry per choice")
    return index


class PolicyWrapper(nn.Module):
    """`policy` behind the same interface, feed-forward or recurrent alike: every call passes the
    observations through `inputs` on the way in and the dist params through `outputs` on the
    way out (both the identity here; a subclass overrides what it changes)."""

    def __init__(self, policy: nn.Module):
        super().__init__()
        self.policy = policy
        self.is_recurrent = is_recurrent(policy)

    def inputs(self, obs: torch.Tensor) -> torch.Tensor:
        """What the wrapped policy sees of a (batch, *row) batch of observations."""
        return obs

    def outputs(self, params, obs: torch.Tensor):
        """The dist params returned for `obs` (a batch, or (T, B) sequences) given the wrapped policy's."""
        return params

    def forward(self, obs: torch.Tensor):
        params, value = self.policy(self.inputs(obs))
        return self.outputs(params, obs), value

    def step(self, obs: torch.Tensor, state):
        params, value, state = self.policy.step(self.inputs(obs), state)
        return self.outputs(params, obs), value, state

    def forward_sequence(self, obs: torch.Tensor, state, starts: torch.Tensor):
        steps, rows = obs.shape[:2]
        inputs = self.inputs(obs.reshape(steps * rows, *obs.shape[2:])).reshape(obs.shape)
        params, value = self.policy.forward_sequence(inputs, state, starts)
        return self.outputs(params, obs), value

    def initial_state(self, batch: int, device="cpu"):
        return self.policy.initial_state(batch, device)


class ActionMasked(PolicyWrapper):
    """`policy` whose logits of actions the observation's `action_mask` marks 0 are pushed to
    -1e8: never sampled, never the deterministic choice, and with the same masked distribution
    in the update as in the rollout. build_policy adds it for a Dict observation with an
    `action_mask` entry (PettingZoo's classic games, many turn-based envs)."""

    def __init__(self, policy: nn.Module, observation_space: spaces.Space, action_space: spaces.Space):
        super().__init__(policy)
        self.index = mask_leaf(observation_space, action_space)
        self.layout = ObsLayout(observation_space.native)
        self.continuous = ActionDist(action_space).continuous
        # a Q-network's value is its greatest action value: of the allowed actions, once masked
        self.greedy_value = getattr(policy, "greedy_value", False)

    def forward(self, obs: torch.Tensor):
        params, value = super().forward(obs)
        return params, params.max(-1).values if self.greedy_value else value

    def step(self, obs: torch.Tensor, state):
        params, value, state = super().step(obs, state)
        return params, params.max(-1).values if self.greedy_value else value, state

    def outputs(self, params, obs: torch.Tensor):
        rows = obs.reshape(-1, obs.shape[-1])  # (T, B, row) sequences give (T*B)-flat params
        allowed = self.layout.leaf_values(rows)[self.index].reshape(rows.shape[0], -1) != 0
        if self.continuous:  # (logits, mean, log_std): only the categorical part is masked
            logits, *rest = params
            return (logits.masked_fill(~allowed, MASKED_LOGIT), *rest)
        return params.masked_fill(~allowed, MASKED_LOGIT)

