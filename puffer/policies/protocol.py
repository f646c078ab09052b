"""The Policy protocol: what the collector, the evaluation, the trainer's update and the Agent
call on a policy, declared once and checked where a policy is built or handed to a trainer.

A policy is a torch module that maps a batch of flat observation rows to `(dist_params, value)`
(`ActionDist`, puffer.policies.distributions, reads dist_params for the action space). A
recurrent one (`is_recurrent = True`) also keeps a state per row:
- `initial_state(batch, device)` -> the zero state of `batch` rows (a tuple of tensors),
- `step(obs, state)` -> (dist_params, value, new state), one step,
- `forward_sequence(obs, state, starts)` -> (dist_params, value) over (T, B) sequences from
  `state`, zeroed where `starts`, flattened to T*B.
A policy without `is_recurrent` is feed-forward (a user's own module need not declare it).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

RECURRENT_METHODS = ("initial_state", "step", "forward_sequence")


@runtime_checkable
class Policy(Protocol):
    def __call__(self, obs: torch.Tensor) -> tuple: ...

    def parameters(self): ...


@runtime_checkable
class RecurrentPolicy(Policy, Protocol):
    is_recurrent: bool

    def initial_state(self, batch: int, device="cpu") -> tuple: ...

    def step(self, obs: torch.Tensor, state) -> tuple: ...

    def forward_sequence(self, obs: torch.Tensor, state, starts: torch.Tensor) -> tuple: ...


def is_recurrent(policy) -> bool:
    """Whether `policy` keeps a state between steps (the one place the attribute is read)."""
    return bool(getattr(policy, "is_recurrent", False))


def check_policy(policy, where: str = "policy") -> None:
    """A TypeError naming what `policy` lacks, before it meets an env: a torch module that maps
    observations to (dist_params, value), with the recurrent methods when it says it is recurrent."""
    if not isinstance(policy, torch.nn.Module) or not isinstance(policy, Policy):
        raise TypeError(f"{where}: {type(policy).__name__} is not a torch.nn.Module mapping observations "
                        "to (dist_params, value) (puffer.policies.protocol)")
    if is_recurrent(policy) and not isinstance(policy, RecurrentPolicy):
        missing = [name for name in RECURRENT_METHODS if not callable(getattr(policy, name, None))]
        raise TypeError(f"{where}: {type(policy).__name__} says is_recurrent=True but has no "
                        f"{', '.join(missing)} (puffer.policies.protocol.RecurrentPolicy)")
