"""The report's statistics against hand-computed values, and comparing two multiruns."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import yaml
from scipy import stats as scipy_stats
from wandb_records import finished_run_records

from puffer.report import compare, report, stats
from puffer.report.references import REFERENCES


def test_t_interval_uses_students_t_not_the_normal_approximation():
    # n=3, s=1: t(0.975, df=2) = 4.302653 -> 4.302653 / sqrt(3)
    assert stats.t_interval([1.0, 2.0, 3.0]) == pytest.approx(2.484138, abs=1e-6)
    assert stats.t_interval([5.0, 7.0]) == pytest.approx(12.706205 * math.sqrt(2) / math.sqrt(2), abs=1e-5)
    assert math.isnan(stats.t_interval([4.0]))


def test_iqm_is_the_mean_of_the_middle_half():
    assert stats.iqm([1, 2, 3, 4, 5, 6, 7, 8]) == 4.5
    assert stats.iqm([0, 10, 10, 10, 10, 10, 10, 1000]) == 10.0


def test_normalized_score_maps_random_to_0_and_reference_to_1():
    ref = REFERENCES["Acrobot-v1"]
    assert stats.normalized_score(ref.random, ref.random, ref.reference) == 0.0
    assert stats.normalized_score(ref.reference, ref.random, ref.reference) == 1.0
    assert stats.normalized_score(-285.3, -497.1, -73.5) == pytest.approx(0.5, abs=1e-3)


def test_stratified_bootstrap_keeps_each_envs_runs_in_their_own_stratum():
    # Env a: 10 runs at 0, env b: 20 runs at 1. Resampling within each env always draws 10 zeros
    # and 20 ones, so the mean never moves; pooled resampling would.
    point, low, high = stats.stratified_bootstrap({"a": np.zeros(10), "b": np.ones(20)}, stats.mean)
    assert point == low == high == pytest.approx(20 / 30)
    point, low, high = stats.stratified_bootstrap({"a": np.arange(10.0)}, stats.mean)
    assert point == 4.5 and low < 4.5 < high
    # the percentile interval of the mean of 0..9 is close to the t interval's
    assert (high - low) / 2 == pytest.approx(stats.t_interval(np.arange(10.0)), rel=0.25)
    # the IQM of a batch of samples is scipy's 25%-trimmed mean of each
    batch = np.random.default_rng(0).normal(size=(5, 12))
    np.testing.assert_allclose(stats.iqm(batch, axis=1), [scipy_stats.trim_mean(row, 0.25) for row in batch])


def test_no_interval_is_claimed_where_an_env_has_too_few_runs():
    point, low, high = stats.stratified_bootstrap({"a": np.array([0.291]), "b": np.arange(12.0)})
    assert point == pytest.approx(stats.iqm([0.291, *range(12)])) and math.isnan(low) and math.isnan(high)


def test_the_intervals_keep_their_coverage_in_simulation():
    """1,000 draws from a normal law: the t interval over 3 runs, and the bootstrap at its fewest
    runs (MIN_BOOTSTRAP_RUNS), each cover the true mean at least 90% of the time (nominal 95%)."""
    rng = np.random.default_rng(0)
    draws = rng.normal(1.0, 2.0, (1000, 3))
    half = np.array([stats.t_interval(d) for d in draws])
    assert np.mean(np.abs(draws.mean(1) - 1.0) <= half) >= 0.9
    low_t, high_t = scipy_stats.t.interval(0.95, 2, loc=draws[0].mean(), scale=scipy_stats.sem(draws[0]))
    assert half[0] == pytest.approx((high_t - low_t) / 2)  # scipy's own t interval
    n = stats.MIN_BOOTSTRAP_RUNS
    covered = 0
    for i, d in enumerate(rng.normal(1.0, 2.0, (1000, n))):
        _, low, high = stats.stratified_bootstrap({"env": d}, stats.mean, repetitions=500, seed=i)
        covered += low <= 1.0 <= high
    assert covered / 1000 >= 0.9, covered


def test_performance_profile_weighs_every_env_the_same():
    profile = stats.performance_profile({"a": np.array([0.0, 1.0]), "b": np.ones(4)}, np.array([0.5, 2.0]))
    np.testing.assert_allclose(profile, [0.75, 0.0])  # pooled runs would give 5/6 at 0.5


def fake_multirun(root, returns: dict[str, list[float]]):
    """A multirun directory as Hydra and puffer leave it: per job overrides, config, metrics."""
    job = 0
    for env_id, values in returns.items():
        for seed, value in enumerate(values):
            directory = root / str(job)
            (directory / ".hydra").mkdir(parents=True)
            (directory / ".hydra" / "overrides.yaml").write_text(
                yaml.safe_dump([f"env.id={env_id}", f"seed={seed}"]))
            (directory / ".hydra" / "config.yaml").write_text(
                yaml.safe_dump({"env": {"id": env_id}, "seed": seed}))
            records = [{"global_step": 1000, "env/episode_return": value / 2, "perf/sps": 100.0,
                        "perf/wall_s": 10.0},
                       {"global_step": 2000, "env/episode_return": value, "eval/return_mean": value}]
            (directory / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
            job += 1
    return root


def test_report_normalizes_known_envs_and_aggregates_them(tmp_path):
    pytest.importorskip("matplotlib")
    sweep = fake_multirun(tmp_path / "a", {"CartPole-v1": [500.0, 500.0, 261.85],
                                           "Acrobot-v1": [-73.506, -73.506, -73.506],
                                           "MyEnv-v0": [1.0, 2.0, 3.0]})
    out = report(sweep)
    rows = {row.env: row for row in out["rows"]}
    assert rows["CartPole-v1"].normalized == pytest.approx((1 + 1 + 0.5) / 3, abs=1e-3)
    assert rows["Acrobot-v1"].normalized == pytest.approx(1.0)
    assert math.isnan(rows["MyEnv-v0"].normalized)  # no reference: no normalized score
    assert rows["MyEnv-v0"].ci95 == pytest.approx(2.484138, abs=1e-6)
    (aggregate,) = out["aggregates"].values()
    assert aggregate["envs"] == 2 and aggregate["runs"] == 6
    assert aggregate["iqm"][0] == pytest.approx(1.0)  # middle half of [0.5, 1, 1, 1, 1, 1]
    text = out["markdown"].read_text()
    assert "| MyEnv-v0 | env.id=MyEnv-v0 | 3 | 2.00 | 2.48 | n/a |" in text
    assert "IQM" in text and "25% trimmed from each end" in text
    assert "n/a (3 runs in an env, < 10)" in text  # 3 runs per env: no bootstrap interval claimed
    assert {p.name for p in out["images"]} == {"returns.png", "profile.png", "sps.png"}


def test_the_report_plots_returns_against_time_and_tabulates_the_time_to_score(tmp_path):
    pytest.importorskip("matplotlib")
    sweep = fake_multirun(tmp_path / "a", {"CartPole-v1": [500.0, 480.0, 300.0], "Acrobot-v1": [-80.0, -500.0, -500.0]})
    # what ScoreWatch and the trainer log: seconds to the score (or the training time when never
    # reached) and the cumulative training seconds of every epoch
    timings = {0: (1, 4.0), 1: (1, 6.0), 2: (0, 20.0), 3: (1, 9.0), 4: (0, 30.0), 5: (0, 31.0)}
    for job, (scored, seconds) in timings.items():
        metrics = tmp_path / "a" / str(job) / "metrics.jsonl"
        records = [json.loads(line) for line in metrics.read_text().splitlines()]
        records[0]["perf/train_seconds"], records[1]["perf/train_seconds"] = seconds / 2, seconds
        records[1].update({"perf/scored": float(scored), "perf/time_to_score_s": seconds,
                           "perf/steps_to_score": 1000.0 * (job + 1), "perf/score": 475.0 if job < 3 else -100.0})
        metrics.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    out = report(sweep)
    assert {p.name for p in out["images"]} >= {"returns.png", "returns_time.png"}
    rows = {row.env: row for row in out["time_to_score"]}
    cartpole, acrobot = rows["CartPole-v1"], rows["Acrobot-v1"]
    assert (cartpole.reached, cartpole.runs, cartpole.median_s, cartpole.low_s, cartpole.high_s) == (2, 3, 6.0, 4.0, 20.0)
    assert not cartpole.censored and cartpole.median_steps == 2000
    assert acrobot.reached == 1 and acrobot.median_s == 30.0 and acrobot.censored  # the median never scored
    text = out["markdown"].read_text()
    # both judges, named: training episodes (ScoreWatch) and the final evaluation (500, 480, 300
    # against 475; -80, -500, -500 against -100)
    assert "| CartPole-v1 | env.id=CartPole-v1 | 2/3 | 2/3 | 6.0 | [4.0, 20.0] | 2,000 |" in text
    assert "| Acrobot-v1 | env.id=Acrobot-v1 | 1/3 | 1/3 | > 30.0 | [9.0, 31.0] | 5,000 |" in text


def test_runs_without_time_to_score_metrics_get_no_such_table_or_time_plot(tmp_path):
    pytest.importorskip("matplotlib")
    out = report(fake_multirun(tmp_path / "a", {"MyEnv-v0": [1.0, 2.0]}))
    assert out["time_to_score"] == [] and "Time to score" not in out["markdown"].read_text()
    assert "returns_time.png" not in {p.name for p in out["images"]}


def test_sampled_floats_are_shown_to_four_significant_digits():
    from puffer.report.tables import label

    assert label("train.learning_rate=0.0003663671900803624") == "train.learning_rate=0.0003664"
    assert label("train.gamma=0.99") == "train.gamma=0.99" and label("env=classic/cartpole") == "env=classic/cartpole"
    assert label("train.learning_rate=2.5e-4") == "train.learning_rate=2.5e-4"


def test_compare_flags_differences_whose_welch_interval_excludes_zero(tmp_path):
    a = fake_multirun(tmp_path / "a", {"CartPole-v1": [100.0, 110.0, 120.0], "Acrobot-v1": [-90.0, -80.0, -85.0],
                                       "Gone-v0": [1.0, 2.0], "Solved-v0": [500.0, 500.0]})
    b = fake_multirun(tmp_path / "b", {"CartPole-v1": [400.0, 410.0, 420.0], "Acrobot-v1": [-88.0, -79.0, -86.0],
                                       "Solved-v0": [500.0, 500.0]})
    for side in (a, b):  # the sweeps logged to W&B offline: the comparison goes there too
        config = yaml.safe_load((side / "0" / ".hydra" / "config.yaml").read_text())
        config["logger"] = {"project": "ab", "entity": None, "group": None, "mode": "offline"}
        (side / "0" / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    result = compare(a, b, out=tmp_path / "new" / "dir", wandb=True)
    assert result["markdown"] == tmp_path / "new" / "dir" / "compare.md"
    records = finished_run_records(b)
    (run,) = [r.run for r in records if r.HasField("run")]
    assert run.job_type == "comparison" and run.project == "ab"
    logged = {tuple(item.nested_key) or (item.key,): json.loads(item.value_json)
              for r in records if r.HasField("history") for item in r.history.item}
    assert logged[("compare/table", "nrows")] == 3  # CartPole, Acrobot, Solved: the envs in both
    assert logged[("compare/table", "ncols")] == 9
    by_env = {d.env: d for d in result["differences"]}
    cartpole = by_env["CartPole-v1"]
    # Welch: difference 300, standard error sqrt(100/3 + 100/3), df 4, t(0.975, 4) = 2.776445
    half = 2.776445 * math.sqrt(200 / 3)
    assert (cartpole.difference, cartpole.verdict) == (300.0, "B better")
    assert cartpole.low == pytest.approx(300 - half, abs=1e-3)
    assert cartpole.high == pytest.approx(300 + half, abs=1e-3)
    assert by_env["Acrobot-v1"].verdict == "no difference detected at 95%"
    assert by_env["Solved-v0"].verdict == "no difference detected at 95%" and by_env["Solved-v0"].low == 0.0
    assert result["only"] == {"A": ["Gone-v0"], "B": []}
    text = result["markdown"].read_text()
    assert "**B better**" in text
    assert f"A: {a} (the defaults)" in text.splitlines()[0]  # what differs: nothing set on either side here


def test_rows_sort_numbers_as_numbers_and_the_sps_plot_reads(tmp_path):
    pytest.importorskip("matplotlib")
    sweep = tmp_path / "grid"
    job = 0
    for num_envs in (16, 8, 32):
        directory = sweep / str(job)
        (directory / ".hydra").mkdir(parents=True)
        (directory / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"vec.num_envs={num_envs}"]))
        (directory / ".hydra" / "config.yaml").write_text(yaml.safe_dump({"env": {"id": "CartPole-v1"}}))
        (directory / "metrics.jsonl").write_text(json.dumps(
            {"global_step": 1, "eval/return_mean": 1.0, "perf/sps": 100.0 * num_envs ** 2, "perf/wall_s": 1.0}) + "\n")
        job += 1
    out = report(sweep)
    assert [row.setting for row in out["rows"]] == ["vec.num_envs=8", "vec.num_envs=16", "vec.num_envs=32"]
    assert (sweep / "sps.png").read_bytes()[:4] == b"\x89PNG"


def test_the_report_joins_the_sweeps_wandb_project_and_group(tmp_path):
    from puffer.report import sweep_logging

    sweep = fake_multirun(tmp_path / "multirun" / "x", {"CartPole-v1": [1.0]})
    config = yaml.safe_load((sweep / "0" / ".hydra" / "config.yaml").read_text())
    config["logger"] = {"project": "my-project", "entity": None, "group": None, "mode": "offline"}
    (sweep / "0" / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    (sweep / "0" / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump({"hydra": {"sweep": {"dir": "outputs/multirun/a/b"}}}))
    assert sweep_logging(sweep) == {"project": "my-project", "entity": None, "mode": "offline",
                                    "group": "outputs_multirun_a_b"}


def test_the_profile_band_brackets_the_profile_and_needs_enough_runs():
    taus = np.linspace(0, 1.5, 16)
    rng = np.random.default_rng(0)
    scores = {"a": rng.uniform(0, 1.2, 12), "b": rng.uniform(0.5, 1.0, 10)}
    low, high = stats.profile_band(scores, taus)
    profile = stats.performance_profile(scores, taus)
    assert (low <= profile + 1e-12).all() and (profile <= high + 1e-12).all() and (high > low).any()
    assert stats.profile_band({"a": np.ones(3)}, taus) is None


def test_a_folder_without_runs_is_one_line_naming_it(tmp_path):
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "puffer.report", str(tmp_path)], capture_output=True, text=True)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"{tmp_path}: no runs (no <job>/metrics.jsonl); expected a multirun directory")


def test_compare_two_real_multiruns_with_shared_overrides(tmp_path):
    """Real A/B multiruns from the CLI, each with settings every job shares (a budget, the
    changed setting): the comparison names them, its numbers are the jobs', and it draws."""
    import subprocess
    import sys
    from pathlib import Path

    shared = ["train.total_timesteps=1024", "train.num_steps=32", "eval.episodes=3", "runtime.log_interval=0"]
    sides = {"a": [], "b": ["train.learning_rate=0.01"]}
    root = Path(__file__).resolve().parents[1]
    for side, extra in sides.items():
        ran = subprocess.run([sys.executable, "-m", "puffer", "-m", "seed=0,1", *shared, *extra,
                              f"hydra.sweep.dir={tmp_path / side}"], cwd=root, capture_output=True, text=True,
                             timeout=300)
        assert ran.returncode == 0, ran.stderr
    result = subprocess.run([sys.executable, "-m", "puffer.report", str(tmp_path / "a"), str(tmp_path / "b")],
                            cwd=root, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "b" / "compare.md").read_text()
    lines = text.splitlines()
    budget = "runtime.log_interval=0 train.num_steps=32 train.total_timesteps=1024"
    assert lines[0] == f"A: {tmp_path / 'a'} (eval.episodes=3 {budget})"
    assert lines[1] == f"B: {tmp_path / 'b'} (eval.episodes=3 runtime.log_interval=0 train.learning_rate=0.01 " \
                       "train.num_steps=32 train.total_timesteps=1024)"
    means = {}
    for side in sides:
        returns = [json.loads(line)["eval/return_mean"]
                   for job in sorted((tmp_path / side).glob("*/metrics.jsonl"))
                   for line in job.read_text().splitlines() if "eval/return_mean" in line]
        assert len(returns) == 2
        means[side] = float(np.mean(returns))
    (row,) = [line for line in lines if line.startswith("| CartPole-v1 |")]
    cells = [cell.strip() for cell in row.split("|")[1:-1]]
    assert float(cells[1]) == pytest.approx(means["a"], abs=0.01)
    assert float(cells[3]) == pytest.approx(means["b"], abs=0.01)
    assert float(cells[5]) == pytest.approx(means["b"] - means["a"], abs=0.02)
    if pytest.importorskip("matplotlib"):
        assert (tmp_path / "b" / "compare.png").stat().st_size > 5000
        assert "[compare.png](compare.png)" in text


def test_tables_name_envs_short_and_let_long_settings_wrap():
    from puffer.report.tables import Row, env_labels, markdown

    kaz = "pettingzoo.butterfly.knights_archers_zombies_v11(max_cycles=900)"
    names = env_labels([kaz, "LunarLander-v3", "LunarLander-v3(continuous=True)", "ocean/cartpole"])
    assert names == {kaz: "knights_archers_zombies_v11", "LunarLander-v3": "LunarLander-v3",
                     "LunarLander-v3(continuous=True)": "LunarLander-v3(continuous=True)",  # told apart
                     "ocean/cartpole": "ocean/cartpole"}
    setting = "train.learning_rate=0.0003664,train.ent_coef=0.01,vec.num_envs=16"
    table = markdown([Row(kaz, setting, 3, 1.0, 0.1, math.nan, math.nan, 100.0, 10.0)], {})
    row = table.splitlines()[2]
    assert row.startswith("| knights_archers_zombies_v11 | learning_rate=0.0003664, ent_coef=0.01, vec.num_envs=16 |")
