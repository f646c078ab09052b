"""Env creators that configs point at (`_target_`): each returns a puffer env.

What lives here: building envs from registries by name (gymnasium ids, PettingZoo modules).
What does not: wrapping (puffer.emulation), batching (puffer.vector). Native batched envs live in
`puffer.envs.ocean`.
"""

from __future__ import annotations

import ctypes.util
import importlib
import inspect
import os
import sys
from typing import Any

import gymnasium

from puffer.emulation import GymnasiumPufferEnv, PettingZooPufferEnv, TurnBasedPufferEnv
from puffer.emulation.spaces import SEQUENCE_LENGTH
from puffer.emulation.wrappers import RawReturn
from puffer.errors import ConfigError


def headless_mujoco_gl() -> str | None:
    """The OpenGL that MuJoCo can render with on a machine without a display: EGL, else OSMesa,
    else None. MuJoCo reads MUJOCO_GL when it is first imported and otherwise fails at the first
    render ("an OpenGL platform library has not been loaded")."""
    if sys.platform != "linux" or os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"):
        return None
    for name, library in (("egl", "EGL"), ("osmesa", "OSMesa")):
        if ctypes.util.find_library(library):
            return name
    return None


if "MUJOCO_GL" not in os.environ and (headless := headless_mujoco_gl()) is not None:
    os.environ["MUJOCO_GL"] = headless


def describe(env_cfg) -> str:
    """A short name for an env config node (dict or DictConfig): the gymnasium id, the Atari
    game, the PettingZoo module, or ocean/<name> for native envs."""
    target = str(env_cfg.get("_target_", ""))
    if target.startswith("puffer.envs.ocean."):
        return "ocean/" + target.rsplit(".", 1)[-1].lower()
    if target and not target.startswith("puffer.envs."):  # the user's own maker: its id means nothing
        return target
    name = str(env_cfg.get("id") or env_cfg.get("game") or env_cfg.get("module") or target)
    kwargs = env_cfg.get("kwargs") or {}
    if kwargs:  # e.g. LunarLander-v3(continuous=True): another task under the same id
        name += "(" + ",".join(f"{key}={value}" for key, value in sorted(kwargs.items())) + ")"
    return name


def make_gymnasium(id: str, kwargs: dict[str, Any] | None = None, validate_steps: int = 1000,
                   render_mode: str | None = None, wrappers: list | None = None,
                   max_sequence_length: int = SEQUENCE_LENGTH) -> GymnasiumPufferEnv:
    try:
        env = gymnasium.make(id, render_mode=render_mode, **(kwargs or {}))
    except (gymnasium.error.NameNotFound, gymnasium.error.NamespaceNotFound) as exc:
        hint = ("; an env that a package registers when imported is named with the package first, "
                "env.id=<package>:<id> (e.g. minigrid:MiniGrid-Empty-5x5-v0)") if ":" not in id else ""
        raise ConfigError(f"env.id={id!r}: gymnasium cannot make it ({exc}){hint}") from exc
    except gymnasium.error.Error as exc:
        raise ConfigError(f"env.id={id!r}: gymnasium cannot make it ({exc})") from exc
    except ModuleNotFoundError as exc:  # the module of a `module:Env-v0` id
        if ":" in id:
            raise ConfigError(f"env.id={id!r}: cannot import {id.split(':', 1)[0]!r}, the module before the "
                              "colon that registers the env; install the package that provides it") from exc
        raise ConfigError(f"env.id={id!r}: making it failed, a module it needs is missing ({exc})") from exc
    except Exception as exc:  # the env's own constructor failed: its error, named once
        raise ConfigError(f"env.id={id!r}: making it failed ({type(exc).__name__}: {exc}); "
                          "HYDRA_FULL_ERROR=1 shows where") from exc
    if wrappers:  # episode returns in the env's units, below what the wrappers do to rewards
        env = RawReturn(env)
    for index, wrapper in enumerate(wrappers or []):
        env = wrap(env, wrapper, f"env.wrappers[{index}]")
    return GymnasiumPufferEnv(env=env, validate_steps=validate_steps, max_sequence_length=max_sequence_length)


def wrap(env, wrapper, key: str):
    """`wrapper` around `env`: a dotted class path, or {_target_: path, **its kwargs}, e.g.
    env.wrappers=[minigrid.wrappers.ImgObsWrapper] or
    '+env.wrappers=[{_target_: gymnasium.wrappers.TimeLimit, max_episode_steps: 200}]'."""
    from hydra.utils import get_class

    spec = dict(wrapper) if isinstance(wrapper, dict) else {"_target_": wrapper}
    target = spec.pop("_target_", None)
    if not isinstance(target, str):
        raise ConfigError(f"{key}={wrapper!r}: expected a dotted class path or a mapping with _target_")
    try:
        cls = get_class(target)
    except Exception as exc:  # hydra wraps import errors of every kind
        raise ConfigError(f"{key}={target!r}: cannot import it ({exc})") from None
    # YAML has no tuples, and gymnasium's wrappers check for them (ResizeObservation's shape)
    arguments = {name: tuple(value) if isinstance(value, list) else value for name, value in spec.items()}
    try:
        inspect.signature(cls).bind(env, **arguments)
    except TypeError as exc:  # a missing or unknown argument: the config's mistake, named
        raise ConfigError(f"{key}={wrapper!r}: {target} takes other arguments ({exc}); give them as "
                          f"{{_target_: {target}, <argument>: <value>}}") from None
    except ValueError:  # no signature to check (a builtin): the call says
        pass
    return cls(env, **arguments)


def pettingzoo_install(module: str) -> str:
    """What installs a PettingZoo module's family: puffer's extra for the butterfly family and
    the multi-particle envs, PettingZoo's own extra for the others (sisl, classic, ...)."""
    parts = module.split(".")
    if parts[0] == "mpe2" or parts[1:2] == ["butterfly"]:
        return "pip install 'puffer[pettingzoo]'"
    if parts[0] == "pettingzoo" and len(parts) > 1:
        return f"pip install 'pettingzoo[{parts[1]}]'"
    return f"install the package that provides {parts[0]}"


def make_pettingzoo(module: str, kwargs: dict[str, Any] | None = None,
                    validate_steps: int = 1000, render_mode: str | None = None,
                    max_sequence_length: int = SEQUENCE_LENGTH) -> PettingZooPufferEnv | TurnBasedPufferEnv:
    try:
        env_module = importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(f"env.module={module!r}: cannot import it ({exc}); {pettingzoo_install(module)}") from exc
    extra = {"render_mode": render_mode} if render_mode is not None else {}
    if hasattr(env_module, "parallel_env"):
        return PettingZooPufferEnv(env=env_module.parallel_env(**(kwargs or {}), **extra),
                                   validate_steps=validate_steps, max_sequence_length=max_sequence_length)
    if hasattr(env_module, "env"):  # turn-based (AEC) only: the classic board and card games
        return TurnBasedPufferEnv(env=env_module.env(**(kwargs or {}), **extra), validate_steps=validate_steps,
                                  max_sequence_length=max_sequence_length)
    raise ConfigError(f"env.module={module!r}: expected a PettingZoo env module with parallel_env() or env()")
