"""A run stopped at a checkpoint and resumed is the run that went on: the same metrics after it
and the same final weights, bit for bit (shared by the tests of each backend and algorithm)."""

from __future__ import annotations

from pathlib import Path

import torch

from puffer.files import checkpoint
from puffer.loggers import read_metrics
from puffer.run import run


def assert_resumes_bit_for_bit(make_cfg, tmp_path: Path, overrides: list[str], middle: int, end: int,
                               keys: list[str]) -> None:
    """Train `end` epochs with a checkpoint every `middle`, resume another run from epoch `middle`:
    its metrics `keys` and its final weights equal the uninterrupted run's."""
    run(make_cfg(*overrides, f"runtime.checkpoint_interval={middle}", "runtime.keep_checkpoints=0"), tmp_path / "full")
    saved = tmp_path / "full" / "checkpoints" / f"epoch_{middle:06d}.pt"
    run(make_cfg(*overrides, f"resume={saved}"), tmp_path / "resumed")
    full, resumed = (read_metrics(tmp_path / d / "metrics.jsonl") for d in ("full", "resumed"))
    assert [[r[k] for k in keys] for r in full[middle:]] == [[r[k] for k in keys] for r in resumed]
    final = [checkpoint.read(tmp_path / d / "checkpoints" / f"epoch_{end:06d}.pt")["policy"] for d in ("full", "resumed")]
    assert all(torch.equal(final[0][k], final[1][k]) for k in final[0])
