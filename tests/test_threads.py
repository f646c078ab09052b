"""The thread policy (puffer.runtime.threads) and what the profiler sees of the machine (puffer.monitor.machine)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time

import gymnasium as gym
import pytest
import torch
from conftest import ROOT
from gymnasium import spaces

import puffer.emulation
import puffer.vector
from puffer.config import RuntimeConfig, TrainConfig
from puffer.files import model_file
from puffer.loggers.base import read_metrics
from puffer.monitor.machine import MachineUsage
from puffer.monitor.profiler import verdict
from puffer.policies.networks import Default, NatureCNN
from puffer.policies.wrappers import LSTMWrapper
from puffer.runtime import threads
from puffer.runtime.threads import ThreadPlan
from puffer.training.ppo import PPO

CARTPOLE_OBS = spaces.Box(-1, 1, (4,), "float32")
ATARI_OBS = spaces.Box(0, 255, (4, 84, 84), "uint8")


def cartpole():
    return puffer.emulation.GymnasiumPufferEnv(env=gym.make("CartPole-v1"))


@pytest.fixture
def four_cpus(monkeypatch):
    monkeypatch.setattr(threads, "usable_cpus", lambda: 4)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)


def test_a_cgroup_quota_caps_the_cpus(tmp_path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert threads.cgroup_cpu_limit(tmp_path) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert threads.cgroup_cpu_limit(tmp_path) is None
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("300000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert threads.cgroup_cpu_limit(tmp_path) == 3.0
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert threads.cgroup_cpu_limit(tmp_path) is None


def test_small_models_learn_on_one_thread_and_a_cnn_on_its_share(four_cpus):
    mlp = Default(CARTPOLE_OBS, spaces.Discrete(2))
    cnn = NatureCNN(ATARI_OBS, spaces.Discrete(4))
    assert threads.plan(mlp, CARTPOLE_OBS, minibatch_rows=256, rollout_rows=8).learn == 1
    # A Nature CNN step over 256 frames is ~14 GFLOP: every CPU of the share helps.
    plan = threads.plan(cnn, ATARI_OBS, minibatch_rows=256, rollout_rows=4)
    assert (plan.learn, plan.share, plan.cpus) == (4, 4, 4)
    # Collecting: a forward over 4 frames is small, and workers stepping envs need the cores.
    assert plan.rollout == 1
    explicit = threads.plan(cnn, ATARI_OBS, 256, 4, torch_threads=3, rollout_threads=2)
    assert (explicit.learn, explicit.rollout) == (3, 2)


def test_an_explicit_omp_num_threads_is_respected(four_cpus, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # what torchrun sets for each rank
    cnn = NatureCNN(ATARI_OBS, spaces.Discrete(4))
    plan = threads.plan(cnn, ATARI_OBS, minibatch_rows=256, rollout_rows=4)
    assert (plan.learn, plan.share) == (1, 1) and "OMP_NUM_THREADS=1" in plan.why


def test_the_flop_count_is_torchs_for_a_linear_layer():
    layer = torch.nn.Linear(4, 3)
    assert threads.forward_flops(layer, CARTPOLE_OBS, rows=10) == 2 * 4 * 3 * 10
    assert threads.learn_step_flops(layer, CARTPOLE_OBS, rows=10) == 3 * 2 * 4 * 3 * 10
    # A Gaussian head (its log_std is a parameter view), also from inside inference mode.
    gaussian = Default(CARTPOLE_OBS, spaces.Box(-2, 2, (1,), "float32"))
    outside = threads.forward_flops(gaussian, CARTPOLE_OBS, rows=10)
    with torch.inference_mode():
        assert threads.forward_flops(gaussian, CARTPOLE_OBS, rows=10) == outside > 0


def test_the_flop_count_is_torchs_flop_counters():
    from torch.utils.flop_counter import FlopCounterMode

    def torchs(policy, space):
        counter = FlopCounterMode(display=False)
        with counter:
            policy(torch.zeros((1, *space.shape), dtype=torch.float32 if space.dtype == "float32" else torch.uint8))
        return counter.get_total_flops()

    cases = [(Default(CARTPOLE_OBS, spaces.Discrete(2)), CARTPOLE_OBS),
             (Default(CARTPOLE_OBS, spaces.Box(-2, 2, (1,), "float32")), CARTPOLE_OBS),
             (NatureCNN(ATARI_OBS, spaces.Discrete(4)), ATARI_OBS),
             (LSTMWrapper(Default(CARTPOLE_OBS, spaces.Discrete(2))), CARTPOLE_OBS)]
    for policy, space in cases:
        assert threads.forward_flops(policy, space, rows=3) == 3 * torchs(policy, space) > 0


def test_counting_flops_leaves_torchs_compiler_unloaded():
    # torch's FlopCounterMode imports torch._dynamo on its first op: 1 s of a batch's start-up.
    code = ("import sys, torch; from gymnasium import spaces; from puffer.runtime import threads; "
            "layer = torch.nn.Linear(4, 3); "
            "assert threads.forward_flops(layer, spaces.Box(-1, 1, (4,)), rows=1) == 24; "
            "assert 'torch._dynamo' not in sys.modules, 'torch._dynamo was imported'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(("backend", "rollout_threads", "expected"),
                         [("serial", 0, 1), ("multiprocessing", 0, 1), ("multiprocessing", 2, 2)])
def test_the_trainer_collects_and_learns_with_the_planned_threads(backend, rollout_threads, expected):
    vec = puffer.vector.make(cartpole, num_envs=2, backend=backend, num_workers=1)
    policy = Default(vec.single_observation_space, vec.single_action_space)
    trainer = PPO(TrainConfig(num_steps=8, total_timesteps=32), vec, policy,
                  runtime=RuntimeConfig(rollout_threads=rollout_threads, torch_threads=2))
    seen = {}

    def forward(obs):
        seen.setdefault("learn" if torch.is_grad_enabled() else "collect", set()).add(torch.get_num_threads())
        return policy(obs)

    trainer.forward = trainer.collector.acting.forward = forward
    before = torch.get_num_threads()
    with vec:
        metrics = trainer.train()
    assert seen == {"collect": {expected}, "learn": {2}}
    assert torch.get_num_threads() == before  # the plan applies inside the trainer only
    assert (metrics["perf/threads_learn"], metrics["perf/threads_rollout"]) == (2, expected)


def test_a_resumed_run_keeps_the_thread_counts_it_was_saved_with(caplog):
    current = ThreadPlan(learn=1, rollout=1, cpus=2, share=2, why="the whole machine")
    saved = {"learn": 2, "rollout": 1, "cpus": 16, "share": 16, "why": "the whole machine"}
    with caplog.at_level(logging.WARNING, logger="puffer.runtime.threads"):
        plan = threads.resumed(current, saved, RuntimeConfig())
    assert (plan.learn, plan.rollout) == (2, 1)
    assert "as the checkpoint ran" in caplog.text
    # An explicit runtime.torch_threads wins over the checkpoint.
    assert threads.resumed(current, saved, RuntimeConfig(torch_threads=3)).learn == 3


def test_a_checkpoint_carries_the_thread_plan_back_into_the_trainer():
    vec = puffer.vector.make(cartpole, num_envs=2)
    policy = Default(vec.single_observation_space, vec.single_action_space)
    with vec:
        trainer = PPO(TrainConfig(num_steps=8, total_timesteps=16), vec, policy)
        trainer.train()
        state = trainer.state_dict()
        state["threads"]["learn"] = 2
        trainer.load_state_dict(state)
    assert trainer.threads.learn == 2


def test_the_joblib_launcher_splits_the_cpus_among_its_jobs(tmp_path):
    args = [sys.executable, "-m", "puffer", "-m", "hydra/launcher=local_parallel", "hydra.launcher.n_jobs=2",
            "seed=0,1", "train.total_timesteps=512", "eval.episodes=1", f"hydra.sweep.dir={tmp_path}"]
    result = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    cpus = len(os.sched_getaffinity(0))
    for job in ("0", "1"):
        record = [r for r in read_metrics(tmp_path / job / "metrics.jsonl") if "perf/cpu_share" in r][-1]
        assert record["perf/cpu_share"] == max(1, cpus // 2)
        assert record["perf/threads_learn"] == 1


def spinners(n: int) -> list[subprocess.Popen]:
    """n processes that keep a core busy each, until killed."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def test_the_same_seed_gives_the_same_model_on_a_busy_machine(cli, tmp_path):
    """The thread plan depends on the machine, never on its load."""
    args = ("train.total_timesteps=4096", "eval.episodes=2")
    cli(*args, "hydra.run.dir=" + str(tmp_path / "quiet"))
    busy = spinners(os.cpu_count() or 2)
    try:
        cli(*args, "hydra.run.dir=" + str(tmp_path / "busy"))
    finally:
        for process in busy:
            process.kill()
            process.wait()
    quiet_model = model_file.read(tmp_path / "quiet" / "model.safetensors").state_dict
    busy_model = model_file.read(tmp_path / "busy" / "model.safetensors").state_dict
    assert quiet_model.keys() == busy_model.keys()
    assert all(torch.equal(quiet_model[k], busy_model[k]) for k in quiet_model)
    last = [r for r in read_metrics(tmp_path / "busy" / "metrics.jsonl") if "perf/cpu_others_pct" in r][-1]
    assert last["perf/cpu_others_pct"] >= 25, last  # the spinners were seen as other processes


def test_worker_processes_cpu_time_is_counted_as_workers():
    usage = MachineUsage()
    child = subprocess.Popen([sys.executable, "-c",
                              "import time\nend = time.time() + 1.5\nwhile time.time() < end: pass"])
    try:
        time.sleep(1.2)
        metrics = usage.metrics()
    finally:
        child.wait()
    # 1.2 s of one busy core of len(affinity) CPUs; the interpreter's start-up costs some of it.
    share = 100 / len(os.sched_getaffinity(0))
    assert metrics["perf/cpu_workers_pct"] >= 0.4 * share, metrics
    assert metrics["perf/mem_main_mb"] > 0 and metrics["perf/cpus"] == len(os.sched_getaffinity(0))


def test_the_verdict_says_when_other_processes_held_the_cpus():
    split = {"perf/env_pct": 80.0, "perf/forward_pct": 5.0, "perf/learn_pct": 10.0,
             "perf/copy_pct": 2.0, "perf/misc_pct": 3.0}
    assert verdict({**split, "perf/cpu_others_pct": 5.0}).startswith("env-bound")
    contended = verdict({**split, "perf/cpu_others_pct": 60.0})
    assert contended.startswith("contended: other processes used 60% of this run's CPUs")
    assert "env-bound: 80% of time in env" in contended


def test_importing_puffer_bounds_openmp_spinning_unless_told_otherwise():
    code = "import puffer, os; print(os.environ.get('GOMP_SPINCOUNT'))"
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True)
    assert out.stdout.strip() == "3000"
    out = subprocess.run([sys.executable, "-c", code], env={**env, "OMP_WAIT_POLICY": "ACTIVE"},
                         cwd=ROOT, capture_output=True, text=True)
    assert out.stdout.strip() == "None"
