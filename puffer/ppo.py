"""PPO: learn from a collected rollout with GAE and the clipped surrogate. One update for every
policy (feed-forward minibatches of samples, recurrent ones of whole row sequences).

What lives here: `PPO` (GAE, `update`, the loss) and `train`, the Python API's one call. What does
not: the epoch loop and checkpoints (puffer.trainer), collecting the rollout and which of its
steps are valid (puffer.rollout), building envs or policies from configs (puffer.run).
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from dataclasses import dataclass

import torch
from torch import nn

from puffer import distributed
from puffer.advantage import gae, turn_gae
from puffer.config import ConfigError, TrainConfig
from puffer.models import ActionDist
from puffer.optim import lr_scale
from puffer.rollout import float32_params
from puffer.trainer import NonFiniteError, Trainer, seed_everything

__all__ = ["PPO", "train", "NonFiniteError", "seed_everything"]


def _mean(x: torch.Tensor) -> torch.Tensor:
    return x.mean()


def _weighted_mean(x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    return (x * weights).sum() / weights.sum().clamp(min=1.0)


@dataclass
class Minibatch:
    """Samples of one gradient step: flat (B, ...) samples, or (T, B, ...) row sequences with
    `sequence` = (h0, c0, episode starts) and `weights` (1 for valid steps, 0 for the rest).
    `where`: each sample's flat index in the rollout (steps * rows); `prio`: the importance
    weights of prioritized draws."""

    obs: torch.Tensor
    actions: torch.Tensor
    logprobs: torch.Tensor
    values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    where: torch.Tensor
    weights: torch.Tensor | None = None
    sequence: tuple | None = None
    prio: torch.Tensor | None = None


class PPO(Trainer):
    """Proximal Policy Optimization (Schulman et al. 2017) with CleanRL's loss: GAE, the clipped
    surrogate, a clipped value loss, advantage normalisation, an entropy bonus."""

    def __init__(self, config: TrainConfig, vecenv, policy: nn.Module, **kwargs):
        super().__init__(config, vecenv, policy, **kwargs)
        self.dist = ActionDist(vecenv.single_action_space)
        self.clip_coef = config.clip_coef  # the current one: update() anneals it with train.anneal_clip
        self.advantages = torch.zeros((config.num_steps, vecenv.num_agents), device=self.device)
        # turn-based envs (puffer.emulation.TurnBasedPufferEnv): advantages over each agent's turns
        self.turn_based = getattr(vecenv.driver_env, "turn_based", False)
        if self.turn_based and config.vtrace:
            raise ConfigError("train.vtrace=true: V-trace advantages are not defined over the turns "
                              "of a turn-based env (its advantages span several steps); expected "
                              "train.vtrace=false")

    def compute_advantages(self, ratio: torch.Tensor | None = None) -> None:
        """self.advantages from the rollout (puffer.advantage): GAE, V-trace-clipped with
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
        if c.anneal_lr:
            for group in self.optimizer.param_groups:
                group["lr"] = c.learning_rate * lr_scale(c.lr_schedule, self.epoch / self.num_epochs)
        self.clip_coef = c.clip_coef * remaining if c.anneal_clip else c.clip_coef
        if not r.valid.any():
            return {}
        ratio = torch.ones_like(r.values) if c.vtrace else None  # pi / mu of every stored step
        sums: dict[str, float] = defaultdict(float)
        count = 0
        minibatches = self._sequence_minibatches() if self.recurrent else self._sample_minibatches()
        for epoch in range(c.update_epochs):
            if ratio is not None and epoch > 0:
                self.compute_advantages(ratio)
            self.returns = self.advantages + r.values
            for batch in minibatches():
                stats, batch_ratio = self._minibatch_step(batch)
                if ratio is not None:
                    ratio.view(-1)[batch.where] = batch_ratio
                for key, value in stats.items():
                    sums[key] += value
                count += 1
            # (under torchrun the ranks' mean, so that they all stop together)
            if c.target_kl is not None and distributed.mean_over_ranks(stats["approx_kl"]) > c.target_kl:
                break
        metrics = {f"train/{k}": v / count for k, v in sums.items()}
        valid_returns, valid_values = self.returns[r.valid], r.values[r.valid]
        var = valid_returns.var()
        metrics["train/explained_variance"] = float("nan") if var == 0 else float(
            1 - (valid_returns - valid_values).var() / var)
        metrics["train/learning_rate"] = self.optimizer.param_groups[0]["lr"]
        metrics["train/clip_coef"] = self.clip_coef
        return metrics

    def _sample_minibatches(self):
        """Valid samples only, shuffled each epoch into train.num_minibatches minibatches (or
        with train.prioritized, as many drawn by priority)."""
        r, c = self.rollout, self.config
        index = r.valid.reshape(-1).nonzero().squeeze(-1)
        obs = r.obs.reshape(-1, *r.obs.shape[2:])[index]
        actions = r.actions.reshape(-1, *r.actions.shape[2:])[index]
        logprobs, values = r.logprobs.reshape(-1)[index], r.values.reshape(-1)[index]
        n = len(index)
        size = max(1, math.ceil(n / c.num_minibatches))
        # under torchrun the ranks' valid counts differ: exactly num_minibatches each, so that
        # every rank joins every gradient all-reduce
        exact = self.world.parallel

        def epoch():
            advantages, returns = self.advantages.reshape(-1)[index], self.returns.reshape(-1)[index]
            if c.prioritized:
                parts = (self._draw(advantages.abs(), size) for _ in range(c.num_minibatches))
            else:
                order = torch.randperm(n, generator=self.generator).to(self.device)
                parts = (torch.tensor_split(order, c.num_minibatches) if exact
                         else (order[start : start + size] for start in range(0, n, size)))
                parts = ((mb, None) for mb in parts)
            for mb, prio in parts:
                yield Minibatch(obs[mb], actions[mb], logprobs[mb], values[mb], advantages[mb],
                                returns[mb], where=index[mb], prio=prio)

        return epoch

    def _sequence_minibatches(self):
        """Whole rows (num_steps long) from their stored start state, shuffled by row (or with
        train.prioritized, drawn by the summed |advantage| of their valid steps)."""
        r, c, n = self.rollout, self.config, self.vecenv.num_agents
        size = max(1, math.ceil(n / c.num_minibatches))
        steps = torch.arange(r.num_steps, device=self.device)[:, None] * n

        def epoch():
            if c.prioritized:
                priority = (self.advantages.abs() * r.valid).sum(0)
                parts = (self._draw(priority, size) for _ in range(c.num_minibatches))
            else:
                order = torch.randperm(n, generator=self.generator).to(self.device)
                parts = ((order[start : start + size], None) for start in range(0, n, size))
            for rows, prio in parts:
                yield Minibatch(r.obs[:, rows], r.actions[:, rows], r.logprobs[:, rows],
                                r.values[:, rows], self.advantages[:, rows], self.returns[:, rows],
                                where=(steps + rows).reshape(-1), weights=r.valid[:, rows].float(),
                                sequence=(r.state0[0][rows], r.state0[1][rows], r.starts[:, rows]),
                                prio=None if prio is None else prio.expand(r.num_steps, -1))

        return epoch

    def _draw(self, priority: torch.Tensor, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        """`count` indices drawn with replacement with probability p proportional to
        priority^prio_alpha, and their importance weights (n p)^-beta (1 for uniform draws),
        beta annealed linearly from train.prio_beta0 to 1 over training (Schaul et al. 2016)."""
        c = self.config
        weights = priority.float().pow(c.prio_alpha).nan_to_num(0.0, 0.0, 0.0) + 1e-8
        probs = weights / weights.sum()
        drawn = torch.multinomial(probs.cpu(), count, replacement=True, generator=self.generator)
        drawn = drawn.to(self.device)
        beta = c.prio_beta0 + (1 - c.prio_beta0) * self.epoch / self.num_epochs
        return drawn, (len(priority) * probs[drawn]) ** -beta

    def _minibatch_step(self, mb: Minibatch) -> tuple[dict[str, float], torch.Tensor]:
        """One gradient step of PPO's loss on `mb`; its stats and the new ratio of each sample."""
        c = self.config
        actions, old_logprobs, old_values, advantages, returns, weights, prio = (
            mb.actions, mb.logprobs, mb.values, mb.advantages, mb.returns, mb.weights, mb.prio)
        with self.autocast():
            if mb.sequence is None:
                params, new_values = self.forward(mb.obs)
            else:  # (T, B, ...) row sequences: flatten everything after the recurrent pass
                h0, c0, starts = mb.sequence
                params, new_values = self.policy.forward_sequence(mb.obs, (h0, c0), starts)
        params, new_values = float32_params(params), new_values.float()
        if mb.sequence is not None:
            actions = actions.reshape(-1, *actions.shape[2:])
            old_logprobs, old_values, advantages, returns, weights = (
                x.reshape(-1) for x in (old_logprobs, old_values, advantages, returns, weights))
            prio = None if prio is None else prio.reshape(-1)
        mean = _mean if weights is None else functools.partial(_weighted_mean, weights=weights)
        new_logprobs, entropy = self.dist.log_prob_entropy(params, actions)
        logratio = new_logprobs - old_logprobs
        ratio = logratio.exp()
        with torch.no_grad():
            approx_kl = mean((ratio - 1) - logratio)
            clipfrac = mean(((ratio - 1.0).abs() > self.clip_coef).float())
        if c.norm_adv and self.world.parallel:  # the minibatches of all ranks as one
            n, adv_mean, adv_var = distributed.moments(advantages.detach()[:, None] if weights is None
                                                       else advantages.detach()[weights > 0][:, None])
            std = (adv_var * n / max(float(n) - 1, 1.0)).sqrt() if weights is None else adv_var.sqrt()
            advantages = (advantages - adv_mean.float()) / (std.float() + 1e-8)
        elif c.norm_adv and len(advantages) > 1 and weights is None:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        elif c.norm_adv and len(advantages) > 1:
            centred = advantages - mean(advantages)
            advantages = centred / (mean(centred**2).sqrt() + 1e-8)
        if prio is not None:  # prioritized draws: importance weights undo their bias
            advantages = advantages * prio
        pg_loss = mean(torch.max(-advantages * ratio,
                                 -advantages * ratio.clamp(1 - self.clip_coef, 1 + self.clip_coef)))
        if c.clip_vloss:
            clipped = old_values + (new_values - old_values).clamp(-c.vf_clip_coef, c.vf_clip_coef)
            v_loss = 0.5 * mean(torch.max((new_values - returns) ** 2, (clipped - returns) ** 2))
        else:
            v_loss = 0.5 * mean((new_values - returns) ** 2)
        entropy_loss = mean(entropy)
        loss = pg_loss - c.ent_coef * entropy_loss + c.vf_coef * v_loss
        self._check_finite("loss", loss)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        distributed.average_gradients(self.policy.parameters())  # under torchrun
        grad_norm = nn.utils.clip_grad_norm_(self.policy.parameters(), c.max_grad_norm)
        self._check_finite("grad_norm", grad_norm)
        self.optimizer.step()
        return ({"policy_loss": pg_loss.item(), "value_loss": v_loss.item(),
                 "entropy": entropy_loss.item(), "approx_kl": approx_kl.item(),
                 "clipfrac": clipfrac.item(), "grad_norm": grad_norm.item(), "loss": loss.item()},
                ratio.detach())

    def _check_finite(self, name: str, value: torch.Tensor) -> None:
        if not torch.isfinite(value).all():
            raise NonFiniteError(
                f"train/{name} is {value.item()} at epoch {self.epoch} (global step "
                f"{self.global_step}); stopping before the parameters are saved. Lower "
                "train.learning_rate or train.max_grad_norm"
            )

def train(config: TrainConfig, vecenv, policy: nn.Module, device: str = "auto", seed: int = 0,
          **kwargs) -> PPO:
    """Train `policy` on `vecenv` with PPO; returns the trainer (its `last_metrics` hold the
    final losses, episode stats and throughput)."""
    from puffer.config import resolve_device

    seed_everything(seed)
    trainer = PPO(config, vecenv, policy, device=resolve_device(device), seed=seed, **kwargs)
    trainer.train()
    return trainer
