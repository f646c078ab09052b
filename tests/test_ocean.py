"""Native batched envs: gymnasium's exact CartPole dynamics, autoreset protocol, fast learning."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import puffer.vector
from puffer.envs.ocean import CartPole
from puffer.run import run


def test_batched_cartpole_matches_gymnasium_step_for_step():
    n = 32
    env = CartPole(num_rows=n)
    env.reset(0)
    references = [gym.make("CartPole-v1").unwrapped for _ in range(n)]
    for i, ref in enumerate(references):
        ref.reset(seed=i)
    rng = np.random.default_rng(0)
    compared = 0
    for _ in range(400):
        for ref, state in zip(references, env.state, strict=True):  # same states, then one step
            ref.state, ref.steps_beyond_terminated = state.copy(), None
        actions = rng.integers(0, 2, n)
        resetting = env.needs_reset.copy()
        obs, rewards, terminals, truncations, _ = env.step(actions)
        for i, ref in enumerate(references):
            ref_obs, ref_reward, ref_terminated, _, _ = ref.step(int(actions[i]))
            if resetting[i]:
                continue
            np.testing.assert_array_equal(obs[i], ref_obs)
            assert rewards[i] == ref_reward and terminals[i] == ref_terminated
            compared += 1
    assert compared > 10_000


def test_episode_end_then_reset_follows_the_puffer_protocol():
    env = CartPole(num_rows=4, max_steps=10)
    env.reset(0)
    for _ in range(9):
        _, _, term, trunc, infos = env.step(np.zeros(4, int))
        assert not trunc.any()
    # always pushing left ends each episode by termination or at the 10-step limit
    while True:
        obs, rewards, term, trunc, infos = env.step(np.zeros(4, int))
        if (term | trunc).all() or infos:
            break
    done = term | trunc
    assert {info["row"] for info in infos} == set(np.flatnonzero(done).tolist())
    assert all(info["episode_length"] <= 10 and info["episode_return"] == info["episode_length"] for info in infos)
    obs, rewards, term, trunc, _ = env.step(np.ones(4, int))
    assert (rewards[done] == 0).all() and not (term | trunc)[done].any()
    assert (np.abs(obs[done]) <= 0.05).all()


def test_native_env_vectorizes_on_both_backends_identically():
    traces = []
    for backend in ("serial", "multiprocessing"):
        with puffer.vector.make(CartPole, env_kwargs={"num_rows": 16}, num_envs=2, backend=backend) as vec:
            assert vec.num_rows == 32
            obs, _ = vec.reset(5)
            rng = np.random.default_rng(0)
            trace = [obs.copy()]
            for _ in range(100):
                obs, rew, term, trunc, _ = vec.step(rng.integers(0, 2, 32))
                trace.append(np.concatenate([obs.ravel(), rew, term, trunc]))
            traces.append(np.concatenate([t.ravel() for t in trace]))
    np.testing.assert_array_equal(traces[0], traces[1])


@pytest.mark.slow
def test_ocean_cartpole_config_solves_cartpole_fast(make_cfg, tmp_path):
    metrics = run(make_cfg("env=ocean/cartpole"), tmp_path)
    assert metrics["eval/return_mean"] >= 475, metrics


def test_native_multi_agent_env_follows_the_multi_agent_protocol():
    from puffer.envs.ocean import Herd

    env = Herd(num_agents=4, size=8, max_steps=20)
    obs, _ = env.reset(3)
    assert env.masks.all() and obs.shape == (4, 3)
    rng = np.random.default_rng(0)
    seen_partial = False
    for _ in range(200):
        before = env.masks.copy()
        obs, rewards, terminals, truncations, infos = env.step(rng.integers(0, 3, 4))
        absent = ~env.masks
        assert (obs[absent] == 0).all() and (rewards[absent] == 0).all()
        assert not (terminals | truncations)[absent].any()
        finished = terminals | truncations
        assert (env.masks[finished]).all()  # the final observation is still shown, then the row goes
        seen_partial |= bool(before.any() and not before.all())
        if infos:
            (info,) = infos
            assert set(info) >= {"episode_return", "episode_length", "episode_return/agent_0"}
    assert seen_partial  # agents did leave mid-episode


def test_native_multi_agent_env_is_identical_on_both_backends_and_masks_the_loss(make_cfg, tmp_path):
    from puffer.envs.ocean import Herd

    traces = []
    for backend in ("serial", "multiprocessing"):
        with puffer.vector.make(Herd, num_envs=2, backend=backend, seed=1) as vec:
            assert vec.num_rows == 8
            obs, _ = vec.reset()
            rng = np.random.default_rng(0)
            trace = []
            for _ in range(60):
                obs, rew, term, trunc, _ = vec.step(rng.integers(0, 3, 8))
                trace.append(np.concatenate([obs.ravel(), rew, term, trunc]))
            traces.append(np.array(trace))
    np.testing.assert_array_equal(traces[0], traces[1])


@pytest.mark.slow
def test_native_multi_agent_env_trains(make_cfg, tmp_path):
    metrics = run(make_cfg("env=ocean/herd", "train.total_timesteps=60000"), tmp_path)
    assert metrics["eval/return_mean"] >= 0.8  # random play: about -0.2
