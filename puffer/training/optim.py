"""Optimizers and learning-rate schedules for the trainer (train.optimizer, train.lr_schedule).

What lives here: `make_optimizer` (Adam, or Muon for the weight matrices with Adam for the rest,
as PufferLib 3.0 trains) and `lr_scale` (the schedule's factor at a point of training). What
does not: when they are applied (puffer.training.trainer, the algorithm's update).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from puffer.config.schema import OPTIMIZERS, SCHEDULES
from puffer.errors import ConfigError


class Combined:
    """Several optimizers over disjoint parameters, stepped and saved as one (Muon + Adam)."""

    def __init__(self, optimizers: list[torch.optim.Optimizer]):
        self.optimizers = optimizers

    @property
    def param_groups(self) -> list[dict]:
        return [group for optimizer in self.optimizers for group in optimizer.param_groups]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure=None) -> None:
        for optimizer in self.optimizers:
            optimizer.step()

    def state_dict(self) -> dict:
        return {"optimizers": [optimizer.state_dict() for optimizer in self.optimizers]}

    def load_state_dict(self, state: dict) -> None:
        for optimizer, saved in zip(self.optimizers, state["optimizers"], strict=True):
            optimizer.load_state_dict(saved)


def make_optimizer(policy: nn.Module, name: str, lr: float, eps: float) -> torch.optim.Optimizer | Combined:
    """adam: Adam over every parameter (fused: one kernel for the whole update). muon: Muon
    (Newton-Schulz orthogonalized momentum; torch.optim.Muon with its learning rate matched to
    AdamW's update size, so train.learning_rate means the same) for the 2-d weight matrices of
    linear layers, Adam for biases, convolutions, the LSTM's and log_std."""
    if name == "adam":
        return torch.optim.Adam(policy.parameters(), lr=lr, eps=eps, fused=True)
    if name != "muon":
        raise ConfigError(f"train.optimizer={name!r}: expected one of {OPTIMIZERS}")
    matrices = [m.weight for m in policy.modules() if isinstance(m, nn.Linear)]
    chosen = {id(p) for p in matrices}
    rest = [p for p in policy.parameters() if id(p) not in chosen]
    muon = torch.optim.Muon(matrices, lr=lr, weight_decay=0.0, adjust_lr_fn="match_rms_adamw")
    adam = torch.optim.Adam(rest, lr=lr, eps=eps, fused=True)
    return Combined([muon, adam])


def lr_scale(schedule: str, progress: float) -> float:
    """The factor of train.learning_rate after `progress` (0..1) of training: linear decay to 0,
    or cosine decay to 0 (PufferLib 3.0's default)."""
    if schedule == "linear":
        return 1.0 - progress
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    raise ConfigError(f"train.lr_schedule={schedule!r}: expected one of {SCHEDULES}")
