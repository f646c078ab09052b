"""Faults: resume bit for bit, checkpoints kept and never torn, Ctrl-C, bad paths."""

from __future__ import annotations

import contextlib
import errno
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import psutil
import pytest
import torch
from conftest import wait_for_epochs
from gymnasium.utils import EzPickle
from resumes import assert_resumes_bit_for_bit
from test_vector import Crashing

import puffer
import puffer.config
import puffer.errors
import puffer.vector
from puffer.config import resume
from puffer.emulation import GymnasiumPufferEnv
from puffer.errors import CheckpointError
from puffer.files import checkpoint
from puffer.loggers import read_metrics
from puffer.run import run

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["train.total_timesteps=4096", "train.num_steps=64", "eval.episodes=0"]


def params(path: Path) -> torch.Tensor:
    state = checkpoint.read(path)["policy"]
    return torch.cat([v.flatten() for v in state.values()])


@pytest.mark.parametrize("vec", ["serial", "multiprocessing"])
def test_resumed_run_matches_an_uninterrupted_one_bit_for_bit(make_cfg, tmp_path, vec):
    assert_resumes_bit_for_bit(make_cfg, tmp_path, [*SMALL, f"vec={vec}"], middle=4, end=8,
                               keys=["global_step", "train/policy_loss", "train/value_loss", "train/entropy",
                                     "train/approx_kl"])
    # the envs were saved mid-episode by the backend that resumed them
    assert checkpoint.read(tmp_path / "full" / "checkpoints" / "epoch_000004.pt")["rollout"]["env_state"][
        "backend"] == vec


class Rebuilt(gym.Env, EzPickle):
    """Like ALE, MuJoCo or Box2D envs: unpickling builds a new env from the arguments."""

    observation_space = gym.spaces.Box(0, 1e6, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self):
        EzPickle.__init__(self)
        self.t = 0

    def reset(self, seed=None, options=None):
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.full(1, self.t, np.float32), 0.0, False, False, {}


def test_envs_that_pickle_as_their_arguments_are_not_saved_as_if_mid_episode(caplog):
    env = Rebuilt()
    env.step(0)
    assert pickle.loads(pickle.dumps(env)).t == 0  # what a saved state would have resumed

    def wrapped():
        return GymnasiumPufferEnv(env=gym.wrappers.TimeLimit(Rebuilt(), 100))

    with puffer.vector.make(wrapped, num_envs=2) as vec:
        vec.reset(0)
        vec.step(np.zeros(2, int))
        with caplog.at_level("WARNING", logger="puffer.vector"):
            assert vec.get_state() is None
        assert "Rebuilt pickles as its constructor arguments" in caplog.text
    caplog.clear()
    with puffer.vector.make(wrapped, num_envs=2, backend="multiprocessing", num_workers=1) as vec:
        vec.reset(0)
        with caplog.at_level("WARNING", logger="puffer.vector"):
            assert vec.get_state() is None
        assert "Rebuilt pickles as its constructor arguments" in caplog.text
    with puffer.vector.make(lambda: GymnasiumPufferEnv(env=gym.make("CartPole-v1"))) as vec:
        vec.reset(0)
        assert vec.get_state() is not None  # plain envs keep their mid-episode state


def test_resuming_on_another_backend_restarts_the_envs_from_their_seeds(make_cfg, tmp_path, caplog):
    run(make_cfg(*SMALL, "train.total_timesteps=1024"), tmp_path / "serial")
    saved = tmp_path / "serial" / "checkpoints" / "epoch_000002.pt"
    with caplog.at_level("WARNING", logger="puffer.training.ppo"):
        metrics = run(make_cfg(*SMALL, "vec=multiprocessing", f"resume={saved}",
                               "train.total_timesteps=2048"), tmp_path / "resumed")
    assert "no env state for backend multiprocessing (it has serial)" in caplog.text
    assert metrics["train/epoch"] == 4


def test_resume_latest_finds_the_newest_checkpoint(tmp_path):
    for name in ("a", "b"):
        path = tmp_path / name / "checkpoints" / "epoch_000001.pt"
        checkpoint.save_atomic({"x": 1}, path)
        time.sleep(0.01)
    assert checkpoint.resolve("latest", tmp_path) == tmp_path / "b" / "checkpoints" / "epoch_000001.pt"
    assert checkpoint.resolve(str(tmp_path / "a")) == tmp_path / "a" / "checkpoints" / "epoch_000001.pt"
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        checkpoint.resolve(str(tmp_path / "missing.pt"))


def test_only_the_last_k_checkpoints_are_kept(make_cfg, tmp_path):
    run(make_cfg(*SMALL, "runtime.checkpoint_interval=1", "runtime.keep_checkpoints=3"), tmp_path)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["epoch_000006.pt", "epoch_000007.pt", "epoch_000008.pt"]


def test_a_full_disk_keeps_the_previous_checkpoint_intact(tmp_path, monkeypatch):
    path = tmp_path / "checkpoints" / "epoch_000001.pt"
    checkpoint.save_atomic({"policy": "good"}, path)

    def full_disk(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(CheckpointError, match="could not write checkpoint .*the disk is full"):
        checkpoint.save_atomic({"policy": "bad"}, path)
    monkeypatch.undo()
    assert checkpoint.read(path) == {"policy": "good"}
    assert list(path.parent.iterdir()) == [path]  # no torn temporary file left behind


def test_unwritable_run_directory_is_a_clear_error(make_cfg, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    with pytest.raises(OSError, match="cannot write to the run directory .*a_file/run"):
        run(make_cfg(*SMALL), blocker / "run")


def test_missing_resume_checkpoint_fails_before_envs_start(make_cfg, tmp_path):
    with pytest.raises(CheckpointError, match="resume='nope.pt'"):
        run(make_cfg(*SMALL, "resume=nope.pt"), tmp_path)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_saves_a_checkpoint_and_leaves_no_process(tmp_path, sig):
    args = [sys.executable, "-m", "puffer", f"hydra.run.dir={tmp_path}", "vec=multiprocessing",
            "train.total_timesteps=10000000", "runtime.log_interval=0"]
    # SIGINT back to its default in the child: a suite started in the background by a
    # non-interactive shell inherits SIGINT ignored, and Python then never installs its handler
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    wait_for_epochs(proc, tmp_path)
    workers = psutil.Process(proc.pid).children(recursive=True)
    assert workers, "expected multiprocessing workers"
    proc.send_signal(sig)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, output
    saved = list((tmp_path / "checkpoints").glob("epoch_*.pt"))
    assert len(saved) == 1
    state = checkpoint.read(saved[0])
    assert state["epoch"] >= 3 and state["global_step"] > 0
    time.sleep(0.5)
    assert not [w for w in workers if w.is_running() and w.status() != psutil.STATUS_ZOMBIE]
    assert "checkpoint saved" in output


def test_no_child_processes_remain_after_a_worker_crash_in_training(make_cfg, tmp_path):
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    cfg = make_cfg(*SMALL, "vec=multiprocessing", "env=classic/gym", "env.id=NoSuchEnv-v0")
    with pytest.raises(Exception, match="NoSuchEnv-v0"):
        run(cfg, tmp_path)
    after = {p.pid for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE}
    assert not {pid for pid in after - before if "resource_tracker" not in " ".join(psutil.Process(pid).cmdline())}
    assert os.getpid()


def test_recurrent_policy_resumes_bit_for_bit_too(make_cfg, tmp_path):
    small = [*SMALL, "policy.rnn=lstm", "train.total_timesteps=1024", "train.num_steps=32"]
    run(make_cfg(*small, "runtime.checkpoint_interval=2", "runtime.keep_checkpoints=0"), tmp_path / "full")
    run(make_cfg(*small, f"resume={tmp_path / 'full' / 'checkpoints' / 'epoch_000002.pt'}"), tmp_path / "resumed")
    final = "epoch_000004.pt"
    assert torch.equal(params(tmp_path / "full" / "checkpoints" / final),
                       params(tmp_path / "resumed" / "checkpoints" / final))


def start_training(tmp_path, *overrides):
    """`python -m puffer` in a session (and process group) of its own, as SLURM or GNU timeout
    run it; returns the process once it has logged 3 epochs."""
    args = [sys.executable, "-m", "puffer", f"hydra.run.dir={tmp_path}", "train.total_timesteps=10000000",
            "runtime.log_interval=0", *overrides]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    wait_for_epochs(proc, tmp_path, timeout=180)
    return proc


@pytest.mark.parametrize("vec", ["multiprocessing", "ray"])
def test_sigterm_to_the_process_group_finishes_the_epoch_saves_and_resumes(make_cfg, tmp_path, vec):
    if vec == "ray":
        pytest.importorskip("ray")
    proc = start_training(tmp_path / "run", f"vec={vec}", "train.num_steps=64")
    workers = psutil.Process(proc.pid).children(recursive=True)
    os.killpg(proc.pid, signal.SIGTERM)  # the main process and every worker at once
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, output
    (saved,) = (tmp_path / "run" / "checkpoints").glob("epoch_*.pt")
    assert "SIGTERM" in output and "checkpoint saved" in output
    # the workers survive the signal and finish the epoch (a local Ray's own processes are in
    # groups of their own: puffer.vector.ray.local_ray_started), and save their envs
    assert "_interrupted" not in saved.name
    state = checkpoint.read(saved)
    assert state["global_step"] == state["epoch"] * 64 * 8  # a clean epoch boundary
    assert state["rollout"]["env_state"]["backend"] == vec
    time.sleep(1.0)
    assert not [w for w in workers if w.is_running() and w.status() != psutil.STATUS_ZOMBIE]
    if vec == "multiprocessing":  # and the run goes on from it
        steps = (state["epoch"] + 2) * 64 * 8
        resumed = run(make_cfg(f"vec={vec}", "train.num_steps=64", f"train.total_timesteps={steps}",
                               "eval.episodes=0", f"resume={saved}"), tmp_path / "resumed")
        assert resumed["train/epoch"] == state["epoch"] + 2


@pytest.mark.parametrize("to_group", [False, True])
def test_sigusr1_saves_a_checkpoint_and_training_goes_on(tmp_path, to_group):
    """To the main process, or with multiprocessing workers to the whole process group (as
    `kill -USR1 -- -PGID` or a scheduler sends it): the workers ignore it, the run saves."""
    proc = start_training(tmp_path, "train.num_steps=64", *(["vec=multiprocessing"] if to_group else []))
    workers = psutil.Process(proc.pid).children(recursive=True)
    if to_group:
        assert workers, "expected multiprocessing workers"
        os.killpg(proc.pid, signal.SIGUSR1)
    else:
        proc.send_signal(signal.SIGUSR1)
    checkpoints = tmp_path / "checkpoints"
    deadline = time.monotonic() + 60
    while not list(checkpoints.glob("epoch_*.pt")):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)
    epochs = len((tmp_path / "metrics.jsonl").read_text().splitlines())
    time.sleep(1.0)
    assert proc.poll() is None  # still training
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) > epochs
    assert all(w.is_running() for w in workers)
    (saved,) = checkpoints.glob("epoch_*.pt")
    if to_group:  # the workers were alive to save their envs
        assert checkpoint.read(saved)["rollout"]["env_state"]["backend"] == "multiprocessing"
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "SIGUSR1" in output


def test_a_second_signal_stops_at_once_into_its_own_interrupted_checkpoint(tmp_path):
    # long updates (many minibatch passes), so that both signals land inside one epoch
    proc = start_training(tmp_path, "train.num_steps=256", "train.update_epochs=100",
                          "train.num_minibatches=64")
    proc.send_signal(signal.SIGINT)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, output
    (saved,) = (tmp_path / "checkpoints").glob("epoch_*_interrupted.pt")
    state = checkpoint.read(saved)
    # the unfinished epoch's steps are not counted: the counter stays on the epoch boundary
    assert state["global_step"] == state["epoch"] * 256 * 8
    assert not list((tmp_path / "checkpoints").glob("*.tmp"))
    assert "interrupted during epoch" in output


def test_forkserver_workers_train(make_cfg, tmp_path):
    metrics = run(make_cfg("vec=multiprocessing", "vec.start_method=forkserver", "train.total_timesteps=2048",
                           "train.num_steps=64", "eval.episodes=0"), tmp_path)
    assert metrics["train/epoch"] == 4


@pytest.fixture
def small_disk(tmp_path):
    """A real 1 MB tmpfs (needs the right to mount, as root in a container has)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


def test_a_really_full_disk_is_named_and_leaves_no_torn_file(small_disk):
    path = small_disk / "checkpoints" / "epoch_000001.pt"
    checkpoint.save_atomic({"policy": torch.zeros(1000)}, path)
    with pytest.raises(CheckpointError, match="could not write checkpoint .*the disk is full"):
        checkpoint.save_atomic({"policy": torch.zeros(1 << 20)}, path)  # 4 MB on a 1 MB disk
    assert torch.equal(checkpoint.read(path)["policy"], torch.zeros(1000))
    assert list(path.parent.iterdir()) == [path]


def test_a_run_dir_on_a_full_disk_is_one_line_before_anything_starts(small_disk, tmp_path):
    """A full disk still makes a folder (the probe used to stop there): Hydra then failed writing
    its config with a traceback."""
    filler = small_disk / "filler"
    with contextlib.suppress(OSError):  # fill it to the last byte
        with filler.open("wb") as out:
            while True:
                out.write(bytes(64 * 1024))
    result = subprocess.run([sys.executable, "-m", "puffer", f"hydra.run.dir={small_disk / 'run'}"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        f"hydra.run.dir='{small_disk / 'run'}': {small_disk} refuses to store a file (No space left on device), "
        "so the run's outputs cannot be written there; pass a writable hydra.run.dir=<folder> (or run from a "
        "writable directory)"], result.stderr
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]  # nothing left behind


def test_resume_from_model_pt_says_it_holds_a_policy_only(make_cfg, tmp_path):
    run(make_cfg("train.total_timesteps=512", "train.num_steps=64", "eval.episodes=0"), tmp_path / "a")
    with pytest.raises(CheckpointError, match="holds a trained policy only .*checkpoints/epoch_"):
        run(make_cfg(f"resume={tmp_path / 'a' / 'model.safetensors'}"), tmp_path / "b")


def test_an_unreadable_newest_checkpoint_falls_back_to_the_previous_one(make_cfg, tmp_path, caplog):
    small = ["train.total_timesteps=1024", "train.num_steps=64", "eval.episodes=0"]
    run(make_cfg(*small, "runtime.checkpoint_interval=1", "runtime.keep_checkpoints=0"), tmp_path / "a")
    checkpoints = sorted((tmp_path / "a" / "checkpoints").glob("epoch_*.pt"))
    newest = checkpoints[-1]
    newest.write_bytes(newest.read_bytes()[:100])  # torn
    path, state = checkpoint.load(str(tmp_path / "a"))
    assert path == checkpoints[-2] and state["epoch"] == 1
    assert str(newest) in caplog.text and "not a readable checkpoint" in caplog.text
    with pytest.raises(CheckpointError, match=f"{newest}.* is not a readable checkpoint"):
        checkpoint.load(str(newest))  # a file named explicitly: no silent substitute
    (tmp_path / "garbage.pt").write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match="garbage.pt is not a readable checkpoint"):
        run(make_cfg(*small, f"resume={tmp_path / 'garbage.pt'}"), tmp_path / "b")


def test_resume_latest_leaves_multirun_jobs_out(tmp_path):
    single = tmp_path / "2026-12-04" / "10-00-00" / "checkpoints" / "epoch_000001.pt"
    swept = tmp_path / "multirun" / "2026-12-04" / "11-00-00" / "0" / "checkpoints" / "epoch_000001.pt"
    for path in (single, swept):
        checkpoint.save_atomic({"policy": {}}, path)
        time.sleep(0.05)
    assert checkpoint.find_latest(tmp_path) == single


def test_resume_with_another_architecture_names_every_difference(make_cfg, tmp_path):
    run(make_cfg("train.total_timesteps=512", "train.num_steps=64", "policy.hidden_size=64", "eval.episodes=0"),
        tmp_path / "a")
    with pytest.raises(puffer.config.ConfigError) as info:
        run(make_cfg(f"resume={tmp_path / 'a'}", "policy.hidden_size=32", "policy.activation=relu",
                     "train.num_steps=32"), tmp_path / "b")
    message = str(info.value)
    for expected in ("policy.hidden_size: 64 in the checkpoint, 32 now", "policy.activation: 'tanh'",
                     "train.num_steps: 64 in the checkpoint, 32 now"):
        assert expected in message


def test_resume_continues_the_checkpoints_run_and_only_what_the_command_line_sets_changes(cli, tmp_path):
    """`resume=<run>` alone continues that run as configured (its env, policy, vec, train), not
    the defaults (CartPole): what the command line sets on top is taken, and a setting that
    cannot fit the checkpoint is an error naming it."""
    import yaml

    first = ["env=classic/acrobot", "policy.hidden_size=32", "vec.num_envs=4", "train.num_steps=32",
             "train.learning_rate=0.001", "eval.episodes=0"]
    cli(*first, "train.total_timesteps=256")  # 2 epochs of 4 x 32
    original = tmp_path / "original"
    (tmp_path / "run").rename(original)
    cli(f"resume={original}", "train.total_timesteps=512", "eval.episodes=0")
    config = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert config["env"]["id"] == "Acrobot-v1" and config["policy"]["hidden_size"] == 32
    assert config["vec"]["num_envs"] == 4 and config["train"]["learning_rate"] == 0.001
    assert config["train"]["total_timesteps"] == 512  # set on this command line
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("*.pt"))[-1] == "epoch_000004.pt"
    failed = cli(f"resume={original}", "policy.hidden_size=64", check=False)
    output = failed.stdout + failed.stderr
    assert failed.returncode == 2 and "policy.hidden_size: 32 in the checkpoint, 64 now" in output


def test_a_resumed_config_takes_another_kind_of_env_whole_and_the_command_line_on_top(make_cfg):
    cfg = make_cfg("resume=x", "train.learning_rate=0.01", "eval.episodes=3")
    saved = {"env": {"_target_": "puffer.envs.atari.make", "game": "breakout", "frameskip": 4},
             "policy": {"_target_": "puffer.policies.networks.NatureCNN", "hidden_size": 512},
             "train": {"learning_rate": 2.5e-4, "num_steps": 128}, "eval": {"episodes": 99}, "seed": 3}
    resumed = resume.resumed_config(cfg, {"config": saved}, ["resume=x", "train.learning_rate=0.01",
                                                                 "eval.episodes=3"])
    assert dict(resumed.env) == saved["env"] and "id" not in resumed.env  # not merged into CartPole's
    assert resumed.policy._target_ == "puffer.policies.networks.NatureCNN" and resumed.seed == 3
    assert resumed.train.num_steps == 128 and resumed.train.learning_rate == 0.01  # the override wins
    assert resumed.eval.episodes == 3  # how this invocation evaluates is its own
    assert resume.resumed_config(cfg, {"config": saved}, None) is cfg  # built in Python: as given


def test_a_checkpoint_from_before_the_runtime_section_resumes_with_its_keys_moved(make_cfg):
    """Checkpoints written when checkpoints, threads and precision were train.* keys: those
    keys go to runtime, so the resumed run goes on saving and threading as it did."""
    cfg = make_cfg("resume=x", "runtime.keep_checkpoints=2")
    saved = {"train": {"learning_rate": 0.01, "checkpoint_interval": 5, "keep_checkpoints": 0,
                       "torch_threads": 1, "amp": None, "log_interval": 2.0}}
    resumed = resume.resumed_config(cfg, {"config": saved}, ["resume=x", "runtime.keep_checkpoints=2"])
    assert resumed.train.learning_rate == 0.01 and "checkpoint_interval" not in resumed.train
    assert resumed.runtime.checkpoint_interval == 5 and resumed.runtime.torch_threads == 1
    assert resumed.runtime.log_interval == 2.0
    assert resumed.runtime.keep_checkpoints == 2  # the command line wins
    # and keys renamed since: vec.batch_size (envs per recv), an ocean env's num_envs (its rows)
    old = {"env": {"_target_": "puffer.envs.ocean.CartPole", "num_envs": 64, "max_steps": 500},
           "vec": {"num_envs": 2, "batch_size": 1}}
    resumed = resume.resumed_config(make_cfg("resume=x"), {"config": old}, ["resume=x"])
    assert resumed.vec.envs_per_batch == 1 and resumed.env.num_rows == 64 and "num_envs" not in resumed.env


def test_eval_uses_the_checkpoints_env_unless_told_otherwise(make_cfg, tmp_path):
    run(make_cfg("env=classic/acrobot", "train.total_timesteps=512", "train.num_steps=32",
                 "eval.episodes=0"), tmp_path / "a")
    # no env= here: the default env (CartPole) would not even fit the Acrobot policy
    metrics = run(make_cfg("mode=eval", f"checkpoint={tmp_path / 'a'}", "eval.episodes=2"), tmp_path / "b")
    assert metrics["eval/length_mean"] > 100 and metrics["eval/return_mean"] < 0  # Acrobot's


def test_a_full_disk_under_the_metrics_file_is_said_once_and_training_code_goes_on(small_disk, caplog):
    from puffer.loggers.base import JsonlLogger

    logger = JsonlLogger(small_disk / "metrics.jsonl")
    for step in range(20_000):  # ~100 bytes a line: 2 MB on a 1 MB disk
        logger.log({"train/loss": 0.123456789, "perf/sps": 12345.6789, "env/episode_return": 1.5}, step)
    logger.close()
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "the disk is full" in errors[0].getMessage()
    assert "metrics.jsonl" in errors[0].getMessage()


def flaky_cartpole(every=20):
    return GymnasiumPufferEnv(env=Crashing(gym.make("CartPole-v1"), every))


def flaky_every_150(render_mode=None):
    return Crashing(gym.make("CartPole-v1", render_mode=render_mode), 150)


def test_the_interrupted_episode_of_a_restarted_worker_is_left_out_of_the_rollout(caplog):
    import functools

    from puffer.policies.networks import Default
    from puffer.training.rollout import Collector, Rollout

    creators = [functools.partial(flaky_cartpole, 10 ** 9)] * 2 + [functools.partial(flaky_cartpole, 20)] * 2
    with puffer.vector.Multiprocessing(creators, num_envs=4, num_workers=2, restart_failed_workers=1) as vec:
        policy = Default(vec.single_observation_space, vec.single_action_space)
        rollout = Rollout(32, 4, vec.single_observation_space, vec.action_shape, vec.action_dtype,
                          torch.device("cpu"), policy)
        Collector(vec, policy, rollout, seed=0).collect()
    valid, dones = rollout.valid.numpy(), rollout.dones.numpy().astype(bool)
    # worker 1 failed when env 2 or 3 reached its 20th real step (the step after an episode's
    # end only resets): for both of its envs, every step of the episode the crash cut is left
    # out, and the row after the crash holds the restarted env's reset observation (invalid, as
    # after any episode end)
    real = np.ones((32, 4), bool)
    real[1:] = ~dones[:-1]
    crash = min(int(np.flatnonzero(np.cumsum(real[:, row]) == 20)[0]) for row in (2, 3)
                if np.cumsum(real[:, row])[-1] >= 20)
    for row in (2, 3):
        ended = np.flatnonzero(dones[:crash, row])
        start = ended[-1] + 1 if len(ended) else 0
        assert dones[crash, row] and not valid[start : crash + 2, row].any()
        assert (valid[crash + 2 :, row] == ~dones[crash + 1 : -1, row]).all()  # then the usual rule
    for row in (0, 1):  # the other worker's envs: the usual rule only
        assert valid[0, row] and (valid[1:, row] == ~dones[:-1, row]).all()
    assert vec.restarts == 1 and "envs [2, 3] lost their episode to a worker restart" in caplog.text


def test_training_goes_on_through_worker_restarts_and_logs_them(make_cfg, tmp_path):
    gym.register(id="puffer_test/Flaky-v0", entry_point=flaky_every_150)
    small = ["env=classic/gym", "env.id=puffer_test/Flaky-v0", "vec=multiprocessing", "vec.num_envs=4",
             "train.num_steps=64", "train.total_timesteps=2048", "eval.episodes=0"]
    metrics = run(make_cfg(*small, "vec.restart_failed_workers=20"), tmp_path / "healed")
    # 8 epochs of 4 x 64: each env steps 512 times and crashes every 150 steps of a life
    assert metrics["train/epoch"] == 8 and metrics["vec/worker_restarts"] >= 3
    logged = [m["vec/worker_restarts"] for m in read_metrics(tmp_path / "healed" / "metrics.jsonl")]
    assert logged == sorted(logged) and logged[0] < logged[-1]
    with pytest.raises(puffer.vector.WorkerError, match="boom at step 150"):
        run(make_cfg(*small), tmp_path / "plain")  # without restarts the first crash stops it


def test_sighup_to_the_process_group_saves_like_sigterm_and_exits_129(make_cfg, tmp_path):
    """A closed terminal or a dropped ssh session: the epoch ends, a checkpoint is saved, the
    workers (which ignore it) are closed, and the run resumes from it."""
    proc = start_training(tmp_path / "run", "vec=multiprocessing", "train.num_steps=64")
    workers = psutil.Process(proc.pid).children(recursive=True)
    os.killpg(proc.pid, signal.SIGHUP)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 129, output
    assert "SIGHUP: stopping after epoch" in output and "checkpoint saved" in output
    (saved,) = (tmp_path / "run" / "checkpoints").glob("epoch_*.pt")
    state = checkpoint.read(saved)
    assert "_interrupted" not in saved.name and state["rollout"]["env_state"]["backend"] == "multiprocessing"
    time.sleep(1.0)
    assert not [w for w in workers if w.is_running() and w.status() != psutil.STATUS_ZOMBIE]
    resumed = run(make_cfg("vec=multiprocessing", "train.num_steps=64", "eval.episodes=0",
                           f"train.total_timesteps={(state['epoch'] + 1) * 64 * 8}", f"resume={saved}"),
                  tmp_path / "resumed")
    assert resumed["train/epoch"] == state["epoch"] + 1


def test_sigusr1_at_any_moment_of_a_run_is_a_request_never_a_death(tmp_path):
    """From start-up through training and the final evaluation, SIGUSR1 every 0.1 s (to the
    whole group, workers included): the run ends as it would have, with its model and evaluation."""
    args = [sys.executable, "-m", "puffer", f"hydra.run.dir={tmp_path}", "vec=multiprocessing",
            "train.total_timesteps=8192", "train.num_steps=64", "eval.episodes=20", "runtime.log_interval=0"]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    time.sleep(0.4)  # the interpreter's own start (before puffer's first line runs) is not ours to guard
    sent = 0
    while proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGUSR1)
            sent += 1
        except ProcessLookupError:
            break
        time.sleep(0.1)
    output = proc.stdout.read()
    assert proc.returncode == 0, output
    assert sent > 20 and (tmp_path / "model.safetensors").exists()
    assert "eval/return_mean" in (tmp_path / "metrics.jsonl").read_text()


def test_a_disk_that_fills_at_the_final_save_still_keeps_the_model_file(make_cfg, small_disk, caplog):
    """The checkpoint (rollout buffers and envs) does not fit on the disk, the small model file
    does: the run ends with the error named and the trained policy saved."""
    subprocess.run(["mount", "-o", "remount,size=64k", str(small_disk)], check=True)
    with pytest.raises(CheckpointError, match="the disk is full"):
        run(make_cfg("train.total_timesteps=8192", "train.num_steps=512", "eval.episodes=0"), small_disk / "run")
    assert not list((small_disk / "run" / "checkpoints").glob("*.pt"))
    agent = puffer.load(small_disk / "run")
    assert agent.training["global_step"] == 8192 and agent.act(np.zeros(4, np.float32)) in (0, 1)
    assert "the checkpoint could not be written" in caplog.text and "is saved as" in caplog.text


def test_a_second_run_in_the_same_run_dir_is_refused_at_its_start(make_cfg, tmp_path):
    proc = start_training(tmp_path, "train.num_steps=64")
    try:
        with pytest.raises(puffer.errors.ConfigError, match=f"hydra.run.dir=.*another run is writing there "
                                                            f"\\(pid {proc.pid}\\)"):
            run(make_cfg(*SMALL), tmp_path)
        assert len(list((tmp_path / "checkpoints").glob("*.pt"))) == 0  # nothing of the second run
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    metrics = run(make_cfg(*SMALL, "train.total_timesteps=512"), tmp_path)  # free again once it ended
    assert metrics["train/epoch"] == 1


def test_resume_of_a_multirun_continues_each_job_from_its_own_place(tmp_path):
    """`-m seed=0,1 resume=<sweep dir>` launched again with its sweep: job n resumes from
    <sweep>/<n> (its own seed's checkpoint); a job with no checkpoint there (one the interrupted
    multirun never got to) starts from the beginning with a warning; a multirun with no
    checkpoint at all is one line, exit 2."""
    def multirun(*overrides: str, sweep: str = "multirun") -> subprocess.CompletedProcess:
        args = [sys.executable, "-m", "puffer", "-m", f"hydra.sweep.dir={tmp_path / sweep}", *overrides]
        return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)

    first = ["env=classic/cartpole", "vec.num_envs=2", "train.num_steps=32", "eval.episodes=0"]
    assert multirun("seed=0,1", *first, "train.total_timesteps=128", sweep="original").returncode == 0  # 2 epochs
    original = tmp_path / "original"
    shutil.rmtree(original / "1" / "checkpoints")  # job 1 as if never reached
    result = multirun("seed=0,1", *first, "train.total_timesteps=256", f"resume={original}")
    assert result.returncode == 0, result.stderr[-3000:]
    for job, seed, steps in ((0, 0, [192, 256]), (1, 1, [64, 128, 192, 256])):
        log_text = (tmp_path / "multirun" / str(job) / "puffer.log").read_text()
        assert ("resumed from" in log_text) == (job == 0)
        assert f"the whole multirun goes on as the same command with resume={tmp_path / 'multirun'}" in log_text
        rows = [r for r in read_metrics(tmp_path / "multirun" / str(job) / "metrics.jsonl") if "train/loss" in r]
        assert [r["global_step"] for r in rows] == steps
        assert checkpoint.read(tmp_path / "multirun" / str(job) / "checkpoints" / "epoch_000004.pt")["config"]["seed"] \
            == seed
    assert f"resumed from {original / '0'}" in (tmp_path / "multirun" / "0" / "puffer.log").read_text()
    assert "no checkpoint in its 1/" in result.stdout + result.stderr
    shutil.rmtree(original / "0" / "checkpoints")
    failed = multirun("seed=0,1", *first, f"resume={original}", sweep="again")
    output = failed.stdout + failed.stderr
    assert failed.returncode == 2 and "is a multirun with no checkpoint in it" in output
    assert "Traceback" not in output


def test_a_run_of_a_resumed_multirun_finds_its_own_place_in_it(tmp_path):
    """place_in_multirun: a run's directory relative to its sweep names its place in the resumed
    multirun (a job, a trial seed, a members batch); a run dir, a file or a single run's value
    passes through; outside a multirun nothing changes."""
    old, new = tmp_path / "old", tmp_path / "new"
    (old / "multirun.yaml").parent.mkdir()
    (old / "multirun.yaml").write_text("hydra: {}\n")
    for place in ("0", "1/seed_3", "batches/0_2"):
        checkpoint.save_atomic({"policy": {}}, old / place / "checkpoints" / "epoch_000001.pt")
        assert checkpoint.place_in_multirun(str(old), new, new / place) == str(old / place)
    assert checkpoint.place_in_multirun(str(old), new, new / "2") is None  # never reached: starts anew
    assert checkpoint.place_in_multirun(str(old), None, new / "0") == str(old)  # not a multirun now
    assert checkpoint.place_in_multirun(str(old / "0"), new, new / "1") == str(old / "0")  # one run's dir
    assert checkpoint.place_in_multirun(None, new, new / "0") is None
