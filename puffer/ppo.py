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

import torch
from torch import nn

from puffer import distributed
from puffer.config import TrainConfig
from puffer.models import ActionDist
from puffer.optim import lr_scale
from puffer.rollout import float32_params
from puffer.trainer import NonFiniteError, Trainer, seed_everything

__all__ = ["PPO", "train", "NonFiniteError", "seed_everything"]


def _mean(x: torch.Tensor) -> torch.Tensor:
    return x.mean()


def _weighted_mean(x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    return (x * weights).sum() / weights.sum().clamp(min=1.0)


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

    def compute_advantages(self) -> None:
        """GAE that stops at episode ends; terminals don't bootstrap, truncations do (the value
        of the final observation is the next row's value)."""
        if self.turn_based:
            return self.compute_turn_advantages()
        c, r = self.config, self.rollout
        last = torch.zeros_like(r.next_value)
        for t in reversed(range(c.num_steps)):
            next_value = r.next_value if t == c.num_steps - 1 else r.values[t + 1]
            delta = r.rewards[t] + c.gamma * next_value * (1 - r.terminals[t]) - r.values[t]
            last = delta + c.gamma * c.gae_lambda * (1 - r.dones[t]) * last
            self.advantages[t] = last

    def compute_turn_advantages(self) -> None:
        """GAE over each row's own turns (turn-based envs: a row is valid only when its agent is
        to move). The transition from one of an agent's moves to its next sums the rewards of
        every step in between (its opponents' moves included) and bootstraps from the value at
        its next move; an episode end in between cuts it (terminals don't bootstrap, truncations
        bootstrap from the final observation's value, the next row's). An agent's last move in
        the rollout whose next move lies beyond it has no value to bootstrap from (the value of
        a position where it is not to move is never trained): it is left out of the update.
        With every row valid but the dummy step after an episode end, this is the GAE above."""
        c, r = self.config, self.rollout
        T = c.num_steps
        zeros = torch.zeros_like(r.next_value)
        adv_next, value_next = zeros.clone(), r.next_value.clone()
        rewards, terminal, cut = zeros.clone(), zeros.clone(), zeros.clone()
        unknown = ~r.next_valid  # the next move's value is not in this rollout
        for t in reversed(range(T)):
            ended = r.dones[t]
            final_value = r.next_value if t == T - 1 else r.values[t + 1]
            # rewards after an episode end belong to the next episode
            rewards = r.rewards[t] + (1 - ended) * rewards
            terminal = torch.where(ended > 0, r.terminals[t], terminal)
            cut = torch.maximum(cut, ended)
            value_next = torch.where(ended > 0, final_value, value_next)
            delta = rewards + c.gamma * value_next * (1 - terminal) - r.values[t]
            advantage = delta + c.gamma * c.gae_lambda * (1 - cut) * adv_next
            unknown = unknown & (ended == 0)
            valid = r.valid[t].clone()  # a move (the carries below restart at it) ...
            r.valid[t] &= ~unknown  # ... but one with no value to bootstrap from is not learned from
            unknown = unknown & ~valid
            self.advantages[t] = torch.where(valid, advantage, zeros)
            # at a move, the carried quantities start again for the agent's previous move
            adv_next = torch.where(valid, advantage, torch.where(ended > 0, zeros, adv_next))
            value_next = torch.where(valid, r.values[t], value_next)
            rewards, terminal, cut = (torch.where(valid, zeros, x) for x in (rewards, terminal, cut))

    # -- learning ----------------------------------------------------------------------------
    def update(self) -> dict[str, float]:
        """PPO epochs over the rollout: shuffled valid samples, or for recurrent policies
        shuffled whole row sequences (BPTT over the rollout) with invalid steps weighted 0."""
        c = self.config
        self.compute_advantages()
        remaining = 1 - self.epoch / self.num_epochs  # the clip's schedule is linear
        if c.anneal_lr:
            for group in self.optimizer.param_groups:
                group["lr"] = c.learning_rate * lr_scale(c.lr_schedule, self.epoch / self.num_epochs)
        self.clip_coef = c.clip_coef * remaining if c.anneal_clip else c.clip_coef
        r = self.rollout
        returns = self.advantages + r.values
        minibatches = self._sequence_minibatches(returns) if self.recurrent else self._sample_minibatches(returns)
        if minibatches is None:
            return {}
        sums: dict[str, float] = defaultdict(float)
        count = 0
        for _ in range(c.update_epochs):
            for batch in minibatches():
                stats = self._minibatch_step(*batch)
                for key, value in stats.items():
                    sums[key] += value
                count += 1
            # (under torchrun the ranks' mean, so that they all stop together)
            if c.target_kl is not None and distributed.mean_over_ranks(stats["approx_kl"]) > c.target_kl:
                break
        metrics = {f"train/{k}": v / count for k, v in sums.items()}
        valid_returns, valid_values = returns[r.valid], r.values[r.valid]
        var = valid_returns.var()
        metrics["train/explained_variance"] = float("nan") if var == 0 else float(
            1 - (valid_returns - valid_values).var() / var)
        metrics["train/learning_rate"] = self.optimizer.param_groups[0]["lr"]
        metrics["train/clip_coef"] = self.clip_coef
        return metrics

    def _sample_minibatches(self, returns):
        """Valid samples only, shuffled each epoch into train.num_minibatches minibatches."""
        r = self.rollout
        index = r.valid.reshape(-1).nonzero().squeeze(-1)
        if len(index) == 0:
            return None
        obs = r.obs.reshape(-1, *r.obs.shape[2:])[index]
        actions = r.actions.reshape(-1, *r.actions.shape[2:])[index]
        logprobs, values = r.logprobs.reshape(-1)[index], r.values.reshape(-1)[index]
        advantages, returns = self.advantages.reshape(-1)[index], returns.reshape(-1)[index]
        n = len(index)
        size = max(1, math.ceil(n / self.config.num_minibatches))
        # under torchrun the ranks' valid counts differ: exactly num_minibatches each, so that
        # every rank joins every gradient all-reduce
        exact = self.world.parallel

        def epoch():
            order = torch.randperm(n, generator=self.generator).to(self.device)
            parts = (torch.tensor_split(order, self.config.num_minibatches) if exact
                     else (order[start : start + size] for start in range(0, n, size)))
            for mb in parts:
                yield obs[mb], actions[mb], logprobs[mb], values[mb], advantages[mb], returns[mb]

        return epoch

    def _sequence_minibatches(self, returns):
        """Whole rows (num_steps long) from their stored start state, shuffled by row."""
        r, n = self.rollout, self.vecenv.num_agents
        size = max(1, math.ceil(n / self.config.num_minibatches))

        def epoch():
            order = torch.randperm(n, generator=self.generator).to(self.device)
            for start in range(0, n, size):
                rows = order[start : start + size]
                sequence = (r.state0[0][rows], r.state0[1][rows], r.starts[:, rows])
                yield (r.obs[:, rows], r.actions[:, rows], r.logprobs[:, rows],
                       r.values[:, rows], self.advantages[:, rows], returns[:, rows],
                       r.valid[:, rows].float(), sequence)

        return epoch

    def _minibatch_step(self, obs, actions, old_logprobs, old_values, advantages, returns,
                        weights=None, sequence=None):
        c = self.config
        with self.autocast():
            if sequence is None:
                params, new_values = self.forward(obs)
            else:  # (T, B, ...) row sequences: flatten everything after the recurrent pass
                h0, c0, starts = sequence
                params, new_values = self.policy.forward_sequence(obs, (h0, c0), starts)
        params, new_values = float32_params(params), new_values.float()
        if sequence is not None:
            actions = actions.reshape(-1, *actions.shape[2:])
            old_logprobs, old_values, advantages, returns, weights = (
                x.reshape(-1) for x in (old_logprobs, old_values, advantages, returns, weights))
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
        return {"policy_loss": pg_loss.item(), "value_loss": v_loss.item(),
                "entropy": entropy_loss.item(), "approx_kl": approx_kl.item(),
                "clipfrac": clipfrac.item(), "grad_norm": grad_norm.item(), "loss": loss.item()}

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
