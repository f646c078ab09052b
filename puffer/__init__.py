"""puffer: config-driven, high-throughput reinforcement learning.

Importing `puffer` is cheap (no torch): worker processes import it too.

It bounds how long torch's OpenMP threads spin while they wait (GOMP_SPINCOUNT, read once when
torch loads OpenMP, so import puffer before torch for it to apply): libgomp's default of 300,000
spins holds a core that another process needs, and two runs side by side with two threads each
then take 4-5x as long per Nature CNN step instead of 2x (bench/threads.py). An OMP_WAIT_POLICY
or GOMP_SPINCOUNT of your own is left as it is. How many threads torch uses: puffer.runtime.threads.
"""

import os
import sys

if "OMP_WAIT_POLICY" not in os.environ:
    os.environ.setdefault("GOMP_SPINCOUNT", "3000")
# pygame's SDL (every classic-control render) installs its own SIGINT and SIGTERM handlers where
# a signal still has its default action (a script without handlers of its own, a worker), and the
# process then ignores Ctrl-C and SIGTERM while it renders: leave signals to Python.
os.environ.setdefault("SDL_NO_SIGNAL_HANDLERS", "1")
# Without a display, pygame.init() (every classic-control frame) still tries SDL's Wayland video
# driver, which prints "error: XDG_RUNTIME_DIR is invalid or not set" on every video run and reads
# like a failure: off-screen frames need no video driver. (A display keeps SDL's own choice, for
# eval.watch.)
if sys.platform == "linux" and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")

__version__ = "0.1.0"


def train(*overrides: str, run_dir=None):
    """`python -m puffer <overrides>` from Python; returns the metrics, run directory and agent
    (puffer.run.train). The CLI's checks come first: a mistake is one ConfigError with its fix
    (a typo of a key is never a Hydra traceback, and its `+key` form never a run that ignores it)."""
    from puffer.run import train as _train

    _check_command(overrides)
    return _train(*overrides, run_dir=run_dir)


def _check_command(overrides) -> None:
    """The CLI's checks of a command line, as one ConfigError."""
    from puffer.cli import extras
    from puffer.cli import overrides as command_line
    from puffer.envs.catalog import check_env_choices
    from puffer.errors import ConfigError

    args = list(overrides)  # in the CLI's order: the env's name first (with its nearest names)
    problem = check_env_choices(args) or extras.missing(args) or command_line.check(args)
    if problem is not None:
        raise ConfigError(problem)


def train_batch(*overrides: str, seeds, settings=None, run_dir=None) -> list[dict]:
    """`train` for several seeds as the members of one batch, in this process (puffer.batch):
    member k in <run_dir>/seed_<seeds[k]> as its solo run, the batch's checkpoints in
    <run_dir>/batch; each member's final metrics, in the order of `seeds`. `settings`: lists of
    overrides of the train settings members may differ in (learning_rate, ent_coef, ...), each
    trained with every seed (in <run_dir>/setting_<i>/seed_<s>). The CLI's checks come first,
    as for `train`."""
    from puffer.batch import train_batch as _train_batch

    settings = None if settings is None else [[setting] if isinstance(setting, str) else list(setting)
                                              for setting in settings]
    for command in [list(overrides)] + [[*overrides, *setting] for setting in settings or []]:
        _check_command(command)
    return _train_batch(*overrides, seeds=list(seeds), settings=settings, run_dir=run_dir)


def load(path, device: str = "cpu", trust_code: bool = False):
    """The trained agent at `path` (a run directory, an exported agent folder, model.safetensors,
    a checkpoint or `latest`): `agent.act(obs)` takes the env's own observations and returns its
    actions (puffer.agent). Loading runs no code from the file; `trust_code=True` reads files
    that can (pickles of older runs), for files from someone you trust (puffer.files.trust)."""
    from puffer.agent import load as _load

    return _load(path, device, trust_code)
