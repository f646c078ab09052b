"""One run from a composed config: build envs, policy and loggers, train, evaluate, save.

What lives here: `run(cfg, run_dir)`, what `python -m puffer` calls, and the builders it uses. The
objects are the public Python API's (puffer.vector.make, puffer.models, puffer.ppo.PPO): the
Hydra app is a thin layer over the same code path as a user script.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

import puffer.vector
from puffer import checkpoint, distributed, model_file, profiler
from puffer.agent import Agent, load, model_path
from puffer.config import CONF_DIR, ConfigError, algorithm_class, resolve_device, validate
from puffer.evaluation import evaluate
from puffer.loggers.base import JsonlLogger, Logger, MultiLogger
from puffer.models import ActionMasked, mask_leaf
from puffer.profiler import Profiler
from puffer.progress import ProgressReporter, env_name
from puffer.signals import Signals, interrupt
from puffer.trainer import Stopped, Trainer, seed_everything

log = logging.getLogger(__name__)


def make_env_creator(cfg: DictConfig, evaluation: bool = False):
    """The env group's `_target_` with its fields, as a picklable zero-argument creator. For
    evaluation, the env's `eval_kwargs` (e.g. Atari: full games, true rewards) apply on top."""
    node = OmegaConf.to_container(cfg.env, resolve=True)
    eval_kwargs = node.pop("eval_kwargs", None) or {}
    if evaluation:
        node.update(eval_kwargs)
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


def build_policy(policy_cfg, observation_space, action_space) -> torch.nn.Module:
    """The policy group's `_target_`; `rnn: lstm` wraps it in an LSTM; an `action_mask` entry in
    a Dict observation masks its logits (puffer.models.ActionMasked); `norm_obs: true` wraps it
    all in running observation normalization (so the LSTM sees normalized inputs too)."""
    node = dict(OmegaConf.to_container(policy_cfg, resolve=True) if isinstance(policy_cfg, DictConfig)
                else policy_cfg)
    rnn = node.pop("rnn", None)
    norm_obs, obs_clip = node.pop("norm_obs", False), node.pop("obs_clip", 10.0)
    policy = instantiate(node, observation_space, action_space)
    if rnn is not None:
        if rnn != "lstm":
            raise ConfigError(f"policy.rnn={rnn!r}: expected lstm or null")
        from puffer.models import LSTMWrapper

        policy = LSTMWrapper(policy)
    if mask_leaf(observation_space, action_space) is not None:
        policy = ActionMasked(policy, observation_space, action_space)
    if norm_obs:
        from puffer.normalize import NormalizedPolicy

        policy = NormalizedPolicy(policy, observation_space, clip=obs_clip)
    return policy


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
    from puffer.models import ObsEncoder

    parts = ("ObsEncoder", "ImageEncoder", "TextEncoder", "ActionHead")
    encoders = [m for m in policy.modules() if isinstance(m, ObsEncoder)]
    layers = dict.fromkeys(type(m).__name__ for m in policy.modules()
                           if type(m).__module__.startswith("puffer.") and type(m).__name__ not in parts)
    reading = f" ({encoders[0].describe()})" if encoders else ""
    count = sum(p.numel() for p in policy.parameters())
    return f"{' > '.join(layers)}{reading}, {count:,} parameters"


def make_logger(cfg: DictConfig, run_dir: Path, job: dict) -> Logger:
    loggers: list[Logger] = [JsonlLogger(run_dir / "metrics.jsonl")]
    config = OmegaConf.to_container(cfg, resolve=True)
    if "wandb" in cfg.logger.backends:
        from puffer.loggers.wandb import WandbLogger

        loggers.append(WandbLogger(cfg.logger, run_dir, config, **job))
    if "tensorboard" in cfg.logger.backends:
        from puffer.loggers.tensorboard import TensorBoardLogger

        loggers.append(TensorBoardLogger(run_dir, config))
    return MultiLogger(loggers)


def hydra_job_info() -> dict:
    """Name, tags and group of this job for the logger: the overrides, and the sweep it is in."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return {"name": None, "tags": [], "group": None}
    hc = HydraConfig.get()
    overrides = [o for o in hc.overrides.task if not o.startswith(("hydra.", "logger.", "logger="))]
    multirun = str(hc.mode) == "RunMode.MULTIRUN"
    group = Path(hc.sweep.dir).as_posix().replace("/", "_") if multirun else None
    return {"name": ",".join(overrides) or None, "tags": overrides, "group": group}


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


def run(cfg: DictConfig, run_dir: str | Path, overrides: list[str] | None = None) -> dict[str, float]:
    """Train (and evaluate) as `cfg` says; returns the final metrics, `eval/return_mean` among them.
    mode=profile trains briefly and reports where the time went instead of evaluating.
    `overrides`, the command line `cfg` was composed from (under Hydra: its own), lets a resumed
    run take the rest of its config from the checkpoint."""
    validate(cfg)
    overrides = command_line() if overrides is None else overrides
    resume, resume_state = (checkpoint.load(cfg.resume, map_location="cpu", trust_code=cfg.trust_code)
                            if cfg.resume else (None, None))
    if resume is not None:
        cfg = checkpoint.resumed_config(cfg, resume_state, overrides)
        validate(cfg)
        checkpoint.check_resumable(resume, resume_state, cfg)
    run_dir = prepare_run_dir(cfg, Path(run_dir))
    if cfg.mode.name == "eval":
        return run_eval(cfg, run_dir, overrides)
    if cfg.mode.name == "export":
        from puffer.export import export

        return export(cfg, run_dir, overrides)
    if cfg.mode.name == "benchmark":
        return run_benchmark(cfg, run_dir)
    device = resolve_device(cfg.device)
    # under torchrun: one rank of a data-parallel learner (puffer.distributed), seeded apart
    ctx = (distributed.init(device, cfg.dist.backend, cfg.dist.timeout)
           if cfg.mode.name == "train" else distributed.SINGLE)
    device, seed = distributed.rank_device(device, ctx), cfg.seed + ctx.rank
    seed_everything(seed)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, interrupt)
    profiling = cfg.mode.name == "profile"
    train_cfg = OmegaConf.to_object(cfg.train)
    if profiling:
        train_cfg.total_timesteps = min(train_cfg.total_timesteps, cfg.profile.timesteps)
    sync = cfg.profile.sync_cuda if cfg.profile.sync_cuda is not None else profiling

    if (cfg.eval.video or cfg.eval.video_interval) and not profiling and ctx.is_main:
        check_recording(cfg, "eval.video" if cfg.eval.video else "eval.video_interval")
    env_creator = make_env_creator(cfg)
    vecenv = make_vecenv(cfg, env_creator, seed)
    logger = progress = None
    try:
        policy = make_policy(cfg, vecenv)
        distributed.broadcast_parameters(policy)  # every rank starts from rank 0's weights
        # rank 0 alone logs and draws progress (and writes checkpoints and evaluates)
        logger = make_logger(cfg, run_dir, hydra_job_info()) if ctx.is_main else Logger()
        progress = (ProgressReporter(env_name(cfg), interval=cfg.runtime.log_interval)
                    if ctx.is_main else None)
        algorithm = algorithm_class(train_cfg._target_)
        score_watch = ScoreWatch(env_score(cfg))
        trainer = algorithm(train_cfg, vecenv, policy, device=device, seed=seed,
                            runtime=OmegaConf.to_object(cfg.runtime), logger=logger,
                            run_dir=None if profiling else run_dir, progress=progress,
                            full_config=OmegaConf.to_container(cfg, resolve=True),
                            profiler=Profiler(device, sync=sync),
                            epoch_hooks=[score_watch, *([training_videos(cfg, make_env_creator(cfg, evaluation=True),
                                                                         device, run_dir, logger)]
                                                        if cfg.eval.video_interval and not profiling and ctx.is_main
                                                        else [])])
        if resume is not None:
            trainer.load_state_dict(resume_state)
            log.info("resumed from %s at epoch %d (global step %d)", resume, trainer.epoch,
                     trainer.global_step)
        metrics = train_until_done(trainer, cfg.profile.torch_trace and profiling, run_dir)
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
        training = {"global_step": trainer.global_step, "epoch": trainer.epoch,
                    "wall_seconds": round(trainer.train_seconds, 1), "command": command_text(overrides),
                    "puffer_version": puffer.__version__}
        logger.log_checkpoint(Agent.from_env(policy, vecenv.driver_env, trainer.full_config, training=training)
                              .save(run_dir / model_file.NAME))  # W&B: the final model as an artifact
        metrics.update(final_evaluation(cfg, policy, make_env_creator(cfg, evaluation=True), device,
                                        run_dir, logger))
        evaluation = {k: v for k, v in metrics.items() if k.startswith("eval/")}
        if evaluation:  # with the time to score beside it (always in the returned metrics)
            evaluation.update({k: metrics[k] for k in ("perf/scored", "perf/time_to_score_s",
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
        if progress is not None:
            progress.close()
        vecenv.close()
        if logger is not None:
            logger.close()
        if ctx.enabled:
            distributed.shutdown()


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
        episode_return = trainer.last_metrics.get("env/episode_return")
        if self.score is not None and self.seconds is None and episode_return is not None \
                and episode_return >= self.score:
            self.seconds, self.step = trainer.train_seconds, trainer.global_step

    def metrics(self, trainer) -> dict[str, float]:
        """perf/time_to_score_s (censored at the training's seconds when never reached: see
        perf/scored), perf/steps_to_score; nothing without a score."""
        if self.score is None:
            return {}
        scored = self.seconds is not None
        return {"perf/scored": float(scored),
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


def overridden(group: str, overrides: list[str] | None) -> bool:
    """Whether the command line (`overrides`) set `group` (e.g. env=... or env.id=...)."""
    return any(o.lstrip("+~").startswith((f"{group}=", f"{group}.", f"{group}/")) for o in overrides or [])


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
    logger = make_logger(cfg, run_dir, hydra_job_info())
    try:
        metrics = final_evaluation(cfg, agent.policy, make_env_creator(cfg, evaluation=True), device,
                                   run_dir, logger)
        logger.log(metrics, 0)
    finally:
        logger.close()
    (run_dir / "eval.json").write_text(json.dumps({"checkpoint": str(path), **metrics}, indent=2))
    log.info("%s: eval/return_mean %.2f +- %.2f (deterministic), %.2f (stochastic)", path,
             metrics["eval/return_mean"], metrics["eval/return_ci95"],
             metrics["eval/stochastic_return_mean"])
    log.info("outputs in %s: %s", run_dir, ", ".join(outputs(run_dir)))
    return metrics


def load_for_evaluation(cfg: DictConfig, path: Path, device, overrides: list[str] | None) -> Agent:
    """The policy as it was trained (its architecture is in the file's config); refused, before
    any episode, when the env this command line names has other spaces than it was trained on."""
    agent = load(path, device, trust_code=cfg.trust_code)
    if overridden("env", overrides):
        observation_space, action_space, _ = spaces_from_config(OmegaConf.to_container(cfg, resolve=True))
        if (observation_space, action_space) != (agent.observation_space, agent.action_space):
            raise ConfigError(f"checkpoint={cfg.checkpoint!r}: the policy was trained on observations "
                              f"{agent.observation_space} and actions {agent.action_space}, the env this "
                              f"command names ({env_name(cfg)}) has {observation_space} and {action_space}; "
                              "evaluate it on its own env (leave env= out) or on one with the same spaces")
    return agent


def evaluation_config(cfg: DictConfig, agent: Agent, overrides: list[str] | None) -> DictConfig:
    """`cfg` with the env the agent was trained on, unless the command line names another."""
    saved_env = (agent.config or {}).get("env")
    if saved_env and not overridden("env", overrides):
        cfg = cfg.copy()
        cfg.env = OmegaConf.create(saved_env)
    return cfg


def run_benchmark(cfg: DictConfig, run_dir: Path) -> dict[str, float]:
    """mode=benchmark: random-action steps/second of the configured env and vec settings."""
    from puffer.bench import RLBenchmark

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


def prepare_run_dir(cfg: DictConfig, run_dir: Path) -> Path:
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
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
            held = {signal.SIGINT, signal.SIGTERM}
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


def final_evaluation(cfg: DictConfig, policy, env_creator, device: str,
                     run_dir: Path | None = None, logger: Logger | None = None) -> dict[str, float]:
    """The evaluation protocol, deterministic then stochastic; with eval.video, the first
    deterministic episodes are recorded into <run_dir>/videos and given to the logger."""
    if cfg.eval.episodes == 0:
        return {}
    metrics = {}
    for deterministic, prefix in ((True, "eval/"), (False, "eval/stochastic_")):
        recorders: list = []
        creator, factory = env_creator, None
        if cfg.eval.watch and deterministic:  # the env draws its own window as it steps
            creator = rendering(env_creator, "human", key="eval.watch")
        elif cfg.eval.video and deterministic and run_dir is not None:
            creator, factory = rendering(env_creator), recorder_factory(cfg, run_dir, recorders)
        result = evaluate(policy, creator, cfg.eval.episodes, cfg.seed, device,
                          deterministic=deterministic, max_episode_steps=cfg.eval.max_steps,
                          recorder_factory=factory, recorded_episodes=cfg.eval.video_episodes)
        metrics.update({f"{prefix}{k}": v for k, v in result.items()})
        for path in (recorders[0].written if recorders else []):
            if logger is not None:
                logger.log_video(f"eval/video_{path.stem.rsplit('_', 1)[-1]}", path)
    if "module" in cfg.env and turn_based(env_creator):  # a game: how it fares against random play
        from puffer.evaluation import against_random

        result = against_random(policy, env_creator, cfg.eval.episodes, cfg.seed, device)
        metrics.update({f"eval/{k}": v for k, v in result.items()})
        log.info("against a random player: %.0f%% won, %.0f%% drawn, %.0f%% lost over %d games",
                 100 * result["vs_random_win"], 100 * result["vs_random_draw"],
                 100 * result["vs_random_loss"], result["vs_random_games"])
    return metrics


def turn_based(env_creator) -> bool:
    """Whether the env is a turn-based game (puffer.emulation.TurnBasedPufferEnv)."""
    env = env_creator()
    try:
        return bool(getattr(env, "turn_based", False))
    finally:
        env.close()


def rendering(env_creator, render_mode: str = "rgb_array", key: str = "eval.video"):
    """The env creator with this render_mode, or a clear error if the env takes none."""
    import inspect

    target = getattr(env_creator, "func", env_creator)
    if "render_mode" not in inspect.signature(target).parameters and not any(
            p.kind == p.VAR_KEYWORD for p in inspect.signature(target).parameters.values()):
        raise ConfigError(f"{key}=true: {getattr(target, '__qualname__', target)} takes no "
                          "render_mode, so its env cannot be rendered; expected a gymnasium, Atari "
                          "or PettingZoo env")
    return functools.partial(env_creator, render_mode=render_mode)


def check_recording(cfg: DictConfig, key: str) -> None:
    """Before training: the video extra is there and the env renders one rgb_array frame, so
    that a requested video cannot fail after hours of training; one line naming the fix if not."""
    from puffer.video import _imageio

    _imageio()
    creator = rendering(make_env_creator(cfg, evaluation=True), key=key)
    env = creator()
    try:
        env.reset(seed=cfg.seed)
        frame = env.render()
    except Exception as exc:  # whatever the env's renderer raises (pygame, OpenGL, ...)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        hint = ""
        if "pygame" in first:
            hint = "; its renderer needs pygame: pip install 'puffer[video]'"
        elif "OpenGL" in first or "GL" in type(exc).__name__ or "mujoco" in type(exc).__module__:
            hint = ("; MuJoCo renders without a display through EGL (MUJOCO_GL=egl, libEGL) or OSMesa "
                    "(MUJOCO_GL=osmesa, libOSMesa): install one of them")
        raise ConfigError(f"{key}=true: {env_name(cfg)} could not render a frame ({type(exc).__name__}: "
                          f"{first}){hint}") from None
    finally:
        env.close()
    if frame is None:
        raise ConfigError(f"{key}=true: {env_name(cfg)} rendered no frame; it needs render_mode='rgb_array' support")


def recorder_factory(cfg: DictConfig, run_dir: Path, recorders: list, prefix: str = "eval"):
    from puffer.video import EpisodeRecorder

    def make(env):
        recorders.append(EpisodeRecorder(env, run_dir / "videos", cfg.eval.video_episodes,
                                         cfg.eval.video_fps, prefix=prefix))
        return recorders[-1]

    return make


def training_videos(cfg: DictConfig, env_creator, device: str, run_dir: Path, logger: Logger):
    """The epoch hook of eval.video_interval: every K epochs, the first eval.video_episodes
    deterministic episodes of the current policy (on evaluation seeds, in the main process) as
    videos/epoch_<N>_<k>.mp4, logged at the current step. Deterministic acting draws no random
    numbers, so a run with videos trains exactly as one without."""
    creator = rendering(env_creator, key="eval.video_interval")

    def record(trainer) -> None:
        if trainer.epoch % cfg.eval.video_interval:
            return
        recorders: list = []
        evaluate(trainer.policy, creator, cfg.eval.video_episodes, cfg.seed, device, deterministic=True,
                 num_envs=1, max_episode_steps=cfg.eval.max_steps, recorded_episodes=cfg.eval.video_episodes,
                 recorder_factory=recorder_factory(cfg, run_dir, recorders, prefix=f"epoch_{trainer.epoch:06d}"))
        for path in recorders[0].written:
            logger.log_video(f"train/video_{path.stem.rsplit('_', 1)[-1]}", path, step=trainer.global_step)

    return record
