"""PQN, Parallelised Q-Network (Gallici et al. 2024, "Simplifying Deep Temporal Difference
Learning", arXiv:2407.04811): Q-learning made for vectorized envs. It acts epsilon-greedily in
many envs at once, learns from each rollout with Q(lambda) targets over several epochs of
minibatches, and needs no replay buffer and no target network (a LayerNorm in the network keeps
it stable: puffer.policies.networks.QNetwork). So it is an on-policy-shaped loop, and everything
but the loss and the action rule is the trainer's and the collector's, as for PPO.

What lives here: `PQN` (its action rule, the epsilon schedule and `update`). What does not: the
Q(lambda) targets (puffer.training.advantage.q_lambda), the network (policy=q), minibatches
(puffer.training.minibatches), the loop, checkpoints and the collector (puffer.training.trainer).
"""

from __future__ import annotations

import math

import torch
from gymnasium import spaces
from torch import nn

from puffer.config.schema import PQNConfig
from puffer.errors import ConfigError
from puffer.policies.distributions import _gumbel_max
from puffer.policies.networks import QNetwork
from puffer.policies.protocol import is_recurrent
from puffer.runtime import distributed
from puffer.training import minibatches
from puffer.training.advantage import q_lambda
from puffer.training.trainer import NonFiniteError, Trainer

__all__ = ["PQN"]

# What each minibatch step reports, in this order (averaged over an update's steps as train/<name>).
STATS = ("td_loss", "q_values", "grad_norm")


class PQN(Trainer):
    """Epsilon-greedy rollouts; per epoch, minibatches of the rollout's valid steps regress the
    Q-value of each taken action on its Q(lambda) target (mean squared error, as CleanRL's
    pqn.py), with the gradient norm clipped to train.max_grad_norm."""

    shown_losses = ("td_loss", "q_values", "grad_norm", "epsilon")

    @classmethod
    def check_env(cls, vecenv) -> None:
        if not isinstance(vecenv.single_action_space, spaces.Discrete):
            raise ConfigError(f"train=pqn learns a value per action of a Discrete action space; this env's "
                              f"is {vecenv.single_action_space}: expected train=ppo")
        if getattr(vecenv.driver_env, "turn_based", False):
            raise ConfigError("train=pqn: a turn-based env's agents take turns, and Q(lambda) over their "
                              "turns is not built; expected train=ppo")

    def __init__(self, config: PQNConfig, vecenv, policy: nn.Module, **kwargs):
        self.check_env(vecenv)
        check_q_network(policy)
        super().__init__(config, vecenv, policy, **kwargs)
        self.targets = torch.zeros((config.num_steps, vecenv.num_rows), device=self.device)

    # -- acting ------------------------------------------------------------------------------
    def epsilon(self) -> float:
        """Epsilon at this global step: start_e to end_e, linearly over exploration_fraction of
        train.total_timesteps (CleanRL's linear_schedule), then end_e."""
        c = self.config
        duration = c.exploration_fraction * c.total_timesteps
        if duration <= 0:
            return c.end_e
        return max(c.start_e + (c.end_e - c.start_e) * self.global_step / duration, min(c.end_e, c.start_e))

    def action_rule(self):
        return self.epsilon_greedy

    def epsilon_greedy(self, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The greedy action of each row, or with probability epsilon a uniform one among the
        allowed actions (a masked action's Q-value is puffer.policies.wrappers.MASKED_LOGIT); its
        log-probability under that rule. Random numbers come from the collector's noise, so a
        resumed run draws the same ones."""
        noise = self.collector.acting.noise
        eps = self.epsilon()
        greedy = q.argmax(-1)
        allowed = q > -1e7
        uniform = _gumbel_max(torch.where(allowed, 0.0, -math.inf), noise).squeeze(-1)
        # an Exp(1) draw exceeds -log(eps) with probability eps
        explore = noise.exponential(q[:, 0]) > (-math.log(eps) if eps > 0 else math.inf)
        action = torch.where(explore, uniform, greedy)
        p = eps / allowed.sum(-1) + (1 - eps) * (action == greedy)
        return action, p.log()

    # -- learning ----------------------------------------------------------------------------
    def update(self) -> dict[str, float]:
        c, r = self.config, self.rollout
        q_lambda(r, self.targets, c.gamma, c.q_lambda)
        self.anneal_learning_rate()
        if not r.valid.any():
            return {}
        # minibatches.samples hands out returns as advantages + values: the targets' excess over
        # the greedy value of each step
        epoch_batches = minibatches.samples(r, self.targets - r.values, c.num_minibatches, self.generator,
                                            exact=self.world.parallel)
        sums = torch.zeros(len(STATS), dtype=torch.float64, device=self.device)
        count = 0
        for _ in range(c.update_epochs):
            for batch in epoch_batches():
                sums += self._minibatch_step(batch)
                count += 1
            self._check_finite(sums)
        metrics = {f"train/{k}": v / count for k, v in zip(STATS, sums.tolist(), strict=True)}
        metrics["train/loss"] = metrics["train/td_loss"]
        metrics["train/epsilon"] = self.epsilon()
        metrics["train/learning_rate"] = self.optimizer.param_groups[0]["lr"]
        return metrics

    def _minibatch_step(self, mb: minibatches.Minibatch) -> torch.Tensor:
        with self.autocast():
            q, _ = self.forward(mb.obs)
        taken = q.float().gather(-1, mb.actions.long().reshape(-1, 1)).squeeze(-1)
        loss = ((taken - mb.returns) ** 2).mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        distributed.average_gradients(self.policy.parameters())  # under torchrun
        grad_norm = nn.utils.clip_grad_norm_(self.policy.parameters(), self.config.max_grad_norm)
        self.optimizer.step()
        return torch.stack([loss.detach(), taken.detach().mean(), grad_norm.detach()]).double()

    def _check_finite(self, sums: torch.Tensor) -> None:
        if torch.isfinite(sums).all():
            return
        values = dict(zip(STATS, sums.tolist(), strict=True))
        name = next(k for k in STATS if not math.isfinite(values[k]))
        raise NonFiniteError(
            f"train/{name} is {values[name]} at epoch {self.epoch} (global step {self.global_step}); "
            "stopping before the parameters are saved. Lower train.learning_rate or train.max_grad_norm")


def check_q_network(policy: nn.Module) -> None:
    """A ConfigError unless `policy` is a feed-forward network of action values."""
    if not any(isinstance(m, QNetwork) for m in policy.modules()):
        raise ConfigError(f"train=pqn learns Q-values: expected policy=q (puffer.policies.networks.QNetwork), "
                          f"got {type(policy).__name__}")
    if is_recurrent(policy):
        raise ConfigError("policy.rnn=lstm with train=pqn: PQN here learns feed-forward Q-networks; "
                          "expected policy.rnn=null")
