"""eval.video: the evaluation's first episodes as MP4 files, read back frame by frame."""

from __future__ import annotations

import os

import numpy as np
import pytest

from puffer.errors import ConfigError
from puffer.files import checkpoint
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


def test_rendering_a_classic_control_env_prints_no_sound_server_error():
    import subprocess
    import sys

    script = ("import puffer, gymnasium as gym; env = gym.make('CartPole-v1', render_mode='rgb_array'); "
              "env.reset(seed=0); assert env.render().shape == (400, 600, 3)")
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("XDG_RUNTIME_DIR", "SDL_VIDEODRIVER", "DISPLAY", "WAYLAND_DISPLAY")}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=environment,
                            timeout=60)
    assert result.returncode == 0 and "XDG_RUNTIME_DIR" not in result.stdout + result.stderr, result.stderr


def test_as_many_videos_as_asked_when_the_episodes_are_spread_over_envs(make_cfg, tmp_path):
    from puffer.evaluation import episode_quotas

    assert episode_quotas(3, 3, first=3).tolist() == [3, 0, 0]  # the recorded env plays them all
    assert episode_quotas(10, 8, first=3).tolist() == [3, 1, 1, 1, 1, 1, 1, 1]
    assert episode_quotas(6, 3, first=1).tolist() == [2, 2, 2]
    run(make_cfg("train.total_timesteps=512", "eval.episodes=3", "eval.video=true", "eval.video_episodes=3"),
        tmp_path / "cartpole")
    assert len(list((tmp_path / "cartpole" / "videos").glob("*.mp4"))) == 3
    run(make_cfg("env=ocean/pong", "env.num_rows=16", "train.total_timesteps=1024", "eval.episodes=2",
                 "eval.video=true", "eval.video_episodes=2"), tmp_path / "pong")  # rows as episodes
    assert len(list((tmp_path / "pong" / "videos").glob("*.mp4"))) == 2


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


def params(path):
    return checkpoint.read(path)["policy"]


def test_training_videos_every_k_epochs_change_nothing_in_training_and_reach_wandb(make_cfg, tmp_path,
                                                                                  monkeypatch):
    import json

    import torch
    from wandb_records import finished_run_records

    monkeypatch.setenv("WANDB_MODE", "offline")
    small = ["train.total_timesteps=1024", "train.num_steps=32", "eval.episodes=0"]  # 4 epochs of 8 x 32
    run(make_cfg(*small), tmp_path / "plain")
    run(make_cfg(*small, "eval.video_interval=2", "logger=wandb"), tmp_path / "videos")
    written = sorted(p.name for p in (tmp_path / "videos" / "videos").glob("*.mp4"))
    assert written == ["epoch_000002_000.mp4", "epoch_000004_000.mp4"]
    assert all(len(frames(tmp_path / "videos" / "videos" / name)) >= 2 for name in written)
    # recording the current policy draws no random numbers: the training is the same bit for bit
    plain, recorded = (params(tmp_path / d / "checkpoints" / "epoch_000004.pt") for d in ("plain", "videos"))
    assert all(torch.equal(plain[k], recorded[k]) for k in plain)
    logged = []
    for record in finished_run_records(tmp_path / "videos"):
        if record.HasField("history"):
            items = {(item.key or item.nested_key[0]): item for item in record.history.item}
            if "train/video_000" in items:  # a video record: nested keys (_type, path, ...)
                logged.append(json.loads(items["global_step"].value_json))
    assert logged == [512, 1024]  # at the step of the epoch it shows


def test_watching_without_a_display_is_a_clear_error_before_any_env_starts(make_cfg, tmp_path, monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr("sys.platform", "linux")
    with pytest.raises(ConfigError, match="eval.watch=True: expected a display .* eval.video=true"):
        run(make_cfg("eval.watch=true", "env.id=NoSuchEnv-v0"), tmp_path)


RENDER_MODES: list = []  # the render_mode each puffer_test/Watched-v0 env was made with


def watched(render_mode=None):
    import gymnasium as gym

    RENDER_MODES.append(render_mode)
    return gym.make("CartPole-v1")  # no window opened here: the test machine has no display


def test_watching_makes_the_deterministic_episodes_render_in_human_mode(make_cfg, tmp_path, monkeypatch):
    import gymnasium as gym

    gym.register(id="puffer_test/Watched-v0", entry_point=watched)
    monkeypatch.setenv("DISPLAY", ":0")
    RENDER_MODES.clear()
    run(make_cfg("env=classic/gym", "env.id=puffer_test/Watched-v0", "train.total_timesteps=512",
                 "eval.episodes=2", "eval.watch=true"), tmp_path)
    # one human-mode env per deterministic eval slot (2 episodes: 2 envs); training (8 envs, a
    # probe) and the stochastic evaluation make theirs without rendering
    assert RENDER_MODES.count("human") == 2 and set(RENDER_MODES) == {None, "human"}


def test_a_mujoco_episode_is_recorded_without_a_display(make_cfg, tmp_path):
    """MUJOCO_GL is chosen when puffer.envs is imported (EGL here); without any GL library the
    run stops before training with one line that names what to install."""
    pytest.importorskip("mujoco")
    from puffer.envs import headless_mujoco_gl

    if headless_mujoco_gl() is None and not os.environ.get("MUJOCO_GL"):
        with pytest.raises(ConfigError, match="MuJoCo renders without a display through EGL"):
            run(make_cfg("env=mujoco/halfcheetah", "eval.video=true"), tmp_path)
        return
    run(make_cfg("env=mujoco/halfcheetah", "vec.num_envs=1", "train.total_timesteps=256", "train.num_steps=64",
                 "train.num_minibatches=1", "eval.episodes=1", "eval.max_steps=30", "eval.video=true"), tmp_path)
    (video,) = (tmp_path / "videos").glob("*.mp4")
    assert frames(video).shape == (31, 480, 480, 3)


def test_a_never_ending_episode_is_streamed_to_its_file_in_constant_memory(tmp_path):
    """CliffWalking-v1 has no time limit; 3,000 frames of 192x576x3 are 1 GB if kept."""
    import gymnasium as gym
    import psutil

    from puffer.emulation import GymnasiumPufferEnv
    from puffer.evaluation.video import EpisodeRecorder

    env = GymnasiumPufferEnv(env=gym.make("CliffWalking-v1", render_mode="rgb_array"))
    env.reset(seed=0)
    recorder = EpisodeRecorder(env, tmp_path, episodes=1, fps=30)
    process = psutil.Process()
    recorder.frame()
    before = process.memory_info().rss
    for _ in range(3000):
        env.step(np.array([0]))  # up: never reaches the goal
        recorder.frame()
    grown = process.memory_info().rss - before
    recorder.end_episode()
    assert grown < 100 * 2**20, f"{grown / 2**20:.0f} MB"
    assert len(frames(recorder.written[0])) == 3001


def test_an_env_that_cannot_render_a_frame_is_refused_before_training(make_cfg, tmp_path):
    with pytest.raises(ConfigError, match="eval.video=true: .* takes no render_mode"):
        run(make_cfg("env=ocean/cartpole", "eval.video=true"), tmp_path)
    assert not (tmp_path / "checkpoints").exists()  # nothing trained


def test_sigterm_while_a_classic_control_env_renders_its_evaluation_exits_130(tmp_path):
    """pygame renders every classic-control frame; a SIGTERM while it does stops the run with
    status 130, the trained policy and its checkpoint already saved."""
    import signal
    import subprocess
    import sys
    import time

    from conftest import ROOT

    pytest.importorskip("pygame")
    args = [sys.executable, "-m", "puffer", f"hydra.run.dir={tmp_path}", "train.total_timesteps=512",
            "train.num_steps=32", "eval.episodes=100", "eval.video=true", "eval.video_episodes=100"]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while not list((tmp_path / "videos").glob("*.mp4")):  # the evaluation is rendering
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 130, output
    assert (tmp_path / "model.safetensors").is_file() and list((tmp_path / "checkpoints").glob("epoch_*.pt"))
