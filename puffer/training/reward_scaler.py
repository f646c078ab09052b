"""The reward scaler of `train.norm_reward` (SB3's VecNormalize norm_reward), on the running
statistics observation normalization uses (puffer.policies.normalize)."""

from __future__ import annotations

import numpy as np
import torch

from puffer.errors import ConfigError
from puffer.policies.normalize import EPSILON, RunningMeanStd, merged
from puffer.runtime import distributed


class RewardScaler:
    """Rewards divided by the running std of each row's discounted return, clipped to +-`clip`
    (SB3's VecNormalize norm_reward): the value targets keep a similar scale on every env.

    Each row keeps its discounted return, which restarts at the end of an episode; only valid
    steps (a live agent, not the dummy step after a reset) enter the statistics.

    Kept on the CPU in float64 whatever the training device, and computed in numpy: rewards
    arrive from the envs as numpy arrays one step at a time, and the dozen small torch ops of
    a step cost a quarter of a one-env MuJoCo step's time (numpy: a tenth of that). The numpy
    arrays are views of the tensors that checkpoints and `sync_ranks` use."""

    def __init__(self, num_rows: int, gamma: float, clip: float):
        if clip <= 0:
            raise ConfigError(f"train.reward_clip={clip!r}: expected a number > 0")
        self.gamma, self.clip = gamma, clip
        self.returns = torch.zeros(num_rows, dtype=torch.float64)
        self.return_rms = RunningMeanStd(())
        self._synced = self.return_rms.snapshot()  # the statistics all ranks last agreed on
        self._returns = self.returns.numpy()
        self._count, self._mean, self._var = (x.numpy() for x in (self.return_rms.count,
                                                                  self.return_rms.mean,
                                                                  self.return_rms.var))

    def sync_ranks(self) -> None:
        """Under torchrun, at the end of each rollout: every rank's returns in the statistics."""
        if distributed.context().parallel:
            self.return_rms.sync_ranks(self._synced)
            self._synced = self.return_rms.snapshot()

    def __call__(self, index, rewards: np.ndarray, dones: np.ndarray, valid: np.ndarray) -> np.ndarray:
        """Scaled rewards (float32) of `rows` (an index or slice) for one step, after merging the
        rows' new discounted returns into the statistics."""
        rewards = np.asarray(rewards, dtype=np.float64)
        returns = self._returns[index] * self.gamma + rewards
        batch = returns[valid]
        if len(batch):
            count, mean, var = merged(self._count, self._mean, self._var, len(batch), batch.mean(),
                                      batch.var())
            self._count[...], self._mean[...], self._var[...] = count, mean, var
        self._returns[index] = np.where(dones, 0.0, returns)
        return np.clip(rewards / np.sqrt(self._var + EPSILON), -self.clip, self.clip).astype(np.float32)

    def state_dict(self) -> dict:
        return {"returns": self.returns.clone(), "return_rms": self.return_rms.state_dict()}

    def load_state_dict(self, state: dict, returns: bool = True) -> None:
        """Restore the statistics; with `returns`, also each row's running return (only when the
        envs themselves continue mid-episode)."""
        self.return_rms.load_state_dict(state["return_rms"])
        self._synced = self.return_rms.snapshot()
        if returns:
            self.returns.copy_(state["returns"])


class MemberRewardScalers:
    """Members of a batch (puffer.training.batched) each with its own RewardScaler over its rows
    (member k's the k-th `rows_per_member`): its statistics from its own returns, its gamma."""

    def __init__(self, scalers: list[RewardScaler], rows_per_member: int):
        self.scalers, self.rows_per_member = scalers, rows_per_member
        self.num_rows = len(scalers) * rows_per_member

    def sync_ranks(self) -> None:
        for scaler in self.scalers:
            scaler.sync_ranks()

    def __call__(self, index, rewards: np.ndarray, dones: np.ndarray, valid: np.ndarray) -> np.ndarray:
        rows = np.arange(self.num_rows)[index]
        member = rows // self.rows_per_member
        out = np.empty(len(rows), dtype=np.float32)
        for k in np.unique(member):
            mine = member == k
            out[mine] = self.scalers[k](rows[mine] - k * self.rows_per_member, rewards[mine], dones[mine], valid[mine])
        return out

    def state_dict(self) -> dict:
        return {"members": [scaler.state_dict() for scaler in self.scalers]}

    def load_state_dict(self, state: dict, returns: bool = True) -> None:
        for scaler, saved in zip(self.scalers, state["members"], strict=True):
            scaler.load_state_dict(saved, returns)
