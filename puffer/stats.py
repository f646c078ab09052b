"""Statistics for comparing agents honestly with few seeds (the rliable protocol).

What lives here: Student's t intervals over seeds, normalized scores, the interquartile mean (IQM)
with stratified bootstrap confidence intervals across envs, and performance profiles, after
Agarwal et al., "Deep Reinforcement Learning at the Edge of the Statistical Precipice" (NeurIPS
2021). What does not: reading runs or printing tables (puffer.report), the reference scores
(puffer.references).

Why t and bootstrap, not 1.96 * s / sqrt(n): with 3 seeds the normal approximation claims an
interval 2.2x narrower than the data support (t at 2 degrees of freedom is 4.30, not 1.96).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np
from scipy import stats


def t_interval(values, confidence: float = 0.95) -> float:
    """Half-width of the Student's t confidence interval of the mean of `values` (NaN with
    fewer than two finite values)."""
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    n = len(values)
    if n < 2:
        return math.nan
    return float(stats.t.ppf((1 + confidence) / 2, n - 1) * values.std(ddof=1) / math.sqrt(n))


def normalized_score(score, random: float, reference: float):
    """0 for the random policy's score, 1 for the reference's, linear in between and beyond."""
    return (np.asarray(score, dtype=np.float64) - random) / (reference - random)


def iqm(values) -> float:
    """Interquartile mean: the mean of the middle 50% of all values (robust to outlier runs,
    less noisy than the median)."""
    return float(stats.trim_mean(np.asarray(values, dtype=np.float64).ravel(), 0.25))


def stratified_bootstrap(scores: Mapping[str, np.ndarray], statistic: Callable[[np.ndarray], float] = iqm,
                         repetitions: int = 2000, confidence: float = 0.95,
                         seed: int = 0) -> tuple[float, float, float]:
    """(point, low, high): `statistic` of all runs of all envs, with a percentile bootstrap interval
    that resamples runs with replacement within each env (strata), so every env keeps its weight."""
    strata = [np.asarray(v, dtype=np.float64) for v in scores.values() if len(v)]
    if not strata:
        return math.nan, math.nan, math.nan
    point = statistic(np.concatenate(strata))
    rng = np.random.default_rng(seed)
    draws = np.empty(repetitions)
    for i in range(repetitions):
        draws[i] = statistic(np.concatenate([s[rng.integers(0, len(s), len(s))] for s in strata]))
    alpha = (1 - confidence) / 2
    low, high = np.quantile(draws, [alpha, 1 - alpha])
    return float(point), float(low), float(high)


def performance_profile(scores: Mapping[str, np.ndarray], taus: np.ndarray) -> np.ndarray:
    """For each threshold tau, the fraction of runs scoring above it, averaged over envs (each env
    weighs the same whatever its number of runs)."""
    strata = [np.asarray(v, dtype=np.float64) for v in scores.values() if len(v)]
    if not strata:
        return np.full(len(taus), math.nan)
    return np.mean([(s[:, None] > np.asarray(taus)[None, :]).mean(0) for s in strata], axis=0)
