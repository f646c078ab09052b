"""`python -m puffer [overrides]`: compose the config from conf/ with Hydra and run it.

Ctrl-C (or SIGTERM) saves a checkpoint, closes the workers and exits with status 130.
"""

from __future__ import annotations

import logging
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

import puffer.config  # noqa: F401  (registers the schemas before Hydra composes)

log = logging.getLogger("puffer")


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float:
    from puffer.run import run

    metrics = run(cfg, HydraConfig.get().runtime.output_dir)
    # The objective a sweeper (e.g. Optuna) maximises.
    for key in ("eval/return_mean", "env/episode_return", "benchmark/sps", "perf/sps"):
        if key in metrics:
            return float(metrics[key])
    return float("nan")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        log.warning("interrupted")
        sys.exit(130)
