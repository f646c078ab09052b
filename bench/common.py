"""Helpers shared by the benchmark scripts: timing loops, table printing, comparing seeds."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from puffer.report.stats import t_interval


def rate(step: Callable[[], int], seconds: float) -> float:
    """Calls `step` (which returns how many env steps it made) for `seconds`; steps per second."""
    steps, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        steps += step()
    return steps / elapsed


def best_of(rounds: int, measure: Callable[[], float]) -> float:
    """The best of several measurements: the least disturbed by the rest of the machine."""
    return max(measure() for _ in range(rounds))


def compare(ours: list[float], theirs: list[float]) -> str:
    """better / worse where the two Student's t 95% intervals over seeds do not overlap, else
    same."""
    low, high = np.mean(ours) - t_interval(ours), np.mean(ours) + t_interval(ours)
    their_low, their_high = np.mean(theirs) - t_interval(theirs), np.mean(theirs) + t_interval(theirs)
    if low > their_high:
        return "better"
    if high < their_low:
        return "worse"
    return "same"


def print_table(headers: list[str], rows: list[list]) -> None:
    cells = [[str(h) for h in headers]] + [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for i, row in enumerate(cells):
        print(" | ".join(c.rjust(w) if j else c.ljust(w) for j, (c, w) in enumerate(zip(row, widths, strict=True))))
        if i == 0:
            print("-|-".join("-" * w for w in widths))


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)
