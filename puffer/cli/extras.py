"""The features behind an extra, checked from the command line before anything starts: a missing
package is one line naming the `pip install 'puffer[...]'` that brings it, not a traceback from
deep inside an env or a Hydra plugin lookup.

What lives here: which command-line choice needs which extra and module. What does not: what an
env config needs (puffer.envs.catalog.requirement, which `--info envs` shows too).
"""

from __future__ import annotations

from puffer.envs.catalog import importable, requirement

# a choice (key=value on the command line) -> (extra, a module it provides), each needed
CHOICES = {
    "logger=tensorboard": [("tensorboard", "tensorboard")],
    "vec=ray": [("ray", "ray")],
    "hydra/launcher=joblib": [("sweeps", "hydra_plugins.hydra_joblib_launcher")],
    "hydra/launcher=submitit_slurm": [("sweeps", "hydra_plugins.hydra_submitit_launcher")],
    "hydra/launcher=submitit_local": [("sweeps", "hydra_plugins.hydra_submitit_launcher")],
    "hydra/launcher=ray": [("sweeps", "hydra_plugins.hydra_ray_launcher")],
    # MP4 files through imageio's PyAV plugin; pygame draws every classic-control frame
    "eval.video=true": [("video", "imageio"), ("video", "av"), ("video", "pygame")],
}
OPTUNA = ("sweeps", "hydra_plugins.hydra_optuna_sweeper")


def needs(arg: str) -> list[tuple[str, str, str]]:
    """(what it is, a module, the install command) for each thing the command-line argument
    `arg` needs beyond the core."""
    key, _, value = arg.lstrip("+").partition("=")
    if key == "env":
        found = [requirement(name.strip()) for name in value.split(",")]
        return [needed for needed in dict.fromkeys(found) if needed is not None]
    extras = []
    if key == "sweep":
        from puffer.config.schema import sweeps_dir

        files = [sweeps_dir() + f"/sweep/{name}.yaml" for name in value.split(",")]
        extras = [OPTUNA] if any("optuna" in _read(path) for path in files) else []
    elif arg in CHOICES:
        extras = CHOICES[arg]
    elif key == "hydra/launcher":  # puffer's own launcher configs (local_parallel, slurm, ...)
        extras = CHOICES.get(f"hydra/launcher={launcher_base(value)}", [])
    return [(f"the {extra} extra", module, f"pip install 'puffer[{extra}]'") for extra, module in extras]


def launcher_base(name: str) -> str | None:
    """The Hydra plugin launcher that puffer's conf/hydra/launcher/<name>.yaml builds on (the
    first entry of its defaults list: local_parallel -> joblib, slurm -> submitit_slurm)."""
    import yaml

    from puffer.config import CONF_DIR

    path = CONF_DIR / "hydra" / "launcher" / f"{name}.yaml"
    defaults = (yaml.safe_load(_read(str(path))) or {}).get("defaults") or []
    return next((entry for entry in defaults if isinstance(entry, str) and entry != "_self_"), None)


def _read(path: str) -> str:
    try:
        with open(path) as file:
            return file.read()
    except OSError:  # no such sweep: Hydra names it
        return ""


def missing(args: list[str]) -> str | None:
    """The error line for the first choice among `args` whose extra is not installed."""
    for arg in args:
        for what, module, install in needs(arg):
            if not importable(module):
                return f"{arg.lstrip('+')} needs {what} ({module} is not installed): {install}"
    return None
