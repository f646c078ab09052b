"""`python -m puffer [overrides]`: compose the config from conf/ with Hydra and run it.

Ctrl-C (or SIGTERM) saves a checkpoint, closes the workers and exits with status 130 (SIGHUP: 129;
SIGUSR1 saves a checkpoint and goes on, and outside training is noted). A bad
value, a missing or unreadable checkpoint, or an env's failure prints one message (no puffer
traceback unless HYDRA_FULL_ERROR=1) and exits with status 2.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

import puffer.config  # registers the schemas before Hydra composes; CONF_DIR
from puffer.cli.jobs import objective, user_errors

log = logging.getLogger("puffer")


# Absolute, so that a console script and an installed wheel find the configs too.
@hydra.main(version_base="1.3", config_path=str(puffer.config.CONF_DIR), config_name="config")
def main(cfg: DictConfig) -> float | tuple[float, ...]:
    from puffer.run import run_seeds

    try:
        hydra_cfg = HydraConfig.get()
        sweep_dir = hydra_cfg.sweep.dir if hydra_cfg.mode == RunMode.MULTIRUN else None
        runs = run_seeds(cfg, hydra_cfg.runtime.output_dir, sweep_dir)
    except user_errors() as exc:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        log.error("%s: %s\n(HYDRA_FULL_ERROR=1 shows the traceback)", type(exc).__name__, exc)
        sys.exit(2)
    return objective(cfg, runs)


def single_run_of_a_grid(args: list[str]) -> str | None:
    """+suite=... and +sweep=... describe many runs: without -m Hydra would run one job with the
    defaults and say nothing."""
    inspecting = ("--cfg", "-c", "--help", "-h", "--hydra-help", "--info", "--resolve")
    if "-m" in args or "--multirun" in args or any(arg in inspecting for arg in args):
        return None  # (--cfg hydra +suite=classic prints the grid without running it)
    grid = next((arg for arg in args if arg.startswith(("+suite=", "+sweep="))), None)
    if grid is None:
        return None
    return f"{grid} is a grid of runs: add -m (python -m puffer -m {' '.join(args)})"


def cli() -> None:
    """The `puffer` command (and `python -m puffer`): Ctrl-C or SIGTERM exit with status 130,
    SIGHUP with 129; SIGUSR1 never ends it (puffer.training.signals)."""
    from puffer.training.signals import exit_status, install_outside_training

    install_outside_training()  # first: a SIGUSR1 or SIGHUP during start-up is never a death
    try:
        command(sys.argv[1:])
    except KeyboardInterrupt as stop:
        log.warning("interrupted")
        sys.exit(exit_status(stop))
    except BrokenPipeError:  # the reader of stdout left (`--help | head`): nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (Python's own flush at exit)
        sys.exit(1)
    finally:
        # Python puts its own handlers back to the default action as the interpreter ends, and a
        # SIGUSR1 then would still kill the finished run: ignored, it is not theirs to undo
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)


def command(args: list[str]) -> None:
    """`--info envs` lists the env configs (Hydra's other --info choices are its own); anything
    else is checked (one line and exit 2 for a bad command line) and run by Hydra."""
    if "--info" in args and args[args.index("--info") + 1 :][:1] == ["envs"]:
        from puffer.envs.catalog import catalog, table

        sys.stdout.write(table(catalog()) + "\n")
        return
    from puffer.cli import extras, overrides
    from puffer.envs.catalog import check_env_choices

    args, problem = overrides.habits(args)  # `puffer train env=...`: the first word is the mode
    sys.argv[1:] = args
    problem = problem or (check_env_choices(args) or unwritable_output_dir(args) or extras.missing(args)
                          or single_run_of_a_grid(args))
    if problem is None and os.environ.get("HYDRA_FULL_ERROR") != "1":
        problem = overrides.check(args)
    if problem is not None:
        sys.stderr.write(problem + "\n")
        sys.exit(2)
    rank = int(os.environ.get("RANK", "0"))
    if rank > 0:  # a torchrun rank but the first: its log goes to a directory of its own, not
        # to a second outputs/<date>/<time> (rank 0's run directory holds the run)
        import tempfile

        sys.argv += [f"hydra.run.dir={tempfile.mkdtemp(prefix=f'puffer-rank{rank}-')}",
                     "hydra.output_subdir=null"]
    main()


PROBE_BYTES = 64 * 1024  # what Hydra and the run's first files write before any training


def unwritable_output_dir(args: list[str]) -> str | None:
    """The error for a run (or multirun) directory that cannot be made, before Hydra tries and
    fails with a traceback: its nearest existing folder is a file, or not writable."""
    from pathlib import Path

    multirun = "-m" in args or "--multirun" in args
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    value = next((a.split("=", 1)[1] for a in reversed(args) if a.startswith(f"{key}=")), "outputs")  # Hydra: the last
    if not value.strip():  # Hydra would take the current directory and mix the run into it
        return f"{key}={value!r}: empty; pass a folder for the run's outputs ({key}=<folder>)"
    static = value.split("${", 1)[0] or "."  # interpolations (${now:...}) fill in the rest
    path = Path(static)
    while not path.exists() and path != path.parent:
        path = path.parent
    why = "is not a folder" if not path.is_dir() else "is not writable"
    if path.is_dir() and os.access(path, os.W_OK | os.X_OK):
        import tempfile

        probe = None
        try:  # what the permission bits do not say: /proc, a read-only mount, a full disk
            probe = Path(tempfile.mkdtemp(prefix=".puffer-probe-", dir=path))
            (probe / "probe").write_bytes(bytes(PROBE_BYTES))  # a full disk still makes a folder
            return None
        except OSError as exc:
            why = f"refuses {'a new folder' if probe is None else 'to store a file'} ({exc.strerror})"
        finally:
            if probe is not None:
                (probe / "probe").unlink(missing_ok=True)
                probe.rmdir()
    return (f"{key}={value!r}: {path.resolve()} {why}, so the run's outputs cannot be written there; "
            f"pass a writable {key}=<folder> (or run from a writable directory)")


if __name__ == "__main__":
    cli()
