"""The features behind an extra, checked from the command line before anything starts: a missing
package is one line naming the `pip install 'puffer[...]'` that brings it, not a traceback from
deep inside an env or a Hydra plugin lookup.

What lives here: which command-line choice needs which extra and module. What does not: the env
families' extras table (puffer.envs.catalog.EXTRAS, which `--info envs` shows too).
"""

from __future__ import annotations

from puffer.envs.catalog import EXTRAS, importable

# group choice (key=value on the command line) -> (extra, a module it provides)
CHOICES = {
    "logger=tensorboard": ("tensorboard", "tensorboard"),
    "vec=ray": ("ray", "ray"),
    "hydra/launcher=joblib": ("sweeps", "hydra_plugins.hydra_joblib_launcher"),
    "hydra/launcher=submitit_slurm": ("sweeps", "hydra_plugins.hydra_submitit_launcher"),
    "hydra/launcher=submitit_local": ("sweeps", "hydra_plugins.hydra_submitit_launcher"),
    "hydra/launcher=ray": ("sweeps", "hydra_plugins.hydra_ray_launcher"),
}
OPTUNA = ("sweeps", "hydra_plugins.hydra_optuna_sweeper")


def needs(arg: str) -> list[tuple[str, str]]:
    """The (extra, module) pairs the command-line argument `arg` needs."""
    key, _, value = arg.lstrip("+").partition("=")
    if key == "env":
        families = {name.split("/")[0] for name in value.split(",")}
        return [EXTRAS[family] for family in sorted(families) if family in EXTRAS]
    if key == "sweep":
        from puffer.config import sweeps_dir

        files = [sweeps_dir() + f"/sweep/{name}.yaml" for name in value.split(",")]
        return [OPTUNA] if any("optuna" in _read(path) for path in files) else []
    return [CHOICES[arg]] if arg in CHOICES else []


def _read(path: str) -> str:
    try:
        with open(path) as file:
            return file.read()
    except OSError:  # no such sweep: Hydra names it
        return ""


def missing(args: list[str]) -> str | None:
    """The error line for the first choice among `args` whose extra is not installed."""
    for arg in args:
        for extra, module in needs(arg):
            if not importable(module):
                return (f"{arg.lstrip('+')} needs the {extra} extra ({module} is not installed): "
                        f"pip install 'puffer[{extra}]'")
    return None
