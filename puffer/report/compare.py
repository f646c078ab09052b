"""Comparing two multiruns (python -m puffer.report A B): env by env, B's mean evaluation return
against A's with Welch's t interval of the difference, and A's and B's training curves on one
axis per env. What does not live here: reading the jobs and the one-multirun report
(puffer.report.tables).
"""

from __future__ import annotations

import logging
import math
import warnings
from collections import defaultdict
from dataclasses import astuple, dataclass, fields, replace
from pathlib import Path

import numpy as np

from puffer.report import stats
from puffer.report.tables import (
    Job,
    _number,
    env_labels,
    final_returns,
    load_jobs,
    plot_returns,
    shared_settings,
)

log = logging.getLogger(__name__)


@dataclass
class Difference:
    env: str
    a: float
    a_ci95: float
    b: float
    b_ci95: float
    difference: float  # b - a
    low: float  # Welch's t 95% interval of the difference
    high: float
    verdict: str  # "B better", "B worse", or "no difference detected at 95%" (the interval holds 0)


def _keyed(jobs: list[Job]) -> dict[str, np.ndarray]:
    """Final returns per env; an env run with several variants is keyed `env [variant]`."""
    variants = defaultdict(set)
    for job in jobs:
        variants[job.env].add(job.variant)
    keyed: dict[str, list[Job]] = defaultdict(list)
    for job in jobs:
        keyed[job.env if len(variants[job.env]) == 1 else f"{job.env} [{job.variant}]"].append(job)
    return {key: final_returns(members) for key, members in keyed.items()}


def env_label(key: str, names: dict[str, str]) -> str:
    """A _keyed key (`env` or `env [variant]`) with the env's short name."""
    env, bracket, variant = key.partition(" [")
    return names.get(env, env) + bracket + variant


def compare(a_dir: str | Path, b_dir: str | Path, out: str | Path | None = None, wandb: bool = False) -> dict:
    """Env by env, B's mean evaluation return against A's; a difference is flagged when Welch's
    t interval of it excludes 0. Envs in only one of them are listed apart. `wandb`: the table and
    the plots go to W&B too, as a run of job_type comparison in B's project and group."""
    # (0.6 s to import: here, not in every run that imports puffer.report)
    from scipy import stats as scipy_stats

    jobs_a, jobs_b = load_jobs(Path(a_dir)), load_jobs(Path(b_dir))
    a, b = _keyed(jobs_a), _keyed(jobs_b)
    differences = []
    for env in sorted(set(a) & set(b)):
        x, y = a[env], b[env]
        low = high = math.nan
        if len(x) >= 2 and len(y) >= 2 and (x.std() > 0 or y.std() > 0):
            with warnings.catch_warnings():  # one side without spread (all 500s): exact, not lossy
                warnings.filterwarnings("ignore", "Precision loss occurred", RuntimeWarning)
                interval = scipy_stats.ttest_ind(y, x, equal_var=False).confidence_interval(0.95)
            low, high = float(interval.low), float(interval.high)
        elif len(x) >= 2 and len(y) >= 2:  # no spread on either side: the difference is exact
            low = high = float(y.mean() - x.mean())
        verdict = "B better" if low > 0 else "B worse" if high < 0 else "no difference detected at 95%"
        if not math.isfinite(low):
            verdict = "too few seeds"
        differences.append(Difference(env, float(x.mean()), stats.t_interval(x), float(y.mean()),
                                      stats.t_interval(y), float(y.mean() - x.mean()), low, high, verdict))
    only = {"A": sorted(set(a) - set(b)), "B": sorted(set(b) - set(a))}
    lines = [f"A: {a_dir} ({shared_settings(jobs_a)})", f"B: {b_dir} ({shared_settings(jobs_b)})", "",
             "| env | A return | +- 95% | B return | +- 95% | B - A | 95% (Welch) | verdict |",
             "|" + "---|" * 8]
    names = env_labels(job.env for job in jobs_a + jobs_b)
    for d in differences:
        flag = f"**{d.verdict}**" if d.verdict in ("B better", "B worse") else d.verdict
        lines.append(f"| {env_label(d.env, names)} | {_number(d.a)} | {_number(d.a_ci95)} | {_number(d.b)} | {_number(d.b_ci95)} | "
                     f"{_number(d.difference)} | [{_number(d.low)}, {_number(d.high)}] | {flag} |")
    for side, envs in only.items():
        if envs:
            lines.append(f"\nOnly in {side}: {', '.join(env_label(env, names) for env in envs)}")
    path = Path(out or b_dir) / "compare.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    images = plot_comparison(jobs_a, jobs_b, path.parent)
    if images:
        lines += ["", "Training episode return of A and B (mean over seeds, t 95% band): "
                  + ", ".join(f"[{image.name}]({image.name})" for image in images)]
    path.write_text("\n".join(lines) + "\n")
    if wandb:
        log_comparison(differences, images, Path(a_dir), Path(b_dir))
    return {"differences": differences, "only": only, "markdown": path, "images": images}


def log_comparison(differences: list[Difference], images: list[Path], a_dir: Path, b_dir: Path) -> None:
    """The comparison as a W&B run (job_type comparison) in B's sweep's project and group: its
    table (one row an env) and the plots."""
    import wandb

    from puffer.loggers.wandb import pick_mode
    from puffer.report.tables import sweep_logging

    where = sweep_logging(b_dir)
    columns = [f.name for f in fields(Difference)]
    with wandb.init(project=where["project"], entity=where["entity"], group=where["group"], job_type="comparison",
                    name=f"compare {a_dir.name} vs {b_dir.name}", dir=str(b_dir), mode=pick_mode(where["mode"]),
                    config={"a": str(a_dir), "b": str(b_dir)}, settings=wandb.Settings(silent=True)) as run:
        run.log({"compare/table": wandb.Table(columns=columns, data=[list(astuple(d)) for d in differences]),
                 **{f"compare/{p.stem}": wandb.Image(str(p)) for p in images}})


def plot_comparison(jobs_a: list[Job], jobs_b: list[Job], out: Path) -> list[Path]:
    """compare.png and compare_time.png: per env, A's and B's returns against env steps and
    training seconds on one axis; none (with a warning) without matplotlib."""
    from puffer.envs.catalog import importable

    if not importable("matplotlib"):
        log.warning("no comparison plot: it needs matplotlib (pip install 'puffer[sweeps]')")
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sides = [replace(job, setting=side) for side, jobs in (("A", jobs_a), ("B", jobs_b)) for job in jobs]
    return [path for x, label, path in (("global_step", "env steps", out / "compare.png"),
                                        ("perf/train_seconds", "training seconds", out / "compare_time.png"))
            if plot_returns(plt, sides, x, label, path)]
