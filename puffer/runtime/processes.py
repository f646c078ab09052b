"""Processes that must not outlive the one that started them (Linux's parent-death signal), and
the environment the processes started in a block inherit.

What lives here: `environment_variable` (set for a block, restored after), and `end_with_parent`,
for env workers (SIGKILL: the main process saves their envs, nothing of theirs is lost) and
torchrun's ranks (SIGHUP: torchrun itself killed, by a SIGUSR1 to the job's process group say,
and each rank saves at its epoch boundary and exits instead of training on as an orphan).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


@contextlib.contextmanager
def environment_variable(name: str, value: str):
    """os.environ[name] = value inside the block (what processes started there inherit); its
    earlier value, or its absence, after."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def end_with_parent(signum: int = signal.SIGKILL) -> None:
    """Linux: the kernel sends this process `signum` when the process (precisely: the thread)
    that started it ends, wherever this process is, even stuck in a constructor. Elsewhere, or
    without prctl, nothing (the callers keep their own watch on their parent)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signum))
    except (OSError, AttributeError):
        return
