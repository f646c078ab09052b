"""Recording episodes as video: frames rendered by the env (rgb_array), written as MP4.

What lives here: `EpisodeRecorder` (collects one env's frames episode by episode and writes each
finished episode) and `write_video`. What does not: when frames are taken (puffer.evaluation).
Needs the video extra (imageio with its PyAV plugin): pip install 'puffer[video]'.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from puffer.config import ConfigError

log = logging.getLogger(__name__)


def write_video(path: Path, frames: list[np.ndarray], fps: int) -> Path:
    """H.264 MP4 of (H, W, 3) uint8 frames; odd sizes are padded by a pixel (the codec needs
    even ones)."""
    try:
        import imageio.v3 as iio
    except ImportError as exc:
        raise ConfigError("eval.video=true needs the video extra: pip install 'puffer[video]'") from exc
    stack = np.stack([np.asarray(f, dtype=np.uint8)[..., :3] for f in frames])
    pad_h, pad_w = stack.shape[1] % 2, stack.shape[2] % 2
    if pad_h or pad_w:
        stack = np.pad(stack, ((0, 0), (0, pad_h), (0, pad_w), (0, 0)), mode="edge")
    path.parent.mkdir(parents=True, exist_ok=True)
    iio.imwrite(path, stack, plugin="pyav", fps=fps, codec="libx264")
    return path


class EpisodeRecorder:
    """Frames of one env, episode by episode, into `directory`/`prefix`_<k>.mp4, for the first
    `episodes` episodes. `frame()` after the reset and after every step; `end_episode()` when
    the env reports the episode's end (its final frame already taken). The step after an end
    resets the env, so its frame is the next episode's first: an episode of L steps has L + 1
    frames."""

    def __init__(self, env, directory: Path, episodes: int, fps: int, prefix: str = "eval"):
        self.env, self.directory, self.episodes, self.fps, self.prefix = env, directory, episodes, fps, prefix
        self.frames: list[np.ndarray] = []
        self.written: list[Path] = []

    @property
    def recording(self) -> bool:
        return len(self.written) < self.episodes

    def frame(self) -> None:
        if not self.recording:
            return
        image = self.env.render()
        if image is None:
            raise ConfigError(f"eval.video=true: {getattr(self.env, 'name', 'the env')} rendered "
                              "no frame; it needs render_mode='rgb_array' support")
        self.frames.append(np.asarray(image))

    def end_episode(self) -> None:
        if not self.recording or not self.frames:
            return
        path = self.directory / f"{self.prefix}_{len(self.written):03d}.mp4"
        self.written.append(write_video(path, self.frames, self.fps))
        log.info("video of %d frames written to %s", len(self.frames), path)
        self.frames = []
