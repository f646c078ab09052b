"""The replay buffer of an off-policy learner: the transitions of past rollouts, drawn at random.

What lives here: `ReplayBuffer` (a ring of flat transition rows on the trainer's device, filled
from a collected rollout, drawn from uniformly or by priority with the trainer's generator, saved
in checkpoints so that a resumed run continues bit for bit) and `LearnsFromReplay` (what a
Trainer that learns from one adds: the buffer filled each epoch, the gradient steps it allows,
target networks, all of it in checkpoints). What does not: which steps of a rollout are
transitions (puffer.training.rollout's validity) and how a learner uses them (puffer.training.dqn,
puffer.training.sac).

A transition of row r at step t is stored when the step is valid (its agent acted on a real
observation): (obs, action, reward, terminal, next obs), the next observation being the row's
at t + 1, or after the rollout the one it starts the next rollout from. At an episode end that
is the final observation (the env returns it with the done flag, puffer.emulation), so a
truncation bootstraps from it and a terminal, flagged, from nothing.
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from puffer.training.minibatches import Priority
from puffer.training.rollout import Rollout

log = logging.getLogger(__name__)

__all__ = ["LearnsFromReplay", "ReplayBuffer"]


class ReplayBuffer:
    """`capacity` transitions of flat observation rows (the rollout's dtype and shape)."""

    FIELDS = ("obs", "next_obs", "actions", "rewards", "terminals")

    def __init__(self, capacity: int, rollout: Rollout):
        self.capacity = capacity
        on = {"device": rollout.obs.device}
        self.obs = torch.zeros((capacity, *rollout.obs.shape[2:]), dtype=rollout.obs.dtype, **on)
        self.next_obs = torch.zeros_like(self.obs)
        self.actions = torch.zeros((capacity, *rollout.actions.shape[2:]), dtype=rollout.actions.dtype, **on)
        self.rewards = torch.zeros(capacity, **on)
        self.terminals = torch.zeros(capacity, **on)
        self.size = 0  # transitions held
        self.next = 0  # where the next one goes (the oldest once full)
        # prioritized replay's priorities (|TD error|): a new transition gets the highest so far
        self.priorities = torch.zeros(capacity, **on)
        self.max_priority = 1.0

    @property
    def nbytes(self) -> int:
        return sum(getattr(self, name).nbytes for name in self.FIELDS)

    def add_rollout(self, r: Rollout, last_obs: torch.Tensor) -> int:
        """Store the valid steps of rollout `r`; `last_obs` (rows, ...) is each row's observation
        after its last step. Returns how many transitions were stored."""
        next_obs = torch.cat([r.obs[1:], last_obs[None]])
        valid = r.valid.reshape(-1)
        flat = lambda x: x.reshape(-1, *x.shape[2:])[valid]  # noqa: E731
        self.add(flat(r.obs), flat(next_obs), flat(r.actions), flat(r.rewards), flat(r.terminals))
        return int(valid.sum())

    def add(self, obs, next_obs, actions, rewards, terminals) -> None:
        count = len(obs)
        if count > self.capacity:  # more than it holds: the newest
            obs, next_obs, actions, rewards, terminals = (x[-self.capacity:] for x in
                                                          (obs, next_obs, actions, rewards, terminals))
            count = self.capacity
        where = (self.next + torch.arange(count, device=self.obs.device)) % self.capacity
        for name, values in zip(self.FIELDS, (obs, next_obs, actions, rewards, terminals), strict=True):
            getattr(self, name)[where] = values
        self.priorities[where] = self.max_priority
        self.next = (self.next + count) % self.capacity
        self.size = min(self.size + count, self.capacity)

    def sample(self, count: int, generator: torch.Generator,
               priority: Priority | None = None) -> tuple[torch.Tensor, torch.Tensor | None, tuple[torch.Tensor, ...]]:
        """`count` transitions drawn with replacement, uniformly or with `priority` by their
        priorities (Schaul et al. 2016, proportional); (their indices, their importance weights
        or None, (obs, next_obs, actions, rewards, terminals))."""
        if priority is None:
            index, weights = torch.randint(self.size, (count,), generator=generator).to(self.obs.device), None
        else:
            index, weights = priority.draw(self.priorities[: self.size], count)
            weights = weights / weights.max()  # (Schaul et al.'s normalisation: only scale down)
        return index, weights, tuple(getattr(self, name)[index] for name in self.FIELDS)

    def update_priorities(self, index: torch.Tensor, td_errors: torch.Tensor) -> None:
        """The drawn transitions' new priorities: their |TD error| (a small floor keeps each drawable)."""
        priorities = td_errors.detach().abs().float() + 1e-6
        self.priorities[index] = priorities
        self.max_priority = max(self.max_priority, float(priorities.max()))

    def state_dict(self) -> dict:
        """The transitions held (in ring order as stored) and the write position."""
        return {"size": self.size, "next": self.next, "max_priority": self.max_priority,
                **{name: getattr(self, name)[: self.size].clone() for name in (*self.FIELDS, "priorities")}}

    def load_state_dict(self, state: dict) -> None:
        size = state["size"]
        if size > self.capacity:
            raise ValueError(f"the checkpoint's replay buffer holds {size} transitions; this one holds "
                             f"train.buffer_size={self.capacity}")
        for name in self.FIELDS:
            getattr(self, name)[:size] = state[name].to(self.obs.device)
        self.priorities[:size] = state["priorities"].to(self.obs.device) if "priorities" in state else 1.0
        self.size, self.next = size, state["next"] % self.capacity
        self.max_priority = state.get("max_priority", 1.0)


class LearnsFromReplay:
    """A Trainer mixin (`class DQN(LearnsFromReplay, QLearner)`) for an algorithm that learns from a
    replay buffer (train.* of puffer.config.schema.ReplayConfig): `init_replay` after the
    trainer's __init__, `replay_steps` at the start of each update, `move_target` for each
    target network; the buffer and the targets (`targets()`) go into checkpoints."""

    def init_replay(self) -> None:
        self.replay = ReplayBuffer(self.config.buffer_size, self.rollout)
        log.info("replay buffer: %d transitions, %.1f MB on %s", self.config.buffer_size, self.replay.nbytes / 1e6,
                 self.device)

    def minibatch_rows(self) -> int:
        return self.config.batch_size

    def targets(self) -> dict[str, tuple[nn.Module, nn.Module]]:
        """The target networks by their checkpoint keys, each with the network it follows."""
        return {}

    def replay_steps(self) -> int:
        """Stores the epoch's rollout in the buffer; the gradient steps of this update:
        train.gradient_steps, or as many as the transitions stored (0), none until
        train.learning_starts steps are collected."""
        c = self.config
        added = self.replay.add_rollout(self.rollout, self.collector.next_obs())
        if self.global_step <= c.learning_starts or self.replay.size == 0:
            return 0
        return c.gradient_steps or added

    @staticmethod
    @torch.no_grad()
    def move_target(target: nn.Module, online: nn.Module, tau: float) -> None:
        """`target`'s weights `tau` of the way to `online`'s (1: a copy); its buffers (running
        observation statistics, if any) copied."""
        mine, theirs = list(target.parameters()), list(online.parameters())
        if tau == 1:
            torch._foreach_copy_(mine, theirs)
        else:
            torch._foreach_lerp_(mine, theirs, tau)
        for buffer, source in zip(target.buffers(), online.buffers(), strict=True):
            buffer.copy_(source)

    def state_dict(self) -> dict | None:
        state = super().state_dict()
        if state is None:
            return None
        state.update({key: target.state_dict() for key, (target, _) in self.targets().items()})
        if self.config.save_replay:
            state["replay"] = self.replay.state_dict()
        else:
            log.warning("train.save_replay=false: the checkpoint leaves the replay buffer out (%d transitions); "
                        "a resumed run refills it from its own rollouts and is not bit-identical", self.replay.size)
            state["replay"] = None
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        for key, (target, online) in self.targets().items():
            if state.get(key) is not None:
                target.load_state_dict(state[key])
            else:  # a checkpoint saved after a failure holds the weights only
                log.warning("the checkpoint holds no %s network: it starts as a copy of the online one", key)
                self.move_target(target, online, 1.0)
        if state.get("replay") is not None:
            self.replay.load_state_dict(state["replay"])
        else:
            log.warning("the checkpoint holds no replay buffer: it refills from the next rollouts")
