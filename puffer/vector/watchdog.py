"""A step timeout for envs stepped in the main process (Serial, Multiprocessing's worker 0).

A worker process that hangs is found by the main process (puffer.vector.multiprocessing); an
env that hangs in the main process itself blocks the only thread that could notice. So a
daemon thread watches: when one `watching()` block has run past `timeout`, it logs the main
thread's stack and raises `StepTimeout` in it asynchronously (CPython's
PyThreadState_SetAsyncExc). Python code, including a loop around a blocking call, is interrupted
at its next bytecode; code stuck in C that never returns to Python cannot be, and the logged
stack says where it is.

The cost on the stepping thread is two uncontended lock acquisitions per step.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import sys
import threading
import time
import traceback

log = logging.getLogger(__name__)


class StepTimeout(BaseException):
    """Raised inside the main thread's step by the watchdog; `Watchdog.describe()` says more.
    A BaseException, like KeyboardInterrupt, so that an env's own `except Exception` (or the
    env group's error wrapping) does not swallow it."""


def _raise_in(thread_id: int, exc: type[BaseException] | None) -> None:
    """Make `thread_id` raise `exc` at its next bytecode; None cancels one not yet raised."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id),
                                               ctypes.py_object(exc) if exc is not None else None)


class Watchdog:
    def __init__(self, timeout: float):
        self.timeout = timeout
        self.stack = ""  # the stuck thread's stack when the watchdog fired
        self.busy_for = 0.0
        self._lock = threading.Lock()
        self._since: float | None = None
        self._fired = False
        self._thread_id = threading.get_ident()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="puffer-step-watchdog", daemon=True)
        self._thread.start()

    def start(self) -> None:
        """A step (or reset) begins: it raises StepTimeout once it has run `timeout` seconds."""
        with self._lock:
            self._since, self._thread_id = time.monotonic(), threading.get_ident()

    def stop(self) -> None:
        """The step ended (or raised); call it in a `finally`."""
        with self._lock:
            self._since = None
            if self._fired:
                # the watchdog fires only while _since is set, under this lock: cancelling here
                # leaves no StepTimeout pending to surface in unrelated code
                self._fired = False
                _raise_in(self._thread_id, None)

    @contextlib.contextmanager
    def watching(self):
        self.start()
        try:
            yield
        finally:
            self.stop()

    def describe(self) -> str:
        return (f"has been busy with one step for {self.busy_for:.0f} s (vec.step_timeout={self.timeout:g}); "
                f"its stack:\n{self.stack}")

    def close(self) -> None:
        self._stopped.set()

    def _watch(self) -> None:
        while not self._stopped.wait(min(1.0, self.timeout / 4)):
            with self._lock:
                if self._since is None or time.monotonic() - self._since < self.timeout:
                    continue
                self.busy_for = time.monotonic() - self._since
                frame = sys._current_frames().get(self._thread_id)
                self.stack = "".join(traceback.format_stack(frame)) if frame is not None else "(not found)"
                self._since, self._fired = None, True  # fire once per step
                log.error("an env stepped in the main process %s", self.describe())
                _raise_in(self._thread_id, StepTimeout)
