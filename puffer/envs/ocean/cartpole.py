"""CartPole with gymnasium's CartPole-v1 dynamics (Euler, same constants, same thresholds, the
500-step time limit), for `num_rows` carts at once, one row each."""

from __future__ import annotations

import math

import numpy as np
from gymnasium import spaces

from puffer.emulation import Buffers
from puffer.envs.ocean.base import BatchedEnv

GRAVITY, MASSCART, MASSPOLE, LENGTH, FORCE_MAG, TAU = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
TOTAL_MASS = MASSPOLE + MASSCART
POLEMASS_LENGTH = MASSPOLE * LENGTH
THETA_THRESHOLD = 12 * 2 * math.pi / 360
X_THRESHOLD = 2.4
HIGH = np.array([X_THRESHOLD * 2, np.finfo(np.float32).max, THETA_THRESHOLD * 2,
                 np.finfo(np.float32).max], dtype=np.float32)


class CartPole(BatchedEnv):
    def __init__(self, num_rows: int = 1024, max_steps: int = 500, seed: int = 0,
                 buf: Buffers | None = None):
        self.name = "ocean/cartpole"
        self.max_steps = max_steps
        self.single_observation_space = spaces.Box(-HIGH, HIGH, dtype=np.float32)
        self.single_action_space = spaces.Discrete(2)
        self.state = np.zeros((num_rows, 4))  # float64, as gymnasium keeps it
        self.init_rows(num_rows, seed)
        self.set_buffers(buf)

    def start(self, rows: np.ndarray) -> None:
        self.state[rows] = self.rng.uniform(-0.05, 0.05, (len(rows), 4))

    def advance(self, actions: np.ndarray):
        x, x_dot, theta, theta_dot = self.state.T
        force = np.where(actions.reshape(-1) == 1, FORCE_MAG, -FORCE_MAG)
        costheta, sintheta = np.cos(theta), np.sin(theta)
        temp = (force + POLEMASS_LENGTH * np.square(theta_dot) * sintheta) / TOTAL_MASS
        thetaacc = (GRAVITY * sintheta - costheta * temp) / (
            LENGTH * (4.0 / 3.0 - MASSPOLE * np.square(costheta) / TOTAL_MASS))
        xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS
        self.state = np.stack([x + TAU * x_dot, x_dot + TAU * xacc, theta + TAU * theta_dot,
                               theta_dot + TAU * thetaacc], axis=1)
        x, theta = self.state[:, 0], self.state[:, 2]
        terminated = (x < -X_THRESHOLD) | (x > X_THRESHOLD) | (theta < -THETA_THRESHOLD) | (
            theta > THETA_THRESHOLD)
        return np.ones(self.num_agents), terminated

    def observe(self) -> None:
        self.observations[:] = self.state
