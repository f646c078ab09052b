"""A policy from its config section and the env's flat spaces: the network the section's
`_target_` names, wrapped as the section says (LSTM, action masks, observation normalization).
Used by training (puffer.build) and by loading an agent (puffer.agent) alike.
"""

from __future__ import annotations

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from puffer.errors import ConfigError
from puffer.policies.normalize import NormalizedPolicy
from puffer.policies.protocol import check_policy
from puffer.policies.wrappers import ActionMasked, LSTMWrapper, mask_leaf


def build_policy(policy_cfg, observation_space, action_space) -> torch.nn.Module:
    """The policy group's `_target_`; `rnn: lstm` wraps it in an LSTM; an `action_mask` entry in
    a Dict observation masks its logits (puffer.policies.wrappers.ActionMasked); `norm_obs: true` wraps it
    all in running observation normalization (so the LSTM sees normalized inputs too)."""
    node = dict(OmegaConf.to_container(policy_cfg, resolve=True) if isinstance(policy_cfg, DictConfig)
                else policy_cfg)
    rnn = node.pop("rnn", None)
    norm_obs, obs_clip = node.pop("norm_obs", False), node.pop("obs_clip", 10.0)
    policy = instantiate(node, observation_space, action_space)
    if rnn is not None:
        if rnn != "lstm":
            raise ConfigError(f"policy.rnn={rnn!r}: expected lstm or null")
        policy = LSTMWrapper(policy)
    if mask_leaf(observation_space, action_space) is not None:
        policy = ActionMasked(policy, observation_space, action_space)
    if norm_obs:
        policy = NormalizedPolicy(policy, observation_space, clip=obs_clip)
    check_policy(policy, f"policy._target_={node.get('_target_')!r}")
    return policy
