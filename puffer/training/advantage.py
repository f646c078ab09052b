"""Advantage estimation over a collected rollout: GAE, its V-trace-clipped form, and GAE over the
turns of turn-based games.

What lives here: `gae` (Schulman et al. 2016, with V-trace's clipped importance weights on each
TD error and each trace when given the ratios, Espeholt et al. 2018, as PufferLib 3.0's "puffer
advantage") and `turn_gae`. What does not: which rollout steps are valid (puffer.training.rollout), how an
algorithm uses the advantages (puffer.training.ppo).
"""

from __future__ import annotations

import torch

from puffer.training.rollout import Rollout


def gae(r: Rollout, out: torch.Tensor, gamma: float, lam: float, ratio: torch.Tensor | None = None,
        rho_clip: float = 1.0, c_clip: float = 1.0) -> None:
    """GAE into `out` (num_steps, rows), stopping at episode ends; terminals don't bootstrap,
    truncations do (the value of the final observation is the next row's value).

    With `ratio` (pi / mu for each stored action, the policy being learned over the one that
    collected): each TD error is weighted by min(ratio, rho_clip) and each trace by
    min(ratio, c_clip), so steps the policy has moved away from count less. With every ratio 1
    (on-policy) and clips >= 1 this is GAE."""
    last = torch.zeros_like(r.next_value)
    if ratio is not None:
        rho, c = ratio.clamp(max=rho_clip), ratio.clamp(max=c_clip)
    for t in reversed(range(r.num_steps)):
        next_value = r.next_value if t == r.num_steps - 1 else r.values[t + 1]
        delta = r.rewards[t] + gamma * next_value * (1 - r.terminals[t]) - r.values[t]
        if ratio is None:
            last = delta + gamma * lam * (1 - r.dones[t]) * last
        else:
            last = rho[t] * delta + gamma * lam * c[t] * (1 - r.dones[t]) * last
        out[t] = last


def turn_gae(r: Rollout, out: torch.Tensor, gamma: float, lam: float) -> None:
    """GAE over each row's own turns (turn-based envs: a row is valid only when its agent is
    to move). The transition from one of an agent's moves to its next sums the rewards of
    every step in between (its opponents' moves included) and bootstraps from the value at
    its next move; an episode end in between cuts it (terminals don't bootstrap, truncations
    bootstrap from the final observation's value, the next row's). An agent's last move in
    the rollout whose next move lies beyond it has no value to bootstrap from (the value of
    a position where it is not to move is never trained): it is left out of the update
    (`r.valid` is cleared there). With every row valid but the dummy step after an episode
    end, this is `gae`."""
    T = r.num_steps
    zeros = torch.zeros_like(r.next_value)
    adv_next, value_next = zeros.clone(), r.next_value.clone()
    rewards, terminal, cut = zeros.clone(), zeros.clone(), zeros.clone()
    unknown = ~r.next_valid  # the next move's value is not in this rollout
    for t in reversed(range(T)):
        ended = r.dones[t]
        final_value = r.next_value if t == T - 1 else r.values[t + 1]
        # rewards after an episode end belong to the next episode
        rewards = r.rewards[t] + (1 - ended) * rewards
        terminal = torch.where(ended > 0, r.terminals[t], terminal)
        cut = torch.maximum(cut, ended)
        value_next = torch.where(ended > 0, final_value, value_next)
        delta = rewards + gamma * value_next * (1 - terminal) - r.values[t]
        advantage = delta + gamma * lam * (1 - cut) * adv_next
        unknown = unknown & (ended == 0)
        valid = r.valid[t].clone()  # a move (the carries below restart at it) ...
        r.valid[t] &= ~unknown  # ... but one with no value to bootstrap from is not learned from
        unknown = unknown & ~valid
        out[t] = torch.where(valid, advantage, zeros)
        # at a move, the carried quantities start again for the agent's previous move
        adv_next = torch.where(valid, advantage, torch.where(ended > 0, zeros, adv_next))
        value_next = torch.where(valid, r.values[t], value_next)
        rewards, terminal, cut = (torch.where(valid, zeros, x) for x in (rewards, terminal, cut))


def q_lambda(r: Rollout, out: torch.Tensor, gamma: float, lam: float) -> None:
    """Q(lambda) targets into `out` (num_steps, rows), the returns PQN learns from (Gallici et al.
    2024; Peng's Q(lambda) without off-policy cuts): G_t = r_t + gamma * (lam * G_t+1 +
    (1 - lam) * max_a Q(s_t+1, a)), where the rollout's values are the greedy values max_a Q
    (puffer.policies.networks.QNetwork). An episode end cuts the trace: a terminal bootstraps
    from nothing, a truncation from the value of its final observation (the next row's); past
    the rollout, the value of the next observation."""
    last = r.next_value
    for t in reversed(range(r.num_steps)):
        next_value = r.next_value if t == r.num_steps - 1 else r.values[t + 1]
        carried = torch.where(r.dones[t] > 0, next_value, lam * last + (1 - lam) * next_value)
        last = r.rewards[t] + gamma * (1 - r.terminals[t]) * carried
        out[t] = last
