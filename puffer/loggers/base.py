"""The logger interface and the local metrics file (JSON lines), which is always written."""

from __future__ import annotations

import errno
import json
import logging
import math
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class Logger:
    """Receives metrics keyed `train/*`, `env/*`, `perf/*`, `eval/*` with the global step."""

    def log(self, metrics: dict[str, float], step: int) -> None:
        pass

    def log_checkpoint(self, path: Path) -> None:
        pass

    def log_table(self, name: str, columns: list[str], rows: list) -> None:
        """A small table (e.g. the profiler breakdown), logged once."""

    def log_video(self, name: str, path: Path, step: int | None = None) -> None:
        """A video file (an evaluation episode), at `step` (None: the latest logged step)."""

    def close(self) -> None:
        pass


def _plain(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN/Inf; keep them visible as strings
    if hasattr(value, "item"):
        return _plain(value.item())
    return value


class JsonlLogger(Logger):
    """One JSON object per line: {"global_step": ..., "<key>": value, ...}."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.file = self.path.open("a", encoding="utf-8")
        self.failed = False

    def log(self, metrics: dict[str, float], step: int) -> None:
        if self.failed:
            return
        record = {"global_step": int(step), **{k: _plain(v) for k, v in metrics.items()}}
        try:
            self.file.write(json.dumps(record) + "\n")
            self.file.flush()
        except OSError as exc:  # a full disk: say so once; training (and its checkpoints) decide
            self.failed = True
            reason = "the disk is full" if exc.errno == errno.ENOSPC else exc.strerror or str(exc)
            log.error("cannot write %s (%s); metrics from global step %d on are not in it",
                      self.path, reason, step)

    def close(self) -> None:
        try:
            self.file.close()
        except OSError as exc:  # the buffered tail could not be written either; already said
            if not self.failed:
                log.error("cannot finish %s (%s)", self.path, exc.strerror or exc)


class MultiLogger(Logger):
    def __init__(self, loggers: list[Logger]):
        self.loggers = loggers

    def log(self, metrics: dict[str, float], step: int) -> None:
        for logger in self.loggers:
            logger.log(metrics, step)

    def log_checkpoint(self, path: Path) -> None:
        for logger in self.loggers:
            logger.log_checkpoint(path)

    def log_table(self, name: str, columns: list[str], rows: list) -> None:
        for logger in self.loggers:
            logger.log_table(name, columns, rows)

    def log_video(self, name: str, path: Path, step: int | None = None) -> None:
        for logger in self.loggers:
            logger.log_video(name, path, step)

    def close(self) -> None:
        for logger in self.loggers:
            logger.close()


def read_metrics(path: str | Path) -> list[dict]:
    """The records of a metrics file, in order."""
    with Path(path).open(encoding="utf-8") as file:
        return [json.loads(line) for line in file if line.strip()]
