"""Learning across suites: puffer's shipped configs against the published PPO and against
Stable-Baselines3 with rl-baselines3-zoo's settings, trained side by side on this machine.

    python bench/learn_suite.py [--envs acrobot pendulum ...] [--seeds 0 1 2] [--steps N]
                                [--reference sb3|none] [--jobs N] [--out DIR] [puffer overrides ...]

Each (env, seed) is one `python -m puffer env=<config> seed=<seed>` run evaluated with the
standard protocol (deterministic policy, 10 episodes on seeds apart from training's) and, with
`--reference sb3` (needs `pip install stable-baselines3`), one SB3 PPO run with the zoo's
hyper-parameters for that env (VecNormalize where the zoo normalizes, frozen for evaluation), the
same steps and the same evaluation protocol. puffer and SB3 runs alternate (with `--jobs 2`, a
puffer run and an SB3 run go side by side), so a busy machine slows both alike. Both get one
torch thread (the thread policy's pick for these MLPs). Each run's result is kept in --out
(default outputs/learn_suite), so a second call with more seeds or the reference only runs what
is missing; a change of puffer's overrides is a different run.

Prints per env: the mean evaluation return over seeds with its Student's t 95% interval for
puffer and SB3, the zoo's published figure (benchmark.md: mean +- std over its evaluation
episodes, one agent; puffer.report.references), vs zoo (ok: puffer's mean at or above the zoo's
mean minus its std), against SB3 here (better / worse where the t intervals do not overlap,
else same), and the wall time of each with the ratio SB3 / puffer. The steps default to
the zoo's budget for each env; --steps overrides them all.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import compare, print_table  # noqa: E402

from puffer.evaluation import EVAL_SEED_OFFSET  # noqa: E402
from puffer.report.references import lookup  # noqa: E402
from puffer.report.stats import t_interval  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EVAL_EPISODES = 10

# puffer config -> (env name in puffer.report.references, gymnasium id, kwargs, the zoo's budget, the
# zoo's PPO settings in SB3's names (hyperparams/ppo.yml); "normalize" wraps VecNormalize).
# The zoo's MuJoCo policy_kwargs (activation by name; turned into the torch class in sb3_job)
MUJOCO_POLICY = dict(log_std_init=-2, ortho_init=False, activation_fn="relu",
                     net_arch=dict(pi=[256, 256], vf=[256, 256]))
SUITE = {
    "classic/cartpole": ("CartPole-v1", "CartPole-v1", {}, 100_000, dict(
        n_envs=8, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20, ent_coef=0.0,
        learning_rate="lin_0.001", clip_range="lin_0.2")),
    "classic/acrobot": ("Acrobot-v1", "Acrobot-v1", {}, 1_000_000, dict(
        normalize=True, n_envs=16, n_steps=256, gae_lambda=0.94, gamma=0.99, n_epochs=4, ent_coef=0.0)),
    "classic/mountaincar": ("MountainCar-v0", "MountainCar-v0", {}, 1_000_000, dict(
        normalize=True, n_envs=16, n_steps=16, gae_lambda=0.98, gamma=0.99, n_epochs=4, ent_coef=0.0)),
    "classic/pendulum": ("Pendulum-v1", "Pendulum-v1", {}, 100_000, dict(
        n_envs=4, n_steps=1024, gae_lambda=0.95, gamma=0.9, n_epochs=10, ent_coef=0.0,
        learning_rate=1e-3, clip_range=0.2, use_sde=True, sde_sample_freq=4)),
    "classic/mountaincar_continuous": ("MountainCarContinuous-v0", "MountainCarContinuous-v0", {}, 20_000, dict(
        normalize=True, n_envs=1, n_steps=8, batch_size=256, gae_lambda=0.9, gamma=0.9999, n_epochs=10,
        ent_coef=0.00429, learning_rate=7.77e-05, clip_range=0.1, max_grad_norm=5, vf_coef=0.19,
        use_sde=True, policy_kwargs=dict(log_std_init=-3.29, ortho_init=False))),
    "box2d/lunarlander": ("LunarLander-v3", "LunarLander-v3", {}, 1_000_000, dict(
        n_envs=16, n_steps=1024, batch_size=64, gae_lambda=0.98, gamma=0.999, n_epochs=4, ent_coef=0.01)),
    "box2d/lunarlander_continuous": (
        "LunarLander-v3(continuous=True)", "LunarLander-v3", {"continuous": True}, 1_000_000, dict(
            n_envs=16, n_steps=1024, batch_size=64, gae_lambda=0.98, gamma=0.999, n_epochs=4, ent_coef=0.01)),
    "mujoco/halfcheetah": ("HalfCheetah-v5", "HalfCheetah-v5", {}, 1_000_000, dict(
        normalize=True, n_envs=1, batch_size=64, n_steps=512, gamma=0.98, learning_rate=2.0633e-05,
        ent_coef=0.000401762, clip_range=0.1, n_epochs=20, gae_lambda=0.92, max_grad_norm=0.8,
        vf_coef=0.58096, policy_kwargs=MUJOCO_POLICY)),
    "mujoco/hopper": ("Hopper-v5", "Hopper-v5", {}, 1_000_000, dict(
        normalize=True, n_envs=1, batch_size=32, n_steps=512, gamma=0.999, learning_rate=9.80828e-05,
        ent_coef=0.00229519, clip_range=0.2, n_epochs=5, gae_lambda=0.99, max_grad_norm=0.7,
        vf_coef=0.835671, policy_kwargs=MUJOCO_POLICY)),
}
# rl-baselines3-zoo's DQN settings (hyperparams/dqn.yml, one env): the reference of puffer's
# Q-learning (train=pqn), config -> (the zoo's budget, its settings in SB3's names).
ZOO_DQN_SMALL = dict(learning_rate=6.3e-4, batch_size=128, buffer_size=50_000, learning_starts=0, gamma=0.99,
                     target_update_interval=250, train_freq=4, gradient_steps=-1, exploration_fraction=0.12,
                     exploration_final_eps=0.1, policy_kwargs=dict(net_arch=[256, 256]))
DQN_SUITE = {
    "classic/cartpole": (50_000, dict(
        learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000, gamma=0.99,
        target_update_interval=10, train_freq=256, gradient_steps=128, exploration_fraction=0.16,
        exploration_final_eps=0.04, policy_kwargs=dict(net_arch=[256, 256]))),
    "classic/acrobot": (100_000, ZOO_DQN_SMALL),
    "box2d/lunarlander": (100_000, ZOO_DQN_SMALL),
}
# rl-baselines3-zoo's SAC settings (hyperparams/sac.yml, one env; SB3's SAC defaults otherwise):
# the reference of puffer's train=sac, config -> (the zoo's budget, its settings in SB3's names).
SAC_SUITE = {
    "classic/pendulum": (20_000, dict(learning_rate=1e-3)),
    "classic/mountaincar_continuous": (50_000, dict(
        learning_rate=3e-4, buffer_size=50_000, batch_size=512, ent_coef=0.1, train_freq=32, gradient_steps=32,
        gamma=0.9999, tau=0.01, learning_starts=0, use_sde=True,
        policy_kwargs=dict(log_std_init=-3.67, net_arch=[64, 64]))),
}
# The zoo's published PPO figures (benchmark.md): mean and std over its evaluation episodes.
ZOO_STD = {"CartPole-v1": 0.0, "Acrobot-v1": 18.201, "MountainCar-v0": 19.473, "Pendulum-v1": 104.159,
           "MountainCarContinuous-v0": 2.572,
           "LunarLander-v3": 31.823, "LunarLander-v3(continuous=True)": 32.072,
           "HalfCheetah-v5": 663.53, "Hopper-v5": 10.026}


def run_puffer(config: str, seed: int, steps: int, out: Path, overrides=()) -> tuple[float, float]:
    """(mean evaluation return, wall seconds) of one `python -m puffer` run."""
    run_dir = out / f"puffer-{config.replace('/', '-')}-{seed}"
    args = [sys.executable, "-m", "puffer", f"env={config}", f"seed={seed}",
            f"train.total_timesteps={steps}", f"eval.episodes={EVAL_EPISODES}",
            f"hydra.run.dir={run_dir}", *overrides]
    started = time.perf_counter()
    subprocess.run(args, cwd=ROOT, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - started
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return next(r["eval/return_mean"] for r in reversed(records) if "eval/return_mean" in r), wall


def run_sb3(config: str, seed: int, steps: int) -> tuple[float, float]:
    """(mean evaluation return, wall seconds) of one SB3 run, in its own process."""
    args = [sys.executable, __file__, "--sb3-job", config, str(seed), str(steps)]
    started = time.perf_counter()
    result = subprocess.run(args, check=True, capture_output=True, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    wall = time.perf_counter() - started
    return float(result.stdout.strip().splitlines()[-1]), wall


def result(out: Path, kind: str, config: str, seed: int, steps: int, overrides=()) -> dict:
    """One run's {return, wall}: read from `out` when it holds it, else made now."""
    tag = f"-{hashlib.sha1(' '.join(overrides).encode()).hexdigest()[:8]}" if overrides else ""
    path = out / f"{kind}-{config.replace('/', '-')}-{seed}-{steps}{tag}.json"
    if path.exists():
        return json.loads(path.read_text())
    if kind == "puffer":
        value, wall = run_puffer(config, seed, steps, out / f"puffer{tag}", overrides)
    else:
        value, wall = run_sb3(config, seed, steps)
    record = {"return": value, "wall": wall, "overrides": list(overrides)}
    path.write_text(json.dumps(record))
    logging.info("%-6s %s seed %d: %.1f in %.0f s", kind, config, seed, value, wall)
    return record


def suite_parser(doc: str, envs: list[str], jobs: int, out: str) -> argparse.ArgumentParser:
    """The arguments of the scripts that train puffer beside SB3 on SUITE's envs."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", nargs="*", default=envs, help=f"from {list(SUITE)}")
    parser.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=None, help="override every env's budget (the zoo's)")
    parser.add_argument("--reference", choices=["sb3", "none"], default="sb3")
    parser.add_argument("--jobs", type=int, default=jobs, help="runs at once (2: puffer beside SB3)")
    parser.add_argument("--out", default=out, help="where the runs and results go")
    parser.add_argument("overrides", nargs="*", help="extra overrides for puffer's runs (e.g. train.optimizer=muon)")
    return parser


def suite_run(args) -> tuple[Path, list[str], dict[str, int]]:
    """(the output folder, made; the kinds of run; each env's steps, None for an env outside
    SUITE without --steps) from `suite_parser`'s args."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    kinds = ["puffer", "sb3"] if args.reference == "sb3" else ["puffer"]
    return out, kinds, {config: args.steps or (SUITE[config][3] if config in SUITE else None)
                        for config in args.envs}


def sb3_setup(config: str, seed: int):
    """(SB3 PPO with the zoo's settings for `config`, untrained; its vector env; whether the zoo
    normalizes it with VecNormalize), one torch thread."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    torch.set_num_threads(1)
    _, env_id, kwargs, _, zoo = SUITE[config]
    zoo = dict(zoo)
    normalize, n_envs = zoo.pop("normalize", False), zoo.pop("n_envs")
    for key in ("learning_rate", "clip_range"):
        if isinstance(zoo.get(key), str):  # lin_X: linear decay to 0, as the zoo parses it
            start = float(zoo[key].removeprefix("lin_"))
            zoo[key] = lambda progress, start=start: progress * start
    if zoo.get("policy_kwargs", {}).get("activation_fn") == "relu":  # by name in the zoo's file
        zoo["policy_kwargs"] = {**zoo["policy_kwargs"], "activation_fn": torch.nn.ReLU}
    venv = make_vec_env(env_id, n_envs=n_envs, seed=seed, env_kwargs=kwargs)
    if normalize:
        venv = VecNormalize(venv, gamma=zoo.get("gamma", 0.99))
    return PPO("MlpPolicy", venv, seed=seed, device="cpu", **zoo), venv, normalize


def sb3_dqn_setup(config: str, seed: int):
    """(SB3 DQN with the zoo's settings for `config`, untrained; its one env; False: the zoo
    normalizes none of them), one torch thread."""
    import torch
    from stable_baselines3 import DQN
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)
    _, env_id, kwargs, _, _ = SUITE[config]
    venv = make_vec_env(env_id, n_envs=1, seed=seed, env_kwargs=kwargs)
    return DQN("MlpPolicy", venv, seed=seed, device="cpu", **DQN_SUITE[config][1]), venv, False


def sb3_sac_setup(config: str, seed: int):
    """(SB3 SAC with the zoo's settings for `config`, untrained; its one env; False: the zoo
    normalizes neither), one torch thread."""
    import torch
    from stable_baselines3 import SAC
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)
    _, env_id, kwargs, _, _ = SUITE[config]
    venv = make_vec_env(env_id, n_envs=1, seed=seed, env_kwargs=kwargs)
    return SAC("MlpPolicy", venv, seed=seed, device="cpu", **SAC_SUITE[config][1]), venv, False


def sb3_job(config: str, seed: int, steps: int) -> None:
    """Train SB3 PPO with the zoo's settings, evaluate like puffer does, print the mean return."""
    model, venv, normalize = sb3_setup(config, seed)
    model.learn(steps)
    print(sb3_evaluate(model, venv if normalize else None, config, seed))


def sb3_evaluate(model, normalizer, config: str, seed: int) -> float:
    """The mean return of an SB3 `model` over EVAL_EPISODES episodes on puffer's evaluation
    seeds, deterministic; observations normalized by `normalizer` (a VecNormalize, its statistics
    frozen) where the zoo normalizes."""
    import gymnasium as gym

    _, env_id, kwargs, _, _ = SUITE[config]
    returns = []
    for episode in range(EVAL_EPISODES):
        env = gym.make(env_id, **kwargs)
        obs, _ = env.reset(seed=seed + EVAL_SEED_OFFSET + episode)
        total, done = 0.0, False
        while not done:
            action, _ = model.predict(normalizer.normalize_obs(obs) if normalizer is not None else obs,
                                      deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return float(np.mean(returns))

def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--sb3-job":
        sb3_job(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        return
    parser = suite_parser(__doc__, list(SUITE), jobs=1, out="outputs/learn_suite")
    args = parser.parse_args()
    out, kinds, steps_of = suite_run(args)
    runs = [(kind, config, seed) for config in args.envs for seed in args.seeds for kind in kinds]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {run: pool.submit(result, out, run[0], run[1], run[2], steps_of[run[1]],
                                    args.overrides if run[0] == "puffer" else ())
                   for run in runs}
        records = {run: future.result() for run, future in futures.items()}
    rows = []
    for config in args.envs:
        name, steps = SUITE[config][0], steps_of[config]
        ours = [records["puffer", config, seed]["return"] for seed in args.seeds]
        our_wall = sum(records["puffer", config, seed]["wall"] for seed in args.seeds)
        theirs = [records["sb3", config, seed]["return"] for seed in args.seeds] if "sb3" in kinds else []
        their_wall = sum(records["sb3", config, seed]["wall"] for seed in args.seeds) if theirs else 0.0
        reference = lookup(name)
        published = f"{reference.reference:.1f} +- {ZOO_STD[name]:.1f} ({reference.steps // 1000}k)"
        verdict = "ok" if np.mean(ours) >= reference.reference - ZOO_STD[name] else "BELOW"
        sb3 = f"{np.mean(theirs):.1f} +- {t_interval(theirs):.1f}" if theirs else "-"
        versus = compare(ours, theirs) if len(theirs) > 1 else "-"
        ratio = f"{their_wall / our_wall:.2f}" if theirs else "-"
        rows.append([name, f"{steps // 1000}k", len(ours), f"{np.mean(ours):.1f} +- {t_interval(ours):.1f}",
                     sb3, versus, published, verdict, f"{our_wall:.0f}", f"{their_wall:.0f}" if theirs else "-",
                     ratio])
    print_table(["env", "steps", "seeds", "puffer (t 95%)", "SB3 + zoo here (t 95%)", "vs SB3",
                 "zoo published", "vs zoo", "puffer wall s", "SB3 wall s", "SB3 / puffer"], rows)
    print(f"runs in {out}")


if __name__ == "__main__":
    main()
