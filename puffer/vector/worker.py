"""The worker side of puffer.vector.multiprocessing: the process that steps a slice of envs.

What lives here: the command and state words, the shared-memory layout, and `worker_loop`, the
loop a worker process runs (and `execute`, which the main process also runs for worker 0's
envs when it steps them itself). What does not: the main process's side (Multiprocessing).
"""

from __future__ import annotations

import faulthandler
import os
import signal
import time
import traceback

import numpy as np

from puffer import renamed
from puffer.emulation import Buffers
from puffer.runtime.processes import end_with_parent
from puffer.vector.base import EnvGroup, build_envs, pickled_envs

# Command words (main -> worker) and state words (worker -> main).
IDLE, RESET, STEP, CLOSE, SAVE, LOAD = 0, 1, 2, 3, 4, 5
BUILD = -1  # worker 0's first command when the main process steps it: build its envs
BUSY, READY, ERROR = 0, 1, 2


def shared_layout(specs: dict[str, tuple[tuple, np.dtype]]) -> tuple[dict, int]:
    """Byte offsets of each named array in one shared block, each aligned to 64 bytes."""
    offsets, cursor = {}, 0
    for name, (shape, dtype) in specs.items():
        offsets[name] = (cursor, shape, np.dtype(dtype))
        cursor += -(-int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize // 64) * 64
    return offsets, max(cursor, 64)


def shared_views(raw, layout: dict) -> dict[str, np.ndarray]:
    return {
        name: np.frombuffer(raw, dtype, int(np.prod(shape, dtype=np.int64)), offset).reshape(shape)
        for name, (offset, shape, dtype) in layout.items()
    }


def execute(command: int, group: EnvGroup, actions, seeds, step_seconds, worker_id: int,
             load) -> tuple[EnvGroup, list | None]:
    """One command on one worker's envs, in its process or (worker 0) in the main process:
    returns the group (LOAD replaces it: `load()` gives the saved envs, which write into the
    same rows) and the reply (infos, or SAVE's pickled envs)."""
    started = time.perf_counter()
    if command == SAVE:
        return group, [pickled_envs(group.envs)]
    if command == RESET:
        return group, group.reset(int(seeds[0]) if seeds[1] else None)
    if command == LOAD:
        envs = load()
        group.close()
        return EnvGroup(envs, group.first, group.buffers, group.agents_per_env), None
    infos = group.step(actions)
    step_seconds[worker_id] = time.perf_counter() - started
    return group, infos


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):  # gone, or its number taken by another user's
        return False
    return True


def worker_loop(worker_id, creators, env_args, env_kwargs, first, raw, layout, go, done, messages,
            parent_pid, agents_per_env, spin_s, stack_dir=None):
    # Ctrl-C, SIGTERM, SIGHUP and SIGUSR1 reach the whole process group (a terminal, SLURM, GNU timeout,
    # `kill -USR1 -- -PGID`): the main process handles them, saves a checkpoint with our envs in
    # it, then goes on or closes us. SIGUSR1's default action would end us.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):
        signal.signal(signum, signal.SIG_IGN)
    end_with_parent()
    # Our parent: the main process, or under forkserver the fork server, which ends with it.
    watched = os.getppid()
    if stack_dir is not None:  # where SIGUSR2 makes us write our stack when we seem stuck
        stack_file = open(os.path.join(stack_dir, f"worker-{worker_id}.txt"), "w")
        faulthandler.register(signal.SIGUSR2, file=stack_file, all_threads=True)
    shared = shared_views(raw, layout)
    commands, states, seeds = shared["commands"], shared["states"], shared["seed"]
    step_seconds = shared["step_seconds"]
    rows = slice(first * agents_per_env, (first + len(creators)) * agents_per_env)
    buffers = Buffers(*(shared[k] for k in ("observations", "rewards", "terminals", "truncations",
                                            "masks"))).rows(rows.start, rows.stop)
    actions = shared["actions"][rows]

    def finish(state, message=None):
        shared["has_message"][worker_id] = message is not None
        states[worker_id] = state
        done.release()
        if message is not None:  # after the release: the main process reads while we write
            messages.send(message)

    try:
        group = EnvGroup(build_envs(creators, env_args, env_kwargs, first), first, buffers,
                         agents_per_env)
    except Exception:
        finish(ERROR, traceback.format_exc())
        return
    finish(READY)
    tickets, seen = shared["tickets"], 0
    idle_s = 0.0  # how long the last command took to come
    while True:
        # Spin briefly for the next command: with random actions it comes within microseconds,
        # and a blocked process takes longer than a fast env's step to wake. Then block, so a
        # worker never holds a core while the learner trains. Spin only while commands come
        # quickly: when the policy takes milliseconds per batch (a CNN on CPU), a spinning
        # worker holds a core that the main process or another worker needs.
        waiting_since = time.perf_counter()
        spin_until = waiting_since + (spin_s if idle_s < 10 * spin_s else 0.0)
        while tickets[worker_id] == seen and time.perf_counter() < spin_until:
            os.sched_yield()
        if not go.acquire(timeout=1.0):
            if os.getppid() != watched or not alive(parent_pid):  # the main process is gone:
                break  # don't linger as an orphan
            continue
        idle_s = time.perf_counter() - waiting_since
        seen = int(tickets[worker_id])
        command = commands[worker_id]
        if command == CLOSE:
            break
        try:
            group, infos = execute(command, group, actions, seeds, step_seconds, worker_id,
                                    lambda: renamed.loads(messages.recv_bytes()))
        except Exception:
            finish(ERROR, traceback.format_exc())
            continue
        finish(READY, infos or None)
    group.close()
