"""Statistics for comparing agents honestly with few seeds (the rliable protocol).

What lives here: Student's t intervals over seeds, normalized scores, the interquartile mean (IQM)
with stratified bootstrap confidence intervals across envs, and performance profiles, after
Agarwal et al., "Deep Reinforcement Learning at the Edge of the Statistical Precipice" (NeurIPS
2021). What does not: reading runs or printing tables (puffer.report), the reference scores
(puffer.report.references).

Why t and bootstrap, not 1.96 * s / sqrt(n): with 3 seeds the normal approximation claims an
interval 2.2x narrower than the data support (t at 2 degrees of freedom is 4.30, not 1.96).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np
from scipy import special

# (scipy.stats is imported where it is used: 0.6 s, which every run's final evaluation would pay
# for its t interval alone)


def t_interval(values, confidence: float = 0.95) -> float:
    """Half-width of the Student's t confidence interval of the mean of `values` (NaN with
    fewer than two finite values)."""
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    n = len(values)
    if n < 2:
        return math.nan
    return float(special.stdtrit(n - 1, (1 + confidence) / 2) * values.std(ddof=1) / math.sqrt(n))


def normalized_score(score, random: float, reference: float):
    """0 for the random policy's score, 1 for the reference's, linear in between and beyond."""
    return (np.asarray(score, dtype=np.float64) - random) / (reference - random)


def iqm(values, axis: int | None = None):
    """Interquartile mean: the mean of the middle 50% of the values, 25% trimmed from each end
    (robust to outlier runs, less noisy than the median); along `axis` for a batch of samples."""
    from scipy import stats

    values = np.asarray(values, dtype=np.float64)
    if axis is None:
        return float(stats.trim_mean(values.ravel(), 0.25))
    return stats.trim_mean(values, 0.25, axis=axis)


def mean(values, axis: int | None = None):
    return float(np.mean(values)) if axis is None else np.mean(values, axis=axis)


# A percentile bootstrap covers less than it claims with few runs (resampling 3 values never
# leaves their [min, max]: 74% for a nominal 95% in a simulation); from 10 runs per env it keeps
# 90% or more (tests/test_report.py simulates it). Below, no interval is claimed.
MIN_BOOTSTRAP_RUNS = 10


def stratified_bootstrap(scores: Mapping[str, np.ndarray], statistic: Callable = iqm,
                         repetitions: int = 2000, confidence: float = 0.95,
                         seed: int = 0) -> tuple[float, float, float]:
    """(point, low, high): `statistic` (called with `axis`) of all runs of all envs, with a
    percentile bootstrap interval that resamples runs with replacement within each env (strata),
    so every env keeps its weight; low and high are NaN when an env has fewer than
    MIN_BOOTSTRAP_RUNS runs, where such an interval would claim more than the runs show."""
    strata = [np.asarray(v, dtype=np.float64) for v in scores.values() if len(v)]
    if not strata:
        return math.nan, math.nan, math.nan
    point = float(statistic(np.concatenate(strata)))
    if min(len(s) for s in strata) < MIN_BOOTSTRAP_RUNS:
        return point, math.nan, math.nan
    rng = np.random.default_rng(seed)
    resampled = np.concatenate([s[rng.integers(0, len(s), (repetitions, len(s)))] for s in strata], axis=1)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(statistic(resampled, axis=1), [alpha, 1 - alpha])
    return point, float(low), float(high)


def performance_profile(scores: Mapping[str, np.ndarray], taus: np.ndarray) -> np.ndarray:
    """For each threshold tau, the fraction of runs scoring above it, averaged over envs (each env
    weighs the same whatever its number of runs)."""
    strata = [np.asarray(v, dtype=np.float64) for v in scores.values() if len(v)]
    if not strata:
        return np.full(len(taus), math.nan)
    return np.mean([(s[:, None] > np.asarray(taus)[None, :]).mean(0) for s in strata], axis=0)


def profile_band(scores: Mapping[str, np.ndarray], taus: np.ndarray, repetitions: int = 1000,
                 confidence: float = 0.95, seed: int = 0) -> tuple[np.ndarray, np.ndarray] | None:
    """A stratified bootstrap band of `performance_profile` (low, high per tau), or None where an
    env has fewer than MIN_BOOTSTRAP_RUNS runs."""
    strata = [np.asarray(v, dtype=np.float64) for v in scores.values() if len(v)]
    if not strata or min(len(s) for s in strata) < MIN_BOOTSTRAP_RUNS:
        return None
    rng = np.random.default_rng(seed)
    taus = np.asarray(taus)
    fractions = np.mean([(s[rng.integers(0, len(s), (repetitions, len(s)))][:, :, None] > taus).mean(1)
                         for s in strata], axis=0)  # repetitions x taus
    alpha = (1 - confidence) / 2
    low, high = np.quantile(fractions, [alpha, 1 - alpha], axis=0)
    return low, high
