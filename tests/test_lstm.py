"""Recurrent policies: the LSTM carries memory across steps, reset at episode boundaries."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

import puffer.vector
from puffer.config import TrainConfig
from puffer.emulation import GymnasiumPufferEnv
from puffer.evaluation import evaluate
from puffer.models import Default, LSTMWrapper, NatureCNN
from puffer.ppo import PPO, seed_everything
from puffer.run import build_policy


class Recall(gym.Env):
    """A cue (+1 or -1) shows at the first step only; at the last of 4 steps the agent must name
    it (action 1 for +1, 0 for -1): reward 1 if right. Without memory the best is a coin flip."""

    observation_space = spaces.Box(-1, 1, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.cue = 0, float(self.np_random.choice([-1.0, 1.0]))
        return np.array([self.cue, 0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        last = self.t == 3
        reward = float(last and int(action) == int(self.cue > 0))
        return np.array([0.0, float(self.t == 2)], np.float32), reward, last, False, {}


def recall():
    return GymnasiumPufferEnv(env=Recall())


def train_recall(policy_fn, steps=24_576):
    seed_everything(0)
    vec = puffer.vector.make(recall, num_envs=16, seed=0)
    policy = policy_fn(vec.single_observation_space, vec.single_action_space)
    trainer = PPO(TrainConfig(total_timesteps=steps, num_steps=32, num_minibatches=2, update_epochs=4,
                              learning_rate=3e-3, ent_coef=0.01, gamma=0.9), vec, policy)
    trainer.train()
    vec.close()
    return evaluate(policy, recall, 40, seed=0)["return_mean"]


@pytest.mark.slow
def test_lstm_remembers_what_a_feed_forward_policy_cannot():
    lstm = train_recall(lambda o, a: LSTMWrapper(Default(o, a)))
    assert lstm >= 0.9
    feed_forward = train_recall(lambda o, a: Default(o, a), steps=8192)
    assert feed_forward <= 0.75  # a coin flip at best


def test_state_is_zeroed_where_episodes_start_and_sequences_replay_the_rollout():
    seed_everything(0)
    vec = puffer.vector.make(recall, num_envs=4, seed=0)
    policy = LSTMWrapper(Default(vec.single_observation_space, vec.single_action_space))
    trainer = PPO(TrainConfig(num_steps=12), vec, policy)
    trainer.collect()
    dones = trainer.dones.bool()
    expected = torch.zeros_like(trainer.starts)
    expected[1:] |= dones[:-1]
    expected[2:] |= dones[:-2]
    assert torch.equal(trainer.starts, expected)
    # Replaying each row's rollout from its start state gives back the values seen while acting.
    _, values = policy.forward_sequence(trainer.obs, trainer.state0, trainer.starts)
    torch.testing.assert_close(values.reshape(12, 4), trainer.values)
    vec.close()


def test_rnn_option_wraps_any_policy(make_cfg):
    obs_space = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    policy = build_policy(make_cfg("env=atari/breakout", "policy.rnn=lstm").policy, obs_space, spaces.Discrete(4))
    assert isinstance(policy, LSTMWrapper) and isinstance(policy.policy, NatureCNN)
    params, value, (h, c) = policy.step(torch.zeros(2, 4, 84, 84, dtype=torch.uint8), policy.initial_state(2))
    assert params.shape == (2, 4) and value.shape == (2,) and h.shape == (2, 512)
