"""eval.video: the evaluation's first episodes as MP4 files, read back frame by frame."""

from __future__ import annotations

import pytest

from puffer.config import ConfigError
from puffer.run import run

iio = pytest.importorskip("imageio.v3")
pytest.importorskip("av")


def frames(path):
    return iio.imread(path, plugin="pyav")


def test_a_gymnasium_evaluation_episode_is_recorded_frame_by_frame(make_cfg, tmp_path):
    metrics = run(make_cfg("train.total_timesteps=1024", "eval.episodes=1", "eval.video=true"), tmp_path)
    (video,) = (tmp_path / "videos").glob("*.mp4")
    # the reset frame and one per step
    assert frames(video).shape == (metrics["eval/length_mean"] + 1, 400, 600, 3)


def test_atari_videos_show_full_frames_and_a_cut_episode_is_kept(make_cfg, tmp_path):
    pytest.importorskip("ale_py")
    run(make_cfg("env=atari/breakout", "vec.num_envs=2", "train.total_timesteps=256", "train.num_steps=32",
                 "eval.episodes=1", "eval.max_steps=40", "eval.video=true", "eval.video_episodes=2"), tmp_path)
    (video,) = (tmp_path / "videos").glob("*.mp4")  # one episode in the quota, cut at 40 steps
    assert frames(video).shape == (41, 210, 160, 3)  # the game's screen, not the 84x84 input


def test_pettingzoo_envs_are_recorded_too(make_cfg, tmp_path):
    pytest.importorskip("pettingzoo.butterfly")
    run(make_cfg("env=pettingzoo/kaz", "train.total_timesteps=256", "train.num_steps=32", "eval.episodes=1",
                 "eval.max_steps=10", "eval.video=true"), tmp_path)
    (video,) = (tmp_path / "videos").glob("*.mp4")
    assert len(frames(video)) == 11 and frames(video).shape[-1] == 3


def test_an_env_that_cannot_render_is_a_clear_error(make_cfg, tmp_path):
    with pytest.raises(ConfigError, match="eval.video=true: .* takes no render_mode"):
        run(make_cfg("env=ocean/cartpole", "train.total_timesteps=8192", "eval.episodes=1",
                     "eval.video=true"), tmp_path)
