"""A watchdog that ends a local Ray when the process that started it dies without closing it.

`ray.shutdown()` ends a local Ray when the run closes, and the Ray backend reaps what it leaves
(puffer.vector.ray.reap). A main process killed outright (SIGKILL, the OOM killer) closes nothing:
Ray's dashboard and runtime-env agents then live on, reparented, listening on their ports. This
watchdog, a small process of its own session started beside a local Ray, keeps the list of the Ray
processes under the main process up to date and, once the main process is gone, kills them.

What lives here: `ray_processes(root)`, `start(pid)` and the watchdog's loop (`python -m
puffer.vector.reaper PID`). It imports psutil only: no Ray, no torch.
"""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

POLL_SECONDS = 0.5


def ray_processes(root: psutil.Process | None = None) -> list[psutil.Process]:
    """The processes of a local Ray under `root` (default: this process): its descendants that
    run Ray."""
    root = root or psutil.Process()
    found = []
    for process in root.children(recursive=True):
        try:
            command, name = " ".join(process.cmdline()), process.name()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if "/ray/" in command or command.startswith("ray::") or name in ("raylet", "gcs_server"):
            found.append(process)
    return found


def start(pid: int) -> subprocess.Popen:
    """The watchdog of the Ray under process `pid`; terminate it when that Ray is shut down."""
    return subprocess.Popen([sys.executable, "-m", "puffer.vector.reaper", str(pid)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # signals to the run's group leave it to do its job


def watch(pid: int) -> None:
    try:
        parent = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    tracked: dict[int, psutil.Process] = {}
    while parent.is_running() and parent.status() != psutil.STATUS_ZOMBIE:
        for process in ray_processes(parent):
            tracked.setdefault(process.pid, process)
        time.sleep(POLL_SECONDS)
    # psutil.Process remembers its start time: a pid reused since is not killed
    for process in tracked.values():
        try:
            process.kill()
        except psutil.NoSuchProcess:
            continue


if __name__ == "__main__":
    watch(int(sys.argv[1]))
