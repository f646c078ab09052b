"""TensorBoard: event files in <run dir>/tensorboard, the only module that imports tensorboard.

The same namespaced scalars as W&B and metrics.jsonl (train/*, env/*, perf/*, eval/*) against the
global step, the profiler breakdown as text, evaluation videos as a note of where they are.
`tensorboard --logdir outputs` compares runs. Needs the tensorboard extra.
"""

from __future__ import annotations

import math
from pathlib import Path

from puffer.loggers.base import Logger


class TensorBoardLogger(Logger):
    def __init__(self, run_dir: Path, config: dict | None = None):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(Path(run_dir) / "tensorboard"))
        if config is not None:
            import yaml

            self.writer.add_text("config", "```\n" + yaml.safe_dump(config, sort_keys=False) + "```", 0)

    def log(self, metrics: dict[str, float], step: int) -> None:
        for key, value in metrics.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def log_table(self, name: str, columns: list[str], rows: list) -> None:
        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
        self.writer.add_text(name, "\n".join(lines), 0)

    def log_video(self, name: str, path: Path, step: int | None = None) -> None:
        self.writer.add_text(name, f"video: {path}", step or 0)

    def close(self) -> None:
        self.writer.close()
