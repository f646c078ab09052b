"""Aggregate finished Hydra multiruns: per-env tables and one score across envs (comparing two
multiruns: puffer.report.compare).

    python -m puffer.report outputs/multirun/<date>/<time> [--out DIR] [--wandb]
    python -m puffer.report A B        # compare two multiruns env by env (e.g. before/after)

Jobs are grouped by env and by their overrides minus `seed` (a setting): one row per group with
the number of seeds, the final evaluation return (mean over seeds and a Student's t 95% interval),
the normalized score where puffer.report.references has the env (random policy 0, a published agent 1),
SPS and wall time. Across envs, each variant (a setting without the env choice) gets the
interquartile mean of normalized scores with a stratified bootstrap 95% interval and a
performance profile (the rliable protocol; puffer.report.stats).

Writes report.md (with the time-to-score table where the runs watched a score), report.csv,
returns.png and returns_time.png (per env, the training episode return against env steps and
against training seconds: mean over seeds with a t interval), profile.png (performance
profiles) and sps.png into the
multirun directory (or --out), report.md opening with what was run (puffer.report.tables.header);
--wandb logs the table and plots to W&B too.
"""

from __future__ import annotations

import csv
import logging
import math
import os
import re
from collections import Counter, defaultdict
from dataclasses import astuple, dataclass, field, fields
from pathlib import Path

import numpy as np
import yaml

from puffer.envs import describe
from puffer.loggers import read_metrics
from puffer.report import stats
from puffer.report.references import lookup

log = logging.getLogger(__name__)


@dataclass
class Job:
    path: Path
    env: str
    setting: str
    seed: int
    records: list[dict] = field(default_factory=list)
    # The setting without the choice of env: what is compared across envs.
    variant: str = "(defaults)"
    # the command-line overrides of the job (with trial_seeds, every seed of it has the same)
    overrides: list[str] = field(default_factory=list)
    config: dict = field(default_factory=dict)  # the run's resolved config (config.yaml)

    def last(self, key: str) -> float:
        values = [r[key] for r in self.records if isinstance(r.get(key), (int, float))]
        return float(values[-1]) if values else float("nan")

    def curve(self, key: str = "env/episode_return", x: str = "global_step") -> tuple[np.ndarray, np.ndarray]:
        """(x values, key values) of the records that have both: against env steps, or against
        training seconds (x="perf/train_seconds")."""
        points = [(r[x], r[key]) for r in self.records
                  if isinstance(r.get(key), (int, float)) and isinstance(r.get(x), (int, float))]
        steps, values = zip(*points, strict=True) if points else ((), ())
        return np.asarray(steps, float), np.asarray(values, float)


@dataclass
class Row:
    """One env and setting over its seeds."""

    env: str
    setting: str
    seeds: int
    eval_return: float
    ci95: float  # Student's t half-width over seeds
    normalized: float  # nan without a reference
    normalized_ci95: float
    sps: float
    wall_s: float


COLUMNS = [f.name for f in fields(Row)]


@dataclass
class TimeToScore:
    """One env and setting: the training seconds until the score, over its seeds (ScoreWatch's
    perf/time_to_score_s, perf/steps_to_score, perf/scored in each run's metrics)."""

    env: str
    setting: str
    runs: int
    reached: int
    median_s: float
    low_s: float  # the fastest run
    high_s: float  # the slowest (a censored run counts at its training time)
    median_steps: float
    censored: bool  # the median rests on a run that never reached the score: a lower bound
    # Runs whose final evaluation (held-out episodes, deterministic) returns the score or more:
    # the other judge of "good", beside `reached` (training episodes); None where runs did not
    # log their score (perf/score, before it was logged).
    evaluated: int | None = None


def time_to_score(jobs: list[Job]) -> list[TimeToScore]:
    """The time-to-score rows of the groups whose runs had a score to watch."""
    rows = []
    for (env, setting), members in groups_of(jobs).items():
        runs = [j for j in members if math.isfinite(j.last("perf/time_to_score_s"))]
        if not runs:
            continue
        order = sorted(runs, key=lambda j: j.last("perf/time_to_score_s"))
        seconds = np.array([j.last("perf/time_to_score_s") for j in order])
        reached = np.array([j.last("perf/scored") == 1.0 for j in order])
        middle = order[(len(order) - 1) // 2 : len(order) // 2 + 1]
        scores = [j.last("perf/score") for j in runs]
        evaluated = (sum(j.last("eval/return_mean") >= score for j, score in zip(runs, scores, strict=True))
                     if all(math.isfinite(score) for score in scores) else None)
        rows.append(TimeToScore(env, setting, len(runs), int(reached.sum()), float(np.median(seconds)),
                                float(seconds[0]), float(seconds[-1]),
                                float(np.median([j.last("perf/steps_to_score") for j in order])),
                                any(j.last("perf/scored") != 1.0 for j in middle), evaluated))
    return rows


def time_to_score_markdown(rows: list[TimeToScore]) -> str:
    if not rows:
        return ""
    lines = ["", "Time to score: training seconds until the first epoch whose training episodes return "
             "the env's score on average (eval.score, else the env's reward threshold). A run that "
             "never reaches it counts at its training time, a lower bound; a median that rests on "
             "one is shown as > (bench/time_to_score.py evaluates saved policies off the clock instead). "
             "Two judges of reaching it: the training episodes (the stochastic policy, during training) "
             "and the final evaluation (held-out episodes, deterministic policy), which can disagree:",
             "", "| env | setting | reached in training | final evaluation at score | median s | [min, max] s "
             "| median steps |", "|" + "---|" * 7]
    names = env_labels(r.env for r in rows)
    for r in rows:
        median = f"{'> ' if r.censored else ''}{r.median_s:,.1f}"
        evaluated = "-" if r.evaluated is None else f"{r.evaluated}/{r.runs}"
        lines.append(f"| {names[r.env]} | {readable(r.setting)} | {r.reached}/{r.runs} | {evaluated} | {median} | "
                     f"[{r.low_s:,.1f}, {r.high_s:,.1f}] | {r.median_steps:,.0f} |")
    return "\n".join(lines) + "\n"
# Overrides that pick the env rather than how it is trained.
ENV_CHOICE = ("env=", "env.id=", "env.game=", "env.module=", "env.kwargs")


def load_jobs(sweep_dir: Path) -> list[Job]:
    found = []
    for metrics in required_runs(Path(sweep_dir)):
        run_dir = metrics.parent
        # a trial's seeds (<job>/seed_<s>) share the job's overrides; each has its own config
        a_job = (run_dir / ".hydra").is_dir()
        hydra = run_dir / ".hydra" if a_job else run_dir.parent / ".hydra"
        overrides = yaml.safe_load((hydra / "overrides.yaml").read_text()) or []
        config = yaml.safe_load((hydra / "config.yaml" if a_job else run_dir / "config.yaml").read_text())
        found.append((run_dir, overrides, config, read_metrics(metrics)))
    # A setting is what varies between jobs, seeds aside.
    shared = set.intersection(*(set(overrides) for _, overrides, _, _ in found))
    jobs = []
    for run_dir, overrides, config, records in found:
        varying = [label(o) for o in overrides if o not in shared and not o.startswith(("seed=", "hydra."))]
        variant = ",".join(o for o in varying if not o.startswith(ENV_CHOICE))
        jobs.append(Job(run_dir, describe(config.get("env", {})), ",".join(varying) or "(defaults)",
                        int(config.get("seed", 0)), records, variant or "(defaults)", overrides, config))
    return jobs


def run_metrics(sweep_dir: Path) -> list[Path]:
    """The metrics.jsonl of every run of a multirun: one a job, or one a seed of the jobs that
    trained several (trial_seeds: <job>/seed_<s>/)."""
    return sorted([*sweep_dir.glob("*/metrics.jsonl"), *sweep_dir.glob("*/seed_*/metrics.jsonl")])


def required_runs(sweep_dir: Path) -> list[Path]:
    """run_metrics(sweep_dir), or FileNotFoundError saying the folder holds no runs."""
    found = run_metrics(sweep_dir)
    if not found:
        raise FileNotFoundError(f"{sweep_dir}: no runs (no <job>/metrics.jsonl); expected a multirun directory, "
                                "e.g. outputs/multirun/<date>/<time>")
    return found


def label(override: str) -> str:
    """An override as a table shows it: a sampled float (Optuna's learning_rate=0.0003663671900803624)
    to 4 significant digits; the rest as given."""
    key, sep, value = override.partition("=")
    if sep and re.fullmatch(r"-?\d*\.\d{5,}(e-?\d+)?", value):
        return f"{key}={float(value):.4g}"
    return override


def final_returns(members: list[Job]) -> np.ndarray:
    returns = np.array([j.last("eval/return_mean") for j in members])
    return returns[np.isfinite(returns)]


def natural(text: str) -> list:
    """A sort key that orders numbers inside strings as numbers: num_envs=8 before num_envs=16."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text)]


def groups_of(jobs: list[Job]) -> dict[tuple[str, str], list[Job]]:
    groups: dict[tuple[str, str], list[Job]] = defaultdict(list)
    for job in jobs:
        groups[(job.env, job.setting)].append(job)
    return dict(sorted(groups.items(), key=lambda item: (natural(item[0][0]), natural(item[0][1]))))


def summarize(jobs: list[Job]) -> list[Row]:
    rows = []
    for (env, setting), members in groups_of(jobs).items():
        returns = final_returns(members)
        normalized = normalized_returns(env, returns)
        rows.append(Row(env, setting, len(members),
                        float(returns.mean()) if len(returns) else math.nan, stats.t_interval(returns),
                        float(normalized.mean()) if len(normalized) else math.nan,
                        stats.t_interval(normalized),
                        float(np.mean([j.last("perf/sps") for j in members])),
                        float(np.mean([j.last("perf/wall_s") for j in members]))))
    return rows


def normalized_returns(env: str, returns: np.ndarray) -> np.ndarray:
    reference = lookup(env)
    if reference is None:
        return np.array([])
    return stats.normalized_score(returns, reference.random, reference.reference)


def aggregate(jobs: list[Job]) -> dict[str, dict]:
    """Per variant (the setting without the env choice), across the envs that have a reference:
    IQM and mean of normalized scores with stratified bootstrap intervals, and the per-env
    scores the profile is drawn from."""
    by_setting: dict[str, dict[str, np.ndarray]] = defaultdict(dict)
    for (env, _), members in groups_of(jobs).items():
        normalized = normalized_returns(env, final_returns(members))
        if len(normalized):
            by_setting[members[0].variant][env] = normalized
    result = {}
    for setting, scores in sorted(by_setting.items()):
        result[setting] = {
            "envs": len(scores), "runs": sum(len(v) for v in scores.values()), "scores": scores,
            "iqm": stats.stratified_bootstrap(scores, stats.iqm),
            "mean": stats.stratified_bootstrap(scores, stats.mean),
        }
    return result


def _number(value: float, digits: int = 2) -> str:
    return "n/a" if not math.isfinite(value) else f"{value:,.{digits}f}"


def _interval(low: float, high: float, aggregate: dict) -> str:
    if math.isfinite(low):
        return f"[{low:.3f}, {high:.3f}]"
    fewest = min(len(v) for v in aggregate["scores"].values())
    return f"n/a ({fewest} runs in an env, < {stats.MIN_BOOTSTRAP_RUNS})"


def header(sweep_dir: Path, jobs: list[Job], images: list[Path]) -> str:
    """What a report needs to stand alone: what was run (the command, the settings every job
    shares, the budget), when, with which puffer, how it was evaluated, and its plots."""
    import datetime

    import puffer

    command = sweep_command(sweep_dir)
    budgets = sorted({(j.config.get("train") or {}).get("total_timesteps") for j in jobs} - {None})
    episodes = sorted({(j.config.get("eval") or {}).get("episodes") for j in jobs} - {None})
    when = datetime.datetime.fromtimestamp(max((j.path / "metrics.jsonl").stat().st_mtime for j in jobs))
    lines = [f"# Report of {sweep_dir}", "",
             f"- Written {datetime.datetime.now():%Y-%m-%d %H:%M} by puffer {puffer.__version__}; the runs "
             f"ended by {when:%Y-%m-%d %H:%M}.",
             f"- Command: `{command}`" if command else "- Command: not recorded (no multirun.yaml)",
             f"- Settings every job shares (beside the env and seed): {shared_settings(jobs)}",
             "- Budget: " + (", ".join(f"{b:,} steps" for b in budgets) or "not recorded")
             + (" (it varies between jobs)" if len(budgets) > 1 else " per run"),
             "- Evaluation: the final policy on " + ("/".join(map(str, episodes)) or "?") + " held-out episodes "
             "per run (seeds apart from training's, deterministic actions), returns in the env's units; "
             "intervals are Student's t 95% over seeds.",
             ]
    if images:
        lines.append("- Plots: " + ", ".join(f"[{image.name}]({image.name})" for image in images))
    return "\n".join(lines) + "\n\n"


def sweep_command(sweep_dir: Path) -> str | None:
    """The command line of a multirun, from the multirun.yaml Hydra leaves in its folder."""
    path = sweep_dir / "multirun.yaml"
    if not path.is_file():
        return None
    task = (((yaml.safe_load(path.read_text()) or {}).get("hydra") or {}).get("overrides") or {}).get("task")
    return "python -m puffer -m " + " ".join(task) if task else None


def markdown(rows: list[Row], aggregates: dict[str, dict]) -> str:
    lines = ["| env | setting | seeds | eval return | +- 95% (t) | normalized | +- 95% (t) | SPS | wall s |",
             "|" + "---|" * 9]
    names = env_labels(r.env for r in rows)
    for r in rows:
        lines.append(f"| {names[r.env]} | {readable(r.setting)} | {r.seeds} | {_number(r.eval_return)} | {_number(r.ci95)} | "
                     f"{_number(r.normalized, 3)} | {_number(r.normalized_ci95, 3)} | {r.sps:,.0f} | {r.wall_s:.1f} |")
    if aggregates:
        lines += ["", "Across envs (normalized: random policy 0, reference 1; puffer.report.references). IQM: "
                  "the mean of the middle 50% of all runs' scores (25% trimmed from each end). 95% "
                  f"stratified bootstrap intervals, where every env has {stats.MIN_BOOTSTRAP_RUNS}+ runs "
                  "(with fewer the bootstrap covers less than it claims: none is shown):", "",
                  "| variant | envs | runs | IQM | IQM 95% | mean | mean 95% |", "|" + "---|" * 7]
        for setting, a in aggregates.items():
            (iqm, lo, hi), (mean, mlo, mhi) = a["iqm"], a["mean"]
            lines.append(f"| {readable(setting)} | {a['envs']} | {a['runs']} | {iqm:.3f} | {_interval(lo, hi, a)} | "
                         f"{mean:.3f} | {_interval(mlo, mhi, a)} |")
    return "\n".join(lines) + "\n"


def plot(jobs: list[Job], rows: list[Row], aggregates: dict[str, dict], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    images = [path for x, label, path in (("global_step", "env steps", out / "returns.png"),
                                          ("perf/train_seconds", "training seconds", out / "returns_time.png"))
              if plot_returns(plt, jobs, x, label, path)]

    if aggregates:
        taus = np.linspace(0, 1.5, 61)
        fig, ax = plt.subplots(figsize=(6, 4))
        for setting, a in aggregates.items():
            line, = ax.plot(taus, stats.performance_profile(a["scores"], taus),
                            label=f"{shorten(readable(setting), 48)} ({a['envs']} envs, {a['runs']} runs)")
            band = stats.profile_band(a["scores"], taus)
            if band is not None:  # where every env has enough runs for the bootstrap
                ax.fill_between(taus, *band, alpha=0.2, color=line.get_color())
        ax.set_xlabel("normalized score tau")
        ax.set_ylabel("fraction of runs with score > tau")
        ax.legend(fontsize=8)
        fig.tight_layout()
        images.append(out / "profile.png")
        fig.savefig(images[-1], dpi=100)
        plt.close(fig)

    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.45 * len(rows)))
    values = [r.sps for r in rows]
    names = env_labels(r.env for r in rows)
    bars = ax.barh([shorten(f"{names[r.env]} | {r.setting}", 60) for r in rows], values)
    ax.bar_label(bars, labels=[f"{v:,.0f}" for v in values], padding=3, fontsize=8)
    ax.invert_yaxis()  # the table's order, top to bottom
    ax.set_xlabel("steps per second (linear: bar lengths compare; the labels give small ones)")
    ax.tick_params(axis="y", labelsize=8)
    fig.tight_layout()
    images.append(out / "sps.png")
    fig.savefig(images[-1], dpi=100)
    plt.close(fig)
    return images


LINE_STYLES = ("-", "--", "-.", ":")


def readable(setting: str) -> str:
    """A setting as a table cell: train.* keys without their section, a space after each comma so
    that a long one wraps (an Optuna trial's five sampled values ran past 150 characters in one
    unbreakable line). report.csv keeps the overrides as given."""
    return ", ".join(part.removeprefix("train.") for part in setting.split(","))


def env_labels(envs) -> dict[str, str]:
    """Each env's name as a table or plot shows it: a module path without its package
    (pettingzoo.butterfly.knights_archers_zombies_v11(max_cycles=900) ->
    knights_archers_zombies_v11), its constructor arguments kept where two envs of the report
    share that name (LunarLander-v3 and LunarLander-v3(continuous=True)). report.csv keeps the
    full names."""
    def split(env: str) -> tuple[str, str]:  # (the short name, "(arguments)" or "")
        name, bracket, arguments = env.partition("(")
        return (name if "/" in name else name.rsplit(".", 1)[-1]), bracket + arguments

    parts = {env: split(env) for env in set(envs)}
    counts = Counter(base for base, _ in parts.values())
    return {env: base if counts[base] == 1 else base + arguments for env, (base, arguments) in parts.items()}


def shorten(text: str, width: int = 40) -> str:
    """A label that fits a plot: long env constructors and settings cut with an ellipsis (the
    CSV and report.md keep them whole)."""
    return text if len(text) <= width else text[: width - 1] + "\u2026"


def plot_returns(plt, jobs: list[Job], x: str, label: str, path: Path) -> bool:
    """Per env, the training episode return against `x` (env steps or training seconds): the
    mean over seeds with its t band, one line per setting. False, and no file, when no job
    logged `x` (runs from before perf/train_seconds was logged)."""
    if not any(len(j.curve(x=x)[0]) for j in jobs):
        return False
    envs = sorted({job.env for job in jobs})
    names = env_labels(envs)
    columns = min(3, len(envs))
    height = math.ceil(len(envs) / columns)
    fig, axes = plt.subplots(height, columns, figsize=(5 * columns, 3.5 * height), squeeze=False)
    for ax, env in zip(axes.flat, envs, strict=False):
        drawn = 0
        for (group_env, setting), members in groups_of(jobs).items():
            curves = [j.curve(x=x) for j in members if group_env == env and len(j.curve(x=x)[0])]
            if not curves:
                continue
            drawn += 1
            last = min(c[0][-1] for c in curves)
            grid = np.linspace(0, last, 50) if all(len(c[0]) > 1 for c in curves) else np.array([last])
            values = np.array([np.interp(grid, steps, vals) for steps, vals in curves])
            mean = values.mean(0)
            # one logged point is a marker, not a flat line across the axis
            # a dash pattern each, so that curves on top of each other stay told apart
            ax.plot(grid, mean, marker="o" if len(grid) == 1 else None, linestyle=LINE_STYLES[(drawn - 1) % 4],
                    label=f"{shorten(setting)} ({len(curves)} seeds)")
            if len(curves) > 1:
                half = np.array([stats.t_interval(values[:, i]) for i in range(values.shape[1])])
                # the t band, clipped to what the runs reached (a CartPole band of -130..590
                # claims returns no episode can have)
                ax.fill_between(grid, np.maximum(mean - half, values.min()), np.minimum(mean + half, values.max()),
                                alpha=0.2)
        ax.set_title(shorten(names[env]), fontsize=11)
        ax.set_xlabel(label)
        ax.set_ylabel("training episode return")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, title="mean over seeds; band: t 95%", title_fontsize=8)
    for ax in list(axes.flat)[len(envs):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def report(sweep_dir: str | Path, out: str | Path | None = None, wandb: bool = False) -> dict:
    sweep_dir = Path(sweep_dir)
    out = Path(out) if out else sweep_dir
    out.mkdir(parents=True, exist_ok=True)
    jobs = load_jobs(sweep_dir)
    rows = summarize(jobs)
    aggregates = aggregate(jobs)
    times = time_to_score(jobs)
    images = plot(jobs, rows, aggregates, out)
    (out / "report.md").write_text(header(sweep_dir, jobs, images) + markdown(rows, aggregates)
                                   + time_to_score_markdown(times))
    with (out / "report.csv").open("w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(COLUMNS)
        writer.writerows(astuple(r) for r in rows)
    if wandb:
        log_to_wandb(rows, images, sweep_dir)
    return {"rows": rows, "aggregates": aggregates, "time_to_score": times, "markdown": out / "report.md",
            "csv": out / "report.csv", "images": images}


def shared_settings(jobs: list[Job]) -> str:
    """The command-line settings every job of a multirun shares, the env and seed aside: with
    the other side's, what differs between A and B."""
    shared = set.intersection(*(set(job.overrides) for job in jobs))
    kept = sorted(o for o in shared if not o.startswith(("seed=", "hydra.", *ENV_CHOICE)))
    return " ".join(kept) or "the defaults"


def sweep_logging(sweep_dir: Path) -> dict:
    """The W&B project, entity, mode and group the sweep's jobs logged to (from a job's saved
    configs), so the report joins them."""
    job = next(p.parent.parent for p in sorted(sweep_dir.glob("*/.hydra/config.yaml")))
    logger = (yaml.safe_load((job / ".hydra" / "config.yaml").read_text()) or {}).get("logger", {})
    hydra = (yaml.safe_load((job / ".hydra" / "hydra.yaml").read_text()) or {}).get("hydra", {}) \
        if (job / ".hydra" / "hydra.yaml").exists() else {}
    swept = (hydra.get("sweep") or {}).get("dir")
    if not swept or "${" in swept:  # saved unresolved: the directory as given is the best guess
        swept = os.path.relpath(sweep_dir) if not Path(sweep_dir).is_absolute() else str(sweep_dir)
    return {"project": logger.get("project") or "puffer", "entity": logger.get("entity"),
            "mode": logger.get("mode"),
            # the report's own run, grouped by the sweep's folder (its jobs are grouped by their
            # settings: puffer.build.run_identity)
            "group": logger.get("group") or Path(swept).as_posix().replace("/", "_")}


def log_to_wandb(rows: list[Row], images: list[Path], sweep_dir: Path) -> None:
    import wandb

    from puffer.loggers.wandb import pick_mode

    where = sweep_logging(sweep_dir)
    with wandb.init(project=where["project"], entity=where["entity"], group=where["group"],
                    job_type="report", name=f"report {sweep_dir.name}", dir=str(sweep_dir),
                    mode=pick_mode(where["mode"])) as run:
        run.log({"report/table": wandb.Table(columns=COLUMNS, data=[list(astuple(r)) for r in rows]),
                 **{f"report/{p.stem}": wandb.Image(str(p)) for p in images}})
