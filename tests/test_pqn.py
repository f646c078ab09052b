"""PQN (train=pqn): Q(lambda) targets, epsilon-greedy acting, a Q-network that evaluation, loading
and export read as any policy, resume bit for bit, learning CartPole, and its keys its own."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from gymnasium import spaces
from resumes import assert_resumes_bit_for_bit

import puffer
from puffer.loggers import read_metrics
from puffer.policies.networks import QNetwork
from puffer.run import run
from puffer.training.advantage import q_lambda
from puffer.training.rollout import Rollout

SMALL = ["train=pqn", "train.total_timesteps=4096", "eval.episodes=0", "runtime.torch_threads=1"]


def rollout(rewards, terminals, dones, values, next_value) -> Rollout:
    """A one-row rollout with these per-step fields."""
    T = len(rewards)
    r = Rollout(T, 1, spaces.Box(-1, 1, (1,)), (), np.int64, torch.device("cpu"), torch.nn.Linear(1, 1))
    for name, values_ in (("rewards", rewards), ("terminals", terminals), ("dones", dones), ("values", values)):
        getattr(r, name)[:, 0] = torch.tensor(values_, dtype=torch.float32)
    r.next_value[0] = next_value
    return r


def test_q_lambda_targets_by_hand():
    """Steps 0-1 of one episode that is truncated after step 1 (step 2 is the final observation's
    dummy step), a new episode at 3 that terminates there; then 4 with the value of the next
    observation beyond. gamma 0.5, lambda 0.5; values are max_a Q of each step's observation."""
    g, lam = 0.5, 0.5
    rewards, values = [1.0, 2.0, 0.0, 4.0, 8.0], [10.0, 20.0, 30.0, 40.0, 50.0]
    r = rollout(rewards, terminals=[0, 0, 0, 1, 0], dones=[0, 1, 0, 1, 0], values=values, next_value=60.0)
    out = torch.zeros(5, 1)
    q_lambda(r, out, g, lam)
    g4 = 8 + g * 60  # past the rollout: the next observation's value
    g3 = 4.0  # a terminal bootstraps from nothing
    g2 = 0 + g * (lam * g3 + (1 - lam) * 40)  # (the dummy step's target is never learned from)
    g1 = 2 + g * 30  # truncated: the final observation's value, no trace beyond the episode
    g0 = 1 + g * (lam * g1 + (1 - lam) * 20)
    assert out[:, 0].tolist() == pytest.approx([g0, g1, g2, g3, g4])
    one_step, monte_carlo = torch.zeros(5, 1), torch.zeros(5, 1)
    q_lambda(r, one_step, g, 0.0)
    q_lambda(r, monte_carlo, g, 1.0)
    assert one_step[0, 0] == pytest.approx(1 + g * 20)  # Q-learning's target
    assert monte_carlo[0, 0] == pytest.approx(1 + g * (2 + g * 30))  # the return, bootstrapped at the cut


def test_the_q_network_acts_greedily_when_deterministic_and_values_states_by_their_best_action():
    net = QNetwork(spaces.Box(-1, 1, (4,), np.float32), spaces.Discrete(3))
    assert any(isinstance(m, torch.nn.LayerNorm) for m in net.modules())
    obs = torch.randn(16, 4)
    q, value = net(obs)
    assert q.shape == (16, 3) and torch.equal(value, q.max(-1).values)
    with pytest.raises(ValueError, match="Discrete"):
        QNetwork(spaces.Box(-1, 1, (4,), np.float32), spaces.Box(-1, 1, (2,), np.float32))
    dueling = QNetwork(spaces.Box(-1, 1, (4,), np.float32), spaces.Discrete(3), dueling=True)
    q, value = dueling(obs)
    hidden = dueling.encode(obs)
    # the advantages average to 0: the mean Q-value of a state is its value stream
    assert torch.allclose(q.mean(-1), dueling.value_head(hidden).squeeze(-1), atol=1e-5)
    assert torch.equal(value, q.max(-1).values)


def pqn_trainer(cfg):
    """A PQN trainer on cfg's envs and policy (its vecenv to close)."""
    from omegaconf import OmegaConf

    from puffer.build import make_env_creator, make_policy, make_vecenv
    from puffer.training.pqn import PQN

    vecenv = make_vecenv(cfg, make_env_creator(cfg))
    try:
        return PQN(OmegaConf.to_object(cfg.train), vecenv, make_policy(cfg, vecenv))
    except Exception:
        vecenv.close()
        raise


def test_epsilon_greedy_explores_at_epsilon_uniformly_among_allowed_actions(make_cfg):
    trainer = pqn_trainer(make_cfg(*SMALL))
    try:
        q = torch.tensor([[0.0, 5.0, 1.0, -1e8]]).repeat(20_000, 1)  # action 3 masked
        trainer.config.start_e = trainer.config.end_e = 0.0
        assert (trainer.epsilon_greedy(q)[0] == 1).all()
        trainer.config.start_e = trainer.config.end_e = 0.3
        actions, logprobs = trainer.epsilon_greedy(q)
        counts = torch.bincount(actions, minlength=4).float() / len(actions)
        # greedy 0.7 + 0.3 / 3; the other allowed ones 0.1 each; the masked one never
        assert counts.tolist() == pytest.approx([0.1, 0.8, 0.1, 0.0], abs=0.015)
        assert logprobs[actions == 1][0].item() == pytest.approx(math.log(0.8))
        trainer.config.start_e, trainer.config.exploration_fraction = 1.0, 0.5
        trainer.global_step = trainer.config.total_timesteps // 4  # half way through the decay
        assert trainer.epsilon() == pytest.approx(0.65)
    finally:
        trainer.vecenv.close()


@pytest.mark.parametrize("vec", ["serial", "multiprocessing"])
def test_a_resumed_pqn_run_matches_an_uninterrupted_one_bit_for_bit(make_cfg, tmp_path, vec):
    assert_resumes_bit_for_bit(make_cfg, tmp_path, [*SMALL, "vec.num_envs=4", "train.num_steps=32", f"vec={vec}"],
                               middle=16, end=32, keys=["train/td_loss", "train/q_values", "train/epsilon"])


def test_pqn_learns_cartpole_and_its_agent_is_evaluated_loaded_and_exported(make_cfg, tmp_path):
    """The shipped settings (conf/tuned/pqn/classic/cartpole.yaml): seeds 0-5 measured 500, 500,
    500, 500, 338, 500 with 20 evaluation episodes."""
    metrics = run(make_cfg("train=pqn", "seed=0", "runtime.torch_threads=1", "eval.episodes=10"), tmp_path / "run")
    assert metrics["eval/return_mean"] >= 475
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert records[0]["train/epsilon"] > 0.5 and records[-2]["train/epsilon"] == pytest.approx(0.05)

    agent = puffer.load(tmp_path / "run")
    obs = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32) * 0.05
    q, _ = agent.policy(torch.from_numpy(obs))
    assert np.array_equal(agent.act(obs), q.argmax(-1).numpy())  # the greedy action

    evaluated = run(make_cfg("mode=eval", f"checkpoint={tmp_path / 'run'}", "eval.episodes=5"), tmp_path / "eval")
    assert evaluated["eval/return_mean"] >= 475
    run(make_cfg("mode=export", f"checkpoint={tmp_path / 'run'}", f"mode.dir={tmp_path / 'agent'}",
                 "eval.episodes=2", "mode.video=false"), tmp_path / "export")
    exported = puffer.load(tmp_path / "agent")
    assert np.array_equal(exported.act(obs), agent.act(obs))


def test_what_pqn_cannot_learn_is_refused_before_any_env_starts(make_cfg):
    from puffer.config import ConfigError, validate

    with pytest.raises(ConfigError, match="policy=q"):
        validate(make_cfg("train=pqn", "policy=default"))
    with pytest.raises(ConfigError, match="policy.rnn=.lstm.: expected null with a Q-learner"):
        validate(make_cfg("train=pqn", "policy.rnn=lstm"))
    with pytest.raises(ConfigError, match=r"train.q_lambda=1.5: expected a number in \[0, 1\]"):
        validate(make_cfg("train=pqn", "train.q_lambda=1.5"))


def test_pqn_refuses_continuous_actions_in_one_line_with_what_to_use(cli):
    result = cli("train=pqn", "env=classic/pendulum", check=False)
    assert result.returncode != 0
    assert ("ConfigError: train=pqn learns a value per action of a Discrete action space; this env's is "
            "Box(-2.0, 2.0, (1,), float32): expected train=ppo") in result.stdout + result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_only_ppo_trains_as_members_of_a_batch(make_cfg):
    from omegaconf import OmegaConf

    from puffer.config import ConfigError
    from puffer.training.batched import check_batchable

    for algorithm in ("pqn", "spo"):
        with pytest.raises(ConfigError, match=f"train._target_=.*{algorithm.upper()}'.*members of a batch train "
                                              "with PPO only"):
            check_batchable([OmegaConf.to_object(make_cfg(f"train={algorithm}").train)] * 2)


def test_a_masked_q_networks_value_is_its_best_allowed_action():
    from puffer.emulation.spaces import ObsLayout
    from puffer.policies.build import build_policy

    layout = ObsLayout(spaces.Dict({"action_mask": spaces.MultiBinary(3), "obs": spaces.Box(-1, 1, (2,), np.float32)}))
    policy = build_policy({"_target_": "puffer.policies.networks.QNetwork"}, layout.flat_space, spaces.Discrete(3))
    rows = np.zeros((3, *layout.flat_space.shape), layout.flat_space.dtype)
    views = layout.leaf_views(rows)
    for row, mask in enumerate(([1, 1, 1], [1, 0, 0], [0, 1, 1])):
        layout.write([v[row] for v in views], {"action_mask": np.array(mask, np.int8), "obs": np.ones(2, np.float32)})
    q, value = policy(torch.from_numpy(rows))
    inner, _ = policy.policy(torch.from_numpy(rows))  # the network's own, unmasked
    assert value[0] == inner[0].max() and value[1] == inner[1, 0] and value[2] == inner[2, 1:].max()
    assert (q.argmax(-1)[1:] != torch.tensor([1, 0])).all()  # masked actions are never greedy


def test_a_key_of_another_algorithm_is_one_line_naming_whose_it_is(cli):
    result = cli("train=pqn", "train.clip_coef=0.1", check=False)
    assert result.returncode == 2
    assert (result.stdout + result.stderr).strip() == ("train.clip_coef=0.1: train.clip_coef is not a setting of "
                                                       "train=pqn; it is one of train=ppo, train=spo")
    result = cli("train.q_lambda=0.5", check=False)
    assert result.returncode == 2 and "train.q_lambda is not a setting of train=ppo or train=spo; it is one of " \
                                      "train=pqn" in result.stdout + result.stderr
