"""What every Q-learner shares (PQN, DQN): a network of action values (policy=q), epsilon-greedy
actions through the one collector, the epsilon schedule, a clipped gradient step, and the checks
of what it cannot learn.

What lives here: `QLearner` (a Trainer subclass; an algorithm subclasses it and implements
`update`) and `check_q_network`. What does not: the targets and losses (puffer.training.pqn,
puffer.training.dqn), the network (puffer.policies.networks.QNetwork).
"""

from __future__ import annotations

import math

import torch
from gymnasium import spaces
from torch import nn

from puffer.errors import ConfigError
from puffer.policies.distributions import _gumbel_max
from puffer.policies.networks import QNetwork
from puffer.policies.protocol import is_recurrent
from puffer.policies.wrappers import MASKED_LOGIT
from puffer.training.trainer import Trainer, refuse_turn_based

__all__ = ["QLearner", "check_q_network"]


class QLearner(Trainer):
    """Epsilon-greedy rollouts of a Q-network; `stats` are the train/* names of what each
    gradient step reports (`update` averages them)."""

    stats: tuple[str, ...] = ("td_loss", "q_values", "grad_norm")
    shown_losses = ("td_loss", "q_values", "grad_norm", "epsilon")

    @classmethod
    def name(cls) -> str:
        return f"train={cls.__name__.lower()}"

    @classmethod
    def check_env(cls, vecenv) -> None:
        if not isinstance(vecenv.single_action_space, spaces.Discrete):
            raise ConfigError(f"{cls.name()} learns a value per action of a Discrete action space; this env's "
                              f"is {vecenv.single_action_space}: expected train=ppo")
        refuse_turn_based(vecenv, cls.name(), "Q-learning")

    def __init__(self, config, vecenv, policy: nn.Module, **kwargs):
        self.check_env(vecenv)
        check_q_network(policy, self.name())
        super().__init__(config, vecenv, policy, **kwargs)

    # -- acting ------------------------------------------------------------------------------
    def epsilon(self) -> float:
        """Epsilon at this global step: start_e to end_e, linearly over exploration_fraction of
        train.total_timesteps (CleanRL's linear_schedule, SB3's), then end_e."""
        c = self.config
        duration = c.exploration_fraction * c.total_timesteps
        if duration <= 0:
            return c.end_e
        return max(c.start_e + (c.end_e - c.start_e) * self.global_step / duration, min(c.end_e, c.start_e))

    def action_rule(self):
        return self.epsilon_greedy

    def epsilon_greedy(self, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The greedy action of each row, or with probability epsilon a uniform one among the
        allowed actions (a masked action's Q-value is MASKED_LOGIT); its
        log-probability under that rule. Random numbers come from the collector's noise, so a
        resumed run draws the same ones."""
        noise = self.collector.acting.noise
        eps = self.epsilon()
        greedy = q.argmax(-1)
        allowed = q > MASKED_LOGIT / 2  # (bf16 rounds the masked value: not compared for equality)
        uniform = _gumbel_max(torch.where(allowed, 0.0, -math.inf), noise).squeeze(-1)
        # an Exp(1) draw exceeds -log(eps) with probability eps
        explore = noise.exponential(q[:, 0]) > (-math.log(eps) if eps > 0 else math.inf)
        action = torch.where(explore, uniform, greedy)
        p = eps / allowed.sum(-1) + (1 - eps) * (action == greedy)
        return action, p.log()

    # -- learning ----------------------------------------------------------------------------
    def gradient_step(self, loss: torch.Tensor, taken: torch.Tensor) -> torch.Tensor:
        """One clipped optimizer step on `loss`; `stats` of the step (on the device): the loss,
        the mean Q-value of the actions learned from (`taken`) and the gradient norm."""
        grad_norm = self.optimizer_step(loss, self.config.max_grad_norm)
        return torch.stack([loss.detach(), taken.detach().mean(), grad_norm.detach()]).double()

    def averaged(self, sums: torch.Tensor, count: int) -> dict[str, float]:
        """train/* of an update: each of `stats` averaged over its `count` steps, epsilon, the LR."""
        metrics = self.mean_stats(sums, self.stats, count)
        metrics["train/loss"] = metrics["train/td_loss"]
        metrics["train/epsilon"] = self.epsilon()
        metrics["train/learning_rate"] = self.optimizer.param_groups[0]["lr"]
        return metrics


def check_q_network(policy: nn.Module, name: str) -> None:
    """A ConfigError unless `policy` is a feed-forward network of action values."""
    if not any(isinstance(m, QNetwork) for m in policy.modules()):
        raise ConfigError(f"{name} learns Q-values: expected policy=q (puffer.policies.networks.QNetwork), "
                          f"got {type(policy).__name__}")
    if is_recurrent(policy):
        raise ConfigError(f"policy.rnn=lstm with {name}: its Q-networks are feed-forward here; "
                          "expected policy.rnn=null")
