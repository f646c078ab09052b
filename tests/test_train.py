"""End to end: the CLI, the Python API from the README, W&B offline, and learning CartPole."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from wandb_records import finished_run_records

from puffer.evaluation import EVAL_SEED_OFFSET
from puffer.files import checkpoint, model_file
from puffer.loggers import read_metrics
from puffer.run import run

ROOT = Path(__file__).resolve().parents[1]


def test_cli_run_leaves_config_metrics_checkpoint_and_eval(cli, tmp_path):
    result = cli("train.total_timesteps=2048", "train.num_steps=32", "eval.episodes=3", "vec=multiprocessing")
    run_dir = tmp_path / "run"
    assert (run_dir / ".hydra" / "config.yaml").exists()
    assert "id: CartPole-v1" in (run_dir / "config.yaml").read_text()
    records = read_metrics(run_dir / "metrics.jsonl")
    assert records[0]["global_step"] == 256 and records[-1]["global_step"] == 2048
    assert {"train/policy_loss", "train/value_loss", "perf/sps", "perf/env_pct"} <= set(records[0])
    assert records[-1]["eval/episodes"] == 3 and records[-1]["eval/return_mean"] > 0
    checkpoints = sorted((run_dir / "checkpoints").glob("*.pt"))
    assert [c.name for c in checkpoints] == ["epoch_000008.pt"]
    state = checkpoint.read(checkpoints[0])
    assert state["global_step"] == 2048 and state["epoch"] == 8 and "optimizer" in state
    assert (run_dir / "model.safetensors").exists()
    output = result.stderr + result.stdout
    assert "SPS" in output  # progress lines
    # the last line says where everything went; the log file is named after puffer
    assert f"outputs in {run_dir}: model.safetensors, metrics.jsonl, config.yaml, checkpoints/ (1)" in output
    assert "eval/return_mean" in (run_dir / "puffer.log").read_text()


def key_of(item) -> str:
    return item.key or "/".join(item.nested_key)


def test_wandb_offline_run_records_config_step_metric_and_metrics(tmp_path, make_cfg):
    cfg = make_cfg("logger=wandb", "logger.mode=offline", "train.total_timesteps=1024", "train.num_steps=32",
                   "eval.episodes=2", "seed=4")
    run(cfg, tmp_path)
    records = finished_run_records(tmp_path)
    updates = [r.run.config.update for r in records if r.HasField("run")]
    updates += [r.config.update for r in records if r.HasField("config")]
    config = {key_of(item): item.value_json for update in updates for item in update}
    assert json.loads(config["seed"]) == 4
    assert json.loads(config["env"])["id"] == "CartPole-v1"
    metrics = {r.metric.glob_name: r.metric.step_metric for r in records if r.HasField("metric")}
    assert metrics["perf/*"] == "global_step" and metrics["train/*"] == "global_step"
    assert metrics["time/*"] == "perf/train_seconds"  # return against wall-clock training time
    history = [{key_of(i): json.loads(i.value_json) for i in r.history.item} for r in records if r.HasField("history")]
    assert [h["global_step"] for h in history[:4]] == [256, 512, 768, 1024]
    assert {"perf/sps", "perf/learn_pct", "train/approx_kl", "env/episode_return"} <= set(history[1])
    assert history[1]["time/episode_return"] == history[1]["env/episode_return"]
    assert 0 < history[0]["perf/train_seconds"] < history[1]["perf/train_seconds"]
    assert "eval/return_mean" in history[-1]
    # the local metrics file is written as well
    assert read_metrics(tmp_path / "metrics.jsonl")[-1]["global_step"] == 1024


def test_wandb_names_and_groups_a_single_run_and_its_evaluation(tmp_path, make_cfg):
    """A single run gets a name, a group that collapses seeds and no seed tag; the final model is
    uploaded only when asked; mode=eval logs as job_type eval."""
    overrides = ["logger=wandb", "logger.mode=offline", "train.total_timesteps=512", "train.num_steps=32",
                 "eval.episodes=2", "seed=4", "train.gamma=0.9"]
    run(make_cfg(*overrides, "logger.log_checkpoints=final"), tmp_path / "train", overrides=overrides)
    records = finished_run_records(tmp_path / "train")
    (info,) = [r.run for r in records if r.HasField("run")]
    assert (info.run_group, info.display_name) == ("CartPole-v1 PPO train.total_timesteps=512 train.num_steps=32 "
                                                   "eval.episodes=2 train.gamma=0.9",
                                                   "CartPole-v1 PPO train.total_timesteps=512 train.num_steps=32 "
                                                   "eval.episodes=2 train.gamma=0.9 seed=4")
    assert info.job_type == "train" and not [t for t in info.tags if t.startswith("seed")]
    artifacts = [r.artifact for r in records if r.HasField("artifact") and r.artifact.type == "model"]
    assert len(artifacts) == 1  # the final model file; its epoch checkpoint only with log_checkpoints=all
    evaluation = ["logger=wandb", "logger.mode=offline", "mode=eval", f"checkpoint={tmp_path / 'train'}",
                  "eval.episodes=2"]
    run(make_cfg(*evaluation), tmp_path / "eval", overrides=evaluation)
    (info,) = [r.run for r in finished_run_records(tmp_path / "eval") if r.HasField("run")]
    assert info.job_type == "eval"


def test_returns_are_in_the_envs_units_under_the_users_reward_wrappers(tmp_path, make_cfg):
    """CartPole pays 1 a step; a reward wrapper halves what the learner sees. The logged and
    evaluated returns are the env's (the episode's length), the learner's beside them, named."""
    metrics = run(make_cfg("env=classic/gym", "env.id=CartPole-v1", "train.total_timesteps=1024", "train.num_steps=32",
                           "eval.episodes=3", "env.wrappers=[{_target_: gymnasium.wrappers.ClipReward, "
                           "min_reward: 0, max_reward: 0.5}]"), tmp_path)
    epochs = [m for m in read_metrics(tmp_path / "metrics.jsonl") if "env/episode_return" in m]
    assert epochs
    for m in epochs:
        assert m["env/episode_return"] == pytest.approx(m["env/episode_length"])
        assert m["env/episode_return_wrapped"] == pytest.approx(0.5 * m["env/episode_length"])
    assert metrics["eval/return_mean"] == pytest.approx(metrics["eval/length_mean"])


def readme_python_blocks():
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


@pytest.mark.parametrize("index", range(len(readme_python_blocks())))
def test_readme_python_examples_run_as_written(index, tmp_path):
    code = readme_python_blocks()[index]
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_default_config_solves_cartpole_within_50k_steps(seed, make_cfg, tmp_path):
    """Half the zoo's 100k budget (issue 32: its settings left 2 of 6 seeds below 475 here)."""
    metrics = run(make_cfg(f"seed={seed}", "train.total_timesteps=50000"), tmp_path)
    assert metrics["perf/wall_s"] > 0
    assert metrics["eval/episodes"] == 20
    assert metrics["eval/return_mean"] >= 475, metrics


@pytest.mark.slow
def test_shipped_mountaincar_continuous_config_is_within_the_zoos_figure_at_its_budget(make_cfg, tmp_path):
    """20k steps, seeds 0-2: the mean return at or above rl-baselines3-zoo's published PPO
    (88.343 - its std 2.572; it explores with gSDE, puffer with a wide plain Gaussian)."""
    returns = [run(make_cfg("env=classic/mountaincar_continuous", f"seed={seed}", "eval.episodes=10",
                            "train.total_timesteps=20000"),
                   tmp_path / str(seed))["eval/return_mean"] for seed in (0, 1, 2)]
    assert np.mean(returns) >= 88.343 - 2.572, returns


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_shipped_acrobot_config_reaches_minus_100_within_100k_steps(seed, make_cfg, tmp_path):
    # rl-baselines3-zoo's settings with observation and reward normalization; SB3 reaches -78.
    metrics = run(make_cfg("env=classic/acrobot", f"seed={seed}", "eval.episodes=10"), tmp_path)
    assert metrics["eval/return_mean"] >= -100, metrics


@pytest.mark.slow
def test_a_continuous_action_env_improves_over_random_play(make_cfg, tmp_path):
    metrics = run(make_cfg("env=classic/pendulum", "train.total_timesteps=81920", "eval.episodes=10"), tmp_path)
    assert metrics["eval/return_mean"] > -800  # random play: about -1200


@pytest.mark.slow
@pytest.mark.parametrize(("grid_only", "bar"), [(True, 90), (False, 85)],
                         ids=["hwc-grid", "dict-grid-direction-mission"])
def test_a_pixel_env_in_hwc_layout_learns_with_the_default_command(make_cfg, tmp_path, grid_only, bar):
    """MiniGrid DoorKey-5x5 with the shipped config and the default policy: its 7x7x3 (H, W, C)
    grid alone (ImgObsWrapper), or as the env gives it, a Dict of the grid, the direction and
    the mission text. The loaded agent then plays 100 new episodes on seeds training never used
    and must find the key, open the door and reach the goal in at least `bar` of them (a random
    policy: about 5). Measured at seeds 0, 1, 2: grid 100, 100, 98; Dict 89, 100, 100."""
    pytest.importorskip("minigrid")
    from minigrid.wrappers import ImgObsWrapper

    import puffer

    wrappers = ["env.wrappers=[minigrid.wrappers.ImgObsWrapper]"] if grid_only else []
    run(make_cfg("env=minigrid/doorkey", "eval.episodes=0", *wrappers), tmp_path)
    agent = puffer.load(tmp_path)
    env = gym.make("MiniGrid-DoorKey-5x5-v0")
    if grid_only:
        env = ImgObsWrapper(env)
        assert env.observation_space.shape == (7, 7, 3)
    successes = 0
    for episode in range(100):
        obs, _ = env.reset(seed=10_000 + episode)
        done, total = False, 0.0
        while not done:
            obs, reward, terminated, truncated, _ = env.step(agent.act(obs))
            total += float(reward)
            done = terminated or truncated
        successes += total > 0
    assert successes >= bar, successes


class CrashesInEvaluation(gym.Env):
    """CartPole-like dummy whose env raises once seeded with an evaluation seed."""

    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, render_mode=None):
        self.render_mode = render_mode

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.evaluating = seed is not None and seed >= EVAL_SEED_OFFSET
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        if self.evaluating:
            raise RuntimeError("this env fails in evaluation")
        self.t += 1
        return np.zeros(2, np.float32), 1.0, self.t >= 10, False, {}


def test_the_trained_policy_is_saved_before_evaluation_so_a_failing_evaluation_loses_nothing(make_cfg, tmp_path):
    gym.register(id="puffer_test/CrashesInEvaluation-v0", entry_point=CrashesInEvaluation)
    cfg = make_cfg("env=classic/gym", "env.id=puffer_test/CrashesInEvaluation-v0", "train.total_timesteps=512")
    with pytest.raises(Exception, match="fails in evaluation"):
        run(cfg, tmp_path)
    saved = model_file.read(tmp_path / "model.safetensors")
    final = checkpoint.read(sorted((tmp_path / "checkpoints").glob("*.pt"))[-1])
    assert all(torch.equal(saved.state_dict[k], final["policy"][k]) for k in final["policy"])


def test_an_evaluation_episode_that_never_ends_is_cut_at_eval_max_steps_and_counted(caplog):
    """CliffWalking-v1 has no time limit; a policy that always walks up never reaches the goal."""
    from puffer.emulation import GymnasiumPufferEnv
    from puffer.evaluation import evaluate
    from puffer.policies.networks import Default

    def cliff():
        return GymnasiumPufferEnv(env=gym.make("CliffWalking-v1"))

    probe = cliff()
    policy = Default(probe.single_observation_space, probe.single_action_space)
    probe.close()
    torch.nn.init.zeros_(policy.action_head.logits.weight)  # equal logits: argmax is action 0, up
    torch.nn.init.zeros_(policy.action_head.logits.bias)
    with caplog.at_level("WARNING", logger="puffer.evaluation"):
        result = evaluate(policy, cliff, episodes=3, seed=0, num_envs=2, max_episode_steps=200)
    assert result["truncated"] == 3 and result["episodes"] == 0 and np.isnan(result["return_mean"])
    assert "3 of 3 episodes reached eval.max_steps=200 steps" in caplog.text


def test_wandb_online_without_a_reachable_server_trains_on_offline(tmp_path, make_cfg, monkeypatch, caplog):
    # a closed local port stands for no network; the key is well formed and wrong
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("WANDB_API_KEY", "0" * 40)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    started = time.monotonic()
    metrics = run(make_cfg("logger=wandb", "logger.mode=online", "logger.init_timeout=3",
                           "train.total_timesteps=512", "train.num_steps=32"), tmp_path)
    assert time.monotonic() - started < 90  # W&B's own default waits 90 s, then stops the run
    assert metrics["train/epoch"] == 2  # 512 steps of 8 envs x 32
    assert "continuing offline" in caplog.text
    records = finished_run_records(tmp_path)  # the offline run file holds the metrics
    assert any(r.HasField("history") for r in records)


class Crowd(gym.Env):
    """Observes a varying number of others (a Sequence of positions): reward for moving toward the
    first of them, so the policy must read the sequence."""

    observation_space = spaces.Dict({"others": spaces.Sequence(spaces.Box(-1, 1, (2,), np.float32)),
                                     "me": spaces.Box(-1, 1, (2,), np.float32)})
    action_space = spaces.Discrete(2)

    def __init__(self, render_mode=None):
        self.render_mode = render_mode

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def _obs(self):
        count = int(self.np_random.integers(1, 4))
        self.others = tuple(self.np_random.uniform(-1, 1, 2).astype(np.float32) for _ in range(count))
        return {"others": self.others, "me": np.zeros(2, np.float32)}

    def step(self, action):
        reward = float((self.others[0][0] > 0) == (action == 1))
        self.t += 1
        return self._obs(), reward, False, self.t >= 20, {}


def test_a_sequence_observation_trains_from_the_cli_config(make_cfg, tmp_path):
    gym.register(id="puffer_test/Crowd-v0", entry_point=Crowd)
    metrics = run(make_cfg("env=classic/gym", "env.id=puffer_test/Crowd-v0", "env.max_sequence_length=3",
                           "train.total_timesteps=8192", "eval.episodes=10"), tmp_path)
    # reading the first element's sign is worth 20 per episode; chance is 10
    assert metrics["eval/return_mean"] > 15, metrics


def test_a_budget_that_is_not_whole_epochs_says_what_it_will_train(make_cfg, tmp_path, caplog):
    with caplog.at_level("INFO", logger="puffer.training.trainer"):
        metrics = run(make_cfg("env=ocean/bandit", "env.num_rows=64", "train.total_timesteps=1500",
                               "eval.episodes=0"), tmp_path)
    assert ("train.total_timesteps=1500: training 2048 steps, 2 whole epochs of 1024 (num_steps 16 x 64 rows)"
            in caplog.text)
    assert read_metrics(tmp_path / "metrics.jsonl")[-1]["global_step"] == 2048 and metrics["train/epoch"] == 2


def test_the_cleanrl_style_api_shows_progress_and_saves_like_the_cli(tmp_path, caplog):
    import puffer.vector
    from puffer.envs.ocean import Bandit
    from puffer.frameworks import cleanrl
    from puffer.policies.networks import Default

    config = cleanrl.Config(total_timesteps=65536, num_steps=16, learning_rate=0.003, ent_coef=0.01)
    with puffer.vector.make(Bandit, env_kwargs={"num_rows": 1024}) as vecenv, caplog.at_level("INFO"):
        policy = Default(vecenv.single_observation_space, vecenv.single_action_space)
        trainer = cleanrl.train(config, vecenv, policy, device="cpu", run_dir=tmp_path)
    assert "ocean/bandit | step 65,536/65,536 | epoch 4/4" in caplog.text  # the CLI's progress line
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["epoch_000004.pt"]
    cues = torch.cat([torch.eye(4), torch.zeros(4, 1)], dim=1)  # each cue at the first step
    assert trainer.policy(cues)[0].argmax(-1).tolist() == [0, 1, 2, 3]  # learned: random is 1/4
