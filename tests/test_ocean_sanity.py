"""The Ocean sanity envs: each env's rules give the random and the solved score its docstring
states; every ocean env passes the emulation checks gymnasium envs pass; and (`-m ocean`) the
shipped config solves each sanity env for seeds 0, 1 and 2, so a change that breaks one
capability of the trainer (memory, credit, exploration, ...) fails here within minutes."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from traces import assert_backends_agree

import puffer
import puffer.config.schema
import puffer.vector
from puffer.envs import ocean
from puffer.envs.ocean.nim import expected_return
from puffer.envs.ocean.stochastic import expected_score
from puffer.files import checkpoint
from puffer.loggers import read_metrics
from puffer.run import run


def play(env, policy, steps: int, seed: int = 0) -> np.ndarray:
    """Step `env` with `policy(env, rng)` for `steps` steps; the finished episodes' returns."""
    env.reset(seed)
    rng = np.random.default_rng(seed + 1)  # not the env's own stream: its draws would repeat them
    returns = []
    for _ in range(steps):
        *_, infos = env.step(policy(env, rng))
        returns += [info["episode_return"] for info in infos]
    return np.asarray(returns)


def uniform(env, rng):
    """Uniformly random actions from the env's flat action space."""
    space = env.single_action_space
    if isinstance(space, puffer.emulation.spaces.spaces.Discrete):
        return rng.integers(0, space.n, env.num_agents)
    if isinstance(space, puffer.emulation.actions.HybridBox):
        discrete = rng.integers(0, space.nvec, (env.num_agents, len(space.nvec)))
        continuous = rng.uniform(space.low[len(space.nvec):], space.high[len(space.nvec):],
                                 (env.num_agents, space.shape[0] - len(space.nvec)))
        return np.concatenate([discrete, continuous], axis=1).astype(np.float32)
    return rng.uniform(space.low, space.high, (env.num_agents, *space.shape)).astype(np.float32)


def assert_mean_near(returns: np.ndarray, expected: float, spread: float) -> None:
    """The sample mean within 5 standard errors (`spread`: a per-episode standard deviation bound)."""
    assert len(returns) > 1000
    assert abs(returns.mean() - expected) < 5 * spread / math.sqrt(len(returns)), (returns.mean(), expected)


# -- each env's rules ------------------------------------------------------------------------
def test_memory_is_chance_without_the_bit_and_solved_with_it():
    env = ocean.Memory(num_rows=2048, delay=4)
    assert_mean_near(play(env, uniform, 200), 0.0, 1.0)
    answers = play(env, lambda e, rng: e.bit, 200)
    assert len(answers) > 1000 and (answers == 1).all()
    # After the first step nothing observed depends on the bit: a feed-forward policy is at chance.
    env.reset(0)
    for _ in range(12):
        later = env.steps > 0
        assert (env.observations[later, 0] == 0).all()
        assert (env.observations[:, 1] == (env.steps == 4)).all()
        env.step(np.zeros(env.num_agents, int))


def test_bandit_pays_the_first_choice_after_the_delay():
    env = ocean.Bandit(num_rows=2048, arms=4, delay=8)
    assert_mean_near(play(env, uniform, 200), 0.25, 0.5)
    first = lambda e, rng: np.where(e.steps == 0, e.cue, rng.integers(0, 4, e.num_agents))  # noqa: E731
    returns = play(env, first, 200)
    assert len(returns) > 1000 and (returns == 1).all()
    env.reset(0)
    cue_shown = env.observations[:, :4].argmax(1)
    for step in range(9):
        _, rewards, terminals, _, infos = env.step(cue_shown)
        assert (rewards == (1.0 if step == 8 else 0.0)).all() and terminals.all() == (step == 8)
    assert {info["episode_length"] for info in infos} == {9}


def test_password_pays_only_the_whole_password():
    env = ocean.Password(num_rows=4096, length=8)
    returns = play(env, uniform, 400)
    assert len(returns) > 100_000
    assert_mean_near(returns, 2.0**-8, math.sqrt(2.0**-8))
    returns = play(env, lambda e, rng: e.password[np.minimum(e.steps, 7)], 100)
    assert (returns == 1).all()
    env.reset(0)
    wrong = 1 - env.password[0]
    _, rewards, terminals, _, infos = env.step(np.full(env.num_agents, wrong))
    assert terminals.all() and (rewards == 0).all() and {i["episode_length"] for i in infos} == {1}


def test_stochastic_scores_are_the_binomial_expectations():
    assert expected_score(1.0) == pytest.approx(2 / 3) and expected_score(0.0) == 0
    assert expected_score(0.5) == pytest.approx(0.6645, abs=1e-4)
    assert expected_score(0.75) == pytest.approx(0.8874, abs=1e-4)
    assert max(expected_score(q / 100) for q in range(101)) == pytest.approx(0.8879, abs=1e-4)
    env = ocean.Stochastic(num_rows=2048)
    np.testing.assert_allclose(play(env, lambda e, rng: np.zeros(e.num_agents, int), 64), 2 / 3, rtol=1e-6)
    assert (play(env, lambda e, rng: np.ones(e.num_agents, int), 64) == 0).all()
    assert_mean_near(play(env, uniform, 160), expected_score(0.5), 0.2)
    mixture = lambda e, rng: (rng.random(e.num_agents) > 0.75).astype(int)  # noqa: E731
    assert_mean_near(play(env, mixture, 160), expected_score(0.75), 0.2)
    assert (env.observations == 0).all()  # nothing to tell the steps apart


def test_continuous_pays_closeness_to_the_target_and_clips_actions():
    env = ocean.Continuous(num_rows=2048)
    assert_mean_near(play(env, uniform, 160), 8 / 3, 1.0)
    returns = play(env, lambda e, rng: e.observations.copy(), 160)
    np.testing.assert_allclose(returns, 8.0)
    env.reset(0)
    target = env.observations.copy()
    _, rewards, *_ = env.step(np.full((env.num_agents, 2), 5.0, np.float32))  # clipped to 1
    np.testing.assert_allclose(rewards, 1 - np.square(1 - target.astype(np.float64)).mean(1), atol=1e-6)


def test_spaces_is_solved_only_from_every_leaf_of_the_native_observation():
    env = ocean.Spaces(num_rows=2048)
    assert env.single_action_space == puffer.emulation.actions.ActionLayout(env.action_layout.space).flat_space
    assert_mean_near(play(env, uniform, 80), 7 / 3, 1.5)

    def reader(e, rng):  # reads the observation as the policy gets it: flat rows, unflattened
        obs = e.obs_layout.unflatten(e.observations)
        row = obs["grid"].reshape(e.num_agents, -1).argmax(1) // 4
        sign, size = obs["level"]
        return np.stack([(row + obs["shift"]) % 4, (2 * sign.astype(float) - 1) * size[:, 0]], 1).astype(np.float32)

    returns = play(env, reader, 80)
    np.testing.assert_allclose(returns, 8.0, rtol=1e-6)
    env.reset(0)
    for _ in range(5):  # every observation is in the declared native space
        obs = env.obs_layout.native(env.observations[0])
        assert env.obs_layout.space.contains(obs)
        env.step(uniform(env, np.random.default_rng(0)))


def test_multiagent_pays_agents_alone_on_their_action_and_masks_empty_slots():
    env = ocean.Multiagent(num_games=1024)
    assert_mean_near(play(env, uniform, 160), 13 / 3, 2.0)
    returns = play(env, lambda e, rng: e.slot, 80)
    np.testing.assert_allclose(returns, 8.0)
    env.reset(0)
    playing = env.masks.reshape(1024, 4).sum(1)
    assert set(playing.tolist()) == {2, 3, 4}
    assert (env.masks.reshape(1024, 4) == (np.arange(4) < playing[:, None])).all()  # first slots
    rng = np.random.default_rng(0)
    for _ in range(20):
        obs, rewards, terminals, truncations, infos = env.step(uniform(env, rng))
        absent = ~env.masks
        assert (obs[absent] == 0).all() and (rewards[absent] == 0).all()
        assert not (terminals | truncations)[absent].any()
        assert all(env.masks[info["row"]] for info in infos)


def test_nim_masks_illegal_moves_and_scores_its_dynamic_programme():
    assert expected_return(best=False) == pytest.approx(0, abs=1e-12)
    assert expected_return(best=True) == pytest.approx(0.9428, abs=1e-4)
    env = ocean.Nim(num_rows=4096)
    mask_of = lambda e: e.obs_layout.unflatten(e.observations)["action_mask"]  # noqa: E731

    def legal(e, rng):  # uniformly among the moves the mask allows
        allowed = mask_of(e)
        return (rng.random(e.num_agents) * allowed.sum(1)).astype(int)

    assert_mean_near(play(env, legal, 200), expected_return(best=False), 1.0)
    best = lambda e, rng: np.where(e.pile % 4 == 0, 0, e.pile % 4 - 1)  # noqa: E731
    assert_mean_near(play(env, best, 200), expected_return(best=True), 1.0)
    env.reset(0)
    np.testing.assert_array_equal(mask_of(env), np.arange(1, 4) <= env.pile[:, None])
    env.pile[:] = 2
    _, rewards, terminals, *_ = env.step(np.full(env.num_agents, 2))  # take 3 of 2: illegal
    assert terminals.all() and (rewards == -1).all()


# -- the emulation checks every env passes ----------------------------------------------------
SANITY = list(ocean.SOLVED)
EMULATED = [*SANITY, "pong", "snake"]  # (ocean/cartpole, squares and herd: tests/test_ocean.py)
SMALL = {"multiagent": {"num_games": 8}, "snake": {"num_arenas": 8}}  # else {"num_rows": 32}


def env_class(name: str) -> type:
    return getattr(ocean, puffer.config.schema.OCEAN_ENVS[name][0])


@pytest.mark.parametrize("name", EMULATED)
def test_serial_and_multiprocessing_give_the_same_trace(name):
    kwargs = SMALL.get(name, {"num_rows": 32})

    def actions(vec):
        env, rng = env_class(name)(**kwargs), np.random.default_rng(0)
        return lambda step: np.concatenate([uniform(env, rng) for _ in range(2)])

    assert_backends_agree(lambda backend: puffer.vector.make(env_class(name), env_kwargs=kwargs, num_envs=2,
                                                             backend=backend), 50, 7, actions)


@pytest.mark.parametrize("name", EMULATED)
def test_a_resumed_run_matches_an_uninterrupted_one_bit_for_bit(make_cfg, tmp_path, name):
    rows = [f"env.{key}={2 * value}" for key, value in SMALL.get(name, {"num_rows": 32}).items()]
    small = [f"env=ocean/{name}", *rows, "train.num_steps=16", "train.total_timesteps=4096",
             "eval.episodes=0"]
    run(make_cfg(*small, "runtime.checkpoint_interval=2", "runtime.keep_checkpoints=0"), tmp_path / "full")
    middle = tmp_path / "full" / "checkpoints" / "epoch_000002.pt"
    run(make_cfg(*small, f"resume={middle}"), tmp_path / "resumed")
    full, resumed = (read_metrics(tmp_path / d / "metrics.jsonl") for d in ("full", "resumed"))
    losses = ["global_step", "train/policy_loss", "train/value_loss", "train/entropy"]
    assert [[r[k] for k in losses] for r in full[2:]] == [[r[k] for k in losses] for r in resumed]
    last = sorted((tmp_path / "full" / "checkpoints").glob("*.pt"))[-1].name
    a, b = (checkpoint.read(tmp_path / d / "checkpoints" / last)["policy"] for d in ("full", "resumed"))
    assert all(torch.equal(a[k], b[k]) for k in a)


# -- learning: the regression suite for algorithms (pytest -m ocean) --------------------------
@pytest.mark.ocean
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", SANITY)
def test_the_shipped_config_solves_each_sanity_env(make_cfg, tmp_path, name, seed):
    metrics = run(make_cfg(f"env=ocean/{name}", f"seed={seed}"), tmp_path)
    threshold, policy = ocean.SOLVED[name]
    metric = "eval/return_mean" if policy == "deterministic" else "eval/stochastic_return_mean"
    assert metrics[metric] >= threshold, metrics
    if name == "stochastic":  # solved by a mixture: the deterministic policy is stuck at 2/3 or 0
        assert metrics["eval/return_mean"] <= 2 / 3 + 1e-6
        logits = puffer.load(tmp_path).policy(torch.zeros(1, 1))[0]
        assert 0.6 < torch.softmax(logits, -1)[0, 0].item() < 0.9
    if name == "nim":  # the winning move wherever there is one: leave a multiple of 4 stones
        agent = puffer.load(tmp_path)  # (on the piles games pass often; 12-15 are mostly starts)
        piles = np.arange(1, 12)
        piles = piles[piles % 4 != 0]
        obs = {"action_mask": (np.arange(1, 4) <= piles[:, None]).astype(np.float32),
               "pile": np.eye(16, dtype=np.float32)[piles]}
        np.testing.assert_array_equal(agent.act(obs), piles % 4 - 1)


# The sanity envs PQN solves: those without memory whose actions are Discrete (spaces' are hybrid,
# nim is turn-based; memory needs an LSTM, stochastic a mixed policy a greedy one cannot be).
PQN_SOLVES = ("bandit", "password", "multiagent")


@pytest.mark.ocean
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", PQN_SOLVES)
def test_pqn_solves_the_sanity_envs_a_greedy_feed_forward_policy_can(make_cfg, tmp_path, name, seed):
    metrics = run(make_cfg(f"env=ocean/{name}", "train=pqn", f"seed={seed}"), tmp_path)
    assert metrics["eval/return_mean"] >= ocean.SOLVED[name][0], metrics


@pytest.mark.ocean
def test_memory_is_not_solved_by_a_feed_forward_policy(make_cfg, tmp_path):
    metrics = run(make_cfg("env=ocean/memory", "policy.rnn=null"), tmp_path)
    assert abs(metrics["eval/return_mean"]) < 0.5, metrics  # chance is 0; the LSTM reaches 0.9+
