"""The checks no type can express, run on the composed config before any env starts: each error
names the key, its value and what was expected. What does not live here: the schemas and their
vocabularies (puffer.config.schema), the checks that need the code a config names (the algorithm
class: puffer.build.check).
"""

from __future__ import annotations

import logging
import math
import re
from typing import Any

from omegaconf import OmegaConf

from puffer.config.schema import (
    ACTIVATIONS,
    BACKENDS,
    LOGGER_BACKENDS,
    MODES,
    OBJECTIVE_STATS,
    OPTIMIZERS,
    PIXEL_LAYOUTS,
    SCHEDULES,
    WANDB_MODES,
)
from puffer.errors import ConfigError

log = logging.getLogger(__name__)
# An ocean env's settings that count or measure something (num_rows, size, horizon, ...): >= 1.
OCEAN_POSITIVE = ("num_rows", "num_games", "num_arenas", "num_agents", "num_snakes", "size", "horizon",
                  "max_steps", "episode_length", "length", "arms", "points")


def _require(ok: bool, key: str, value: Any, expected: str) -> None:
    if not ok:
        raise ConfigError(f"{key}={value!r}: expected {expected}")


def validate(cfg) -> None:
    """Reject impossible values and combinations before any env starts, each with its key, its
    value and what was expected. `cfg` is the composed run config."""
    _require(cfg.mode.name in MODES, "mode.name", cfg.mode.name, f"one of {MODES}")
    _require(0 <= cfg.seed < MAX_SEED, "seed", cfg.seed, "an integer in [0, 2**62) (envs and evaluation add "
             "their offsets to it, and torch's and numpy's seeds are 64-bit)")
    _require(cfg.mode.name in ("eval", "export") or cfg.checkpoint is None, "checkpoint", cfg.checkpoint,
             f"null with mode={cfg.mode.name} (checkpoint= is what mode=eval and mode=export read); "
             "to train on from a checkpoint pass resume=<run dir | file | latest>")
    _require(cfg.mode.seconds > 0, "mode.seconds", cfg.mode.seconds, "seconds > 0")
    _require(cfg.profile.timesteps > 0, "profile.timesteps", cfg.profile.timesteps, "an integer > 0")
    _check_env_and_policy(cfg)
    _check_vec(cfg.vec)
    _check_train(cfg.train, cfg.vec)
    _check_runtime(cfg.runtime)
    e = cfg.eval
    _require(e.episodes >= 0, "eval.episodes", e.episodes, "an integer >= 0 (0: no evaluation)")
    _require(e.max_steps >= 1, "eval.max_steps", e.max_steps, "an integer >= 1")
    _require(e.score is None or math.isfinite(e.score), "eval.score", e.score,
             "a finite return, or null (the env's registered reward_threshold)")
    _require(e.video_episodes >= 1, "eval.video_episodes", e.video_episodes, "an integer >= 1")
    _require(e.video_fps >= 1, "eval.video_fps", e.video_fps, "an integer >= 1")
    _require(e.video_interval >= 0, "eval.video_interval", e.video_interval,
             "an integer >= 0 (epochs between training videos; 0: none)")
    if e.watch:
        _require(has_display(), "eval.watch", e.watch,
                 "a display to show the episodes in (DISPLAY or WAYLAND_DISPLAY is not set); "
                 "record them instead with eval.video=true")
        _require(e.episodes > 0, "eval.episodes", e.episodes, "> 0 with eval.watch=true")
    for backend in cfg.logger.backends:
        _require(backend in LOGGER_BACKENDS, "logger.backends", list(cfg.logger.backends),
                 f"a list of {LOGGER_BACKENDS}")
    _require(cfg.logger.mode in WANDB_MODES, "logger.mode", cfg.logger.mode,
             "offline, online, disabled or null")
    _require(cfg.logger.log_checkpoints in ("none", "final", "all"), "logger.log_checkpoints",
             cfg.logger.log_checkpoints, "none, final (the final model file) or all (every checkpoint too)")
    _require(cfg.dist.backend in ("auto", "gloo", "nccl"), "dist.backend", cfg.dist.backend,
             "auto, gloo or nccl")
    _require(cfg.dist.timeout > 0, "dist.timeout", cfg.dist.timeout, "seconds > 0")
    _require(cfg.logger.init_timeout > 0, "logger.init_timeout", cfg.logger.init_timeout, "seconds > 0")
    if cfg.mode.name in ("eval", "export"):
        _require(cfg.checkpoint is not None, "checkpoint", cfg.checkpoint,
                 f"a run directory, agent folder, model or checkpoint file, or `latest` with mode={cfg.mode.name}")
        _require(e.episodes > 0, "eval.episodes", e.episodes, f"> 0 with mode={cfg.mode.name}")
    if cfg.mode.name == "export":
        _require(bool(cfg.mode.dir), "mode.dir", cfg.mode.dir,
                 "the folder to export the agent to, e.g. mode.dir=agents/cartpole")
    check_trial_seeds(cfg)
    _require(cfg.trial_seeds == 1 or (cfg.mode.name == "train" and not cfg.resume), "trial_seeds",
             cfg.trial_seeds, "1 with resume= or a mode other than train")
    for entry in cfg.objective or ():
        objective_entry(entry)
    resolve_device(cfg.device)


def check_trial_seeds(cfg) -> None:
    _require(cfg.trial_seeds >= 1, "trial_seeds", cfg.trial_seeds, "an integer >= 1 (seeds one job trains)")


def objective_entry(entry: str) -> tuple[str, str]:
    """An `objective` entry as (how the trial's seeds combine, metric key):
    `min(eval/return_mean)` -> ("min", "eval/return_mean"); a bare key -> ("mean", key). A key
    outside the sections a run logs (a typo) is refused: a search would optimise NaN."""
    match = re.fullmatch(r"(\w+)\((.+)\)", entry)
    stat, key = ("mean", entry) if match is None else (match[1], match[2])
    _require(stat in OBJECTIVE_STATS, "objective", entry,
             f"a metric key, or one inside one of {OBJECTIVE_STATS}, e.g. min(eval/return_mean)")
    _require(key.startswith(METRIC_SECTIONS) and len(key.split("/", 1)[1]) > 0, "objective", entry,
             f"a metric a run logs, under one of {', '.join(METRIC_SECTIONS)} (e.g. eval/return_mean, "
             "perf/time_to_score_s; a run's metrics.jsonl lists them)")
    return stat, key


# What a run's metrics are named under (metrics.jsonl, the values a job returns to a sweeper).
METRIC_SECTIONS = ("eval/", "env/", "perf/", "train/", "benchmark/", "vec/")
# seeds: below 2**62, so that every offset added to one (env i, evaluation) stays a 64-bit seed
MAX_SEED = 2**62
# torch threads: more than any machine has cores (a much larger number segfaults inside OpenMP)
MAX_THREADS = 1024


def has_display() -> bool:
    """Whether a window can open: always on macOS and Windows, on Linux with an X or Wayland display."""
    import os
    import sys

    return sys.platform != "linux" or bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _check_env_and_policy(cfg) -> None:
    missing = sorted(OmegaConf.missing_keys(cfg.env))
    if missing:
        key = missing[0] if missing[0].startswith("env.") else f"env.{missing[0]}"
        raise ConfigError(f"{key} is required by this env config and was not given "
                          "(e.g. python -m puffer env=classic/gym env.id=MountainCar-v0)")
    if str(cfg.env.get("_target_", "")).startswith("puffer.envs.ocean."):  # counts and lengths
        for key, value in cfg.env.items():
            if isinstance(value, int) and not isinstance(value, bool) and key in OCEAN_POSITIVE:
                _require(value >= 1, f"env.{key}", value, "an integer >= 1")
    if "max_sequence_length" in cfg.env:
        _require(cfg.env.max_sequence_length >= 1, "env.max_sequence_length", cfg.env.max_sequence_length,
                 "an integer >= 1")
    if "validate_steps" in cfg.env:
        _require(cfg.env.validate_steps >= 0, "env.validate_steps", cfg.env.validate_steps,
                 "an integer >= 0 (0: no checks)")
    p = cfg.policy
    for key in ("hidden_size", "num_layers"):
        if key in p:
            _require(p[key] >= 1, f"policy.{key}", p[key], "an integer >= 1")
    if "obs_clip" in p:
        _require(p.obs_clip > 0, "policy.obs_clip", p.obs_clip, "a number > 0")
    if "activation" in p:
        _require(p.activation in ACTIVATIONS, "policy.activation", p.activation, f"one of {sorted(ACTIVATIONS)}")
    if p.get("log_std_init") is not None:
        _require(math.isfinite(p.log_std_init), "policy.log_std_init", p.log_std_init, "a finite number")
    if "layout" in p:
        _require(p.layout in PIXEL_LAYOUTS, "policy.layout", p.layout, f"one of {PIXEL_LAYOUTS}")
    _require(p.get("rnn") in (None, "lstm"), "policy.rnn", p.get("rnn"), "lstm or null")
    if "start_e" in cfg.train:  # a Q-learner (train=pqn, train=dqn) needs a network of action values
        _require(p.get("_target_") not in (*ACTOR_CRITICS, SAC_NETWORK), "policy._target_", p.get("_target_"),
                 "a network of action values with a Q-learner: policy=q (puffer.policies.networks.QNetwork)")
        _require(p.get("rnn") is None, "policy.rnn", p.get("rnn"),
                 "null with a Q-learner (its Q-networks are feed-forward here)")
    sac = "autotune" in cfg.train
    if sac or p.get("_target_") == SAC_NETWORK:  # SAC and its networks go together
        _require(sac == (p.get("_target_") == SAC_NETWORK), "policy._target_", p.get("_target_"),
                 f"{SAC_NETWORK} with train=sac: policy=sac" if sac else
                 "train=sac with policy=sac (SAC's actor and twin critics); another algorithm takes its own policy")
        _require(p.get("rnn") is None, "policy.rnn", p.get("rnn"), "null with train=sac (its networks are feed-forward here)")


# The actor-critic networks, which a Q-learner cannot learn with; SAC's, which only SAC trains.
ACTOR_CRITICS = ("puffer.policies.networks.Default", "puffer.policies.networks.NatureCNN")
SAC_NETWORK = "puffer.policies.networks.SACNetwork"


def _check_vec(v) -> None:
    _require(v.backend in BACKENDS, "vec.backend", v.backend, f"one of {BACKENDS}")
    _require(v.num_envs >= 1, "vec.num_envs", v.num_envs, "an integer >= 1")
    _require(v.step_timeout is None or v.step_timeout > 0, "vec.step_timeout", v.step_timeout,
             "seconds > 0, or null to wait forever")
    _require(v.restart_failed_workers >= 0, "vec.restart_failed_workers", v.restart_failed_workers,
             "an integer >= 0")
    _require(v.restart_failed_workers == 0 or v.backend in ("multiprocessing", "ray"),
             "vec.restart_failed_workers", v.restart_failed_workers,
             f"0 with vec.backend={v.backend}: workers are restarted by vec=multiprocessing and vec=ray")
    _require(v.backend != "serial" or v.num_workers in (None, 1), "vec.num_workers", v.num_workers,
             "null with vec=serial (this process steps every env); workers need vec=multiprocessing or ray")
    if v.num_workers is not None:
        _require(v.num_workers >= 1 and v.num_envs % v.num_workers == 0, "vec.num_workers", v.num_workers,
                 f"a divisor of vec.num_envs={v.num_envs} (each worker steps as many envs)")
    if v.envs_per_batch is not None:
        _require(1 <= v.envs_per_batch <= v.num_envs and v.num_envs % v.envs_per_batch == 0,
                 "vec.envs_per_batch", v.envs_per_batch, f"a divisor of vec.num_envs={v.num_envs}, or null (all of them)")
    _require(v.start_method in (None, "fork", "spawn", "forkserver"), "vec.start_method", v.start_method,
             "fork, spawn, forkserver or null")
    _require(v.autotune_seconds > 0, "vec.autotune_seconds", v.autotune_seconds, "seconds > 0")


# Train keys where infinity means "no limit"; every other number must be finite (an infinite
# coefficient is otherwise a non-finite loss after the envs have started).
UNBOUNDED_TRAIN_KEYS = ("clip_coef", "vf_clip_coef", "max_grad_norm", "reward_clip", "target_kl")


def _check_train(t, v) -> None:
    """The base keys every algorithm has (AlgorithmConfig), then the keys of PPO's schema
    (TrainConfig) where the algorithm's schema has them; an algorithm's own keys are its own."""
    for key, value in t.items():
        if isinstance(value, float):
            _require(not math.isnan(value) and (math.isfinite(value) or key in UNBOUNDED_TRAIN_KEYS),
                     f"train.{key}", value, "a finite number")
    _require(t.total_timesteps > 0, "train.total_timesteps", t.total_timesteps, "an integer > 0")
    _require(t.num_steps >= 1, "train.num_steps", t.num_steps, "an integer >= 1")
    _require(t.learning_rate > 0 and math.isfinite(t.learning_rate), "train.learning_rate",
             t.learning_rate, "a finite number > 0")
    _require(0 <= t.gamma <= 1, "train.gamma", t.gamma, "a number in [0, 1]")
    for key in ("adam_eps", "reward_clip"):
        _require(t[key] > 0, f"train.{key}", t[key], "a number > 0")
    _require(t.num_minibatches >= 1, "train.num_minibatches", t.num_minibatches, "an integer >= 1")
    batch = t.num_steps * v.num_envs
    _require(t.num_minibatches <= batch, "train.num_minibatches", t.num_minibatches,
             f"at most the batch of train.num_steps * vec.num_envs = {batch} steps")
    if batch % t.num_minibatches:
        size = -(-batch // t.num_minibatches)
        log.warning("train.num_minibatches=%d does not divide the batch of train.num_steps * vec.num_envs = %d "
                    "steps: its minibatches hold %d and %d steps (a divisor gives equal ones)",
                    t.num_minibatches, batch, size, batch - size * (t.num_minibatches - 1))
    _require(t.optimizer in OPTIMIZERS, "train.optimizer", t.optimizer, f"one of {OPTIMIZERS}")
    _require(t.lr_schedule in SCHEDULES, "train.lr_schedule", t.lr_schedule, f"one of {SCHEDULES}")
    has = set(t.keys())
    if "gae_lambda" in has:
        _require(0 <= t.gae_lambda <= 1, "train.gae_lambda", t.gae_lambda, "a number in [0, 1]")
    if "update_epochs" in has:
        _require(t.update_epochs >= 1, "train.update_epochs", t.update_epochs, "an integer >= 1")
    for key in has & {"clip_coef", "vf_clip_coef", "max_grad_norm", "vtrace_rho_clip", "vtrace_c_clip",
                      "prio_alpha"}:
        _require(t[key] > 0, f"train.{key}", t[key], "a number > 0")
    for key in has & {"ent_coef", "vf_coef"}:
        _require(t[key] >= 0, f"train.{key}", t[key], "a number >= 0")
    if "target_kl" in has:
        _require(t.target_kl is None or t.target_kl > 0, "train.target_kl", t.target_kl,
                 "a number > 0 or null")
    if "noise_correlation" in has:
        _require(0 <= t.noise_correlation < 1, "train.noise_correlation", t.noise_correlation,
                 "a number in [0, 1) (0: independent draws)")
        _require(t.noise_correlation == 0 or v.envs_per_batch in (None, v.num_envs), "train.noise_correlation",
                 t.noise_correlation, f"0 with vec.envs_per_batch={v.envs_per_batch}: each row's draws follow "
                 "its last, so every step must act for all of vec.num_envs envs")
    for key in has & {"q_lambda", "start_e", "end_e", "exploration_fraction"}:
        _require(0 <= t[key] <= 1, f"train.{key}", t[key], "a number in [0, 1]")
    for key in has & {"buffer_size", "batch_size", "target_update_interval"}:
        _require(t[key] >= 1, f"train.{key}", t[key], "an integer >= 1")
    for key in has & {"learning_starts", "gradient_steps"}:
        _require(t[key] >= 0, f"train.{key}", t[key], "an integer >= 0")
    if "tau" in has:
        _require(0 < t.tau <= 1, "train.tau", t.tau, "a number in (0, 1] (1: the target is copied)")
    if "autotune" in has:  # SAC learns log(ent_coef)
        _require(t.ent_coef > 0, "train.ent_coef", t.ent_coef, "a number > 0 with train=sac (alpha, learned as its log)")
    if "prio_beta0" in has:
        _require(0 <= t.prio_beta0 <= 1, "train.prio_beta0", t.prio_beta0, "a number in [0, 1]")


def _check_runtime(r) -> None:
    _require(r.checkpoint_interval >= 0, "runtime.checkpoint_interval", r.checkpoint_interval,
             "an integer >= 0 (0: only at the end)")
    _require(math.isfinite(r.checkpoint_minutes) and r.checkpoint_minutes >= 0, "runtime.checkpoint_minutes",
             r.checkpoint_minutes, "minutes >= 0 (0: off)")
    _require(r.keep_checkpoints >= 0, "runtime.keep_checkpoints", r.keep_checkpoints,
             "an integer >= 0 (0 keeps all)")
    for key in ("torch_threads", "rollout_threads"):
        _require(0 <= r[key] <= MAX_THREADS, f"runtime.{key}", r[key],
                 f"an integer in [0, {MAX_THREADS}] (0 picks for the machine)")
    _require(r.amp in (None, "bf16"), "runtime.amp", r.amp, "bf16 or null")
    _require(r.log_interval >= 0, "runtime.log_interval", r.log_interval, "a number >= 0")
    _require(r.max_seconds is None or r.max_seconds > 0, "runtime.max_seconds", r.max_seconds,
             "seconds > 0 or null")


def resolve_device(device: str) -> str:
    """`auto` -> cuda when available, else cpu; checks that an explicit device exists."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return device
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(f"device={device!r}: CUDA is not available here; use device=auto or cpu")
        index = device.partition(":")[2]
        if index and (not index.isdigit() or int(index) >= torch.cuda.device_count()):
            raise ConfigError(
                f"device={device!r}: expected cuda or cuda:N with N < {torch.cuda.device_count()}"
            )
        return device
    raise ConfigError(f"device={device!r}: expected auto, cpu, cuda or cuda:N")
