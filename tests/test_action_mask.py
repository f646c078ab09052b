"""Action masks from the observation: illegal actions are never taken, and learning goes on."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

import puffer.vector
from puffer.config import TrainConfig
from puffer.emulation import GymnasiumPufferEnv
from puffer.policies.build import build_policy
from puffer.policies.distributions import ActionDist
from puffer.policies.wrappers import ActionMasked
from puffer.training.ppo import PPO, seed_everything


class PickALegalDoor(gym.Env):
    """Five doors, a random two of them open each step (`action_mask`); opening a closed one
    ends the episode with -1, an open one pays +1 (20 steps)."""

    observation_space = spaces.Dict({"action_mask": spaces.Box(0, 1, (5,), np.int8),
                                     "noise": spaces.Box(-1, 1, (2,), np.float32)})
    action_space = spaces.Discrete(5)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.illegal = 0, 0
        return self._obs(), {}

    def _obs(self):
        self.open = np.zeros(5, np.int8)
        self.open[self.np_random.choice(5, 2, replace=False)] = 1
        return {"action_mask": self.open.copy(), "noise": self.np_random.uniform(-1, 1, 2).astype(np.float32)}

    def step(self, action):
        self.t += 1
        if not self.open[action]:
            return self._obs(), -1.0, True, False, {"illegal": 1.0}
        return self._obs(), 1.0, False, self.t >= 20, {}


def doors():
    return GymnasiumPufferEnv(env=PickALegalDoor())


@pytest.mark.parametrize("rnn", [None, "lstm"])
def test_masked_policy_never_takes_an_illegal_action_in_rollouts_or_evaluation(rnn):
    seed_everything(0)
    vec = puffer.vector.make(doors, num_envs=4, seed=0)
    policy = build_policy({"_target_": "puffer.policies.networks.Default", "rnn": rnn}, vec.single_observation_space,
                          vec.single_action_space)
    assert isinstance(policy, ActionMasked)
    trainer = PPO(TrainConfig(num_steps=64, total_timesteps=1024), vec, policy)
    trainer.train()
    r = trainer.rollout
    masks = vec.driver_env.obs_layout.leaf_views(r.obs.numpy())[0]  # action_mask of each stored step
    taken = r.actions.numpy().astype(int)
    assert masks[np.arange(64)[:, None], np.arange(4)[None, :], taken].all()
    # every episode lasted its 20 steps: none ended on a closed door
    assert trainer.last_metrics["env/episode_length"] == 20.0
    vec.close()


@pytest.mark.slow
def test_no_masked_action_is_sampled_in_ten_to_the_five_training_steps():
    """Counted over 102,400 steps of training (every rollout checked after its update, so the
    policy sampling them keeps changing): not one action outside its step's mask."""
    seed_everything(1)
    vec = puffer.vector.make(doors, num_envs=16, seed=1)
    policy = build_policy({"_target_": "puffer.policies.networks.Default"}, vec.single_observation_space,
                          vec.single_action_space)
    counts = {"steps": 0, "masked": 0}

    def count(trainer):
        r = trainer.rollout
        masks = vec.driver_env.obs_layout.leaf_views(r.obs.numpy())[0]
        taken = r.actions.numpy().astype(int)
        legal = np.take_along_axis(masks, taken[..., None], axis=-1)[..., 0].astype(bool)
        counts["steps"] += int(r.valid.sum())
        counts["masked"] += int((~legal & r.valid.numpy()).sum())

    trainer = PPO(TrainConfig(num_steps=256, total_timesteps=102_400, update_epochs=1), vec, policy,
                  epoch_hooks=[count])
    trainer.train()
    vec.close()
    # valid steps: all but the reset steps after each 20-step episode
    assert counts["steps"] >= 100_000 * 20 // 21 and counts["masked"] == 0
    assert trainer.last_metrics["env/episode_length"] == 20.0


def test_masked_logits_give_zero_probability_and_a_finite_entropy():
    env = doors()
    policy = build_policy({"_target_": "puffer.policies.networks.Default"}, env.single_observation_space,
                          env.single_action_space)
    obs, _ = env.reset(seed=1)
    params, _ = policy(torch.from_numpy(obs))
    dist = ActionDist(env.single_action_space)
    probabilities = params.softmax(-1)[0]
    closed = env.obs_layout.leaf_views(obs)[0][0] == 0
    assert torch.all(probabilities[torch.from_numpy(closed)] == 0)
    _, entropy = dist.log_prob_entropy(params, dist.mode(params))
    assert torch.isfinite(entropy).all() and entropy.item() <= np.log(2) + 1e-6  # two open doors


def test_a_mask_of_the_wrong_size_is_a_clear_error():
    class WrongMask(PickALegalDoor):
        action_space = spaces.Discrete(4)

    env = GymnasiumPufferEnv(env=WrongMask())
    with pytest.raises(ValueError, match=r"obs\['action_mask'\] has 5 entries but the action space"):
        build_policy({"_target_": "puffer.policies.networks.Default"}, env.single_observation_space, env.single_action_space)
