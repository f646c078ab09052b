"""A batch of agents trained as one: N members of one architecture, each learning as its solo run
would, in one process, one vector env and one learner step (issue 43).

On the small policies most RL research trains, a run is almost all per-op overhead, paid once per
op whatever the tensors' size: the members' envs are one vector env (member k's rows grouped
together), their policies one stacked forward (puffer.training.members.StackedPolicy), their
minibatch steps one backward and one optimizer step (puffer.training.members.MemberStep).

What each member keeps of its own, as its solo run with its seed has it: its first weights, its
envs' seeds (puffer.vector.base.member_creators), its action-sampling stream (`MemberNoise`,
the global generator's state after its solo run built its policy), its minibatch shuffling
stream (samples, or an LSTM's row sequences, drawn as its solo run draws them), its recurrent
state, advantage normalisation and every mean of the loss, gradient-norm clipping, Adam, the
learning-rate and clip schedules, early stopping on train.target_kl, its episode statistics, its
settings among `MEMBER_KEYS`. A member whose loss or gradient goes non-finite is stopped alone,
its weights put back to the last completed epoch's.

What lives here: `BatchedPPO`, `MemberNoise`, `member_minibatches`, `MEMBER_KEYS` and
`check_batchable`. What does not: building the members from configs and writing their job
directories (puffer.batch), the stacked forward and the step (puffer.training.members).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import asdict
from typing import Any

import torch
from torch import nn

from puffer.config.schema import TrainConfig
from puffer.errors import ConfigError
from puffer.policies.distributions import Noise
from puffer.runtime import threads
from puffer.training.advantage import gae
from puffer.training.members import MemberAdam, MemberStep, StackedPolicy
from puffer.training.minibatches import Minibatch
from puffer.training.optim import lr_scale
from puffer.training.ppo import PPO, STATS, Coefficients
from puffer.training.reward_scaler import MemberRewardScalers, RewardScaler
from puffer.training.trainer import NonFiniteError

log = logging.getLogger(__name__)

# The train.* settings members of one batch may differ in: floats that change no shape and no
# loop. Every other train.* key must be equal within a batch.
MEMBER_KEYS = ("learning_rate", "ent_coef", "vf_coef", "clip_coef", "vf_clip_coef", "gamma", "gae_lambda",
               "max_grad_norm", "adam_eps", "target_kl")

# Settings a batch cannot yet give each member its own of, with why (a run asking for them trains solo).
UNBATCHABLE = {
    "vtrace": "V-trace recomputes advantages from ratios between epochs",
    "prioritized": "prioritized draws sample across all rows",
}


def check_batchable(configs: list[TrainConfig]) -> None:
    """ConfigError naming the key unless `configs` can train as members of one batch: equal in
    every train.* key but MEMBER_KEYS, Adam, none of UNBATCHABLE."""
    for config in configs:  # (BatchedPPO is PPO's loss; SPO's or PQN's would be replaced by it)
        if config._target_ != "puffer.training.ppo.PPO":
            raise ConfigError(f"train._target_={config._target_!r}: members of a batch train with PPO only; "
                              "expected train=ppo, or a launcher other than hydra/launcher=members")
    first = asdict(configs[0])
    for k, config in enumerate(configs[1:], 1):
        for key, value in asdict(config).items():
            if key not in MEMBER_KEYS and value != first[key]:
                raise ConfigError(f"train.{key}: members of one batch must share it (member 0 has {first[key]!r}, "
                                  f"member {k} {value!r}); they may differ in {', '.join(MEMBER_KEYS)}")
    for key, why in UNBATCHABLE.items():
        if first.get(key):
            raise ConfigError(f"train.{key}=true cannot train in a batch of members ({why}); expected "
                              f"train.{key}=false, or a launcher other than hydra/launcher=members")
    if first["optimizer"] != "adam":
        raise ConfigError(f"train.optimizer={first['optimizer']!r}: members train with Adam only (their "
                          "optimizer is one stacked Adam); expected train.optimizer=adam")


class MemberNoise(Noise):
    """Each member's rows drawn from its own generator: member k's E rows (k * E onwards) from
    `generators[k]`, in the order its solo run would draw them from torch's global generator."""

    def __init__(self, generators: list[torch.Generator]):
        self.generators = generators

    def _fill(self, like: torch.Tensor, draw) -> torch.Tensor:
        out = torch.empty_like(like)
        for generator, rows in zip(self.generators, out.chunk(len(self.generators)), strict=True):
            draw(rows, generator)
        return out

    def exponential(self, like: torch.Tensor) -> torch.Tensor:
        return self._fill(like, lambda rows, g: rows.exponential_(generator=g))

    def normal(self, like: torch.Tensor) -> torch.Tensor:
        return self._fill(like, lambda rows, g: rows.normal_(generator=g))


def by_member(x: torch.Tensor, members: int) -> torch.Tensor:
    """Rollout tensor (T, N * E, ...) -> (N, T * E, ...): member k's steps in its solo run's
    flat order (step-major)."""
    T, rows = x.shape[:2]
    return x.view(T, members, rows // members, *x.shape[2:]).transpose(0, 1).reshape(
        members, T * (rows // members), *x.shape[2:])


def member_minibatches(valid: torch.Tensor, num_minibatches: int, generators: list[torch.Generator],
                       drawing: list[bool]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One epoch's minibatches of every member, each as its solo run draws them (its valid
    samples shuffled by its generator, cut in pieces of ceil(n / num_minibatches)), padded to
    one size: (positions (J, N, B) into each member's flat samples, weights (J, N, B): 1 for a
    real sample, `stepping` (J, N): whether minibatch j is one of member k's). Members not
    `drawing` (stopped on train.target_kl) draw nothing and step in none."""
    if bool(valid.all()):  # (every sample of a single-agent env: one draw per member, no loop over pieces)
        return _unmasked_minibatches(*valid.shape, num_minibatches, generators, drawing, valid.device)
    return _masked_minibatches(valid, num_minibatches, generators, drawing)


def _unmasked_minibatches(members: int, samples: int, num_minibatches: int, generators: list[torch.Generator],
                          drawing: list[bool], device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`member_minibatches` where every sample is valid: each member's pieces are its permutation
    of all samples cut in order, so all members' are one (N, J * B) tensor seen as (J, N, B)."""
    size = max(1, math.ceil(samples / num_minibatches))
    count = math.ceil(samples / size) if any(drawing) else 1
    positions = torch.zeros((members, count * size), dtype=torch.long)
    weights = torch.zeros((members, count * size))
    drawn = [k for k, draw in enumerate(drawing) if draw]
    if drawn:
        positions[drawn, :samples] = torch.stack([torch.randperm(samples, generator=generators[k]) for k in drawn])
        weights[drawn, :samples] = 1.0

    def pieces(x: torch.Tensor) -> torch.Tensor:  # (N, J * B) -> (J, N, B)
        return x.view(members, count, size).transpose(0, 1).contiguous().to(device)

    return pieces(positions), pieces(weights), torch.tensor(drawing).expand(count, members).contiguous().to(device)


def _masked_minibatches(valid: torch.Tensor, num_minibatches: int, generators: list[torch.Generator],
                        drawing: list[bool]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`member_minibatches` of members whose valid samples differ (masked rows of multi-agent
    envs): each member's valid positions drawn apart and padded."""
    members = valid.shape[0]
    found = [row.nonzero().squeeze(-1) for row in valid]
    sizes = [max(1, math.ceil(len(index) / num_minibatches)) for index in found]
    counts = [math.ceil(len(index) / size) if draw else 0
              for index, size, draw in zip(found, sizes, drawing, strict=True)]
    J, B = max(max(counts), 1), max(sizes)
    positions = torch.zeros((J, members, B), dtype=torch.long, device=valid.device)
    weights = torch.zeros((J, members, B), device=valid.device)
    for k, (index, size, count) in enumerate(zip(found, sizes, counts, strict=True)):
        if not count:
            continue
        order = torch.randperm(len(index), generator=generators[k]).to(valid.device)
        drawn = index[order]
        for j in range(count):
            part = drawn[j * size:(j + 1) * size]
            positions[j, k, :len(part)] = part
            weights[j, k, :len(part)] = 1.0
    stepping = torch.tensor([[j < count for count in counts] for j in range(J)], device=valid.device)
    return positions, weights, stepping


class BatchedPPO(PPO):
    """PPO for N members at once over one vector env of N * E envs (rows grouped by member).

    `configs[k]`: member k's train settings (equal but for MEMBER_KEYS); `policies[k]`: its
    first weights; `seeds[k]`: its seed (minibatch shuffling); `sampling_states[k]`: the global
    generator's state of its solo run when it starts collecting (action sampling). Metrics and
    `last_metrics` hold a list of N values for each per-member key."""

    def __init__(self, configs: list[TrainConfig], vecenv, policies: list[nn.Module], seeds: list[int],
                 sampling_states: list[torch.Tensor], device: str = "cpu", **kwargs):
        check_batchable(configs)
        self.agents = len(configs)
        if vecenv.num_rows % self.agents:
            raise ValueError(f"{vecenv.num_rows} rows do not split into {self.agents} members")
        self.rows_per_member = vecenv.num_rows // self.agents
        self.member_configs, self.seeds = configs, list(seeds)
        self.torch_device = torch.device(device)
        on = {"device": self.torch_device}
        self.settings = {key: torch.tensor([float("nan") if getattr(c, key) is None else float(getattr(c, key))
                                            for c in configs], **on) for key in MEMBER_KEYS}
        self.noise = MemberNoise([_generator(state, self.torch_device) for state in sampling_states])
        self.shuffles = [torch.Generator().manual_seed(seed) for seed in seeds]
        policy = StackedPolicy([p.to(self.torch_device) for p in policies])
        super().__init__(configs[0], vecenv, policy, device=device, seed=seeds[0], **kwargs)
        self.member_step = MemberStep(self, policy.stack, self.optimizer, self.settings["max_grad_norm"])

    # -- what the trainer asks of an algorithm -------------------------------------------------
    def make_optimizer(self) -> MemberAdam:
        s = self.settings
        return MemberAdam(self.policy.stack.flat, s["learning_rate"].clone(), s["adam_eps"])

    def agent_policy(self) -> nn.Module:
        return self.policy.template

    def make_reward_scaler(self) -> MemberRewardScalers:
        rows = self.rows_per_member
        # (each member's gamma as its config has it: float64 in numpy, as its solo run's scaler)
        return MemberRewardScalers([RewardScaler(rows, c.gamma, c.reward_clip) for c in self.member_configs], rows)

    def sampling_noise(self) -> Noise:
        return self.noise

    def adjusted_threads(self, plan: threads.ThreadPlan) -> threads.ThreadPlan:
        """Every thread of the share for learning from 8 members on (unless runtime.torch_threads
        says): the FLOPs rule counts matmuls, but a batch's step is mostly elementwise ops on
        N times the rows (tanh alone is 40% of it), which split across threads. 16 CartPole
        members, 2 cores: a learner step 3.87 -> 3.07 ms, the run's SPS 1.08x."""
        if self.runtime.torch_threads or self.agents < 8 or self.torch_device.type != "cpu":
            return plan
        return dataclasses.replace(plan, learn=plan.share)

    def update_obs_stats(self) -> None:
        """Each member's running observation statistics (a policy with norm_obs) merge its own
        rows of the rollout, in its solo run's order."""
        if not hasattr(self.policy.template, "update_obs_stats"):
            return
        obs, valid = by_member(self.rollout.obs, self.agents), by_member(self.rollout.valid, self.agents)
        for k in range(self.agents):
            self.policy.update_buffers(k, lambda module, k=k: module.update_obs_stats(obs[k][valid[k]]))

    def compute_advantages(self, ratio: torch.Tensor | None = None) -> None:
        """GAE with each member's gamma and gae_lambda over its rows."""
        per_row = {key: self.settings[key].repeat_interleave(self.rows_per_member) for key in ("gamma", "gae_lambda")}
        gae(self.rollout, self.advantages, per_row["gamma"], per_row["gae_lambda"])

    # -- learning ----------------------------------------------------------------------------
    def update(self) -> dict[str, Any]:
        c, r, n = self.config, self.rollout, self.agents
        self.compute_advantages()
        progress = self.epoch / self.num_epochs
        s = self.settings
        self.optimizer.lr.copy_(s["learning_rate"] * (lr_scale(c.lr_schedule, progress) if c.anneal_lr else 1.0))
        clip = s["clip_coef"] * (1 - progress) if c.anneal_clip else s["clip_coef"]
        coefficients = Coefficients(clip, s["vf_clip_coef"], s["ent_coef"], s["vf_coef"])
        valid = by_member(r.valid, n)
        values, advantages = by_member(r.values, n), by_member(self.advantages, n)
        sums = torch.zeros((n, len(STATS)), dtype=torch.float64, device=self.device)
        counts = torch.zeros(n, dtype=torch.float64, device=self.device)
        was_active = self.member_step.active.clone()
        drawing = was_active.tolist()  # a stopped member draws no minibatches
        epoch_minibatches = (self.sequence_epochs if self.policy.is_recurrent else self.sample_epochs)()
        for _ in range(c.update_epochs):
            if not any(drawing):
                break
            last_kl = torch.zeros(n, device=self.device)
            for mb, stepping in epoch_minibatches(drawing):
                stats, _ = self.member_step(mb, coefficients, stepping)
                taken = stepping & self.member_step.active
                sums += torch.where(taken[:, None], stats.double(), 0.0)
                counts += taken
                last_kl = torch.where(stepping, stats[:, STATS.index("approx_kl")], last_kl)
            if not torch.isnan(s["target_kl"]).all():
                over = (last_kl > s["target_kl"]).tolist()  # (nan: no target, never over)
                drawing = [d and not o for d, o in zip(drawing, over, strict=True)]
        self.stop_diverged(was_active)
        return self.update_metrics(sums, counts, valid, values, advantages, clip)

    def sample_epochs(self):
        """A function that yields one epoch's minibatches of samples of every member
        (`member_minibatches`) with the members that step on each (N,), given the members still
        drawing; the rollout read into member-major tensors once, for every epoch."""
        r, n = self.rollout, self.agents
        obs, actions, logprobs, values, advantages, valid = (by_member(x, n) for x in (
            r.obs, r.actions, r.logprobs, r.values, self.advantages, r.valid))
        returns = advantages + values
        # member k's sample i is row k * samples + i of the tensors with the member axis flattened:
        # index_select on those takes 27 us a minibatch where indexing with (members, where) took 70
        flat = [x.flatten(0, 1) for x in (obs, actions, logprobs, values, advantages, returns)]
        starts = torch.arange(n, device=self.device)[:, None] * valid.shape[1]

        def epoch(drawing: list[bool]):
            positions, weights, stepping = member_minibatches(valid, self.config.num_minibatches, self.shuffles,
                                                              drawing)
            for j in range(positions.shape[0]):
                where = positions[j]
                rows = (starts + where).flatten()
                yield Minibatch(*(x.index_select(0, rows).view(n, -1, *x.shape[1:]) for x in flat),
                                where=where, weights=weights[j], padded=True), stepping[j]

        return epoch

    def sequence_epochs(self):
        """A function that yields one epoch's row sequences of every member (a recurrent policy),
        each as its solo run draws them (puffer.training.minibatches.sequences: its E rows
        shuffled by its generator, cut in pieces of ceil(E / num_minibatches)); tensors
        (N, T, B, ...), the state at t=0 (N, B, H). Every member has E rows, so the pieces need
        no padding; a member not drawing (stopped on train.target_kl) draws nothing and steps in none."""
        r, n, rows_each = self.rollout, self.agents, self.rows_per_member
        size = max(1, math.ceil(rows_each / self.config.num_minibatches))
        members = torch.arange(n, device=self.device)[:, None]
        returns = self.advantages + r.values
        steps = torch.arange(r.num_steps, device=self.device)[:, None, None] * r.num_rows

        def epoch(drawing: list[bool]):
            order = torch.stack([torch.randperm(rows_each, generator=generator) if draw else torch.arange(rows_each)
                                 for generator, draw in zip(self.shuffles, drawing, strict=True)]).to(self.device)
            stepping = torch.tensor(drawing, device=self.device)
            for start in range(0, rows_each, size):
                rows = members * rows_each + order[:, start:start + size]  # (N, B): each member's own rows
                h0, c0 = (x[rows] for x in r.state0)
                obs, actions, logprobs, values, advantages, returns_, valid, starts = (
                    x[:, rows].movedim(0, 1) for x in (r.obs, r.actions, r.logprobs, r.values, self.advantages,
                                                        returns, r.valid, r.starts))
                yield Minibatch(obs, actions, logprobs, values, advantages, returns_,
                                where=(steps + rows).movedim(0, 1), weights=valid.float(),
                                sequence=(h0, c0, starts)), stepping

        return epoch

    def stop_diverged(self, was_active: torch.Tensor) -> None:
        """Members whose loss or gradient went non-finite in this update: their weights and Adam
        state put back to the last completed epoch's, named in the log; the rest train on."""
        stopped = (was_active & ~self.member_step.active).nonzero().flatten().tolist()
        if not stopped:
            return
        before = self.completed.restored(self.learning_state())
        with torch.no_grad():
            for k in stopped:
                self.policy.stack.flat[k] = before["policy"]["flat"][k]
                for name in ("exp_avg", "exp_avg_sq", "steps"):
                    getattr(self.optimizer, name)[k] = before["optimizer"][name][k]
                log.warning("member %d (seed %d) stopped in epoch %d: its loss or gradient is not finite; "
                            "its weights of epoch %d are kept and the other members train on",
                            k, self.seeds[k], self.epoch + 1, self.epoch)
        if not self.member_step.active.any():
            raise NonFiniteError(f"every member's loss or gradient is not finite at epoch {self.epoch + 1}; "
                                 "lower train.learning_rate or train.max_grad_norm")

    def update_metrics(self, sums, counts, valid, values, advantages, clip) -> dict[str, Any]:
        """train/* of each member: its STATS averaged over its own steps, its explained variance."""
        means = (sums / counts.clamp(min=1)[:, None]).float()
        means[counts == 0] = float("nan")
        metrics = {f"train/{name}": means[:, i] for i, name in enumerate(STATS)}
        weights = valid.float()
        returns = advantages + values
        metrics["train/explained_variance"] = 1 - _masked_var(returns - values, weights) / _masked_var(returns, weights)
        metrics["train/learning_rate"] = self.optimizer.lr
        metrics["train/clip_coef"] = clip
        return {key: [float(v) for v in value.tolist()] for key, value in metrics.items()}

    @property
    def stopped_members(self) -> list[int]:
        """The members stopped for a non-finite loss or gradient."""
        return (~self.member_step.active).nonzero().flatten().tolist()

    def _episode_metrics(self) -> dict[str, Any]:
        """env/* of each member (nan where none of its episodes ended this epoch)."""
        metrics = {}
        for key, (values, envs) in self.collector.pop_episode_stats_by_env().items():
            member = envs // (self.rows_per_member // self.vecenv.agents_per_env)
            metrics[f"env/{key}"] = [float(values[member == k].mean()) if (member == k).any() else float("nan")
                                     for k in range(self.agents)]
        return metrics

    # -- checkpoints -------------------------------------------------------------------------
    def rank_state(self) -> dict:
        state = super().rank_state()
        state["members"] = {"seeds": self.seeds, "shuffles": [g.get_state() for g in self.shuffles],
                            "noise": [g.get_state() for g in self.noise.generators],
                            "active": self.member_step.active.clone()}
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        members = state["members"]
        for generator, saved in zip(self.shuffles + self.noise.generators, members["shuffles"] + members["noise"],
                                    strict=True):
            generator.set_state(saved)
        self.member_step.active.copy_(members["active"])

    def member_policy(self, k: int) -> nn.Module:
        """Member k's policy as a module of its own (its model file, its evaluation)."""
        return self.policy.member(k)


def _generator(state: torch.Tensor, device: torch.device) -> torch.Generator:
    generator = torch.Generator(device)
    generator.set_state(state)
    return generator


def _masked_var(x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Each row's variance over its weighted samples (unbiased, as torch.var), nan below 2."""
    count = weights.sum(-1)
    mean = (x * weights).sum(-1) / count.clamp(min=1)
    var = (((x - mean[:, None]) ** 2) * weights).sum(-1) / (count - 1).clamp(min=1)
    return torch.where(count > 1, var, float("nan"))
