"""The algorithm seam: a third algorithm, of a family PPO's subclasses do not cover, written in
one file with its own config schema (here, this test file alone), runs through the same run
path, collector, checkpoints and evaluation.

The sketch is a KL-penalized policy gradient (the "adaptive KL penalty" variant of Schulman et
al. 2017, with a fixed coefficient): it keeps a rollout field of its own, the behaviour policy's
logits of every step (`record_step`), and penalizes KL(old || new) over them instead of
clipping the ratio. Its settings share nothing with PPO's beyond the base AlgorithmConfig.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from omegaconf import OmegaConf

from puffer.config.schema import AlgorithmConfig
from puffer.errors import ConfigError
from puffer.loggers import read_metrics
from puffer.run import run
from puffer.training.advantage import gae
from puffer.training.trainer import Trainer


@dataclass
class KLPenaltyConfig(AlgorithmConfig):
    _target_: str = f"{__name__}.KLPenalty"
    kl_coef: float = 1.0
    vf_coef: float = 0.5
    gae_lambda: float = 0.95
    update_epochs: int = 4


class KLPenalty(Trainer):
    def __init__(self, config: KLPenaltyConfig, vecenv, policy, **kwargs):
        super().__init__(config, vecenv, policy, **kwargs)
        T, N = config.num_steps, vecenv.num_rows
        self.old_logits = torch.zeros((T, N, int(vecenv.single_action_space.n)), device=self.device)
        self.advantages = torch.zeros((T, N), device=self.device)

    def record_step(self, t, index, params, value) -> None:
        self.old_logits[t, index] = params

    def update(self) -> dict[str, float]:
        c, r = self.config, self.rollout
        gae(r, self.advantages, c.gamma, c.gae_lambda)
        valid = r.valid.reshape(-1)
        obs = r.obs.reshape(-1, *r.obs.shape[2:])[valid]
        actions = r.actions.reshape(-1)[valid].long()
        old_logp = torch.log_softmax(self.old_logits.reshape(-1, self.old_logits.shape[-1])[valid], -1)
        advantages = self.advantages.reshape(-1)[valid]
        returns = advantages + r.values.reshape(-1)[valid]
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        stats = {}
        for _ in range(c.update_epochs):
            for batch in torch.randperm(len(obs), generator=self.generator).chunk(c.num_minibatches):
                logits, values = self.forward(obs[batch])
                logp = torch.log_softmax(logits, -1)
                ratio = (logp.gather(1, actions[batch, None])[:, 0]
                         - old_logp[batch].gather(1, actions[batch, None])[:, 0]).exp()
                kl = (old_logp[batch].exp() * (old_logp[batch] - logp)).sum(-1).mean()
                pg_loss = -(ratio * advantages[batch]).mean()
                v_loss = 0.5 * ((values - returns[batch]) ** 2).mean()
                loss = pg_loss + c.kl_coef * kl + c.vf_coef * v_loss
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                self.optimizer.step()
                stats = {"train/policy_loss": pg_loss.item(), "train/kl": kl.item(),
                         "train/value_loss": v_loss.item()}
        return stats


def klpenalty_config(make_cfg, *overrides, **train):
    """The run config with train replaced by the sketch's own schema (what `train=klpenalty`
    would compose from a conf/train/klpenalty.yaml that names it)."""
    cfg = make_cfg("eval.episodes=10", *overrides)
    cfg.train = OmegaConf.structured(KLPenaltyConfig(**train))
    return cfg


def test_a_third_algorithm_with_its_own_rollout_field_and_schema_learns_cartpole(make_cfg, tmp_path):
    cfg = klpenalty_config(make_cfg, "seed=1", total_timesteps=30_000, num_steps=256,
                           num_minibatches=8, learning_rate=1e-3)
    metrics = run(cfg, tmp_path)
    history = read_metrics(tmp_path / "metrics.jsonl")
    kls = [h["train/kl"] for h in history if "train/kl" in h]
    assert kls and all(k >= 0 for k in kls)  # its own statistics, logged as PPO's are
    assert metrics["eval/return_mean"] >= 300, metrics  # random play returns ~22; seeds 0-3 gave 420-500
    assert (tmp_path / "checkpoints").is_dir() and (tmp_path / "model.safetensors").is_file()


def test_the_sketchs_schema_is_checked_like_ppos(make_cfg, tmp_path):
    cfg = klpenalty_config(make_cfg)
    with pytest.raises(Exception, match="clip_coef"):  # PPO's key is not the sketch's
        OmegaConf.update(cfg, "train.clip_coef", 0.1, merge=False)
    cfg = klpenalty_config(make_cfg, total_timesteps=-5)
    with pytest.raises(ConfigError, match="train.total_timesteps=-5"):
        run(cfg, tmp_path)
