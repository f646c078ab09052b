"""Profiler, verdict, dashboard, and W&B failures that never stop training."""

from __future__ import annotations

import json
import logging
import time

import gymnasium as gym
import pytest
from rich.console import Console
from wandb_records import finished_run_records

import puffer.vector
from puffer.config import TrainConfig
from puffer.emulation import GymnasiumPufferEnv
from puffer.loggers import read_metrics
from puffer.monitor import profiler
from puffer.monitor.progress import line, render, snapshot
from puffer.policies.networks import Default
from puffer.run import run
from puffer.training.ppo import PPO


def cartpole():
    return GymnasiumPufferEnv(env=gym.make("CartPole-v1"))


def test_sections_add_up_to_the_measured_wall_time():
    vec = puffer.vector.make(cartpole, num_envs=4)
    trainer = PPO(TrainConfig(total_timesteps=8192, num_steps=128), vec,
                  Default(vec.single_observation_space, vec.single_action_space))
    started = time.perf_counter()
    metrics = trainer.train()
    wall = time.perf_counter() - started
    vec.close()
    sections = sum(metrics[f"perf/{name}_s"] for name in ("env", "forward", "copy", "learn", "misc"))
    assert sections == pytest.approx(metrics["perf/wall_s"], rel=1e-6)
    assert metrics["perf/wall_s"] == pytest.approx(wall, rel=0.1)
    # the named sections cover the real work: misc is ~3% on a quiet machine, 6.2% was seen with
    # both cores busy beside the suite (issue 46: green on a busy machine)
    assert metrics["perf/misc_pct"] < 10
    assert metrics["perf/env_s"] > 0 and metrics["perf/learn_s"] > 0 and metrics["perf/forward_s"] > 0


@pytest.mark.parametrize(
    ("shares", "expected"),
    [
        ({"env": 71, "forward": 10, "copy": 4, "learn": 12, "misc": 3}, "env-bound: 71% of time in env; try vec=multiprocessing"),
        ({"env": 10, "forward": 20, "copy": 5, "learn": 60, "misc": 5}, "model-bound: 80% of time in the policy"),
        ({"env": 10, "forward": 5, "copy": 70, "learn": 10, "misc": 5}, "copy-bound: 70%"),
    ],
)
def test_verdict_names_the_bottleneck_and_what_to_try(shares, expected):
    metrics = {f"perf/{k}_pct": v for k, v in shares.items()}
    assert profiler.verdict(metrics).startswith(expected)


def test_profile_mode_prints_a_breakdown_and_a_verdict_and_writes_a_trace(make_cfg, tmp_path, capsys):
    cfg = make_cfg("mode=profile", "profile.timesteps=512", "train.num_steps=32", "profile.torch_trace=true")
    metrics = run(cfg, tmp_path)
    out = capsys.readouterr().out
    assert "verdict: " in out and "learn" in out and "steps/second" in out
    assert (tmp_path / "profile.txt").read_text().count("%") >= 5
    assert json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert metrics["train/epoch"] == 2  # 512 steps: two epochs of 8 envs x 32
    assert not (tmp_path / "model.safetensors").exists()  # a profile run is not a training run


def test_dashboard_shows_progress_sections_and_losses():
    class Trainer:
        global_step, num_epochs, steps_per_epoch, epoch = 2048, 10, 512, 4
        last_metrics = {"perf/sps": 1000.0, "perf/env_pct": 40.0, "perf/learn_pct": 50.0,
                        "train/policy_loss": -0.01, "env/episode_return": 42.0}

    s = snapshot(Trainer())
    console = Console(record=True, width=100)
    console.print(render("CartPole-v1", s))
    text = console.export_text()
    assert "2,048 / 5,120" in text and "ETA 3s" in text and "1,000" in text
    assert "learn" in text and "50.0%" in text and "policy_loss" in text and "42.00" in text
    assert "return 42.0" in line("CartPole-v1", s)


def test_a_wandb_failure_never_stops_training(make_cfg, tmp_path, monkeypatch, caplog):
    import wandb

    def broken_log(self, *args, **kwargs):
        raise ConnectionError("W&B is down")

    monkeypatch.setattr(wandb.Run, "log", broken_log)
    with caplog.at_level(logging.WARNING):
        metrics = run(make_cfg("logger=wandb", "train.total_timesteps=1024", "eval.episodes=1"), tmp_path)
    assert metrics["eval/episodes"] == 1
    warnings = [r for r in caplog.records if "W&B log failed" in r.getMessage()]
    assert len(warnings) == 1
    assert read_metrics(tmp_path / "metrics.jsonl")[-1]["eval/episodes"] == 1


def test_the_breakdown_table_reaches_wandb(make_cfg, tmp_path):
    run(make_cfg("logger=wandb", "train.total_timesteps=512", "eval.episodes=0"), tmp_path)
    records = finished_run_records(tmp_path)
    keys = {item.key or "/".join(item.nested_key) for r in records if r.HasField("history")
            for item in r.history.item}
    assert {"perf/breakdown/_type", "perf/breakdown_chart_table/_type"} <= keys
    (table,) = tmp_path.glob("wandb/offline-run-*/files/media/table/perf/breakdown_*.table.json")
    content = json.loads(table.read_text())
    assert content["columns"] == ["section", "seconds", "percent"]
    assert [row[0] for row in content["data"]] == ["env", "forward", "copy", "learn", "misc"]
    assert sum(row[2] for row in content["data"]) == pytest.approx(100, abs=0.01)


def test_eta_and_missing_returns_read_as_people_write_them():
    from puffer.monitor.progress import duration, number

    assert [duration(x) for x in (3.2, 185, 1613, 3723)] == ["3s", "3:05", "26:53", "1:02:03"]
    assert duration(float("nan")) == "-" and number(float("nan"), 1) == "-" and number(2.345, 2) == "2.35"


def test_log_records_go_through_the_dashboards_console_while_it_is_up(make_cfg):
    """A log record during the live dashboard (a warning, where a checkpoint went) must print
    above it, through rich's redirected stream, not be drawn over by its next refresh."""
    import logging
    import sys

    from puffer.monitor.progress import ProgressReporter, env_name

    handler = logging.StreamHandler(sys.__stderr__)
    logging.getLogger().addHandler(handler)
    try:
        reporter = ProgressReporter(env_name(make_cfg()), live=True)

        class Trainer:
            last_metrics, global_step, epoch, num_epochs, steps_per_epoch = {}, 0, 0, 4, 256

        reporter(Trainer())
        assert handler.stream is not sys.__stderr__ and handler.stream is sys.stderr  # rich's proxy
        reporter.close()
        assert handler.stream is sys.__stderr__
    finally:
        logging.getLogger().removeHandler(handler)


def test_the_dashboard_in_a_terminal_shows_where_the_checkpoint_went_after_ctrl_c(tmp_path):
    """The real CLI in a pseudo-terminal (so stdout is a tty and the live dashboard is up):
    after Ctrl-C, the lines saying where the checkpoint and the run went are on the terminal,
    not only in the log file."""
    import os
    import pty
    import signal
    import subprocess
    import sys
    import threading

    from conftest import ROOT, wait_for_epochs

    primary, secondary = pty.openpty()
    args = [sys.executable, "-m", "puffer", f"hydra.run.dir={tmp_path}", "train.total_timesteps=10000000"]
    proc = subprocess.Popen(args, cwd=ROOT, stdin=secondary, stdout=secondary, stderr=secondary,
                            env={**os.environ, "TERM": "xterm", "COLUMNS": "120"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    os.close(secondary)
    chunks: list[bytes] = []

    def read_terminal():
        while True:
            try:
                data = os.read(primary, 4096)
            except OSError:  # EIO: every writer closed the terminal
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read_terminal, daemon=True)
    reader.start()
    wait_for_epochs(proc, tmp_path, output=lambda: b"".join(chunks).decode(errors="replace"))
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130
    reader.join(timeout=10)
    os.close(primary)
    screen = b"".join(chunks).decode(errors="replace")
    assert "puffer | CartPole-v1" in screen and "ETA" in screen  # the live dashboard was drawn
    saved = list((tmp_path / "checkpoints").glob("epoch_*.pt"))
    assert len(saved) == 1 and f"checkpoint saved to {saved[0]}" in screen.replace("\r\n", "")
    assert f"outputs in {tmp_path}" in screen.replace("\r\n", "")
    last = screen[screen.rindex("outputs in"):].replace("\r\n", "")  # the last lines a user sees:
    assert f"continue: python -m puffer resume={tmp_path}" in last and "ETA" not in last  # no dashboard
