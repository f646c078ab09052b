"""Config -> objects: the builders a run uses (envs, the vector env, the policy, the logger, the
algorithm's class), each from its config section, and `check`, the validation that needs the
code a config names. The objects are the public Python API's (puffer.vector.make,
puffer.policies, puffer.training.ppo.PPO): the Hydra app is a thin layer over the same code a
user script calls.

What does not live here: running them (puffer.run), the policy's own construction from its
section (puffer.policies.build), the checks of the values alone (puffer.config.validate).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

import puffer.vector
from puffer.config.validate import validate
from puffer.errors import ConfigError
from puffer.loggers.base import JsonlLogger, Logger, MultiLogger
from puffer.policies.build import build_policy
from puffer.training.trainer import Trainer

log = logging.getLogger(__name__)


def check(cfg: DictConfig) -> None:
    """Every check of a composed config before any env starts: its values (validate) and the
    algorithm its train._target_ names."""
    validate(cfg)
    algorithm_class(cfg.train._target_)


def algorithm_class(target: str) -> type:
    """The trainer class `train._target_` names; a clear error unless it is a puffer Trainer."""
    try:
        cls = get_class(target)
    except Exception as exc:  # hydra wraps import errors of every kind
        raise ConfigError(f"train._target_={target!r}: cannot import it ({exc}); expected a "
                          "puffer.training.trainer.Trainer subclass such as puffer.training.ppo.PPO") from None
    if not (isinstance(cls, type) and issubclass(cls, Trainer)):
        raise ConfigError(f"train._target_={target!r}: expected a puffer.training.trainer.Trainer subclass "
                          "such as puffer.training.ppo.PPO")
    return cls


def make_env_creator(cfg: DictConfig, evaluation: bool = False, validated: bool = False):
    """The env group's `_target_` with its fields, as a picklable zero-argument creator. For
    evaluation, the env's `eval_kwargs` (e.g. Atari: full games, true rewards) apply on top.
    `validated`: training in this process has checked the env's values against its spaces (its
    first env.validate_steps steps in each env), so these envs do not check them again (a final
    evaluation of 16 members' 8 envs each would otherwise check every one of its steps)."""
    node = OmegaConf.to_container(cfg.env, resolve=True)
    eval_kwargs = node.pop("eval_kwargs", None) or {}
    if evaluation:
        node.update(eval_kwargs)
    if validated and "validate_steps" in node:
        node["validate_steps"] = 0
    # not recursive: env.wrappers entries with a _target_ are built by the env maker, around the env
    return instantiate(node, _partial_=True, _convert_="all", _recursive_=False)


def make_vecenv(cfg: DictConfig, env_creator, seed: int | None = None):
    """The vector env of cfg.vec; env i is seeded `seed + i` (`seed`: cfg.seed, or a rank's)."""
    seed = cfg.seed if seed is None else seed
    v = cfg.vec
    settings: dict[str, Any] = {"backend": v.backend, "num_workers": v.num_workers,
                                "envs_per_batch": v.envs_per_batch}
    if v.backend == "auto":
        from puffer.vector.autotune import autotune

        settings = autotune(env_creator, v.num_envs, seconds=v.autotune_seconds, seed=seed)
    extra: dict[str, Any] = {}
    if settings["backend"] == "multiprocessing":  # autotune may pick more workers than cores
        extra = multiprocessing_options(v, settings.pop("overwork", False))
    elif settings["backend"] == "ray":
        extra = {"address": v.ray_address, "step_timeout": v.step_timeout,
                 "restart_failed_workers": v.restart_failed_workers}
    else:
        extra = {"step_timeout": v.step_timeout}
    return puffer.vector.make(env_creator, num_envs=v.num_envs, seed=seed, **settings, **extra)


def multiprocessing_options(v: DictConfig, overwork: bool = False) -> dict[str, Any]:
    """The vec.* keys that only the Multiprocessing backend reads."""
    return {"overwork": overwork or v.overwork, "start_method": v.start_method,
            "step_in_main": v.step_in_main, "step_timeout": v.step_timeout,
            "restart_failed_workers": v.restart_failed_workers}


def spaces_from_config(config: dict, agents: bool = False) -> tuple:
    """(flat observation, flat action, native action) spaces of a run's env, built once; with
    `agents`, also each agent's own (observation, action) spaces where the agents' differ (None
    where they do not)."""
    env = make_env_creator(OmegaConf.create(config), evaluation=True)()
    try:
        layout = getattr(env, "action_layout", None)
        found = (env.single_observation_space, env.single_action_space,
                 layout.space if layout is not None else env.single_action_space)
        if not agents:
            return found
        padding = getattr(env, "padding", None)
        return (*found, padding.agent_spaces if padding is not None else None)
    finally:
        env.close()


def make_policy(cfg: DictConfig, vecenv) -> torch.nn.Module:
    policy = build_policy(cfg.policy, vecenv.single_observation_space, vecenv.single_action_space)
    log.info("policy: %s", describe_policy(policy))
    return policy


def describe_policy(policy: torch.nn.Module) -> str:
    """The policy's class, how it reads each observation leaf, and its parameter count: e.g.
    `Default (obs: cnn -> 256), 1,234,567 parameters`."""
    from puffer.policies.networks import ObsEncoder

    parts = ("ObsEncoder", "ImageEncoder", "TextEncoder", "ActionHead")
    encoders = [m for m in policy.modules() if isinstance(m, ObsEncoder)]
    layers = dict.fromkeys(type(m).__name__ for m in policy.modules()
                           if type(m).__module__.startswith("puffer.") and type(m).__name__ not in parts)
    reading = f" ({encoders[0].describe()})" if encoders else ""
    count = sum(p.numel() for p in policy.parameters())
    return f"{' > '.join(layers)}{reading}, {count:,} parameters"


def make_logger(cfg: DictConfig, run_dir: Path, overrides: list[str] | None = None, alongside: bool = False) -> Logger:
    """metrics.jsonl and the backends of logger.backends; `alongside`: other runs of this process
    log at the same time (the members of a batch: one W&B run each)."""
    loggers: list[Logger] = [JsonlLogger(run_dir / "metrics.jsonl")]
    config = OmegaConf.to_container(cfg, resolve=True)
    if "wandb" in cfg.logger.backends:
        from puffer.loggers.wandb import WandbLogger

        loggers.append(WandbLogger(cfg.logger, run_dir, config, **run_identity(cfg, overrides), alongside=alongside))
    if "tensorboard" in cfg.logger.backends:
        from puffer.loggers.tensorboard import TensorBoardLogger

        loggers.append(TensorBoardLogger(run_dir, config))
    return MultiLogger(loggers)


# Overrides that say where or how a run logs and runs, not what it is: never in a W&B name,
# group or tag. The seed names a run but never groups one.
NOT_A_SETTING = ("hydra.", "logger.", "logger=", "mode=", "mode.", "checkpoint=", "resume=", "device=",
                 "runtime.log_interval", "trust_code=")
ENV_KEYS = ("env=", "env.id=", "env.game=", "env.module=")


def run_identity(cfg: DictConfig, overrides: list[str] | None) -> dict:
    """How W&B shows this run, as researchers group runs: `group` is the env, the algorithm and
    the settings the command line changed, the seed left out (so W&B's grouped charts show the
    mean and spread over seeds); `name` is the group and the seed; `tags` the changed settings,
    never a seed; `job_type` the mode (train, eval, export, profile, benchmark). logger.group,
    logger.name and logger.tags set them instead (the tags are added)."""
    from puffer.monitor.progress import env_name

    settings = [o.lstrip("+") for o in overrides or []
                if not o.lstrip("+~").startswith((*NOT_A_SETTING, *ENV_KEYS, "seed="))]
    algorithm = str(cfg.train.get("_target_", "")).rsplit(".", 1)[-1]
    group = " ".join([env_name(cfg), algorithm, *settings])
    return {"group": cfg.logger.group or group, "name": cfg.logger.name or f"{group} seed={cfg.seed}",
            "tags": [*cfg.logger.tags, *settings], "job_type": cfg.mode.name}
