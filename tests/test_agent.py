"""puffer.load / puffer.train: a trained agent that takes the env's own observations and actions."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import puffer
import puffer.vector
from puffer.agent import Agent
from puffer.config import TrainConfig
from puffer.emulation import GymnasiumPufferEnv
from puffer.evaluation import EVAL_SEED_OFFSET
from puffer.policies.build import build_policy
from puffer.training.ppo import PPO, seed_everything


def play(agent, env, seed: int) -> float:
    obs, _ = env.reset(seed=seed)
    total, done = 0.0, False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(agent.act(obs))
        total += float(reward)
        done = terminated or truncated
    return total


def test_loaded_agent_reaches_the_runs_own_evaluation_return(tmp_path):
    result = puffer.train("train.total_timesteps=8192", "eval.episodes=4", run_dir=tmp_path)
    assert result.run_dir == tmp_path and (tmp_path / "model.safetensors").is_file()
    # a run directory, its model.safetensors and the last checkpoint (spaces rebuilt from the config) all load
    for path in (tmp_path, tmp_path / "model.safetensors", sorted((tmp_path / "checkpoints").glob("*.pt"))[-1]):
        agent = puffer.load(path)
        env = gym.make("CartPole-v1")
        # evaluation: 4 eval envs, env i seeded seed + EVAL_SEED_OFFSET + i, one episode each
        returns = [play(agent, env, EVAL_SEED_OFFSET + i) for i in range(4)]
        assert np.mean(returns) == result.metrics["eval/return_mean"], path


class DictWorld(gym.Env):
    """Dict observations (a float vector, a Discrete and a MultiBinary) and Dict actions mixing a
    Discrete and a Box: the reward is for copying `kind` into `choice`."""

    observation_space = spaces.Dict({"position": spaces.Box(-1, 1, (3,), np.float32),
                                     "kind": spaces.Discrete(3), "flags": spaces.MultiBinary(2)})
    action_space = spaces.Dict({"choice": spaces.Discrete(3), "push": spaces.Box(-1, 1, (2,), np.float32)})

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def _obs(self):
        self.kind = int(self.np_random.integers(3))
        return {"position": self.np_random.uniform(-1, 1, 3).astype(np.float32), "kind": self.kind,
                "flags": self.np_random.integers(0, 2, 2).astype(np.int8)}

    def step(self, action):
        assert self.action_space.contains(action), action
        reward = float(action["choice"] == self.kind)
        self.t += 1
        return self._obs(), reward, False, self.t >= 20, {}


def dict_world():
    return GymnasiumPufferEnv(env=DictWorld())


@pytest.mark.parametrize("rnn", [None, "lstm"])
def test_agent_acts_on_native_dict_observations_single_or_batched_and_round_trips(rnn, tmp_path):
    seed_everything(0)
    vec = puffer.vector.make(dict_world, num_envs=4, seed=0)
    policy_cfg = {"_target_": "puffer.policies.networks.Default", "hidden_size": 32, "norm_obs": True, "rnn": rnn}
    policy = build_policy(policy_cfg, vec.single_observation_space, vec.single_action_space)
    PPO(TrainConfig(num_steps=32, total_timesteps=256), vec, policy).train()
    agent = Agent.from_env(policy, vec.driver_env, config={"policy": policy_cfg})
    vec.close()

    env = DictWorld()
    obs, _ = env.reset(seed=3)
    action = agent.act(obs)
    assert env.action_space.contains(action)
    batch = {key: np.stack([obs[key], obs[key]]) for key in ("position", "flags")}
    batch["kind"] = np.array([obs["kind"], obs["kind"]])
    agent.reset()
    actions = agent.act(batch)
    assert len(actions) == 2 and all(env.action_space.contains(a) for a in actions)

    loaded = puffer.load(agent.save(tmp_path / "model.safetensors"))
    assert loaded.policy.obs_rms.count.item() > 0  # normalization statistics travel with it
    agent.reset()
    for _ in range(3):  # same actions step after step (the LSTM state advances alike)
        ours, theirs = agent.act(obs), loaded.act(obs)
        assert ours["choice"] == theirs["choice"]
        np.testing.assert_array_equal(ours["push"], theirs["push"])
    if rnn:  # episode_start zeroes the state: the first action of a fresh agent again
        loaded.reset()
        first = loaded.act(obs)["push"]
        loaded.act(obs)
        np.testing.assert_array_equal(loaded.act(obs, episode_start=[True])["push"], first)


def test_a_wrong_observation_shape_is_a_clear_error():
    env = GymnasiumPufferEnv(env=gym.make("CartPole-v1"))
    policy = build_policy({"_target_": "puffer.policies.networks.Default"}, env.single_observation_space,
                          env.single_action_space)
    agent = Agent.from_env(policy, env)
    with pytest.raises(ValueError, match=r"observation of shape \(3,\): expected \(4,\)"):
        agent.act(np.zeros(3, np.float32))


def test_the_python_api_prints_progress_and_where_the_outputs_went(tmp_path):
    import subprocess
    import sys

    code = ("import puffer; puffer.train('train.total_timesteps=512', 'eval.episodes=1', "
            f"run_dir={str(tmp_path / 'run')!r})")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "SPS" in result.stderr and f"outputs in {tmp_path / 'run'}: model.safetensors" in result.stderr


def test_an_agent_trained_with_the_mission_text_acts_on_native_minigrid_observations(tmp_path):
    pytest.importorskip("minigrid")
    result = puffer.train("env=classic/gym", "env.id=minigrid:MiniGrid-Empty-5x5-v0", "vec.num_envs=2",
                          "train.num_steps=32", "train.total_timesteps=128", "eval.episodes=1",
                          run_dir=tmp_path)
    env = gym.make("minigrid:MiniGrid-Empty-5x5-v0")
    obs, _ = env.reset(seed=0)
    assert isinstance(obs["mission"], str)  # the Dict holds the image, the direction and the text
    assert env.action_space.contains(result.agent.act(obs))
    batch = {"image": np.stack([obs["image"]] * 2), "direction": np.array([obs["direction"]] * 2),
             "mission": [obs["mission"], "get to the green goal square"]}
    assert len(result.agent.act(batch)) == 2
    env.close()


def test_an_agent_of_agents_with_different_spaces_takes_and_returns_them_per_agent(make_cfg, tmp_path):
    """MPE simple_adversary: the adversary sees 8 numbers, the good agents 10; the env's own dict
    of observations in, a dict of each agent's own action out (from the model file and from a
    checkpoint alike)."""
    pytest.importorskip("mpe2")
    import importlib

    from puffer.run import run

    run(make_cfg("env=pettingzoo/simple_adversary", "vec.num_envs=2", "train.total_timesteps=400",
                 "train.num_steps=25", "eval.episodes=0"), tmp_path)
    env = importlib.import_module("mpe2.simple_adversary_v3").parallel_env(max_cycles=25)
    for path in (tmp_path, sorted((tmp_path / "checkpoints").glob("*.pt"))[-1]):
        agent = puffer.load(path)
        observations, _ = env.reset(seed=0)
        for _ in range(5):
            actions = agent.act(observations)
            assert set(actions) == set(observations)
            assert all(env.action_space(name).contains(action) for name, action in actions.items())
            observations, *_ = env.step(actions)
        partial = {name: observations[name] for name in list(observations)[1:]}  # some agents only
        assert set(agent.act(partial)) == set(partial)
    env.close()
