"""Data-parallel learning through the real `torchrun` (gloo on CPU): puffer.runtime.distributed."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import psutil
import pytest
import torch
from conftest import ROOT, assert_no_marked_process_left, marked_processes, wait_for_epochs

from puffer.files import checkpoint
from puffer.loggers import read_metrics
from puffer.run import run

TORCHRUN = shutil.which("torchrun")
pytestmark = pytest.mark.skipif(TORCHRUN is None, reason="torchrun is not installed")


def torchrun(ranks: int, run_dir: Path, *overrides: str, timeout: float = 300, check: bool = True,
             env: dict | None = None) -> subprocess.CompletedProcess:
    args = [TORCHRUN, "--standalone", f"--nproc-per-node={ranks}", "-m", "puffer", f"hydra.run.dir={run_dir}",
            *overrides]
    result = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                            env={**os.environ, **(env or {})})
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {result.returncode}:\n{result.stdout[-3000:]}\n"
                             f"{result.stderr[-5000:]}")
    return result


def weights(path: Path) -> dict:
    return checkpoint.read(path)["policy"]


def same_weights(a: Path, b: Path) -> bool:
    wa, wb = weights(a), weights(b)
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def test_one_rank_under_torchrun_is_the_plain_run_bit_for_bit(make_cfg, tmp_path):
    small = ["train.total_timesteps=2048", "train.num_steps=64", "eval.episodes=0"]
    torchrun(1, tmp_path / "torchrun", *small)
    run(make_cfg(*small), tmp_path / "plain")
    final = "checkpoints/epoch_000004.pt"
    assert same_weights(tmp_path / "torchrun" / final, tmp_path / "plain" / final)


@pytest.mark.slow
def test_two_ranks_learn_cartpole_at_the_same_total_steps(tmp_path):
    # the shipped CartPole config: 100k env steps in all, 50k per rank
    torchrun(2, tmp_path / "run", "eval.episodes=10")
    (evaluation,) = [m for m in read_metrics(tmp_path / "run" / "metrics.jsonl") if "eval/return_mean" in m]
    assert evaluation["eval/return_mean"] >= 475, evaluation
    records = [m for m in read_metrics(tmp_path / "run" / "metrics.jsonl") if "train/epoch" in m]
    assert records[-1]["global_step"] >= 100_000  # steps of both ranks together
    # rank 0 alone wrote: one run directory, one checkpoint set, the final model
    assert (tmp_path / "run" / "model.safetensors").is_file()
    assert not list(Path("outputs").glob("**/puffer-rank1-*"))


def test_two_ranks_resume_on_two_ranks_bit_for_bit_and_agree_on_their_statistics(tmp_path, make_cfg, caplog):
    small = ["train.total_timesteps=4096", "train.num_steps=64", "eval.episodes=0", "policy.norm_obs=true",
             "train.norm_reward=true", "runtime.checkpoint_interval=2", "runtime.keep_checkpoints=0"]
    torchrun(2, tmp_path / "full", *small)  # 4 epochs of 2 ranks x 8 envs x 64 steps
    checkpoints = tmp_path / "full" / "checkpoints"
    state = checkpoint.read(checkpoints / "epoch_000002.pt")
    assert len(state["ranks"]) == 2 and state["global_step"] == 2 * 2 * 8 * 64
    # the ranks' envs are their own (seeds apart), their saved states too
    assert state["ranks"][0]["rng"]["generator"].ne(state["ranks"][1]["rng"]["generator"]).any()
    # and both scale rewards by the same statistics, of both ranks' returns
    scales = [part["rollout"]["reward_scaler"]["return_rms"] for part in state["ranks"]]
    assert all(torch.equal(scales[0][k], scales[1][k]) for k in scales[0])
    assert scales[0]["count"] > 2 * 8 * 64  # more valid steps than one rank's 2 rollouts hold
    torchrun(2, tmp_path / "resumed", *small, f"resume={checkpoints / 'epoch_000002.pt'}")
    final = "checkpoints/epoch_000004.pt"
    assert same_weights(tmp_path / "full" / final, tmp_path / "resumed" / final)
    # observation statistics merged over both ranks' rollouts: 4 epochs x 2 ranks x 8 x 64 rows at
    # most (dummy reset steps are left out)
    count = weights(tmp_path / "full" / final)["obs_rms.count"]
    assert 4 * 8 * 64 < count <= 4 * 2 * 8 * 64
    # the same checkpoint on one process: weights and counters restored, and a warning that the
    # other rank's envs and random states are not
    resumed = run(make_cfg(*small, f"resume={checkpoints / 'epoch_000002.pt'}"), tmp_path / "single")
    assert "saved by 2 rank(s), this run has 1" in caplog.text
    assert resumed["train/epoch"] == 8  # 2 saved epochs of 2 ranks count as 4 of one: 4 more to 4096 steps


def start_two_ranks(tmp_path: Path, marker: str, *overrides: str, launcher: tuple = (TORCHRUN,)) -> subprocess.Popen:
    args = [*launcher, "--standalone", "--nproc-per-node=2", "-m", "puffer", f"hydra.run.dir={tmp_path}",
            "train.total_timesteps=100000000", "runtime.log_interval=0", "dist.timeout=30", *overrides]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PUFFER_TEST_MARKER": marker}, start_new_session=True)
    wait_for_epochs(proc, tmp_path)
    return proc


def rank_process(marker: str, rank: int) -> psutil.Process:
    (process,) = [p for p in marked_processes(marker)
                  if p.environ().get("RANK") == str(rank) and "puffer" in " ".join(p.cmdline())
                  and p.environ().get("LOCAL_RANK") is not None and p.ppid() != os.getpid()
                  and not p.cmdline()[0].endswith("torchrun")][:1]
    return process


def test_a_rank_that_dies_ends_the_job_with_an_error_naming_it_and_leaves_no_process(tmp_path):
    marker = uuid.uuid4().hex
    proc = start_two_ranks(tmp_path, marker)
    victim = rank_process(marker, 1)
    victim.kill()
    started = time.monotonic()
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0 and time.monotonic() - started < 60
    assert "rank      : 1" in output and "Signal 9 (SIGKILL)" in output, output[-3000:]
    assert_no_marked_process_left(marker)


def test_sigterm_to_one_rank_saves_one_checkpoint_from_rank_0_and_every_rank_exits(tmp_path):
    marker = uuid.uuid4().hex
    proc = start_two_ranks(tmp_path, marker, "train.num_steps=64")
    rank_process(marker, 1).send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=120)
    (saved,) = (tmp_path / "checkpoints").glob("epoch_*.pt")
    state = checkpoint.read(saved)
    assert len(state["ranks"]) == 2 and state["global_step"] == state["epoch"] * 2 * 8 * 64
    assert "checkpoint saved" in output and "a signal to another rank" in output, output[-3000:]
    assert_no_marked_process_left(marker)


def test_sigusr1_to_a_torchrun_group_leaves_no_orphan_and_the_ranks_save(tmp_path):
    """torchrun itself dies of SIGUSR1 (its default action; it is not puffer's to handle), and its
    ranks, in a process group of their own, never see it: they now get SIGHUP from the kernel as
    their parent ends (once per thread of it), save at their epoch boundary and exit, instead of
    training on as orphans."""
    marker = uuid.uuid4().hex
    proc = start_two_ranks(tmp_path, marker, "train.num_steps=64")
    os.killpg(proc.pid, signal.SIGUSR1)
    output, _ = proc.communicate(timeout=120)
    assert_no_marked_process_left(marker, within=90)
    saved = sorted((tmp_path / "checkpoints").glob("epoch_*.pt"))
    log = (tmp_path / "puffer.log").read_text() if (tmp_path / "puffer.log").exists() else ""
    assert saved and len(checkpoint.read(saved[-1])["ranks"]) == 2, output[-3000:] + log[-3000:]


def test_puffer_torchrun_passes_sigusr1_on_and_ends_a_sigterm_with_one_line_and_status_130(tmp_path):
    """puffer.cli.torchrun: torchrun in-process; plain torchrun dies of SIGUSR1 and ends a SIGTERM
    with exit 1 and its SignalException's traceback."""
    import sys

    marker = uuid.uuid4().hex
    proc = start_two_ranks(tmp_path, marker, "train.num_steps=64",
                           launcher=(sys.executable, "-m", "puffer.cli.torchrun"))
    os.killpg(proc.pid, signal.SIGUSR1)  # a checkpoint, and training goes on
    deadline = time.monotonic() + 60
    while not list((tmp_path / "checkpoints").glob("epoch_*.pt")) and time.monotonic() < deadline:
        time.sleep(0.2)
    (requested,) = (tmp_path / "checkpoints").glob("epoch_*.pt")
    time.sleep(1.0)
    assert proc.poll() is None
    os.killpg(proc.pid, signal.SIGTERM)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, output[-3000:]
    assert "Traceback" not in output and output.count("SIGTERM: the ranks were asked to save") == 1, output[-3000:]
    stopped = max((tmp_path / "checkpoints").glob("epoch_*.pt"))
    assert stopped != requested and len(checkpoint.read(stopped)["ranks"]) == 2
    assert_no_marked_process_left(marker)


def test_slurm_tasks_of_the_submitit_launcher_become_ranks(monkeypatch):
    """What SLURM sets for task 3 of 4 on the second of two nodes: submitit's environment turns
    it into torchrun's variables, which puffer.runtime.distributed.init then joins."""
    pytest.importorskip("submitit")
    from puffer.runtime import distributed

    # submitit writes os.environ itself: a copy of it here, so nothing leaks into later tests
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items()
                                        if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                     "MASTER_PORT")})
    slurm = {"SUBMITIT_EXECUTOR": "slurm", "SLURM_JOB_ID": "123", "SLURM_NTASKS": "4", "SLURM_PROCID": "3",
             "SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "gpu[7-8]"}
    os.environ.update(slurm)
    assert distributed.launched()
    assert (os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ["LOCAL_RANK"]) == ("3", "4", "1")
    assert os.environ["MASTER_ADDR"] == "gpu7"
    os.environ["SLURM_NTASKS"] = "1"  # one task: a plain run
    del os.environ["RANK"], os.environ["WORLD_SIZE"]
    assert not distributed.launched()


def test_no_launcher_variable_leaks_out_of_these_tests():
    assert not {"RANK", "WORLD_SIZE", "SUBMITIT_EXECUTOR"} & set(os.environ)
