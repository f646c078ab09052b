"""Action distributions: `ActionDist` (sampling, log-probabilities and entropy for Discrete,
MultiDiscrete, Box and HybridBox action spaces), `SquashedGaussian` (a bounded Box's actions as
tanh of a Gaussian: SAC's) and `ActionHead` (features -> the parameters ActionDist reads). A policy maps flat observations to `(dist_params, value)`; `ActionDist`, built from the
action space, interprets `dist_params`: logits for categorical spaces, `(mean, log_std)` for
Box, `(logits, mean, log_std)` for HybridBox.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from puffer.emulation.actions import HybridBox
from puffer.policies.layers import layer_init


class Noise:
    """Where sampling's random numbers come from: torch's global generator, as one agent's
    run draws them. puffer.training.batched.MemberNoise draws each member's rows from its own."""

    def exponential(self, like: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(like).exponential_()

    def normal(self, like: torch.Tensor) -> torch.Tensor:
        return torch.randn_like(like)


GLOBAL_NOISE = Noise()


class CorrelatedNoise(Noise):
    """Gaussian draws correlated in time, row by row: each step's draw is `correlation` times the
    row's last one plus sqrt(1 - correlation^2) times a fresh one (an AR(1) process, the discrete
    Ornstein-Uhlenbeck: unit variance, correlation^k between draws k steps apart). Exploration
    that keeps a direction for about 1 / (1 - correlation) steps, as the red and pink noise of
    Eberhard et al. 2023 ("Pink Noise Is All You Need", ICLR), which find such noise solves
    MountainCarContinuous where white noise does not. Every call must draw for the same rows
    (a full batch of the vector env); `state` is what a checkpoint keeps."""

    def __init__(self, correlation: float):
        self.correlation = correlation
        self.state: torch.Tensor | None = None

    def normal(self, like: torch.Tensor) -> torch.Tensor:
        fresh = torch.randn_like(like)
        if self.state is None or self.state.shape != like.shape:
            self.state = fresh
        else:
            self.state = self.correlation * self.state + math.sqrt(1 - self.correlation**2) * fresh
        return self.state


def _gumbel_max(logits: torch.Tensor, noise: Noise = GLOBAL_NOISE) -> torch.Tensor:
    """One categorical draw per row (keepdim): argmax of logits plus Gumbel noise, which is
    -log of an Exp(1) draw (3x faster than torch.multinomial for a few rows)."""
    return (logits - noise.exponential(logits).log()).argmax(-1, keepdim=True)


class ActionDist:
    """Sampling, log-probabilities, entropy and the deterministic action for one action space."""

    def __init__(self, action_space: spaces.Space):
        self.space = action_space
        if isinstance(action_space, spaces.Discrete):
            self.nvec, self.continuous = [int(action_space.n)], 0
        elif isinstance(action_space, spaces.MultiDiscrete):
            self.nvec, self.continuous = action_space.nvec.ravel().tolist(), 0
        elif isinstance(action_space, HybridBox):
            self.nvec = action_space.nvec.tolist()
            self.continuous = action_space.shape[0] - len(self.nvec)
        elif isinstance(action_space, spaces.Box) and len(action_space.shape) == 1:
            self.nvec, self.continuous = [], action_space.shape[0]
        else:
            raise ValueError(
                f"action space {action_space} is not an emulated flat action space; wrap the env "
                "with puffer.emulation first"
            )
        self.discrete_only = isinstance(action_space, spaces.Discrete)
        self.num_logits = sum(self.nvec)

    # dist_params: logits | (mean, log_std) | (logits, mean, log_std)
    def _split(self, params):
        if not self.continuous:
            return params, None, None
        if not self.nvec:
            return None, *params
        return params

    def sample(self, params, noise: Noise = GLOBAL_NOISE) -> tuple[torch.Tensor, torch.Tensor]:
        """An action per row and its log-probability, drawn with `noise`'s random numbers."""
        if not self.continuous:
            return self._sample_discrete(params, noise)
        logits, mean, log_std = self._split(params)
        parts = []
        if logits is not None:
            parts += [_gumbel_max(chunk, noise) for chunk in logits.split(self.nvec, dim=-1)]
        if mean is not None:
            parts.append(mean + log_std.exp() * noise.normal(mean))
        action = self._join(parts)
        logprob, _ = self.log_prob_entropy(params, action)
        return action, logprob

    def _sample_discrete(self, logits: torch.Tensor, noise: Noise) -> tuple[torch.Tensor, torch.Tensor]:
        # The rollout samples an action per step: no entropy, half the ops of the general path
        # (on 2 CPU cores, 0.4 ms of each Atari batch's 3.5 ms went to sampling).
        parts, logprob = [], None
        chunks = logits.split(self.nvec, dim=-1) if len(self.nvec) > 1 else (logits,)
        for chunk in chunks:
            log_p = torch.log_softmax(chunk, dim=-1)
            choice = _gumbel_max(log_p, noise)
            parts.append(choice)
            chosen = log_p.gather(-1, choice).squeeze(-1)
            logprob = chosen if logprob is None else logprob + chosen
        return self._join(parts), logprob

    def mode(self, params) -> torch.Tensor:
        """The deterministic action: argmax of each categorical, the mean of the Gaussian."""
        logits, mean, _ = self._split(params)
        parts = []
        if logits is not None:
            parts += [chunk.argmax(dim=-1, keepdim=True) for chunk in logits.split(self.nvec, dim=-1)]
        if mean is not None:
            parts.append(mean)
        return self._join(parts)

    def _join(self, parts: list[torch.Tensor]) -> torch.Tensor:
        if self.discrete_only:
            return parts[0].squeeze(-1)
        if not self.continuous:
            return torch.cat(parts, dim=-1)
        return torch.cat([p.float() for p in parts], dim=-1)

    def log_prob_entropy(self, params, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits, mean, log_std = self._split(params)
        logprob = torch.zeros(action.shape[0], device=action.device)
        entropy = torch.zeros_like(logprob)
        if logits is not None:
            indices = action.reshape(action.shape[0], -1)[:, : len(self.nvec)].long()
            for column, chunk in enumerate(logits.split(self.nvec, dim=-1)):
                log_p = torch.log_softmax(chunk, dim=-1)
                logprob = logprob + log_p.gather(-1, indices[:, column : column + 1]).squeeze(-1)
                entropy = entropy - (log_p.exp() * log_p).sum(-1)
        if mean is not None:
            value = action[:, len(self.nvec) :]
            log_std = log_std.expand_as(mean)
            z = (value - mean) / log_std.exp()
            logprob = logprob + (-0.5 * z.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
            entropy = entropy + (0.5 + 0.5 * math.log(2 * math.pi) + log_std).sum(-1)
        return logprob, entropy

    def to_env(self, action: torch.Tensor) -> np.ndarray:
        """Policy action -> what the vector env takes: continuous parts clipped to the bounds."""
        array = action.cpu().numpy()
        if self.continuous:
            array = np.clip(array, self.space.low, self.space.high)
        return array


class ActionHead(nn.Module):
    """Hidden features -> dist_params for `ActionDist` (small-init logits and means)."""

    def __init__(self, action_space: spaces.Space, hidden: int, log_std_init: float = 0.0):
        super().__init__()
        self.dist = ActionDist(action_space)
        self.logits = layer_init(nn.Linear(hidden, self.dist.num_logits), std=0.01) if self.dist.nvec else None
        if self.dist.continuous:
            self.mean = layer_init(nn.Linear(hidden, self.dist.continuous), std=0.01)
            self.log_std = nn.Parameter(torch.full((1, self.dist.continuous), float(log_std_init)))

    def forward(self, hidden: torch.Tensor):
        logits = self.logits(hidden) if self.logits is not None else None
        if not self.dist.continuous:
            return logits
        gaussian = (self.mean(hidden), self.log_std.expand(hidden.shape[0], -1))
        return gaussian if logits is None else (logits, *gaussian)


class SquashedGaussian(ActionDist):
    """Actions of a bounded Box as a Gaussian squashed by tanh (SAC's policy: Haarnoja et al. 2018,
    appendix C): u ~ N(mean, exp(log_std)), the unit action tanh(u) in (-1, 1), the env's action
    low + (tanh(u) + 1) (high - low) / 2. Its deterministic action is the squashed mean.

    Log-probabilities are of the unit action (tanh's change of variables, not the affine map to
    the bounds, which only adds a constant: SB3's and the SAC paper's convention, which their
    target entropy of -dim(A) assumes). A policy declares this distribution as its `action_dist`
    (`policy_action_dist`); the dist params are `(mean, log_std)` as for ActionDist's Box."""

    def __init__(self, action_space: spaces.Space):
        super().__init__(action_space)
        if isinstance(action_space, HybridBox) or self.nvec:
            raise ValueError(f"a squashed Gaussian draws continuous actions only; the action space is {action_space}")
        low, high = np.asarray(action_space.low, np.float64), np.asarray(action_space.high, np.float64)
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high)) and np.all(high > low)):
            raise ValueError(f"a squashed Gaussian needs a bounded Box (finite low < high); this one is "
                             f"{action_space}: bound the env's actions (e.g. gymnasium.wrappers.ClipAction "
                             "on a rescaled space)")
        self.low = torch.as_tensor(low, dtype=torch.float32)
        self.half = torch.as_tensor((high - low) / 2, dtype=torch.float32)

    def _bounds(self, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.low.device != like.device:
            self.low, self.half = self.low.to(like.device), self.half.to(like.device)
        return self.low, self.half

    def squash(self, unit: torch.Tensor) -> torch.Tensor:
        """Unit actions in [-1, 1] -> the env's."""
        low, half = self._bounds(unit)
        return low + (unit + 1) * half

    def to_unit(self, action: torch.Tensor) -> torch.Tensor:
        """The env's actions -> unit actions in [-1, 1] (what a critic reads)."""
        low, half = self._bounds(action)
        return (action.float() - low) / half - 1

    def rsample(self, params, noise: Noise = GLOBAL_NOISE) -> tuple[torch.Tensor, torch.Tensor]:
        """(unit action, its log-probability), differentiable in the params (the
        reparameterization the SAC actor's loss needs)."""
        mean, log_std = params
        u = mean + log_std.exp() * noise.normal(mean)
        return torch.tanh(u), self._log_prob(u, mean, log_std)

    @staticmethod
    def _log_prob(u: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
        z = (u - mean) / log_std.exp()
        gaussian = (-0.5 * z.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        # log |d tanh(u) / du| = log(1 - tanh(u)^2), in a form that stays finite for large |u|
        jacobian = 2 * (math.log(2) - u - nn.functional.softplus(-2 * u))
        return gaussian - jacobian.sum(-1)

    def sample(self, params, noise: Noise = GLOBAL_NOISE) -> tuple[torch.Tensor, torch.Tensor]:
        unit, logprob = self.rsample(params, noise)
        return self.squash(unit), logprob

    def mode(self, params) -> torch.Tensor:
        return self.squash(torch.tanh(params[0]))

    def log_prob_entropy(self, params, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The log-probability of env actions, and as entropy its one-sample estimate -log p (a
        squashed Gaussian's entropy has no closed form)."""
        mean, log_std = params
        unit = self.to_unit(action).clamp(-1 + 1e-6, 1 - 1e-6)
        logprob = self._log_prob(torch.atanh(unit), mean, log_std.expand_as(mean))
        return logprob, -logprob


def policy_action_dist(policy: nn.Module, action_space: spaces.Space) -> ActionDist:
    """The distribution a policy's dist params are read with: its own where a module of it
    declares one (`action_dist`, e.g. SAC's SquashedGaussian), else the action space's ActionDist."""
    for module in policy.modules():
        dist = getattr(module, "action_dist", None)
        if isinstance(dist, ActionDist):
            return dist
    return ActionDist(action_space)
