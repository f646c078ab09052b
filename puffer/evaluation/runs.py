"""The evaluations a run makes around the protocol: the final one (deterministic, stochastic, with
a video or a window, against a random player for games) and the videos during training.

Each takes the eval.* settings (puffer.config.schema.EvalConfig) and the seed, not the whole run
config. What does not live here: the protocol itself (puffer.evaluation.protocol), writing a
video file (puffer.evaluation.video).
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

from puffer.errors import ConfigError
from puffer.evaluation.protocol import against_random, evaluate
from puffer.evaluation.video import EpisodeRecorder, _imageio
from puffer.loggers.base import Logger

log = logging.getLogger(__name__)


def final_evaluation(settings, seed: int, policy, env_creator, device: str, run_dir: Path | None = None,
                     logger: Logger | None = None, game: bool = False) -> dict[str, float]:
    """The evaluation protocol, deterministic then stochastic, as the eval.* `settings` say
    (puffer.config.schema.EvalConfig); with eval.video, the first deterministic episodes are
    recorded into <run_dir>/videos and given to the logger. `game`: a PettingZoo env, which is
    also played against a random player when it is turn-based."""
    if settings.episodes == 0:
        return {}
    metrics = {}
    for deterministic, prefix in ((True, "eval/"), (False, "eval/stochastic_")):
        recorders: list = []
        creator, factory = env_creator, None
        if settings.watch and deterministic:  # the env draws its own window as it steps
            creator = rendering(env_creator, "human", key="eval.watch")
        elif settings.video and deterministic and run_dir is not None:
            creator, factory = rendering(env_creator), recorder_factory(settings, run_dir, recorders)
        result = evaluate(policy, creator, settings.episodes, seed, device,
                          deterministic=deterministic, max_episode_steps=settings.max_steps,
                          recorder_factory=factory, recorded_episodes=settings.video_episodes)
        metrics.update({f"{prefix}{k}": v for k, v in result.items()})
        for path in (recorders[0].written if recorders else []):
            if logger is not None:
                logger.log_video(f"eval/video_{path.stem.rsplit('_', 1)[-1]}", path)
    if game and turn_based(env_creator):  # how it fares against random play
        result = against_random(policy, env_creator, settings.episodes, seed, device)
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


def check_recording(env_creator, seed: int, name: str, key: str) -> None:
    """Before training: the video extra is there and the env (`name`, built by the evaluation's
    `env_creator`) renders one rgb_array frame, so that a requested video cannot fail after hours
    of training; one line naming the fix if not."""
    _imageio()
    creator = rendering(env_creator, key=key)
    env = creator()
    try:
        env.reset(seed=seed)
        frame = env.render()
    except Exception as exc:  # whatever the env's renderer raises (pygame, OpenGL, ...)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        hint = ""
        if "pygame" in first:
            hint = "; its renderer needs pygame: pip install 'puffer[video]'"
        elif "OpenGL" in first or "GL" in type(exc).__name__ or "mujoco" in type(exc).__module__:
            hint = ("; MuJoCo renders without a display through EGL (MUJOCO_GL=egl, libEGL) or OSMesa "
                    "(MUJOCO_GL=osmesa, libOSMesa): install one of them")
        raise ConfigError(f"{key}=true: {name} could not render a frame ({type(exc).__name__}: "
                          f"{first}){hint}") from None
    finally:
        env.close()
    if frame is None:
        raise ConfigError(f"{key}=true: {name} rendered no frame; it needs render_mode='rgb_array' support")


def recorder_factory(settings, run_dir: Path, recorders: list, prefix: str = "eval"):
    def make(env):
        recorders.append(EpisodeRecorder(env, run_dir / "videos", settings.video_episodes,
                                         settings.video_fps, prefix=prefix))
        return recorders[-1]

    return make


def training_videos(settings, seed: int, env_creator, device: str, run_dir: Path, logger: Logger):
    """The epoch hook of eval.video_interval: every K epochs, the first eval.video_episodes
    deterministic episodes of the current policy (on evaluation seeds, in the main process) as
    videos/epoch_<N>_<k>.mp4, logged at the current step. Deterministic acting draws no random
    numbers, so a run with videos trains exactly as one without."""
    creator = rendering(env_creator, key="eval.video_interval")

    def record(trainer) -> None:
        if trainer.epoch % settings.video_interval:
            return
        recorders: list = []
        evaluate(trainer.policy, creator, settings.video_episodes, seed, device, deterministic=True,
                 num_envs=1, max_episode_steps=settings.max_steps, recorded_episodes=settings.video_episodes,
                 recorder_factory=recorder_factory(settings, run_dir, recorders, prefix=f"epoch_{trainer.epoch:06d}"))
        for path in recorders[0].written:
            logger.log_video(f"train/video_{path.stem.rsplit('_', 1)[-1]}", path, step=trainer.global_step)

    return record
