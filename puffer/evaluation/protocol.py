"""The evaluation protocol: a fixed number of full episodes on seeds apart from training's.

Each episode slot (an env, or a row of a native env whose rows are separate episodes) plays a
fixed quota, so short episodes are not over-counted. The
deterministic policy (argmax / Gaussian mean) and the stochastic one are both reported. A
recurrent policy's state restarts where it does in training (puffer.policies.acting).
"""

from __future__ import annotations

import logging
import math

import numpy as np
import torch

from puffer.emulation.wrappers import PufferEnv
from puffer.policies.acting import Acting, episode_starts
from puffer.report.stats import t_interval
from puffer.runtime import threads
from puffer.vector import Serial

log = logging.getLogger(__name__)

# Eval env i is seeded with train seed + EVAL_SEED_OFFSET + i: never a training seed.
EVAL_SEED_OFFSET = 1_000_003


def episode_quotas(episodes: int, num_envs: int, first: int = 0) -> np.ndarray:
    """Episodes per slot, spread evenly, except that slot 0 (the recorded one) plays at least
    `first` of them."""
    even = np.array([episodes // num_envs + (i < episodes % num_envs) for i in range(num_envs)])
    first = min(first, episodes)
    if num_envs == 1 or even[0] >= first:
        return even
    return np.array([first, *episode_quotas(episodes - first, num_envs - 1)])


def eval_envs(env_creator, episodes: int, num_envs: int, seed: int) -> Serial:
    """Up to `num_envs` envs for `episodes` episodes; one alone where its rows are separate
    episodes, enough for all of them (a native batched env: more objects would only step more
    rows than the evaluation reads)."""
    first = env_creator()  # made once: building an env can be slow, or open a window
    if getattr(first, "independent_rows", False) and first.num_agents >= episodes:
        num_envs = 1
    num_envs = max(1, min(num_envs, episodes))
    return Serial([lambda: first, *[env_creator] * (num_envs - 1)], num_envs=num_envs, seed=seed)


@torch.inference_mode()
def evaluate(policy: torch.nn.Module, env_creator, episodes: int, seed: int,
             device: str | torch.device = "cpu", deterministic: bool = True,
             num_envs: int = 8, max_episode_steps: int = 100_000,
             recorder_factory=None, recorded_episodes: int = 1) -> dict[str, float]:
    """Play `episodes` episodes; returns the mean, std and Student's t 95% interval of the
    episode return, and the mean length.

    An episode that reaches `max_episode_steps` (eval.max_steps) is cut, so that an env
    with no time limit cannot hang the evaluation: it counts toward its slot's quota as
    `truncated`, with no return (it has none), and since its env cannot be reset alone, so does
    the rest of that slot's quota. A warning says how many; if every episode was cut, the return
    statistics are NaN. `recorder_factory(env)`, given, records the first eval env's episodes,
    `recorded_episodes` of them (that env plays at least as many)
    (a puffer.evaluation.video.EpisodeRecorder)."""
    with eval_envs(env_creator, episodes, num_envs, seed + EVAL_SEED_OFFSET) as vec, threads.using(
            threads.inference_threads(policy, vec.single_observation_space, vec.num_rows)):
        # An episode slot is an env, or a row of a native env whose rows are separate episodes.
        rows = vec.agents_per_env if vec.driver_env.independent_rows else 1
        quotas = episode_quotas(episodes, vec.num_envs * rows,
                                first=recorded_episodes if recorder_factory is not None else 0)
        recorder = recorder_factory(vec.envs[0]) if recorder_factory is not None else None
        played = play(Acting(policy, vec.single_action_space), vec, quotas, rows, device, deterministic,
                      max_episode_steps, recorder)
    returns, _, lengths, cut = played
    return summary(returns, lengths, cut, episodes, max_episode_steps)


@torch.inference_mode()
def evaluate_members(policy: torch.nn.Module, env_creator, episodes: int, seeds: list[int],
                     device: str | torch.device = "cpu", deterministic: bool = True, num_envs: int = 8,
                     max_episode_steps: int = 100_000) -> list[dict[str, float]]:
    """`evaluate` for the N members of a batch at once (puffer.training.batched): `policy` acts
    for N groups of rows (a puffer.training.members.StackedPolicy), member k's envs seeded as its own evaluation's
    (seeds[k] + EVAL_SEED_OFFSET + i), each playing its quota of episodes; member k's results
    are those `evaluate` gives its policy alone (the same episodes; the stochastic policy's
    draws come from one generator). Envs whose rows are separate episodes are not batched here."""
    from puffer.vector.base import member_creators

    n, per_member = len(seeds), max(1, min(num_envs, episodes))
    quotas = np.tile(episode_quotas(episodes, per_member), n)
    creators = [QuotaPlayer(creator, quota) for creator, quota in zip(
        member_creators(env_creator, [seed + EVAL_SEED_OFFSET for seed in seeds], per_member), quotas, strict=True)]
    # (the threads for one member's policy over every member's rows: the same work)
    with Serial(creators, num_envs=n * per_member, seed=0) as vec, threads.using(
            threads.inference_threads(policy.template, vec.single_observation_space, vec.num_rows)):
        played = play(Acting(policy, vec.single_action_space), vec, quotas, 1, device, deterministic,
                      max_episode_steps, None)
    returns, slots, lengths, cut = played
    member = np.asarray(slots, dtype=np.int64) // per_member
    return [summary(np.asarray(returns)[member == k], np.asarray(lengths)[member == k],
                    cut[k * per_member:(k + 1) * per_member], episodes, max_episode_steps) for k in range(n)]


class QuotaPlayer:
    """A creator of an evaluation env that, where the env is one episode slot (one row), stands
    still once it has ended `quota` episodes: `play` reads nothing of it after them, and 10
    episodes on 8 envs would otherwise step every env for the longest slot's two episodes (a
    third of a members evaluation's env steps). Picklable, as the creators it wraps."""

    def __init__(self, creator, quota: int):
        self.creator, self.quota = creator, quota

    def __call__(self, *args, **kwargs) -> PufferEnv:
        env = self.creator(*args, **kwargs)
        return _Quota(env, self.quota) if env.num_agents == 1 else env


class _Quota(PufferEnv):
    """`env` until it has ended `quota` episodes; then each step leaves its row as it was and
    reports nothing."""

    def __init__(self, env: PufferEnv, quota: int):
        self.env, self.quota, self.ended = env, quota, 0
        self.single_observation_space, self.single_action_space = env.single_observation_space, env.single_action_space
        self.name, self.seed_shift = env.name, env.seed_shift
        super().set_buffers(env.buffers)

    def set_buffers(self, buffers) -> None:
        self.env.set_buffers(buffers)
        super().set_buffers(self.env.buffers)

    def reset(self, seed: int | None = None):
        return self.env.reset(seed)

    def step(self, actions):
        if self.ended >= self.quota:
            return self.outputs([])
        *outputs, infos = self.env.step(actions)
        self.ended += sum("episode_return" in info for info in infos)
        return (*outputs, infos)

    def render(self):
        return self.env.render()

    def close(self) -> None:
        self.env.close()


def play(acting: Acting, vec, quotas: np.ndarray, rows: int, device, deterministic: bool, max_episode_steps: int,
         recorder) -> tuple[list[float], list[int], list[int], np.ndarray]:
    """Step `vec` with `acting` until every episode slot has played its quota: (returns, the
    slot of each, their lengths, the episodes cut at max_episode_steps in each slot)."""
    returns, slots, lengths = [], [], []
    done_count = np.zeros_like(quotas)
    episode_steps = np.zeros_like(quotas)  # steps of each slot's current episode
    truncated = np.zeros_like(quotas)
    vec.async_reset()
    received = vec.recv()
    if recorder is not None:
        recorder.frame()
    recurrent = acting.recurrent
    state = acting.initial_state(vec.num_rows, device)
    prev_done = before_done = np.zeros(vec.num_rows, dtype=bool)
    while (done_count < quotas).any():
        obs_t = torch.from_numpy(received.obs).to(device)
        # a recurrent state restarts where training's does (puffer.policies.acting)
        starts = (torch.from_numpy(episode_starts(prev_done, before_done, received.masks)).to(device)
                  if recurrent else None)
        params, _, state = acting.outputs(obs_t, state, starts)
        action, _ = acting.choose(params, deterministic)
        vec.send(acting.to_env(action))
        received = vec.recv()
        if recorder is not None:
            recorder.frame()
        if recurrent:
            before_done, prev_done = prev_done, received.terminals | received.truncations
        episode_steps += 1
        for info in received.infos:
            slot = info["env_id"] * rows + info.get("row", 0)
            if "episode_return" in info:
                if slot == 0 and recorder is not None:
                    recorder.end_episode()
                episode_steps[slot] = 0
                if done_count[slot] < quotas[slot]:
                    done_count[slot] += 1
                    returns.append(info["episode_return"])
                    slots.append(slot)
                    lengths.append(info["episode_length"])
        cut = (episode_steps >= max_episode_steps) & (done_count < quotas)
        if cut[0] and recorder is not None:  # the recorded episode was cut: keep what it has
            recorder.end_episode()
        if cut.any():
            truncated[cut] += (quotas - done_count)[cut]
            done_count[cut] = quotas[cut]
    return returns, slots, lengths, truncated


def summary(returns, lengths, cut: np.ndarray, episodes: int, max_episode_steps: int) -> dict[str, float]:
    """The statistics `evaluate` returns from what `play` gave: the episodes' returns and lengths,
    and the episodes cut in each slot."""
    truncated = int(np.sum(cut))
    if truncated:
        log.warning("evaluation: %d of %d episodes reached eval.max_steps=%d steps and were cut "
                    "(no return counted for them)", truncated, episodes, max_episode_steps)
    returns = np.asarray(returns, dtype=np.float64)
    if len(returns) == 0:
        return {"return_mean": math.nan, "return_std": math.nan, "return_ci95": math.nan,
                "length_mean": math.nan, "episodes": 0, "truncated": truncated}
    half_width = t_interval(returns) if len(returns) > 1 else 0.0
    return {
        "return_mean": float(returns.mean()),
        "return_std": float(returns.std()),
        "return_ci95": float(half_width),
        "length_mean": float(np.mean(lengths)),
        "episodes": len(returns),
        "truncated": truncated,
    }


@torch.inference_mode()
def against_random(policy: torch.nn.Module, env_creator, games: int, seed: int,
                   device: str | torch.device = "cpu", max_moves: int = 10_000) -> dict[str, float]:
    """Turn-based envs (puffer.emulation.TurnBasedPufferEnv): the deterministic policy against an
    opponent that picks uniformly among its legal moves (the observation's `action_mask`, or
    any action without one), the policy taking each seat in turn, on evaluation seeds. Returns
    the policy's win, draw and loss rates (by the sign of its episode return)."""
    env = env_creator()
    acting = Acting(policy, env.single_action_space)
    rng = np.random.default_rng(seed + EVAL_SEED_OFFSET)
    outcomes = []
    try:
        for game in range(games):
            seat = game % env.num_agents
            env.reset(seed + EVAL_SEED_OFFSET + game)
            for _ in range(max_moves):
                row = int(np.flatnonzero(env.masks)[0])
                actions = np.zeros((env.num_agents, *env.single_action_space.shape), env.single_action_space.dtype)
                if row == seat:
                    obs = torch.from_numpy(env.observations[row : row + 1]).to(device)
                    params = acting.outputs(obs, acting.initial_state(1, device))[0]
                    actions[row] = acting.to_env(acting.choose(params, deterministic=True)[0])[0]
                else:
                    actions[row] = _random_legal(env, row, rng)
                *_, infos = env.step(actions)
                if infos:
                    outcomes.append(np.sign(infos[0][f"episode_return/{env.possible_agents[seat]}"]))
                    break
    finally:
        env.close()
    outcomes = np.asarray(outcomes)
    return {"vs_random_win": float((outcomes > 0).mean()), "vs_random_draw": float((outcomes == 0).mean()),
            "vs_random_loss": float((outcomes < 0).mean()), "vs_random_games": len(outcomes)}


def _random_legal(env, row: int, rng: np.random.Generator):
    native = env.obs_layout.native(env.observations[row])
    mask = native.get("action_mask") if isinstance(native, dict) else None
    if mask is None:
        return env.single_action_space.sample()
    return rng.choice(np.flatnonzero(mask))
