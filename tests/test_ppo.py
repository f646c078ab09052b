"""PPO: GAE at episode ends, masked reset transitions, seeding, truncation bootstrapping."""

from __future__ import annotations

import copy
import time

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

import puffer.vector
from puffer.config import RuntimeConfig, TrainConfig
from puffer.emulation import GymnasiumPufferEnv
from puffer.files import checkpoint
from puffer.loggers.base import Logger
from puffer.policies.networks import Default
from puffer.training.ppo import PPO, NonFiniteError, seed_everything


def cartpole():
    return GymnasiumPufferEnv(env=gym.make("CartPole-v1"))


def make_trainer(creator=cartpole, num_envs=2, seed=0, runtime=None, **train):
    seed_everything(seed)
    vec = puffer.vector.make(creator, num_envs=num_envs, seed=seed)
    policy = Default(vec.single_observation_space, vec.single_action_space)
    return PPO(TrainConfig(**train), vec, policy, seed=seed, runtime=runtime)


def test_gae_stops_at_terminals_and_bootstraps_truncations():
    trainer = make_trainer(num_envs=1, num_steps=4, gamma=0.5, gae_lambda=0.5)
    trainer.rollout.rewards[:, 0] = torch.tensor([1.0, 2.0, 3.0, 4.0])
    trainer.rollout.values[:, 0] = torch.tensor([10.0, 20.0, 30.0, 40.0])
    trainer.rollout.next_value[:] = 50.0
    # step 1 truncates (its next row holds V(final obs) = 30), step 3 runs on (bootstrap 50)
    trainer.rollout.terminals[:, 0] = torch.tensor([0.0, 0.0, 0.0, 0.0])
    trainer.rollout.dones[:, 0] = torch.tensor([0.0, 1.0, 0.0, 0.0])
    trainer.compute_advantages()
    a3 = 4 + 0.5 * 50 - 40
    a2 = 3 + 0.5 * 40 - 30 + 0.25 * a3
    a1 = 2 + 0.5 * 30 - 20  # truncated: bootstrap, but no advantage flows in from the next episode
    a0 = 1 + 0.5 * 20 - 10 + 0.25 * a1
    assert trainer.advantages[:, 0].tolist() == pytest.approx([a0, a1, a2, a3])
    # the same step terminating instead: no bootstrap at all
    trainer.rollout.terminals[1, 0] = 1.0
    trainer.compute_advantages()
    assert trainer.advantages[1, 0].item() == pytest.approx(2 - 20)


def test_reset_transitions_are_masked_out_of_the_batch():
    trainer = make_trainer(num_envs=2, num_steps=200)
    trainer.collect()
    dones = trainer.rollout.dones.bool()
    assert dones.any()
    expected = torch.ones_like(trainer.rollout.valid)
    expected[1:] = ~dones[:-1]
    assert torch.equal(trainer.rollout.valid, expected)
    # a reset transition carries no reward and no done flag
    after_done = torch.zeros_like(dones)
    after_done[1:] = dones[:-1]
    assert (trainer.rollout.rewards[after_done] == 0).all() and not dones[after_done].any()


def test_same_seed_gives_identical_losses_and_parameters():
    def train(seed):
        trainer = make_trainer(seed=seed, num_steps=64, total_timesteps=1024)
        metrics = trainer.train()
        return metrics, torch.cat([p.detach().flatten() for p in trainer.policy.parameters()])

    (m1, p1), (m2, p2), (_, p3) = train(0), train(0), train(1)
    keys = [k for k in m1 if k.startswith("train/")]
    assert [m1[k] for k in keys] == [m2[k] for k in keys]
    assert torch.equal(p1, p2)
    assert not torch.equal(p1, p3)


class ConstantReward(gym.Env):
    """Reward 1 forever; a time limit truncates every 10 steps and the observation never changes.
    Truncation is not termination: the right value is 1 / (1 - gamma) everywhere."""

    observation_space = spaces.Box(0, 1, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.zeros(1, np.float32), 1.0, False, False, {}


def test_truncated_episodes_bootstrap_so_values_reach_the_infinite_horizon():
    def creator():
        return GymnasiumPufferEnv(env=gym.wrappers.TimeLimit(ConstantReward(), 10))

    trainer = make_trainer(creator, num_envs=4, num_steps=40, gamma=0.9, total_timesteps=40_000,
                           learning_rate=3e-3, update_epochs=4, num_minibatches=1)
    trainer.train()
    value = trainer.policy(torch.zeros(1, 1))[1].item()
    assert value == pytest.approx(10.0, rel=0.1)  # treating truncation as an end would give ~6.5


def test_non_finite_loss_stops_training_naming_the_epoch():
    trainer = make_trainer(lambda: GymnasiumPufferEnv(env=ConstantReward()), num_steps=8)
    with torch.no_grad():  # a critic gone bad: values, advantages and the loss become NaN
        trainer.policy.value_head.bias.fill_(float("nan"))
    with pytest.raises(NonFiniteError, match=r"train/loss is nan at epoch 0"):
        trainer.train()


def test_async_batches_fill_every_row_and_overlap_envs_with_the_policy():
    seed_everything(0)  # the first weights: not whatever the tests before left the generator at
    vec = puffer.vector.make(cartpole, num_envs=8, num_workers=2, envs_per_batch=4,
                             backend="multiprocessing")
    with vec:
        # 60 epochs: which envs share a batch depends on the workers' timing, so the run is not
        # reproducible, and at 30 epochs a busy machine's run ended at 42 (one in CI's loaded run)
        trainer = PPO(TrainConfig(num_steps=64, total_timesteps=64 * 8 * 60, learning_rate=1e-3),
                      vec, Default(vec.single_observation_space, vec.single_action_space))
        trainer.collect()
        assert (trainer.collector._ptr == 64).all() and not trainer.collector._awaiting.any()
        assert trainer.global_step == 64 * 8
        assert len(trainer.collector._held) == 2  # both halves wait, unsent, for the next rollout
        after_done = torch.zeros_like(trainer.rollout.valid)
        after_done[1:] = trainer.rollout.dones[:-1].bool()
        assert torch.equal(trainer.rollout.valid, ~after_done)
        metrics = trainer.train()
    assert metrics["env/episode_return"] > 60  # it learns (random play: about 22)


class StepCounter(gym.Env):
    """Observes and is rewarded by its own step count; each step takes a random time, so
    workers finish in a shuffled order."""

    observation_space = spaces.Box(0, 1e6, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.count = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.count += 1
        time.sleep(self.np_random.uniform(0, 2e-3))
        return np.full(1, self.count, np.float32), float(self.count), False, False, {}


@pytest.mark.parametrize("backend", ["multiprocessing", "serial"])
def test_async_batches_spanning_workers_at_different_steps_store_each_row_in_order(backend):
    # Multiprocessing: 4 workers, 2 per recv, so a batch can join workers that were sent at
    # different times; Serial: its batches in turn
    workers = {"num_workers": 4, "overwork": True} if backend == "multiprocessing" else {}
    vec = puffer.vector.make(lambda: GymnasiumPufferEnv(env=StepCounter()), num_envs=4,
                             envs_per_batch=2, backend=backend, **workers)
    with vec:
        trainer = PPO(TrainConfig(num_steps=16, total_timesteps=16 * 4 * 2), vec,
                      Default(vec.single_observation_space, vec.single_action_space))
        steps = torch.arange(16, dtype=torch.float32)[:, None].expand(16, 4)
        for rollout in range(2):
            trainer.collect()
            assert torch.equal(trainer.rollout.obs[..., 0], 16 * rollout + steps)
            assert torch.equal(trainer.rollout.rewards, 16 * rollout + steps + 1)
            assert trainer.rollout.valid.all() and (trainer.collector._ptr == 16).all()


def test_bf16_autocast_trains_with_finite_float32_losses():
    trainer = make_trainer(num_steps=64, total_timesteps=2048, learning_rate=1e-3,
                           runtime=RuntimeConfig(amp="bf16"))
    metrics = trainer.train()
    assert all(np.isfinite(metrics[k]) for k in ("train/policy_loss", "train/value_loss", "train/entropy"))
    assert trainer.rollout.values.dtype == torch.float32 and trainer.rollout.logprobs.dtype == torch.float32


def test_compiled_forward_collects_what_the_eager_policy_does():
    # runtime.compile once failed on its first step: the collector asked the compiled module for
    # its truth value, which torch.compile's wrapper answers with len() (TypeError).
    eager = make_trainer(num_steps=32)
    eager.collect()  # (before the next trainer seeds the global generator that sampling draws from)
    compiled = make_trainer(num_steps=32, runtime=RuntimeConfig(compile=True))
    assert compiled.forward is not compiled.policy
    compiled.collect()
    assert torch.equal(compiled.rollout.actions, eager.rollout.actions)
    assert torch.equal(compiled.rollout.obs, eager.rollout.obs)
    assert torch.allclose(compiled.rollout.values, eager.rollout.values, rtol=1e-5, atol=1e-6)


def test_anneal_clip_narrows_the_trust_region_linearly_to_zero():
    class Recorder(Logger):
        def __init__(self):
            self.epochs = []

        def log(self, metrics, step):
            self.epochs.append(metrics)

    trainer = make_trainer(num_steps=64, total_timesteps=64 * 2 * 8, learning_rate=3e-3, anneal_clip=True)
    trainer.logger = recorder = Recorder()
    trainer.train()
    clips = [m["train/clip_coef"] for m in recorder.epochs]
    assert clips == pytest.approx([0.2 * (1 - e / 8) for e in range(8)])
    fixed = make_trainer(num_steps=64, total_timesteps=64 * 2 * 8, learning_rate=3e-3).train()
    assert fixed["train/clip_coef"] == 0.2


def test_a_narrower_clip_region_clips_more_of_the_same_update():
    # the same rollout, start and minibatch order; only the epoch (so the annealed clip) differs
    trainer = make_trainer(num_steps=64, total_timesteps=64 * 2 * 8, learning_rate=3e-3,
                           anneal_clip=True, anneal_lr=False)
    trainer.collect()
    start = copy.deepcopy((trainer.policy.state_dict(), trainer.optimizer.state_dict()))
    rng = torch.get_rng_state()
    clipfrac = {}
    for epoch in (0, 7):
        trainer.policy.load_state_dict(start[0])
        trainer.optimizer.load_state_dict(start[1])
        torch.set_rng_state(rng)
        trainer.epoch = epoch
        metrics = trainer.update()
        clipfrac[round(metrics["train/clip_coef"], 6)] = metrics["train/clipfrac"]
    assert set(clipfrac) == {0.2, 0.025}
    assert clipfrac[0.025] > clipfrac[0.2] + 0.05, clipfrac


class NanAfterAWhile(gym.Env):
    """CartPole-shaped; from step 30 on, its reward (or one observation value) is NaN."""

    observation_space = spaces.Box(-np.inf, np.inf, (4,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, where="reward"):
        self.where, self.t = where, 0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(4, np.float32), {}

    def step(self, action):
        self.t += 1
        obs = np.zeros(4, np.float32)
        reward = 1.0
        if self.t >= 30:
            if self.where == "reward":
                reward = float("nan")
            else:
                obs[2] = np.inf
        return obs, reward, False, self.t % 50 == 0, {}


@pytest.mark.parametrize("where", ["reward", "observation"])
def test_a_non_finite_value_from_the_env_is_named_as_such(where):
    def creator():
        return GymnasiumPufferEnv(env=NanAfterAWhile(where), validate_steps=5)

    trainer = make_trainer(creator, num_envs=2, num_steps=64, total_timesteps=128)
    step = 29 if where == "reward" else 30  # step 30's reward; the observation it returns is seen at 30
    with pytest.raises(NonFiniteError, match=f"the env returned a non-finite {where} .* rollout step {step}, row 0"):
        trainer.train()


def test_turn_advantages_equal_gae_where_every_row_is_valid_but_the_step_after_an_end():
    trainer = make_trainer(num_envs=3, num_steps=16, gamma=0.9, gae_lambda=0.8)
    r, g = trainer.rollout, torch.Generator().manual_seed(0)
    r.rewards[:] = torch.randn(r.rewards.shape, generator=g)
    r.values[:] = torch.randn(r.values.shape, generator=g)
    r.next_value[:] = torch.randn(r.next_value.shape, generator=g)
    r.dones[:] = (torch.rand(r.dones.shape, generator=g) < 0.15).float()
    r.terminals[:] = r.dones * (torch.rand(r.dones.shape, generator=g) < 0.5).float()
    r.valid[:] = True
    r.valid[1:] = r.dones[:-1] == 0  # the dummy reset step after each end
    trainer.compute_advantages()
    expected = trainer.advantages.clone()
    trainer.turn_based = True
    trainer.compute_advantages()
    assert torch.allclose(trainer.advantages[r.valid], expected[r.valid], atol=1e-6)


def test_turn_advantages_credit_an_opponents_winning_move_to_the_move_before_it():
    # two agents alternate: row 0 moves at steps 0, 2; row 1 at 1, 3. Row 1 wins with its move
    # at step 3 (+1 to row 1, -1 to row 0 at that step), the episode ends, step 4 is the dummy.
    trainer = make_trainer(num_envs=2, num_steps=5, gamma=0.5, gae_lambda=1.0)
    r = trainer.rollout
    r.values[:] = torch.tensor([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6], [0.7, 0.8], [0.0, 0.0]])
    r.rewards[:] = 0
    r.rewards[3] = torch.tensor([-1.0, 1.0])
    r.dones[:] = 0
    r.dones[3] = 1
    r.terminals[:] = r.dones
    r.valid[:] = torch.tensor([[True, False], [False, True], [True, False], [False, True], [False, False]])
    r.next_value[:] = 0
    trainer.turn_based = True
    trainer.compute_advantages()
    a = trainer.advantages
    assert a[2, 0].item() == pytest.approx(-1 - 0.5)  # its last move lost: -1, nothing after
    assert a[0, 0].item() == pytest.approx(0 + 0.5 * 0.5 - 0.1 + 0.5 * a[2, 0].item())
    assert a[3, 1].item() == pytest.approx(1 - 0.8)  # the winning move
    assert a[1, 1].item() == pytest.approx(0 + 0.5 * 0.8 - 0.4 + 0.5 * a[3, 1].item())
    assert a[~r.valid].eq(0).all()


def test_a_last_move_whose_next_move_lies_beyond_the_rollout_is_not_learned_from():
    # row 0 moves at 0 and 2, row 1 at 1 and 3; after step 3 it is row 0's move (next_valid)
    trainer = make_trainer(num_envs=2, num_steps=4, gamma=0.5, gae_lambda=1.0)
    r = trainer.rollout
    r.values[:] = torch.tensor([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6], [0.7, 0.8]])
    r.rewards[:], r.dones[:], r.terminals[:] = 0, 0, 0
    r.valid[:] = torch.tensor([[True, False], [False, True], [True, False], [False, True]])
    r.next_value[:] = torch.tensor([0.9, 0.0])
    r.next_valid[:] = torch.tensor([True, False])
    trainer.turn_based = True
    trainer.compute_advantages()
    assert r.valid[:, 0].tolist() == [True, False, True, False]  # row 0 bootstraps from 0.9
    assert trainer.advantages[2, 0].item() == pytest.approx(0.5 * 0.9 - 0.5)
    assert r.valid[:, 1].tolist() == [False, True, False, False]  # its move at 3: nothing to go on
    assert trainer.advantages[1, 1].item() == pytest.approx(0.5 * 0.8 - 0.4 + 0.5 * trainer.advantages[3, 1].item())


def _random_rollout(trainer, seed=0):
    r, g = trainer.rollout, torch.Generator().manual_seed(seed)
    r.rewards[:] = torch.randn(r.rewards.shape, generator=g)
    r.values[:] = torch.randn(r.values.shape, generator=g)
    r.next_value[:] = torch.randn(r.next_value.shape, generator=g)
    r.dones[:] = (torch.rand(r.dones.shape, generator=g) < 0.15).float()
    r.terminals[:] = r.dones * (torch.rand(r.dones.shape, generator=g) < 0.5).float()
    return g


def test_vtrace_advantages_are_gae_on_policy_and_clip_each_td_error_and_trace_off_policy():
    from puffer.training.advantage import gae

    trainer = make_trainer(num_envs=3, num_steps=12, gamma=0.9, gae_lambda=0.8)
    r, g = trainer.rollout, _random_rollout(trainer)
    plain, traced = torch.zeros_like(r.values), torch.zeros_like(r.values)
    gae(r, plain, 0.9, 0.8)
    gae(r, traced, 0.9, 0.8, torch.ones_like(r.values), rho_clip=1.0, c_clip=1.0)
    assert torch.allclose(plain, traced)
    # off-policy: the V-trace sum, step by step (Espeholt et al. 2018, eq. 1, with lambda)
    ratio = torch.rand(r.values.shape, generator=g) * 2
    gae(r, traced, 0.9, 0.8, ratio, rho_clip=1.0, c_clip=0.5)
    rho, c = ratio.clamp(max=1.0), ratio.clamp(max=0.5)
    for row in range(3):
        for s in range(12):
            expected, trace = 0.0, 1.0
            for t in range(s, 12):
                next_value = r.next_value[row] if t == 11 else r.values[t + 1, row]
                delta = r.rewards[t, row] + 0.9 * next_value * (1 - r.terminals[t, row]) - r.values[t, row]
                expected += (0.9 * 0.8) ** (t - s) * trace * rho[t, row] * delta
                if r.dones[t, row]:
                    break
                trace *= c[t, row]
            assert traced[s, row].item() == pytest.approx(float(expected), abs=1e-5)


def test_prioritized_draws_follow_the_priorities_with_importance_weights():
    from puffer.training.minibatches import Priority

    priority = torch.tensor([0.0, 1.0, 3.0, 4.0])
    drawn, weights = Priority(1.0, 0.5, torch.Generator().manual_seed(0)).draw(priority, 40_000)
    frequency = torch.bincount(drawn, minlength=4).float() / 40_000
    assert frequency.tolist() == pytest.approx([0.0, 0.125, 0.375, 0.5], abs=0.01)
    p = priority / priority.sum()
    assert torch.allclose(weights, (4 * p[drawn]) ** -0.5)
    # PPO anneals beta from prio_beta0 (at the start) to 1 (at the end)
    trainer = make_trainer(num_envs=2, prioritized=True, prio_alpha=1.0, prio_beta0=0.2)
    trainer.collect()
    trainer.compute_advantages()
    betas = []
    for epoch in (0, trainer.num_epochs // 2):
        trainer.epoch = epoch
        batch = next(iter(trainer.minibatches()()))
        alpha_p = trainer.advantages.reshape(-1)[batch.where].abs() + 1e-8
        total = (trainer.advantages[trainer.rollout.valid].abs() + 1e-8).sum()
        n = int(trainer.rollout.valid.sum())
        betas.append(float(-torch.log(batch.prio[0]) / torch.log(n * alpha_p[0] / total)))
    assert betas == pytest.approx([0.2, 0.2 + 0.8 * (trainer.num_epochs // 2) / trainer.num_epochs], rel=1e-3)


@pytest.mark.parametrize("rnn", [None, "lstm"])
def test_vtrace_and_prioritized_sampling_learn_cartpole_and_resume_bit_for_bit(make_cfg, tmp_path, rnn):
    from puffer.loggers.base import read_metrics
    from puffer.run import run

    options = ["train.vtrace=true", "train.prioritized=true", "train.total_timesteps=1024",
               "train.num_steps=32", "eval.episodes=0", f"policy.rnn={rnn or 'null'}"]
    run(make_cfg(*options, "runtime.checkpoint_interval=2", "runtime.keep_checkpoints=0"), tmp_path / "full")
    run(make_cfg(*options, f"resume={tmp_path / 'full' / 'checkpoints' / 'epoch_000002.pt'}"), tmp_path / "resumed")
    final = [checkpoint.read(tmp_path / d / "checkpoints" / "epoch_000004.pt")["policy"]
             for d in ("full", "resumed")]
    assert all(torch.equal(final[0][k], final[1][k]) for k in final[0])
    records = [r for r in read_metrics(tmp_path / "full" / "metrics.jsonl") if "train/approx_kl" in r]
    assert all(np.isfinite(r["train/loss"]) and r["train/approx_kl"] > 0 for r in records)


def test_vtrace_changes_the_update_only_after_the_first_epoch():
    # one update epoch: every ratio is still 1, so V-trace with clips 1 is exactly PPO's update
    weights = []
    for vtrace in (False, True):
        trainer = make_trainer(num_envs=2, num_steps=64, update_epochs=1, vtrace=vtrace)
        trainer.collect()
        trainer.update()
        weights.append(copy.deepcopy(trainer.policy.state_dict()))
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    trainer = make_trainer(num_envs=2, num_steps=64, update_epochs=2, vtrace=True)
    trainer.collect()
    trainer.update()
    before = trainer.advantages.clone()
    trainer.compute_advantages()  # GAE, on-policy
    assert not torch.allclose(before[trainer.rollout.valid], trainer.advantages[trainer.rollout.valid])
