"""Loggers beside metrics.jsonl: TensorBoard event files read back with TensorBoard's reader,
several backends at once, and a wrong backend named."""

from __future__ import annotations

import pytest

from puffer.errors import ConfigError
from puffer.loggers import read_metrics
from puffer.run import run

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")


def scalars(run_dir):
    (directory,) = {p.parent for p in (run_dir / "tensorboard").glob("events.out.tfevents.*")}
    accumulator = event_accumulator.EventAccumulator(str(directory))
    accumulator.Reload()
    return {tag: accumulator.Scalars(tag) for tag in accumulator.Tags()["scalars"]}


def test_tensorboard_gets_the_same_namespaced_metrics_as_the_metrics_file(make_cfg, tmp_path):
    run(make_cfg("logger=tensorboard", "train.total_timesteps=1024", "train.num_steps=32", "eval.episodes=2"), tmp_path)
    logged = scalars(tmp_path)
    records = read_metrics(tmp_path / "metrics.jsonl")
    losses = [r["train/policy_loss"] for r in records if "train/policy_loss" in r]
    assert [e.step for e in logged["train/policy_loss"]] == [256, 512, 768, 1024]
    assert [e.value for e in logged["train/policy_loss"]] == pytest.approx(losses, rel=1e-6)
    assert {"perf/sps", "env/episode_return", "eval/return_mean"} <= set(logged)


def test_wandb_and_tensorboard_at_once(make_cfg, tmp_path):
    run(make_cfg("logger=wandb", "logger.mode=offline", "logger.backends=[wandb,tensorboard]",
                 "train.total_timesteps=512", "eval.episodes=1"), tmp_path)
    assert "train/policy_loss" in scalars(tmp_path)
    assert list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))


def test_an_unknown_logger_backend_is_named(make_cfg, tmp_path):
    with pytest.raises(ConfigError, match=r"logger.backends=\['tensorbord'\]: expected a list of"):
        run(make_cfg("logger.backends=[tensorbord]"), tmp_path)
