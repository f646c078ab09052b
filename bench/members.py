"""The learner of members (puffer.training.members) against the same agents' solo steps: one PPO
minibatch step (forward, loss, backward, per-member clip, Adam) for N members at once, beside N
steps of the solo trainer (PPO._minibatch_step, fused Adam), in the same process, one thread.

    python bench/members.py [--members 1 2 4 8 16 32 64] [--hidden 64] [--minibatch 128] [--seconds 1]

Columns: ms per batched step, ms for the N solo steps, their ratio (how many times faster the
batch learns), and the batched step's cost against one solo step (the price of N agents in
units of one). CartPole's spaces, the Default policy. This measures the learner alone: the
members' rollouts, GAE and envs are not in it (issue 43's study benchmark needs them). Check
`uptime` first; a busy machine slows both columns, the ratio less.

Whole studies (`--study`): for each N, the N seeds of `--env`'s shipped config at its budget as one
members batch (bench/study.py's members row: one process, training and the final evaluation),
beside one seed alone, run before the sweep and after it (the unit of the `x one seed` column: their
mean, with both shown): wall seconds, agent steps per second, final returns (10 held-out episodes
per seed, t 95%), seeds at the env's score. bench/study.py puts one N beside separate runs and
SB3 + zoo.

    python bench/members.py --study [--env classic/cartpole] [--members 1 2 4 8 16 32 64]
                            [--vec vec=multiprocessing] [puffer overrides ...]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import gymnasium as gym
import torch

import puffer.vector
from puffer.config import TrainConfig
from puffer.emulation import GymnasiumPufferEnv
from puffer.policies.build import build_policy
from puffer.training.members import MemberAdam, MemberStep, Stack
from puffer.training.minibatches import Minibatch
from puffer.training.ppo import PPO, Coefficients

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import print_table  # noqa: E402

OBS, ACTIONS = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)


def minibatch(rows: int, leading: tuple = ()) -> Minibatch:
    shape = (*leading, rows)
    return Minibatch(obs=torch.rand(*shape, 4) * 2 - 1, actions=torch.randint(0, 2, shape),
                     logprobs=-torch.rand(shape) - 0.4, values=torch.randn(shape),
                     advantages=torch.randn(shape), returns=torch.randn(shape), where=None)


def timed(step, seconds: float) -> float:
    """Seconds per call of `step`, after warming up, over at least `seconds`."""
    for _ in range(5):
        step()
    calls, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        step()
        calls += 1
    return elapsed / calls


def study(args) -> None:
    """The whole-study sweep over N (--study)."""
    import logging
    import os

    import numpy as np
    from learn_suite import SUITE
    from study import timed as timed_jobs
    from time_to_score import THRESHOLDS, budget

    from puffer.report.stats import t_interval

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    out = Path(args.out) / time.strftime("%Y%m%d-%H%M%S")
    one = [timed_jobs("solo", args.env, [[0]], out / "one-before", args.overrides, 1, None)[0]]
    runs = [(n, *timed_jobs("members", args.env, [list(range(n))], out / f"members-{n}", [*args.overrides, args.vec], 1, None))
            for n in args.members]
    one.append(timed_jobs("solo", args.env, [[0]], out / "one-after", args.overrides, 1, None)[0])
    unit = float(np.mean(one))
    env_id = SUITE[args.env][0] if args.env in SUITE else args.env
    score, steps = THRESHOLDS.get(env_id), budget(args.env, args.overrides)
    rows = [[n, f"{wall:.0f}", f"{wall / unit:.2f}", f"{wall / unit / n:.3f}", f"{steps * n / wall:,.0f}",
             f"{np.mean(returns):.1f} +- {t_interval(returns) if n > 1 else float('nan'):.1f}",
             "-" if score is None else f"{sum(r >= score for r in returns)}/{n}"] for n, wall, returns in runs]
    print(f"{args.env}, members with {args.vec}; one seed alone {one[0]:.0f} s before, {one[1]:.0f} s after; "
          f"uptime {os.getloadavg()[0]:.2f} at the end; results in {out}")
    print_table(["members", "wall s", "x one seed", "per member (x one seed)", "agent steps/s",
                 "final return (t95)", "at score"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--minibatch", type=int, default=128)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--study", action="store_true", help="whole studies of N seeds (see above)")
    parser.add_argument("--env", default="classic/cartpole")
    parser.add_argument("--vec", default="vec=multiprocessing")
    parser.add_argument("--out", default="outputs/members")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    if args.study:
        study(args)
        return
    torch.set_num_threads(1)
    spec = {"_target_": "puffer.policies.networks.Default", "hidden_size": args.hidden}
    vecenv = puffer.vector.make(lambda: GymnasiumPufferEnv(env=gym.make("CartPole-v1")), num_envs=2)
    config = TrainConfig(num_steps=8)
    solo = PPO(config, vecenv, build_policy(spec, OBS, ACTIONS), device="cpu", progress=None)
    solo_batch = minibatch(args.minibatch)
    one_solo = timed(lambda: solo._minibatch_step(solo_batch), args.seconds)
    rows = []
    for n in args.members:
        stack = Stack([build_policy(spec, OBS, ACTIONS) for _ in range(n)])
        full = lambda value, n=n: torch.full((n,), float(value))  # noqa: E731
        step = MemberStep(solo, stack, MemberAdam(stack.flat, full(config.learning_rate), full(config.adam_eps)),
                          full(config.max_grad_norm))
        coefficients = Coefficients(full(config.clip_coef), full(config.vf_clip_coef), full(config.ent_coef),
                                    full(config.vf_coef))
        batch = minibatch(args.minibatch, (n,))
        batched = timed(lambda step=step, batch=batch, c=coefficients: step(batch, c), args.seconds)
        rows.append([n, batched * 1e3, n * one_solo * 1e3, n * one_solo / batched, batched / one_solo])
    vecenv.close()
    print(f"PPO minibatch step, Default {args.hidden} wide, minibatch {args.minibatch}, one thread; "
          f"one solo step {one_solo * 1e3:.3f} ms")
    print_table(["members", "batched ms/step", "N solo steps ms", "solo/batched", "batched cost (solo steps)"], rows)


if __name__ == "__main__":
    main()
