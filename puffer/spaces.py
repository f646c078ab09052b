"""Flat layouts of Gymnasium spaces: one fixed-shape row per agent, and the way back.

What lives here: `ObsLayout` (where each leaf of a nested observation sits in a flat row),
`ActionLayout` (how a nested action maps to one flat vector), `HybridBox` (a flat action vector
mixing categorical and continuous parts), value checks that name the key path, and the
numpy/torch unflatten. What does not: env wrappers (puffer.emulation), batching (puffer.vector).

Layout rules:
- A Box observation is kept as it is (shape and dtype), so pixels stay (C, H, W) uint8;
  only a 0-d Box becomes a row of one.
- Any other observation becomes a 1-D row. If every leaf has one dtype, the row has that dtype;
  otherwise the row is bytes (uint8) and each leaf sits at an offset aligned to its item size,
  so a batch of rows can be *viewed* (no copy) as each leaf's dtype, in numpy and in torch.
- A Text leaf is `max_length` int32 character codes: 0 pads, i + 1 is the i-th character of the
  space's sorted character set (`text_codes`, `text_of`); MiniGrid's MissionSpace (a string
  space with no declared length or characters) is read as Text over printable ASCII of at most
  MISSION_LENGTH characters. `ObsLayout.native(row)` gives the strings back exactly.
"""

from __future__ import annotations

import functools
import logging
import string
from copy import deepcopy
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import batch_space

log = logging.getLogger(__name__)
# Float leaves already warned about being outside their bounds (once per env and key path).
_warned_bounds: set[str] = set()

LEAF_TYPES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary, spaces.Text)
# MiniGrid's missions ("use the key to open the door and then get to the goal") fit easily.
MISSION_LENGTH = 128


def text_space(space: spaces.Space) -> spaces.Text | None:
    """The Text a string-valued space is read as: itself, or for MiniGrid's MissionSpace (no
    length or characters declared) printable ASCII up to MISSION_LENGTH; None for other spaces."""
    if isinstance(space, spaces.Text):
        return space
    if type(space).__name__ == "MissionSpace":
        return spaces.Text(MISSION_LENGTH, min_length=0, charset=string.printable)
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
    elif text_space(space) is not None:
        yield path, text_space(space)
    else:
        raise SpaceError(
            f"{format_path(root, path)} is a {type(space).__name__}; puffer emulates Box, "
            "Discrete, MultiDiscrete, MultiBinary, Text, and Dict/Tuple nests of them"
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

    def __init__(self, space: spaces.Space, name: str = "obs"):
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
            if leaf.path in self._texts:  # a string, or a batch of them
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
        """Raise SpaceError naming the key path when `value` does not fit the declared space."""
        check_value(self.space, value, f"{env_name}: {self.name}", full_range=self._full_range)

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
        return build_nest(self.space, iter(values))

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


def build_nest(space: spaces.Space, leaves):
    """Rebuild the Dict/Tuple structure of `space` from an iterator of leaf values."""
    if isinstance(space, spaces.Dict):
        return {key: build_nest(sub, leaves) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(build_nest(sub, leaves) for sub in space.spaces)
    return next(leaves)


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


class HybridBox(spaces.Box):
    """A flat float32 action vector: `len(nvec)` categorical indices, then continuous values.

    The categorical entries hold integers 0..n-1; `sample()` and `contains()` respect that.
    """

    def __init__(self, nvec, low, high, seed=None):
        self.nvec = np.asarray(nvec, dtype=np.int64)
        k = len(self.nvec)
        full_low = np.concatenate([np.zeros(k), np.asarray(low, np.float64)]).astype(np.float32)
        full_high = np.concatenate([self.nvec - 1, np.asarray(high, np.float64)]).astype(np.float32)
        super().__init__(full_low, full_high, (len(full_low),), np.float32, seed=seed)

    @property
    def num_discrete(self) -> int:
        return len(self.nvec)

    def sample(self, mask=None, probability=None):
        value = super().sample()
        k = self.num_discrete
        value[:k] = self.np_random.integers(0, self.nvec).astype(np.float32)
        return value

    def contains(self, x) -> bool:
        x = np.asarray(x)
        k = self.num_discrete
        return bool(super().contains(x) and np.all(x[:k] == np.round(x[:k])))

    def __repr__(self) -> str:
        return f"HybridBox(nvec={self.nvec.tolist()}, continuous={self.shape[0] - self.num_discrete})"

    def __eq__(self, other) -> bool:
        return isinstance(other, HybridBox) and np.array_equal(self.nvec, other.nvec) and super().__eq__(other)


class BatchedHybridBox(spaces.Box):
    """`n` rows of a HybridBox (a vector env's action_space): sample() and contains() keep each
    row's categorical entries whole numbers in range, as HybridBox does for one."""

    def __init__(self, single: HybridBox, n: int, seed=None):
        self.nvec = single.nvec
        super().__init__(np.tile(single.low, (n, 1)), np.tile(single.high, (n, 1)), (n, single.shape[0]),
                         np.float32, seed=seed)

    def sample(self, mask=None, probability=None):
        value = super().sample()
        k = len(self.nvec)
        value[:, :k] = self.np_random.integers(0, self.nvec, size=(value.shape[0], k)).astype(np.float32)
        return value

    def contains(self, x) -> bool:
        x = np.asarray(x)
        k = len(self.nvec)
        return bool(super().contains(x) and np.all(x[:, :k] == np.round(x[:, :k])))


def _batch_hybrid(space: HybridBox, n: int = 1) -> BatchedHybridBox:
    return BatchedHybridBox(space, n, seed=deepcopy(space.np_random))


# gymnasium's batch_space would make a plain Box of a HybridBox, whose samples have fractional
# categorical entries: a vector env's action_space.sample() must give valid actions.
batch_space.register(HybridBox)(_batch_hybrid)


class ActionLayout:
    """How a native action space maps to the flat action the policy samples.

    Discrete -> Discrete(n); MultiDiscrete -> MultiDiscrete; Box -> flat float32 Box;
    nests with only categorical leaves -> MultiDiscrete, only continuous -> Box, both -> HybridBox.
    """

    def __init__(self, space: spaces.Space, name: str = "action"):
        self.space = space
        self.name = name
        self.leaves = [(path, sub) for path, sub in iter_leaves(space, root=name)]
        discrete = [(p, s) for p, s in self.leaves if not isinstance(s, spaces.Box)]
        continuous = [(p, s) for p, s in self.leaves if isinstance(s, spaces.Box)]
        self.segments = []  # (path, leaf space, start, stop) in the flat vector
        cursor = 0
        for path, sub in discrete + continuous:
            width = 1 if isinstance(sub, spaces.Discrete) else int(np.prod(sub.shape))
            self.segments.append((path, sub, cursor, cursor + width))
            cursor += width
        nvec = np.concatenate([_categorical_sizes(s) for _, s in discrete]) if discrete else None
        if continuous:
            low = np.concatenate([s.low.ravel() for _, s in continuous]).astype(np.float32)
            high = np.concatenate([s.high.ravel() for _, s in continuous]).astype(np.float32)
        self._discrete_start = int(space.start) if isinstance(space, spaces.Discrete) else None
        if isinstance(space, spaces.Discrete):
            self.flat_space = spaces.Discrete(space.n)
        elif not continuous:
            self.flat_space = spaces.MultiDiscrete(nvec)
        elif not discrete:
            self.flat_space = spaces.Box(low, high, (len(low),), np.float32)
        else:
            self.flat_space = HybridBox(nvec, low, high)

    def decode(self, flat: np.ndarray, env_name: str = "env", check: bool = True):
        """Flat action (as sampled by the policy) -> the native action the env expects."""
        if check:
            self.check_flat(flat, env_name)
        if self._discrete_start is not None:
            return int(np.asarray(flat).flat[0]) + self._discrete_start
        flat = np.asarray(flat).reshape(-1)
        decoded = {path: _decode_leaf(sub, flat[start:stop]) for path, sub, start, stop in self.segments}
        return build_nest(self.space, iter(decoded[path] for path, _ in self.leaves))

    def fast_decoder(self):
        """A decode without checks for the steps after validation; Discrete avoids array work."""
        if self._discrete_start is None:
            return _UncheckedDecoder(self)
        return _DiscreteDecoder(self._discrete_start)

    def check_flat(self, flat, env_name: str) -> None:
        if not self.flat_space.contains(np.asarray(flat).astype(self.flat_space.dtype).reshape(self.flat_space.shape)):
            raise SpaceError(
                f"{env_name}: {self.name} {np.asarray(flat).tolist()!r} is outside the action space "
                f"{self.flat_space}"
            )


class _DiscreteDecoder:
    def __init__(self, start: int):
        self.start = start

    def __call__(self, flat) -> int:
        return int(flat.item() if isinstance(flat, np.ndarray) else flat) + self.start


class _UncheckedDecoder:
    def __init__(self, layout: ActionLayout):
        self.layout = layout

    def __call__(self, flat):
        return self.layout.decode(np.asarray(flat).reshape(self.layout.flat_space.shape), check=False)


def _categorical_sizes(space: spaces.Space) -> np.ndarray:
    if isinstance(space, spaces.Discrete):
        return np.array([space.n], dtype=np.int64)
    if isinstance(space, spaces.MultiBinary):
        return np.full(int(np.prod(space.shape)), 2, dtype=np.int64)
    return space.nvec.ravel().astype(np.int64)


def _decode_leaf(space: spaces.Space, segment: np.ndarray):
    if isinstance(space, spaces.Discrete):
        return np.int64(int(segment[0]) + int(space.start))
    if isinstance(space, spaces.MultiBinary):
        return segment.astype(np.int8).reshape(space.shape)
    if isinstance(space, spaces.MultiDiscrete):
        return (segment.astype(space.dtype).reshape(space.shape) + space.start).astype(space.dtype)
    return segment.astype(space.dtype).reshape(space.shape)
