"""The end of a multirun (-m): its folder and the report command, as Hydra's `on_multirun_end`
callback (conf/config.yaml, hydra.callbacks), so that a grid never ends in silence."""

from __future__ import annotations

import logging
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

log = logging.getLogger("puffer")


class MultirunEnd(Callback):
    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        # here, not at the top: Hydra builds this callback for every run, and the report's
        # module imports scipy (~0.9 s)
        from puffer.report.tables import run_metrics

        folder = Path(config.hydra.sweep.dir)
        runs = len(run_metrics(folder)) if folder.is_dir() else 0
        log.info("multirun in %s: %d runs; compare them: python -m puffer.report %s", folder, runs, folder)
