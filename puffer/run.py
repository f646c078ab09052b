"""One run from a composed config: the mode's dispatch, the run directory and what a run leaves
in it, and the lines it ends with.

What lives here: `run(cfg, run_dir)`, what `python -m puffer` calls, and `train(*overrides)`, the
same from Python. What does not: building the objects from the config (puffer.build), the
evaluations (puffer.evaluation.runs), loading a trained agent (puffer.agent).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

import puffer
from puffer.agent import Agent, evaluation_config, load, load_for_evaluation, model_path
from puffer.build import (
    algorithm_class,
    check,
    make_env_creator,
    make_logger,
    make_policy,
    make_vecenv,
    multiprocessing_options,
)
from puffer.config import CONF_DIR
from puffer.config.resume import check_resumable, resumed_config
from puffer.config.validate import check_trial_seeds, objective_entry, resolve_device
from puffer.errors import CheckpointError, ConfigError
from puffer.evaluation.runs import check_recording, final_evaluation, training_videos
from puffer.files import checkpoint, model_file, trust
from puffer.loggers.base import Logger
from puffer.monitor import profiler
from puffer.monitor.profiler import Profiler
from puffer.monitor.progress import ProgressReporter, env_name
from puffer.runtime import distributed
from puffer.training.signals import STOPPING, Signals, install_outside_training
from puffer.training.trainer import Stopped, Trainer, seed_everything

log = logging.getLogger(__name__)


@dataclass
class Result:
    """What `train` returns: the final metrics (eval/* among them), where the run wrote its
    files, and the trained agent (None for modes that train nothing)."""

    metrics: dict[str, float]
    run_dir: Path
    agent: Agent | None


def train(*overrides: str, run_dir: str | Path | None = None) -> Result:
    """`python -m puffer <overrides>` from Python, e.g. `puffer.train("env=classic/acrobot",
    "seed=1")`: the same config, checks, run directory (default outputs/<date>/<time>, beside
    the CLI's) and files; returns a `Result` with the agent loaded from its model.safetensors."""
    from hydra import compose, initialize_config_dir

    from puffer.envs.catalog import check_env_choices

    problem = check_env_choices(list(overrides))
    if problem is not None:
        raise ConfigError(problem)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=list(overrides))
    run_dir = Path(run_dir or Path("outputs") / time.strftime("%Y-%m-%d") / time.strftime("%H-%M-%S"))
    with progress_printed():
        metrics = run(cfg, run_dir, overrides=list(overrides))
    model = run_dir / model_file.NAME
    return Result(metrics, run_dir, load(model) if model.is_file() else None)


@contextlib.contextmanager
def progress_printed():
    """Print puffer's progress and final lines as the CLI does, unless the program has set up
    logging itself (then its handlers decide)."""
    puffer_log = logging.getLogger("puffer")
    if logging.getLogger().handlers or puffer_log.handlers:
        yield
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
    level = puffer_log.level
    puffer_log.addHandler(handler)
    puffer_log.setLevel(logging.INFO)
    try:
        yield
    finally:
        puffer_log.removeHandler(handler)
        puffer_log.setLevel(level)


def run_seeds(cfg: DictConfig, job_dir: str | Path, sweep_dir: str | Path | None = None) -> list[dict[str, float]]:
    """One job's runs: `run(cfg, job_dir)`, or with trial_seeds=N the seeds seed .. seed+N-1 one
    after another, each in <job_dir>/seed_<s> with its own files; each run's final metrics.
    `sweep_dir`: the directory of the multirun the job is part of, if any (a resume= of a whole
    multirun gives each run its own place in it: puffer.files.checkpoint.place_in_multirun)."""
    check_trial_seeds(cfg)  # before a job of no runs returns nothing to its sweeper
    check_objective_score(cfg)
    runs = []
    for seed in range(cfg.seed, cfg.seed + cfg.trial_seeds):
        seeded = cfg.copy()
        seeded.seed = seed
        run_dir = Path(job_dir) if cfg.trial_seeds == 1 else Path(job_dir) / f"seed_{seed}"
        seeded.resume = checkpoint.place_in_multirun(seeded.resume, sweep_dir, run_dir)  # (all before any trains)
        runs.append((seeded, run_dir))
    metrics = [run(seeded, run_dir) for seeded, run_dir in runs]
    if sweep_dir is not None:
        log.info("the whole multirun goes on as the same command with resume=%s", sweep_dir)
    return metrics


def run(cfg: DictConfig, run_dir: str | Path, overrides: list[str] | None = None) -> dict[str, float]:
    """Train (and evaluate) as `cfg` says; returns the final metrics, `eval/return_mean` among them.
    mode=profile trains briefly and reports where the time went instead of evaluating.
    `overrides`, the command line `cfg` was composed from (under Hydra: its own), lets a resumed
    run take the rest of its config from the checkpoint. The run directory is locked while it runs."""
    with releasing_run_dirs():
        return _run(cfg, run_dir, overrides)


def _run(cfg: DictConfig, run_dir: str | Path, overrides: list[str] | None) -> dict[str, float]:
    check(cfg)
    if cfg.mode.name == "train":  # the key that will sign its checkpoints: refused now, not at the first
        trust.user_key()
    overrides = command_line() if overrides is None else overrides
    resume, resume_state = (checkpoint.load(cfg.resume, map_location="cpu", trust_code=cfg.trust_code)
                            if cfg.resume else (None, None))
    if resume is not None:
        cfg = resumed_config(cfg, resume_state, overrides)
        check(cfg)
        check_resumable(resume, resume_state, cfg)
    run_dir = prepare_run_dir(cfg, Path(run_dir))
    if cfg.mode.name == "eval":
        return run_eval(cfg, run_dir, overrides)
    if cfg.mode.name == "export":
        from puffer.export import export

        return export(cfg, run_dir, overrides)
    if cfg.mode.name == "benchmark":
        return run_benchmark(cfg, run_dir)
    device = resolve_device(cfg.device)
    # under torchrun: one rank of a data-parallel learner (puffer.runtime.distributed), seeded apart
    ctx = (distributed.init(device, cfg.dist.backend, cfg.dist.timeout)
           if cfg.mode.name == "train" else distributed.SINGLE)
    device, seed = distributed.rank_device(device, ctx), cfg.seed + ctx.rank
    seed_everything(seed)
    install_outside_training()
    profiling = cfg.mode.name == "profile"
    train_cfg = OmegaConf.to_object(cfg.train)
    if profiling:
        train_cfg.total_timesteps = min(train_cfg.total_timesteps, cfg.profile.timesteps)
    sync = cfg.profile.sync_cuda if cfg.profile.sync_cuda is not None else profiling

    if (cfg.eval.video or cfg.eval.video_interval) and not profiling and ctx.is_main:
        check_recording(make_env_creator(cfg, evaluation=True), cfg.seed, env_name(cfg),
                        "eval.video" if cfg.eval.video else "eval.video_interval")
    env_creator = make_env_creator(cfg)
    vecenv = make_vecenv(cfg, env_creator, seed)
    logger = progress = None
    try:
        algorithm = algorithm_class(train_cfg._target_)
        algorithm.check_env(vecenv)
        policy = make_policy(cfg, vecenv)
        distributed.broadcast_parameters(policy)  # every rank starts from rank 0's weights
        # rank 0 alone logs and draws progress (and writes checkpoints and evaluates)
        logger = make_logger(cfg, run_dir, overrides) if ctx.is_main else Logger()
        progress = (ProgressReporter(env_name(cfg), interval=cfg.runtime.log_interval)
                    if ctx.is_main else None)
        score_watch = ScoreWatch(env_score(cfg))
        trainer = algorithm(train_cfg, vecenv, policy, device=device, seed=seed,
                            runtime=OmegaConf.to_object(cfg.runtime), logger=logger,
                            run_dir=None if profiling else run_dir, progress=progress,
                            full_config=saved_config_of(cfg),
                            profiler=Profiler(device, sync=sync),
                            epoch_hooks=[score_watch, *([training_videos(cfg.eval, cfg.seed, make_env_creator(cfg, evaluation=True),
                                                                         device, run_dir, logger)]
                                                        if cfg.eval.video_interval and not profiling and ctx.is_main
                                                        else [])])
        if resume is not None:
            trainer.load_state_dict(resume_state)
            log.info("resumed from %s at epoch %d (global step %d)", resume, trainer.epoch,
                     trainer.global_step)
        def save_model() -> Path:
            training = {"global_step": trainer.global_step, "epoch": trainer.epoch,
                        "wall_seconds": round(trainer.train_seconds, 1), "command": command_text(overrides),
                        "puffer_version": puffer.__version__}
            return Agent.from_env(policy, vecenv.driver_env, trainer.full_config,
                                  training=training).save(run_dir / model_file.NAME)

        try:
            metrics = train_until_done(trainer, cfg.profile.torch_trace and profiling, run_dir)
        except CheckpointError as exc:  # a checkpoint could not be written (a full disk, say)
            if ctx.is_main and not profiling:
                save_model_instead(save_model, trainer, exc)
            raise
        metrics.update(score_watch.metrics(trainer))
        if not ctx.is_main:
            return metrics
        progress.close()
        logger.log_table("perf/breakdown", ["section", "seconds", "percent"], profiler.rows(metrics))
        if profiling:
            report_profile(metrics, run_dir)
            return metrics
        vecenv.close()
        # The trained policy is saved before evaluating it: an evaluation that fails or never
        # ends must not cost the run (`mode=eval checkpoint=<run dir>` can evaluate it again).
        logger.log_checkpoint(save_model())  # W&B: an artifact with logger.log_checkpoints=final or all
        metrics.update(final_evaluation(cfg.eval, cfg.seed, policy, make_env_creator(cfg, evaluation=True, validated=True),
                                        device, run_dir, logger, game="module" in cfg.env))
        evaluation = {k: v for k, v in metrics.items() if k.startswith("eval/")}
        if evaluation:  # with the time to score beside it (always in the returned metrics)
            evaluation.update({k: metrics[k] for k in ("perf/score", "perf/scored", "perf/time_to_score_s",
                                                       "perf/steps_to_score") if k in metrics})
            logger.log(evaluation, trainer.global_step)
        log.info("eval/return_mean %.2f +- %.2f over %d episodes (deterministic policy)",
                 metrics.get("eval/return_mean", float("nan")),
                 metrics.get("eval/return_ci95", float("nan")), cfg.eval.episodes)
        last_lines(run_dir, finished=True)
        return metrics
    except KeyboardInterrupt:
        if ctx.is_main:
            if progress is not None:  # the dashboard's last frame first, then the way on
                progress.close()
            last_lines(run_dir, finished=False)
        raise
    finally:
        close_run(progress, vecenv, logger)
        if ctx.enabled:
            distributed.shutdown()


def close_run(progress, vecenv, logger) -> None:
    """What a run holds open, closed whichever way it ends (the dashboard first, then the envs'
    workers, then the loggers); those not made yet are None."""
    if progress is not None:
        progress.close()
    vecenv.close()
    if logger is not None:
        logger.close()


def save_model_instead(save_model, trainer: Trainer, failure: CheckpointError) -> None:
    """A checkpoint failed (the disk filled at the final save, say): the policy trained so far
    still goes to model.safetensors, a fraction of a checkpoint's size, and the log says which
    of the two was written."""
    try:
        path = save_model()
    except OSError as exc:
        log.error("the checkpoint could not be written (%s), and the model file neither (%s): nothing "
                  "of epoch %d is saved; the run's earlier checkpoints are intact", failure, exc, trainer.epoch)
        return
    log.error("the checkpoint could not be written (%s); the policy after epoch %d (global step %d) is saved "
              "as %s (for puffer.load and mode=eval; a resume needs a checkpoint)", failure, trainer.epoch,
              trainer.global_step, path)


SCORE_METRICS = ("perf/time_to_score_s", "perf/steps_to_score", "perf/scored", "perf/score")


def check_objective_score(cfg: DictConfig) -> None:
    """An objective on the time to score needs a score: without one every trial would return
    nan and the search would learn nothing, in silence."""
    keys = [objective_entry(entry)[1] for entry in cfg.objective or ()]
    if any(key in SCORE_METRICS for key in keys) and env_score(cfg) is None:
        raise ConfigError(f"objective={list(cfg.objective)}: {env_name(cfg)} registers no reward_threshold; "
                          "expected eval.score=<the return that counts as solved>, e.g. eval.score=-200")


def env_score(cfg: DictConfig) -> float | None:
    """eval.score, else the env's registered reward_threshold (gymnasium's spec), else None."""
    if cfg.eval.score is not None:
        return float(cfg.eval.score)
    env_id = cfg.env.get("id") if "id" in cfg.env else None
    if not env_id:
        return None
    import gymnasium

    try:
        threshold = gymnasium.spec(str(env_id)).reward_threshold
    except gymnasium.error.Error:
        return None
    return None if threshold is None else float(threshold)


class ScoreWatch:
    """The epoch hook of time to score: the training seconds and steps at the end of the first
    epoch whose finished episodes return `score` or more on average (the stochastic policy of
    training; bench/time_to_score.py evaluates the deterministic one off the clock)."""

    def __init__(self, score: float | None):
        self.score, self.seconds, self.step = score, None, None

    def __call__(self, trainer) -> None:
        self.observe(trainer.last_metrics.get("env/episode_return"), trainer)

    def observe(self, episode_return: float | None, trainer) -> None:
        """The epoch just logged, whose finished episodes returned `episode_return` on average."""
        if self.score is not None and self.seconds is None and episode_return is not None \
                and episode_return >= self.score:
            self.seconds, self.step = trainer.train_seconds, trainer.global_step

    def metrics(self, trainer) -> dict[str, float]:
        """perf/time_to_score_s (censored at the training's seconds when never reached: see
        perf/scored), perf/steps_to_score; nothing without a score."""
        if self.score is None:
            return {}
        scored = self.seconds is not None
        return {"perf/score": float(self.score), "perf/scored": float(scored),
                "perf/time_to_score_s": self.seconds if scored else trainer.train_seconds,
                "perf/steps_to_score": float(self.step if scored else trainer.global_step)}


def command_line() -> list[str] | None:
    """The overrides of the Hydra command line this run was started with; None outside Hydra."""
    from hydra.core.hydra_config import HydraConfig

    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else None


def command_text(overrides: list[str] | None) -> str:
    """The command that trained a run, for its model card: the CLI with its overrides, or the
    Python call."""
    import shlex

    if overrides is None:
        return "a Python script (puffer.run.run with a config it composed)"
    return " ".join(["python -m puffer", *(shlex.quote(o) for o in overrides)])


def last_lines(run_dir: Path, finished: bool) -> None:
    """Where the outputs are and the commands that go on from them: the last lines a user sees."""
    log.info("outputs in %s: %s", run_dir, ", ".join(outputs(run_dir)))
    if finished:
        log.info("watch it: python -m puffer mode=eval checkpoint=%s eval.video=true; train on: "
                 "python -m puffer resume=%s train.total_timesteps=<more>", run_dir, run_dir)
    elif (run_dir / "checkpoints").is_dir():
        log.info("continue: python -m puffer resume=%s", run_dir)


def outputs(run_dir: Path) -> list[str]:
    """What a run left in its directory, for the last line it prints."""
    names = [model_file.NAME, "metrics.jsonl", "config.yaml", "eval.json", "profile.txt", "trace.json"]
    found = [name for name in names if (run_dir / name).exists()]
    for directory in ("checkpoints", "videos", "wandb"):
        if (run_dir / directory).is_dir():
            found.append(f"{directory}/ ({len(list((run_dir / directory).iterdir()))})")
    return found


def run_eval(cfg: DictConfig, run_dir: Path, overrides: list[str] | None = None) -> dict[str, float]:
    """mode=eval: the evaluation protocol on a saved policy; results in eval.json and metrics.
    `overrides`: the command line, which may name another env than the policy's own."""
    path = model_path(cfg.checkpoint, key="checkpoint")
    device = resolve_device(cfg.device)
    agent = load_for_evaluation(cfg, path, device, overrides)
    cfg = evaluation_config(cfg, agent, overrides)
    logger = make_logger(cfg, run_dir, overrides)
    try:
        metrics = final_evaluation(cfg.eval, cfg.seed, agent.policy, make_env_creator(cfg, evaluation=True),
                                   device, run_dir, logger, game="module" in cfg.env)
        logger.log(metrics, 0)
    finally:
        logger.close()
    (run_dir / "eval.json").write_text(json.dumps({"checkpoint": str(path), **metrics}, indent=2))
    log.info("%s: eval/return_mean %.2f +- %.2f (deterministic), %.2f (stochastic)", path,
             metrics["eval/return_mean"], metrics["eval/return_ci95"],
             metrics["eval/stochastic_return_mean"])
    log.info("outputs in %s: %s", run_dir, ", ".join(outputs(run_dir)))
    return metrics


def run_benchmark(cfg: DictConfig, run_dir: Path) -> dict[str, float]:
    """mode=benchmark: random-action steps/second of the configured env and vec settings."""
    from puffer.vector.benchmark import RLBenchmark

    v = cfg.vec
    extra = multiprocessing_options(v) if v.backend == "multiprocessing" else {}
    name = env_name(cfg)
    result = RLBenchmark({name: make_env_creator(cfg)}, seconds=cfg.mode.seconds, num_envs=v.num_envs,
                         backend=v.backend, seed=cfg.seed, num_workers=v.num_workers,
                         envs_per_batch=v.envs_per_batch, **extra).run()[name]
    metrics = {f"benchmark/{k}": v for k, v in result.items()}
    (run_dir / "benchmark.json").write_text(json.dumps({"env": name, **metrics}, indent=2))
    log.info("%s random actions: %.0f steps/s, episode return %.2f over %d episodes", name,
             result["sps"], result["episode_return"], result["episodes"])
    return metrics


def saved_config_of(cfg: DictConfig) -> dict:
    """The config that checkpoints and the model file carry: the run's, resolved, less the
    reader's opt-in (`trust_code` comes from whoever reads a file, never from the file:
    puffer.files.trust.check_config refuses a file that sets it)."""
    config = OmegaConf.to_container(cfg, resolve=True)
    config.pop("trust_code", None)
    return config


# Run directories this process is writing to, each with its lock held (until its run() returns).
HELD_RUN_DIRS: dict[Path, int] = {}
LOCK_NAME = ".puffer.lock"


@contextlib.contextmanager
def releasing_run_dirs():
    """The run directories locked inside the block (lock_run_dir) are released when it ends,
    however it ends."""
    held = set(HELD_RUN_DIRS)
    try:
        yield
    finally:
        for key in set(HELD_RUN_DIRS) - held:
            os.close(HELD_RUN_DIRS.pop(key))


def lock_run_dir(run_dir: Path) -> None:
    """One process writes to a run directory: a second run given the same hydra.run.dir is
    refused at its start, instead of interleaving metrics.jsonl and pruning the other's
    checkpoints. The lock (flock on .puffer.lock) lasts until the run returns (or its process
    ends); runs one after another may share a folder."""
    import fcntl

    key = run_dir.resolve()
    if key in HELD_RUN_DIRS:
        return
    fd = os.open(run_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.read(fd, 64).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise ConfigError(f"hydra.run.dir={str(run_dir)!r}: another run is writing there (pid {holder}); "
                          "pass another hydra.run.dir, or wait for it to end") from None
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    HELD_RUN_DIRS[key] = fd


def prepare_run_dir(cfg: DictConfig, run_dir: Path) -> Path:
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        lock_run_dir(run_dir)
        (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    except OSError as exc:
        raise OSError(exc.errno, f"cannot write to the run directory {run_dir}: {exc.strerror}; "
                      "pass a writable hydra.run.dir") from exc
    return run_dir


def train_until_done(trainer: Trainer, torch_trace: bool, run_dir: Path) -> dict[str, float]:
    """trainer.train() under `Signals`, optionally under torch's profiler. Stopped at an epoch
    boundary, the trainer has saved its checkpoint; stopped at once (a second signal), what can
    be saved goes to epoch_N_interrupted.pt, with further signals held off until it is written."""
    try:
        with Signals(trainer):
            if not torch_trace:
                return trainer.train()
            with torch.profiler.profile() as traced:
                metrics = trainer.train()
            traced.export_chrome_trace(str(run_dir / "trace.json"))
            log.info("torch profiler trace written to %s", run_dir / "trace.json")
            return metrics
    except Stopped as stop:
        if stop.path is not None:
            log.warning("stopped (%s) after epoch %d; checkpoint saved to %s", stop.reason, trainer.epoch,
                        stop.path)
        raise
    except KeyboardInterrupt:
        if trainer.world.parallel:  # the other ranks are not in this save's collectives
            log.warning("stopped at once under torchrun: no interrupt checkpoint (the last epoch's stands)")
        elif trainer.run_dir is not None:
            held = set(STOPPING)
            signal.pthread_sigmask(signal.SIG_BLOCK, held)
            try:
                path = trainer.save_checkpoint(interrupted=True)
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, held)
            log.warning("interrupted during epoch %d; checkpoint saved to %s", trainer.epoch + 1, path)
        raise


def report_profile(metrics: dict[str, float], run_dir: Path) -> None:
    """Print the breakdown table and the verdict, and keep them in profile.txt."""
    from rich.console import Console

    text = (f"{profiler.table(metrics)}\n{metrics.get('perf/sps', 0.0):,.0f} steps/second\n"
            f"verdict: {profiler.verdict(metrics)}")
    (run_dir / "profile.txt").write_text(text + "\n")
    Console(soft_wrap=True).print(text, markup=False, highlight=False)


