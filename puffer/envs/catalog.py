"""Every shipped env config, what it runs and which extra it needs: `python -m puffer --info envs`;
and the nearest names when `env=` names none of them.

What lives here: reading the env config files (puffer/conf/env) without composing a run. What
does not: making envs (puffer.envs, puffer.build).
"""

from __future__ import annotations

import difflib
import importlib.util
from dataclasses import dataclass
from pathlib import Path

import yaml

from puffer.config import CONF_DIR

# The extra (pip install 'puffer[<extra>]') each family needs, and a module it provides.
EXTRAS = {"atari": ("atari", "ale_py"), "box2d": ("box2d", "Box2D"), "mujoco": ("mujoco", "mujoco"),
          "minigrid": ("minigrid", "minigrid"), "pettingzoo": ("pettingzoo", "pettingzoo")}


@dataclass(frozen=True)
class EnvConfig:
    name: str  # what env= takes, e.g. classic/cartpole
    runs: str  # the gymnasium id, Atari game or PettingZoo module
    extra: str | None
    installed: bool
    install: str = "-"  # the command that installs what it needs


def importable(module: str) -> bool:
    """Whether `module` imports (not only whether it is found: a package whose own dependency is
    missing is as missing)."""
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def env_names(conf_dir: Path = CONF_DIR) -> list[str]:
    """The env= choices: every file under conf/env but the bases the others build on."""
    root = conf_dir / "env"
    return sorted(p.relative_to(root).with_suffix("").as_posix() for p in root.rglob("*.yaml")
                  if p.stem != "default")


def _runs(path: Path) -> str:
    """The env a config file runs, from its own keys or the base it builds on."""
    node = yaml.safe_load(path.read_text()) or {}
    env = node.get("env") if isinstance(node.get("env"), dict) else {}
    for key in ("id", "game", "module"):
        if env.get(key) == "???":
            return f"any: env.{key}=<name>"
        if env.get(key) is not None:
            return str(env[key])
    defaults = " ".join(str(d) for d in node.get("defaults", []))
    if "env_gymnasium" in defaults:
        return "any: env.id=<gymnasium id>"
    if "env_ocean_" in defaults:
        return f"native ({path.stem})"
    base = path.parent / "default.yaml"
    return _runs(base) if base.exists() and base != path else "-"


def requirement(name: str, conf_dir: Path = CONF_DIR, runs: str | None = None) -> tuple[str, str, str] | None:
    """(what it is, a module, the command that installs it) an env config needs beyond the core,
    or None: its family's extra, or for a PettingZoo config its own module (a family such as
    sisl brings dependencies of its own). `runs`: the config's `_runs`, when the caller has it."""
    from puffer.envs import pettingzoo_install

    family = name.split("/")[0]
    if family not in EXTRAS:
        return None
    extra, module = EXTRAS[family]
    if runs is None:
        path = conf_dir / "env" / f"{name}.yaml"
        runs = _runs(path) if path.exists() else ""
    if family == "pettingzoo" and not runs.startswith("any") and "." in runs:
        install = pettingzoo_install(runs)
        what = "the pettingzoo extra" if "puffer[" in install else f"PettingZoo's {runs.split('.')[1]} family"
        return what, runs, install
    return f"the {extra} extra", module, f"pip install 'puffer[{extra}]'"


def catalog(conf_dir: Path = CONF_DIR) -> list[EnvConfig]:
    rows = []
    for name in env_names(conf_dir):
        extra = EXTRAS.get(name.split("/")[0], (None, None))[0]
        runs = _runs(conf_dir / "env" / f"{name}.yaml")
        needed = requirement(name, conf_dir, runs)
        installed = needed is None or (importlib.util.find_spec(needed[1].split(".")[0]) is not None
                                       and ("." not in needed[1] or importable(needed[1])))
        rows.append(EnvConfig(name, runs, extra, installed, needed[2] if needed else "-"))
    return rows


def table(rows: list[EnvConfig]) -> str:
    width = max(len(row.runs) for row in rows)
    lines = [f"{'env=':<28} {'runs':<{width}}  {'installed':<9}  needs"]
    for row in rows:
        lines.append(f"{row.name:<28} {row.runs:<{width}}  {'yes' if row.installed else 'no':<9}  {row.install}")
    return "\n".join(lines)


def unknown_env_message(name: str, conf_dir: Path = CONF_DIR) -> str | None:
    """None when `name` is an env config; else an error naming the nearest ones."""
    names = env_names(conf_dir)
    if name in names:
        return None
    near = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(near)}? " if near else ""
    return (f"env={name}: no such env config; {hint}`python -m puffer --info envs` lists them all "
            "(any gymnasium id: env=classic/gym env.id=<id>)")


def check_env_choices(args: list[str]) -> str | None:
    """The error for the first `env=` among command-line overrides (each value of a multirun
    list too) that names no env config; Hydra's own message lists search paths instead."""
    for arg in args:
        if arg.startswith("env="):
            for name in arg[len("env="):].split(","):
                message = unknown_env_message(name.strip())
                if message is not None:
                    return message
    return None
