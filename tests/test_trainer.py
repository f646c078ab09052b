"""The algorithm seam: `train._target_` picks a puffer.training.trainer.Trainer subclass, which gets the
loop, the collector, logging and checkpoints without writing them again."""

from __future__ import annotations

import math

import pytest
import torch

from puffer.files import checkpoint
from puffer.loggers.base import read_metrics
from puffer.run import run
from puffer.training.trainer import Trainer


class MeanReturnRegression(Trainer):
    """A deliberately small second algorithm: fit the value head to each step's reward by one
    gradient step per rollout. It reuses everything but the update."""

    def update(self) -> dict[str, float]:
        r = self.rollout
        obs = r.obs[r.valid]
        _, values = self.policy(obs)
        loss = ((values - r.rewards[r.valid]) ** 2).mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return {"train/value_loss": loss.item(), "train/rows": float(len(obs))}


def test_train_target_selects_an_algorithm_that_reuses_loop_collector_and_checkpoints(make_cfg, tmp_path):
    cfg = make_cfg("train._target_=test_trainer.MeanReturnRegression", "train.total_timesteps=1024",
                   "eval.episodes=2")
    metrics = run(cfg, tmp_path)
    records = [r for r in read_metrics(tmp_path / "metrics.jsonl") if "train/rows" in r]
    assert len(records) == 1024 // (cfg.train.num_steps * cfg.vec.num_envs)  # one update per epoch
    # CartPole pays 1 per step: the regression target is 1 on every valid row.
    assert records[-1]["train/value_loss"] < records[0]["train/value_loss"]
    assert records[-1]["train/rows"] > 0 and metrics["env/episode_return"] > 0
    state = checkpoint.read(sorted((tmp_path / "checkpoints").glob("*.pt"))[-1])
    assert state["train_config"]["_target_"] == "test_trainer.MeanReturnRegression"
    assert state["global_step"] == 1024 and "eval/return_mean" in metrics


def test_muon_takes_the_weight_matrices_and_resumes_bit_for_bit(make_cfg, tmp_path):
    import torch

    from puffer.run import run

    small = ["train.optimizer=muon", "train.lr_schedule=cosine", "train.total_timesteps=1024",
             "train.num_steps=32", "eval.episodes=0"]
    run(make_cfg(*small, "runtime.checkpoint_interval=2", "runtime.keep_checkpoints=0"), tmp_path / "full")
    state = checkpoint.read(tmp_path / "full" / "checkpoints" / "epoch_000002.pt")
    muon, adam = state["optimizer"]["optimizers"]
    assert len(muon["param_groups"][0]["params"]) == 6  # 3 Linear weights each in actor and critic
    assert len(adam["param_groups"][0]["params"]) > 0  # biases, log_std, heads' biases
    run(make_cfg(*small, f"resume={tmp_path / 'full' / 'checkpoints' / 'epoch_000002.pt'}"), tmp_path / "resumed")
    final = [checkpoint.read(tmp_path / d / "checkpoints" / "epoch_000004.pt")["policy"]
             for d in ("full", "resumed")]
    assert all(torch.equal(final[0][k], final[1][k]) for k in final[0])


def test_cosine_schedule_decays_the_learning_rate_to_zero_along_a_half_cosine():
    from puffer.training.optim import lr_scale

    assert [lr_scale("cosine", p) for p in (0.0, 0.5, 1.0)] == pytest.approx([1.0, 0.5, 0.0])
    assert lr_scale("cosine", 0.25) == pytest.approx(0.8535534)


def test_spo_is_a_second_algorithm_in_its_own_file_that_reuses_ppo_and_the_collector(make_cfg, tmp_path):
    from puffer.training.spo import SPO

    cfg = make_cfg("train=spo", "train.total_timesteps=4096", "train.num_steps=32", "eval.episodes=2")
    assert cfg.train._target_ == "puffer.training.spo.SPO" and cfg.train.learning_rate == 0.003  # CartPole's settings
    metrics = run(cfg, tmp_path)
    state = checkpoint.read(sorted((tmp_path / "checkpoints").glob("*.pt"))[-1])
    assert state["train_config"]["_target_"] == "puffer.training.spo.SPO" and "eval/return_mean" in metrics
    # SPO's penalty: the per-sample objective peaks at ratio 1 + sign(A) * clip_coef, and unlike
    # PPO's clip its gradient does not vanish beyond it
    trainer = SPO.__new__(SPO)
    ratio = torch.linspace(0.5, 1.5, 1001, requires_grad=True)
    for advantage in (1.0, -2.0):
        loss = trainer.surrogate_loss(ratio, torch.full_like(ratio, advantage), 0.2)
        assert ratio[loss.argmin()].item() == pytest.approx(1 + 0.2 * math.copysign(1, advantage), abs=1e-3)
    loss = trainer.surrogate_loss(ratio, torch.ones_like(ratio), 0.2).sum()
    (grad,) = torch.autograd.grad(loss, ratio)
    assert grad[ratio.detach() > 1.3].gt(0).all()  # pulled back towards 1.2; PPO's clip gives 0 there
