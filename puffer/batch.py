"""Runs as members of one batch: several configs that differ only in their seed and the train
settings of puffer.training.batched.MEMBER_KEYS, trained in one process as one batch, each
leaving the job directory its solo run would (config.yaml, metrics.jsonl, model.safetensors,
its evaluation), so that the report, puffer.load and mode=eval read it unchanged.

What lives here: `run_batch` (what the members launcher, puffer.cli.launcher, and
`puffer.train_batch` call), `batch_key` (which runs can share a batch) and `MemberLoggers`. What
does not: the batched learner (puffer.training.batched), one solo run (puffer.run).
"""

from __future__ import annotations

import copy
import logging
import time
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

import puffer
from puffer.agent import Agent
from puffer.build import check, make_env_creator, make_logger, make_policy, make_vecenv
from puffer.config.resume import check_resumable
from puffer.config.validate import resolve_device
from puffer.errors import ConfigError
from puffer.evaluation.protocol import evaluate_members
from puffer.evaluation.runs import final_evaluation
from puffer.files import checkpoint, model_file, trust
from puffer.loggers.base import Logger
from puffer.monitor.profiler import Profiler
from puffer.monitor.progress import ProgressReporter, env_name
from puffer.run import (
    ScoreWatch,
    check_objective_score,
    close_run,
    command_text,
    env_score,
    prepare_run_dir,
    releasing_run_dirs,
    saved_config_of,
    train_until_done,
)
from puffer.training.batched import MEMBER_KEYS, BatchedPPO, check_batchable
from puffer.training.signals import install_outside_training
from puffer.training.trainer import seed_everything
from puffer.vector.base import member_creators

log = logging.getLogger(__name__)

# Keys that may differ between members: their seed, MEMBER_KEYS, and where or how each logs.
MEMBER_CONFIG_KEYS = ("seed", *(f"train.{key}" for key in MEMBER_KEYS), "logger.name", "logger.tags", "logger.group")


def shared_settings(cfg: DictConfig) -> dict[str, Any]:
    """The settings members of one batch must share: the config's keys (dotted) and values,
    less those members may differ in (MEMBER_CONFIG_KEYS)."""
    config = OmegaConf.to_container(cfg, resolve=True)
    config.pop("hydra", None)
    flat: dict[str, Any] = {}

    def walk(node, prefix: str) -> None:
        if isinstance(node, dict) and node:
            for key, value in node.items():
                walk(value, f"{prefix}{key}.")
        elif prefix[:-1] not in MEMBER_CONFIG_KEYS:
            flat[prefix[:-1]] = node

    walk(config, "")
    return flat


def batch_key(cfg: DictConfig) -> str:
    """Runs with equal keys can train as members of one batch (their shared_settings)."""
    return repr(sorted(shared_settings(cfg).items(), key=lambda item: item[0]))


class MemberLoggers(Logger):
    """A batch's metrics to each member's own loggers: a per-member list gives member k its
    k-th value, anything else goes to all."""

    def __init__(self, loggers: list[Logger]):
        self.loggers = loggers

    def log(self, metrics: dict[str, Any], step: int) -> None:
        for k, logger in enumerate(self.loggers):
            logger.log({key: value[k] if isinstance(value, list) else value for key, value in metrics.items()}, step)

    def log_table(self, name: str, columns: list[str], rows: list) -> None:
        for logger in self.loggers:
            logger.log_table(name, columns, rows)

    def close(self) -> None:
        for logger in self.loggers:
            logger.close()


class MemberScoreWatch:
    """The time to score of each member (puffer.run.ScoreWatch's, from its own episodes; the
    seconds are the batch's)."""

    def __init__(self, score: float | None, members: int):
        self.watches = [ScoreWatch(score) for _ in range(members)]

    def __call__(self, trainer) -> None:
        returns = trainer.last_metrics.get("env/episode_return")
        for k, watch in enumerate(self.watches):
            watch.observe(None if returns is None else returns[k], trainer)


def check_members(cfgs: list[DictConfig]) -> None:
    """ConfigError unless `cfgs` can train as one batch: mode=train, equal but in
    MEMBER_CONFIG_KEYS, a vector env stepping all envs at once, train settings batchable."""
    for cfg in cfgs:
        check(cfg)
        check_objective_score(cfg)
    first = cfgs[0]
    if first.mode.name != "train":
        raise ConfigError(f"mode={first.mode.name}: a batch of members trains (mode=train); expected mode=train")
    if first.vec.backend == "auto" or (first.vec.envs_per_batch not in (None, first.vec.num_envs)):
        raise ConfigError(f"vec.backend={first.vec.backend}, vec.envs_per_batch={first.vec.envs_per_batch}: "
                          "members' envs step all at once; expected vec.backend=serial, multiprocessing or "
                          "ray and no vec.envs_per_batch")
    shared = shared_settings(first)
    for k, cfg in enumerate(cfgs[1:], 1):
        theirs = shared_settings(cfg)
        for key in sorted(shared.keys() | theirs.keys()):
            if shared.get(key) != theirs.get(key):
                raise ConfigError(f"{key}: members of one batch must share it (run 0 has {shared.get(key)!r}, run {k} "
                                  f"{theirs.get(key)!r}); they may differ in {', '.join(MEMBER_CONFIG_KEYS)}")
    check_batchable([OmegaConf.to_object(cfg.train) for cfg in cfgs])


def run_batch(cfgs: list[DictConfig], run_dirs: list[str | Path], batch_dir: str | Path,
              overrides: list[list[str]] | None = None) -> list[dict[str, float]]:
    """Train `cfgs` as the members of one batch; member k writes run_dirs[k] as its solo run
    would, the batch's checkpoints go to `batch_dir`/checkpoints. Returns each member's final
    metrics (eval/* among them), in order."""
    with releasing_run_dirs():
        return _run_batch(cfgs, [Path(d) for d in run_dirs], Path(batch_dir), overrides)


def resumed_state(cfgs: list[DictConfig]) -> dict | None:
    """The batch checkpoint that resume= names (a batch's directory or one of its checkpoints),
    checked to be a batch of these members (their seeds, in order) and of these settings."""
    first = cfgs[0]
    if not first.resume:
        return None
    path, state = checkpoint.load(first.resume, map_location="cpu", trust_code=first.trust_code)
    check_resumable(path, state, first)
    seeds = [int(cfg.seed) for cfg in cfgs]
    saved = (state.get("members") or {}).get("seeds")
    if saved is None:
        raise ConfigError(f"resume={first.resume!r}: {path} is a solo run's checkpoint; a batch resumes from a "
                          "batch's (<sweep dir>/batches/<n>, the run_dir/batch of puffer.train_batch, or the whole "
                          "<sweep dir> when the same multirun is launched again)")
    if saved != seeds:
        raise ConfigError(f"resume={first.resume!r}: {path} holds members with seeds {saved}, this batch has "
                          f"{seeds}; pass the seeds it was trained with")
    log.info("resuming the batch from %s at epoch %d", path, state["epoch"])
    return state


def _run_batch(cfgs: list[DictConfig], run_dirs: list[Path], batch_dir: Path,
               overrides: list[list[str]] | None) -> list[dict[str, float]]:
    check_members(cfgs)
    trust.user_key()
    resume = resumed_state(cfgs)
    overrides = overrides or [[] for _ in cfgs]
    first, n = cfgs[0], len(cfgs)
    for cfg, run_dir in zip(cfgs, run_dirs, strict=True):
        prepare_run_dir(cfg, run_dir)
    prepare_run_dir(first, batch_dir)
    device = resolve_device(first.device)
    install_outside_training()
    vecenv = make_member_vecenv(cfgs)
    logger = progress = None
    try:
        loggers = [make_logger(cfg, run_dir, o, alongside=True)
                   for cfg, run_dir, o in zip(cfgs, run_dirs, overrides, strict=True)]
        logger = MemberLoggers(loggers)
        progress = ProgressReporter(f"{env_name(first)} x {n} members", interval=first.runtime.log_interval)
        scores = MemberScoreWatch(env_score(first), n)
        trainer = build_trainer(cfgs, vecenv, device, logger=logger, run_dir=batch_dir, progress=progress,
                                epoch_hooks=[scores])
        if resume is not None:
            trainer.load_state_dict(resume)
        log.info("training %d members (seeds %s) as one batch: %d envs", n, trainer.seeds, vecenv.num_envs)
        metrics = train_until_done(trainer, False, batch_dir)
        progress.close()
        vecenv.close()
        evaluations = member_evaluations(trainer, cfgs, device)
        return [finish_member(trainer, k, cfgs[k], run_dirs[k], loggers[k], overrides[k],
                              {key: value[k] if isinstance(value, list) else value for key, value in metrics.items()},
                              scores.watches[k], device, None if evaluations is None else evaluations[k])
                for k in range(n)]
    finally:
        close_run(progress, vecenv, logger)


def make_member_vecenv(cfgs: list[DictConfig]):
    """One vector env of every member's vec.num_envs envs, member k's rows together and seeded
    as its solo run's (puffer.vector.base.member_creators)."""
    first = cfgs[0]
    batch_cfg = first.copy()
    batch_cfg.vec.num_envs = len(cfgs) * first.vec.num_envs
    creators = member_creators(make_env_creator(first), [int(cfg.seed) for cfg in cfgs], first.vec.num_envs)
    return make_vecenv(batch_cfg, creators, seed=0)


def build_trainer(cfgs: list[DictConfig], vecenv, device: str, **kwargs) -> BatchedPPO:
    """The batch's learner: member k's first weights and action-sampling stream as its solo run
    with cfgs[k] has them (seeded, then its policy built: the global generator's state there is
    where its sampling starts). `kwargs` go to the trainer (logger, run_dir, ...)."""
    first = cfgs[0]
    policies, sampling = [], []
    for cfg in cfgs:
        seed_everything(cfg.seed)
        policies.append(make_policy(cfg, vecenv))
        sampling.append(torch.cuda.get_rng_state() if torch.device(device).type == "cuda" else torch.get_rng_state())
    return BatchedPPO([OmegaConf.to_object(cfg.train) for cfg in cfgs], vecenv, policies,
                      [int(cfg.seed) for cfg in cfgs], sampling, device=device,
                      runtime=OmegaConf.to_object(first.runtime), full_config=saved_config_of(first),
                      profiler=Profiler(device), **kwargs)


def member_evaluations(trainer: BatchedPPO, cfgs: list[DictConfig], device: str) -> list[dict[str, float]] | None:
    """Every member's final evaluation at once (puffer.evaluation.protocol.evaluate_members: the
    deterministic policy, then the stochastic one), where the protocol asks nothing of one member
    alone: no video, no window, no games against random play, an env of one episode per env.
    None otherwise (each member is then evaluated as its solo run is)."""
    first = cfgs[0]
    settings = first.eval
    if (settings.episodes == 0 or settings.video or settings.watch or "module" in first.env
            or trainer.vecenv.driver_env.independent_rows):
        return None
    seeds = [int(cfg.seed) for cfg in cfgs]
    creator = make_env_creator(first, evaluation=True, validated=True)
    results = [{} for _ in cfgs]
    for deterministic, prefix in ((True, "eval/"), (False, "eval/stochastic_")):
        for k, result in enumerate(evaluate_members(trainer.policy, creator, settings.episodes, seeds, device,
                                                    deterministic=deterministic, max_episode_steps=settings.max_steps)):
            results[k].update({f"{prefix}{key}": value for key, value in result.items()})
    return results


def finish_member(trainer: BatchedPPO, k: int, cfg: DictConfig, run_dir: Path, logger: Logger,
                  overrides: list[str], metrics: dict[str, float], score: ScoreWatch,
                  device: str, evaluation: dict[str, float] | None) -> dict[str, float]:
    """Member k's model file and final evaluation (`evaluation`, done with the others', or its
    own now) in its run directory, as its solo run leaves them."""
    policy = trainer.member_policy(k)
    metrics.update(score.metrics(trainer))
    training = {"global_step": trainer.global_step, "epoch": trainer.epoch,
                "wall_seconds": round(trainer.train_seconds, 1), "command": command_text(overrides),
                "puffer_version": puffer.__version__, "batch_members": trainer.agents}
    Agent.from_env(policy, trainer.vecenv.driver_env, saved_config_of(cfg), training=training).save(
        run_dir / model_file.NAME)
    if evaluation is None:
        evaluation = final_evaluation(cfg.eval, cfg.seed, policy, make_env_creator(cfg, evaluation=True, validated=True),
                                      device, run_dir, logger, game="module" in cfg.env)
    metrics.update(evaluation)
    evaluation = {key: v for key, v in metrics.items() if key.startswith("eval/") or key in (
        "perf/score", "perf/scored", "perf/time_to_score_s", "perf/steps_to_score")}
    if evaluation:
        logger.log(evaluation, trainer.global_step)
    log.info("member %d (seed %d): eval/return_mean %.2f +- %.2f; outputs in %s", k, cfg.seed,
             metrics.get("eval/return_mean", float("nan")), metrics.get("eval/return_ci95", float("nan")), run_dir)
    return metrics


def train_batch(*overrides: str, seeds: list[int], settings: list[list[str]] | None = None,
                run_dir: str | Path | None = None) -> list[dict[str, float]]:
    """`puffer.train` for several seeds (and settings) as one batch: the config of `overrides`
    with each seed, member k in <run_dir>/seed_<s>, the batch's checkpoints in <run_dir>/batch.
    `settings`: lists of overrides of the keys members may differ in (MEMBER_CONFIG_KEYS), each
    trained with every seed, as a multirun's grid: setting i's seed s in <run_dir>/setting_<i>/seed_<s>.
    Each member's final metrics, in that order (setting by setting, seed by seed)."""
    from hydra import compose, initialize_config_dir

    from puffer.config import CONF_DIR

    if len(set(seeds)) < len(seeds):
        raise ConfigError(f"seeds={seeds}: each member's directory is named by its seed; expected seeds of their own")
    run_dir = Path(run_dir or Path("outputs") / time.strftime("%Y-%m-%d") / time.strftime("%H-%M-%S"))
    grid = [[]] if settings is None else [list(setting) for setting in settings]
    cfgs, dirs, commands = [], [], []
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for i, setting in enumerate(grid):
            # one composition a setting (~0.2 s each): its members differ in their seed alone
            composed = compose(config_name="config", overrides=[*overrides, *setting, f"seed={seeds[0]}"])
            for seed in seeds:
                cfg = copy.deepcopy(composed)
                cfg.seed = int(seed)
                cfgs.append(cfg)
                dirs.append(run_dir / f"seed_{seed}" if settings is None else run_dir / f"setting_{i}" / f"seed_{seed}")
                commands.append([*overrides, *setting, f"seed={seed}"])
    return run_batch(cfgs, dirs, run_dir / "batch", commands)
