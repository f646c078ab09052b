"""PPO: collect a rollout from a vector env, then learn from it. One loop for every policy.

What lives here: `PPO` (rollout storage, `collect`, GAE, `update`, checkpoints) and `train`.
What does not: building envs or policies from configs (puffer.run), evaluation
(puffer.evaluation), where metrics go (puffer.loggers).

Rows and validity. The vector env gives one row per agent slot. Envs autoreset on the step after
an episode ends (see puffer.emulation): that step's action is ignored and it returns the reset
observation. So row t is *valid* when its agent is alive (mask) and the row's previous step was not
the end of an episode; invalid rows are left out of GAE and of the loss. The observation returned
with a done flag is the true final one: on truncation its value is the bootstrap, for free.
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
from puffer.vector.base import rows_of

log = logging.getLogger(__name__)


def _float32(params):
    """Distribution parameters (a tensor or a tuple of them) in float32."""
    if isinstance(params, tuple):
        return tuple(p.float() for p in params)
    return params.float()


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
        obs_space = vecenv.single_observation_space
        obs_dtype = torch.from_numpy(np.empty(0, obs_space.dtype)).dtype
        act_dtype = torch.from_numpy(np.empty(0, vecenv.action_dtype)).dtype
        on = {"device": self.device}
        self.obs = torch.zeros((T, N, *obs_space.shape), dtype=obs_dtype, **on)
        self.actions = torch.zeros((T, N, *vecenv.action_shape), dtype=act_dtype, **on)
        self.logprobs = torch.zeros((T, N), **on)
        self.values = torch.zeros((T, N), **on)
        self.rewards = torch.zeros((T, N), **on)
        self.terminals = torch.zeros((T, N), **on)
        self.dones = torch.zeros((T, N), **on)
        self.valid = torch.zeros((T, N), dtype=torch.bool, **on)
        self.advantages = torch.zeros((T, N), **on)
        self.next_value = torch.zeros(N, **on)
        if self.recurrent:  # per-row LSTM state, its value at t=0, and where episodes start
            self.state = policy.initial_state(N, self.device)
            self.state0 = policy.initial_state(N, self.device)
            self.starts = torch.zeros((T, N), dtype=torch.bool, **on)

        self.global_step = 0
        self.epoch = 0
        self._prev_done = np.zeros(N, dtype=bool)  # did each row's last step end an episode?
        self._before_done = np.zeros(N, dtype=bool)  # ... and the step before (recurrent resets)
        self._awaiting = np.zeros(N, dtype=bool)  # an action was sent, its result not yet stored
        self._ptr = np.zeros(N, dtype=np.int64)  # actions stored this rollout, per row
        # Groups of rows received but not yet sent an action (all of them between rollouts):
        # (rows, observations, masks). None until the first reset.
        self._held: list[tuple[slice | np.ndarray, np.ndarray, np.ndarray]] | None = None
        self._episode_stats: dict[str, list[float]] = defaultdict(list)
        self.last_metrics: dict[str, float] = {}

    # -- rollout -----------------------------------------------------------------------------
    @torch.inference_mode()
    def collect(self) -> None:
        """Fill the rollout storage with num_steps steps of every row, then bootstrap values.

        Rows arrive in groups from `vecenv.recv()`: all of them at once (Serial, or a
        synchronous Multiprocessing), or the first ready workers' (`vec.batch_size` <
        `vec.num_envs`), so that some envs step while the policy acts for others. Each row keeps
        its own step counter; a row that has stored num_steps actions has its next observation
        valued for the bootstrap and is held, unsent, until the next rollout."""
        T, prof = self.config.num_steps, self.profiler
        if self._held is None:
            self.vecenv.async_reset(self.seed)
            self._held = []
        self._ptr[:] = 0
        remaining = self.vecenv.num_agents
        held, self._held = self._held, []
        for rows, obs, masks in held:
            self._act(rows, obs, masks)
        while remaining:
            with prof.env:
                received = self.vecenv.recv()
            self._record(received[4])
            for rows, (obs, rewards, terminals, truncations, masks) in self._by_step(received):
                with prof.copy:
                    if self._awaiting[rows].any():
                        self._store_result(rows, rewards, terminals, truncations)
                if self._ptr[rows][0] < T:
                    self._act(rows, obs, masks)
                    continue
                with prof.forward:
                    index = rows if isinstance(rows, slice) else torch.from_numpy(rows)
                    obs_t = torch.from_numpy(obs).to(self.device)
                    if self.recurrent:
                        self.next_value[index] = self._recurrent_step(None, rows, index, obs=obs_t)[1]
                    else:
                        self.next_value[index] = self.forward(obs_t)[1]
                self._held.append((rows, obs.copy(), masks.copy()))
                remaining -= len(self._ptr[rows])

    def _rows(self, env_ids: np.ndarray) -> slice | np.ndarray:
        """Agent rows of these envs: a slice when contiguous (views, no gather)."""
        return rows_of(env_ids, self.vecenv.agents_per_env)

    def _by_step(self, received):
        """A recv()'s envs as groups at the same rollout step: (rows, (obs, rewards, terminals,
        truncations, masks)). Usually one group; envs of several workers can arrive together at
        different steps when those workers were sent at different times."""
        obs, rewards, terminals, truncations, _, env_ids, masks = received
        per_row, env_ids = (obs, rewards, terminals, truncations, masks), np.asarray(env_ids)
        n = self.vecenv.agents_per_env
        steps = self._ptr[env_ids * n]  # an env's rows always move together
        if (steps == steps[0]).all():
            yield self._rows(env_ids), per_row
            return
        row_steps = np.repeat(steps, n)
        for t in np.unique(steps):
            yield self._rows(env_ids[steps == t]), tuple(x[row_steps == t] for x in per_row)

    def _act(self, rows, obs: np.ndarray, masks: np.ndarray) -> None:
        """Store the observations of `rows` at their next step, sample actions, send them."""
        prof = self.profiler
        t = int(self._ptr[rows].min())
        index = rows if isinstance(rows, slice) else torch.from_numpy(rows)
        with prof.copy:
            self.obs[t, index] = torch.from_numpy(obs).to(self.device, non_blocking=True)
            self.valid[t, index] = torch.from_numpy(masks & ~self._prev_done[rows]).to(self.device)
        with prof.forward:
            with self.autocast():
                if self.recurrent:
                    params, value = self._recurrent_step(t, rows, index, commit=True, masks=masks)
                else:
                    params, value = self.forward(self.obs[t, index])
            params, value = _float32(params), value.float()
            action, logprob = self.dist.sample(params)
            self.values[t, index] = value
            self.actions[t, index] = action
            self.logprobs[t, index] = logprob
            env_actions = self.dist.to_env(action)
        with prof.env:
            self.vecenv.send(env_actions, self._env_ids(rows))
        self._ptr[rows] += 1
        self._awaiting[rows] = True
        self.global_step += len(self._ptr[rows])

    def _recurrent_step(self, t, rows, index, commit: bool = False, obs=None, masks=None):
        """One LSTM step for `rows`: state zeroed where an episode starts; with `commit`, the
        new state is kept and step t's start flags (and the t=0 state) recorded for training.

        "Starts" are the final observation of an episode (a dummy step), the reset observation
        after it, and rows with no live agent, so a new episode begins from a zero state."""
        starts = self._prev_done[rows] | self._before_done[rows]
        if masks is not None:
            starts = starts | ~masks
        starts = torch.from_numpy(starts).to(self.device)
        h, c = (x[index] * ~starts[:, None] for x in self.state)
        if commit:
            self.starts[t, index] = starts
            if t == 0:
                self.state0[0][index], self.state0[1][index] = h, c
            obs = self.obs[t, index]
        params, value, (h, c) = self.policy.step(obs, (h, c))
        if commit:
            self.state[0][index], self.state[1][index] = h, c
        return params, value

    def _env_ids(self, rows) -> np.ndarray:
        n = self.vecenv.agents_per_env
        if isinstance(rows, slice):
            return np.arange(rows.start // n, rows.stop // n)
        return np.unique(rows // n)

    def _store_result(self, rows, rewards, terminals, truncations) -> None:
        t = int(self._ptr[rows].min()) - 1
        index = rows if isinstance(rows, slice) else torch.from_numpy(rows)
        done = terminals | truncations
        self.rewards[t, index] = torch.from_numpy(rewards).to(self.device)
        self.terminals[t, index] = torch.from_numpy(terminals).to(self.device, torch.float32)
        self.dones[t, index] = torch.from_numpy(done).to(self.device, torch.float32)
        self._before_done[rows] = self._prev_done[rows]
        self._prev_done[rows] = done
        self._awaiting[rows] = False

    def _record(self, infos) -> None:
        for info in infos:
            for key, value in info.items():
                if key != "env_id" and key != "row":
                    self._episode_stats[key].append(value)

    def compute_advantages(self) -> None:
        """GAE that stops at episode ends; terminals don't bootstrap, truncations do (the value
        of the final observation is the next row's value)."""
        c = self.config
        last = torch.zeros_like(self.next_value)
        for t in reversed(range(c.num_steps)):
            next_value = self.next_value if t == c.num_steps - 1 else self.values[t + 1]
            delta = self.rewards[t] + c.gamma * next_value * (1 - self.terminals[t]) - self.values[t]
            last = delta + c.gamma * c.gae_lambda * (1 - self.dones[t]) * last
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
        returns = self.advantages + self.values
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
        valid_returns, valid_values = returns[self.valid], self.values[self.valid]
        var = valid_returns.var()
        metrics["train/explained_variance"] = float("nan") if var == 0 else float(
            1 - (valid_returns - valid_values).var() / var)
        metrics["train/learning_rate"] = self.optimizer.param_groups[0]["lr"]
        metrics["train/clip_coef"] = self.clip_coef
        return metrics

    def _sample_minibatches(self, returns):
        """Valid samples only, shuffled each epoch into train.num_minibatches minibatches."""
        index = self.valid.reshape(-1).nonzero().squeeze(-1)
        if len(index) == 0:
            return None
        obs = self.obs.reshape(-1, *self.obs.shape[2:])[index]
        actions = self.actions.reshape(-1, *self.actions.shape[2:])[index]
        logprobs, values = self.logprobs.reshape(-1)[index], self.values.reshape(-1)[index]
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
        n = self.vecenv.num_agents
        size = max(1, math.ceil(n / self.config.num_minibatches))

        def epoch():
            order = torch.randperm(n, generator=self.generator).to(self.device)
            for start in range(0, n, size):
                rows = order[start : start + size]
                sequence = (self.state0[0][rows], self.state0[1][rows], self.starts[:, rows])
                yield (self.obs[:, rows], self.actions[:, rows], self.logprobs[:, rows],
                       self.values[:, rows], self.advantages[:, rows], returns[:, rows],
                       self.valid[:, rows].float(), sequence)

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
        params, new_values = _float32(params), new_values.float()
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
        stats, self._episode_stats = self._episode_stats, defaultdict(list)
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
            "rollout": None if not self._held else {
                "prev_done": self._prev_done.copy(),
                "before_done": self._before_done.copy(),
                "recurrent_state": [x.clone() for x in self.state] if self.recurrent else None,
                "env_state": self.vecenv.get_state(),
            },
        }

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.epoch, self.global_step = state["epoch"], state["global_step"]
        checkpoint.set_rng_state(state["rng"])
        self.generator.set_state(state["rng"]["generator"])
        if "threads" in state:
            self.threads = threads.resumed(self.threads, state["threads"], self.config)
        rollout = state.get("rollout")
        if rollout is None:
            return
        env_state = rollout["env_state"]
        backend = type(self.vecenv).__name__.lower()
        saved = "none" if env_state is None else env_state.get("backend", "serial")
        if saved != backend:
            log.warning("the checkpoint holds no env state for backend %s (it has %s); envs restart "
                        "from their seeds", backend, saved)
            return
        self.vecenv.set_state(env_state)
        self._prev_done = rollout["prev_done"].copy()
        self._before_done = rollout["before_done"].copy()
        if self.recurrent:
            self.state = tuple(x.to(self.device) for x in rollout["recurrent_state"])
        obs, masks = self.vecenv.current()
        self._held = [(slice(0, self.vecenv.num_agents), obs.copy(), masks.copy())]

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
