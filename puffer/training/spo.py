"""SPO, Simple Policy Optimization (Xie et al. 2024, arXiv:2401.16025): PPO with the ratio clip
replaced by a quadratic penalty that pulls the ratio back to 1 + sign(A) * clip_coef smoothly
instead of zeroing the gradient outside the trust region. Everything else (collector, GAE and
its options, minibatches, value loss, checkpoints) is PPO's.

What lives here: `SPO`, a PPO whose `surrogate_loss` is SPO's. Chosen by `train=spo`.
"""

from __future__ import annotations

import torch

from puffer.training.ppo import PPO

__all__ = ["SPO"]


class SPO(PPO):
    """-(ratio * A - |A| / (2 * clip_coef) * (ratio - 1)^2): its optimum over the ratio is at
    1 + sign(A) * clip_coef, the edge of PPO's trust region, and the gradient never vanishes."""

    def surrogate_loss(self, ratio: torch.Tensor, advantages: torch.Tensor, clip_coef) -> torch.Tensor:
        penalty = advantages.abs() / (2 * clip_coef) * (ratio - 1) ** 2
        return -(advantages * ratio - penalty)
