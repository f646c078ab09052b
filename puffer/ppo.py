"""PPO: collect a rollout from a vector env, then learn from it. One loop for every policy.

What lives here: `PPO` (GAE, the clipped-surrogate `update`, the epoch loop, checkpoints) and
`train`. What does not: collecting the rollout and which of its steps are valid (puffer.rollout),
building envs or policies from configs (puffer.run), evaluation (puffer.evaluation), where
metrics go (puffer.loggers).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import random
import time
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
from torch import nn

from puffer import checkpoint, threads
from puffer.allocator import retain_freed_memory
from puffer.config import TrainConfig
from puffer.loggers.base import Logger
from puffer.models import ActionDist
from puffer.profiler import Profiler
from puffer.rollout import Collector, Rollout, float32_params

log = logging.getLogger(__name__)


def _mean(x: torch.Tensor) -> torch.Tensor:
    return x.mean()


def _weighted_mean(x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    return (x * weights).sum() / weights.sum().clamp(min=1.0)


class NonFiniteError(FloatingPointError):
    """A loss, gradient or parameter became NaN or Inf; training stops before saving it."""


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def env_processes(vecenv) -> int:
    """Processes stepping envs beside the trainer while it collects (they sleep while it learns)."""
    return getattr(vecenv, "num_workers", 0) if vecenv.steps_in_workers else 0


class PPO:
    def __init__(self, config: TrainConfig, vecenv, policy: nn.Module, device: str = "cpu",
                 seed: int = 0, logger: Logger | None = None, run_dir: str | Path | None = None,
                 full_config: dict | None = None, progress=None, profiler: Profiler | None = None):
        self.config = config
        self.vecenv = vecenv
        if config.retain_memory:
            retain_freed_memory()
        self.device = torch.device(device)
        self.policy = policy.to(self.device)
        self.seed = seed
        self.logger = logger or Logger()
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.full_config = full_config
        self.progress = progress
        self.dist = ActionDist(vecenv.single_action_space)
        # fused: one kernel for the whole update instead of a few per parameter tensor
        self.optimizer = torch.optim.Adam(policy.parameters(), lr=config.learning_rate,
                                          eps=config.adam_eps, fused=True)
        self.recurrent = getattr(policy, "is_recurrent", False)
        self.forward = torch.compile(self.policy) if config.compile and not self.recurrent else self.policy
        self.profiler = profiler or Profiler(self.device.type)
        # bf16 autocast around the policy's forward passes (matmuls and convs in bf16, losses
        # and softmaxes kept in float32 by autocast's own rules).
        self.autocast = (functools.partial(torch.autocast, self.device.type, dtype=torch.bfloat16)
                         if config.amp == "bf16" else contextlib.nullcontext)
        self.generator = torch.Generator().manual_seed(seed)

        T, N = config.num_steps, vecenv.num_agents
        self.batch_size = T * N
        self.threads = threads.plan(
            policy, vecenv.single_observation_space,
            minibatch_rows=math.ceil(self.batch_size / config.num_minibatches),
            rollout_rows=vecenv.agents_per_batch, env_processes=env_processes(vecenv),
            torch_threads=config.torch_threads, rollout_threads=config.rollout_threads,
            device=str(self.device))
        log.info("%s", self.threads.describe())
        self.num_epochs = math.ceil(config.total_timesteps / self.batch_size)
        self.clip_coef = config.clip_coef  # the current one: update() anneals it with train.anneal_clip
        self.rollout = Rollout(T, N, vecenv.single_observation_space, vecenv.action_shape,
                               vecenv.action_dtype, self.device, policy)
        self.advantages = torch.zeros((T, N), device=self.device)
        self.collector = Collector(vecenv, self.policy, self.rollout, seed=seed, forward=self.forward,
                                   profiler=self.profiler, autocast=self.autocast)
        self.epoch = 0
        self.last_metrics: dict[str, float] = {}

    # -- rollout -----------------------------------------------------------------------------
    @property
    def global_step(self) -> int:
        """Actions sent to the envs so far (agent steps)."""
        return self.collector.steps

    @global_step.setter
    def global_step(self, value: int) -> None:
        self.collector.steps = value

    def collect(self) -> None:
        """Fill `self.rollout` with num_steps steps of every row (puffer.rollout.Collector)."""
        self.collector.collect()

    def compute_advantages(self) -> None:
        """GAE that stops at episode ends; terminals don't bootstrap, truncations do (the value
        of the final observation is the next row's value)."""
        c, r = self.config, self.rollout
        last = torch.zeros_like(r.next_value)
        for t in reversed(range(c.num_steps)):
            next_value = r.next_value if t == c.num_steps - 1 else r.values[t + 1]
            delta = r.rewards[t] + c.gamma * next_value * (1 - r.terminals[t]) - r.values[t]
            last = delta + c.gamma * c.gae_lambda * (1 - r.dones[t]) * last
            self.advantages[t] = last

    # -- learning ----------------------------------------------------------------------------
    def update(self) -> dict[str, float]:
        """PPO epochs over the rollout: shuffled valid samples, or for recurrent policies
        shuffled whole row sequences (BPTT over the rollout) with invalid steps weighted 0."""
        c = self.config
        self.compute_advantages()
        remaining = 1 - self.epoch / self.num_epochs  # linear schedules for the LR and the clip
        if c.anneal_lr:
            self.optimizer.param_groups[0]["lr"] = c.learning_rate * remaining
        self.clip_coef = c.clip_coef * remaining if c.anneal_clip else c.clip_coef
        r = self.rollout
        returns = self.advantages + r.values
        minibatches = self._sequence_minibatches(returns) if self.recurrent else self._sample_minibatches(returns)
        if minibatches is None:
            return {}
        sums: dict[str, float] = defaultdict(float)
        count = 0
        for _ in range(c.update_epochs):
            for batch in minibatches():
                stats = self._minibatch_step(*batch)
                for key, value in stats.items():
                    sums[key] += value
                count += 1
            if c.target_kl is not None and stats["approx_kl"] > c.target_kl:
                break
        metrics = {f"train/{k}": v / count for k, v in sums.items()}
        valid_returns, valid_values = returns[r.valid], r.values[r.valid]
        var = valid_returns.var()
        metrics["train/explained_variance"] = float("nan") if var == 0 else float(
            1 - (valid_returns - valid_values).var() / var)
        metrics["train/learning_rate"] = self.optimizer.param_groups[0]["lr"]
        metrics["train/clip_coef"] = self.clip_coef
        return metrics

    def _sample_minibatches(self, returns):
        """Valid samples only, shuffled each epoch into train.num_minibatches minibatches."""
        r = self.rollout
        index = r.valid.reshape(-1).nonzero().squeeze(-1)
        if len(index) == 0:
            return None
        obs = r.obs.reshape(-1, *r.obs.shape[2:])[index]
        actions = r.actions.reshape(-1, *r.actions.shape[2:])[index]
        logprobs, values = r.logprobs.reshape(-1)[index], r.values.reshape(-1)[index]
        advantages, returns = self.advantages.reshape(-1)[index], returns.reshape(-1)[index]
        n = len(index)
        size = max(1, math.ceil(n / self.config.num_minibatches))

        def epoch():
            order = torch.randperm(n, generator=self.generator).to(self.device)
            for start in range(0, n, size):
                mb = order[start : start + size]
                yield obs[mb], actions[mb], logprobs[mb], values[mb], advantages[mb], returns[mb]

        return epoch

    def _sequence_minibatches(self, returns):
        """Whole rows (num_steps long) from their stored start state, shuffled by row."""
        r, n = self.rollout, self.vecenv.num_agents
        size = max(1, math.ceil(n / self.config.num_minibatches))

        def epoch():
            order = torch.randperm(n, generator=self.generator).to(self.device)
            for start in range(0, n, size):
                rows = order[start : start + size]
                sequence = (r.state0[0][rows], r.state0[1][rows], r.starts[:, rows])
                yield (r.obs[:, rows], r.actions[:, rows], r.logprobs[:, rows],
                       r.values[:, rows], self.advantages[:, rows], returns[:, rows],
                       r.valid[:, rows].float(), sequence)

        return epoch

    def _minibatch_step(self, obs, actions, old_logprobs, old_values, advantages, returns,
                        weights=None, sequence=None):
        c = self.config
        with self.autocast():
            if sequence is None:
                params, new_values = self.forward(obs)
            else:  # (T, B, ...) row sequences: flatten everything after the recurrent pass
                h0, c0, starts = sequence
                params, new_values = self.policy.forward_sequence(obs, (h0, c0), starts)
        params, new_values = float32_params(params), new_values.float()
        if sequence is not None:
            actions = actions.reshape(-1, *actions.shape[2:])
            old_logprobs, old_values, advantages, returns, weights = (
                x.reshape(-1) for x in (old_logprobs, old_values, advantages, returns, weights))
        mean = _mean if weights is None else functools.partial(_weighted_mean, weights=weights)
        new_logprobs, entropy = self.dist.log_prob_entropy(params, actions)
        logratio = new_logprobs - old_logprobs
        ratio = logratio.exp()
        with torch.no_grad():
            approx_kl = mean((ratio - 1) - logratio)
            clipfrac = mean(((ratio - 1.0).abs() > self.clip_coef).float())
        if c.norm_adv and len(advantages) > 1 and weights is None:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        elif c.norm_adv and len(advantages) > 1:
            centred = advantages - mean(advantages)
            advantages = centred / (mean(centred**2).sqrt() + 1e-8)
        pg_loss = mean(torch.max(-advantages * ratio,
                                 -advantages * ratio.clamp(1 - self.clip_coef, 1 + self.clip_coef)))
        if c.clip_vloss:
            clipped = old_values + (new_values - old_values).clamp(-c.vf_clip_coef, c.vf_clip_coef)
            v_loss = 0.5 * mean(torch.max((new_values - returns) ** 2, (clipped - returns) ** 2))
        else:
            v_loss = 0.5 * mean((new_values - returns) ** 2)
        entropy_loss = mean(entropy)
        loss = pg_loss - c.ent_coef * entropy_loss + c.vf_coef * v_loss
        self._check_finite("loss", loss)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = nn.utils.clip_grad_norm_(self.policy.parameters(), c.max_grad_norm)
        self._check_finite("grad_norm", grad_norm)
        self.optimizer.step()
        return {"policy_loss": pg_loss.item(), "value_loss": v_loss.item(),
                "entropy": entropy_loss.item(), "approx_kl": approx_kl.item(),
                "clipfrac": clipfrac.item(), "grad_norm": grad_norm.item(), "loss": loss.item()}

    def _check_finite(self, name: str, value: torch.Tensor) -> None:
        if not torch.isfinite(value).all():
            raise NonFiniteError(
                f"train/{name} is {value.item()} at epoch {self.epoch} (global step "
                f"{self.global_step}); stopping before the parameters are saved. Lower "
                "train.learning_rate or train.max_grad_norm"
            )

    # -- the loop ----------------------------------------------------------------------------
    def train(self) -> dict[str, float]:
        """Run epochs until total_timesteps; log each epoch; checkpoint on schedule and at the end."""
        c = self.config
        started_step, started = self.global_step, time.perf_counter()
        self.profiler.restart()
        while self.epoch < self.num_epochs:
            with threads.using(self.threads.rollout):
                self.collect()
            with self.profiler.learn, threads.using(self.threads.learn):
                losses = self.update()
            self.epoch += 1
            metrics = {**losses, **self._episode_metrics(), **self.profiler.metrics(),
                       **self.threads.metrics()}
            elapsed = max(time.perf_counter() - started, 1e-9)
            metrics["perf/sps"] = (self.global_step - started_step) / elapsed
            metrics["train/epoch"] = self.epoch
            self.last_metrics.update(metrics)
            self.logger.log(metrics, self.global_step)
            if self.progress is not None:
                self.progress(self)
            if c.checkpoint_interval and self.epoch % c.checkpoint_interval == 0:
                self.save_checkpoint()
        if self.run_dir is not None and not (c.checkpoint_interval and self.epoch % c.checkpoint_interval == 0):
            self.save_checkpoint()
        return dict(self.last_metrics)

    def _episode_metrics(self) -> dict[str, float]:
        stats = self.collector.pop_episode_stats()
        return {f"env/{key}": float(np.mean(values)) for key, values in stats.items()}

    # -- checkpoints -------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything needed to continue bit for bit: weights, optimizer (and so the LR schedule
        position with `epoch`), counters, random states, and, where the backend can capture them,
        the envs mid-episode with the observation the next step starts from."""
        return {
            "policy": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "epoch": self.epoch,
            "global_step": self.global_step,
            "train_config": asdict(self.config),
            "config": self.full_config,
            "seed": self.seed,
            "threads": self.threads.state_dict(),
            "rng": {**checkpoint.rng_state(), "generator": self.generator.get_state()},
            "rollout": self.collector.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.epoch, self.global_step = state["epoch"], state["global_step"]
        checkpoint.set_rng_state(state["rng"])
        self.generator.set_state(state["rng"]["generator"])
        if "threads" in state:
            self.threads = threads.resumed(self.threads, state["threads"], self.config)
        self.collector.load_state_dict(state.get("rollout"))

    def save_checkpoint(self) -> Path:
        if self.run_dir is None:
            raise ValueError("PPO(run_dir=None) has nowhere to write checkpoints")
        for name, param in self.policy.named_parameters():
            if not torch.isfinite(param).all():
                raise NonFiniteError(f"parameter {name} is not finite at epoch {self.epoch}; "
                                     "not writing a poisoned checkpoint")
        directory = self.run_dir / "checkpoints"
        path = directory / f"epoch_{self.epoch:06d}.pt"
        checkpoint.save_atomic(self.state_dict(), path)
        checkpoint.prune(directory, self.config.keep_checkpoints)
        self.logger.log_checkpoint(path)
        return path


def train(config: TrainConfig, vecenv, policy: nn.Module, device: str = "auto", seed: int = 0,
          **kwargs) -> PPO:
    """Train `policy` on `vecenv` with PPO; returns the trainer (its `last_metrics` hold the
    final losses, episode stats and throughput)."""
    from puffer.config import resolve_device

    seed_everything(seed)
    trainer = PPO(config, vecenv, policy, device=resolve_device(device), seed=seed, **kwargs)
    trainer.train()
    return trainer
