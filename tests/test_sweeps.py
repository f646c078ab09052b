"""Multirun grids, sweeper and launcher configs, the report, and the eval/benchmark modes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from wandb_records import finished_run_records

import puffer.config  # noqa: F401
from puffer.report import report
from puffer.run import run
from puffer.vector.benchmark import RLBenchmark

ROOT = Path(__file__).resolve().parents[1]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_a_real_multirun_grid_then_the_report(tmp_path):
    sweep = tmp_path / "sweep"
    args = [sys.executable, "-m", "puffer", "-m", "env=classic/cartpole,ocean/cartpole", "seed=0,1,2",
            "train.total_timesteps=2048", "eval.episodes=3", "logger=wandb",
            f"hydra.sweep.dir={sweep}"]
    loud = {key: value for key, value in os.environ.items() if key != "WANDB_SILENT"}  # as a user's shell
    result = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600, env=loud)
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["0", "1", "2", "3", "4", "5"]
    last = (result.stdout + result.stderr).strip().splitlines()[-1]  # the multirun's own last line
    assert last.endswith(f"multirun in {sweep}: 6 runs; compare them: python -m puffer.report {sweep}")

    out = report(sweep)
    rows = {row.env: row for row in out["rows"]}
    assert set(rows) == {"CartPole-v1", "ocean/cartpole"}
    for row in out["rows"]:
        assert row.seeds == 3 and row.eval_return > 0 and row.ci95 >= 0 and row.sps > 0 and row.wall_s > 0
        assert row.setting == f"env={'classic/cartpole' if row.env == 'CartPole-v1' else 'ocean/cartpole'}"
    assert "| CartPole-v1 | env=classic/cartpole | 3 |" in out["markdown"].read_text()
    # it stands alone: what was run, its budget, how it was evaluated, its plots
    text = out["markdown"].read_text()
    assert text.startswith(f"# Report of {sweep}\n")
    assert ("- Command: `python -m puffer -m env=classic/cartpole,ocean/cartpole seed=0,1,2 "
            "train.total_timesteps=2048 eval.episodes=3 logger=wandb`") in text
    assert "- Budget: 2,048 steps per run" in text and "on 3 held-out episodes per run" in text
    assert "[returns.png](returns.png)" in text
    assert 0 <= rows["CartPole-v1"].normalized <= 1.1  # CartPole-v1 has a reference score
    for image in out["images"]:
        assert image.read_bytes()[:8] == PNG_MAGIC
        import matplotlib.image

        assert matplotlib.image.imread(image).shape[2] in (3, 4)

    # W&B as researchers group (2 envs x 3 seeds): one group per env and setting (the seeds collapse), a readable
    # name with the seed, tags for what the command changed but never a seed, no artifacts, a few
    # lines of W&B's own
    records = [finished_run_records(sweep / str(i)) for i in range(6)]
    runs = [next(r.run for r in job if r.HasField("run")) for job in records]
    shared = "PPO train.total_timesteps=2048 eval.episodes=3"
    assert [r.run_group for r in runs] == [f"CartPole-v1 {shared}"] * 3 + [f"ocean/cartpole {shared}"] * 3
    assert runs[4].display_name == f"ocean/cartpole {shared} seed=1"
    assert all(list(r.tags) == ["train.total_timesteps=2048", "eval.episodes=3"] for r in runs)
    assert {r.job_type for r in runs} == {"train"}
    assert not [r for job in records for r in job if r.HasField("artifact") and r.artifact.type == "model"]
    wandb_lines = [line for line in (result.stdout + result.stderr).splitlines() if line.startswith("wandb:")]
    assert len(wandb_lines) <= 5 * 6, wandb_lines


def compose_with_sweeps(*overrides):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose(config_name="config", return_hydra_config=True,
                       overrides=[f"hydra.searchpath=[file://{ROOT / 'sweeps'}]", *overrides])


def test_optuna_search_config_resolves():
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    cfg = compose_with_sweeps("+sweep=ppo_optuna")
    sweeper = cfg.hydra.sweeper
    assert "optuna" in sweeper._target_.lower() and sweeper.direction == "maximize"
    assert set(sweeper.params) == {"train.learning_rate", "train.ent_coef", "train.clip_coef", "train.num_steps"}


@pytest.mark.parametrize(("sweep", "key"), [("benchmark_grid", "env"), ("throughput_grid", "vec.num_envs")])
def test_grid_configs_resolve(sweep, key):
    cfg = compose_with_sweeps(f"+sweep={sweep}")
    assert key in cfg.hydra.sweeper.params


@pytest.mark.parametrize("suite", ["classic", "box2d", "mujoco", "minigrid", "atari", "pettingzoo"])
def test_every_suite_sweep_lists_env_configs_that_compose(suite):
    cfg = compose_with_sweeps(f"+suite={suite}")
    envs = cfg.hydra.sweeper.params.env.split(",")
    assert cfg.hydra.sweeper.params.seed == "0,1,2" and cfg.eval.episodes == 10
    for env in envs:
        composed = compose_with_sweeps(f"+suite={suite}", f"env={env}")
        assert composed.train.total_timesteps > 0, env


def test_slurm_launcher_config_resolves():
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    launcher = compose_with_sweeps("hydra/launcher=slurm").hydra.launcher
    assert "submitit" in launcher._target_.lower() and launcher.gpus_per_node == 1
    assert compose_with_sweeps("hydra/launcher=local_parallel").hydra.launcher.n_jobs == 2


def test_slurm_data_parallel_launcher_config_resolves():
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    launcher = compose_with_sweeps("hydra/launcher=slurm_ddp", "hydra.launcher.nodes=2").hydra.launcher
    assert launcher.tasks_per_node == launcher.gpus_per_node == 4 and launcher.nodes == 2


def test_ray_launcher_config_resolves_for_a_cluster():
    pytest.importorskip("hydra_plugins.hydra_ray_launcher")
    launcher = compose_with_sweeps("hydra/launcher=ray_cluster",
                                   "hydra.launcher.ray.init.address=auto").hydra.launcher
    assert launcher._target_.endswith("ray_launcher.RayLauncher")
    assert launcher.ray.init.address == "auto" and launcher.ray.remote.num_cpus == 1
    # joining a cluster must not pass resource caps, which the plugin would add unless set
    assert launcher.ray.init.num_cpus is None and launcher.ray.init.object_store_memory is None


def test_ray_launcher_runs_a_grid_on_a_local_ray(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_ray_launcher")
    sweep = tmp_path / "sweep"
    args = [sys.executable, "-m", "puffer", "-m", "hydra/launcher=ray_cluster",
            "hydra.launcher.ray.init.num_cpus=2", "seed=0,1", "train.total_timesteps=1024",
            "eval.episodes=2", f"hydra.sweep.dir={sweep}"]
    result = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Ray Launcher is launching 2 jobs" in result.stdout + result.stderr
    for job, seed in (("0", 0), ("1", 1)):
        metrics = [json.loads(line) for line in (sweep / job / "metrics.jsonl").read_text().splitlines()]
        assert metrics[-1]["global_step"] == 1024 and "eval/return_mean" in metrics[-1]
        assert f"seed: {seed}\n" in (sweep / job / "config.yaml").read_text()
        assert (sweep / job / "model.safetensors").stat().st_size > 0


def test_eval_mode_reproduces_the_end_of_training_evaluation(make_cfg, tmp_path):
    trained = run(make_cfg("train.total_timesteps=4096", "eval.episodes=5"), tmp_path / "train")
    evaluated = run(make_cfg("mode=eval", f"checkpoint={tmp_path / 'train' / 'model.safetensors'}",
                             "eval.episodes=5"), tmp_path / "eval")
    assert evaluated["eval/return_mean"] == trained["eval/return_mean"]
    saved = json.loads((tmp_path / "eval" / "eval.json").read_text())
    assert saved["eval/episodes"] == 5 and saved["checkpoint"].endswith("model.safetensors")


def test_eval_mode_needs_a_checkpoint(make_cfg, tmp_path):
    with pytest.raises(puffer.config.ConfigError, match="checkpoint=None"):
        run(make_cfg("mode=eval"), tmp_path)


def test_random_action_benchmark(make_cfg, tmp_path):
    metrics = run(make_cfg("mode=benchmark", "mode.seconds=0.5"), tmp_path)
    assert metrics["benchmark/sps"] > 1000 and metrics["benchmark/episodes"] > 10
    assert 10 < metrics["benchmark/episode_return"] < 40  # CartPole under random actions: ~22
    from puffer.envs import make_gymnasium

    results = RLBenchmark({"cartpole": lambda: make_gymnasium("CartPole-v1")}, seconds=0.3, num_envs=2).run()
    assert results["cartpole"]["sps"] > 0


def test_a_run_reports_its_time_to_score_and_stops_at_max_seconds(make_cfg, tmp_path):
    """CartPole-v1's registered reward_threshold (475) is the score unless eval.score says."""
    from puffer.loggers import read_metrics

    metrics = run(make_cfg("train.total_timesteps=4096", "eval.episodes=2", "eval.score=20"), tmp_path / "a")
    assert metrics["perf/scored"] == 1.0 and 0 < metrics["perf/time_to_score_s"] <= metrics["perf/wall_s"]
    assert 0 < metrics["perf/steps_to_score"] <= 4096
    assert read_metrics(tmp_path / "a" / "metrics.jsonl")[-1]["perf/time_to_score_s"] == metrics["perf/time_to_score_s"]
    # never reached: censored at the training's seconds; and training ends at max_seconds
    metrics = run(make_cfg("train.total_timesteps=10000000", "eval.episodes=2", "runtime.max_seconds=2",
                           "eval.score=1000"), tmp_path / "b")
    assert metrics["perf/scored"] == 0.0 and metrics["train/epoch"] < 10_000_000 // 256
    assert 2 <= metrics["perf/time_to_score_s"] < 10


def test_a_search_on_the_time_to_score_of_an_env_without_a_score_is_one_error(make_cfg, tmp_path):
    """Pendulum-v1 registers no reward_threshold: every trial would return nan."""
    from puffer.config import ConfigError
    from puffer.run import run_seeds

    objective = 'objective=["min(eval/return_mean)","median(perf/time_to_score_s)"]'
    with pytest.raises(ConfigError, match=r"Pendulum-v1 registers no reward_threshold; expected eval.score="):
        run_seeds(make_cfg("env=classic/pendulum", objective, "trial_seeds=2"), tmp_path)
    assert not any(tmp_path.iterdir())  # nothing trained
    cfg = make_cfg("env=classic/pendulum", objective, "eval.score=-1500", "train.total_timesteps=1024",
                   "train.num_steps=64", "train.num_minibatches=4", "eval.episodes=1")
    (metrics,) = run_seeds(cfg, tmp_path / "scored")
    assert metrics["perf/scored"] in (0.0, 1.0) and metrics["perf/time_to_score_s"] > 0


def test_the_time_to_score_search_judges_each_trial_by_its_seeds(tmp_path):
    """Two trials of the shipped search, two seeds each: Optuna's multi-objective study gets
    (the worst seed's return, the median seconds to the score) of each trial, and writes its
    Pareto front; the report tables every seed's run."""
    import statistics

    import yaml

    from puffer.loggers import read_metrics

    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    args = [sys.executable, "-m", "puffer", "-m", "+sweep=time_to_score", "hydra.sweeper.n_trials=2",
            "trial_seeds=2", "train.total_timesteps=2048", "eval.episodes=2", f"hydra.sweep.dir={tmp_path}"]
    result = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    front = yaml.safe_load((tmp_path / "optimization_results.yaml").read_text())
    assert front["solutions"] and all(len(s["values"]) == 2 for s in front["solutions"])
    assert {"vec.num_envs", "train.learning_rate"} <= set(front["solutions"][0]["params"])
    trials = {}
    for job in (tmp_path / "0", tmp_path / "1"):
        finals = [read_metrics(job / f"seed_{seed}" / "metrics.jsonl")[-1] for seed in (0, 1)]
        overrides = yaml.safe_load((job / ".hydra" / "overrides.yaml").read_text())
        params = tuple(sorted(o for o in overrides if o.split("=")[0] in front["solutions"][0]["params"]))
        trials[params] = [min(f["eval/return_mean"] for f in finals),
                          statistics.median(f["perf/time_to_score_s"] for f in finals)]
    for solution in front["solutions"]:
        params = tuple(sorted(f"{k}={v}" for k, v in solution["params"].items()))
        assert solution["values"] == pytest.approx(trials[params])
    rows = report(tmp_path)["rows"]
    assert sum(row.seeds for row in rows) == 4 and {row.seeds for row in rows} == {2}


