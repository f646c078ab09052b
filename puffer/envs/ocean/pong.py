"""Pong: one paddle against a scripted one, from state (or from pixels), every row a game.

A small game that shows speed and learning beyond the sanity envs. The field is the unit square;
the agent's paddle is on the right edge, the opponent's on the left. The ball moves in a straight
line and bounces off the top and bottom walls and off a paddle that meets it, which sends it back
with a slope set by where it hit (the paddle's edge sends it off steepest). The opponent follows
the ball at a limited speed, slower than the agent's paddle, so a steep ball gets past it.
A ball past the agent's paddle costs 1, past the opponent's earns 1; then the loser serves again
from the middle. A game ends when a side has `points` points (or is truncated at `max_steps`).

Actions Discrete(3): up, stay, down. Observation (state): ball x, y, x and y velocity (scaled to
about [-1, 1]), the agent's paddle y, the opponent's paddle y. With `pixels`, a (1, 42, 42) uint8
frame instead (the CNN policy reads it).

Scores: the return is the game's points difference, -points..points. Random play returns about
-2.9 of -3 (bench/ocean_learning: it rarely meets the ball); the shipped config reaches 2.5+
within a minute on a CPU, winning nearly every point.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from puffer.emulation import Buffers
from puffer.envs.ocean.base import BatchedEnv

SPEED_X = 0.03  # the ball's horizontal speed per step: 33 steps to cross the field
MAX_SLOPE = 1.5  # the steepest |vy / vx| a paddle's edge gives the ball
PADDLE = 0.1  # half a paddle's height
AGENT_SPEED, OPPONENT_SPEED = 0.04, 0.02
PIXELS = 42


class Pong(BatchedEnv):
    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(self, num_rows: int = 1024, points: int = 3, max_steps: int = 2000, pixels: bool = False,
                 seed: int = 0, render_mode: str | None = "rgb_array", buf: Buffers | None = None):
        self.name = "ocean/pong"
        self.points, self.max_steps, self.pixels = points, max_steps, pixels
        self.render_mode = render_mode
        self.single_observation_space = (spaces.Box(0, 255, (1, PIXELS, PIXELS), np.uint8) if pixels
                                         else spaces.Box(-2, 2, (6,), np.float32))
        self.single_action_space = spaces.Discrete(3)
        self.ball = np.zeros((num_rows, 4))  # x, y, vx, vy
        self.paddle = np.zeros(num_rows)
        self.opponent = np.zeros(num_rows)
        self.score = np.zeros((num_rows, 2), dtype=np.int64)  # agent, opponent
        self.init_rows(num_rows, seed)
        self.set_buffers(buf)

    def _serve(self, rows: np.ndarray) -> None:
        """The ball from the middle, towards a random side, at a random slope."""
        n = len(rows)
        direction = np.where(self.rng.random(n) < 0.5, -1.0, 1.0)
        slope = self.rng.uniform(-0.5, 0.5, n)
        self.ball[rows] = np.stack([np.full(n, 0.5), self.rng.uniform(0.2, 0.8, n),
                                    direction * SPEED_X, slope * SPEED_X], axis=1)

    def start(self, rows: np.ndarray) -> None:
        self.paddle[rows] = self.opponent[rows] = 0.5
        self.score[rows] = 0
        self._serve(rows)

    def advance(self, actions: np.ndarray):
        moves = actions.reshape(-1).astype(np.float64) - 1  # -1 up, 0 stay, +1 down
        self.paddle = np.clip(self.paddle + moves * AGENT_SPEED, 0, 1)
        x, y, vx, vy = self.ball.T
        self.opponent = np.clip(self.opponent + np.clip(y - self.opponent, -OPPONENT_SPEED, OPPONENT_SPEED), 0, 1)
        x, y = x + vx, y + vy
        bounced = (y < 0) | (y > 1)  # off the top or bottom wall
        y = np.where(y < 0, -y, np.where(y > 1, 2 - y, y))
        vy = np.where(bounced, -vy, vy)
        at_agent, at_opponent = x >= 1, x <= 0
        offset = np.where(at_agent, y - self.paddle, y - self.opponent) / PADDLE
        returned = (at_agent | at_opponent) & (np.abs(offset) <= 1)
        vx = np.where(returned, -vx, vx)
        vy = np.where(returned, offset * MAX_SLOPE * SPEED_X, vy)
        x = np.where(returned, np.clip(x, 0, 1), x)
        self.ball = np.stack([x, y, vx, vy], axis=1)
        lost, won = at_agent & ~returned, at_opponent & ~returned
        self.score[:, 0] += won
        self.score[:, 1] += lost
        scored = np.flatnonzero(won | lost)
        if len(scored):
            self._serve(scored)
        return won.astype(np.float64) - lost, (self.score >= self.points).any(axis=1)

    def observe(self) -> None:
        if self.pixels:
            self.observations[:] = self.frames(PIXELS)[:, None]
            return
        self.observations[:, :2] = self.ball[:, :2]
        self.observations[:, 2:4] = self.ball[:, 2:] / SPEED_X / MAX_SLOPE
        self.observations[:, 4] = self.paddle
        self.observations[:, 5] = self.opponent

    def frames(self, size: int, rows: slice = slice(None)) -> np.ndarray:
        """(rows, size, size) uint8 pictures: the paddles at the edges, the ball as a 2x2 square."""
        ball, paddle, opponent = self.ball[rows], self.paddle[rows], self.opponent[rows]
        n = len(ball)
        frame = np.zeros((n, size, size), np.uint8)
        heights = (np.arange(size) + 0.5) / size
        frame[:, :, -2:] = (np.abs(heights[None] - paddle[:, None]) <= PADDLE)[:, :, None] * 255
        frame[:, :, :2] = (np.abs(heights[None] - opponent[:, None]) <= PADDLE)[:, :, None] * 160
        r = np.clip((ball[:, 1] * (size - 1)).astype(np.int64), 0, size - 2)
        c = np.clip((ball[:, 0] * (size - 1)).astype(np.int64), 0, size - 2)
        for dr in (0, 1):
            for dc in (0, 1):
                frame[np.arange(n), r + dr, c + dc] = 255
        return frame

    def render(self) -> np.ndarray:
        """The first row's game as an RGB frame (for videos)."""
        gray = self.frames(84, slice(0, 1))[0]
        return np.repeat(gray[:, :, None], 3, axis=2)
