"""The trace of a vector env: every byte it returns over some steps, to compare backends (the
same seed and actions must give the same bytes on Serial, Multiprocessing and Ray)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def vector_trace(vec, steps: int, seed: int, actions: Callable[[int], np.ndarray]) -> np.ndarray:
    """The bytes of the reset observations (seed `seed`) and of each step's observations,
    rewards, terminals and truncations, `actions(i)` being step i's actions."""
    obs, _ = vec.reset(seed)
    parts = [obs.copy()]
    for i in range(steps):
        obs, rewards, terminals, truncations, _ = vec.step(actions(i))
        parts += [obs.copy(), rewards.copy(), terminals.copy(), truncations.copy()]
    return np.concatenate([np.ascontiguousarray(part).ravel().view(np.uint8) for part in parts])


def assert_backends_agree(make_vec: Callable[[str], object], steps: int, seed: int,
                          actions: Callable[[object], Callable[[int], np.ndarray]],
                          backends=("serial", "multiprocessing")) -> None:
    """`make_vec(backend)` on each backend traces the same bytes; `actions(vec)` makes the
    step-to-actions function afresh for each (so that seeded samplers start alike)."""
    traces = {}
    for backend in backends:
        with make_vec(backend) as vec:
            traces[backend] = vector_trace(vec, steps, seed, actions(vec))
    first, *others = backends
    for other in others:
        np.testing.assert_array_equal(traces[first], traces[other], err_msg=f"{first} vs {other}")
