"""Recording episodes as video: frames rendered by the env (rgb_array), written as MP4.

What lives here: `EpisodeRecorder` (streams one env's frames episode by episode into MP4 files),
`VideoWriter` (one file, frame by frame: constant memory) and `write_video`. What does not: when frames are taken (puffer.evaluation).
Needs the video extra (imageio with its PyAV plugin): pip install 'puffer[video]'.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from puffer.errors import ConfigError

log = logging.getLogger(__name__)


def _imageio():
    try:
        import imageio.v3 as iio
    except ImportError as exc:
        raise ConfigError("eval.video=true needs the video extra: pip install 'puffer[video]'") from exc
    return iio


def even_frame(frame) -> np.ndarray:
    """(H, W, 3) uint8, padded by a pixel where a side is odd (H.264 needs even sizes)."""
    frame = np.asarray(frame, dtype=np.uint8)[..., :3]
    pad_h, pad_w = frame.shape[0] % 2, frame.shape[1] % 2
    if pad_h or pad_w:
        frame = np.pad(frame, ((0, pad_h), (0, pad_w), (0, 0)), mode="edge")
    return frame


class VideoWriter:
    """One H.264 MP4 written frame by frame: what it holds in memory is one frame, however long
    the episode."""

    def __init__(self, path: Path, fps: int):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self.frames = path, 0
        self.file = _imageio().imopen(path, "w", plugin="pyav")
        self.file.init_video_stream("libx264", fps=fps)

    def write(self, frame) -> None:
        self.file.write_frame(even_frame(frame))
        self.frames += 1

    def close(self) -> Path:
        self.file.close()
        return self.path


def write_video(path: Path, frames: list[np.ndarray], fps: int) -> Path:
    """H.264 MP4 of (H, W, 3) uint8 frames; odd sizes are padded by a pixel."""
    writer = VideoWriter(path, fps)
    for frame in frames:
        writer.write(frame)
    return writer.close()


class EpisodeRecorder:
    """Frames of one env, episode by episode, into `directory`/`prefix`_<k>.mp4, for the first
    `episodes` episodes, each streamed to its file as it is rendered (constant memory). `frame()`
    after the reset and after every step; `end_episode()` when the env reports the episode's end
    (its final frame already taken). The step after an end resets the env, so its frame is the
    next episode's first: an episode of L steps has L + 1 frames."""

    def __init__(self, env, directory: Path, episodes: int, fps: int, prefix: str = "eval"):
        self.env, self.directory, self.episodes, self.fps, self.prefix = env, directory, episodes, fps, prefix
        self.writer: VideoWriter | None = None
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
        if self.writer is None:
            self.writer = VideoWriter(self.directory / f"{self.prefix}_{len(self.written):03d}.mp4", self.fps)
        self.writer.write(image)

    def end_episode(self) -> None:
        if not self.recording or self.writer is None:
            return
        frames, path = self.writer.frames, self.writer.close()
        self.writer = None
        self.written.append(path)
        log.info("video of %d frames written to %s", frames, path)
