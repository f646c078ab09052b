"""The on-policy loop every algorithm shares: collect with the one collector, learn, log, save.

What lives here: `Trainer` (the policy on its device, the optimizer, rollout storage and its
`Collector`, the thread plan, the epoch loop, checkpoints), `seed_everything` and
`NonFiniteError`. An algorithm subclasses `Trainer` and implements `update()`, which learns from
`self.rollout` and returns its `train/*` metrics (puffer.training.ppo.PPO). `train._target_` names the
algorithm's class. What does not: the loss (the algorithm's module), collecting (puffer.training.rollout),
building envs and policies from configs (puffer.build).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import random
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
from torch import nn

from puffer.config.schema import AlgorithmConfig, RuntimeConfig
from puffer.errors import ConfigError
from puffer.files import checkpoint
from puffer.loggers.base import Logger
from puffer.monitor.profiler import Profiler
from puffer.monitor.progress import LOSSES
from puffer.policies.distributions import GLOBAL_NOISE, Noise
from puffer.policies.protocol import check_policy, is_recurrent
from puffer.runtime import distributed, threads
from puffer.runtime.allocator import retain_freed_memory
from puffer.training.optim import lr_scale, make_optimizer
from puffer.training.reward_scaler import RewardScaler
from puffer.training.rollout import Collector, Rollout
from puffer.vector.base import EnvError

log = logging.getLogger(__name__)


class NonFiniteError(FloatingPointError):
    """A loss, gradient or parameter became NaN or Inf; training stops before saving it."""


class Stopped(KeyboardInterrupt):
    """Training stopped at an epoch boundary on request (`stop_requested`, e.g. SIGTERM), after
    saving `path`: resuming from it continues exactly where the run would have gone on."""

    def __init__(self, reason: str, path: Path | None):
        super().__init__(reason)
        self.reason, self.path = reason, path

    def __reduce__(self):  # (a batch in a child process of the members launcher sends it back)
        return type(self), (self.reason, self.path)


class TensorSnapshot:
    """Copies of the tensors inside a nested structure (state dicts), refreshed in place with one
    foreach copy while the structure keeps its shape; `restored(structure)` is the structure with
    the copies in place of its tensors."""

    def __init__(self):
        self.copies: list[torch.Tensor] | None = None

    def take(self, structure) -> None:
        tensors = [t.detach() for t in _tensors(structure)]
        if self.copies is not None and [c.shape for c in self.copies] == [t.shape for t in tensors] and all(
                c.dtype == t.dtype and c.device == t.device for c, t in zip(self.copies, tensors, strict=True)):
            torch._foreach_copy_(self.copies, tensors)
        else:  # the first time, or the optimizer has made its state since
            self.copies = [t.clone() for t in tensors]

    def restored(self, structure):
        if self.copies is None or len(self.copies) != len(list(_tensors(structure))):
            return structure
        copies = iter(self.copies)
        return _replace(structure, copies)


def _tensors(node):
    if isinstance(node, torch.Tensor):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from _tensors(value)
    elif isinstance(node, (list, tuple)):
        for value in node:
            yield from _tensors(value)


def _replace(node, copies):
    if isinstance(node, torch.Tensor):
        return next(copies)
    if isinstance(node, dict):
        return {key: _replace(value, copies) for key, value in node.items()}
    if isinstance(node, (list, tuple)):
        return type(node)(_replace(value, copies) for value in node)
    return node


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def refuse_turn_based(vecenv, name: str, learning: str) -> None:
    """A ConfigError when `vecenv` is a turn-based game, whose agents take turns: the algorithm
    `name` (e.g. train=sac) learns, by `learning` (e.g. SAC), from consecutive steps of one
    agent, which such a game does not have."""
    if getattr(vecenv.driver_env, "turn_based", False):
        raise ConfigError(f"{name}: a turn-based env's agents take turns, and {learning} over their turns is not "
                          "built; expected train=ppo")


def env_processes(vecenv) -> int:
    """Processes stepping envs beside the trainer while it collects (they sleep while it learns)."""
    return getattr(vecenv, "num_workers", 0) if vecenv.steps_in_workers else 0


class Trainer:
    """Collect a rollout, `update()` from it, log, checkpoint; until train.total_timesteps."""

    # Agents whose rows share the vector env (puffer.training.batched: members of a batch, each
    # with vecenv.num_rows / agents rows): steps and epochs count one agent's steps.
    agents: int = 1
    # The train/* metrics the progress dashboard shows, PPO's by default.
    shown_losses: tuple[str, ...] = LOSSES

    def __init__(self, config: AlgorithmConfig, vecenv, policy: nn.Module, device: str = "cpu",
                 seed: int = 0, runtime: RuntimeConfig | None = None, logger: Logger | None = None,
                 run_dir: str | Path | None = None, full_config: dict | None = None, progress=None,
                 profiler: Profiler | None = None, epoch_hooks=()):
        self.config = config  # the algorithm's settings
        self.runtime = runtime = runtime or RuntimeConfig()  # checkpoints, threads, precision
        self.vecenv = vecenv
        if runtime.retain_memory:
            retain_freed_memory()
        self.device = torch.device(device)
        self.policy = policy.to(self.device)
        self.seed = seed
        self.logger = logger or Logger()
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.full_config = full_config
        self.progress = progress
        # Called with the trainer after each epoch is logged, before its checkpoint (e.g. the
        # training videos of eval.video_interval).
        self.epoch_hooks = list(epoch_hooks)
        self.optimizer = self.make_optimizer()
        check_policy(policy)
        self.recurrent = is_recurrent(policy)
        self.forward = torch.compile(self.policy) if runtime.compile and not self.recurrent else self.policy
        self.profiler = profiler or Profiler(self.device.type)
        if self.profiler.machine is not None:
            self.profiler.machine.track(vecenv.local_worker_pids())
        # bf16 autocast around the policy's forward passes (matmuls and convs in bf16, losses
        # and softmaxes kept in float32 by autocast's own rules).
        self.autocast = (functools.partial(torch.autocast, self.device.type, dtype=torch.bfloat16)
                         if runtime.amp == "bf16" else contextlib.nullcontext)
        self.generator = torch.Generator().manual_seed(seed)

        # Under torchrun, this is one of dist.world_size ranks, each with its own envs; the step
        # counts below are of all ranks together (puffer.runtime.distributed).
        self.world = distributed.context()
        T, N = config.num_steps, vecenv.num_rows
        self.batch_size = T * N  # this rank's samples per rollout
        self.threads = self.adjusted_threads(threads.plan(
            self.agent_policy(), vecenv.single_observation_space,
            minibatch_rows=self.minibatch_rows(),
            rollout_rows=vecenv.rows_per_batch, env_processes=env_processes(vecenv),
            torch_threads=runtime.torch_threads, rollout_threads=runtime.rollout_threads,
            device=str(self.device)))
        log.info("%s", self.threads.describe())
        self.steps_per_epoch = self.batch_size * self.world.world_size // self.agents
        self.num_epochs = math.ceil(config.total_timesteps / self.steps_per_epoch)
        if self.num_epochs * self.steps_per_epoch != config.total_timesteps:
            epochs = f"{self.num_epochs} whole epoch{'s' if self.num_epochs > 1 else ''}"
            ranks = f" x {self.world.world_size} ranks" if self.world.world_size > 1 else ""
            log.info("train.total_timesteps=%d: training %d steps, %s of %d (num_steps %d x %d rows%s)",
                     config.total_timesteps, self.num_epochs * self.steps_per_epoch, epochs,
                     self.steps_per_epoch, T, N // self.agents, ranks)
        self.rollout = Rollout(T, N, vecenv.single_observation_space, vecenv.action_shape,
                               vecenv.action_dtype, self.device, policy)
        reward_scaler = self.make_reward_scaler() if config.norm_reward else None
        self.collector = Collector(vecenv, self.policy, self.rollout, seed=seed, forward=self.forward,
                                   profiler=self.profiler, autocast=self.autocast,
                                   reward_scaler=reward_scaler, on_step=self.record_step,
                                   noise=self.sampling_noise(), choose=self.action_rule())
        self.epoch = 0
        self.epoch_end_step = 0  # the global step at the end of the last completed epoch
        self.train_seconds = 0.0  # wall time spent training, over every resume (the model card's)
        # The weights and optimizer state of the last completed epoch, copied before each update
        # (one foreach copy into buffers kept between epochs): what a run that fails inside an
        # update saves (save_failure_checkpoint). `updating` says whether the copy is the state
        # to save; outside an update the live weights are.
        self.completed = TensorSnapshot()
        self.updating = False
        self.last_metrics: dict[str, float] = {}
        # Set from outside (puffer.run's signal handlers): save a checkpoint after this epoch
        # and go on (`save_requested`, SIGUSR1), or save and stop (`stop_requested`, a reason).
        self.save_requested = False
        self.stop_requested: str | None = None

    @classmethod
    def check_env(cls, vecenv) -> None:
        """A ConfigError where this algorithm cannot learn in `vecenv` (its spaces, its kind), said
        before a policy is built for it. Every env suits PPO."""

    # -- what a batch of agents (puffer.training.batched) replaces -----------------------------
    def make_optimizer(self):
        """The optimizer of train.optimizer over the policy's parameters."""
        c = self.config
        return make_optimizer(self.policy, c.optimizer, c.learning_rate, c.adam_eps)

    def make_reward_scaler(self):
        """train.norm_reward's scaler of every row's rewards."""
        return RewardScaler(self.vecenv.num_rows, self.config.gamma, self.config.reward_clip)

    def agent_policy(self) -> nn.Module:
        """One agent's policy, whose forward pass measures the work (the thread plan)."""
        return self.policy

    def sampling_noise(self) -> Noise:
        """Where the collector's action sampling draws its random numbers."""
        return GLOBAL_NOISE

    def minibatch_rows(self) -> int:
        """Samples per learning step (the thread plan's measure of the learner's work): a rollout's share."""
        return math.ceil(self.batch_size / self.config.num_minibatches)

    def action_rule(self):
        """How the collector picks actions from the policy's outputs: None samples the policy's
        distribution; a Q-learner gives its exploration rule (puffer.training.qlearning)."""
        return None

    def adjusted_threads(self, plan: threads.ThreadPlan) -> threads.ThreadPlan:
        """The thread plan this trainer uses, from the one its policy's FLOPs give."""
        return plan

    # -- rollout -----------------------------------------------------------------------------
    @property
    def global_step(self) -> int:
        """Actions sent to the envs so far (agent steps), by every rank together (the ranks
        step in lockstep, a rollout each per epoch); of one agent where several share the envs."""
        return self.collector.steps * self.world.world_size // self.agents

    @global_step.setter
    def global_step(self, value: int) -> None:
        self.collector.steps = value * self.agents // self.world.world_size

    def collect(self) -> None:
        """Fill `self.rollout` with num_steps steps of every row (puffer.training.rollout.Collector)."""
        self.collector.collect()
        if self.collector.reward_scaler is not None:
            self.collector.reward_scaler.sync_ranks()
        self.check_rollout_finite()

    def check_rollout_finite(self) -> None:
        """A NaN or Inf from the env (after the emulation's validation window) stops training
        with its source named, rather than later as a non-finite loss."""
        r = self.rollout
        sources = [("reward", r.rewards)]
        if r.obs.is_floating_point():
            sources.append(("observation", r.obs.reshape(r.num_steps, r.num_rows, -1)))
        for name, values in sources:
            bad = ~torch.isfinite(values)
            if values.dim() == 3:  # (steps, rows, values): a row with any bad value
                bad = bad.any(-1)
            if bad.any():
                step, row = (int(i) for i in bad.nonzero()[0])
                found = values[step, row].reshape(-1)
                value = found[~torch.isfinite(found)][0]
                raise NonFiniteError(
                    f"the env returned a non-finite {name} ({float(value)}) in epoch {self.epoch + 1}: "
                    f"rollout step {step}, row {row} (env {row // self.vecenv.agents_per_env}), and "
                    f"{int(bad.sum())} such steps in this rollout; fix the env or wrap it to clean "
                    "its outputs (values are checked against the space only for env.validate_steps)")

    # -- the algorithm -----------------------------------------------------------------------
    def update(self) -> dict[str, float]:
        """Learn from `self.rollout`; returns `train/*` metrics. Each algorithm implements it."""
        raise NotImplementedError(f"{type(self).__name__} implements no update()")

    def optimizer_step(self, loss: torch.Tensor, max_grad_norm: float | None) -> torch.Tensor | None:
        """One gradient step on `loss`: gradients averaged over torchrun's ranks, their norm
        clipped to `max_grad_norm` (None: not clipped, SAC's), the optimizer stepped; returns the
        norm before clipping. A non-finite loss or gradient poisons the weights here: the update
        finds it in its stats (check_finite_stats) and the run saves the weights from before the update."""
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        # under torchrun: every parameter the optimizer steps (the policy's and e.g. SAC's entropy coefficient)
        distributed.average_gradients(p for group in self.optimizer.param_groups for p in group["params"])
        grad_norm = None
        if max_grad_norm is not None:
            grad_norm = nn.utils.clip_grad_norm_(self.policy.parameters(), max_grad_norm)
        self.optimizer.step()
        return grad_norm

    def check_finite_stats(self, sums: torch.Tensor, names: tuple[str, ...], first: tuple[str, ...] = ()) -> None:
        """NonFiniteError naming the first of `names` (those in `first` before the rest) whose sum
        over an update's steps is not finite."""
        if torch.isfinite(sums).all():
            return
        values = dict(zip(names, sums.tolist(), strict=True))
        name = next(k for k in (*first, *names) if not math.isfinite(values[k]))
        raise NonFiniteError(
            f"train/{name} is {values[name]} at epoch {self.epoch} (global step "
            f"{self.global_step}); stopping before the parameters are saved. Lower "
            "train.learning_rate or train.max_grad_norm"
        )

    def mean_stats(self, sums: torch.Tensor, names: tuple[str, ...], count: int) -> dict[str, float]:
        """train/<name>: each sum over an update's `count` steps divided by it, after
        check_finite_stats (a non-finite sum stops the run before anything is saved)."""
        self.check_finite_stats(sums, names)
        return {f"train/{k}": v / max(count, 1) for k, v in zip(names, sums.tolist(), strict=True)}

    def anneal_learning_rate(self) -> None:
        """train.anneal_lr: the LR of this epoch on train.lr_schedule's way to 0."""
        c = self.config
        if c.anneal_lr:
            for group in self.optimizer.param_groups:
                group["lr"] = c.learning_rate * lr_scale(c.lr_schedule, self.epoch / self.num_epochs)

    def record_step(self, t: int, index, params, value: torch.Tensor) -> None:
        """What an algorithm keeps of each collected step beyond the rollout's fields (the
        collector calls it with the step `t`, the rows `index`, the policy's dist params and
        values, after sampling): e.g. the behaviour policy's logits for a KL penalty, in tensors
        of the algorithm's own. PPO keeps nothing more."""
    def update_obs_stats(self) -> None:
        """A policy with running observation statistics (puffer.policies.normalize.NormalizedPolicy) merges
        the rollout it has just learned from: the next rollout is collected and learned from
        with the same statistics."""
        update = getattr(self.policy, "update_obs_stats", None)
        if update is not None:
            update(self.rollout.obs[self.rollout.valid])

    # -- the loop ----------------------------------------------------------------------------
    def train(self) -> dict[str, float]:
        """Run epochs until total_timesteps; log each epoch; checkpoint on schedule and at the end.
        A run that fails (an env raised, a worker died or hung beyond its restarts, a non-finite
        loss) saves its last completed epoch before the error goes on."""
        try:
            return self._train()
        except (EnvError, NonFiniteError) as exc:
            path = self.save_failure_checkpoint()
            if path is not None:
                log.warning("the run failed in epoch %d (%s); the last completed epoch is saved to %s "
                            "(resume=%s continues from it, its envs restarted from their seeds)",
                            self.epoch + 1, type(exc).__name__, path, path)
            raise

    def _train(self) -> dict[str, float]:
        c = self.runtime
        started_step, started = self.global_step, time.perf_counter()
        trained_before, last_saved = self.train_seconds, started
        self.profiler.restart()
        while self.epoch < self.num_epochs:
            with threads.using(self.threads.rollout):
                self.collect_or_stop()
            with self.profiler.learn, threads.using(self.threads.learn):
                self.completed.take(self.learning_state())
                self.updating = True
                losses = self.update()
                self.update_obs_stats()
            self.epoch += 1
            self.epoch_end_step = self.global_step
            self.updating = False
            now = time.perf_counter()
            self.train_seconds = trained_before + now - started
            metrics = {**losses, **self._episode_metrics(), **self.profiler.metrics(),
                       **self.threads.metrics()}
            metrics["perf/sps"] = (self.global_step - started_step) / max(now - started, 1e-9)
            metrics = distributed.combine_metrics(metrics)  # means over the ranks
            metrics["train/epoch"] = self.epoch
            # the x axis of return against wall-clock time (report's returns_time.png, W&B)
            metrics["perf/train_seconds"] = self.train_seconds
            self.last_metrics.update(metrics)
            self.logger.log(metrics, self.global_step)
            if self.progress is not None:
                self.progress(self)
            for hook in self.epoch_hooks:
                hook(self)
            saved = None
            if c.checkpoint_interval and self.epoch % c.checkpoint_interval == 0:
                saved = self.save_checkpoint()
            requested = self.save_requested
            # a crash costs at most checkpoint_minutes of training, whatever the epoch interval
            if c.checkpoint_minutes and now - last_saved >= 60 * c.checkpoint_minutes and self.epoch < self.num_epochs:
                self.save_requested = True
            self.agree_on_requests()
            if (self.save_requested or self.stop_requested) and self.run_dir is not None and saved is None:
                saved = self.save_checkpoint()
                if saved is not None:
                    log.info("checkpoint saved to %s (%s)", saved, "requested" if requested or self.stop_requested
                             else f"runtime.checkpoint_minutes={c.checkpoint_minutes:g}")
            if saved is not None:
                last_saved = time.perf_counter()
            self.save_requested = False
            if self.stop_requested and self.epoch < self.num_epochs:
                raise Stopped(self.stop_requested, saved)
            if self.epoch < self.num_epochs and self.out_of_time():
                log.info("runtime.max_seconds=%g reached after epoch %d (global step %d): training ends here",
                         c.max_seconds, self.epoch, self.global_step)
                break
        if self.run_dir is not None and not (c.checkpoint_interval and self.epoch % c.checkpoint_interval == 0):
            self.save_checkpoint()
        return dict(self.last_metrics)

    def out_of_time(self) -> bool:
        """runtime.max_seconds of training spent (under torchrun: by any rank, so that all stop
        at the same epoch)."""
        over = self.runtime.max_seconds is not None and self.train_seconds >= self.runtime.max_seconds
        return distributed.any_rank(over) if self.world.parallel else over

    def learning_state(self) -> dict:
        """The weights and optimizer state as they are now (live tensors, not copies)."""
        return {"policy": self.policy.state_dict(), "optimizer": self.optimizer.state_dict()}

    def save_failure_checkpoint(self) -> Path | None:
        """After a failure inside epoch N+1: epoch N's weights, optimizer and counters as
        checkpoints/epoch_N.pt, without the envs (they failed; a resume restarts them from their
        seeds). An epoch_N.pt that the schedule already wrote (with its envs) is kept instead.
        None where there is nothing to save (no run directory, no epoch completed) or under
        torchrun, whose other ranks are not in this save's collectives."""
        if self.run_dir is None or self.epoch == 0 or self.world.parallel:
            return None
        path = self.run_dir / "checkpoints" / f"epoch_{self.epoch:06d}.pt"
        if path.is_file():
            return path
        learned = self.learning_state()
        if self.updating:  # the update went wrong part way: the state from before it
            learned = self.completed.restored(learned)
        for name, param in learned["policy"].items():
            if param.is_floating_point() and not torch.isfinite(param).all():
                log.warning("not saving epoch %d: %s is not finite", self.epoch, name)
                return None
        state = {**learned, "epoch": self.epoch, "global_step": self.epoch_end_step,
                 "train_seconds": self.train_seconds, "train_config": asdict(self.config),
                 "config": self.full_config, "seed": self.seed, "threads": self.threads.state_dict(),
                 "rng": {**checkpoint.rng_state(), "generator": self.generator.get_state()}, "rollout": None}
        checkpoint.save_atomic(state, path)
        checkpoint.prune(path.parent, self.runtime.keep_checkpoints)
        return path

    def collect_or_stop(self) -> None:
        """`collect()`; when the envs fail after a stop was requested, the signal reached them
        too (a local Ray's processes share the process group that SLURM or `timeout` signals):
        what was learned up to the last completed epoch is saved as an interrupted checkpoint
        (without the envs, which restart from their seeds) and training stops."""
        try:
            self.collect()
        except EnvError as exc:
            if self.stop_requested is None or self.run_dir is None:
                raise
            log.warning("the envs failed after %s (%s); saving the last completed epoch without them",
                        self.stop_requested, str(exc).splitlines()[0])
            raise Stopped(self.stop_requested, self.save_checkpoint(interrupted=True)) from exc

    def agree_on_requests(self) -> None:
        """Under torchrun a signal reaches one rank or all: every rank saves (rank 0 writes) and
        stops together when any was asked to."""
        if not self.world.parallel:
            return
        self.save_requested = distributed.any_rank(self.save_requested)
        if distributed.any_rank(self.stop_requested is not None) and self.stop_requested is None:
            self.stop_requested = "a signal to another rank"

    def _episode_metrics(self) -> dict[str, float]:
        stats = self.collector.pop_episode_stats()
        metrics = {f"env/{key}": float(np.mean(values)) for key, values in stats.items()}
        if self.vecenv.restart_budget:  # vec.restart_failed_workers: restarts so far
            metrics["vec/worker_restarts"] = self.vecenv.restarts
        return metrics

    # -- checkpoints -------------------------------------------------------------------------
    def rank_state(self) -> dict:
        """What differs between torchrun ranks: random states and the envs with their rollout
        bookkeeping."""
        return {"threads": self.threads.state_dict(),
                "rng": {**checkpoint.rng_state(), "generator": self.generator.get_state()},
                "rollout": self.collector.state_dict()}

    def state_dict(self) -> dict:
        """Everything needed to continue bit for bit: weights, optimizer (and so the LR schedule
        position with `epoch`), counters, random states, and, where the backend can capture them,
        the envs mid-episode with the observation the next step starts from. Under torchrun
        every rank's own part is gathered into `ranks` (rank 0 returns the whole state, the
        other ranks None)."""
        parts = distributed.gather_to_main(self.rank_state())
        if parts is None:
            return None
        state = {
            "policy": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "epoch": self.epoch,
            "global_step": self.global_step,
            "train_seconds": self.train_seconds,
            "train_config": asdict(self.config),
            "config": self.full_config,
            "seed": self.seed,
            **parts[0],
        }
        if self.world.enabled:
            state["ranks"] = parts
        return state

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.epoch, self.global_step = state["epoch"], state["global_step"]
        self.train_seconds = float(state.get("train_seconds", 0.0))
        if len(state.get("ranks") or [None]) != self.world.world_size:
            # another world size: the epochs that the saved steps make at this one's epoch size
            self.epoch = self.global_step // self.steps_per_epoch
        self.epoch_end_step = self.global_step
        own = self.own_rank_state(state)
        if own is None:  # a rank the checkpoint did not have: envs and randomness from its seed
            return
        checkpoint.set_rng_state(own["rng"])
        self.generator.set_state(own["rng"]["generator"])
        if "threads" in own:
            self.threads = threads.resumed(self.threads, own["threads"], self.runtime)
        self.collector.load_state_dict(own.get("rollout"))

    def own_rank_state(self, state: dict) -> dict | None:
        """This rank's part of a checkpoint; with another world size than it was saved with, a
        warning says what is not restored."""
        ranks = state.get("ranks")
        saved_world = len(ranks) if ranks else 1
        if saved_world != self.world.world_size:
            if self.world.is_main:
                log.warning("the checkpoint was saved by %d rank(s), this run has %d: weights, optimizer "
                            "and the step count are restored (epochs recounted at this epoch size); "
                            "the envs and random states of ranks the checkpoint lacks start from "
                            "their seeds (the run is not bit-identical)",
                            saved_world, self.world.world_size)
        if ranks is None:
            return state if self.world.rank == 0 else None
        return ranks[self.world.rank] if self.world.rank < len(ranks) else None

    def save_checkpoint(self, interrupted: bool = False) -> Path | None:
        """checkpoints/epoch_N.pt after N epochs. `interrupted` (stopped inside an epoch):
        epoch_N_interrupted.pt beside it, counting only the steps of completed epochs, since
        the unfinished epoch's steps were never learned from."""
        if self.run_dir is None:
            raise ValueError(f"{type(self).__name__}(run_dir=None) has nowhere to write checkpoints")
        for name, param in self.policy.named_parameters():
            if not torch.isfinite(param).all():
                raise NonFiniteError(f"parameter {name} is not finite at epoch {self.epoch}; "
                                     "not writing a poisoned checkpoint")
        directory = self.run_dir / "checkpoints"
        state = self.state_dict()
        if state is None:  # a torchrun rank other than 0: its part went to rank 0
            return None
        name = f"epoch_{self.epoch:06d}"
        if interrupted:
            state["global_step"] = self.epoch_end_step
            name += "_interrupted"
        path = directory / f"{name}.pt"
        checkpoint.save_atomic(state, path)
        checkpoint.prune(directory, self.runtime.keep_checkpoints)
        self.logger.log_checkpoint(path)
        return path
