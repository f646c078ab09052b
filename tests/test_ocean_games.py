"""The Ocean games: Pong's and Snake's rules, their frames, and (slow) that their shipped configs
learn well past random play."""

from __future__ import annotations

import numpy as np
import pytest

from puffer.envs.ocean import Pong, Snake
from puffer.envs.ocean.snake import FOOD, OTHER, OWN, WALL
from puffer.run import run


def test_pong_returns_a_ball_the_paddle_meets_and_scores_one_it_misses():
    env = Pong(num_rows=2)
    env.reset(0)
    env.ball[:] = [0.99, 0.5, 0.03, 0.0]
    env.paddle[:] = [0.52, 0.1]  # row 0 meets the ball near its centre, row 1 is far away
    _, rewards, terminals, _, _ = env.step(np.ones(2, int))
    assert env.ball[0, 2] < 0 and rewards[0] == 0  # sent back, slope from where it hit
    assert env.ball[0, 3] == pytest.approx((0.5 - 0.52) / 0.1 * 1.5 * 0.03)
    assert rewards[1] == -1 and env.ball[1, 0] == 0.5 and tuple(env.score[1]) == (0, 1)  # served again
    env.score[0] = (2, 0)
    env.ball[0] = [0.01, 0.5, -0.03, 0.0]
    env.opponent[0] = 0.9  # cannot reach it: the agent's third point ends the game
    _, rewards, terminals, _, infos = env.step(np.ones(2, int))
    assert rewards[0] == 1 and terminals[0] and [info["row"] for info in infos] == [0]
    assert infos[0]["episode_return"] == 1  # the rewards it was paid (the first two points were set)


def test_pong_pixels_are_the_frames_it_renders():
    env = Pong(num_rows=3, pixels=True)
    obs, _ = env.reset(0)
    assert obs.shape == (3, 1, 42, 42) and obs.dtype == np.uint8
    np.testing.assert_array_equal(obs[:, 0], env.frames(42))
    ball_row, ball_col = int(env.ball[0, 1] * 41), int(env.ball[0, 0] * 41)
    assert obs[0, 0, ball_row, ball_col] == 255
    assert env.render().shape == (84, 84, 3)


def test_snake_bodies_food_and_lengths_stay_consistent_under_random_play():
    env = Snake(num_arenas=64)
    env.reset(0)
    rng = np.random.default_rng(1)
    deaths = eaten = 0
    for _ in range(300):
        _, rewards, terminals, _, _ = env.step(rng.integers(0, 3, env.num_agents))
        deaths += int(terminals.sum())
        eaten += int((rewards > 0).sum())
        live = ~env.needs_reset
        cells = np.bincount(env.owner[env.ttl > 0], minlength=env.num_agents)
        assert (cells[live] == env.length[live]).all() and (cells[~live] == 0).all()
        assert (env.food.reshape(64, -1).sum(1) == env.num_food).all()
        assert not (env.food & (env.ttl > 0)).any()
    assert deaths > 100 and eaten > 100


def test_snake_eats_what_it_sees_ahead_and_dies_at_a_wall():
    env = Snake(num_arenas=1, num_snakes=1, num_food=1, size=8, view=2)
    env.reset(0)
    env.ttl[:] = 0
    env.food[:] = False
    env.head[0], env.heading[0], env.length[0] = (4, 4), 1, 1  # heading right
    env.ttl[0, 4, 4], env.owner[0, 4, 4] = 1, 0
    env.food[0, 4, 5] = True
    env.observe()
    view = env.observations[0]
    assert view[2, 2] == OWN and view[1, 2] == FOOD  # turned so that ahead is up
    _, rewards, terminals, _, _ = env.step(np.array([1]))  # straight on: eat
    assert rewards[0] == 1 and env.length[0] == 2 and env.food.sum() == 1
    assert env.ttl[0, 4, 5] == 2 and env.ttl[0, 4, 4] == 1  # grown: the tail stayed
    assert env.observations[0][3, 2] == OWN  # its body, behind the head
    for _ in range(2):  # two more steps right reach column 7, the last one
        env.step(np.array([1]))
    assert env.observations[0][1, 2] == WALL
    _, rewards, terminals, _, infos = env.step(np.array([1]))
    assert terminals[0] and rewards[0] == -1 and infos[0]["episode_return"] == 0
    assert not (env.ttl > 0).any()  # the body is cleared; the snake starts again next step
    env.step(np.array([1]))
    assert env.length[0] == 1 and (env.ttl > 0).sum() == 1
    assert OTHER not in env.observations[0]  # alone in its arena


@pytest.mark.slow
def test_pong_learns_to_win_from_state(make_cfg, tmp_path):
    metrics = run(make_cfg("env=ocean/pong"), tmp_path)
    assert metrics["eval/return_mean"] >= 1.5, metrics  # random play: about -2.4 of -3..3


@pytest.mark.slow
def test_snake_learns_to_eat(make_cfg, tmp_path):
    metrics = run(make_cfg("env=ocean/snake", "train.total_timesteps=800000", "eval.episodes=50"), tmp_path)
    assert metrics["eval/return_mean"] >= 2, metrics  # random play: about -0.6
