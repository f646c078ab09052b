"""Emulation: any Gymnasium or PettingZoo env as flat, fixed-shape rows.

- wrappers: the env protocol (`PufferEnv`, `Buffers`) and `GymnasiumPufferEnv`,
  `PettingZooPufferEnv`, `TurnBasedPufferEnv`.
- spaces: observation layouts (flatten a structured observation into a row and back).
- actions: action layouts (a flat action row into the env's native action).
- padding: agents whose spaces differ, padded to one row shape.
"""

from puffer.emulation.wrappers import (
    Buffers,
    GymnasiumPufferEnv,
    PettingZooPufferEnv,
    PufferEnv,
    SpaceError,
    TurnBasedPufferEnv,
    nativize,
)

__all__ = ["Buffers", "PufferEnv", "GymnasiumPufferEnv", "PettingZooPufferEnv", "TurnBasedPufferEnv",
           "SpaceError", "nativize"]
