"""DQN (Mnih et al. 2015), with Double DQN (van Hasselt et al. 2016) and prioritized replay (Schaul
et al. 2016) as options: Q-learning from a
replay buffer against a target network. The rollout loop is the trainer's: each epoch's rollout
(train.num_steps of every row, SB3's train_freq) goes into the buffer, then train.gradient_steps
minibatches drawn from it take one step each.

What lives here: `DQN` (`update`, the target network's schedule). What does not: acting and the
epsilon schedule (puffer.training.qlearning), the buffer and its checkpoints
(puffer.training.replay), the network (policy=q), the loop (puffer.training.trainer).
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from puffer.config.schema import DQNConfig
from puffer.training.minibatches import Priority
from puffer.training.qlearning import QLearner
from puffer.training.replay import LearnsFromReplay

__all__ = ["DQN"]


class DQN(LearnsFromReplay, QLearner):
    """The online network regresses Q(s, a) on r + gamma * (1 - terminal) * Q_target(s', a'), a'
    the target's argmax (or the online network's, train.double_q), with SB3's Huber loss; the
    target is moved to the online weights every train.target_update_interval steps (by train.tau)."""

    def __init__(self, config: DQNConfig, vecenv, policy: nn.Module, **kwargs):
        super().__init__(config, vecenv, policy, **kwargs)
        self.target = copy.deepcopy(self.policy).requires_grad_(False)
        self.init_replay()
        self.synced_at = 0  # the global step of the target's last update

    def targets(self) -> dict[str, tuple[nn.Module, nn.Module]]:
        return {"target": (self.target, self.policy)}

    def update(self) -> dict[str, float]:
        c = self.config
        steps = self.replay_steps()
        self.anneal_learning_rate()
        sums = torch.zeros(len(self.stats), dtype=torch.float64, device=self.device)
        # prioritized replay: beta annealed from prio_beta0 to 1 over training
        priority = (Priority(c.prio_alpha, c.prio_beta0 + (1 - c.prio_beta0) * self.epoch / self.num_epochs,
                             self.generator) if c.prioritized else None)
        for _ in range(steps):
            index, weights, batch = self.replay.sample(c.batch_size, self.generator, priority)
            obs, next_obs, actions, rewards, terminals = batch
            with torch.no_grad(), self.autocast():
                next_q = self.target(next_obs)[0].float()
                if c.double_q:
                    chosen = self.forward(next_obs)[0].argmax(-1, keepdim=True)
                    next_value = next_q.gather(-1, chosen).squeeze(-1)
                else:
                    next_value = next_q.max(-1).values
            targets = rewards + c.gamma * (1 - terminals) * next_value
            with self.autocast():
                q, _ = self.forward(obs)
            taken = q.float().gather(-1, actions.long().reshape(-1, 1)).squeeze(-1)
            losses = nn.functional.smooth_l1_loss(taken, targets, reduction="none")
            sums += self.gradient_step((losses if weights is None else losses * weights).mean(), taken)
            if priority is not None:
                self.replay.update_priorities(index, taken - targets)
        self.update_target()
        metrics = self.averaged(sums, steps) if steps else {"train/epsilon": self.epsilon()}
        metrics["train/replay_size"] = self.replay.size
        return metrics

    def update_target(self) -> None:
        """Every target_update_interval steps crossed since the last epoch: the target moves
        tau of the way to the online weights (a copy with tau 1)."""
        c = self.config
        crossed = self.global_step // c.target_update_interval - self.synced_at // c.target_update_interval
        if crossed <= 0:
            return
        self.move_target(self.target, self.policy, c.tau)
        self.synced_at = self.global_step

    # -- checkpoints -------------------------------------------------------------------------
    def state_dict(self) -> dict | None:
        state = super().state_dict()
        if state is not None:
            state["target_synced_at"] = self.synced_at
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.synced_at = state.get("target_synced_at", self.global_step)
