"""`puffer-torchrun [torchrun's options] -m puffer [overrides]` (also `python -m
puffer.cli.torchrun`): PyTorch's own torchrun, run in this process, that ends as a puffer run does.

Plain torchrun, stopped by a signal, forwards it to its ranks (which save and stop at their epoch
boundary), then exits 1 with its SignalException's traceback, and SIGUSR1 (SLURM's warning) kills
it outright, its ranks in process groups of their own never seeing it. Here: SIGTERM, SIGINT and
SIGHUP end the job with one line and puffer's exit status (130; 129 for SIGHUP), SIGUSR1 is
passed on to the ranks (each saves a checkpoint and goes on), a failed rank is torchrun's own
report and exit 1 without the launcher's traceback, and the ranks get 300 s instead of torchrun's
30 to finish their epoch and save before they are killed (TORCH_ELASTIC_SHUTDOWN_TIMEOUT, if set,
is the user's).
"""

from __future__ import annotations

import logging
import os
import signal
import sys

log = logging.getLogger("puffer.torchrun")

SHUTDOWN_TIMEOUT_S = "300"


def pass_on_to_ranks(signum: int, frame) -> None:
    """SIGUSR1: the ranks' request for a checkpoint; the launcher itself goes on."""
    import psutil

    for child in psutil.Process().children():
        try:
            child.send_signal(signum)
        except psutil.NoSuchProcess:
            continue


def main(argv: list[str] | None = None) -> None:
    from torch.distributed import run
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    from puffer.training.signals import exit_status

    logging.basicConfig(format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s", level=logging.INFO)
    os.environ.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", SHUTDOWN_TIMEOUT_S)
    signal.signal(signal.SIGUSR1, pass_on_to_ranks)
    try:
        run.main(argv)
    except SignalException as stop:
        name = signal.Signals(stop.sigval).name
        log.warning("%s: the ranks were asked to save and stop at their epoch's end (their log above "
                    "names the checkpoint)", name)
        sys.exit(exit_status(KeyboardInterrupt(name)))
    except ChildFailedError:  # torchrun has printed which rank failed, and how
        sys.exit(1)


if __name__ == "__main__":
    main()
