"""What signals do to a run: stop at an epoch boundary with a checkpoint, stop now, or save and
go on (`Signals`, installed around training by puffer.run); outside training (start-up,
evaluation: `install_outside_training`) SIGTERM and SIGHUP stop as Ctrl-C does and SIGUSR1 is
noted, never a death; `exit_status` of a stop: 129 for SIGHUP, 130 otherwise.

What does not live here: saving (puffer.training.trainer), what a stop at once saves
(puffer.run.train_until_done).
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from puffer.training.trainer import Trainer

log = logging.getLogger(__name__)


# The signals that stop a run: Ctrl-C, SIGTERM (SLURM preemption, GNU timeout) and SIGHUP (a
# closed terminal, a dropped ssh session), each the first time at an epoch boundary.
STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def interrupt(signum, frame):
    """SIGTERM or SIGHUP outside training (start-up, evaluation): stop as Ctrl-C does."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


def noted(signum, frame):
    """SIGUSR1 outside training: a request for a checkpoint when there is none to save (start-up,
    evaluation, after the final save). Its default action would end the process."""
    log.info("SIGUSR1 outside training: nothing to save now (the run's checkpoints and model file "
             "are written as usual)")


# What signals do in the main thread of a run outside `Signals` (Ctrl-C keeps Python's own).
OUTSIDE_TRAINING = {signal.SIGTERM: interrupt, signal.SIGHUP: interrupt, signal.SIGUSR1: noted}


def install_outside_training() -> None:
    if threading.current_thread() is threading.main_thread():
        for signum, handler in OUTSIDE_TRAINING.items():
            signal.signal(signum, handler)


def exit_status(stop: BaseException) -> int:
    """The exit status of a run stopped by `stop` (a KeyboardInterrupt whose text is the
    signal's name): 129 for SIGHUP, as a shell reports a hang-up, and 130 for the rest."""
    return 128 + signal.SIGHUP if str(stop) == signal.SIGHUP.name else 130


class Signals:
    """What signals do while a trainer runs. SIGINT (Ctrl-C) and SIGTERM (SLURM preemption, GNU
    timeout, sent to the whole process group: env workers ignore them and are closed by this
    process) and SIGHUP (a closed terminal, torchrun's end): finish the current epoch, save a
    checkpoint, stop; a second SIGINT or SIGTERM stops at once
    (puffer.run.train_until_done saves what it can). SIGUSR1 (SLURM's warning before the time
    limit, e.g. submitit's signal_delay_s): save a checkpoint after this epoch and go on."""

    def __init__(self, trainer: Trainer):
        self.trainer = trainer
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> Signals:
        if threading.current_thread() is threading.main_thread():
            for signum, handler in (*((s, self._stop) for s in STOPPING), (signal.SIGUSR1, self._save)):
                self.previous[signum] = signal.signal(signum, handler)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self.previous.items():
            # SIGTERM and SIGHUP keep interrupting and SIGUSR1 keeps being noted (a Ray start-up
            # may have put its own handlers there)
            signal.signal(signum, OUTSIDE_TRAINING.get(signum, handler))

    def _stop(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if self.trainer.stop_requested:
            if signum == signal.SIGHUP:  # a hang-up is never an insistence: torchrun's end, for
                return  # one, reaches its ranks once per thread of it (puffer.runtime.distributed)
            raise KeyboardInterrupt(name)
        self.trainer.stop_requested = name
        log.warning("%s: stopping after epoch %d with a checkpoint (send it again to stop now)",
                    name, self.trainer.epoch + 1)

    def _save(self, signum, frame) -> None:
        self.trainer.save_requested = True
        log.info("SIGUSR1: a checkpoint will be saved after epoch %d", self.trainer.epoch + 1)
