"""Running normalization of observations (the `normalize: true` of rl-baselines3-zoo).

What lives here: `RunningMeanStd` (mean and variance of a stream, merged batch by batch) and
`NormalizedPolicy` (a policy wrapper that standardizes the float leaves of each observation with
running statistics it keeps as buffers). What does not: when statistics are updated
(puffer.training.trainer, after each update), the reward scaler built on the same statistics
(puffer.training.reward_scaler), building policies from configs (puffer.policies.build).

Why the observation statistics live in the policy: they are part of what the policy computes.
Kept as buffers, they travel with its state_dict into checkpoints and model.safetensors, are restored on
resume and are applied, frozen, wherever the policy is called (evaluation, mode=eval, a loaded
agent). The trainer updates them between epochs only, from the rollout it has just learned from,
so a rollout is collected and learned from with the same statistics (PPO's ratio starts at 1).
"""

from __future__ import annotations

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from puffer.emulation.spaces import ObsLayout
from puffer.errors import ConfigError
from puffer.policies.wrappers import PolicyWrapper
from puffer.runtime import distributed

EPSILON = 1e-8  # added to the variance before its square root, as SB3's VecNormalize does


def merged(count, mean, var, n, batch_mean, batch_var):
    """(count, mean, var) of a stream with those statistics and a batch of n values with
    batch_mean and (population) batch_var: Chan et al.'s (1979) parallel-variance formula. Works
    on torch tensors and numpy arrays alike."""
    total = count + n
    delta = batch_mean - mean
    m2 = var * count + batch_var * n + delta * delta * count * n / total
    return total, mean + delta * n / total, m2 / total


class RunningMeanStd(nn.Module):
    """Mean and (population) variance of every element over all batches seen, in float64.

    Batches are merged with the parallel-variance formula of Chan et al. (1979), so the result is
    the statistics of the whole stream, whatever its batch sizes. Before any data: mean 0, var 1."""

    def __init__(self, shape: tuple[int, ...] = ()):
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    @torch.no_grad()
    def update(self, batch: torch.Tensor, across_ranks: bool = False) -> None:
        """Merge a batch of shape (n, *shape) into the statistics; an empty batch is ignored.
        `across_ranks` (every rank calls it together, under torchrun): the batches of all ranks
        are merged as one, so the statistics stay the same on every rank."""
        batch = batch.to(self.mean.device, torch.float64)
        if across_ranks and distributed.context().parallel:
            n, batch_mean, batch_var = distributed.moments(batch)
            if n == 0:
                return
        else:
            n = batch.shape[0]
            if n == 0:
                return
            batch_mean = batch.mean(0)
            batch_var = batch.var(0, unbiased=False)
        self._merge(n, batch_mean, batch_var)

    def _merge(self, n, batch_mean: torch.Tensor, batch_var: torch.Tensor) -> None:
        count, mean, var = merged(self.count, self.mean, self.var, n, batch_mean, batch_var)
        self.mean.copy_(mean)
        self.var.copy_(var)
        self.count.copy_(count)

    def std(self) -> torch.Tensor:
        return (self.var + EPSILON).sqrt()

    def snapshot(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.count.clone(), self.mean.clone(), self.var.clone()

    @torch.no_grad()
    def sync_ranks(self, since: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> None:
        """Under torchrun, after each rank merged its own batches into the statistics they all
        had at `since` (a snapshot): the statistics of `since` and every rank's batches together,
        the same on every rank. Each rank's own part is recovered by inverting the merge."""
        count0, mean0, var0 = since
        n = self.count - count0
        if n > 0:
            part_mean = (self.mean * self.count - mean0 * count0) / n
            m2 = (self.var * self.count - var0 * count0
                  - (mean0 - part_mean).square() * count0 * n / self.count)
            part_var = (m2 / n).clamp_min(0)
        else:
            part_mean, part_var = torch.zeros_like(self.mean), torch.zeros_like(self.var)
        # the parts' moments summed over the ranks: count, sum, sum of squares
        stats = distributed.all_sum(torch.cat([n.reshape(1), (part_mean * n).reshape(-1),
                                               ((part_var + part_mean.square()) * n).reshape(-1)]))
        self.count.copy_(count0)
        self.mean.copy_(mean0)
        self.var.copy_(var0)
        total, size = stats[0], (len(stats) - 1) // 2
        if total > 0:
            mean = (stats[1 : 1 + size] / total).reshape(self.mean.shape)
            var = ((stats[1 + size :] / total).reshape(self.var.shape) - mean.square()).clamp_min(0)
            self._merge(total, mean, var)


def float_columns(observation_space: spaces.Space) -> list[tuple[int, int, str, int, int]]:
    """Where the float values of an emulated observation sit: (byte_start, byte_stop, dtype,
    element_start, element_stop) per float Box leaf of its row (a plain Box is one leaf)."""
    layout = ObsLayout(getattr(observation_space, "native", observation_space))
    columns, element = [], 0
    for leaf in layout.leaves:
        if isinstance(leaf.space, spaces.Box) and np.issubdtype(leaf.dtype, np.floating):
            columns.append((leaf.offset, leaf.offset + leaf.nbytes, leaf.dtype.name, element,
                            element + leaf.size))
            element += leaf.size
    return columns


class NormalizedPolicy(PolicyWrapper):
    """`policy` on observations whose float leaves are standardized by running statistics:
    (x - mean) / sqrt(var + 1e-8), clipped to +-`clip`. Integer leaves (pixels, discrete values)
    pass unchanged. Before the first `update_obs_stats`, observations pass unchanged.

    `policy.norm_obs: true` builds it (puffer.policies.build); as a PolicyWrapper it wraps
    recurrent policies too."""

    def __init__(self, policy: nn.Module, observation_space: spaces.Space, clip: float = 10.0):
        super().__init__(policy)
        columns = float_columns(observation_space)
        if not columns:
            raise ConfigError(
                f"policy.norm_obs=true: the observation space {observation_space} has no float Box "
                "leaf to normalize (integer leaves such as pixels are scaled by the policy); "
                "expected policy.norm_obs=false for this env")
        if clip <= 0:
            raise ConfigError(f"policy.obs_clip={clip!r}: expected a number > 0")
        self.clip = float(clip)
        # A row that is all floats is standardized as one vector; a byte row leaf by leaf.
        self.whole_row = np.issubdtype(observation_space.dtype, np.floating)
        self.columns = columns
        self.obs_rms = RunningMeanStd((columns[-1][4],))

    def float_values(self, obs: torch.Tensor) -> torch.Tensor:
        """(batch, float elements) of a batch of flat rows, in the rows' own float dtype."""
        batch = obs.shape[0]
        if self.whole_row:
            return obs.reshape(batch, -1)
        raw = obs.contiguous().view(torch.uint8).reshape(batch, -1)
        return torch.cat([raw[:, start:stop].contiguous().view(getattr(torch, dtype)).double()
                          for start, stop, dtype, _, _ in self.columns], dim=1)

    @torch.no_grad()
    def update_obs_stats(self, obs: torch.Tensor) -> None:
        """Merge a batch of flat rows (valid ones only: no dead agents or dummy reset steps)."""
        self.obs_rms.update(self.float_values(obs), across_ranks=True)

    def normalize(self, obs: torch.Tensor) -> torch.Tensor:
        values = self.float_values(obs)
        scaled = ((values - self.obs_rms.mean) / self.obs_rms.std()).clamp(-self.clip, self.clip)
        # No statistics yet: unchanged (no clipping of raw values either).
        scaled = torch.where(self.obs_rms.count > 0, scaled, values.double())
        if self.whole_row:
            return scaled.to(obs.dtype).reshape(obs.shape)
        batch = obs.shape[0]
        out = obs.contiguous().clone()
        raw = out.view(torch.uint8).reshape(batch, -1)
        for start, stop, dtype, first, last in self.columns:
            leaf = scaled[:, first:last].to(getattr(torch, dtype)).contiguous()
            raw[:, start:stop] = leaf.view(torch.uint8)
        return out

    def inputs(self, obs: torch.Tensor) -> torch.Tensor:
        return self.normalize(obs)
