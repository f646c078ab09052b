"""DQN (Mnih et al. 2015), with Double DQN (van Hasselt et al. 2016) and prioritized replay (Schaul
et al. 2016) as options: Q-learning from a
replay buffer against a target network. The rollout loop is the trainer's: each epoch's rollout
(train.num_steps of every row, SB3's train_freq) goes into the buffer, then train.gradient_steps
minibatches drawn from it take one step each.

What lives here: `DQN` (`update`, the target network and the buffer in checkpoints). What does
not: acting and the epsilon schedule (puffer.training.qlearning), the buffer
(puffer.training.replay), the network (policy=q), the loop (puffer.training.trainer).
"""

from __future__ import annotations

import copy
import logging

import torch
from torch import nn

from puffer.config.schema import DQNConfig
from puffer.training.minibatches import Priority
from puffer.training.qlearning import QLearner
from puffer.training.replay import ReplayBuffer

log = logging.getLogger(__name__)

__all__ = ["DQN"]


class DQN(QLearner):
    """The online network regresses Q(s, a) on r + gamma * (1 - terminal) * Q_target(s', a'), a'
    the target's argmax (or the online network's, train.double_q), with SB3's Huber loss; the
    target is moved to the online weights every train.target_update_interval steps (by train.tau)."""

    def __init__(self, config: DQNConfig, vecenv, policy: nn.Module, **kwargs):
        super().__init__(config, vecenv, policy, **kwargs)
        self.target = copy.deepcopy(self.policy).requires_grad_(False)
        self.replay = ReplayBuffer(config.buffer_size, self.rollout)
        self.synced_at = 0  # the global step of the target's last update
        log.info("replay buffer: %d transitions, %.1f MB on %s", config.buffer_size, self.replay.nbytes / 1e6,
                 self.device)

    def update(self) -> dict[str, float]:
        c = self.config
        added = self.replay.add_rollout(self.rollout, self.collector.next_obs())
        self.anneal_learning_rate()
        steps = c.gradient_steps or added
        sums = torch.zeros(len(self.stats), dtype=torch.float64, device=self.device)
        if self.global_step <= c.learning_starts or self.replay.size == 0:
            steps = 0
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
        with torch.no_grad():
            online, target = list(self.policy.parameters()), list(self.target.parameters())
            if c.tau == 1:
                torch._foreach_copy_(target, online)
            else:
                torch._foreach_lerp_(target, online, c.tau)
            for buffer, source in zip(self.target.buffers(), self.policy.buffers(), strict=True):
                buffer.copy_(source)  # running observation statistics, if any
        self.synced_at = self.global_step

    # -- checkpoints -------------------------------------------------------------------------
    def state_dict(self) -> dict | None:
        state = super().state_dict()
        if state is None:
            return None
        state["target"] = self.target.state_dict()
        state["target_synced_at"] = self.synced_at
        if self.config.save_replay:
            state["replay"] = self.replay.state_dict()
        else:
            log.warning("train.save_replay=false: the checkpoint leaves the replay buffer out (%d transitions); "
                        "a resumed run refills it from its own rollouts and is not bit-identical", self.replay.size)
            state["replay"] = None
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.target.load_state_dict(state.get("target") or self.policy.state_dict())
        self.synced_at = state.get("target_synced_at", self.global_step)
        if state.get("replay") is not None:
            self.replay.load_state_dict(state["replay"])
        else:
            log.warning("the checkpoint holds no replay buffer: it refills from the next rollouts")
