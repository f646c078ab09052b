"""Training progress for people: a live terminal dashboard, or plain log lines.

When stdout is a terminal, a `rich` dashboard is redrawn a few times per second: env, steps with
ETA, SPS, epoch, the profiler sections as bars, the losses and the episode stats. Otherwise (CI,
log files, Hydra multirun) a plain `logging` line every `interval` seconds and at the end.
The trainer calls the reporter once per epoch; `close()` stops the dashboard.
"""

from __future__ import annotations

import logging
import math
import sys
import time

from rich.live import Live
from rich.table import Table

from puffer.monitor.profiler import CONTENDED_PCT, machine_line

log = logging.getLogger("puffer.monitor.progress")

SECTIONS = ("env", "forward", "copy", "learn", "misc")
LOSSES = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", "explained_variance")


def env_name(cfg) -> str:
    from puffer.envs import describe

    return describe(cfg.env)


def snapshot(trainer) -> dict:
    """The numbers both views show, from the trainer's latest metrics (of a batch of members:
    their mean, puffer.training.batched)."""
    m = {key: _mean(value) for key, value in trainer.last_metrics.items()}
    returns = trainer.last_metrics.get("env/episode_return")
    lowest = _lowest(returns) if isinstance(returns, list) else None
    total = trainer.num_epochs * trainer.steps_per_epoch
    sps = m.get("perf/sps", 0.0)
    return {
        "step": trainer.global_step, "total": total, "sps": sps,
        "eta": (total - trainer.global_step) / sps if sps > 0 else float("nan"),
        "epoch": trainer.epoch, "epochs": trainer.num_epochs,
        "sections": {name: m.get(f"perf/{name}_pct", 0.0) for name in SECTIONS},
        # the algorithm's own (Trainer.shown_losses), the first two in the one-line view
        "losses": {name: m.get(f"train/{name}", float("nan")) for name in getattr(trainer, "shown_losses", LOSSES)},
        "return": m.get("env/episode_return", float("nan")),
        "lowest": lowest,  # a batch of members: (the lowest member return, that member)
        "length": m.get("env/episode_length", float("nan")),
        "machine": machine_line(m) if "perf/cpu_main_pct" in m else None,
        "others": m.get("perf/cpu_others_pct", 0.0),
    }


def _mean(value):
    """A metric as one number: the members' mean of a per-member list (nan when none has one)."""
    if not isinstance(value, list):
        return value
    found = [v for v in value if math.isfinite(v)]
    return sum(found) / len(found) if found else float("nan")


def _lowest(values: list[float]) -> tuple[float, int] | None:
    found = [(v, k) for k, v in enumerate(values) if math.isfinite(v)]
    return min(found) if found else None


def returns_text(s: dict, digits: int) -> str:
    """The return shown: one run's, or a batch's mean with its lowest member's."""
    text = number(s["return"], digits)
    if s.get("lowest") is not None:
        text += f" (lowest {number(s['lowest'][0], digits)}: member {s['lowest'][1]})"
    return text


def duration(seconds: float) -> str:
    """ETA as 42s, 3:05 or 1:02:03 (h:mm:ss); '-' before there is a rate to go by."""
    if not math.isfinite(seconds):
        return "-"
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}" if minutes else f"{secs}s"


def number(value: float, digits: int) -> str:
    """A metric, or '-' while there is none yet (no episode has ended, no gradient step taken)."""
    return "-" if not math.isfinite(value) else f"{value:.{digits}f}"


def render(name: str, s: dict) -> Table:
    table = Table(title=f"puffer | {name}", show_header=False, expand=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("steps", f"{s['step']:,} / {s['total']:,}   ETA {duration(s['eta'])}")
    table.add_row("SPS", f"{s['sps']:,.0f}")
    table.add_row("epoch", f"{s['epoch']} / {s['epochs']}")
    table.add_row("episode", f"return {returns_text(s, 2)}   length {number(s['length'], 1)}")
    for section, pct in s["sections"].items():
        table.add_row(section, f"{'#' * round(pct / 2.5):<40} {pct:5.1f}%")
    for loss, value in s["losses"].items():
        table.add_row(loss, number(value, 4))
    if s["machine"] is not None:
        table.add_row("machine", s["machine"])
    return table


def line(name: str, s: dict) -> str:
    sections = " ".join(f"{k} {v:.0f}%" for k, v in s["sections"].items())
    return (f"{name} | step {s['step']:,}/{s['total']:,} | epoch {s['epoch']}/{s['epochs']} | "
            f"{s['sps']:,.0f} SPS | ETA {duration(s['eta'])} | return {returns_text(s, 1)} | "
            + "".join(f"{k} {number(v, 3)} | " for k, v in list(s["losses"].items())[:2]) + f"{sections}" + (
                f" | other processes use {s['others']:.0f}% of the CPUs"
                if s["others"] >= CONTENDED_PCT else ""))


class ProgressReporter:
    """`name`: the env's, the dashboard's title (puffer.monitor.progress.env_name of a run config)."""

    def __init__(self, name: str, interval: float = 5.0, live: bool | None = None):
        self.name = name
        self.interval = interval
        self.last = float("-inf")
        self.live_enabled = sys.stdout.isatty() if live is None else live
        self.live: Live | None = None

    def __call__(self, trainer) -> None:
        s = snapshot(trainer)
        if self.live_enabled:
            if self.live is None:
                self.live = Live(render(self.name, s), refresh_per_second=4, transient=False)
                self.live.start()
                self._log_above_dashboard()
            else:
                self.live.update(render(self.name, s))
            return
        now = time.monotonic()
        if trainer.epoch < trainer.num_epochs and now - self.last < self.interval:
            return
        self.last = now
        log.info("%s", line(self.name, s))

    def _log_above_dashboard(self) -> None:
        """Point the terminal's log handlers at the dashboard's redirected stderr/stdout, so a
        log record (a warning, where a checkpoint went) prints above the dashboard instead of
        being drawn over: the handlers kept the streams they had before the dashboard began."""
        self._streams: list[tuple[logging.StreamHandler, object]] = []
        for handler in logging.getLogger().handlers:
            if type(handler) is logging.StreamHandler and handler.stream in (sys.__stderr__, sys.__stdout__):
                redirected = sys.stderr if handler.stream is sys.__stderr__ else sys.stdout
                self._streams.append((handler, handler.setStream(redirected)))

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None
            for handler, stream in getattr(self, "_streams", []):
                handler.setStream(stream)
