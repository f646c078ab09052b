"""A stand-in for a library that runs threads of its own from its import on (as JAX does): one
of them takes a lock that the library's functions need, a moment at a time, all the time. A
process forked while that thread holds the lock copies it held, without the thread that would
release it: the child's first call into the library waits forever. Imported by a test's child
process only (its thread never stops)."""

from __future__ import annotations

import threading
import time

import gymnasium as gym

LOCK = threading.Lock()


def _hold() -> None:
    while True:
        with LOCK:
            time.sleep(0.05)
        time.sleep(0.0001)


threading.Thread(target=_hold, daemon=True).start()
time.sleep(0.01)


def make_env():
    from puffer.emulation import GymnasiumPufferEnv

    with LOCK:  # the library's call: in a forked child, the lock is held for good
        pass
    return GymnasiumPufferEnv(env=gym.make("CartPole-v1"))
