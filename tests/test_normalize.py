"""Observation and reward normalization: statistics of the stream, the right rows, saved, frozen."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

import puffer.vector
from puffer.config import ConfigError, TrainConfig
from puffer.emulation import GymnasiumPufferEnv
from puffer.emulation.spaces import ObsLayout
from puffer.evaluation import evaluate
from puffer.files import checkpoint, model_file
from puffer.policies.build import build_policy
from puffer.policies.normalize import EPSILON, NormalizedPolicy, RunningMeanStd
from puffer.run import run
from puffer.training.ppo import PPO, seed_everything
from puffer.training.reward_scaler import RewardScaler

DEFAULT_POLICY = {"_target_": "puffer.policies.networks.Default", "hidden_size": 16, "num_layers": 1}


def test_running_statistics_match_numpy_over_a_stream_of_uneven_batches():
    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, 5.0, size=(n, 3)) for n in (1, 7, 100, 2, 33)]
    rms = RunningMeanStd((3,))
    for batch in batches:
        rms.update(torch.from_numpy(batch))
    rms.update(torch.zeros((0, 3)))  # an empty batch changes nothing
    everything = np.concatenate(batches)
    np.testing.assert_allclose(rms.mean.numpy(), everything.mean(0), rtol=1e-12)
    np.testing.assert_allclose(rms.var.numpy(), everything.var(0), rtol=1e-10)
    assert rms.count.item() == len(everything)


def mixed_space():
    """A Dict with two float leaves and an integer one: emulated as a byte row."""
    return spaces.Dict({"position": spaces.Box(-np.inf, np.inf, (2,), np.float32),
                        "kind": spaces.Discrete(5),
                        "speed": spaces.Box(-np.inf, np.inf, (), np.float64)})


def test_float_leaves_of_a_byte_row_are_standardized_and_integer_leaves_untouched():
    layout = ObsLayout(mixed_space())
    rng = np.random.default_rng(1)
    rows = np.zeros((64, layout.row_nbytes), np.uint8)
    views = dict(zip((leaf.path[0] for leaf in layout.leaves), layout.leaf_views(rows), strict=True))
    views["position"][...] = rng.normal(10.0, 2.0, (64, 2))
    views["kind"][...] = rng.integers(0, 5, 64)
    views["speed"][...] = rng.normal(-4.0, 0.5, 64)
    policy = NormalizedPolicy(torch.nn.Identity(), layout.flat_space, clip=10.0)
    flat = torch.from_numpy(rows)
    assert torch.equal(policy.normalize(flat), flat)  # no statistics yet: unchanged

    policy.update_obs_stats(flat)
    out = dict(zip(views, layout.leaf_views(policy.normalize(flat).numpy()), strict=True))
    position, speed = views["position"].astype(np.float64), views["speed"]
    np.testing.assert_allclose(out["position"], (position - position.mean(0)) / np.sqrt(position.var(0) + EPSILON),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["speed"], (speed - speed.mean()) / np.sqrt(speed.var() + EPSILON), rtol=1e-9)
    np.testing.assert_array_equal(out["kind"], views["kind"])


def test_values_are_clipped_to_obs_clip():
    space = spaces.Box(-np.inf, np.inf, (1,), np.float32)
    policy = NormalizedPolicy(torch.nn.Identity(), space, clip=2.0)
    policy.update_obs_stats(torch.tensor([[-1.0], [1.0]]))
    assert policy.normalize(torch.tensor([[100.0], [-100.0], [0.5]])).flatten().tolist() == [2.0, -2.0, 0.5]


def test_norm_obs_on_pixels_alone_is_a_clear_error():
    pixels = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    with pytest.raises(ConfigError, match="policy.norm_obs=true.*no float Box leaf"):
        NormalizedPolicy(torch.nn.Identity(), pixels)


def test_reward_scaler_divides_by_the_std_of_discounted_returns_of_valid_steps():
    rng = np.random.default_rng(2)
    steps, rows, gamma = 50, 3, 0.9
    rewards = rng.normal(1.0, 3.0, (steps, rows))
    dones = rng.random((steps, rows)) < 0.1
    valid = rng.random((steps, rows)) < 0.8
    scaler = RewardScaler(rows, gamma, clip=100.0)
    returns, seen = np.zeros(rows), []
    for t in range(steps):
        scaled = scaler(slice(0, rows), rewards[t].astype(np.float32), dones[t], valid[t])
        returns = returns * gamma + rewards[t]
        seen.extend(returns[valid[t]])
        returns[dones[t]] = 0.0
        var = np.var(seen) if seen else 1.0  # before any valid step: unit variance
        expected = np.clip(rewards[t] / np.sqrt(var + EPSILON), -100.0, 100.0)
        np.testing.assert_allclose(scaled, expected, rtol=1e-5)
    assert scaler.return_rms.count.item() == valid.sum()


def cartpole():
    return GymnasiumPufferEnv(env=gym.make("CartPole-v1"))


def test_trainer_merges_only_valid_rows_after_each_update_so_rollouts_use_fixed_statistics():
    seed_everything(0)
    vec = puffer.vector.make(cartpole, num_envs=4, seed=0)
    policy = build_policy({**DEFAULT_POLICY, "norm_obs": True}, vec.single_observation_space,
                          vec.single_action_space)
    trainer = PPO(TrainConfig(num_steps=64, total_timesteps=512, norm_reward=True), vec, policy)
    trainer.collect()
    assert policy.obs_rms.count.item() == 0  # frozen while collecting and learning
    trainer.update()
    trainer.update_obs_stats()
    r = trainer.rollout
    valid = r.obs[r.valid].double()
    assert (~r.valid).any()  # dummy steps after episode ends exist and are left out
    assert policy.obs_rms.count.item() == len(valid)
    np.testing.assert_allclose(policy.obs_rms.mean.numpy(), valid.mean(0).numpy(), rtol=1e-9)
    vec.close()


def test_statistics_are_saved_restored_and_frozen_at_evaluation(make_cfg, tmp_path):
    overrides = ["policy.norm_obs=true", "train.norm_reward=true", "train.total_timesteps=2048",
                 "train.num_steps=64", "eval.episodes=2"]
    run(make_cfg(*overrides), tmp_path)
    saved = model_file.read(tmp_path / "model.safetensors")
    assert saved.state_dict["obs_rms.count"].item() > 0
    last = checkpoint.resolve(str(tmp_path))
    state = checkpoint.read(last)
    assert state["rollout"]["reward_scaler"]["return_rms"]["count"].item() > 0
    # the model file alone rebuilds the same normalizing policy
    env = cartpole()
    policy = build_policy(saved.config["policy"], env.single_observation_space, env.single_action_space)
    policy.load_state_dict(saved.state_dict)
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    evaluate(policy, cartpole, episodes=2, seed=0)
    after = policy.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


@pytest.mark.parametrize("vec", ["serial", "multiprocessing"])
def test_normalized_run_resumes_bit_for_bit(make_cfg, tmp_path, vec):
    small = ["policy.norm_obs=true", "train.norm_reward=true", "train.total_timesteps=2048",
             "train.num_steps=64", "eval.episodes=0", f"vec={vec}"]
    run(make_cfg(*small, "runtime.checkpoint_interval=2", "runtime.keep_checkpoints=0"), tmp_path / "full")
    run(make_cfg(*small, f"resume={tmp_path / 'full' / 'checkpoints' / 'epoch_000002.pt'}"),
        tmp_path / "resumed")
    final = "epoch_000004.pt"
    full = checkpoint.read(tmp_path / "full" / "checkpoints" / final)
    resumed = checkpoint.read(tmp_path / "resumed" / "checkpoints" / final)
    for key, value in full["policy"].items():
        assert torch.equal(value, resumed["policy"][key]), key
    assert torch.equal(full["rollout"]["reward_scaler"]["returns"],
                       resumed["rollout"]["reward_scaler"]["returns"])


def test_a_ranks_own_batches_are_recovered_from_merged_statistics_when_ranks_sync():
    """sync_ranks() takes back out of the statistics what this rank merged since the snapshot
    (then sums it with the other ranks'); with one process the statistics come back unchanged."""
    from puffer.policies.normalize import RunningMeanStd

    rng = np.random.default_rng(0)
    rms = RunningMeanStd((3,))
    rms.update(torch.from_numpy(rng.normal(2, 3, (50, 3))))
    since = rms.snapshot()
    for n in (7, 30, 1):
        rms.update(torch.from_numpy(rng.normal(-1, 0.5, (n, 3))))
    expected = rms.snapshot()
    rms.sync_ranks(since)
    for got, want in zip(rms.snapshot(), expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
