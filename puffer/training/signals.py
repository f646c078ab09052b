"""What signals do to a run: stop at an epoch boundary with a checkpoint, stop now, or save and
go on (`Signals`, installed around training by puffer.run), and SIGTERM as Ctrl-C otherwise.

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


def interrupt(signum, frame):
    """SIGTERM outside training (start-up, evaluation): stop as Ctrl-C does."""
    raise KeyboardInterrupt(f"signal {signum}")


class Signals:
    """What signals do while a trainer runs. SIGINT (Ctrl-C) and SIGTERM (SLURM preemption, GNU
    timeout, sent to the whole process group: env workers ignore them and are closed by this
    process): finish the current epoch, save a checkpoint, stop; a second one stops at once
    (puffer.run.train_until_done saves what it can). SIGUSR1 (SLURM's warning before the time
    limit, e.g. submitit's signal_delay_s): save a checkpoint after this epoch and go on."""

    def __init__(self, trainer: Trainer):
        self.trainer = trainer
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> Signals:
        if threading.current_thread() is threading.main_thread():
            for signum, handler in ((signal.SIGINT, self._stop), (signal.SIGTERM, self._stop),
                                    (signal.SIGUSR1, self._save)):
                self.previous[signum] = signal.signal(signum, handler)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self.previous.items():
            # SIGTERM keeps interrupting (a Ray start-up may have put its own handler there)
            signal.signal(signum, interrupt if signum == signal.SIGTERM else handler)

    def _stop(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if self.trainer.stop_requested:
            raise KeyboardInterrupt(name)
        self.trainer.stop_requested = name
        log.warning("%s: stopping after epoch %d with a checkpoint (send it again to stop now)",
                    name, self.trainer.epoch + 1)

    def _save(self, signum, frame) -> None:
        self.trainer.save_requested = True
        log.info("SIGUSR1: a checkpoint will be saved after epoch %d", self.trainer.epoch + 1)
