"""A batch of members trains each as its solo run would (puffer.training.batched, puffer.batch):
member k's first rollout is a solo run's with seed k step for step, its first update's losses
equal the solo run's to float tolerance, a member that diverges stops alone, and a multirun
through hydra/launcher=members leaves the job directories a solo multirun leaves."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys

import pytest
import torch
from conftest import assert_no_marked_process_left, wait_for_epochs
from omegaconf import OmegaConf
from wandb_records import finished_run_records

import puffer
from puffer.batch import build_trainer, check_members, make_member_vecenv, train_batch
from puffer.build import make_env_creator, make_policy, make_vecenv
from puffer.cli.launcher import chunks
from puffer.errors import ConfigError
from puffer.evaluation.protocol import evaluate, evaluate_members
from puffer.files import checkpoint
from puffer.loggers.base import read_metrics
from puffer.training.batched import _masked_minibatches, member_minibatches
from puffer.training.ppo import PPO
from puffer.training.trainer import seed_everything

SMALL = ("vec.num_envs=2", "train.num_steps=32", "train.num_minibatches=2", "train.update_epochs=2",
         "policy.hidden_size=16", "runtime.torch_threads=1")


def solo(cfg) -> PPO:
    """The learner `python -m puffer` builds for `cfg` (puffer.run.run's order of seeding)."""
    seed_everything(cfg.seed)
    vecenv = make_vecenv(cfg, make_env_creator(cfg), cfg.seed)
    policy = make_policy(cfg, vecenv)
    return PPO(OmegaConf.to_object(cfg.train), vecenv, policy, device="cpu", seed=cfg.seed, progress=None)


@pytest.mark.parametrize("env,policy", [("classic/cartpole", []), ("classic/pendulum", []), ("classic/acrobot", []),
                                        ("classic/cartpole", ["policy.rnn=lstm"])])
def test_first_rollout_and_update_equal_solo_runs(make_cfg, env, policy):
    """Members with seeds 0 and 3 (and their own learning rates and clip ranges): each member's
    observations, actions and rewards of the first rollout are its solo run's exactly (CartPole,
    with an LSTM too; Pendulum's Gaussian actions to float tolerance: the stacked forward's means
    may differ from a solo forward's in the last bits), and the first update's losses are equal
    to float tolerance, as are its running observation statistics after it (Acrobot's
    norm_obs). The LSTM members learn from their row sequences as their solo runs do."""
    overrides = [f"env={env}", *SMALL, *policy]
    cfgs = [make_cfg(*overrides, "seed=0"), make_cfg(*overrides, "seed=3", "train.learning_rate=0.001",
                                                     "train.clip_coef=0.3", "train.ent_coef=0.02")]
    vecenv = make_member_vecenv(cfgs)
    batch = build_trainer(cfgs, vecenv, "cpu")
    try:
        batch.collect()
        batch_metrics = batch.update()
        batch.update_obs_stats()
        for k, cfg in enumerate(cfgs):
            trainer = solo(cfg)
            try:
                trainer.collect()
                rows = slice(k * 2, (k + 1) * 2)  # member k's 2 envs
                for name in ("dones", "valid", *(("obs", "actions", "rewards") if env != "classic/pendulum" else ())):
                    assert torch.equal(getattr(batch.rollout, name)[:, rows], getattr(trainer.rollout, name)), name
                for name in ("obs", "actions", "rewards"):  # a Gaussian's mean: equal but for the last bits
                    torch.testing.assert_close(getattr(batch.rollout, name)[:, rows], getattr(trainer.rollout, name))
                torch.testing.assert_close(batch.rollout.logprobs[:, rows], trainer.rollout.logprobs)
                torch.testing.assert_close(batch.rollout.values[:, rows], trainer.rollout.values)
                metrics = trainer.update()
                for key in ("train/policy_loss", "train/value_loss", "train/entropy", "train/approx_kl",
                            "train/grad_norm", "train/clip_coef", "train/learning_rate"):
                    assert batch_metrics[key][k] == pytest.approx(metrics[key], rel=1e-4, abs=1e-6), key
                torch.testing.assert_close(batch.policy.stack.flat[k],
                                           torch.cat([p.detach().flatten() for p in trainer.policy.parameters()]),
                                           rtol=1e-4, atol=1e-6)
                trainer.update_obs_stats()  # Acrobot's policy.norm_obs: each member's own statistics
                for name, value in trainer.policy.named_buffers():
                    torch.testing.assert_close(batch.policy.stack.buffers[name][k], value)
            finally:
                trainer.vecenv.close()
    finally:
        vecenv.close()


def test_a_diverging_member_stops_alone(make_cfg):
    """Member 1 with train.learning_rate=1e30 goes non-finite: it alone stops, its weights put
    back to a finite epoch's; the others never see a non-finite value, their first epoch's
    losses are those of a batch without it, and they train to the end. (At 1e6 the tanh
    network's outputs stay bounded: it learns nonsense but nothing overflows.)"""
    overrides = ["env=classic/cartpole", *SMALL, "train.total_timesteps=320"]
    cfgs = [make_cfg(*overrides, "seed=0"), make_cfg(*overrides, "seed=1", "train.learning_rate=1e30",
                                                     "train.max_grad_norm=1e9"),
            make_cfg(*overrides, "seed=2")]
    calm = [cfgs[0], cfgs[2]]
    first_epochs = []
    for group in (cfgs, calm):
        vecenv = make_member_vecenv(group)
        try:
            trainer = build_trainer(group, vecenv, "cpu")
            trainer.collect()
            first_epochs.append(trainer.update())
            trainer.train()  # the rest of the budget
            assert torch.isfinite(trainer.policy.stack.flat).all()
            others = [0, 2] if len(group) == 3 else [0, 1]
            for key in ("train/loss", "train/grad_norm", "env/episode_return"):
                assert all(math.isfinite(trainer.last_metrics[key][k]) for k in others), key
            if len(group) == 3:
                assert trainer.stopped_members == [1]
                assert trainer.member_step.active.tolist() == [True, False, True]
                assert trainer.epoch == trainer.num_epochs  # the others trained to the end
        finally:
            vecenv.close()
    with_it, without = first_epochs
    for key in ("train/policy_loss", "train/value_loss", "train/grad_norm"):
        assert with_it[key][0] == pytest.approx(without[key][0], rel=1e-5)
        assert with_it[key][2] == pytest.approx(without[key][1], rel=1e-5)


def test_batch_refuses_what_it_cannot_give_each_member(make_cfg):
    base = ["env=classic/cartpole", *SMALL]
    with pytest.raises(ConfigError, match="train.num_steps"):
        check_members([make_cfg(*base, "seed=0"), make_cfg(*base, "seed=1", "train.num_steps=64")])
    with pytest.raises(ConfigError, match="vtrace"):
        check_members([make_cfg(*base, "seed=0", "train.vtrace=true")])
    with pytest.raises(ConfigError, match="policy"):  # a shape: not a member's own setting
        check_members([make_cfg(*base, "seed=0"), make_cfg(*base, "seed=1", "policy.hidden_size=32")])


def test_train_batch_leaves_each_member_a_solo_run_directory(tmp_path):
    """puffer.batch.train_batch: each member's directory holds what a solo run's does, its steps
    counted as its own, its model file loads as a solo run's, and it has a W&B run of its own
    (open beside the others'), grouped as its solo run would be, holding its own metrics."""
    results = puffer.train_batch("env=classic/cartpole", *SMALL, "train.total_timesteps=256", "eval.episodes=2",
                                 "logger=wandb", seeds=[4, 5], run_dir=tmp_path)
    assert [r["eval/episodes"] for r in results] == [2, 2]
    for seed in (4, 5):
        run_dir = tmp_path / f"seed_{seed}"
        rows = read_metrics(run_dir / "metrics.jsonl")
        assert [row["global_step"] for row in rows if "train/loss" in row] == [64, 128, 192, 256]
        assert OmegaConf.load(run_dir / "config.yaml").seed == seed
        agent = puffer.load(run_dir)
        assert agent.config["seed"] == seed
        assert any("eval/return_mean" in row for row in rows)
        records = finished_run_records(run_dir)
        (run,) = [r.run for r in records if r.HasField("run")]
        assert run.display_name.endswith(f"seed={seed}") and "seed" not in run.run_group
        history = [{(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in r.history.item}
                   for r in records if r.HasField("history")]
        logged = [h["train/loss"] for h in history if "train/loss" in h]
        assert logged == pytest.approx([row["train/loss"] for row in rows if "train/loss" in row])
    assert list((tmp_path / "batch" / "checkpoints").glob("epoch_*.pt"))


def test_members_launcher_groups_jobs_and_writes_their_directories(tmp_path):
    """`-m hydra/launcher=members seed=0,1 policy.rnn=null,lstm`: two batches (feed-forward and
    LSTM differ in shape), four job directories as the basic launcher's, and the report reads them."""
    sweep = tmp_path / "multirun"
    args = [sys.executable, "-m", "puffer", "-m", "hydra/launcher=members", "seed=0,1", "policy.rnn=null,lstm",
            *SMALL[:4], "train.total_timesteps=128", "eval.episodes=1", f"hydra.sweep.dir={sweep}"]
    result = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "as 2 batches" in result.stdout + result.stderr
    assert sorted(p.name for p in (sweep / "batches").iterdir()) == ["0", "1"]
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["0", "1", "2", "3", "batches"]
    for job in range(4):  # every job's log holds its batch's training, as a solo job's does
        assert "training 2 members" in (sweep / str(job) / "puffer.log").read_text()
    for job in range(4):
        job_dir = sweep / str(job)
        assert (job_dir / ".hydra" / "overrides.yaml").is_file()
        assert (job_dir / "model.safetensors").is_file()
        last = read_metrics(job_dir / "metrics.jsonl")[-1]
        assert math.isfinite(last["eval/return_mean"])
    table = subprocess.run([sys.executable, "-m", "puffer.report", str(sweep)], capture_output=True, text=True,
                           timeout=300)
    assert table.returncode == 0, table.stderr
    text = (sweep / "report.md").read_text()
    assert "policy.rnn=null" in text and "policy.rnn=lstm" in text
    assert text.count("| 2 |") >= 2  # two seeds of each policy


def test_members_launcher_runs_batches_side_by_side_in_processes(tmp_path):
    """hydra.launcher.processes=2: four seeds as two batches of two, each in a child process
    with its share of the CPUs as its torch threads, every job's directory as before."""
    sweep = tmp_path / "multirun"
    args = [sys.executable, "-m", "puffer", "-m", "hydra/launcher=members", "hydra.launcher.processes=2",
            "seed=0,1,2,3", "vec=serial", *SMALL[:4], "train.total_timesteps=128", "eval.episodes=1",
            f"hydra.sweep.dir={sweep}"]
    result = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "2 batches, 2 side by side" in result.stdout + result.stderr
    assert sorted(p.name for p in (sweep / "batches").iterdir()) == ["0_0", "0_2"]
    for job in range(4):
        job_dir = sweep / str(job)
        log_text = (job_dir / "puffer.log").read_text()
        assert "training 2 members" in log_text and "OMP_NUM_THREADS=" in log_text
        assert (job_dir / "model.safetensors").is_file()
        assert math.isfinite(read_metrics(job_dir / "metrics.jsonl")[-1]["eval/return_mean"])
    assert (sweep / "batches" / "0_2" / "checkpoints").is_dir()


def test_a_bad_launcher_setting_is_one_line_before_any_job(tmp_path):
    args = [sys.executable, "-m", "puffer", "-m", "hydra/launcher=members", "hydra.launcher.processes=0", "seed=0,1",
            f"hydra.sweep.dir={tmp_path / 'multirun'}"]
    result = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 2
    assert "hydra.launcher.processes=0: expected a whole number, 1 or more" in result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert not (tmp_path / "multirun" / "0").exists()


def test_sigterm_to_side_by_side_batches_saves_each_and_leaves_no_process(tmp_path):
    """SIGTERM to the multirun's group reaches each child batch once, through the launcher: each
    saves its checkpoint at an epoch's end, the multirun exits 130, nothing is left running."""
    sweep = tmp_path / "multirun"
    marker = f"side-by-side-{os.getpid()}"
    args = [sys.executable, "-m", "puffer", "-m", "hydra/launcher=members", "hydra.launcher.processes=2",
            "seed=0,1,2,3", "vec=serial", *SMALL[:4], "train.total_timesteps=10000000", "runtime.log_interval=0",
            f"hydra.sweep.dir={sweep}"]
    proc = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env={**os.environ, "PUFFER_TEST_MARKER": marker})
    for job in (0, 2):  # (the first job of each batch)
        wait_for_epochs(proc, sweep / str(job), timeout=180)
    os.killpg(proc.pid, signal.SIGTERM)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, output
    for batch, seeds in (("0_0", [0, 1]), ("0_2", [2, 3])):
        (saved,) = (sweep / "batches" / batch / "checkpoints").glob("epoch_*.pt")
        state = checkpoint.read(saved)
        assert state["members"]["seeds"] == seeds and state["global_step"] == state["epoch"] * 64
    assert_no_marked_process_left(marker)
    # the same multirun with resume=<its sweep dir>: each batch continues from its own place
    epochs = {batch: checkpoint.read(next((sweep / "batches" / batch / "checkpoints").glob("epoch_*.pt")))["epoch"]
              for batch in ("0_0", "0_2")}
    steps = (max(epochs.values()) + 1) * 64
    again = tmp_path / "again"
    args = [*args[:args.index("train.total_timesteps=10000000")], f"train.total_timesteps={steps}",
            "eval.episodes=1", f"resume={sweep}", f"hydra.sweep.dir={again}"]
    result = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    for job, batch in ((0, "0_0"), (1, "0_0"), (2, "0_2"), (3, "0_2")):
        log_text = (again / str(job) / "puffer.log").read_text()
        assert f"resuming the batch from {sweep / 'batches' / batch}" in log_text
        rows = [r for r in read_metrics(again / str(job) / "metrics.jsonl") if "train/loss" in r]
        assert rows[0]["global_step"] == (epochs[batch] + 1) * 64 and rows[-1]["global_step"] == steps


@pytest.mark.parametrize("members,max_members,processes,sizes", [
    (65, 64, 1, [33, 32]), (16, 64, 1, [16]), (4, 64, 2, [2, 2]), (3, 64, 4, [1, 1, 1]), (5, 2, 1, [2, 2, 1])])
def test_members_split_into_batches_of_even_sizes(members, max_members, processes, sizes):
    batches = chunks(list(range(members)), max_members, processes)
    assert [len(chunk) for _, chunk in batches] == sizes
    assert [start for start, _ in batches] == [sum(sizes[:i]) for i in range(len(sizes))]
    assert [m for _, chunk in batches for m in chunk] == list(range(members))


@pytest.mark.parametrize("policy", [[], ["policy.rnn=lstm"]])
def test_a_resumed_batch_continues_bit_for_bit(tmp_path, policy):
    """A batch resumed from its epoch-2 checkpoint ends with the weights, optimizer state and
    metrics of the batch that ran through: its envs, generators and each member's state resume
    (an LSTM's recurrent state among them)."""
    overrides = ["env=classic/cartpole", *SMALL, *policy, "train.total_timesteps=256", "runtime.checkpoint_interval=2",
                 "eval.episodes=1"]
    train_batch(*overrides, seeds=[0, 1], run_dir=tmp_path / "whole")
    middle = tmp_path / "whole" / "batch" / "checkpoints" / "epoch_000002.pt"
    train_batch(*overrides, f"resume={middle}", seeds=[0, 1], run_dir=tmp_path / "resumed")
    finals = [checkpoint.read(tmp_path / run / "batch" / "checkpoints" / "epoch_000004.pt", "the test", "cpu")
              for run in ("whole", "resumed")]
    for part in ("policy", "optimizer"):
        for key, value in finals[0][part].items():
            assert torch.equal(value, finals[1][part][key]), (part, key)
    for seed in (0, 1):
        rows = [[row for row in read_metrics(tmp_path / run / f"seed_{seed}" / "metrics.jsonl") if "train/loss" in row]
                for run in ("whole", "resumed")]
        assert [r["train/loss"] for r in rows[0][2:]] == [r["train/loss"] for r in rows[1]]
        assert [r["global_step"] for r in rows[1]] == [192, 256]
    with pytest.raises(ConfigError, match="seeds"):
        train_batch(*overrides, f"resume={middle}", seeds=[1, 0], run_dir=tmp_path / "other")


def test_sigterm_saves_every_member_and_the_batch_resumes(tmp_path):
    """SIGTERM to a members multirun (envs in worker processes) ends the epoch, saves the batch's
    checkpoint with its envs, exits 130; resume= of that checkpoint trains on from its step."""
    sweep = tmp_path / "multirun"
    args = [sys.executable, "-m", "puffer", "-m", "hydra/launcher=members", "seed=0,1", "vec=multiprocessing",
            *SMALL, "train.total_timesteps=10000000", "runtime.log_interval=0", f"hydra.sweep.dir={sweep}"]
    proc = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    wait_for_epochs(proc, sweep / "0", timeout=180)
    os.killpg(proc.pid, signal.SIGTERM)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, output
    (saved,) = (sweep / "batches" / "0" / "checkpoints").glob("epoch_*.pt")
    state = checkpoint.read(saved)
    assert state["global_step"] == state["epoch"] * 64  # a member's steps, at an epoch's end
    assert state["members"]["seeds"] == [0, 1]
    assert state["rollout"]["env_state"]["backend"] == "multiprocessing"
    steps = (state["epoch"] + 1) * 64
    train_batch("vec=multiprocessing", *SMALL, f"train.total_timesteps={steps}", "eval.episodes=1",
                f"resume={saved}", seeds=[0, 1], run_dir=tmp_path / "resumed")
    for seed in (0, 1):
        rows = [r for r in read_metrics(tmp_path / "resumed" / f"seed_{seed}" / "metrics.jsonl") if "train/loss" in r]
        assert [r["global_step"] for r in rows] == [steps]


def test_an_optuna_search_runs_its_trials_as_members(tmp_path):
    """+sweep=ppo_optuna through the members launcher: each launch of n_jobs trials trains as
    batches (trials sharing train.num_steps in one), and Optuna's best value is the best
    trial's evaluation, as with the basic launcher."""
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    sweep = tmp_path / "search"
    args = [sys.executable, "-m", "puffer", "-m", "+sweep=ppo_optuna", "hydra/launcher=members",
            "hydra.sweeper.n_trials=4", "hydra.sweeper.n_jobs=4", *SMALL[:1], *SMALL[2:4],
            "train.total_timesteps=512", "eval.episodes=2", f"hydra.sweep.dir={sweep}"]
    result = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    returns = [read_metrics(sweep / str(job) / "metrics.jsonl")[-1]["eval/return_mean"] for job in range(4)]
    batches = list((sweep / "batches").iterdir())
    assert 1 <= len(batches) < 4  # at least two trials shared a batch (3 choices of num_steps)
    best = OmegaConf.load(sweep / "optimization_results.yaml").best_value
    assert best == pytest.approx(max(returns))


@pytest.mark.parametrize("policy", [[], ["policy.rnn=lstm"]])
def test_members_are_evaluated_together_as_each_alone(make_cfg, policy):
    """evaluate_members: each member's deterministic evaluation is the one `evaluate` gives its
    policy alone (the same episodes, seeds and returns), an LSTM's as a feed-forward one's."""
    cfgs = [make_cfg("env=classic/cartpole", *SMALL, *policy, f"seed={seed}") for seed in (0, 7)]
    vecenv = make_member_vecenv(cfgs)
    try:
        trainer = build_trainer(cfgs, vecenv, "cpu")
        creator = make_env_creator(cfgs[0], evaluation=True)
        together = evaluate_members(trainer.policy, creator, 5, [0, 7], num_envs=2)
        for k, seed in enumerate((0, 7)):
            alone = evaluate(trainer.member_policy(k), creator, 5, seed, num_envs=2)
            assert together[k] == alone
    finally:
        vecenv.close()


def test_a_members_evaluation_steps_no_env_past_its_episodes(make_cfg):
    """An eval env that has played its quota stands still (5 episodes on 2 envs: the second env
    would otherwise play on while the first plays its third): the envs take exactly the steps of
    the episodes counted."""
    import gymnasium as gym

    from puffer.emulation import GymnasiumPufferEnv

    steps = []

    class Counted(gym.Wrapper):
        def step(self, action):
            steps.append(1)
            return self.env.step(action)

    cfgs = [make_cfg("env=classic/cartpole", *SMALL, f"seed={seed}") for seed in (0, 7)]
    vecenv = make_member_vecenv(cfgs)
    try:
        trainer = build_trainer(cfgs, vecenv, "cpu")
        results = evaluate_members(trainer.policy, lambda: GymnasiumPufferEnv(env=Counted(gym.make("CartPole-v1"))),
                                   5, [0, 7], num_envs=2)
    finally:
        vecenv.close()
    assert [r["episodes"] for r in results] == [5, 5]
    assert len(steps) == round(sum(r["length_mean"] * r["episodes"] for r in results))


def test_jobs_that_cannot_be_a_batch_run_one_after_another(tmp_path):
    """V-trace is not batched (it recomputes advantages between epochs): its jobs run as the
    basic launcher's would, the reason in the log, each with its files."""
    sweep = tmp_path / "multirun"
    args = [sys.executable, "-m", "puffer", "-m", "hydra/launcher=members", "seed=0,1", "train.vtrace=true",
            *SMALL, "train.total_timesteps=128", "eval.episodes=1", f"hydra.sweep.dir={sweep}"]
    result = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "run one after another, not as a batch: train.vtrace=true cannot train" in result.stdout + result.stderr
    assert not (sweep / "batches").exists()
    assert all((sweep / str(job) / "model.safetensors").is_file() for job in (0, 1))


def test_a_job_alone_in_its_group_runs_as_a_solo_job(tmp_path):
    """A group of one job (here the sweep's only one) gains nothing from the stacked learner: it
    runs as the basic launcher runs it, with a solo job's files and no batch."""
    sweep = tmp_path / "multirun"
    args = [sys.executable, "-m", "puffer", "-m", "hydra/launcher=members", "seed=3", *SMALL,
            "train.total_timesteps=128", "eval.episodes=1", f"hydra.sweep.dir={sweep}"]
    result = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "job 0 runs as a solo job" in result.stdout + result.stderr
    assert not (sweep / "batches").exists()
    assert (sweep / "0" / "model.safetensors").is_file()
    assert read_metrics(sweep / "0" / "metrics.jsonl")[-1]["eval/episodes"] == 1


def test_members_learn_the_same_on_every_vector_backend(tmp_path):
    """The members' envs as one vector env on Serial, Multiprocessing or Ray: the same members'
    weights at the end, bit for bit (each env seeded as its member's solo run's)."""
    pytest.importorskip("ray")
    weights = {}
    for vec in ("serial", "multiprocessing", "ray"):
        puffer.train_batch(f"vec={vec}", *SMALL, "train.total_timesteps=128", "eval.episodes=1", seeds=[0, 3],
                           run_dir=tmp_path / vec)
        weights[vec] = [puffer.load(tmp_path / vec / f"seed_{seed}").policy.state_dict() for seed in (0, 3)]
    for vec in ("multiprocessing", "ray"):
        for mine, serial in zip(weights[vec], weights["serial"], strict=True):
            assert all(torch.equal(mine[name], serial[name]) for name in serial), vec


def test_train_batch_trains_every_setting_with_every_seed(tmp_path):
    """puffer.train_batch(settings=...): each setting with each seed, one member each, in
    setting_<i>/seed_<s> with its own config; a setting of a shape key is refused naming it."""
    results = puffer.train_batch("env=classic/cartpole", *SMALL, "train.total_timesteps=128", "eval.episodes=1",
                                 seeds=[0, 1], settings=["train.learning_rate=0.001", ["train.learning_rate=0.01",
                                                                                      "train.ent_coef=0.02"]],
                                 run_dir=tmp_path)
    assert len(results) == 4
    for i, (rate, ent) in enumerate(((0.001, 0.0), (0.01, 0.02))):
        for seed in (0, 1):
            saved = OmegaConf.load(tmp_path / f"setting_{i}" / f"seed_{seed}" / "config.yaml")
            assert (saved.seed, saved.train.learning_rate, saved.train.ent_coef) == (seed, rate, ent)
            assert puffer.load(tmp_path / f"setting_{i}" / f"seed_{seed}").policy is not None
    with pytest.raises(ConfigError, match="train.num_steps"):
        puffer.train_batch("env=classic/cartpole", *SMALL, seeds=[0], settings=["train.num_steps=64", "train.num_steps=16"],
                           run_dir=tmp_path / "refused")


@pytest.mark.parametrize(("members", "samples", "num_minibatches"), [(16, 512, 4), (3, 10, 3), (4, 7, 4), (2, 5, 8)])
def test_members_without_masked_samples_draw_the_minibatches_of_the_general_path(members, samples, num_minibatches):
    # All samples valid (single-agent envs) takes one permutation per member and no loop over
    # pieces; it must draw what the per-member path draws, stopped members (target_kl) included.
    def generators():
        return [torch.Generator().manual_seed(100 + k) for k in range(members)]

    valid = torch.ones(members, samples, dtype=torch.bool)
    for drawing in ([True] * members, [k % 2 == 0 for k in range(members)], [False] * members):
        fast = member_minibatches(valid, num_minibatches, generators(), drawing)
        general = _masked_minibatches(valid, num_minibatches, generators(), drawing)
        for got, expected in zip(fast, general, strict=True):
            assert got.dtype == expected.dtype and torch.equal(got, expected)
    # member k's pieces are its solo run's: its permutation, cut in order
    positions, _, _ = member_minibatches(valid, num_minibatches, generators(), [True] * members)
    order = torch.randperm(samples, generator=generators()[members - 1])
    assert torch.equal(positions[:, members - 1].flatten()[:samples], order)
