"""Members learn as one batch and each as its solo run would (puffer.training.members): member
k's outputs and PPO steps equal a solo PPO's with k's weights and settings, and a member that
diverges changes nothing for the others."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import puffer.vector
from puffer.config import TrainConfig
from puffer.emulation import GymnasiumPufferEnv
from puffer.policies.build import build_policy
from puffer.training.members import MemberAdam, MemberStep, Stack, clip_per_member
from puffer.training.minibatches import Minibatch
from puffer.training.ppo import PPO, Coefficients

OBS, ACTIONS = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)
POLICY = {"_target_": "puffer.policies.networks.Default", "hidden_size": 32}
# Members differ in their seeds and in every float setting a batch lets them differ in.
SETTINGS = [dict(learning_rate=3e-3, clip_coef=0.2, vf_clip_coef=0.2, ent_coef=0.0, vf_coef=0.5, max_grad_norm=0.5),
            dict(learning_rate=1e-3, clip_coef=0.1, vf_clip_coef=1.0, ent_coef=0.01, vf_coef=1.0, max_grad_norm=0.05),
            dict(learning_rate=5e-4, clip_coef=0.3, vf_clip_coef=0.5, ent_coef=0.05, vf_coef=0.25, max_grad_norm=10.0)]


# Pendulum: 3 observations, a Gaussian head over one continuous action.
CONTINUOUS = ("Pendulum-v1", gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2, 2, (1,)))


def policy_of(seed: int, obs=OBS, actions=ACTIONS):
    torch.manual_seed(seed)  # member k starts from the weights a solo run with seed k builds
    return build_policy(POLICY, obs, actions)


def solo_trainer(policy, settings: dict, env_id: str = "CartPole-v1") -> PPO:
    vecenv = puffer.vector.make(lambda: GymnasiumPufferEnv(env=gym.make(env_id)), num_envs=2)
    return PPO(TrainConfig(num_steps=8, clip_vloss=True, **settings), vecenv, policy, device="cpu", progress=None)


def minibatch(seed: int, size: int = 64, obs=OBS, actions=ACTIONS) -> Minibatch:
    g = torch.Generator().manual_seed(100 + seed)
    chosen = (torch.randint(0, 2, (size,), generator=g) if isinstance(actions, gym.spaces.Discrete)
              else torch.randn(size, *actions.shape, generator=g))
    return Minibatch(obs=torch.rand(size, *obs.shape, generator=g) * 2 - 1, actions=chosen,
                     logprobs=-torch.rand(size, generator=g) - 0.9, values=torch.randn(size, generator=g),
                     advantages=torch.randn(size, generator=g), returns=torch.randn(size, generator=g), where=None)


def stacked(batches: list[Minibatch]) -> Minibatch:
    fields = ("obs", "actions", "logprobs", "values", "advantages", "returns")
    return Minibatch(**{f: torch.stack([getattr(b, f) for b in batches]) for f in fields}, where=None)


def members(seeds: list[int], settings: list[dict], algorithm: PPO, obs=OBS,
            actions=ACTIONS) -> tuple[Stack, MemberStep, Coefficients]:
    stack = Stack([policy_of(seed, obs, actions) for seed in seeds])
    column = lambda key: torch.tensor([s[key] for s in settings])  # noqa: E731
    step = MemberStep(algorithm, stack, MemberAdam(stack.flat, column("learning_rate"), torch.full((len(seeds),), 1e-5)),
                      column("max_grad_norm"))
    coefficients = Coefficients(*(column(k) for k in ("clip_coef", "vf_clip_coef", "ent_coef", "vf_coef")))
    return stack, step, coefficients


def test_member_k_acts_with_the_weights_of_a_solo_run_with_seed_k():
    stack = Stack([policy_of(seed) for seed in range(4)])
    obs = torch.rand(4, 16, 4)
    logits, values = stack.forward(obs)
    for k in range(4):
        solo_logits, solo_values = policy_of(k)(obs[k])
        torch.testing.assert_close(logits[k], solo_logits, rtol=0, atol=1e-6)
        torch.testing.assert_close(values[k], solo_values, rtol=0, atol=1e-6)
        again = stack.member(k, policy_of(0))
        assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), policy_of(k).state_dict().values(),
                                                     strict=True))


@pytest.mark.parametrize("env", ["CartPole-v1", "Pendulum-v1"])
def test_members_step_as_their_solo_runs_with_their_own_settings(env):
    """Three PPO steps of three members with their own seeds, data and float settings equal the
    real solo trainer's steps (PPO._minibatch_step: fused Adam, clip_grad_norm_) to float tolerance:
    discrete actions (CartPole) and a Gaussian head (Pendulum)."""
    obs, actions = (OBS, ACTIONS) if env == "CartPole-v1" else CONTINUOUS[1:]
    solos = [solo_trainer(policy_of(k, obs, actions), SETTINGS[k], env) for k in range(3)]
    stack, step, coefficients = members([0, 1, 2], SETTINGS, solos[0], obs, actions)
    for update in range(3):
        batches = [minibatch(10 * update + k, obs=obs, actions=actions) for k in range(3)]
        stats, ratios = step(stacked(batches), coefficients)
        for k, solo in enumerate(solos):
            solo_stats, solo_ratio = solo._minibatch_step(batches[k])
            torch.testing.assert_close(stats[k], solo_stats, rtol=1e-4, atol=1e-6)
            torch.testing.assert_close(ratios[k], solo_ratio, rtol=1e-5, atol=1e-6)
    for k, solo in enumerate(solos):
        for name, value in solo.policy.named_parameters():
            torch.testing.assert_close(stack.params[name][k], value.detach(), rtol=1e-4, atol=1e-6, msg=name)
    assert step.active.all()
    # each member's own clip: member 1's norm was above its 0.05, member 2's below its 10
    assert stats[1, 5] > 0.05 and stats[2, 5] < 10


@pytest.mark.parametrize("how", ["a non-finite observation", "learning_rate=1e6"])
def test_a_member_that_diverges_is_stopped_alone_and_the_others_never_notice(how):
    algorithm = solo_trainer(policy_of(0), SETTINGS[0])
    settings = [dict(SETTINGS[0]) for _ in range(3)]
    if how == "learning_rate=1e6":
        settings[1]["learning_rate"] = 1e6
    with_it = members([0, 1, 2], settings, algorithm)
    without = members([0, 2], [settings[0], settings[2]], algorithm)
    for update in range(20):
        batches = [minibatch(10 * update + k) for k in range(3)]
        if how == "a non-finite observation" and update == 2:
            batches[1].obs[0, 0] = float("nan")
        stats, _ = with_it[1](stacked(batches), with_it[2])
        alone, _ = without[1](stacked([batches[0], batches[2]]), without[2])
        torch.testing.assert_close(stats[[0, 2]], alone, rtol=0, atol=0)  # the same to the bit
        assert torch.isfinite(stats[[0, 2]]).all()
    assert torch.equal(with_it[0].flat[[0, 2]], without[0].flat)
    assert torch.isfinite(with_it[0].flat[[0, 2]]).all()
    if how == "a non-finite observation":  # stopped, with its last finite weights
        assert with_it[1].active.tolist() == [True, False, True]
        assert torch.isfinite(with_it[0].flat[1]).all()
    else:  # its weights blew up (tanh keeps its loss finite): its business alone
        assert with_it[0].flat[1].abs().max() > 1e4


def test_clipping_is_per_member():
    grad = torch.tensor([[3.0, 0.0, 4.0], [0.3, 0.4, 0.0]])
    norms = clip_per_member(grad, torch.tensor([1.0, 1.0]))
    torch.testing.assert_close(norms, torch.tensor([5.0, 0.5]))
    torch.testing.assert_close(grad, torch.tensor([[0.6, 0.0, 0.8], [0.3, 0.4, 0.0]]), atol=1e-6, rtol=0)


DICT_OBS = gym.spaces.Dict({"image": gym.spaces.Box(0, 255, (3, 12, 12), dtype="uint8"),
                            "position": gym.spaces.Box(-1, 1, (2,)),
                            "mission": gym.spaces.Text(8, charset="abc")})


@pytest.mark.parametrize("kind", ["cnn", "dict", "norm_obs"])
def test_every_policy_kind_acts_as_a_member_as_it_acts_alone(kind):
    """The policies beyond the MLP (the CNN torso, a Dict of image, vector and text leaves,
    running observation statistics): a stack of members gives each member's own outputs,
    through the member-batched layers where they fit and vmap where they do not."""
    from puffer.emulation.spaces import ObsLayout
    from puffer.training.members import StackedPolicy

    if kind == "cnn":
        obs_space, spec = gym.spaces.Box(0, 255, (4, 44, 44), dtype="uint8"), {
            "_target_": "puffer.policies.networks.NatureCNN", "hidden_size": 32}
    else:
        layout = ObsLayout(DICT_OBS if kind == "dict" else gym.spaces.Box(-5, 5, (3,)))
        obs_space = layout.flat_space
        spec = {**POLICY, "norm_obs": kind == "norm_obs"}
    policies = []
    for seed in range(3):
        torch.manual_seed(seed)
        policies.append(build_policy(spec, obs_space, ACTIONS))
    g = torch.Generator().manual_seed(0)
    if kind == "cnn":
        obs = torch.stack([torch.from_numpy(obs_space.sample()) for _ in range(3 * 5)])
    else:  # flat rows written from native observations, as the emulation writes them
        rows = np.zeros((3 * 5, *obs_space.shape), obs_space.dtype)
        for row in rows:
            layout.write(layout.leaf_views(row), layout.space.sample())
        obs = torch.from_numpy(rows)
    if kind == "norm_obs":  # statistics of their own, different for each member
        for k, policy in enumerate(policies):
            policy.update_obs_stats(torch.randn(64, 3, generator=g) * (k + 1))
    stacked = StackedPolicy(policies)
    logits, values = stacked(obs)
    for k, policy in enumerate(policies):
        own_logits, own_values = policy(obs[k * 5:(k + 1) * 5])
        torch.testing.assert_close(logits[k * 5:(k + 1) * 5], own_logits, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(values[k * 5:(k + 1) * 5], own_values, rtol=1e-4, atol=1e-5)


def test_lstm_members_step_and_replay_sequences_as_each_alone():
    """An LSTM policy as members: one step from each member's own state, and the sequence pass
    of training (states zeroed where episodes start), give each member's outputs and new state
    as its own nn.LSTMCell does, to float tolerance (the stack runs the cell's formula in plain
    ops, which vmap maps over members)."""
    from puffer.training.members import StackedPolicy

    spec = {**POLICY, "rnn": "lstm"}
    policies = []
    for seed in range(3):
        torch.manual_seed(seed)
        policies.append(build_policy(spec, OBS, ACTIONS))
    stacked = StackedPolicy(policies)
    assert stacked.is_recurrent
    g = torch.Generator().manual_seed(0)
    steps, rows = 6, 4  # rows per member
    obs = torch.rand(steps, 3 * rows, 4, generator=g) * 2 - 1
    state = tuple(torch.randn(3 * rows, policies[0].hidden_size, generator=g) for _ in range(2))
    starts = torch.rand(steps, 3 * rows, generator=g) < 0.2
    logits, values, (h, c) = stacked.step(obs[0], state)
    sequence_logits, sequence_values = stacked.forward_sequence(obs, state, starts)
    for k, policy in enumerate(policies):
        mine = slice(k * rows, (k + 1) * rows)
        own_logits, own_values, (own_h, own_c) = policy.step(obs[0, mine], (state[0][mine], state[1][mine]))
        for got, expected in ((logits[mine], own_logits), (values[mine], own_values), (h[mine], own_h),
                              (c[mine], own_c)):
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
        own = policy.forward_sequence(obs[:, mine], (state[0][mine], state[1][mine]), starts[:, mine])
        at = (torch.arange(steps)[:, None] * 3 * rows + torch.arange(k * rows, (k + 1) * rows)).flatten()
        torch.testing.assert_close(sequence_logits[at], own[0], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(sequence_values[at], own[1], rtol=1e-4, atol=1e-5)
