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
from puffer.policies.build import build_policy
from puffer.policies.networks import Default, NatureCNN
from puffer.policies.wrappers import LSTMWrapper
from puffer.training.ppo import PPO, seed_everything


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
    dones = trainer.rollout.dones.bool()
    expected = torch.zeros_like(trainer.rollout.starts)
    expected[1:] |= dones[:-1]
    expected[2:] |= dones[:-2]
    assert torch.equal(trainer.rollout.starts, expected)
    # Replaying each row's rollout from its start state gives back the values seen while acting.
    _, values = policy.forward_sequence(trainer.rollout.obs, trainer.rollout.state0, trainer.rollout.starts)
    torch.testing.assert_close(values.reshape(12, 4), trainer.rollout.values)
    vec.close()


def test_rnn_option_wraps_any_policy(make_cfg):
    obs_space = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    policy = build_policy(make_cfg("env=atari/breakout", "policy.rnn=lstm").policy, obs_space, spaces.Discrete(4))
    assert isinstance(policy, LSTMWrapper) and isinstance(policy.policy, NatureCNN)
    params, value, (h, c) = policy.step(torch.zeros(2, 4, 84, 84, dtype=torch.uint8), policy.initial_state(2))
    assert params.shape == (2, 4) and value.shape == (2,) and h.shape == (2, 512)


class RecordingLSTM(LSTMWrapper):
    """Records, for every step, which rows were handed a zero (reset) state."""

    def __init__(self, policy):
        super().__init__(policy)
        torch.nn.init.constant_(self.cell.bias_ih, 0.5)  # a live state is never zero by chance
        self.zero_rows: list[np.ndarray] = []

    def step(self, obs, state):
        h, c = state
        self.zero_rows.append(((h == 0).all(-1) & (c == 0).all(-1)).cpu().numpy())
        return super().step(obs, state)


class RecordingSerial(puffer.vector.Serial):
    """Serial, recording each recv()'s masks and episode ends."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen: list[tuple[np.ndarray, np.ndarray]] = []

    def recv(self):
        received = super().recv()
        self.seen.append((received.masks.copy(), received.terminals | received.truncations))
        return received


def expected_resets(seen) -> list[np.ndarray]:
    """The rule stated once: a row restarts from zero after the final observation of an episode,
    on the reset observation after it, and while its agent is dead (mask False)."""
    out, prev, before = [], np.zeros_like(seen[0][1]), np.zeros_like(seen[0][1])
    for masks, done in seen:
        before, prev = prev, done
        out.append(prev | before | ~masks)
    return out


def test_evaluation_resets_recurrent_state_as_training_does_for_dying_agents(monkeypatch):
    from functools import partial

    import puffer.evaluation.protocol
    from puffer.envs.ocean import Herd

    herd = partial(Herd, num_agents=4, size=8, max_steps=12)
    seed_everything(0)
    vec = RecordingSerial(herd, num_envs=2, seed=0)
    policy = RecordingLSTM(Default(vec.single_observation_space, vec.single_action_space))
    with vec:
        trainer = PPO(TrainConfig(num_steps=40, total_timesteps=80), vec, policy)
        trainer.collect()
    # (one-row steps are the thread policy counting the model's FLOPs)
    training = [rows for rows in policy.zero_rows if len(rows) == vec.num_rows]
    policy.zero_rows = []
    assert len(training) == len(vec.seen) == 41  # one step per recv, the last for the bootstrap
    assert any((~masks).any() for masks, _ in vec.seen) and any(d.any() for _, d in vec.seen)

    created = []
    monkeypatch.setattr(puffer.evaluation.protocol, "Serial",
                        lambda *a, **k: created.append(RecordingSerial(*a, **k)) or created[-1])
    evaluate(policy, herd, episodes=4, seed=0, num_envs=2)
    evaluation = [rows for rows in policy.zero_rows if len(rows) == vec.num_rows]
    seen = created[0].seen
    assert any((~masks).any() for masks, _ in seen)
    # Step 0 starts from the initial zero state whatever the rule; from then on, the rule.
    for observed, expected in ((training, expected_resets(vec.seen)), (evaluation, expected_resets(seen))):
        for t in range(1, len(observed)):
            np.testing.assert_array_equal(observed[t], expected[t], err_msg=f"step {t}")
