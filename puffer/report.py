"""Aggregate a finished Hydra multirun into a comparison table and plots.

    python -m puffer.report outputs/multirun/<date>/<time> [--out DIR] [--wandb]

Jobs are grouped by their overrides minus `seed`: one row per setting with the number of seeds,
the final evaluation return (mean and 95% interval over seeds), SPS and wall time. Writes
report.md, report.csv, returns.png (episode return vs env steps, mean and a +-1 std band over
seeds) and sps.png into the multirun directory (or --out); --wandb logs the table to W&B too.
"""

from __future__ import annotations

import argparse
import csv
import logging
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from puffer.envs import describe
from puffer.loggers import read_metrics

log = logging.getLogger(__name__)

COLUMNS = ["env", "setting", "seeds", "eval return", "+- 95%", "SPS", "wall s"]


@dataclass
class Job:
    path: Path
    env: str
    setting: str
    seed: int
    records: list[dict] = field(default_factory=list)

    def last(self, key: str) -> float:
        values = [r[key] for r in self.records if isinstance(r.get(key), (int, float))]
        return float(values[-1]) if values else float("nan")

    def curve(self, key: str = "env/episode_return") -> tuple[np.ndarray, np.ndarray]:
        points = [(r["global_step"], r[key]) for r in self.records if isinstance(r.get(key), (int, float))]
        steps, values = zip(*points, strict=True) if points else ((), ())
        return np.asarray(steps, float), np.asarray(values, float)


def load_jobs(sweep_dir: Path) -> list[Job]:
    found = []
    for metrics in sorted(sweep_dir.glob("*/metrics.jsonl")):
        job_dir = metrics.parent
        overrides = yaml.safe_load((job_dir / ".hydra" / "overrides.yaml").read_text()) or []
        config = yaml.safe_load((job_dir / ".hydra" / "config.yaml").read_text())
        found.append((job_dir, overrides, config, read_metrics(metrics)))
    if not found:
        raise FileNotFoundError(f"{sweep_dir}: no job directories with metrics.jsonl; is it a multirun directory?")
    # A setting is what varies between jobs, seeds aside.
    shared = set.intersection(*(set(overrides) for _, overrides, _, _ in found))
    jobs = []
    for job_dir, overrides, config, records in found:
        setting = ",".join(o for o in overrides if o not in shared and not o.startswith(("seed=", "hydra.")))
        jobs.append(Job(job_dir, describe(config.get("env", {})), setting or "(defaults)",
                        int(config.get("seed", 0)), records))
    return jobs


def summarize(jobs: list[Job]) -> list[list]:
    groups: dict[tuple[str, str], list[Job]] = defaultdict(list)
    for job in jobs:
        groups[(job.env, job.setting)].append(job)
    rows = []
    for (env, setting), members in sorted(groups.items()):
        returns = np.array([j.last("eval/return_mean") for j in members])
        returns = returns[np.isfinite(returns)]
        ci = 1.96 * returns.std(ddof=1) / math.sqrt(len(returns)) if len(returns) > 1 else float("nan")
        rows.append([env, setting, len(members), float(returns.mean()) if len(returns) else float("nan"),
                     ci, float(np.mean([j.last("perf/sps") for j in members])),
                     float(np.mean([j.last("perf/wall_s") for j in members]))])
    return rows


def markdown(rows: list[list]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for env, setting, seeds, ret, ci, sps, wall in rows:
        lines.append(f"| {env} | {setting} | {seeds} | {ret:.2f} | {ci:.2f} | {sps:,.0f} | {wall:.1f} |")
    return "\n".join(lines) + "\n"


def plot(jobs: list[Job], rows: list[list], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups: dict[str, list[Job]] = defaultdict(list)
    for job in jobs:
        groups[job.setting].append(job)
    fig, ax = plt.subplots(figsize=(8, 5))
    for setting, members in sorted(groups.items()):
        curves = [j.curve() for j in members if len(j.curve()[0])]
        if not curves:
            continue
        grid = np.linspace(0, min(c[0][-1] for c in curves), 50)
        values = np.array([np.interp(grid, steps, vals) for steps, vals in curves])
        mean, std = values.mean(0), values.std(0)
        ax.plot(grid, mean, label=f"{setting} ({len(curves)} seeds)")
        ax.fill_between(grid, mean - std, mean + std, alpha=0.2)
    ax.set_xlabel("env steps")
    ax.set_ylabel("episode return (training)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    returns_png = out / "returns.png"
    fig.savefig(returns_png, dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 4))
    labels = [f"{r[0]}\n{r[1]}" for r in rows]
    ax.barh(labels, [r[5] for r in rows])
    ax.set_xlabel("steps per second")
    ax.tick_params(axis="y", labelsize=6)
    fig.tight_layout()
    sps_png = out / "sps.png"
    fig.savefig(sps_png, dpi=100)
    plt.close(fig)
    return [returns_png, sps_png]


def report(sweep_dir: str | Path, out: str | Path | None = None, wandb: bool = False) -> dict:
    sweep_dir = Path(sweep_dir)
    out = Path(out) if out else sweep_dir
    out.mkdir(parents=True, exist_ok=True)
    jobs = load_jobs(sweep_dir)
    rows = summarize(jobs)
    (out / "report.md").write_text(markdown(rows))
    with (out / "report.csv").open("w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(COLUMNS)
        writer.writerows(rows)
    images = plot(jobs, rows, out)
    if wandb:
        log_to_wandb(rows, images, sweep_dir)
    return {"rows": rows, "markdown": out / "report.md", "csv": out / "report.csv", "images": images}


def log_to_wandb(rows: list[list], images: list[Path], sweep_dir: Path) -> None:
    import wandb

    from puffer.loggers.wandb import pick_mode

    with wandb.init(project="puffer", job_type="report", name=f"report {sweep_dir.name}",
                    dir=str(sweep_dir), mode=pick_mode(None)) as run:
        run.log({"report/table": wandb.Table(columns=COLUMNS, data=rows),
                 **{f"report/{p.stem}": wandb.Image(str(p)) for p in images}})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dir")
    parser.add_argument("--out", default=None)
    parser.add_argument("--wandb", action="store_true", help="also log the table and plots to W&B")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    result = report(args.sweep_dir, args.out, args.wandb)
    log.info("%s", result["markdown"].read_text())
    log.info("wrote %s, %s, %s", result["markdown"], result["csv"], ", ".join(map(str, result["images"])))


if __name__ == "__main__":
    main()
