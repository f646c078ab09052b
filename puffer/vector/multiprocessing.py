"""Multiprocessing backend: worker processes step contiguous slices of envs in shared memory.

Observations, rewards, terminals, truncations, masks and actions live in one shared block; each
worker's envs write their rows in place and the main process reads views of them. Signalling:
the main process sets a worker's command word and releases that worker's semaphore; the worker
steps, sets its state word to READY and releases one shared `done` semaphore. The main process
polls the state words for a few microseconds (a CartPole step is that fast), then blocks on
`done`: neither side spins for long, so workers never starve the learner of a core. Each side
polls only while its waits have been short (under ten polling windows): the main process while
the workers' steps are (an Atari step is milliseconds), a worker while commands come quickly (a
CNN policy takes milliseconds a batch). Otherwise polling only holds a core another process needs.

With `envs_per_batch < num_envs`, `recv()` returns the first workers that are ready (EnvPool-style)
and `send()` steps exactly those. Infos and errors travel on a per-worker pipe, only when there
are any, written by the worker itself after it flags them (a Queue's feeder thread would cost a
thread switch per message, more than a CartPole step). A worker whose env raises reports the
env index and traceback; a worker that dies is noticed within `poll_s`; either way every worker
is shut down and none is left behind, unless `restart_failed_workers` allows a restart: then
the worker (or worker 0's envs in the main process) is rebuilt, its envs reset on fresh seeds,
and the step that failed comes back as a truncation of every one of its envs, with the env ids
in `pop_restarted()` so that the collector drops the interrupted episodes from its rollout.

With synchronous batches (`envs_per_batch == num_envs`), the main process would only wait while the
workers step, so it steps worker 0's envs itself (`step_in_main`), after waking the others: one
process fewer on the cores and one wake-up less per step (2 cores, 8 envs, random actions:
CartPole 1.18x the steps/second of two worker processes, Breakout 0.97-1.07x). Worker 0 keeps the
workers' contract: its rows in the shared block, its errors raised by `recv()` as a
`WorkerError`. `step_in_main=False` keeps every env out of the main process (an env that may
crash the interpreter).
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing as mp
import os
import select
import shutil
import signal
import sys
import tempfile
import time
import traceback
import weakref

import numpy as np

from puffer import renamed
from puffer.emulation import Buffers
from puffer.vector.base import (
    EnvError,
    EnvGroup,
    Received,
    VecEnv,
    build_envs,
    check_saved_workers,
    prepare_workers,
    restore,
    rows_of,
    stepping,
    whole_groups,
    workers_state,
)
from puffer.vector.watchdog import StepTimeout, Watchdog
from puffer.vector.worker import (
    BUILD,
    BUSY,
    CLOSE,
    ERROR,
    LOAD,
    READY,
    RESET,
    SAVE,
    STEP,
    execute,
    shared_layout,
    shared_views,
    worker_loop,
)

log = logging.getLogger(__name__)

class WorkerError(EnvError):
    """A worker's env raised or the worker process died."""


class Multiprocessing(VecEnv):
    backend_name = "multiprocessing"
    steps_in_workers = True

    def __init__(self, env_creators, env_args=None, env_kwargs=None, num_envs: int = 1,
                 num_workers: int | None = None, envs_per_batch: int | None = None,
                 zero_copy: bool = True, seed: int = 0, overwork: bool = False,
                 start_method: str | None = None, spin_us: float = 50.0, poll_s: float = 0.25,
                 worker_spin_us: float = 100.0, step_in_main: bool = True,
                 step_timeout: float | None = 300.0, restart_failed_workers: int = 0):
        creators, num_workers, driver = prepare_workers(env_creators, env_args, env_kwargs, num_envs,
                                                        num_workers, envs_per_batch, overwork)
        super().__init__(driver, num_envs, envs_per_batch, seed)
        driver.close()
        self.num_workers = num_workers
        self.envs_per_worker = num_envs // num_workers
        self.workers_per_batch = self.envs_per_batch // self.envs_per_worker
        self.zero_copy = zero_copy
        self.spin_s = spin_us * 1e-6
        self.worker_spin_s = worker_spin_us * 1e-6
        self.poll_s = poll_s
        self.step_in_main = step_in_main and 1 < num_workers == self.workers_per_batch
        # A worker busy with one command (building its envs aside) for longer is stuck: an error
        # with its Python stack (faulthandler, on SIGUSR2, into a file per worker).
        self.step_timeout = step_timeout
        self._stack_dir = tempfile.mkdtemp(prefix="puffer-stacks-")
        # when each worker's command was sent, and which (plain lists: ~30 ns a write per step)
        self._sent_at = [time.monotonic()] * num_workers
        self._command_of = [BUILD] * num_workers  # workers start by building their envs
        # Self-healing (VecEnv.count_restart), and restarted workers whose `done` releases are
        # already matched (so _claim must not match them again).
        self.restart_budget = restart_failed_workers
        self._prematched: set[int] = set()

        specs = Buffers.specs(self.single_observation_space, self.num_rows)
        specs.update({
            "actions": ((self.num_rows, *self.action_shape), self.action_dtype),
            "commands": ((num_workers,), np.int32),
            "states": ((num_workers,), np.int32),
            "tickets": ((num_workers,), np.int64),  # commands sent to each worker so far
            "step_seconds": ((num_workers,), np.float64),  # each worker's last step took
            "has_message": ((num_workers,), np.bool_),
            "seed": ((2,), np.int64),  # [seed, whether a seed was given]
        })
        layout, nbytes = shared_layout(specs)
        reason = _fork_unsafe_reason() if start_method is None else None
        if reason is not None:  # a forked child of such a process can hang before its first line
            log.info("vec.start_method=forkserver: %s in this process, which forked workers could hang on", reason)
            start_method = "forkserver"
        ctx = self._ctx = mp.get_context(start_method)
        self._raw = ctx.RawArray(ctypes.c_byte, nbytes)
        shared = shared_views(self._raw, layout)
        self.buffers = Buffers(*(shared[k] for k in ("observations", "rewards", "terminals",
                                                     "truncations", "masks")))
        self.actions = shared["actions"]
        self._commands, self._states = shared["commands"], shared["states"]
        self._tickets, self._step_seconds = shared["tickets"], shared["step_seconds"]
        self._has_message, self._seed = shared["has_message"], shared["seed"]
        self._states[:] = BUSY
        self._done = ctx.Semaphore(0)
        self._tokens = 0  # `done` releases taken minus workers claimed (see _claim)
        self._go = [ctx.Semaphore(0) for _ in range(num_workers)]
        # (ours, the worker's): infos and errors come back on it, saved envs go out (LOAD)
        pipes = [ctx.Pipe(duplex=True) for _ in range(num_workers)]
        self._messages = [ours for ours, _ in pipes]
        self._processes: dict[int, mp.process.BaseProcess] = {}  # worker id -> its process
        self._build_args = (creators, env_args, env_kwargs, layout)  # to start a worker again
        for w in range(1 if self.step_in_main else 0, num_workers):
            self._start_worker(w, pipes[w][1])
        if self.step_in_main:
            pipes[0][1].close()  # worker 0's replies are kept here (_reply), not piped
        # Worker 0 in the main process (step_in_main): its envs (a list, so that the finalizer
        # can close them without holding this object), its actions (a view made once, as a
        # worker makes its own) and its reply to the last command
        self._in_main: list[EnvGroup] = []
        # worker 0's envs step in this process: a thread watches for a step past step_timeout
        self._watchdog = Watchdog(step_timeout) if self.step_in_main and step_timeout else None
        self._main_actions = self.actions[self._rows([0])]
        self._reply = None
        self._finalizer = weakref.finalize(self, _shutdown, self._processes, self._commands,
                                           self._go, self._messages, self._in_main, self._stack_dir,
                                           self._watchdog)
        self._in_flight = set(self._processes)
        self._received: list[int] | None = None  # what the last recv() returned
        self._idle: set[int] = set()  # received and not sent since
        self._cursor = 0
        try:
            if self.step_in_main:
                self._in_flight.add(0)
                self._run_in_main(BUILD, (creators[:self.envs_per_worker], env_args, env_kwargs))
            self._wait(num_workers)  # every worker built its envs, or we raise its error now
        except BaseException:
            self.close()
            raise

    # -- API ---------------------------------------------------------------------------------
    def async_reset(self, seed: int | None = None) -> None:
        seed = self.seed if seed is None else seed
        self._wait(len(self._in_flight))  # drain anything still stepping
        self._seed[:] = (0, 0) if seed is None else (seed, 1)
        self._dispatch(range(self.num_workers), RESET)
        self._received, self._idle = None, set()

    def send(self, actions, env_ids=None) -> None:
        """Step the envs the last recv() returned, or the given `env_ids` (whole workers that
        were received and not sent since)."""
        if env_ids is None:
            if self._received is None:
                raise RuntimeError("send() called before recv(): it steps the envs recv() returned")
            workers = self._received
        else:
            workers = whole_groups(env_ids, self.envs_per_worker, "workers")
        if not set(workers) <= self._idle:
            raise RuntimeError(f"send(): workers {sorted(set(workers) - self._idle)} are still "
                               "stepping; recv() them first")
        if self._received is not None and set(self._received) <= set(workers):
            self._received = None
        self._idle -= set(workers)
        actions = self.check_actions(actions, len(workers) * self.envs_per_worker * self.agents_per_env)
        self.actions[self._rows(workers)] = actions
        self._dispatch(workers, STEP)

    def recv(self):
        """The first `envs_per_batch` envs to finish (whole workers), or all that are still in
        flight when fewer remain; envs received and not sent again are simply left idle."""
        if not self._in_flight:
            raise RuntimeError("recv(): nothing is stepping; send() first")
        workers, infos = self._wait(min(self.workers_per_batch, len(self._in_flight)))
        self._received = workers
        self._idle |= set(workers)
        rows = self._rows(workers)
        b = self.buffers
        out = [b.observations[rows], b.rewards[rows], b.terminals[rows], b.truncations[rows],
               b.masks[rows]]
        if isinstance(rows, slice) and not self.zero_copy:
            out = [x.copy() for x in out]
        env_ids = np.concatenate([np.arange(w * self.envs_per_worker, (w + 1) * self.envs_per_worker)
                                  for w in workers])
        obs, rewards, terminals, truncations, masks = out
        return Received(obs, rewards, terminals, truncations, infos, env_ids, masks)

    def get_state(self) -> dict | None:
        """Every worker's envs, pickled there, and a copy of the shared buffers; None (with a
        warning) when they can't be captured. Call it between rollouts, with no worker stepping."""
        if stepping(self._in_flight):
            return None
        self._dispatch(range(self.num_workers), SAVE)
        _, replies = self._wait(self.num_workers)  # in worker order
        return workers_state(self.backend_name, replies, self.buffers)

    def set_state(self, state: dict) -> None:
        saved = check_saved_workers(state, self.num_workers)
        self._wait(len(self._in_flight))  # drain anything still stepping
        self._dispatch(range(self.num_workers), LOAD, saved)
        self._wait(self.num_workers)
        restore(self.buffers, state["buffers"])
        # as after a recv() of every worker: the restored observations await their actions
        self._received, self._idle = list(range(self.num_workers)), set(range(self.num_workers))

    def close(self) -> None:
        if not self._closed:
            self._finalizer()
        super().close()

    @property
    def processes(self) -> list:
        """The worker processes (worker 0 is not one when the main process steps it)."""
        return list(self._processes.values())

    # -- internals ---------------------------------------------------------------------------
    def _start_worker(self, w: int, theirs) -> None:
        """Start worker w's process on its slice of envs; `theirs` is its end of its pipe."""
        creators, env_args, env_kwargs, layout = self._build_args
        per = self.envs_per_worker
        process = self._ctx.Process(
            target=worker_loop, name=f"puffer-worker-{w}", daemon=True,
            args=(w, creators[w * per : (w + 1) * per], env_args, env_kwargs, w * per,
                  self._raw, layout, self._go[w], self._done, theirs, os.getpid(),
                  self.agents_per_env, self.worker_spin_s, self._stack_dir),
        )
        process.start()
        theirs.close()  # the worker holds its end now
        self._processes[w] = process

    def _restart(self, w: int, failure: str) -> bool:
        """Rebuild failed worker w and reset its envs on fresh seeds, if vec.restart_failed_workers
        allows and it failed stepping or resetting (a failed save or load is not repeated). Then
        its step's result is a truncation of each of its envs, and the worker is READY with its
        `done` releases matched. False when it is not restarted (the caller raises)."""
        if self._command_of[w] not in (STEP, RESET) or not self.count_restart(w, failure):
            return False
        per = self.envs_per_worker
        if w in self._processes:
            old = self._processes[w]
            if old.is_alive():
                old.kill()
            old.join(timeout=5.0)
            self._messages[w].close()
            self._go[w] = self._ctx.Semaphore(0)  # the old one may hold a release the dead never took
            ours, theirs = self._ctx.Pipe(duplex=True)
            self._messages[w] = ours
            self._states[w], self._command_of[w], self._sent_at[w] = BUSY, BUILD, time.monotonic()
            self._start_worker(w, theirs)
            self._await_restarted(w)
        else:  # worker 0's envs, in this process
            creators, env_args, env_kwargs, _ = self._build_args
            broken = self._in_main.pop()
            try:
                broken.close()
            except Exception as exc:  # a broken env may not close cleanly; the new ones replace it
                log.warning("worker 0's failed envs did not close cleanly: %r", exc)
            self._run_in_main(BUILD, (creators[:per], env_args, env_kwargs))
            self._await_restarted(w)
        # Fresh seeds (restart_seed). A worker failing inside async_reset's RESET may race another
        # worker still reading the reset seed: that one then starts on these seeds instead.
        self._seed[:] = (self.restart_seed(), 1)
        self._dispatch([w], RESET)
        self._await_restarted(w)
        self._has_message[w] = False  # reset infos carry no episode
        rows = self._rows([w])
        self.buffers.rewards[rows] = 0
        self.buffers.terminals[rows] = False
        self.buffers.truncations[rows] = True
        return True

    def _await_restarted(self, w: int) -> None:
        """Wait for restarted worker w's current command, matching its `done` release; its
        failure now is final."""
        deadline = time.monotonic() + (self.step_timeout or float("inf"))
        while self._states[w] == BUSY:
            process = self._processes.get(w)
            if self._done.acquire(timeout=self.poll_s):
                self._tokens += 1
            elif process is not None and not process.is_alive() or time.monotonic() > deadline:
                self.close()
                raise WorkerError(f"worker {w} failed again while being restarted (exit code "
                                  f"{process.exitcode if process is not None else None})")
        if w in self._processes:
            self._tokens -= 1  # its release: taken above or owed, as in _claim
        if self._states[w] == ERROR:
            message = self._message(w)
            self.close()
            raise WorkerError(f"worker {w} failed again while being restarted:\n{message}")

    def _rows(self, workers: list[int]):
        return rows_of(workers, self.envs_per_worker * self.agents_per_env)

    def _dispatch(self, workers, command: int, payloads: list[bytes] | None = None) -> None:
        """Send `command` to `workers` (LOAD: with each one's saved envs); worker 0 runs it here
        after the others are woken, when the main process steps it."""
        in_main = False
        for w in workers:
            self._states[w] = BUSY
            self._commands[w] = command
            self._sent_at[w], self._command_of[w] = time.monotonic(), command
            self._tickets[w] += 1
            self._in_flight.add(w)
            if w in self._processes:
                self._go[w].release()
                if payloads is not None:
                    self._messages[w].send_bytes(payloads[w])
            else:
                in_main = True
        if in_main:
            self._run_in_main(command, payloads[0] if payloads is not None else None)

    def _run_in_main(self, command: int, payload=None) -> None:
        """Worker 0's command, run in the main process as its own process would run it: the
        state word and the reply are set for `_wait` to collect (BUILD: `payload` holds the
        creators and their arguments; LOAD: the saved envs). Envs interrupted mid-command
        (Ctrl-C) are in an unknown state: they count as stepping, so no checkpoint saves them,
        and the next wait for them raises instead of waiting forever."""
        try:
            if command == BUILD:
                creators, env_args, env_kwargs = payload
                buffers = self.buffers.rows(0, self.envs_per_worker * self.agents_per_env)
                group = EnvGroup(build_envs(creators, env_args, env_kwargs, 0), 0, buffers,
                                 self.agents_per_env)
                self._in_main.append(group)
                infos = None
            else:
                # a step or reset past step_timeout is interrupted by the watchdog (start/stop,
                # not a `with`: a generator per step costs ~1 us)
                watched = self._watchdog is not None and command in (STEP, RESET)
                if watched:
                    self._watchdog.start()
                try:
                    self._in_main[0], infos = execute(
                        command, self._in_main[0], self._main_actions, self._seed,
                        self._step_seconds, 0, lambda: renamed.loads(payload))
                finally:
                    if watched:
                        self._watchdog.stop()
        except StepTimeout:
            self._reply, self._states[0], self._has_message[0] = self._watchdog.describe(), ERROR, True
            return
        except Exception:
            self._reply, self._states[0], self._has_message[0] = traceback.format_exc(), ERROR, True
            return
        except BaseException as exc:
            self._reply = f"interrupted by {exc!r} in the middle of a command; its envs are lost"
            self._states[0], self._has_message[0] = ERROR, True
            raise
        self._reply, self._states[0], self._has_message[0] = infos, READY, bool(infos)

    def _wait(self, count: int) -> tuple[list[int], list[dict]]:
        """Block until `count` in-flight workers are ready; return them (in worker order, starting
        after the last batch so no worker starves) and their infos."""
        if self._closed:
            raise RuntimeError("this vector env is closed")
        ready: list[int] = []
        spin_until = time.perf_counter() + self._spin_window()
        order = [(self._cursor + i) % self.num_workers for i in range(self.num_workers)]
        while len(ready) < count:
            found = False
            for w in order:
                if w in self._in_flight and self._states[w] != BUSY:
                    self._claim(w)
                    ready.append(w)
                    found = True
                    if len(ready) == count:
                        break
            if found:
                continue
            if time.perf_counter() < spin_until:
                os.sched_yield()  # a spinning main process must not delay the workers' steps
                continue
            if self._done.acquire(timeout=self.poll_s):
                self._tokens += 1
            else:
                self._check_alive()
                self._check_stuck()
        if ready:
            self._cursor = (ready[-1] + 1) % self.num_workers
        ready.sort()
        infos = []
        for w in ready:
            if self._has_message[w]:
                infos.extend(self._message(w))
        return ready, infos

    def _spin_window(self) -> float:
        """How long to poll before blocking: the full window when the next worker in turn took
        under ten windows for its last step, else none. Polling while a slow env steps costs
        more than the wake-up it saves: with as many workers as cores, Breakout with async
        batches ran at 0.85x the speed it reaches when the main process blocks at once, while
        CartPole (4 envs a worker, ~60 us a step) ran at 0.85x without polling."""
        return self.spin_s if self._step_seconds[self._cursor] < 10 * self.spin_s else 0.0

    def _claim(self, w: int) -> None:
        """Match worker w's `done` release, then raise if it reported an error."""
        # The worker releases `done` just after writing its state word. Blocking for that release
        # here costs a futex wake-up (often more than a CartPole step), so a release that has not
        # come yet is owed instead (tokens < 0): the next blocking wait takes it. Owed releases
        # are at most one per worker, so the semaphore's count stays bounded.
        if w not in self._processes:
            pass  # worker 0, run in this process: no `done` release to match
        elif w in self._prematched:
            self._prematched.discard(w)  # restarted: its releases were matched then
        elif self._tokens > 0 or not self._done.acquire(False):
            self._tokens -= 1
        if self._states[w] == ERROR:
            message = self._message(w)
            if self._restart(w, message):
                self._in_flight.discard(w)
                return
            self.close()
            where = "" if w in self._processes else "in the main process"
            raise WorkerError(f"{self.worker_label(w, detail=where)} failed{self.after_restarts()}:\n{message}")
        self._in_flight.discard(w)

    def _message(self, w: int):
        if w not in self._processes:
            return self._reply
        reader = self._messages[w]
        try:
            # select() itself: Connection.poll builds a selector per call, slower than a step
            if select.select([reader], [], [], 5.0)[0]:
                return reader.recv()
            problem = "none arrived within 5 s"
        except (EOFError, OSError) as exc:
            problem = f"its pipe broke ({exc!r})"
        self.close()
        raise WorkerError(f"worker {w} flagged a message but {problem}")

    def _check_alive(self) -> None:
        for w in sorted(self._in_flight & self._processes.keys()):
            process = self._processes[w]
            if not process.is_alive():
                code = process.exitcode
                died = f"died with exit code {code}" + (f" (signal {-code})" if code and code < 0 else "")
                if self._restart(w, died):
                    self._prematched.add(w)
                    continue
                self.close()
                raise WorkerError(
                    f"{self.worker_label(w, detail=f'pid {process.pid}')} {died}{self.after_restarts()}")


    def _stuck_starting(self, w: int, now: float) -> None:
        """A worker that has not started and built its envs within step_timeout: closed, and an
        error that names what usually causes it."""
        method = self._ctx.get_start_method()
        hint = ("; a worker forked from a process whose threads held a lock (JAX, TensorFlow, CUDA, "
                "a library's thread pool) waits for it forever: vec.start_method=forkserver or spawn "
                "starts workers from a fresh interpreter" if method == "fork" else "")
        message = (f"{self.worker_label(w)} has been starting (building its envs) for "
                   f"{now - self._sent_at[w]:.0f} s (vec.step_timeout={self.step_timeout:g}, "
                   f"vec.start_method={method}){hint}")
        self.close()
        raise WorkerError(message)

    def _check_stuck(self) -> None:
        """Raise, naming the worker, its envs and where it is, if a command (its start and the
        building of its envs too) has run past `step_timeout`."""
        if self.step_timeout is None:
            return
        now = time.monotonic()
        for w in sorted(self._in_flight & self._processes.keys()):
            if now - self._sent_at[w] < self.step_timeout:
                continue
            if self._command_of[w] == BUILD:
                self._stuck_starting(w, now)
                continue
            process = self._processes[w]
            stack_path = os.path.join(self._stack_dir, f"worker-{w}.txt")
            os.kill(process.pid, signal.SIGUSR2)
            time.sleep(0.5)
            try:
                with open(stack_path) as file:
                    stack = file.read().strip()
            except FileNotFoundError:
                stack = ""
            status = _status(process.pid)
            where = (f"its stack:\n{stack}" if stack else
                     f"it did not answer a request for its stack (process status: {status})")
            stuck = (f"{self.worker_label(w, detail=f'pid {process.pid}')} has been "
                     f"busy with one step for {now - self._sent_at[w]:.0f} s (vec.step_timeout="
                     f"{self.step_timeout:g}); {where}")
            if self._restart(w, stuck):
                self._prematched.add(w)
                continue
            self.close()
            raise WorkerError(stuck + self.after_restarts())


# Libraries that start thread pools at import and are known to hang forked children (JAX warns
# "os.fork() is incompatible with multithreaded code, and JAX is multithreaded").
FORK_UNSAFE_MODULES = ("jax", "jaxlib", "tensorflow")


def _fork_unsafe_reason() -> str | None:
    """Why forking this process could hang its children: a library that runs threads of its own
    (and holds their locks at any moment) is imported, or CUDA is initialized. None otherwise."""
    for module in FORK_UNSAFE_MODULES:
        if module in sys.modules:
            return f"{module} is imported"
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "CUDA is initialized"
    return None


def _status(pid: int) -> str:
    try:
        import psutil

        return psutil.Process(pid).status()
    except Exception as exc:  # gone, or psutil cannot tell: say so rather than fail here
        return f"unknown ({exc})"


def _shutdown(workers: dict, commands, go, messages, in_main: list, stack_dir: str | None = None,
              watchdog: Watchdog | None = None) -> None:
    """Ask every worker to close, then make sure none is left: terminate, then kill. Then close
    the envs the main process stepped itself."""
    if watchdog is not None:
        watchdog.close()
    for w, process in workers.items():
        if process.is_alive():
            commands[w] = CLOSE
            go[w].release()
    processes = list(workers.values())
    deadline = time.monotonic() + 2.0
    for process in processes:
        process.join(timeout=max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():
            log.warning("worker %s did not close in time; terminating it", process.name)
            process.terminate()
            process.join(timeout=1.0)
        if process.is_alive():
            process.kill()
            process.join(timeout=1.0)
    for reader in messages:
        reader.close()
    while in_main:
        in_main.pop().close()
    if stack_dir is not None:
        shutil.rmtree(stack_dir, ignore_errors=True)
