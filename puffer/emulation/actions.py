"""Flat layouts of action spaces: one flat vector per agent, and the native action back.

What lives here: `ActionLayout` (how a nested action maps to one flat vector and back),
`HybridBox` (a flat action vector mixing categorical and continuous parts) and its batched form.
What does not: observation layouts and value checks (puffer.emulation.spaces), sampling from a policy
(puffer.policies.distributions.ActionDist).
"""

from __future__ import annotations

from copy import deepcopy

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import batch_space

from puffer.emulation.spaces import SpaceError, build_nest, iter_leaves


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
