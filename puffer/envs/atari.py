"""Atari (ALE) with the preprocessing of the published PPO baselines.

Stack, bottom to top: the ALE game (frameskip 1, sticky actions), gymnasium's AtariPreprocessing
(no-op reset up to 30, frame skip 4 with a max over the last two frames, 84x84 grayscale),
`GameStats` (the full-game, unclipped return and length), then for training only `EpisodicLife`
(a lost life ends the training episode) and sign-clipped rewards, `FireReset` where the game has
FIRE, and FrameStackObservation(4). Evaluation builds the same stack without episodic life and
clipping (conf: `env.eval_kwargs`). ale-py ships the ROMs; no download step.

The stack pickles mid-episode (for checkpoints): the ALE game pickles its emulator state, where
ale-py's own pickling (gymnasium's EzPickle) would rebuild a fresh game.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation, TransformReward

from puffer.emulation import GymnasiumPufferEnv
from puffer.errors import ConfigError


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


@functools.cache
def _resumable_atari_env_class() -> type:
    """ale-py's AtariEnv as one that pickles mid-episode: its attributes and the emulator's
    state, where ale-py's EzPickle pickles the constructor arguments and so rebuilds a fresh
    game. Made on first use, so that ale_py (the atari extra) is imported only for Atari."""
    from ale_py.env import AtariEnv

    class ResumableAtariEnv(AtariEnv):
        pickles_mid_episode = True  # read by puffer.vector.base.pickled_by_arguments

        def __getstate__(self) -> dict[str, Any]:
            state = {key: value for key, value in vars(self).items() if key != "ale"}
            state["ale_state"] = self.ale.cloneState(include_rng=True)  # sticky actions' RNG too
            return state

        def __setstate__(self, state: dict[str, Any]) -> None:
            state = dict(state)
            ale_state = state.pop("ale_state")
            # a fresh emulator with the ROM loaded, then the game in progress restored into it
            AtariEnv.__init__(self, *state["_ezpickle_args"], **state["_ezpickle_kwargs"])
            vars(self).update(state)
            self.ale.restoreState(ale_state)

    ResumableAtariEnv.__qualname__ = ResumableAtariEnv.__name__  # pickled by this module's name
    return ResumableAtariEnv


def __getattr__(name: str):
    # pickle finds the class as puffer.envs.atari.ResumableAtariEnv
    if name == "ResumableAtariEnv":
        return _resumable_atari_env_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def resumable_atari_env(**kwargs) -> gym.Env:
    """The entry point of the ALE ids, as used by `make_env`."""
    return _resumable_atari_env_class()(**kwargs)


def clip_reward(reward: float) -> float:
    """The sign of the reward (a named function: a lambda would not pickle)."""
    return float(np.sign(reward))


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
        spec = dataclasses.replace(gym.spec(env_id), entry_point=resumable_atari_env)
        env = gym.make(spec, frameskip=1, repeat_action_probability=sticky_actions,
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
        env = TransformReward(env, clip_reward)
    return FrameStackObservation(env, frame_stack)


def make(game: str, validate_steps: int = 1000, **kwargs) -> GymnasiumPufferEnv:
    """The puffer env for `env=atari/<game>`; kwargs as `make_env`."""
    return GymnasiumPufferEnv(env=make_env(game, **kwargs), validate_steps=validate_steps)
