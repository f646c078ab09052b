"""Time to score: the wall-clock time a run takes until its agent is good, puffer beside
Stable-Baselines3 with rl-baselines3-zoo's settings, trained side by side on this machine.

    python bench/time_to_score.py [--envs classic/cartpole classic/acrobot ...] [--seeds 0 1 2]
                                  [--steps N] [--checkpoints 20] [--reference sb3|none]
                                  [--jobs 2] [--out DIR] [--algorithm ppo|pqn|dqn|sac]
                                  [puffer overrides ...]

puffer trains with its shipped configs (the overrides, e.g. `preset=zoo` for the zoo's settings
where a config departs from them, apply to puffer's runs only). Each run trains to the env's
budget (the zoo's, or --steps) and saves its policy every budget /
--checkpoints steps with the training wall time it had then (puffer: its checkpoints'
`train_seconds`; SB3: a callback that saves the model, its VecNormalize statistics and the time,
the saving itself off the clock). Afterwards, off the clock, every saved policy is evaluated with
puffer's protocol (10 episodes, deterministic, on seeds apart from training's). A run's time to
score is the training wall time of the first saved policy whose mean return reaches the env's
threshold while the next one (if any) stays there; a run that never does is censored at its
budget's wall time and shown with `>`. Steps to score likewise.

The thresholds are gymnasium's registered `reward_threshold` where it has one (CartPole-v1 475,
Acrobot-v1 -100, MountainCar-v0 -110, MountainCarContinuous-v0 90, LunarLander-v3 200) and,
where it has none or asks for what the zoo's PPO does not reach at its budget, the figure of
puffer issue 32: Pendulum-v1
-200, HalfCheetah-v5 5,000, Hopper-v5 2,000. The Ocean sanity envs (`--envs ocean/memory ...`,
or `--envs ocean` for all of them) use their solved scores (puffer.envs.ocean.SOLVED, with the
stochastic policy where that is what solved means) and their config's budget; they have no
SB3 reference.

`--algorithm pqn` (or `dqn`) trains puffer with train=pqn (or train=dqn) and SB3's DQN with the
zoo's dqn.yml settings beside it, at the zoo's DQN budget (CartPole-v1 50k, Acrobot-v1 and
LunarLander-v3 100k). `--algorithm sac` trains train=sac beside SB3's SAC with the zoo's sac.yml
settings (Pendulum-v1 20k, MountainCarContinuous-v0 50k, where the zoo explores with gSDE).

puffer and SB3 runs of one seed go side by side with --jobs 2 (the default), so both see the
same load; both get one torch thread (the thread policy's pick for these MLPs). Needs
`pip install stable-baselines3` for the reference. Each run's result is kept in --out (default
outputs/time_to_score), keyed by puffer's composed settings: a second call only runs what is
missing.

Prints per env: the threshold, each side's median time to score over seeds with the runs'
[min, max] (censored runs count at their budget; `n/N` runs reached the score), median steps to
score, the final return at the budget (mean, Student's t 95% interval over seeds), and the ratio
of the median times SB3 / puffer.
"""

from __future__ import annotations

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
from common import print_table  # noqa: E402
from learn_suite import (  # noqa: E402
    DQN_SUITE,
    SAC_SUITE,
    SUITE,
    sb3_dqn_setup,
    sb3_evaluate,
    sb3_sac_setup,
    sb3_setup,
    suite_parser,
    suite_run,
)

from puffer.envs.ocean import SOLVED  # noqa: E402
from puffer.report.stats import t_interval  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EVAL_EPISODES = 10
THRESHOLDS = {"CartPole-v1": 475.0, "Acrobot-v1": -100.0, "MountainCar-v0": -110.0, "Pendulum-v1": -200.0,
              "LunarLander-v3": 200.0, "LunarLander-v3(continuous=True)": 200.0, "HalfCheetah-v5": 5000.0,
              "Hopper-v5": 2000.0, "MountainCarContinuous-v0": 90.0}


def score_of(config: str) -> tuple[str, float, bool]:
    """(the env's name in the table, its threshold, whether the deterministic policy is scored)."""
    if config in SUITE:
        name = SUITE[config][0]
        return name, THRESHOLDS[name], True
    threshold, policy = SOLVED[config.removeprefix("ocean/")]
    return config, threshold, policy == "deterministic"


def time_to_score(points: list[dict], threshold: float) -> tuple[float | None, int | None]:
    """(seconds, steps) of the first point whose return reaches `threshold` with the next point
    (if any) there too; (None, None) when no point does: the run is censored."""
    for i, point in enumerate(points):
        following = points[i + 1 : i + 2]
        if point["return"] >= threshold and all(p["return"] >= threshold for p in following):
            return point["seconds"], point["step"]
    return None, None


# -- puffer ------------------------------------------------------------------------------------
def puffer_run(config: str, seed: int, steps: int, checkpoints: int, run_dir: Path, overrides) -> None:
    """Train with a checkpoint every `steps / checkpoints` steps (whole epochs), all kept."""
    epoch = puffer_epoch_steps(config, overrides)
    interval = max(1, round(steps / checkpoints / epoch))
    args = [sys.executable, "-m", "puffer", f"env={config}", f"seed={seed}", f"train.total_timesteps={steps}",
            f"runtime.checkpoint_interval={interval}", "runtime.keep_checkpoints=0", "runtime.checkpoint_minutes=0",
            "eval.episodes=0", f"hydra.run.dir={run_dir}", *overrides]
    subprocess.run(args, cwd=ROOT, check=True, capture_output=True, text=True)


def composed(config: str, overrides):
    from hydra import compose, initialize_config_dir

    from puffer.config import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=[f"env={config}", *overrides])


def puffer_epoch_steps(config: str, overrides) -> int:
    """Steps per epoch: rows (an env's agents, or a native env's rows, times vec.num_envs) x
    train.num_steps."""
    from puffer.build import make_env_creator

    cfg = composed(config, overrides)
    env = make_env_creator(cfg)()
    rows = env.num_agents
    env.close()
    return cfg.vec.num_envs * rows * cfg.train.num_steps


def budget(config: str, overrides) -> int:
    return int(composed(config, overrides).train.total_timesteps)


def puffer_tag(config: str, overrides) -> str:
    """What makes a puffer run another: its composed env, vec, policy and train settings (the
    shipped config as it is now, with the overrides)."""
    from omegaconf import OmegaConf

    cfg = composed(config, overrides)
    settings = OmegaConf.to_yaml({key: cfg[key] for key in ("env", "vec", "policy", "train")}, resolve=True)
    return hashlib.sha1(settings.encode()).hexdigest()[:8]


def puffer_evaluate(run_dir: Path, seed: int, deterministic: bool = True) -> list[dict]:
    """Every checkpoint of a run: its step, training seconds and evaluation return."""
    from omegaconf import OmegaConf

    import puffer
    from puffer.build import make_env_creator
    from puffer.evaluation import evaluate
    from puffer.files import checkpoint

    points = []
    for path in sorted((run_dir / "checkpoints").glob("epoch_*.pt")):
        state = checkpoint.read(path, envs=False)
        agent = puffer.load(path)
        creator = make_env_creator(OmegaConf.create(agent.config), evaluation=True)
        result = evaluate(agent.policy, creator, EVAL_EPISODES, seed, deterministic=deterministic)
        points.append({"step": state["global_step"], "seconds": state["train_seconds"],
                       "return": result["return_mean"]})
    return points


# -- SB3 + the zoo -----------------------------------------------------------------------------
# puffer's algorithm -> the kind of reference run beside it, and that kind's SB3 algorithm, setup
# and settings (None: the PPO suite's, SUITE)
REFERENCES = {"ppo": "sb3", "pqn": "sb3-dqn", "dqn": "sb3-dqn", "sac": "sb3-sac"}
SB3_KINDS = {"sb3": ("PPO", sb3_setup, None), "sb3-dqn": ("DQN", sb3_dqn_setup, DQN_SUITE),
             "sb3-sac": ("SAC", sb3_sac_setup, SAC_SUITE)}


def sb3_run(kind: str, config: str, seed: int, steps: int, checkpoints: int, run_dir: Path) -> None:
    """Train SB3's PPO, DQN or SAC (`kind`) with the zoo's settings, saving every `steps / checkpoints`
    steps with the training seconds so far (the saving itself not counted)."""
    from stable_baselines3.common.callbacks import BaseCallback

    model, venv, normalize = SB3_KINDS[kind][1](config, seed)
    every = max(1, steps // checkpoints)
    run_dir.mkdir(parents=True, exist_ok=True)

    class Saver(BaseCallback):
        def _on_training_start(self) -> None:
            self.started, self.off_clock, self.next_save, self.saved = time.perf_counter(), 0.0, every, []

        def _on_step(self) -> bool:
            if self.num_timesteps >= self.next_save:
                paused = time.perf_counter()
                seconds = paused - self.started - self.off_clock
                name = f"model_{self.num_timesteps:09d}"
                self.model.save(run_dir / name)
                if normalize:
                    venv.save(str(run_dir / f"{name}_vecnormalize.pkl"))
                self.saved.append({"name": name, "step": self.num_timesteps, "seconds": seconds})
                self.next_save += every
                self.off_clock += time.perf_counter() - paused
            return True

    saver = Saver()
    model.learn(steps, callback=saver)
    (run_dir / "saved.json").write_text(json.dumps(saver.saved))


def sb3_points(kind: str, config: str, run_dir: Path, seed: int) -> list[dict]:
    """Every saved SB3 model of a run: its step, training seconds and evaluation return."""
    import stable_baselines3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    _, env_id, kwargs, _, _ = SUITE[config]
    points = []
    for saved in json.loads((run_dir / "saved.json").read_text()):
        model = getattr(stable_baselines3, SB3_KINDS[kind][0]).load(run_dir / saved["name"], device="cpu")
        stats = run_dir / f"{saved['name']}_vecnormalize.pkl"
        norm = VecNormalize.load(str(stats), make_vec_env(env_id, n_envs=1, env_kwargs=kwargs)) if stats.exists() else None
        points.append({"step": saved["step"], "seconds": saved["seconds"],
                       "return": sb3_evaluate(model, norm, config, seed)})
    return points

# -- running -----------------------------------------------------------------------------------
def job(kind: str, config: str, seed: int, steps: int, checkpoints: int, run_dir: Path, overrides) -> None:
    """Train then evaluate one run in this process (called as `--job ...` in a subprocess of
    its own, one torch thread); writes points.json and the training's wall time."""
    started = time.perf_counter()
    if kind == "puffer":
        puffer_run(config, seed, steps, checkpoints, run_dir, overrides)
    else:
        sb3_run(kind, config, seed, steps, checkpoints, run_dir)
    wall = time.perf_counter() - started
    points = (puffer_evaluate(run_dir, seed, deterministic=score_of(config)[2]) if kind == "puffer"
              else sb3_points(kind, config, run_dir, seed))
    (run_dir / "points.json").write_text(json.dumps({"wall": wall, "points": points}))


def result(out: Path, kind: str, config: str, seed: int, steps: int, checkpoints: int, overrides,
           tag: str = "") -> dict:
    run_dir = out / f"{kind}-{config.replace('/', '-')}-{seed}-{steps}-{checkpoints}{'-' + tag if tag else ''}"
    points = run_dir / "points.json"
    if not points.exists():
        args = [sys.executable, __file__, "--job", kind, config, str(seed), str(steps), str(checkpoints),
                str(run_dir), *overrides]
        subprocess.run(args, check=True, capture_output=True, text=True,
                       env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})
    record = json.loads(points.read_text())
    logging.info("%-6s %s seed %d: %d points, last return %.1f, trained in %.0f s", kind, config, seed,
                 len(record["points"]), record["points"][-1]["return"], record["wall"])
    return record


def summary(records: list[dict], threshold: float) -> dict:
    """Median time and steps to score over runs (censored runs at their budget), [min, max],
    how many reached it, and the final returns."""
    times, steps, reached = [], [], 0
    for record in records:
        seconds, step = time_to_score(record["points"], threshold)
        reached += seconds is not None
        times.append(seconds if seconds is not None else record["points"][-1]["seconds"])
        steps.append(step if step is not None else record["points"][-1]["step"])
    finals = [record["points"][-1]["return"] for record in records]
    return {"time": float(np.median(times)), "low": min(times), "high": max(times), "reached": reached,
            "steps": float(np.median(steps)), "final": float(np.mean(finals)), "final_ci": t_interval(finals),
            "censored": reached < len(records)}


def cell(s: dict, runs: int) -> str:
    prefix = ">" if s["reached"] * 2 <= runs else ""  # the median is censored
    return f"{prefix}{_s(s['time'])} s [{_s(s['low'])}, {_s(s['high'])}] {s['reached']}/{runs}"


def _s(seconds: float) -> str:
    return f"{seconds:.1f}" if seconds < 10 else f"{seconds:.0f}"


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--job":
        kind, config, seed, steps, checkpoints, run_dir, *overrides = sys.argv[2:]
        job(kind, config, int(seed), int(steps), int(checkpoints), Path(run_dir), overrides)
        return
    parser = suite_parser(__doc__, ["classic/cartpole"], jobs=2, out="outputs/time_to_score")
    parser.add_argument("--checkpoints", type=int, default=20, help="saved policies per run")
    parser.add_argument("--algorithm", choices=list(REFERENCES), default="ppo",
                        help="puffer's algorithm; beside pqn and dqn SB3's DQN, beside sac SB3's SAC (the zoo's settings)")
    args = parser.parse_args()
    if "ocean" in args.envs:
        args.envs = [e for e in args.envs if e != "ocean"] + [f"ocean/{name}" for name in SOLVED]
    out, kinds, steps_of = suite_run(args)
    reference_kind = REFERENCES[args.algorithm]
    sb3_name, _, settings = SB3_KINDS[reference_kind]
    if settings is not None:  # an off-policy algorithm: its own reference settings and budgets
        args.overrides = [f"train={args.algorithm}", *args.overrides]
        kinds = [reference_kind if kind == "sb3" else kind for kind in kinds]
        steps_of = {config: args.steps or (settings[config][0] if config in settings else None)
                    for config in args.envs}
    steps_of = {config: steps or budget(config, args.overrides) for config, steps in steps_of.items()}
    tags = {config: puffer_tag(config, args.overrides) for config in args.envs}  # composed here, once
    references = settings if settings is not None else SUITE  # the ocean envs have no SB3 reference
    runs = [(kind, config, seed) for config in args.envs for seed in args.seeds for kind in kinds
            if kind == "puffer" or config in references]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {run: pool.submit(result, out, *run, steps_of[run[1]], args.checkpoints, args.overrides,
                                    tags[run[1]] if run[0] == "puffer" else "")
                   for run in runs}
        records = {run: future.result() for run, future in futures.items()}
    rows = []
    for config in args.envs:
        name, threshold, _ = score_of(config)
        ours = summary([records["puffer", config, seed] for seed in args.seeds], threshold)
        reference = next((kind for kind in kinds if kind != "puffer"), None)
        theirs = (summary([records[reference, config, seed] for seed in args.seeds], threshold)
                  if (reference, config, args.seeds[0]) in records else None)
        n = len(args.seeds)
        rows.append([name, f"{threshold:g}", f"{steps_of[config] / 1000:g}k", n, cell(ours, n),
                     f"{ours['steps'] / 1000:.0f}k", f"{ours['final']:.1f} +- {ours['final_ci']:.1f}",
                     cell(theirs, n) if theirs else "-", f"{theirs['steps'] / 1000:.0f}k" if theirs else "-",
                     f"{theirs['final']:.1f} +- {theirs['final_ci']:.1f}" if theirs else "-",
                     f"{theirs['time'] / ours['time']:.1f}" if theirs else "-"])
    print_table(["env", "score", "budget", "seeds", "puffer time to score (median [min, max] reached)",
                 "steps", "final (t 95%)", f"SB3 {sb3_name} + zoo time to score",
                 "steps", "final (t 95%)",
                 "SB3 / puffer"], rows)
    print(f"runs in {out}")


if __name__ == "__main__":
    main()
