"""Fingerprints of seeded runs: hashes of the final weights, to show that a refactor changed no
result. Run it before and after; every row must match.

    python bench/fingerprint.py [--out DIR]

Runs (all seeded, synchronous batches, CPU): classic/cartpole 8k steps; atari/breakout on Serial
(4 envs in half batches) and on Multiprocessing, 2k steps each; ocean/herd (dying agents) with an
LSTM, 8k steps. Prints the first 16 hex digits of a SHA-256 over the last checkpoint's weights and
the evaluation return where there is one. Thread counts change float summation order, so compare
fingerprints taken on the same machine and thread plan (the log's "torch threads" line).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import print_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from puffer.files import checkpoint  # noqa: E402
from puffer.loggers.base import read_metrics  # noqa: E402

BREAKOUT = ["env=atari/breakout", "vec.num_envs=4", "train.total_timesteps=2048", "train.num_steps=64",
            "eval.episodes=0"]
RUNS = {
    "cartpole": ["train.total_timesteps=8192", "eval.episodes=2"],
    "breakout serial": BREAKOUT,
    "herd lstm": ["env=ocean/herd", "policy.rnn=lstm", "train.total_timesteps=8192", "eval.episodes=2"],
    "breakout multiprocessing": [*BREAKOUT, "vec=multiprocessing", "vec.envs_per_batch=4"],
}


def fingerprint(run_dir: Path) -> str:
    last = sorted((run_dir / "checkpoints").glob("*.pt"))[-1]
    weights = checkpoint.read(last)["policy"]
    return hashlib.sha256(b"".join(v.cpu().numpy().tobytes() for v in weights.values())).hexdigest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None, help="keep the run directories here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        rows = []
        for name, overrides in RUNS.items():
            run_dir = out / name.replace(" ", "_")
            subprocess.run([sys.executable, "-m", "puffer", *overrides, f"hydra.run.dir={run_dir}"], cwd=ROOT,
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           env={**os.environ, "WANDB_MODE": "disabled"})
            returns = [r["eval/return_mean"] for r in read_metrics(run_dir / "metrics.jsonl") if "eval/return_mean" in r]
            rows.append([name, fingerprint(run_dir), returns[-1] if returns else "-"])
        print_table(["run", "weights sha256[:16]", "eval return"], rows)


if __name__ == "__main__":
    main()
