"""Progress lines while training: steps, SPS, ETA, episode return, losses, time breakdown.

Plain `logging` lines at a fixed interval (the right thing for CI, log files and Hydra
multirun); the trainer calls the reporter once per epoch.
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger("puffer.progress")


def _env_name(cfg) -> str:
    env = cfg.env
    target = str(env.get("_target_", ""))
    if target.startswith("puffer.envs.ocean."):
        return "ocean/" + target.rsplit(".", 1)[-1].lower()
    return str(env.get("id") or env.get("module") or target)


class ProgressReporter:
    def __init__(self, cfg, interval: float = 5.0):
        self.name = _env_name(cfg)
        self.interval = interval
        self.last = float("-inf")

    def __call__(self, trainer) -> None:
        now = time.monotonic()
        final = trainer.epoch >= trainer.num_epochs
        if not final and now - self.last < self.interval:
            return
        self.last = now
        log.info("%s", self.line(trainer))

    def line(self, trainer) -> str:
        m = trainer.last_metrics
        total = trainer.num_epochs * trainer.batch_size
        sps = m.get("perf/sps", 0.0)
        eta = (total - trainer.global_step) / sps if sps > 0 else float("nan")
        sections = " ".join(
            f"{name} {m.get(f'perf/{name}_pct', 0.0):.0f}%"
            for name in ("env", "forward", "copy", "learn", "misc")
        )
        return (
            f"{self.name} | step {trainer.global_step:,}/{total:,} | epoch {trainer.epoch}/"
            f"{trainer.num_epochs} | {sps:,.0f} SPS | ETA {eta:,.0f}s | return "
            f"{m.get('env/episode_return', float('nan')):.1f} | policy_loss "
            f"{m.get('train/policy_loss', float('nan')):.3f} value_loss "
            f"{m.get('train/value_loss', float('nan')):.3f} | {sections}"
        )
