"""Checkpoints: written atomically, the last K kept, found again by `resume=<path>|latest`.

What lives here: the file side (atomic writes, pruning, finding the latest) and the process-wide
random states. What goes into a checkpoint is the trainer's `state_dict` (puffer.ppo).
"""

from __future__ import annotations

import errno
import logging
import os
import random
from pathlib import Path

import numpy as np
import torch

log = logging.getLogger(__name__)

PATTERN = "epoch_*.pt"


class CheckpointError(OSError):
    """A checkpoint could not be written or found; earlier checkpoints are intact."""


def save_atomic(obj, path: Path) -> None:
    """Write to a temporary file, fsync, then rename: a crash or a full disk never leaves a torn
    checkpoint, and the previous one stays as it was."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tmp.open("wb") as file:
            torch.save(obj, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        reason = "the disk is full" if exc.errno == errno.ENOSPC else exc.strerror or str(exc)
        raise CheckpointError(exc.errno, f"could not write checkpoint {path}: {reason}") from exc


def prune(directory: Path, keep: int) -> None:
    """Delete all but the newest `keep` checkpoints (0 keeps them all)."""
    if keep <= 0:
        return
    for old in sorted(directory.glob(PATTERN))[:-keep]:
        old.unlink()


def find_latest(root: str | Path, key: str = "resume") -> Path:
    """The newest checkpoint under `root` (a run directory or the whole outputs/ tree); `key`
    is the config key that asked, for the error."""
    candidates = sorted(Path(root).glob(f"**/checkpoints/{PATTERN}"), key=lambda p: p.stat().st_mtime)
    if not candidates:
        raise CheckpointError(errno.ENOENT, f"{key}=latest: no checkpoint under {Path(root).resolve()}")
    return candidates[-1]


def resolve(value: str, outputs: str | Path = "outputs", key: str = "resume") -> Path:
    """`latest` -> the newest checkpoint under outputs/; a run directory -> its newest; a file ->
    itself. `key` (resume, checkpoint) is the config key the value came from, for the error."""
    if value == "latest":
        return find_latest(outputs, key)
    path = Path(value)
    if path.is_dir():
        return find_latest(path, key)
    if not path.is_file():
        raise CheckpointError(errno.ENOENT, f"{key}={value!r}: no such checkpoint file or run directory")
    return path


def rng_state() -> dict:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
