"""What one Hydra job of `python -m puffer` returns to its sweeper, and which errors are the
user's (one line, exit 2): shared by the task function (puffer.__main__) and the members launcher
(puffer.cli.launcher), which returns each of its jobs' values itself."""

from __future__ import annotations

from omegaconf import DictConfig


def user_errors() -> tuple[type[BaseException], ...]:
    """Errors whose message says all a user needs (the key, the value, what was expected, or the
    env's own traceback): printed as one message, without puffer's traceback."""
    from puffer.emulation.spaces import SpaceError
    from puffer.errors import CheckpointError, ConfigError
    from puffer.files.trust import UntrustedFileError
    from puffer.training.trainer import NonFiniteError
    from puffer.vector.base import EnvError, VecConfigError

    return (ConfigError, CheckpointError, SpaceError, NonFiniteError, EnvError, VecConfigError,
            UntrustedFileError)


def objective(cfg: DictConfig, runs: list[dict[str, float]]) -> float | tuple[float, ...]:
    """What a sweeper (e.g. Optuna) optimises: each `objective` entry over the job's runs (its
    trial_seeds; `min(key)`, or the mean of a bare key), else the mean of the first of the
    default keys the runs have. A key a run lacks counts as nan."""
    import numpy as np

    from puffer.config.validate import objective_entry

    if cfg.objective:
        values = []
        for entry in cfg.objective:
            stat, key = objective_entry(entry)  # stat: one of OBJECTIVE_STATS, each a numpy function
            values.append(float(getattr(np, stat)([float(r.get(key, float("nan"))) for r in runs])))
        return tuple(values)
    for key in ("eval/return_mean", "env/episode_return", "benchmark/sps", "perf/sps"):
        if key in runs[0]:
            return float(np.mean([r.get(key, float("nan")) for r in runs]))
    return float("nan")
