"""Action distributions (what the rollout samples is what training scores) and the Nature
CNN's memory layouts."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from puffer.policies.distributions import ActionDist
from puffer.policies.networks import Default, NatureCNN


@pytest.mark.parametrize("space", [spaces.Discrete(4), spaces.MultiDiscrete([3, 5])])
def test_sampled_discrete_actions_follow_the_softmax_and_score_as_in_training(space):
    dist = ActionDist(space)
    torch.manual_seed(0)
    logits = torch.randn(1, dist.num_logits).repeat(100_000, 1)
    action, logprob = dist.sample(logits)
    scored, _ = dist.log_prob_entropy(logits, action)
    torch.testing.assert_close(logprob, scored, rtol=0, atol=0)  # the PPO ratio starts at 1
    columns = action.reshape(len(action), -1)
    for column, chunk in enumerate(logits[0].split(dist.nvec)):
        frequency = torch.bincount(columns[:, column], minlength=len(chunk)) / len(action)
        # 100k draws: a frequency's standard error is at most 0.0016
        torch.testing.assert_close(frequency, chunk.softmax(-1), rtol=0, atol=0.008)


def test_ortho_init_false_leaves_pytorchs_own_initialization_and_spreads_the_first_actions():
    observation, action = spaces.Box(-1, 1, (11,)), spaces.Box(-1, 1, (3,))
    torch.manual_seed(0)
    ortho = Default(observation, action, hidden_size=256, activation="relu")
    torch.manual_seed(0)
    plain = Default(observation, action, hidden_size=256, activation="relu", ortho_init=False)
    hidden = ortho.actor[2].weight  # 256x256: orthogonal with gain sqrt(2)
    torch.testing.assert_close(hidden @ hidden.T, 2 * torch.eye(256), rtol=0, atol=1e-4)
    for name, layer in plain.named_modules():
        if isinstance(layer, torch.nn.Linear):  # kaiming-uniform weights within 1 / sqrt(fan_in)
            bound = 1 / np.sqrt(layer.in_features)
            assert layer.weight.abs().max() <= bound, name
            assert layer.weight.abs().max() > 0.9 * bound, name
            assert layer.bias.abs().max() > 0, name  # biases drawn too, not zeroed
    assert (plain.actor[2].weight @ plain.actor[2].weight.T - 2 * torch.eye(256)).abs().max() > 0.5
    obs = torch.randn(4096, 11)
    with torch.no_grad():
        (ortho_mean, _), _ = ortho(obs)
        (plain_mean, _), _ = plain(obs)
    # the small-init head starts every action near 0; PyTorch's init spreads them 10x wider
    assert plain_mean.std() > 10 * ortho_mean.std()
    assert torch.equal(plain.action_head.log_std, ortho.action_head.log_std)  # log_std_init kept


def test_nature_cnn_layouts_agree_and_leave_the_input_alone():
    """channels_last is a speed choice: the same weights give the same outputs (to float
    rounding) as NCHW, from uint8 pixels or from floats, and a float input is not scaled in
    place under its caller."""
    torch.manual_seed(0)
    obs_space = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    nhwc = NatureCNN(obs_space, spaces.Discrete(4), channels_last=True)
    nchw = NatureCNN(obs_space, spaces.Discrete(4), channels_last=False)
    nchw.load_state_dict(nhwc.state_dict())
    pixels = torch.randint(0, 256, (5, 4, 84, 84), dtype=torch.uint8)
    floats = pixels.float()
    with torch.no_grad():
        logits, value = nhwc(pixels)
        same_logits, same_value = nchw(pixels)
        float_logits, _ = nhwc(floats)
    torch.testing.assert_close(logits, same_logits)
    torch.testing.assert_close(value, same_value)
    assert torch.equal(float_logits, logits)
    assert torch.equal(floats, pixels.float())
    assert value.abs().max() > 0  # not a degenerate all-zero comparison


@pytest.mark.parametrize("channels_last", [True, False])
def test_hwc_frames_give_what_the_same_frames_in_chw_give(channels_last):
    """An env's (H, W, C) frames (gymnasium's render, CarRacing, ...) are seen as (C, H, W)."""
    torch.manual_seed(0)
    chw = NatureCNN(spaces.Box(0, 255, (3, 64, 48), np.uint8), spaces.Discrete(5), channels_last=channels_last)
    hwc = NatureCNN(spaces.Box(0, 255, (64, 48, 3), np.uint8), spaces.Discrete(5), channels_last=channels_last)
    assert hwc.hwc and not chw.hwc
    hwc.load_state_dict(chw.state_dict())  # same parameter shapes: the layout is found from the shape
    frames = torch.randint(0, 256, (2, 64, 48, 3), dtype=torch.uint8)
    with torch.no_grad():
        expected = chw(frames.permute(0, 3, 1, 2).contiguous())
        got = hwc(frames)
    torch.testing.assert_close(got, expected)


def test_frames_too_small_for_the_nature_cnn_are_a_clear_error():
    with pytest.raises(ValueError, match="at least 36x36.*got 7x7; use policy=default"):
        NatureCNN(spaces.Box(0, 255, (7, 7, 3), np.uint8), spaces.Discrete(3))


class LightOrDark(gym.Env):
    """One-step episodes: a 36x36 (H, W, 1) frame that is all dark or all light, beside a noise
    vector; the action must say which (+1), else 0. Only the image carries the answer."""

    observation_space = spaces.Dict({"camera": spaces.Box(0, 255, (36, 36, 1), np.uint8),
                                     "noise": spaces.Box(-1, 1, (3,), np.float32)})
    action_space = spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.light = int(self.np_random.integers(2))
        frame = np.full((36, 36, 1), 255 * self.light, np.uint8)
        return {"camera": frame, "noise": self.np_random.uniform(-1, 1, 3).astype(np.float32)}, {}

    def step(self, action):
        reward = float(action == self.light)
        obs, _ = self.reset()
        return obs, reward, True, False, {}


def test_an_image_inside_a_dict_gets_a_cnn_and_is_learned_from():
    import puffer.vector
    from puffer.config import TrainConfig
    from puffer.emulation import GymnasiumPufferEnv
    from puffer.policies.networks import Default
    from puffer.training.ppo import PPO, seed_everything

    seed_everything(0)
    vec = puffer.vector.make(lambda: GymnasiumPufferEnv(env=LightOrDark()), num_envs=8, seed=0)
    policy = Default(vec.single_observation_space, vec.single_action_space)
    assert [kind for kind, _, _ in policy.encoder.encoders] == ["cnn", "float"]
    trainer = PPO(TrainConfig(num_steps=16, total_timesteps=4096, ent_coef=0.0), vec, policy)
    trainer.train()
    assert trainer.last_metrics["env/episode_return"] > 0.9  # random: 0.5
    vec.close()


@pytest.mark.parametrize("overrides", [
    ["env=classic/gym", "env.id=CarRacing-v3"],  # 96x96x3 HWC frames at the top level
    ["env=classic/gym", "env.id=ale_py:ALE/Breakout-v5"],  # raw 210x160x3 Atari frames
    # a multi-agent pixel env: each piston sees a 457x120x3 frame
    ["env=pettingzoo/parallel", "env.module=pettingzoo.butterfly.pistonball_v6"],
])
def test_pixels_at_the_top_level_get_a_cnn_by_default(make_cfg, overrides):
    from puffer.build import describe_policy, make_env_creator
    from puffer.policies.build import build_policy
    from puffer.policies.networks import ImageEncoder

    pytest.importorskip({"CarRacing-v3": "Box2D", "ale_py:ALE/Breakout-v5": "ale_py"}.get(
        overrides[1].split("=")[1], "pettingzoo.butterfly"))
    cfg = make_cfg(*overrides)
    env = make_env_creator(cfg)()
    try:
        policy = build_policy(cfg.policy, env.single_observation_space, env.single_action_space)
    finally:
        env.close()
    assert any(isinstance(m, ImageEncoder) for m in policy.modules())
    assert "(obs: cnn -> 256)" in describe_policy(policy)
    # less than half the MLP these frames got before (3.5M parameters on CarRacing, 12.9M on
    # Breakout, 21M on pistonball: two 64-unit layers on every pixel)
    pixels = int(np.prod(env.single_observation_space.shape))
    assert sum(p.numel() for p in policy.parameters()) < 64 * 2 * pixels / 2
    frames = torch.zeros((2, *env.single_observation_space.shape), dtype=torch.uint8)
    logits, value = policy(frames)
    assert value.shape == (2,)


@pytest.mark.parametrize("shape, low, high, dtype, image", [
    ((64, 64), 0, 255, np.uint8, True),  # (H, W) grey frames
    ((3, 40, 40), 0, 255, np.float32, True),  # declared 0-255
    ((3, 40, 40), 0, 1, np.float32, False),  # floats in [0, 1]: values, not pixels
    ((20, 20, 3), 0, 255, np.uint8, False),  # too small for the Nature torso: flattened
])
def test_an_image_is_told_from_the_space(shape, low, high, dtype, image):
    from puffer.policies.networks import ObsEncoder, is_image

    space = spaces.Box(low, high, shape, dtype)
    assert is_image(space) == image
    encoder = ObsEncoder(space)
    assert encoder.describe().startswith("obs: cnn" if image else "obs: flat")
    assert encoder(torch.zeros((3, *shape))).shape == (3, encoder.out_dim)


def test_the_run_log_names_the_encoder_and_the_parameter_count(make_cfg, tmp_path, caplog):
    import logging

    from puffer.run import run

    caplog.set_level(logging.INFO, logger="puffer")
    run(make_cfg("train.total_timesteps=256", "train.num_steps=32", "policy.hidden_size=64", "eval.episodes=0"),
        tmp_path)
    assert "policy: Default (obs: flat -> 4), 9,155 parameters" in caplog.text


def test_an_integer_grid_of_symbols_gets_an_embedding_not_a_pixel_cnn():
    """NetHack's glyphs: 21x79 ids of 5,977 symbols, as int16. Read as an image, the CNN took
    them as intensities; as floats, an MLP took id 2,000 as twice id 1,000."""
    from puffer.policies.networks import ObsEncoder, SymbolGridEncoder

    glyphs = spaces.Box(0, 5976, (21, 79), np.int16)
    encoder = ObsEncoder(glyphs)
    assert encoder.describe() == "obs: embedding -> 256" and isinstance(encoder.image, SymbolGridEncoder)
    grid = torch.zeros((2, 21, 79), dtype=torch.int16)
    grid[1, 3, 4] = 5976  # one cell holds another symbol: the features differ
    features = encoder(grid)
    assert features.shape == (2, 256) and not torch.equal(features[0], features[1])
    # inside a Dict too, beside other leaves; a uint8 grid (MiniGrid's channels) stays floats
    nested = spaces.Dict({"glyphs": glyphs, "grid": spaces.Box(0, 255, (7, 7, 3), np.uint8)})
    from puffer.emulation.spaces import ObsLayout

    assert ObsEncoder(ObsLayout(nested).flat_space).describe() == (
        "obs['glyphs']: embedding -> 256, obs['grid']: float -> 147")
