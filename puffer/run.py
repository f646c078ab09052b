"""One run from a composed config: build envs, policy and loggers, train, evaluate, save.

What lives here: `run(cfg, run_dir)`, what `python -m puffer` calls, and the builders it uses. The
objects are the public Python API's (puffer.vector.make, puffer.models, puffer.ppo.PPO): the
Hydra app is a thin layer over the same code path as a user script.
"""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

import puffer.vector
from puffer import checkpoint
from puffer.config import resolve_device, validate
from puffer.evaluation import evaluate
from puffer.loggers.base import JsonlLogger, Logger, MultiLogger
from puffer.ppo import PPO, pick_threads, seed_everything
from puffer.progress import ProgressReporter

log = logging.getLogger(__name__)


def make_env_creator(cfg: DictConfig):
    """The env group's `_target_` with its fields, as a picklable zero-argument creator."""
    return instantiate(cfg.env, _partial_=True, _convert_="all")


def make_vecenv(cfg: DictConfig, env_creator):
    v = cfg.vec
    kwargs: dict[str, Any] = {}
    if v.backend == "multiprocessing":
        kwargs = {"overwork": v.overwork, "start_method": v.start_method}
    return puffer.vector.make(env_creator, backend=v.backend, num_envs=v.num_envs,
                              num_workers=v.num_workers, batch_size=v.batch_size, seed=cfg.seed,
                              **kwargs)


def make_policy(cfg: DictConfig, vecenv) -> torch.nn.Module:
    return instantiate(cfg.policy, vecenv.single_observation_space, vecenv.single_action_space)


def make_logger(cfg: DictConfig, run_dir: Path, job: dict) -> Logger:
    loggers: list[Logger] = [JsonlLogger(run_dir / "metrics.jsonl")]
    if cfg.logger.backend == "wandb":
        from puffer.loggers.wandb import WandbLogger

        loggers.append(WandbLogger(cfg.logger, run_dir, OmegaConf.to_container(cfg, resolve=True), **job))
    return MultiLogger(loggers)


def hydra_job_info() -> dict:
    """Name, tags and group of this job for the logger: the overrides, and the sweep it is in."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return {"name": None, "tags": [], "group": None}
    hc = HydraConfig.get()
    overrides = [o for o in hc.overrides.task if not o.startswith(("hydra.", "logger."))]
    multirun = str(hc.mode) == "RunMode.MULTIRUN"
    group = Path(hc.sweep.dir).as_posix().replace("/", "_") if multirun else None
    return {"name": ",".join(overrides) or None, "tags": overrides, "group": group}


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def run(cfg: DictConfig, run_dir: str | Path) -> dict[str, float]:
    """Train (and evaluate) as `cfg` says; returns the final metrics, `eval/return_mean` among them."""
    validate(cfg)
    resume = checkpoint.resolve(cfg.resume) if cfg.resume else None
    run_dir = Path(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    except OSError as exc:
        raise OSError(exc.errno, f"cannot write to the run directory {run_dir}: {exc.strerror}; "
                      "pass a writable hydra.run.dir") from exc
    device = resolve_device(cfg.device)
    seed_everything(cfg.seed)
    torch.set_num_threads(pick_threads(cfg.train.torch_threads))
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)

    env_creator = make_env_creator(cfg)
    vecenv = make_vecenv(cfg, env_creator)
    logger = None
    try:
        policy = make_policy(cfg, vecenv)
        logger = make_logger(cfg, run_dir, hydra_job_info())
        trainer = PPO(OmegaConf.to_object(cfg.train), vecenv, policy, device=device, seed=cfg.seed, logger=logger,
                      run_dir=run_dir, full_config=OmegaConf.to_container(cfg, resolve=True),
                      progress=ProgressReporter(cfg, interval=cfg.train.log_interval))
        if resume is not None:
            trainer.load_state_dict(torch.load(resume, map_location=device, weights_only=False))
            log.info("resumed from %s at epoch %d (global step %d)", resume, trainer.epoch,
                     trainer.global_step)
        try:
            metrics = trainer.train()
        except KeyboardInterrupt:
            path = trainer.save_checkpoint()
            log.warning("interrupted at epoch %d; checkpoint saved to %s", trainer.epoch, path)
            raise
        vecenv.close()
        metrics.update(final_evaluation(cfg, policy, env_creator, device))
        evaluation = {k: v for k, v in metrics.items() if k.startswith("eval/")}
        if evaluation:
            logger.log(evaluation, trainer.global_step)
        checkpoint.save_atomic({"policy": policy.state_dict(), "config": trainer.full_config},
                    run_dir / "model.pt")
        log.info("eval/return_mean %.2f +- %.2f over %d episodes (deterministic policy)",
                 metrics.get("eval/return_mean", float("nan")),
                 metrics.get("eval/return_ci95", float("nan")),
                 cfg.train.eval_episodes)
        return metrics
    finally:
        vecenv.close()
        if logger is not None:
            logger.close()


def final_evaluation(cfg: DictConfig, policy, env_creator, device: str) -> dict[str, float]:
    if cfg.train.eval_episodes == 0:
        return {}
    metrics = {}
    for deterministic, prefix in ((True, "eval/"), (False, "eval/stochastic_")):
        result = evaluate(policy, env_creator, cfg.train.eval_episodes, cfg.seed, device,
                          deterministic=deterministic)
        metrics.update({f"{prefix}{k}": v for k, v in result.items()})
    return metrics
