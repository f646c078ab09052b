"""PQN, Parallelised Q-Network (Gallici et al. 2024, "Simplifying Deep Temporal Difference
Learning", arXiv:2407.04811): Q-learning made for vectorized envs. It acts epsilon-greedily in
many envs at once, learns from each rollout with Q(lambda) targets over several epochs of
minibatches, and needs no replay buffer and no target network (a LayerNorm in the network keeps
it stable: puffer.policies.networks.QNetwork). So it is an on-policy-shaped loop, and everything
but the loss is the Q-learner's, the trainer's and the collector's, as for PPO.

What lives here: `PQN` (`update`). What does not: acting and the epsilon schedule
(puffer.training.qlearning), the Q(lambda) targets (puffer.training.advantage.q_lambda), the
network (policy=q), minibatches (puffer.training.minibatches), the loop and checkpoints.
"""

from __future__ import annotations

import torch
from torch import nn

from puffer.config.schema import PQNConfig
from puffer.training import minibatches
from puffer.training.advantage import q_lambda
from puffer.training.qlearning import QLearner

__all__ = ["PQN"]


class PQN(QLearner):
    """Per epoch, minibatches of the rollout's valid steps regress the Q-value of each taken
    action on its Q(lambda) target (mean squared error, as CleanRL's pqn.py), with the gradient
    norm clipped to train.max_grad_norm, for train.update_epochs epochs."""

    def __init__(self, config: PQNConfig, vecenv, policy: nn.Module, **kwargs):
        super().__init__(config, vecenv, policy, **kwargs)
        self.targets = torch.zeros((config.num_steps, vecenv.num_rows), device=self.device)

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
        sums = torch.zeros(len(self.stats), dtype=torch.float64, device=self.device)
        count = 0
        for _ in range(c.update_epochs):
            for mb in epoch_batches():
                with self.autocast():
                    q, _ = self.forward(mb.obs)
                taken = q.float().gather(-1, mb.actions.long().reshape(-1, 1)).squeeze(-1)
                sums += self.gradient_step(((taken - mb.returns) ** 2).mean(), taken)
                count += 1
        return self.averaged(sums, count)
