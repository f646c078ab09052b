"""Flat layouts of Gymnasium spaces: one fixed-shape row per agent, and the way back.

What lives here: `ObsLayout` (where each leaf of a nested observation sits in a flat row), the
leaf kinds read at a fixed size (Text, PaddedSequence), value checks that name the key path, and
the numpy/torch unflatten. What does not: action layouts (puffer.emulation.actions), env wrappers
(puffer.emulation), batching (puffer.vector).

Layout rules:
- A Box observation is kept as it is (shape and dtype), so pixels stay (C, H, W) uint8;
  only a 0-d Box becomes a row of one.
- Any other observation becomes a 1-D row. If every leaf has one dtype, the row has that dtype;
  otherwise the row is bytes (uint8) and each leaf sits at an offset aligned to its item size,
  so a batch of rows can be *viewed* (no copy) as each leaf's dtype, in numpy and in torch.
- A Sequence of a leaf space is read at a fixed length (`PaddedSequence`, `max_sequence_length`
  elements, 16 unless the env config says otherwise): two leaves, `items` (the elements, zero
  padded) and `length`; `ObsLayout.native(row)` gives the tuple of elements back exactly.
- A Text leaf is `max_length` int32 character codes: 0 pads, i + 1 is the i-th character of the
  space's sorted character set (`text_codes`, `text_of`); MiniGrid's MissionSpace (a string
  space with no declared length or characters) is read as Text over printable ASCII of at most
  MISSION_LENGTH characters. `ObsLayout.native(row)` gives the strings back exactly.
"""

from __future__ import annotations

import functools
import logging
import string
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

log = logging.getLogger(__name__)
# Float leaves already warned about being outside their bounds (once per env and key path).
_warned_bounds: set[str] = set()

LEAF_TYPES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary, spaces.Text)
# MiniGrid's missions ("use the key to open the door and then get to the goal") fit easily.
MISSION_LENGTH = 128


SEQUENCE_LENGTH = 16  # elements kept from a Sequence observation unless the env config says


class PaddedSequence(spaces.Space):
    """A gymnasium Sequence of a leaf space, read as at most `max_length` elements: in the flat
    row, `items` (max_length elements, zero padded) and `length`."""

    def __init__(self, feature_space: spaces.Space, max_length: int, path: str = "obs"):
        if not isinstance(feature_space, (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)):
            raise SpaceError(f"{path} is a Sequence of {type(feature_space).__name__}; puffer reads Sequences "
                             "of Box, Discrete, MultiDiscrete or MultiBinary elements")
        if max_length < 1:
            raise SpaceError(f"max_sequence_length={max_length}: expected an integer >= 1")
        self.feature_space, self.max_length = feature_space, int(max_length)
        super().__init__(None, None)

    def items_space(self) -> spaces.Space:
        """The elements as one fixed-shape leaf of max_length rows."""
        f, n = self.feature_space, self.max_length
        if isinstance(f, spaces.Box):
            return spaces.Box(np.broadcast_to(f.low, (n, *f.shape)), np.broadcast_to(f.high, (n, *f.shape)),
                              (n, *f.shape), f.dtype)
        if isinstance(f, spaces.Discrete):
            return spaces.MultiDiscrete(np.full(n, f.n), start=np.full(n, f.start))
        if isinstance(f, spaces.MultiDiscrete):
            return spaces.MultiDiscrete(np.tile(f.nvec, (n, 1)), start=np.tile(f.start, (n, 1)))
        return spaces.MultiBinary((n, *np.atleast_1d(f.n)))

    def sample(self, mask=None, probability=None):
        count = int(self.np_random.integers(0, self.max_length + 1))
        return tuple(self.feature_space.sample() for _ in range(count))

    def contains(self, x) -> bool:
        return (isinstance(x, (tuple, list)) and len(x) <= self.max_length
                and all(self.feature_space.contains(np.asarray(e, self.feature_space.dtype)) for e in x))

    def __eq__(self, other) -> bool:
        return (isinstance(other, PaddedSequence) and other.feature_space == self.feature_space
                and other.max_length == self.max_length)

    def __repr__(self) -> str:
        return f"PaddedSequence({self.feature_space}, max_length={self.max_length})"


def padded_sequences(space: spaces.Space, max_length: int, path: tuple = (), root: str = "obs") -> spaces.Space:
    """`space` with every Sequence inside it read as a PaddedSequence of `max_length` elements."""
    if isinstance(space, spaces.Sequence):
        return PaddedSequence(space.feature_space, max_length, format_path(root, path))
    if isinstance(space, spaces.Dict):
        return spaces.Dict({k: padded_sequences(s, max_length, path + (k,), root) for k, s in space.spaces.items()})
    if isinstance(space, spaces.Tuple):
        return spaces.Tuple([padded_sequences(s, max_length, path + (i,), root) for i, s in enumerate(space.spaces)])
    return space


def _has_sequence(space: spaces.Space) -> bool:
    if isinstance(space, spaces.Sequence):
        return True
    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        subs = space.spaces.values() if isinstance(space, spaces.Dict) else space.spaces
        return any(_has_sequence(s) for s in subs)
    return False


# How MissionSpace is read (one object: value checks ask for it at every validated step).
MISSION_TEXT = spaces.Text(MISSION_LENGTH, min_length=0, charset=string.printable)


def text_space(space: spaces.Space) -> spaces.Text | None:
    """The Text a string-valued space is read as: itself, or for MiniGrid's MissionSpace (no
    length or characters declared) printable ASCII up to MISSION_LENGTH; None for other spaces."""
    if isinstance(space, spaces.Text):
        return space
    if type(space).__name__ == "MissionSpace":
        return MISSION_TEXT
    return None


def _charset(space: spaces.Text) -> tuple[str, dict[str, int]]:
    """The sorted characters of a Text space, and each one's code (its index + 1; 0 pads)."""
    return _charset_codes(frozenset(space.character_set))


@functools.lru_cache(maxsize=64)
def _charset_codes(character_set: frozenset) -> tuple[str, dict[str, int]]:
    characters = "".join(sorted(character_set))
    return characters, {c: i + 1 for i, c in enumerate(characters)}


def text_codes(space: spaces.Text, text: str) -> np.ndarray:
    """A string as `space.max_length` int32 codes, 0-padded."""
    _, index = _charset(space)
    codes = np.zeros(space.max_length, np.int32)
    codes[: len(text)] = [index[c] for c in text]
    return codes


def text_of(space: spaces.Text, codes) -> str:
    """The string behind a row of codes (numpy or torch), up to the first 0."""
    characters, _ = _charset(space)
    return "".join(characters[int(c) - 1] for c in np.asarray(codes).ravel() if c > 0)


class SpaceError(ValueError):
    """A space puffer cannot emulate, or a value that does not match its declared space."""


def format_path(root: str, path: tuple) -> str:
    return root + "".join(f"[{key!r}]" for key in path)


@dataclass(frozen=True)
class Leaf:
    path: tuple
    space: spaces.Space
    shape: tuple[int, ...]
    dtype: np.dtype
    offset: int  # in bytes, from the start of the row

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize


def iter_leaves(space: spaces.Space, path: tuple = (), root: str = "space"):
    """Yield (path, leaf_space) depth first, in the space's own order; reject unsupported spaces."""
    if isinstance(space, spaces.Dict):
        for key, sub in space.spaces.items():
            yield from iter_leaves(sub, path + (key,), root)
    elif isinstance(space, spaces.Tuple):
        for index, sub in enumerate(space.spaces):
            yield from iter_leaves(sub, path + (index,), root)
    elif isinstance(space, LEAF_TYPES):
        yield path, space
    elif isinstance(space, PaddedSequence):
        yield path + ("items",), space.items_space()
        yield path + ("length",), spaces.Discrete(space.max_length + 1)
    elif text_space(space) is not None:
        yield path, text_space(space)
    else:
        raise SpaceError(
            f"{format_path(root, path)} is a {type(space).__name__}; puffer emulates Box, "
            "Discrete, MultiDiscrete, MultiBinary, Text, Sequence, and Dict/Tuple nests of them"
        )


def _leaf_dtype(space: spaces.Space) -> np.dtype:
    if isinstance(space, spaces.MultiBinary):
        return np.dtype(np.int8)
    if isinstance(space, spaces.Text):
        return np.dtype(np.int32)
    return np.dtype(space.dtype)


def _leaf_shape(space: spaces.Space) -> tuple[int, ...]:
    if isinstance(space, spaces.Discrete):
        return ()
    if isinstance(space, spaces.Text):
        return (int(space.max_length),)
    return tuple(int(d) for d in space.shape)


class FlatBox(spaces.Box):
    """The flat observation space of a structured space; `native` is the space to unflatten into."""

    def __init__(self, native: spaces.Space, low, high, shape, dtype, seed=None):
        super().__init__(low, high, shape, dtype, seed=seed)
        self.native = native

    def __repr__(self) -> str:
        return f"FlatBox({self.shape}, {self.dtype}, native={self.native})"


class ObsLayout:
    """Where each leaf of an observation space lives in one flat row."""

    def __init__(self, space: spaces.Space, name: str = "obs", max_sequence_length: int = SEQUENCE_LENGTH):
        if _has_sequence(space):  # read at a fixed length; the flat space's `native` keeps that
            space = padded_sequences(space, max_sequence_length, root=name)
        self.space = space
        self.name = name
        self.passthrough = isinstance(space, spaces.Box) and len(space.shape) > 0
        raw = list(iter_leaves(space, root=name))
        dtypes = {_leaf_dtype(s) for _, s in raw}
        self.homogeneous = len(dtypes) == 1
        offset, leaves = 0, []
        for path, sub in raw:
            dtype = _leaf_dtype(sub)
            offset = -(-offset // dtype.itemsize) * dtype.itemsize  # align to the item size
            leaf = Leaf(path, sub, _leaf_shape(sub), dtype, offset)
            leaves.append(leaf)
            offset += leaf.nbytes
        self.leaves: list[Leaf] = leaves
        self._texts = frozenset(leaf.path for leaf in leaves if isinstance(leaf.space, spaces.Text))
        # the two leaves of each PaddedSequence, by path: "items" or "length"
        self._sequence_parts = {leaf.path: leaf.path[-1] for leaf in leaves
                                if leaf.path and leaf.path[-1] in ("items", "length")
                                and isinstance(get_space(space, leaf.path[:-1]), PaddedSequence)}
        # plain ints and names, so torch.compile traces the torch unflatten without numpy calls
        self._byte_slices = [(leaf.offset, leaf.offset + leaf.nbytes, leaf.dtype.name, leaf.shape)
                             for leaf in leaves]
        # Box leaves whose bounds are their dtype's whole range (a uint8 0..255 frame): a value of
        # that dtype cannot be out of them, and comparing a 100 KB frame twice costs ~10% of a
        # Breakout step while validation runs.
        self._full_range = frozenset(leaf.path for leaf in leaves if _bounds_span_dtype(leaf.space))
        max_item = max(leaf.dtype.itemsize for leaf in leaves)
        self.row_nbytes = -(-offset // max_item) * max_item
        if self.passthrough:
            self.flat_space = space
        elif self.homogeneous:
            dtype = leaves[0].dtype
            low, high = zip(*(_leaf_bounds(leaf) for leaf in leaves), strict=True)
            self.flat_space = FlatBox(
                space, np.concatenate(low).astype(dtype), np.concatenate(high).astype(dtype),
                (self.row_nbytes // dtype.itemsize,), dtype,
            )
        else:
            self.flat_space = FlatBox(space, 0, 255, (self.row_nbytes,), np.uint8)

    # -- numpy -------------------------------------------------------------------------------
    def leaf_views(self, row: np.ndarray) -> list[np.ndarray]:
        """Views into one flat row (or a batch of rows), one per leaf, shaped like the leaf."""
        if self.passthrough:
            return [row]
        batch = row.shape[:-1]
        raw = row.view(np.uint8)
        return [
            raw[..., leaf.offset : leaf.offset + leaf.nbytes].view(leaf.dtype).reshape(batch + leaf.shape)
            for leaf in self.leaves
        ]

    def write(self, views: list[np.ndarray], value: Any) -> None:
        """Write a native observation into the row behind `views` (from `leaf_views`)."""
        if self.passthrough:
            views[0][...] = value
            return
        for leaf, view in zip(self.leaves, views, strict=True):
            part = self._sequence_parts.get(leaf.path)
            if part is not None:  # the elements of a sequence (one observation), or their count
                elements = get_path(value, leaf.path[:-1])
                if part == "length":
                    view[...] = len(elements)
                else:
                    view[...] = 0
                    if len(elements):
                        view[: len(elements)] = np.asarray(elements).reshape((len(elements), *view.shape[1:]))
            elif leaf.path in self._texts:  # a string, or a batch of them
                text = get_path(value, leaf.path)
                view[...] = (text_codes(leaf.space, text) if isinstance(text, str)
                             else np.stack([text_codes(leaf.space, t) for t in text]))
            else:
                view[...] = get_path(value, leaf.path)

    def writer(self):
        """`write`, specialised: a Box is one assignment into its single view."""
        if self.passthrough:
            return _write_single
        return self.write

    def check(self, value: Any, env_name: str) -> None:
        """Raise SpaceError naming the key path when `value` does not fit the declared space, and
        how to train anyway when the env's declared space is what is wrong."""
        try:
            check_value(self.space, value, f"{env_name}: {self.name}", full_range=self._full_range)
        except SpaceError as exc:
            raise SpaceError(f"{exc}. If the env declares its space wrongly (some declare bounds "
                             "their values leave), env.validate_steps=0 trains anyway: nothing then "
                             "checks its observations, and values outside the declared bounds reach "
                             "the policy as they are") from None

    def unflatten(self, flat):
        """Batch of flat rows (numpy array or torch tensor) -> native nest of arrays/tensors.

        Leaves are views of `flat` where the memory allows it (always for contiguous input).
        """
        if self.passthrough:
            return flat
        return build_nest(self.space, iter(self.leaf_values(flat)))

    def native(self, row: np.ndarray):
        """One flat row -> the observation as the env returned it: the nest, Text leaves as
        strings (numpy; a model reads `unflatten`'s codes instead)."""
        if self.passthrough:
            return row
        values = [text_of(leaf.space, view) if leaf.path in self._texts else view
                  for leaf, view in zip(self.leaves, self.leaf_views(np.ascontiguousarray(row)), strict=True)]
        return build_nest(self.space, iter(values), native=True)

    def leaf_values(self, flat) -> list:
        """Batch of flat rows (numpy or torch) -> one array/tensor per leaf, in leaf order."""
        if self.passthrough:
            return [flat]
        if not _is_torch(flat):
            return self.leaf_views(np.ascontiguousarray(flat))
        import torch

        batch = tuple(flat.shape[:-1])
        raw = flat.contiguous().view(torch.uint8)
        return [raw[..., start:stop].view(getattr(torch, dtype)).reshape(batch + shape)
                for start, stop, dtype, shape in self._byte_slices]


def _write_single(views: list[np.ndarray], value: Any) -> None:
    views[0][...] = value


def _leaf_bounds(leaf: Leaf) -> tuple[np.ndarray, np.ndarray]:
    space = leaf.space
    if isinstance(space, spaces.Box):
        return space.low.ravel(), space.high.ravel()
    if isinstance(space, spaces.Discrete):
        return np.array([space.start]), np.array([space.start + space.n - 1])
    if isinstance(space, spaces.MultiDiscrete):
        return space.start.ravel(), (space.start + space.nvec - 1).ravel()
    if isinstance(space, spaces.Text):
        return np.zeros(leaf.size), np.full(leaf.size, len(space.character_set))
    return np.zeros(leaf.size), np.ones(leaf.size)


def get_path(value: Any, path: tuple) -> Any:
    for key in path:
        value = value[key]
    return value


def build_nest(space: spaces.Space, leaves, native: bool = False):
    """Rebuild the Dict/Tuple structure of `space` from an iterator of leaf values. A
    PaddedSequence is {"items", "length"} (what a model reads), or with `native` the tuple of
    its elements (one observation)."""
    if isinstance(space, spaces.Dict):
        return {key: build_nest(sub, leaves, native) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(build_nest(sub, leaves, native) for sub in space.spaces)
    if isinstance(space, PaddedSequence):
        items, length = next(leaves), next(leaves)
        return tuple(items[: int(length)]) if native else {"items": items, "length": length}
    return next(leaves)


def get_space(space: spaces.Space, path: tuple) -> spaces.Space:
    for key in path:
        if not isinstance(space, (spaces.Dict, spaces.Tuple)):
            return None
        space = space[key]
    return space


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch")


def _bounds_span_dtype(space: spaces.Space) -> bool:
    """Whether a Box's bounds are the whole range of its dtype (infinite, for floats)."""
    if not isinstance(space, spaces.Box):
        return False
    kind = space.dtype.kind
    if kind == "b":
        return True
    if kind in "iu":
        info = np.iinfo(space.dtype)
        return bool((space.low == info.min).all() and (space.high == info.max).all())
    return bool(np.isneginf(space.low).all() and np.isposinf(space.high).all())


# How far past its bounds a float observation may drift with a warning: this share of the range.
BOUNDS_TOLERANCE = 0.1


def _slightly_outside(array: np.ndarray, space: spaces.Box) -> bool:
    """Every value within BOUNDS_TOLERANCE of the range width (of the bound, where the range is
    infinite) beyond its bounds."""
    low, high = space.low.astype(np.float64), space.high.astype(np.float64)
    width = high - low
    scale = np.where(np.isfinite(width), width, np.maximum(np.abs(np.where(np.isfinite(low), low, high)), 1.0))
    excess = np.maximum(low - array, array - high)
    return bool((excess <= BOUNDS_TOLERANCE * scale).all())


def check_value(space: spaces.Space, value: Any, where: str, path: tuple = (),
                full_range: frozenset = frozenset()) -> None:
    """Check `value` against `space` recursively; the error names the path, expected and got.
    Box leaves at the paths in `full_range` span their dtype: a value of that dtype skips the
    bounds comparison (NaN is still checked)."""
    here = format_path(where, path)
    if isinstance(space, spaces.Dict):
        if not isinstance(value, dict) or set(value) != set(space.spaces):
            got = sorted(value) if isinstance(value, dict) else type(value).__name__
            raise SpaceError(f"{here}: expected a dict with keys {sorted(space.spaces)}, got {got}")
        for key, sub in space.spaces.items():
            check_value(sub, value[key], where, path + (key,), full_range)
        return
    if isinstance(space, spaces.Tuple):
        if not isinstance(value, (tuple, list)) or len(value) != len(space.spaces):
            got = f"length {len(value)}" if isinstance(value, (tuple, list)) else type(value).__name__
            raise SpaceError(f"{here}: expected a tuple of length {len(space.spaces)}, got {got}")
        for index, sub in enumerate(space.spaces):
            check_value(sub, value[index], where, path + (index,), full_range)
        return
    text = text_space(space)
    if text is not None:
        _check_text(text, value, here)
        return
    if isinstance(space, PaddedSequence):
        if not isinstance(value, (tuple, list, np.ndarray)):
            raise SpaceError(f"{here}: expected a sequence for {space}, got {type(value).__name__}")
        if len(value) > space.max_length:
            raise SpaceError(f"{here}: a sequence of {len(value)} elements; {space.max_length} are kept "
                             "(set env.max_sequence_length)")
        for index, element in enumerate(value):
            check_value(space.feature_space, element, where, path + (index,), full_range)
        return
    array = np.asarray(value)
    shape = _leaf_shape(space)
    if array.shape != shape:
        raise SpaceError(f"{here}: expected shape {shape}, got shape {array.shape}")
    if isinstance(space, spaces.Box):
        if not np.can_cast(array.dtype, space.dtype, "same_kind"):
            raise SpaceError(f"{here}: expected dtype {space.dtype}, got dtype {array.dtype}")
        if array.dtype.kind == "f" and np.isnan(array).any():
            raise SpaceError(f"{here}: got NaN at index {np.argwhere(np.isnan(array))[0].tolist()}")
        if path in full_range and array.dtype == space.dtype:
            return
        outside = (array < space.low) | (array > space.high)
        if outside.any():
            index = tuple(np.argwhere(outside)[0].tolist())
            message = (f"{here}: value {array[index].item()} at index {list(index)} is outside the "
                       f"bounds [{space.low[index].item()}, {space.high[index].item()}]")
            # Continuous observations drift a little past loosely declared bounds (LunarLander-v3's
            # y reaches 2.52 of 2.5): gymnasium's checker only warns, and so do we, once per key.
            # Integers out of range (they overflow or index past an end) and floats far outside
            # (a wrong scale or a bug) stay errors.
            if array.dtype.kind != "f" or not _slightly_outside(array, space):
                raise SpaceError(message)
            if here not in _warned_bounds:
                _warned_bounds.add(here)
                log.warning("%s (warned once for this key; shape, dtype and NaN stay errors)", message)
        return
    if array.dtype.kind not in "iub":
        raise SpaceError(f"{here}: expected integers for {space}, got dtype {array.dtype}")
    low, high = _leaf_bounds(Leaf(path, space, shape, _leaf_dtype(space), 0))
    flat = array.ravel()
    outside = (flat < low) | (flat > high)
    if outside.any():
        index = int(np.argmax(outside))
        raise SpaceError(
            f"{here}: value {flat[index].item()} is outside {space} (allowed {low[index]}..{high[index]})"
        )


def _check_text(space: spaces.Text, value: Any, here: str) -> None:
    if not isinstance(value, str):
        raise SpaceError(f"{here}: expected a string for {space}, got {type(value).__name__}")
    if not space.min_length <= len(value) <= space.max_length:
        raise SpaceError(f"{here}: a string of {len(value)} characters, expected {space.min_length}.."
                         f"{space.max_length}" + (f" (MissionSpace is read as at most {MISSION_LENGTH})"
                                                  if space.max_length == MISSION_LENGTH else ""))
    _, index = _charset(space)
    unknown = sorted({c for c in value if c not in index})
    if unknown:
        raise SpaceError(f"{here}: characters {unknown} are not in the space's character set")
