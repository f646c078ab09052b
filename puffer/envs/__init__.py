"""Env creators that configs point at (`_target_`): each returns a puffer env.

What lives here: building envs from registries by name (gymnasium ids, PettingZoo modules).
What does not: wrapping (puffer.emulation), batching (puffer.vector). Native batched envs live in
`puffer.envs.ocean`.
"""

from __future__ import annotations

import importlib
from typing import Any

import gymnasium

from puffer.config import ConfigError
from puffer.emulation import GymnasiumPufferEnv, PettingZooPufferEnv


def describe(env_cfg) -> str:
    """A short name for an env config node (dict or DictConfig): the gymnasium id, the Atari
    game, the PettingZoo module, or ocean/<name> for native envs."""
    target = str(env_cfg.get("_target_", ""))
    if target.startswith("puffer.envs.ocean."):
        return "ocean/" + target.rsplit(".", 1)[-1].lower()
    name = str(env_cfg.get("id") or env_cfg.get("game") or env_cfg.get("module") or target)
    kwargs = env_cfg.get("kwargs") or {}
    if kwargs:  # e.g. LunarLander-v3(continuous=True): another task under the same id
        name += "(" + ",".join(f"{key}={value}" for key, value in sorted(kwargs.items())) + ")"
    return name


def make_gymnasium(id: str, kwargs: dict[str, Any] | None = None, validate_steps: int = 1000,
                   render_mode: str | None = None) -> GymnasiumPufferEnv:
    try:
        env = gymnasium.make(id, render_mode=render_mode, **(kwargs or {}))
    except gymnasium.error.Error as exc:
        raise ConfigError(f"env.id={id!r}: gymnasium cannot make it ({exc})") from exc
    return GymnasiumPufferEnv(env=env, validate_steps=validate_steps)


def make_pettingzoo(module: str, kwargs: dict[str, Any] | None = None,
                    validate_steps: int = 1000, render_mode: str | None = None) -> PettingZooPufferEnv:
    try:
        env_module = importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(
            f"env.module={module!r}: cannot import it ({exc}); PettingZoo families need their "
            "extra, e.g. pip install 'pettingzoo[butterfly]'"
        ) from exc
    if not hasattr(env_module, "parallel_env"):
        raise ConfigError(f"env.module={module!r}: expected a PettingZoo env module with parallel_env()")
    extra = {"render_mode": render_mode} if render_mode is not None else {}
    return PettingZooPufferEnv(env=env_module.parallel_env(**(kwargs or {}), **extra),
                               validate_steps=validate_steps)
