"""Atari (ALE) with the preprocessing of the published PPO baselines.

Stack, bottom to top: the ALE game (frameskip 1, sticky actions), gymnasium's AtariPreprocessing
(no-op reset up to 30, frame skip 4 with a max over the last two frames, 84x84 grayscale),
`GameStats` (the full-game, unclipped return and length), then for training only `EpisodicLife`
(a lost life ends the training episode) and sign-clipped rewards, `FireReset` where the game has
FIRE, and FrameStackObservation(4). Evaluation builds the same stack without episodic life and
clipping (conf: `env.eval_kwargs`). ale-py ships the ROMs; no download step.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation, TransformReward

from puffer.config import ConfigError
from puffer.emulation import GymnasiumPufferEnv


class GameStats(gym.Wrapper):
    """Puts the whole game's return and length into the info of the step that ends it.

    Sits below reward clipping and episodic life, so the numbers are the real game's. The puffer
    wrapper sees `reports_episodes` and logs these instead of its own per-life counts."""

    reports_episodes = True

    def reset(self, **kwargs):
        self.game_return, self.game_length = 0.0, 0
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_return += float(reward)
        self.game_length += 1
        if terminated or truncated:
            info = {**info, "episode_return": self.game_return, "episode_length": self.game_length}
        return obs, reward, terminated, truncated, info


class EpisodicLife(gym.Wrapper):
    """A lost life ends the episode for the learner; the game itself goes on (the next reset
    is a no-op step) until it is really over."""

    def __init__(self, env):
        super().__init__(env)
        self.lives, self.game_over = 0, True

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = terminated or truncated
        lives = self.env.unwrapped.ale.lives()
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs):
        if self.game_over:
            obs, info = self.env.reset(**kwargs)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        self.lives = self.env.unwrapped.ale.lives()
        return obs, info


class FireReset(gym.Wrapper):
    """Presses FIRE after a reset and after a lost life, for games that wait for it (Breakout
    serves the ball): without it, a full-game evaluation of a policy that never fires stalls
    until the frame limit."""

    def reset(self, **kwargs):
        self.env.reset(**kwargs)
        for action in (1, 2):
            obs, _, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                self.env.reset(**kwargs)
        self.lives = self.env.unwrapped.ale.lives()
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        lives = self.env.unwrapped.ale.lives()
        if 0 < lives < self.lives and not (terminated or truncated):
            obs, fire_reward, terminated, truncated, info = self.env.step(1)
            reward += fire_reward
        self.lives = lives
        return obs, reward, terminated, truncated, info


def game_id(game: str) -> str:
    """`breakout`, `Breakout`, `space_invaders` or a full `ALE/SpaceInvaders-v5` -> the ALE id."""
    if "/" in game:
        return game
    return "ALE/" + "".join(part[:1].upper() + part[1:] for part in game.split("_")) + "-v5"


def make_env(game: str, sticky_actions: float = 0.25, frame_skip: int = 4, noop_max: int = 30,
             screen_size: int = 84, frame_stack: int = 4, episodic_life: bool = True,
             clip_rewards: bool = True, max_episode_steps: int = 108_000,
             render_mode: str | None = None) -> gym.Env:
    import ale_py

    gym.register_envs(ale_py)
    env_id = game_id(game)
    try:
        # obs_type grayscale: AtariPreprocessing reads the screen itself, so the base env's own
        # observation is thrown away; grayscale is the cheapest one to make (~10% of a step).
        env = gym.make(env_id, frameskip=1, repeat_action_probability=sticky_actions,
                       obs_type="grayscale", max_num_frames_per_episode=max_episode_steps,
                       render_mode=render_mode)
    except gym.error.Error as exc:
        raise ConfigError(f"env.game={game!r}: ALE has no {env_id} ({exc})") from exc
    env = AtariPreprocessing(env, noop_max=noop_max, frame_skip=frame_skip, screen_size=screen_size)
    env = GameStats(env)
    if episodic_life:
        env = EpisodicLife(env)
    if "FIRE" in env.unwrapped.get_action_meanings():
        env = FireReset(env)
    if clip_rewards:
        env = TransformReward(env, lambda r: float(np.sign(r)))
    return FrameStackObservation(env, frame_stack)


def make(game: str, validate_steps: int = 1000, **kwargs) -> GymnasiumPufferEnv:
    """The puffer env for `env=atari/<game>`; kwargs as `make_env`."""
    return GymnasiumPufferEnv(env=make_env(game, **kwargs), validate_steps=validate_steps)
