"""Gymnasium spaces as JSON and back, so that a model file describes its spaces as data.

What lives here: `to_json(space) -> dict` and `from_json(dict) -> space` for the spaces a puffer
policy can meet: Box, Discrete, MultiDiscrete, MultiBinary, Text, Dict, Tuple, and puffer's own
FlatBox (a flat row with the native space it unflattens into), PaddedSequence and HybridBox.
MiniGrid's MissionSpace is written as the Text it is read as (puffer.emulation.spaces.text_space). What does
not: writing the file (puffer.files.model_file). A space of another kind is a ValueError that names it:
a model file never falls back to pickling.

Bounds round-trip exactly: each value is written as the float64 (or int) its dtype casts from,
and a bound that is one value everywhere is written once.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from puffer.emulation.actions import HybridBox
from puffer.emulation.spaces import FlatBox, PaddedSequence, text_space


def to_json(space: spaces.Space) -> dict[str, Any]:
    if isinstance(space, HybridBox):
        k = space.num_discrete
        return {"type": "HybridBox", "nvec": space.nvec.tolist(), "continuous": space.shape[0] - k,
                "low": _array(space.low[k:]),
                "high": _array(space.high[k:])}
    if isinstance(space, FlatBox):
        return {**_box(space), "type": "FlatBox", "native": to_json(space.native)}
    if isinstance(space, spaces.Box):
        return _box(space)
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": space.nvec.tolist(), "start": space.start.tolist(),
                "dtype": str(space.dtype)}
    if isinstance(space, spaces.MultiBinary):
        return {"type": "MultiBinary", "n": np.asarray(space.n).tolist()}
    if isinstance(space, spaces.Dict):
        return {"type": "Dict", "spaces": [[key, to_json(sub)] for key, sub in space.spaces.items()]}
    if isinstance(space, spaces.Tuple):
        return {"type": "Tuple", "spaces": [to_json(sub) for sub in space.spaces]}
    if isinstance(space, PaddedSequence):
        return {"type": "PaddedSequence", "feature_space": to_json(space.feature_space),
                "max_length": space.max_length}
    text = text_space(space)
    if text is not None:
        return {"type": "Text", "max_length": int(text.max_length), "min_length": int(text.min_length),
                "charset": "".join(sorted(text.character_set))}
    raise ValueError(f"cannot describe a {type(space).__name__} space as data; puffer's model files "
                     "hold Box, Discrete, MultiDiscrete, MultiBinary, Text, Dict and Tuple spaces")


def from_json(data: dict[str, Any]) -> spaces.Space:
    kind = data.get("type")
    if kind in ("Box", "FlatBox"):
        dtype = np.dtype(data["dtype"])
        shape = tuple(data["shape"])
        low, high = _unarray(data["low"], shape, dtype), _unarray(data["high"], shape, dtype)
        if kind == "FlatBox":
            return FlatBox(from_json(data["native"]), low, high, shape, dtype)
        return spaces.Box(low, high, shape, dtype)
    if kind == "HybridBox":
        shape = (data["continuous"],)
        return HybridBox(data["nvec"], _unarray(data["low"], shape), _unarray(data["high"], shape))
    if kind == "Discrete":
        return spaces.Discrete(data["n"], start=data["start"])
    if kind == "MultiDiscrete":
        return spaces.MultiDiscrete(np.asarray(data["nvec"]), dtype=data["dtype"], start=np.asarray(data["start"]))
    if kind == "MultiBinary":
        return spaces.MultiBinary(data["n"])
    if kind == "Dict":
        return spaces.Dict({key: from_json(sub) for key, sub in data["spaces"]})
    if kind == "Tuple":
        return spaces.Tuple([from_json(sub) for sub in data["spaces"]])
    if kind == "PaddedSequence":
        return PaddedSequence(from_json(data["feature_space"]), data["max_length"])
    if kind == "Text":
        return spaces.Text(data["max_length"], min_length=data["min_length"], charset=data["charset"])
    raise ValueError(f"unknown space type {kind!r} in a model file")


def _box(space: spaces.Box) -> dict[str, Any]:
    return {"type": "Box", "shape": list(space.shape), "dtype": str(space.dtype),
            "low": _array(space.low), "high": _array(space.high)}


def _array(values: np.ndarray) -> Any:
    """One number when every entry is equal (pixels: 0 and 255), else the nested list; floats
    as float64 (exact for float32 and float16), infinities as the strings JSON lacks."""
    values = np.asarray(values)
    kind = float if values.dtype.kind == "f" else int
    if values.size and np.all(values == values.flat[0]):
        return _number(kind(values.flat[0]))
    return {"values": [_number(kind(v)) for v in values.ravel()]}


def _number(value):
    return value if np.isfinite(value) else ("inf" if value > 0 else "-inf")


def _unarray(data: Any, shape: tuple, dtype=np.float64) -> np.ndarray:
    values = data["values"] if isinstance(data, dict) else data
    array = np.asarray([_unnumber(v) for v in values] if isinstance(values, list) else _unnumber(values), dtype)
    return np.broadcast_to(array, shape).copy() if array.ndim == 0 else array.reshape(shape)


def _unnumber(value):
    return float(value) if isinstance(value, str) else value
