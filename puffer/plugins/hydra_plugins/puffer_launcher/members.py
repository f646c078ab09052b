"""hydra/launcher=members: a multirun's jobs that differ only in their seed and the train settings
members may differ in (puffer.training.batched.MEMBER_KEYS) train as one batch in one process
(puffer.batch), or as `processes` batches side by side; jobs that differ in anything else are
separate batches, one after another.

Hydra instantiates launchers from its plugin namespace only (hydra_plugins.*), so the class
lives here; the work is puffer.cli.launcher's. Nothing heavy is imported until a launch: Hydra
imports this module at every start.
"""

from __future__ import annotations

from collections.abc import Sequence

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class MembersLauncher(Launcher):
    def __init__(self, max_members: int = 64, processes: int = 1) -> None:
        self.max_members = max_members
        self.processes = processes
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from puffer.cli.launcher import launch

        return launch(self, job_overrides, initial_job_idx)
