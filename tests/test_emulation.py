"""Emulation: nested spaces round-trip through flat rows; wrappers follow the puffer protocol."""

from __future__ import annotations

import logging
import pickle

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from puffer.emulation import GymnasiumPufferEnv, SpaceError, nativize
from puffer.emulation.actions import ActionLayout, HybridBox
from puffer.emulation.spaces import FlatBox, ObsLayout, build_nest, iter_leaves
from puffer.policies.networks import Default

DTYPES = [np.float32, np.float64, np.float16, np.uint8, np.int8, np.int32, np.int64, np.uint16]
shapes = st.lists(st.integers(1, 3), min_size=0, max_size=3).map(tuple)


@st.composite
def boxes(draw):
    dtype = draw(st.sampled_from(DTYPES))
    shape = draw(shapes)
    if np.issubdtype(dtype, np.floating):
        return spaces.Box(-10, 10, shape, dtype)
    info = np.iinfo(dtype)
    return spaces.Box(max(info.min, -100), min(info.max, 100), shape, dtype)


leaf_spaces = st.one_of(
    boxes(),
    st.builds(spaces.Discrete, st.integers(1, 9), start=st.integers(-5, 5)),
    st.builds(spaces.MultiDiscrete, st.lists(st.integers(1, 6), min_size=1, max_size=4)),
    st.builds(spaces.MultiBinary, st.integers(1, 5)),
)
nested_spaces = st.recursive(
    leaf_spaces,
    lambda children: st.one_of(
        st.lists(children, min_size=1, max_size=3).map(lambda xs: spaces.Tuple(xs)),
        st.dictionaries(st.sampled_from("abcdef"), children, min_size=1, max_size=3).map(spaces.Dict),
    ),
    max_leaves=8,
)


def leaves_of(space, value):
    return [np.asarray(_get(value, path)) for path, _ in iter_leaves(space)]


def _get(value, path):
    for key in path:
        value = value[key]
    return value


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(space=nested_spaces, seed=st.integers(0, 2**31 - 1), batch=st.integers(1, 4))
def test_flatten_unflatten_round_trips_every_leaf_exactly(space, seed, batch):
    space.seed(seed)
    layout = ObsLayout(space)
    flat = np.zeros((batch, *layout.flat_space.shape), layout.flat_space.dtype)
    values = [space.sample() for _ in range(batch)]
    for row, value in zip(flat, values, strict=True):
        layout.write(layout.leaf_views(row), value)

    for unflat in (layout.unflatten(flat), layout.unflatten(torch.from_numpy(flat))):
        for b, value in enumerate(values):
            got = leaves_of(space, unflat) if not layout.passthrough else [unflat]
            want = leaves_of(space, value) if not layout.passthrough else [value]
            for g, w in zip(got, want, strict=True):
                g = g[b].numpy() if isinstance(g, torch.Tensor) else np.asarray(g[b])
                assert g.shape == w.shape
                assert np.array_equal(g, w.astype(g.dtype))
                assert g.dtype == (np.int8 if w.dtype == np.int8 else w.dtype) or layout.passthrough


@settings(max_examples=100, deadline=None)
@given(space=nested_spaces, seed=st.integers(0, 2**31 - 1))
def test_unflatten_keeps_the_nest_structure(space, seed):
    layout = ObsLayout(space)
    flat = np.zeros((2, *layout.flat_space.shape), layout.flat_space.dtype)
    nest = layout.unflatten(flat)
    if isinstance(space, spaces.Dict):
        assert list(nest) == list(space.spaces)
    elif isinstance(space, spaces.Tuple):
        assert isinstance(nest, tuple) and len(nest) == len(space.spaces)


def test_default_policy_on_nested_obs_compiles_without_graph_breaks():
    space = spaces.Dict({"pos": spaces.Box(-1, 1, (3,), np.float32),
                         "inv": spaces.Tuple((spaces.Discrete(5), spaces.MultiBinary(4))),
                         "frame": spaces.Box(0, 255, (2, 3), np.uint8)})
    layout = ObsLayout(space)
    flat = np.zeros((6, *layout.flat_space.shape), layout.flat_space.dtype)
    space.seed(0)
    for row in flat:
        layout.write(layout.leaf_views(row), space.sample())
    policy = Default(layout.flat_space, spaces.Discrete(3))
    obs = torch.from_numpy(flat)
    compiled = torch.compile(policy, fullgraph=True, backend="eager")  # a graph break raises
    (logits, value), (want_logits, want_value) = compiled(obs), policy(obs)
    assert logits.shape == (6, 3) and value.shape == (6,)
    assert torch.equal(logits, want_logits) and torch.equal(value, want_value)


def test_structured_rows_are_views_not_copies():
    space = spaces.Dict({"pos": spaces.Box(-1, 1, (3,), np.float32), "id": spaces.Discrete(4)})
    layout = ObsLayout(space)
    assert isinstance(layout.flat_space, FlatBox) and layout.flat_space.native is space
    flat = np.zeros((5, *layout.flat_space.shape), layout.flat_space.dtype)
    nest = layout.unflatten(flat)
    nest["pos"][2] = 0.5
    assert np.shares_memory(nest["pos"], flat)
    assert nativize(flat, layout.flat_space)["pos"][2, 0] == 0.5


def test_box_observations_keep_their_shape_and_dtype():
    space = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    assert ObsLayout(space).flat_space is space


@settings(max_examples=100, deadline=None)
@given(space=nested_spaces, seed=st.integers(0, 2**31 - 1))
def test_sampled_flat_actions_decode_into_the_native_space(space, seed):
    layout = ActionLayout(space)
    layout.flat_space.seed(seed)
    flat = layout.flat_space.sample()
    native = layout.decode(flat)
    assert space.contains(native), (space, native)


def test_mixed_discrete_and_continuous_actions_use_a_hybrid_box():
    space = spaces.Dict({"fire": spaces.Discrete(3, start=1), "aim": spaces.Box(-2, 2, (2,), np.float32)})
    layout = ActionLayout(space)
    assert isinstance(layout.flat_space, HybridBox)
    assert layout.flat_space.nvec.tolist() == [3]
    native = layout.decode(np.array([2.0, 0.5, -1.5], np.float32))
    assert native["fire"] == 3 and np.allclose(native["aim"], [0.5, -1.5])
    with pytest.raises(SpaceError, match="outside the action space"):
        layout.decode(np.array([2.5, 0.5, -1.5], np.float32))


def test_observation_mismatch_names_the_key_path_expected_and_got():
    space = spaces.Dict({"inventory": spaces.Tuple((spaces.Discrete(3), spaces.Box(0, 1, (2,), np.float32)))})
    layout = ObsLayout(space)
    bad = {"inventory": (1, np.array([0.5, 7.0], np.float32))}
    with pytest.raises(SpaceError) as info:
        layout.check(bad, "MyEnv-v0")
    message = str(info.value)
    assert "MyEnv-v0" in message and "obs['inventory'][1]" in message
    assert "7.0" in message and "[0.0, 1.0]" in message
    with pytest.raises(SpaceError, match=r"obs\['inventory'\]\[1\]: expected shape \(2,\), got shape \(3,\)"):
        layout.check({"inventory": (1, np.zeros(3, np.float32))}, "MyEnv-v0")


def test_full_range_frames_skip_only_the_bounds_they_cannot_break():
    """A uint8 0..255 frame skips the bounds comparison, but a wider dtype is still bounded,
    a narrower Box of the same dtype still checked, and NaN still caught in an infinite Box."""
    space = spaces.Dict({"frame": spaces.Box(0, 255, (4, 4), np.uint8),
                         "health": spaces.Box(0, 100, (1,), np.uint8),
                         "pos": spaces.Box(-np.inf, np.inf, (2,), np.float32)})
    layout = ObsLayout(space)
    assert layout._full_range == {("frame",), ("pos",)}
    good = {"frame": np.full((4, 4), 255, np.uint8), "health": np.array([7], np.uint8),
            "pos": np.array([1e30, -1e30], np.float32)}
    layout.check(good, "Game-v0")
    with pytest.raises(SpaceError, match=r"obs\['frame'\]: value 300 at index \[0, 0\] is outside"):
        layout.check({**good, "frame": np.full((4, 4), 300, np.uint16)}, "Game-v0")
    with pytest.raises(SpaceError, match=r"obs\['health'\]: value 101"):
        layout.check({**good, "health": np.array([101], np.uint8)}, "Game-v0")
    with pytest.raises(SpaceError, match=r"obs\['pos'\]: got NaN at index \[1\]"):
        layout.check({**good, "pos": np.array([0, np.nan], np.float32)}, "Game-v0")


def test_unsupported_space_is_rejected_at_wrap_time():
    with pytest.raises(SpaceError, match=r"obs\['graph'\] is a Graph; .*Text, Sequence, and Dict/Tuple"):
        ObsLayout(spaces.Dict({"name": spaces.Text(5), "graph": spaces.Graph(spaces.Discrete(3), None)}))
    with pytest.raises(SpaceError, match=r"obs\['items'\] is a Sequence of Dict; puffer reads Sequences of Box"):
        ObsLayout(spaces.Dict({"items": spaces.Sequence(spaces.Dict({"a": spaces.Discrete(2)}))}))


# Text leaves: any character set (non-ASCII too), lengths from min_length to max_length
text_spaces = st.builds(
    lambda length, shortest, chars: spaces.Text(length, min_length=min(shortest, length), charset=chars),
    st.integers(1, 12), st.integers(0, 3), st.text(alphabet="abcxyz XYZ.,:!é€0123", min_size=1, max_size=10))
sequence_spaces = st.builds(spaces.Sequence, leaf_spaces)
observation_spaces = st.recursive(
    st.one_of(leaf_spaces, text_spaces, sequence_spaces),
    lambda children: st.one_of(
        st.lists(children, min_size=1, max_size=3).map(lambda xs: spaces.Tuple(xs)),
        st.dictionaries(st.sampled_from("abcdef"), children, min_size=1, max_size=3).map(spaces.Dict),
    ),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(space=observation_spaces, seed=st.integers(0, 2**31 - 1))
def test_text_and_sequence_leaves_in_any_nest_round_trip_exactly(space, seed):
    space.seed(seed)
    layout = ObsLayout(space, max_sequence_length=6)
    value = truncate_sequences(space, space.sample(), 6)
    layout.check(value, "Env-v0")
    row = np.zeros(layout.flat_space.shape, layout.flat_space.dtype)
    layout.write(layout.leaf_views(row), value)
    back = layout.native(row)
    for path, leaf in native_leaves(space):
        got, want = _get(back, path), _get(value, path)
        if isinstance(leaf, spaces.Text):
            assert got == want and isinstance(got, str)
        elif isinstance(leaf, spaces.Sequence):
            assert isinstance(got, tuple) and len(got) == len(want)
            assert all(np.array_equal(np.asarray(g), np.asarray(w)) for g, w in zip(got, want, strict=True))
        else:
            assert np.array_equal(np.asarray(got), np.asarray(want))
    # and a model reads the codes: one int32 column per character, 0 after the end
    for leaf, codes in zip(layout.leaves, layout.leaf_values(torch.from_numpy(row[None])), strict=True):
        if isinstance(leaf.space, spaces.Text):
            text = _get(value, leaf.path)
            assert codes.dtype == torch.int32 and codes.shape == (1, leaf.space.max_length)
            assert (codes[0, len(text):] == 0).all() and (codes[0, : len(text)] > 0).all()


def native_leaves(space, path=()):
    """(path, space) of the leaves as the env sees them: Text and Sequence whole."""
    if isinstance(space, spaces.Dict):
        for key, sub in space.spaces.items():
            yield from native_leaves(sub, path + (key,))
    elif isinstance(space, spaces.Tuple):
        for index, sub in enumerate(space.spaces):
            yield from native_leaves(sub, path + (index,))
    else:
        yield path, space


def truncate_sequences(space, value, length):
    """A sample with every Sequence cut to `length` elements (gymnasium samples any length)."""
    if isinstance(space, spaces.Dict):
        return {key: truncate_sequences(sub, value[key], length) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(truncate_sequences(sub, v, length) for sub, v in zip(space.spaces, value, strict=True))
    if isinstance(space, spaces.Sequence):
        return tuple(value[:length])
    return value


def test_a_sequence_longer_than_kept_is_named_with_the_key_to_raise():
    layout = ObsLayout(spaces.Dict({"units": spaces.Sequence(spaces.Discrete(3))}), max_sequence_length=2)
    with pytest.raises(SpaceError, match=r"obs\['units'\]: a sequence of 3 elements; 2 are kept "
                                         r"\(set env.max_sequence_length\)"):
        layout.check({"units": (0, 1, 2)}, "Game-v0")
    with pytest.raises(SpaceError, match=r"obs\['units'\]\[1\]: value 7 is outside"):
        layout.check({"units": (0, 7)}, "Game-v0")


def test_a_string_that_does_not_fit_its_text_space_is_named():
    layout = ObsLayout(spaces.Dict({"mission": spaces.Text(6, charset="abc ")}))
    with pytest.raises(SpaceError, match=r"obs\['mission'\]: characters \['z'\] are not in"):
        layout.check({"mission": "abz"}, "Game-v0")
    with pytest.raises(SpaceError, match=r"obs\['mission'\]: a string of 7 characters, expected 1..6"):
        layout.check({"mission": "abcabca"}, "Game-v0")


def test_minigrid_missions_are_kept_as_text_and_read_by_the_default_policy():
    pytest.importorskip("minigrid")
    env = GymnasiumPufferEnv(env=gym.make("MiniGrid-DoorKey-5x5-v0"))
    layout = ObsLayout(env.single_observation_space.native)
    obs, _ = env.reset(seed=0)
    assert layout.native(obs[0])["mission"] == "use the key to open the door and then get to the goal"
    policy = Default(env.single_observation_space, env.single_action_space)
    other = obs.copy()
    layout.write(layout.leaf_views(other[0]), {**layout.native(obs[0]), "mission": "get to the goal"})
    with torch.no_grad():
        features = policy.encoder(torch.from_numpy(np.concatenate([obs, other])))
    assert not torch.equal(features[0], features[1])  # the mission text reaches the features
    env.close()


class BrokenObsEnv(gym.Env):
    """Declares Box(4,) float32 but returns 5 values after a few steps."""

    observation_space = spaces.Box(-1, 1, (4,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(4, np.float32), {}

    def step(self, action):
        self.t += 1
        obs = np.zeros(5 if self.t >= 3 else 4, np.float32)
        return obs, 0.0, False, False, {}


def test_env_returning_the_wrong_shape_raises_a_validation_error():
    env = GymnasiumPufferEnv(env=BrokenObsEnv())
    env.reset(0)
    env.step(np.array([0]))
    env.step(np.array([0]))
    with pytest.raises(SpaceError, match=r"BrokenObsEnv: obs: expected shape \(4,\), got shape \(5,\)"):
        env.step(np.array([0]))


def test_validation_can_be_disabled():
    env = GymnasiumPufferEnv(env=BrokenObsEnv(), validate_steps=0)
    env.reset(0)
    with pytest.raises(ValueError):  # numpy can't broadcast 5 into 4, but no SpaceError check ran
        for _ in range(3):
            env.step(np.array([0]))


def test_out_of_range_action_raises():
    env = GymnasiumPufferEnv(env=gym.make("CartPole-v1"))
    env.reset(0)
    with pytest.raises(SpaceError, match="CartPole-v1: action"):
        env.step(np.array([2]))


def test_autoreset_on_the_next_step_keeps_the_final_observation():
    env = GymnasiumPufferEnv(env=gym.make("CartPole-v1"))
    reference = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=5)
    ref_obs, _ = reference.reset(seed=5)
    assert np.array_equal(obs[0], ref_obs)
    steps = 0
    while True:
        obs, rew, term, trunc, infos = env.step(np.array([1]))
        ref_obs, ref_rew, ref_term, ref_trunc, _ = reference.step(1)
        steps += 1
        assert np.array_equal(obs[0], ref_obs) and rew[0] == ref_rew
        if term[0] or trunc[0]:
            assert ref_term and infos == [{"episode_return": float(steps), "episode_length": steps}]
            break
    obs, rew, term, trunc, infos = env.step(np.array([1]))  # the action is ignored: reset
    assert rew[0] == 0 and not term[0] and not trunc[0] and infos == []
    assert np.abs(obs[0]).max() <= 0.05  # CartPole's reset distribution


def test_an_unpickled_env_writes_into_its_own_buffers():
    env = GymnasiumPufferEnv(env=gym.make("CartPole-v1"))
    env.reset(0)
    env.step(np.array([1]))
    copy = pickle.loads(pickle.dumps(env))
    for action in [0, 1, 1, 0, 0]:
        expected = env.step(np.array([action]))[0].copy()
        obs = copy.step(np.array([action]))[0]
        np.testing.assert_array_equal(obs, expected)
        assert obs is copy.observations  # the buffer itself, not a stale copy of it


def test_step_before_reset_is_an_error():
    env = GymnasiumPufferEnv(env=gym.make("CartPole-v1"))
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(np.array([0]))


def test_structured_observation_env_writes_rows_in_place():
    class DictEnv(gym.Env):
        observation_space = spaces.Dict({"a": spaces.Box(-1, 1, (2,), np.float32), "b": spaces.Discrete(5)})
        action_space = spaces.MultiDiscrete([2, 3])

        def reset(self, seed=None, options=None):
            return {"a": np.array([0.25, -0.5], np.float32), "b": 3}, {}

        def step(self, action):
            assert action.shape == (2,)
            return {"a": np.array([0.75, 0.5], np.float32), "b": int(action[1])}, 1.0, False, False, {}

    env = GymnasiumPufferEnv(env=DictEnv())
    obs, _ = env.reset(0)
    nest = nativize(obs, env.single_observation_space)
    assert nest["b"][0] == 3 and np.allclose(nest["a"][0], [0.25, -0.5])
    env.step(np.array([[1, 2]]))
    assert nativize(env.observations, env.single_observation_space)["b"][0] == 2


def test_nest_builder_follows_space_order():
    space = spaces.Tuple((spaces.Discrete(2), spaces.Dict({"x": spaces.Discrete(3)})))
    assert build_nest(space, iter([1, 2])) == (1, {"x": 2})


def test_a_float_observation_slightly_outside_its_bounds_is_warned_once_not_fatal(caplog):
    """LunarLander-v3's y reaches 2.52 of its declared 2.5 after long training: a warning per key,
    not an error that ends a finished run's evaluation. Far outside, or an integer out of range,
    stays an error."""
    space = spaces.Dict({"pos": spaces.Box(-2.5, 2.5, (2,), np.float32), "cell": spaces.Box(0, 9, (1,), np.int64)})
    layout = ObsLayout(space)
    drifted = {"pos": np.array([0.0, 2.52], np.float32), "cell": np.array([3])}
    with caplog.at_level(logging.WARNING, logger="puffer.emulation.spaces"):
        layout.check(drifted, "LunarLanderLike-v0")
        layout.check(drifted, "LunarLanderLike-v0")
    warnings = [r for r in caplog.records if "outside the bounds" in r.getMessage()]
    assert len(warnings) == 1 and "obs['pos']: value 2.519" in warnings[0].getMessage()
    with pytest.raises(SpaceError, match=r"obs\['pos'\]: value 4.0 at index \[1\] is outside"):  # far off
        layout.check({**drifted, "pos": np.array([0.0, 4.0], np.float32)}, "LunarLanderLike-v0")
    with pytest.raises(SpaceError, match=r"obs\['cell'\]: value 10 at index \[0\] is outside"):
        layout.check({**drifted, "cell": np.array([10])}, "LunarLanderLike-v0")


def test_action_spaces_pickled_under_their_old_module_still_load():
    """model.pt files written before puffer.actions existed name puffer.spaces.HybridBox; the
    package's folders moved it again (puffer.emulation.actions): the rename table follows both."""
    import pickle

    from puffer import renamed

    new = pickle.dumps(HybridBox([3], [-1.0], [1.0]), protocol=0)
    for old_module in (b"puffer.spaces", b"puffer.actions"):
        old = new.replace(b"cpuffer.emulation.actions\n", b"c" + old_module + b"\n")
        assert b"c" + old_module + b"\nHybridBox" in old
        space = renamed.loads(old)
        assert isinstance(space, HybridBox) and space.nvec.tolist() == [3]
