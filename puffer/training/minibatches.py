"""Minibatches of a collected rollout for an algorithm's gradient steps: shuffled valid samples
(feed-forward policies) or whole row sequences (recurrent ones), uniformly or by priority.

What lives here: `Minibatch`, `Priority` (prioritized draws: probability proportional to
|advantage|^alpha, importance weights (n p)^-beta, Schaul et al. 2016, as PufferLib 3.0 samples
its segments), `samples` and `sequences`, which each return a function that yields one epoch's
minibatches. What does not: the advantages (puffer.training.advantage), the loss (puffer.training.ppo).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from puffer.training.rollout import Rollout


@dataclass
class Minibatch:
    """Samples of one gradient step: flat (B, ...) samples, or (T, B, ...) row sequences with
    `sequence` = (h0, c0, episode starts) and `weights` (1 for valid steps, 0 for the rest).
    `where`: each sample's flat index in the rollout (steps * rows); `prio`: the importance
    weights of prioritized draws. `padded`: samples of members of a batch, padded to one count
    (puffer.training.batched), `weights` marking the real ones: statistics are over those alone,
    as the unpadded samples' would be."""

    obs: torch.Tensor
    actions: torch.Tensor
    logprobs: torch.Tensor
    values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    where: torch.Tensor
    weights: torch.Tensor | None = None
    sequence: tuple | None = None
    prio: torch.Tensor | None = None
    padded: bool = False


@dataclass
class Priority:
    """Draws with replacement, p proportional to priority^alpha; the drawn samples' importance
    weights (n p)^-beta are 1 for uniform priorities."""

    alpha: float
    beta: float
    generator: torch.Generator

    def draw(self, priority: torch.Tensor, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        weights = priority.float().pow(self.alpha).nan_to_num(0.0, 0.0, 0.0) + 1e-8
        probs = weights / weights.sum()
        drawn = torch.multinomial(probs.cpu(), count, replacement=True, generator=self.generator)
        drawn = drawn.to(priority.device)
        return drawn, (len(priority) * probs[drawn]) ** -self.beta


Epoch = Callable[[], Iterator[Minibatch]]


def samples(r: Rollout, advantages: torch.Tensor, num_minibatches: int, generator: torch.Generator,
            exact: bool = False, priority: Priority | None = None) -> Epoch:
    """Valid samples only, shuffled each epoch into `num_minibatches` minibatches (`exact`: of
    equal counts, as many as asked even when samples are few), or with `priority`, as many
    drawn by |advantage|. Each epoch reads `advantages` as they are then (V-trace recomputes
    them between epochs)."""
    index = r.valid.reshape(-1).nonzero().squeeze(-1)
    obs = r.obs.reshape(-1, *r.obs.shape[2:])[index]
    actions = r.actions.reshape(-1, *r.actions.shape[2:])[index]
    logprobs, values = r.logprobs.reshape(-1)[index], r.values.reshape(-1)[index]
    n = len(index)
    size = max(1, math.ceil(n / num_minibatches))

    def epoch() -> Iterator[Minibatch]:
        advantage = advantages.reshape(-1)[index]
        returns = advantage + values
        if priority is not None:
            parts = (priority.draw(advantage.abs(), size) for _ in range(num_minibatches))
        else:
            order = torch.randperm(n, generator=generator).to(r.obs.device)
            parts = (torch.tensor_split(order, num_minibatches) if exact
                     else (order[start : start + size] for start in range(0, n, size)))
            parts = ((mb, None) for mb in parts)
        for mb, prio in parts:
            yield Minibatch(obs[mb], actions[mb], logprobs[mb], values[mb], advantage[mb],
                            returns[mb], where=index[mb], prio=prio)

    return epoch


def sequences(r: Rollout, advantages: torch.Tensor, num_minibatches: int, generator: torch.Generator,
              priority: Priority | None = None) -> Epoch:
    """Whole rows (num_steps long) from their stored start state, shuffled by row, or with
    `priority`, drawn by the summed |advantage| of their valid steps."""
    n = r.num_rows
    size = max(1, math.ceil(n / num_minibatches))
    steps = torch.arange(r.num_steps, device=r.obs.device)[:, None] * n

    def epoch() -> Iterator[Minibatch]:
        returns = advantages + r.values
        if priority is not None:
            parts = (priority.draw((advantages.abs() * r.valid).sum(0), size) for _ in range(num_minibatches))
        else:
            order = torch.randperm(n, generator=generator).to(r.obs.device)
            parts = ((order[start : start + size], None) for start in range(0, n, size))
        for rows, prio in parts:
            yield Minibatch(r.obs[:, rows], r.actions[:, rows], r.logprobs[:, rows], r.values[:, rows],
                            advantages[:, rows], returns[:, rows], where=(steps + rows).reshape(-1),
                            weights=r.valid[:, rows].float(),
                            sequence=(r.state0[0][rows], r.state0[1][rows], r.starts[:, rows]),
                            prio=None if prio is None else prio.expand(r.num_steps, -1))

    return epoch
