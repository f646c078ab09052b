"""SAC, Soft Actor-Critic (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications",
arXiv:1812.05905): a squashed Gaussian actor that maximizes the twin critics' smaller Q-value plus
its entropy, critics regressed on the soft Bellman target of target critics that trail them by
Polyak averaging, and an entropy coefficient tuned so that the policy's entropy stays near a
target. It learns from the replay buffer (puffer.training.replay), filled each epoch from the one
collector, as DQN does.

What lives here: `SAC` (its warm-up actions, `update`, the entropy coefficient and the target
critics). What does not: the networks and the squashed Gaussian (policy=sac:
puffer.policies.networks.SACNetwork, puffer.policies.distributions.SquashedGaussian), the buffer
and its checkpoints (puffer.training.replay), the loop (puffer.training.trainer).
"""

from __future__ import annotations

import copy
import math

import torch
from gymnasium import spaces
from torch import nn

from puffer.config.schema import SACConfig
from puffer.emulation.actions import HybridBox
from puffer.errors import ConfigError
from puffer.policies.distributions import GLOBAL_NOISE, CorrelatedNoise, Noise, SquashedGaussian
from puffer.policies.networks import SACNetwork
from puffer.policies.protocol import is_recurrent
from puffer.policies.wrappers import PolicyWrapper
from puffer.training.optim import Combined
from puffer.training.replay import LearnsFromReplay
from puffer.training.trainer import Trainer, refuse_turn_based

__all__ = ["SAC"]


class SAC(LearnsFromReplay, Trainer):
    """Each gradient step, on a minibatch from the buffer (SB3's losses, in one backward pass and
    one optimizer step, since they train disjoint parameters):
    - critics: 0.5 sum_i MSE(Q_i(s, a), r + gamma (1 - terminal) (min_i Q'_i(s', a') - alpha log pi(a'|s'))),
      a' drawn from the actor, Q' the target critics;
    - actor: mean(alpha log pi(a~|s) - min_i Q_i(s, a~)), a~ drawn with the reparameterization
      trick, through critics whose weights it does not train;
    - entropy coefficient: -mean(log alpha (log pi(a~|s) + target_entropy)) (train.autotune);
    then the target critics move train.tau towards the critics."""

    stats: tuple[str, ...] = ("critic_loss", "actor_loss", "ent_coef_loss", "ent_coef", "q_values", "entropy")
    shown_losses = ("critic_loss", "actor_loss", "ent_coef", "q_values")

    @classmethod
    def name(cls) -> str:
        return "train=sac"

    @classmethod
    def check_env(cls, vecenv) -> None:
        space = vecenv.single_action_space
        if isinstance(space, HybridBox) or not isinstance(space, spaces.Box):
            raise ConfigError(f"train=sac acts in a Box of continuous actions; this env's action space is {space}: "
                              "expected train=ppo, or train=pqn / train=dqn for Discrete actions")
        try:
            SquashedGaussian(space)
        except ValueError as exc:
            raise ConfigError(f"train=sac: {exc}") from None
        refuse_turn_based(vecenv, cls.name(), "SAC")

    def __init__(self, config: SACConfig, vecenv, policy: nn.Module, **kwargs):
        self.check_env(vecenv)
        self.net = sac_network(policy)
        super().__init__(config, vecenv, policy, **kwargs)
        self.target_critic = copy.deepcopy(self.net.critic).requires_grad_(False)
        self.target_entropy = (float(config.target_entropy) if config.target_entropy is not None
                               else -float(vecenv.single_action_space.shape[0]))
        self.init_replay()

    def make_optimizer(self):
        """The policy's optimizer, and in it (train.autotune) log alpha, at the same learning rate (SB3's)."""
        c = self.config
        self.log_ent_coef = nn.Parameter(torch.tensor(math.log(c.ent_coef), device=self.device),
                                         requires_grad=c.autotune)
        optimizer = super().make_optimizer()
        if c.autotune:
            (optimizer.optimizers[-1] if isinstance(optimizer, Combined) else optimizer).add_param_group(
                {"params": [self.log_ent_coef]})
        return optimizer

    def targets(self) -> dict[str, tuple[nn.Module, nn.Module]]:
        return {"target_critic": (self.target_critic, self.net.critic)}

    # -- acting ------------------------------------------------------------------------------
    def sampling_noise(self) -> Noise:
        rho = self.config.noise_correlation
        return CorrelatedNoise(rho) if rho > 0 else GLOBAL_NOISE

    def action_rule(self):
        return self.warm_up_or_sample

    def warm_up_or_sample(self, params) -> tuple[torch.Tensor, torch.Tensor]:
        """Before train.learning_starts steps, actions uniform in the bounds (SB3's warm-up); then
        the squashed Gaussian's draws. Random numbers come from the collector's noise."""
        dist, noise = self.net.action_dist, self.collector.acting.noise
        if self.global_step >= self.config.learning_starts:
            return dist.sample(params, noise)
        unit = 2 * torch.exp(-noise.exponential(params[0])) - 1  # exp(-Exp(1)) is uniform on (0, 1]
        return dist.squash(unit), torch.full_like(unit[:, 0], -unit.shape[1] * math.log(2))

    # -- learning ----------------------------------------------------------------------------
    def inputs(self, obs: torch.Tensor) -> torch.Tensor:
        """What the networks read of observations: normalized where policy.norm_obs wraps them."""
        return self.policy.inputs(obs) if isinstance(self.policy, PolicyWrapper) else obs

    def update(self) -> dict[str, float]:
        c = self.config
        steps = self.replay_steps()
        self.anneal_learning_rate()
        sums = torch.zeros(len(self.stats), dtype=torch.float64, device=self.device)
        for _ in range(steps):
            _, _, batch = self.replay.sample(c.batch_size, self.generator)
            sums += self.gradient_step(*batch)
        metrics = self.mean_stats(sums, self.stats, steps) if steps else {}
        if steps:
            metrics["train/loss"] = metrics["train/critic_loss"]
        metrics["train/learning_rate"] = self.optimizer.param_groups[0]["lr"]
        metrics["train/replay_size"] = self.replay.size
        return metrics

    def gradient_step(self, obs, next_obs, actions, rewards, terminals) -> torch.Tensor:
        """One step of the three losses on a minibatch; its stats (on the device)."""
        c, net, dist = self.config, self.net, self.net.action_dist
        alpha = self.log_ent_coef.detach().exp()
        obs, next_obs = self.inputs(obs), self.inputs(next_obs)
        with torch.no_grad(), self.autocast():
            next_action, next_logp = dist.rsample(net.actor_params(next_obs), GLOBAL_NOISE)
            target = self.target_critic
            next_q = target(target.encoder(next_obs), next_action).float().min(0).values
            targets = rewards + c.gamma * (1 - terminals) * (next_q - alpha * next_logp.float())
        with self.autocast():
            features = net.critic.encoder(obs)
            q = net.critic(features, dist.to_unit(actions)).float()
            action, logp = dist.rsample(net.actor_params(obs), GLOBAL_NOISE)
            q_pi = net.critic(features.detach(), action, detach=True).float().min(0).values
        logp = logp.float()
        critic_loss = 0.5 * (q - targets).pow(2).mean(-1).sum()
        actor_loss = (alpha * logp - q_pi).mean()
        ent_coef_loss = (-(self.log_ent_coef * (logp.detach() + self.target_entropy)).mean() if c.autotune
                         else torch.zeros((), device=self.device))
        self.optimizer_step(critic_loss + actor_loss + ent_coef_loss, None)
        self.move_target(self.target_critic, net.critic, c.tau)
        return torch.stack([critic_loss.detach(), actor_loss.detach(), ent_coef_loss.detach(), alpha,
                            q.detach().mean(), -logp.detach().mean()]).double()

    # -- checkpoints -------------------------------------------------------------------------
    def state_dict(self) -> dict | None:
        state = super().state_dict()
        if state is not None:
            state["log_ent_coef"] = self.log_ent_coef.detach().clone()
            state["noise"] = getattr(self.collector.acting.noise, "state", None)
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        with torch.no_grad():
            self.log_ent_coef.copy_(state.get("log_ent_coef", math.log(self.config.ent_coef)))
        if isinstance(self.collector.acting.noise, CorrelatedNoise):
            self.collector.acting.noise.state = state.get("noise")


def sac_network(policy: nn.Module) -> SACNetwork:
    """The SACNetwork inside `policy`'s wrappers; a ConfigError for any other network or a recurrent one."""
    network = next((m for m in policy.modules() if isinstance(m, SACNetwork)), None)
    if network is None:
        raise ConfigError(f"train=sac learns a squashed Gaussian actor and twin critics: expected policy=sac "
                          f"(puffer.policies.networks.SACNetwork), got {type(policy).__name__}")
    if is_recurrent(policy):
        raise ConfigError("policy.rnn=lstm with train=sac: its networks are feed-forward here; expected policy.rnn=null")
    return network
