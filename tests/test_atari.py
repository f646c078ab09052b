"""Atari: configs, the baselines' preprocessing, full-game stats, the CLI smoke run, CNN learning."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

pytest.importorskip("ale_py")

from puffer.build import make_env_creator  # noqa: E402
from puffer.envs.atari import game_id, make, make_env  # noqa: E402
from puffer.files import checkpoint
from puffer.loggers import read_metrics  # noqa: E402
from puffer.run import run
from puffer.vector.base import pickled_by_arguments  # noqa: E402


@pytest.mark.parametrize("game", ["breakout", "pong", "beam_rider", "space_invaders"])
def test_game_configs_compose_with_the_cnn_and_cleanrl_settings(make_cfg, game):
    cfg = make_cfg(f"env=atari/{game}")
    assert cfg.env.game == game and cfg.policy._target_ == "puffer.policies.networks.NatureCNN"
    t = cfg.train
    assert (cfg.vec.num_envs, t.num_steps, t.update_epochs, t.num_minibatches) == (8, 128, 4, 4)
    assert (t.learning_rate, t.clip_coef, t.ent_coef, t.gamma, t.gae_lambda) == (2.5e-4, 0.1, 0.01, 0.99, 0.95)


def test_atari_steps_half_batches_that_follow_num_envs(make_cfg):
    assert make_cfg("env=atari/breakout").vec.envs_per_batch == 4
    assert make_cfg("env=atari/breakout", "vec.num_envs=16").vec.envs_per_batch == 8


def test_any_game_by_name_and_ids(make_cfg):
    assert make_cfg("env=atari/game", "env.game=ms_pacman").env.game == "ms_pacman"
    assert game_id("space_invaders") == "ALE/SpaceInvaders-v5"
    assert game_id("ALE/Pong-v5") == "ALE/Pong-v5"


def test_preprocessed_observations_are_stacked_84x84_grayscale():
    env = make("breakout")
    obs, _ = env.reset(0)
    assert obs.shape == (1, 4, 84, 84) and obs.dtype == np.uint8
    assert env.single_action_space.n == 4


def test_a_pickled_game_plays_on_from_the_same_frame():
    # checkpoints pickle the envs: ale-py's own pickling would start a fresh game
    env = make("breakout")
    env.reset(3)
    rng = np.random.default_rng(0)
    for _ in range(150):
        env.step(rng.integers(0, 4, (1,)))
    assert pickled_by_arguments(env) is None
    copy = pickle.loads(pickle.dumps(env))
    for _ in range(300):  # sticky actions draw from the emulator's RNG: it must come along
        action = rng.integers(0, 4, (1,))
        ours = [np.array(x, copy=True) for x in env.step(action)[:4]]
        theirs = copy.step(action)[:4]
        for a, b in zip(ours, theirs, strict=True):
            np.testing.assert_array_equal(a, b)


def test_frames_match_the_baselines_preprocessing_of_the_rgb_screen():
    # the stack's base env makes grayscale observations (cheaper); AtariPreprocessing reads the
    # screen itself, so every frame must equal the one it makes over the usual RGB env
    import ale_py
    import gymnasium as gym
    from gymnasium.wrappers import AtariPreprocessing

    gym.register_envs(ale_py)
    rgb = AtariPreprocessing(gym.make("ALE/Breakout-v5", frameskip=1, repeat_action_probability=0.25))
    ours = make_env("breakout", episodic_life=False, clip_rewards=False, frame_stack=1)
    while not isinstance(ours, AtariPreprocessing):
        ours = ours.env
    actions = np.random.default_rng(0).integers(0, 4, 300)
    frames = [np.stack([env.reset(seed=3)[0]] + [env.step(int(a))[0] for a in actions])
              for env in (rgb, ours)]
    assert ours.env.unwrapped._obs_type == "grayscale"
    np.testing.assert_array_equal(frames[1], frames[0])


def play_one_game(env, rng):
    env.reset(0)
    terminals, infos, clipped = 0, [], 0.0
    for _ in range(20_000):
        _, rewards, term, trunc, info = env.step(rng.integers(0, 4, 1))
        terminals += int(term[0])
        clipped += float(rewards[0])
        infos += info
        if infos:
            return terminals, infos, clipped
    raise AssertionError("no game ended")


def test_training_stack_ends_an_episode_per_life_but_logs_whole_unclipped_games():
    terminals, infos, clipped = play_one_game(make("breakout"), np.random.default_rng(0))
    assert terminals == 5  # Breakout's five lives, each an episode for the learner
    (info,) = infos
    assert info["episode_return"] >= clipped  # unclipped: bricks higher up are worth 4 and 7
    assert info["episode_length"] > 5


def test_evaluation_stack_plays_full_games_with_true_rewards(make_cfg):
    creator = make_env_creator(make_cfg("env=atari/breakout"), evaluation=True)
    assert creator.keywords["episodic_life"] is False and creator.keywords["clip_rewards"] is False
    terminals, infos, total = play_one_game(creator(), np.random.default_rng(1))
    assert terminals == 1 and infos[0]["episode_return"] == total


def test_wrapped_env_is_the_documented_stack():
    env = make_env("breakout")
    names = []
    while hasattr(env, "env"):
        names.append(type(env).__name__)
        env = env.env
    assert names[:5] == ["FrameStackObservation", "TransformReward", "FireReset", "EpisodicLife", "GameStats"]
    assert "AtariPreprocessing" in names


def test_headline_command_runs_logs_and_checkpoints(cli, tmp_path):
    cli("env=atari/breakout", "vec=multiprocessing", "train.total_timesteps=4096", "eval.episodes=2")
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert records[-2]["global_step"] == 4096 and records[-1]["eval/episodes"] == 2
    assert list((tmp_path / "run" / "checkpoints").glob("epoch_*.pt"))


@pytest.mark.slow
def test_the_cnn_path_learns_from_pixels(make_cfg, tmp_path):
    torch.manual_seed(0)
    metrics = run(make_cfg("env=ocean/squares"), tmp_path)
    assert metrics["eval/return_mean"] >= 7.5  # random play: 2


def test_a_resumed_atari_run_matches_an_uninterrupted_one_bit_for_bit(make_cfg, tmp_path):
    small = ["env=atari/breakout", "vec=serial", "vec.num_envs=2", "vec.envs_per_batch=2",
             "train.num_steps=32", "train.total_timesteps=256", "train.num_minibatches=2",
             "train.update_epochs=1", "eval.episodes=0"]
    run(make_cfg(*small, "runtime.checkpoint_interval=2", "runtime.keep_checkpoints=0"), tmp_path / "full")
    middle = tmp_path / "full" / "checkpoints" / "epoch_000002.pt"
    assert checkpoint.read(middle)["rollout"]["env_state"] is not None  # saved mid-game
    run(make_cfg(*small, f"resume={middle}"), tmp_path / "resumed")
    full = read_metrics(tmp_path / "full" / "metrics.jsonl")[2:]
    resumed = read_metrics(tmp_path / "resumed" / "metrics.jsonl")
    losses = ["train/policy_loss", "train/value_loss", "train/entropy"]
    assert [[r[k] for k in losses] for r in resumed] == [[r[k] for k in losses] for r in full]
