"""PPO: learn from a collected rollout with GAE and the clipped surrogate. One update for every
policy (feed-forward minibatches of samples, recurrent ones of whole row sequences).

What lives here: `PPO` (`update` and the loss, with the names of the paper) and `train`, the
Python API's one call. What does not: the epoch loop and checkpoints (puffer.training.trainer), collecting
the rollout and which of its steps are valid (puffer.training.rollout), advantages (puffer.training.advantage),
minibatches (puffer.training.minibatches), building envs or policies from configs (puffer.build).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch
from torch import nn

from puffer.config import ConfigError, TrainConfig
from puffer.policies.distributions import ActionDist
from puffer.runtime import distributed
from puffer.training import minibatches
from puffer.training.advantage import gae, turn_gae
from puffer.training.minibatches import Minibatch, Priority
from puffer.training.rollout import float32_params
from puffer.training.trainer import NonFiniteError, Trainer, seed_everything

__all__ = ["PPO", "train", "NonFiniteError", "seed_everything"]


# What each minibatch step reports, in this order (averaged over an update's steps as train/<name>).
STATS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", "grad_norm", "loss")


class Coefficients(NamedTuple):
    """The float settings of PPO's loss: floats for one agent, or tensors for members of a batch
    (puffer.training.members), which may differ in them: the clip ranges bound each sample
    ((N, 1) against (N, B) samples), the loss weights scale each member's means ((N,))."""

    clip_coef: float | torch.Tensor
    vf_clip_coef: float | torch.Tensor
    ent_coef: float | torch.Tensor
    vf_coef: float | torch.Tensor


def _mean(x: torch.Tensor) -> torch.Tensor:
    return x.mean(-1)


def _weighted_mean(x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    return (x * weights).sum(-1) / weights.sum(-1).clamp(min=1.0)


class PPO(Trainer):
    """Proximal Policy Optimization (Schulman et al. 2017) with CleanRL's loss: GAE, the clipped
    surrogate, a clipped value loss, advantage normalisation, an entropy bonus."""

    def __init__(self, config: TrainConfig, vecenv, policy: nn.Module, **kwargs):
        super().__init__(config, vecenv, policy, **kwargs)
        self.dist = ActionDist(vecenv.single_action_space)
        self.clip_coef = config.clip_coef  # the current one: update() anneals it with train.anneal_clip
        self.advantages = torch.zeros((config.num_steps, vecenv.num_rows), device=self.device)
        # turn-based envs (puffer.emulation.TurnBasedPufferEnv): advantages over each agent's turns
        self.turn_based = getattr(vecenv.driver_env, "turn_based", False)
        if self.turn_based and config.vtrace:
            raise ConfigError("train.vtrace=true: V-trace advantages are not defined over the turns "
                              "of a turn-based env (its advantages span several steps); expected "
                              "train.vtrace=false")

    def compute_advantages(self, ratio: torch.Tensor | None = None) -> None:
        """self.advantages from the rollout (puffer.training.advantage): GAE, V-trace-clipped with
        `ratio`, or GAE over each agent's turns in turn-based games."""
        c = self.config
        if self.turn_based:
            turn_gae(self.rollout, self.advantages, c.gamma, c.gae_lambda)
        else:
            gae(self.rollout, self.advantages, c.gamma, c.gae_lambda, ratio,
                c.vtrace_rho_clip, c.vtrace_c_clip)

    # -- learning ----------------------------------------------------------------------------
    def update(self) -> dict[str, float]:
        """PPO epochs over the rollout: shuffled valid samples, or for recurrent policies
        shuffled whole row sequences (BPTT over the rollout) with invalid steps weighted 0.
        train.vtrace: from the second epoch on, advantages are recomputed with the ratios the
        previous epoch left. train.prioritized: minibatches drawn by |advantage|^prio_alpha."""
        c, r = self.config, self.rollout
        self.compute_advantages()
        remaining = 1 - self.epoch / self.num_epochs  # the clip's schedule is linear
        self.anneal_learning_rate()
        self.clip_coef = c.clip_coef * remaining if c.anneal_clip else c.clip_coef
        if not r.valid.any():
            return {}
        ratio = torch.ones_like(r.values) if c.vtrace else None  # pi / mu of every stored step
        # the minibatches' STATS summed on the device: read once an epoch, not once a step (each
        # read waits for the GPU's queue to drain); in float64, as Python's floats summed them
        sums = torch.zeros(len(STATS), dtype=torch.float64, device=self.device)
        count = 0
        epoch_batches = self.minibatches()
        for epoch in range(c.update_epochs):
            if ratio is not None and epoch > 0:
                self.compute_advantages(ratio)
            for batch in epoch_batches():
                stats, batch_ratio = self._minibatch_step(batch)
                if ratio is not None:
                    ratio.view(-1)[batch.where] = batch_ratio
                sums += stats
                count += 1
            self.check_finite_stats(sums, STATS, first=("loss", "grad_norm"))
            # (under torchrun the ranks' mean, so that they all stop together)
            if c.target_kl is not None and distributed.mean_over_ranks(
                    float(stats[STATS.index("approx_kl")])) > c.target_kl:
                break
        metrics = {f"train/{k}": v / count for k, v in zip(STATS, sums.tolist(), strict=True)}
        valid_values = r.values[r.valid]
        valid_returns = self.advantages[r.valid] + valid_values
        var = valid_returns.var()
        metrics["train/explained_variance"] = float("nan") if var == 0 else float(
            1 - (valid_returns - valid_values).var() / var)
        metrics["train/learning_rate"] = self.optimizer.param_groups[0]["lr"]
        metrics["train/clip_coef"] = self.clip_coef
        return metrics

    def minibatches(self) -> minibatches.Epoch:
        """A function that yields an epoch's minibatches (puffer.training.minibatches): valid samples, or for recurrent
        policies whole row sequences (BPTT over the rollout); uniformly shuffled, or with
        train.prioritized drawn by |advantage|^prio_alpha with beta annealed from prio_beta0
        to 1 over training."""
        c = self.config
        priority = (Priority(c.prio_alpha, c.prio_beta0 + (1 - c.prio_beta0) * self.epoch / self.num_epochs,
                             self.generator) if c.prioritized else None)
        if self.recurrent:
            return minibatches.sequences(self.rollout, self.advantages, c.num_minibatches,
                                         self.generator, priority)
        # under torchrun the ranks' valid counts differ: exactly num_minibatches each, so that
        # every rank joins every gradient all-reduce
        return minibatches.samples(self.rollout, self.advantages, c.num_minibatches, self.generator,
                                   exact=self.world.parallel, priority=priority)

    def coefficients(self) -> Coefficients:
        """The loss's float settings now (clip_coef as annealed)."""
        c = self.config
        return Coefficients(self.clip_coef, c.vf_clip_coef, c.ent_coef, c.vf_coef)

    def _minibatch_step(self, mb: Minibatch) -> tuple[torch.Tensor, torch.Tensor]:
        """One gradient step of PPO's loss on `mb`; its STATS (a tensor on the device) and the new
        ratio of each sample."""
        c = self.config
        with self.autocast():
            if mb.sequence is None:
                params, new_values = self.forward(mb.obs)
            else:  # (T, B, ...) row sequences: flatten everything after the recurrent pass
                h0, c0, starts = mb.sequence
                params, new_values = self.policy.forward_sequence(mb.obs, (h0, c0), starts)
        actions = mb.actions if mb.sequence is None else mb.actions.reshape(-1, *mb.actions.shape[2:])
        new_logprobs, entropy = self.dist.log_prob_entropy(float32_params(params), actions)
        loss, stats, ratio = self.loss(new_logprobs, entropy, new_values.float(), mb, self.coefficients())
        grad_norm = self.optimizer_step(loss, c.max_grad_norm)
        stats = torch.cat([stats[:5], grad_norm.detach()[None].to(stats.dtype), stats[5:]])
        return stats.float(), ratio.detach()

    def loss(self, new_logprobs: torch.Tensor, entropy: torch.Tensor, new_values: torch.Tensor, mb: Minibatch,
             k: Coefficients) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """PPO's loss on `mb` from the policy's log-probabilities, entropies and values of its
        samples, with the float settings `k`; (loss, its STATS but grad_norm, each sample's new
        ratio). A pure function of its inputs, no optimizer, no state; the samples are the last
        axis, and every mean and normalisation is over it: with a leading member axis (N, B)
        and (N, 1) settings it is each member's own loss (puffer.training.members)."""
        c = self.config
        old_logprobs, old_values, advantages, returns, weights, prio = (
            mb.logprobs, mb.values, mb.advantages, mb.returns, mb.weights, mb.prio)
        if mb.sequence is not None:  # (..., T, B) row sequences: their T * B steps are the samples
            old_logprobs, old_values, advantages, returns, weights = (
                x.flatten(-2) for x in (old_logprobs, old_values, advantages, returns, weights))
            prio = None if prio is None else prio.flatten(-2)
        mean = _mean if weights is None else functools.partial(_weighted_mean, weights=weights)
        logratio = new_logprobs - old_logprobs
        ratio = logratio.exp()
        with torch.no_grad():
            approx_kl = mean((ratio - 1) - logratio)
            clipfrac = mean(((ratio - 1.0).abs() > k.clip_coef).float())
        if c.norm_adv and self.world.parallel:  # the minibatches of all ranks as one
            n, adv_mean, adv_var = distributed.moments(advantages.detach()[:, None] if weights is None
                                                       else advantages.detach()[weights > 0][:, None])
            std = (adv_var * n / max(float(n) - 1, 1.0)).sqrt() if weights is None else adv_var.sqrt()
            advantages = (advantages - adv_mean.float()) / (std.float() + 1e-8)
        elif c.norm_adv and advantages.shape[-1] > 1 and weights is None:
            advantages = ((advantages - advantages.mean(-1, keepdim=True))
                          / (advantages.std(-1, keepdim=True) + 1e-8))
        elif c.norm_adv and mb.padded:  # as the unweighted branch over the real samples
            count = weights.sum(-1, keepdim=True)
            centred = advantages - mean(advantages)[..., None]
            std = ((centred**2 * weights).sum(-1, keepdim=True) / (count - 1).clamp(min=1)).sqrt()
            advantages = torch.where(count > 1, centred / (std + 1e-8), advantages)
        elif c.norm_adv and advantages.shape[-1] > 1:
            centred = advantages - mean(advantages)[..., None]
            advantages = centred / (mean(centred**2).sqrt()[..., None] + 1e-8)
        if prio is not None:  # prioritized draws: importance weights undo their bias
            advantages = advantages * prio
        pg_loss = mean(self.surrogate_loss(ratio, advantages, k.clip_coef))
        if c.clip_vloss:
            clipped = old_values + (new_values - old_values).clamp(-k.vf_clip_coef, k.vf_clip_coef)
            v_loss = 0.5 * mean(torch.max((new_values - returns) ** 2, (clipped - returns) ** 2))
        else:
            v_loss = 0.5 * mean((new_values - returns) ** 2)
        entropy_loss = mean(entropy)
        loss = pg_loss - k.ent_coef * entropy_loss + k.vf_coef * v_loss
        stats = torch.stack([pg_loss, v_loss, entropy_loss, approx_kl, clipfrac, loss], -1).detach()
        return loss, stats, ratio

    def surrogate_loss(self, ratio: torch.Tensor, advantages: torch.Tensor, clip_coef) -> torch.Tensor:
        """Each sample's policy loss: PPO's clipped surrogate (the pessimistic bound)."""
        clipped = ratio.clamp(1 - clip_coef, 1 + clip_coef)
        return torch.max(-advantages * ratio, -advantages * clipped)

def train(config: TrainConfig, vecenv, policy: nn.Module, device: str = "auto", seed: int = 0,
          **kwargs) -> PPO:
    """Train `policy` on `vecenv` with PPO; returns the trainer (its `last_metrics` hold the
    final losses, episode stats and throughput). Progress shows as the CLI's does (the dashboard
    in a terminal, else a `puffer.monitor.progress` log line every 5 s; progress=None for neither);
    `run_dir=` saves checkpoints there as the CLI does (the trainer's other keywords pass on)."""
    from puffer.config.validate import resolve_device
    from puffer.monitor.progress import ProgressReporter

    seed_everything(seed)
    kwargs.setdefault("progress", ProgressReporter(getattr(vecenv.driver_env, "name", "env")))
    trainer = PPO(config, vecenv, policy, device=resolve_device(device), seed=seed, **kwargs)
    try:
        trainer.train()
    finally:
        if trainer.progress is not None:
            trainer.progress.close()
    return trainer
