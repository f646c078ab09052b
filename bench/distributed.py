"""Data-parallel learning: 1 rank vs N ranks through the real torchrun, side by side.

    python bench/distributed.py [--ranks 2] [--steps 200000] [--envs ocean/cartpole ocean/squares]

For each env, the same total env steps with `torchrun --nproc-per-node=1` and `--nproc-per-node=N`
(gloo on CPU, NCCL when the config's device is CUDA): throughput over the whole training (the
last perf/sps logged, all ranks together), wall time including start-up, and the deterministic
evaluation return; the last column is N-rank SPS as a multiple of 1 rank's.

What to expect. Each rank is a whole learner: its own envs, its own rollout, the policy's
forward and backward passes, with one gradient all-reduce per minibatch. On a 2-core machine two
ranks share the cores one rank had (torchrun sets OMP_NUM_THREADS=1 per rank), so the point here
is correctness and overhead: about 1x is the best case, and the all-reduce of a small MLP's
gradients over gloo costs a few percent. On a node with N GPUs and enough cores for N sets of envs,
each rank brings its own GPU and cores: expect close to N x the steps/second while learning is
compute-bound on the GPU (large policies, pixel envs), and less where the envs are the bottleneck.
To measure it on a lent GPU machine: `python bench/distributed.py --ranks 1 2 4 device=cuda`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import print_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def train(ranks: int, env: str, steps: int, run_dir: Path, extra: list[str]) -> dict:
    args = [shutil.which("torchrun") or "torchrun", "--standalone", f"--nproc-per-node={ranks}", "-m", "puffer",
            f"env={env}", f"train.total_timesteps={steps}", f"hydra.run.dir={run_dir}", "eval.episodes=10", *extra]
    started = time.perf_counter()
    subprocess.run(args, cwd=ROOT, check=True, capture_output=True, text=True,
                   env={**os.environ, "WANDB_MODE": "disabled"})
    wall = time.perf_counter() - started
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    sps = [r["perf/sps"] for r in records if "perf/sps" in r][-1]
    evaluation = [r["eval/return_mean"] for r in records if "eval/return_mean" in r]
    return {"sps": sps, "wall": wall, "eval": evaluation[-1] if evaluation else float("nan")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--envs", nargs="+", default=["ocean/cartpole", "ocean/squares"])
    args, extra = parser.parse_known_args()
    print(f"load: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; {args.steps:,} env steps per run")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for env in args.envs:
            results = {n: train(n, env, args.steps, Path(tmp) / f"{env.replace('/', '_')}_{n}", extra)
                       for n in args.ranks}
            base = results[args.ranks[0]]["sps"]
            for n, r in results.items():
                rows.append([env, n, r["sps"], r["wall"], r["eval"], r["sps"] / base])
    print_table(["env", "ranks", "SPS (all ranks)", "wall s", "eval return", f"x {args.ranks[0]} rank"], rows)


if __name__ == "__main__":
    main()
