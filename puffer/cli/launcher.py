"""What hydra/launcher=members does (its class is hydra_plugins.puffer_launcher.members's, where
Hydra looks for launchers): a multirun's jobs grouped by what members of a batch must share
(puffer.batch.batch_key), each group trained as batches of at most max_members in one process,
or with processes=P as P batches side by side, each in a child process (`side_by_side`).

Every job first gets the directory and the `.hydra/` files a job of the basic launcher gets
(Hydra's own run_job, with a task that only notes where); then its members (the job's seed, or
its trial_seeds) train in the batch and write there as solo runs do; its return value is the
objective a solo job returns (puffer.cli.jobs.objective), so Optuna's sweeper and the report read
a batched multirun as any other. A group that cannot train as a batch (train.vtrace, say) runs
job by job, as the basic launcher would, with the reason in the log.
"""

from __future__ import annotations

import contextlib
import logging
import math
import multiprocessing
import os
import signal
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import (
    JobReturn,
    JobStatus,
    configure_log,
    filter_overrides,
    run_job,
    setup_globals,
)
from omegaconf import DictConfig, open_dict

log = logging.getLogger("puffer.cli.launcher")


@dataclass
class Job:
    """One job of the sweep: its composed config (with hydra), and once its directory is made,
    its task config, directory and what Hydra's run_job returned."""

    number: int
    config: DictConfig
    task: DictConfig | None = None
    directory: Path | None = None
    result: JobReturn | None = None
    members: list[tuple[DictConfig, Path, list[str]]] = field(default_factory=list)


def launch(launcher, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[JobReturn]:
    from puffer.batch import batch_key

    setup_globals()
    reporting_user_errors(lambda: check_settings(launcher))
    config, context = launcher.config, launcher.hydra_context
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    Path(str(config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
    jobs = []
    for number, overrides in enumerate(job_overrides, initial_job_idx):
        sweep_config = context.config_loader.load_sweep_config(config, list(overrides))
        with open_dict(sweep_config):
            sweep_config.hydra.job.id = sweep_config.hydra.job.num = number
        jobs.append(Job(number, sweep_config))
    groups: dict[str, list[Job]] = {}
    for job in jobs:
        task = job.config.copy()
        with open_dict(task):
            del task["hydra"]
        groups.setdefault(batch_key(task), []).append(job)
    log.info("Launching %d jobs as %d batches of members (or more where a batch would have more than %d)",
             len(jobs), len(groups), launcher.max_members)
    for group in groups.values():
        run_group(launcher, group)
        configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    log.info("the whole multirun goes on as the same command with resume=%s", config.hydra.sweep.dir)
    return [job.result for job in jobs]


def check_settings(launcher) -> None:
    """ConfigError unless max_members and processes are whole numbers of 1 or more."""
    from puffer.errors import ConfigError

    for key in ("max_members", "processes"):
        value = getattr(launcher, key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"hydra.launcher.{key}={value!r}: expected a whole number, 1 or more")


def run_group(launcher, jobs: list[Job]) -> None:
    """The jobs' directories, then their members trained as batches of at most max_members (or,
    when they cannot be a batch, job by job)."""
    from puffer.batch import check_members
    from puffer.errors import ConfigError

    for job in jobs:
        prepare(launcher, job)
    members = [member for job in jobs for member in job.members]
    if len(members) == 1:
        # a batch of one member trains as its solo run would, only slower (the stacked learner's
        # extra ops: 1.1-1.2x a solo CartPole run in bench/members.py --study)
        log.info("job %d runs as a solo job: no other job shares its batch", jobs[0].number)
        run_one_by_one(launcher, jobs)
        return
    try:
        check_members([cfg for cfg, _, _ in members])
    except ConfigError as exc:
        log.warning("jobs %s run one after another, not as a batch: %s", [job.number for job in jobs], exc)
        run_one_by_one(launcher, jobs)
        return
    sweep_dir = Path(str(jobs[0].config.hydra.sweep.dir))
    batches = []
    for start, chunk in chunks(members, launcher.max_members, launcher.processes):
        name = str(jobs[0].number) if len(chunk) == len(members) else f"{jobs[0].number}_{start}"
        batches.append((chunk, sweep_dir / "batches" / name, log_dirs(chunk)))
    reporting_user_errors(lambda: resume_in_places(batches, sweep_dir))
    if launcher.processes > 1 and len(batches) > 1:
        results = side_by_side(batches, launcher.processes)
    else:
        results = []
        for chunk, batch_dir, directories in batches:
            with logged_to(directories):
                results += train(chunk, batch_dir)
    finish(jobs, results)


def chunks(members: list, max_members: int, processes: int) -> list[tuple[int, list]]:
    """(first index, members) of each batch: at least `processes` batches (one per member at
    most), none of more than `max_members`, their sizes within one of each other (65 members
    with max_members=64 train as 33 and 32, not 64 and a batch of one)."""
    count = min(len(members), max(processes, math.ceil(len(members) / max_members)))
    size = math.ceil(len(members) / count)
    return [(start, members[start:start + size]) for start in range(0, len(members), size)]


def resume_in_places(batches: list, sweep_dir: Path) -> None:
    """With resume=<a multirun's sweep directory>, each batch's members resume from the batch
    at its place there (<resume>/batches/<name>: the same sweep makes the same batches), every
    place checked before any batch trains (puffer.files.checkpoint.place_in_multirun)."""
    from puffer.files.checkpoint import place_in_multirun

    for chunk, batch_dir, _ in batches:
        place = place_in_multirun(chunk[0][0].resume, sweep_dir, batch_dir)  # (a batch resumes from its first's)
        for cfg, _, _ in chunk:
            cfg.resume = place


def log_dirs(chunk: list[tuple[DictConfig, Path, list[str]]]) -> list[Path]:
    """The job directories whose puffer.log a batch of these members writes to."""
    return sorted({directory if cfg.trial_seeds == 1 else directory.parent for cfg, directory, _ in chunk})


def side_by_side(batches: list, processes: int) -> list[dict[str, float]]:
    """The batches in `processes` child processes at a time, each with its share of this
    machine's CPUs as its OMP_NUM_THREADS (puffer.runtime.threads plans within it), its log in its
    jobs' puffer.log files and on stderr. The children are in sessions of their own, and this
    process passes each stopping signal on to them once (Ctrl-C, SLURM's or GNU timeout's SIGTERM
    to the group, a SIGTERM or SIGUSR1 to this process alone): each saves as a batch does; killed
    outright, this process takes them along (SIGHUP: each saves at its epoch's end). A user's
    error in one is one line and exit 2, as in a batch of this process."""
    from puffer.runtime.processes import environment_variable
    from puffer.runtime.threads import usable_cpus

    threads = max(1, usable_cpus() // processes)
    log.info("%d batches, %d side by side, %d torch thread%s each", len(batches), processes, threads,
             "" if threads == 1 else "s")
    handlers = {signum: signal.signal(signum, pass_on) for signum in PASSED_ON}
    try:  # (the children start with the OMP_NUM_THREADS of the block)
        with environment_variable("OMP_NUM_THREADS", str(threads)), ProcessPoolExecutor(
                processes, mp_context=multiprocessing.get_context("spawn"), initializer=apart) as pool:
            futures = [pool.submit(train_apart, os.getpid(), *batch) for batch in batches]
            return [metrics for future in futures for metrics in reporting_user_errors(future.result)]
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)


# What side_by_side's children are told of (puffer.training.signals: stop after saving, or save).
PASSED_ON = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)


def pass_on(signum, frame) -> None:
    for child in multiprocessing.active_children():
        os.kill(child.pid, signum)


def apart() -> None:
    """A side_by_side child: out of the launcher's process group (a signal to the group reaches
    it once, through the launcher), ended with it (SIGHUP) if the launcher dies."""
    from puffer.runtime.processes import end_with_parent

    os.setsid()
    end_with_parent(signal.SIGHUP)


def train_apart(launcher: int, members: list[tuple[DictConfig, Path, list[str]]], batch_dir: Path,
                directories: list[Path]) -> list[dict[str, float]]:
    """One batch in a child process of `side_by_side` (`launcher`: its pid)."""
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")
    try:
        with logged_to(directories):
            return run_members(members, batch_dir)
    finally:
        if os.getppid() != launcher:  # the launcher died (SIGHUP ended the batch): nobody waits for it
            logging.shutdown()
            os._exit(129)


def run_one_by_one(launcher, jobs: list[Job]) -> None:
    """The jobs as the basic launcher runs them: each its solo job, one after another."""
    for job in jobs:
        job.result = run_job(hydra_context=launcher.hydra_context, task_function=launcher.task_function,
                             config=job.config, job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")


@contextlib.contextmanager
def logged_to(directories: list[Path]):
    """The batch's log in every member job's puffer.log, as a solo job's log is in its own (the
    file handler Hydra's run_job left is the last prepared job's alone)."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, logging.FileHandler)]:
        root.removeHandler(handler)
        handler.close()
    formatter = logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")
    handlers = [logging.FileHandler(directory / "puffer.log") for directory in directories]
    for handler in handlers:
        handler.setFormatter(formatter)
        root.addHandler(handler)
    try:
        yield
    finally:
        for handler in handlers:
            root.removeHandler(handler)
            handler.close()


def prepare(launcher, job: Job) -> None:
    """Hydra's run_job for `job` with a task that only notes its config and directory: the
    directory, its .hydra/ files and its log file, as the basic launcher makes them."""

    def note(task: DictConfig) -> None:
        job.task, job.directory = task, Path(HydraConfig.get().runtime.output_dir)

    job.result = run_job(hydra_context=launcher.hydra_context, task_function=note, config=job.config,
                         job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
    overrides = list(job.config.hydra.overrides.task)
    log.info("\t#%d : %s", job.number, " ".join(filter_overrides(overrides)))
    seeds = job.task.trial_seeds
    if seeds == 1:
        job.members = [(job.task, job.directory, overrides)]
        return
    for seed in range(job.task.seed, job.task.seed + seeds):  # as puffer.run.run_seeds lays them out
        member = job.task.copy()
        member.seed = seed
        job.members.append((member, job.directory / f"seed_{seed}", [*overrides, f"seed={seed}"]))


def train(members: list[tuple[DictConfig, Path, list[str]]], batch_dir: Path) -> list[dict[str, float]]:
    """One batch in this process."""
    return reporting_user_errors(lambda: run_members(members, batch_dir))


def run_members(members: list[tuple[DictConfig, Path, list[str]]], batch_dir: Path) -> list[dict[str, float]]:
    """puffer.batch.run_batch of the members' (config, directory, overrides)."""
    from puffer.batch import run_batch

    configs, directories, overrides = (list(column) for column in zip(*members, strict=True))
    return run_batch(configs, directories, batch_dir, overrides)


def reporting_user_errors(batch):
    """`batch()`'s value; a user's error is one line and exit 2, as a solo job's (puffer.__main__)."""
    from puffer.cli.jobs import user_errors

    try:
        return batch()
    except user_errors() as exc:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        log.error("%s: %s\n(HYDRA_FULL_ERROR=1 shows the traceback)", type(exc).__name__, exc)
        sys.exit(2)


def finish(jobs: list[Job], results: list[dict[str, float]]) -> None:
    """Each job's return value from its members' metrics: the objective its solo job returns."""
    from puffer.cli.jobs import objective

    found = iter(results)
    for job in jobs:
        runs = [next(found) for _ in job.members]
        job.result.return_value = objective(job.task, runs)
        job.result.status = JobStatus.COMPLETED
