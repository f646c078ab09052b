"""Every training command of the README's "Running" block, run as written (its shipped settings):
what each learns, and how long its whole budget takes on this machine.

    python bench/readme_commands.py [--minutes M] [--jobs N] [--only WORD ...] [--out DIR]

Each command runs with its own run directory and `runtime.max_seconds` = M minutes (default 3)
of training; a run that ends sooner trained its whole budget. Then it evaluates as usual (the
standard protocol: deterministic policy, held-out seeds). Printed per command: the steps trained
of its budget, training seconds, the whole budget's training time (measured, or projected from
the steps per second of the part trained, marked ~), the final evaluation return, the env's
score (eval.score, else its registered reward_threshold, as the run logged it), and the verdict:
`learns` (the evaluation at or above the score), `below score` (trained its budget, not at the
score), `stopped at N%` (the cap came first: judge by the projection), or the error.
Commands that need what this machine lacks (a Ray cluster, an extra) say so. `--only` keeps the
commands holding any of the words (e.g. --only ocean cartpole).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import print_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# Not a training run of its own: the composed config only.
SKIP = ("--cfg",)


def readme_commands(readme: Path) -> list[str]:
    """The `python -m puffer ...` lines of the README's "## Running" code block, comments cut."""
    text = readme.read_text()
    block = text.split("## Running", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = ["python -m puffer"]  # the set-up's main job
    for line in block.splitlines():
        command = line.split(" #", 1)[0].strip()
        if command.startswith("python -m puffer") and not any(flag in command for flag in SKIP):
            commands.append(command)
    return commands


def last(records: list[dict], key: str) -> float | None:
    values = [r[key] for r in records if key in r]
    return values[-1] if values else None


def run(command: str, out: Path, minutes: float) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, *shlex.split(command)[1:], f"hydra.run.dir={out}",
            f"runtime.max_seconds={minutes * 60:g}"]
    started = time.monotonic()
    try:
        result = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=minutes * 60 + 600)
        output, returncode = result.stdout + result.stderr, result.returncode
    except subprocess.TimeoutExpired as expired:  # its evaluation ran long: what it trained still counts
        output, returncode = f"{expired.stdout or ''}{expired.stderr or ''}", None
    wall = time.monotonic() - started
    (out / "stdout.txt").write_text(output if isinstance(output, str) else str(output))
    metrics = out / "metrics.jsonl"
    if returncode not in (0, None) or not metrics.exists():
        lines = output.strip().splitlines()
        return {"command": command, "error": lines[-1][:120] if lines else f"exit {returncode}", "wall_s": wall}
    records = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    config = yaml.safe_load((out / "config.yaml").read_text()) if (out / "config.yaml").exists() else {}
    budget = (config.get("train") or {}).get("total_timesteps")
    return {"command": command, "wall_s": wall, "steps": last(records, "global_step"), "budget": budget,
            "train_s": last(records, "perf/train_seconds"), "eval": last(records, "eval/return_mean"),
            "score": last(records, "perf/score")}


def row(result: dict) -> list:
    command = re.sub(r"^python -m puffer ?", "", result["command"]) or "(the main job)"
    if "error" in result:
        return [command, "-", "-", "-", "-", "-", result["error"]]
    steps, budget, seconds = result["steps"] or 0, result["budget"] or 0, result["train_s"] or 0.0
    whole = steps >= budget
    full = f"{seconds:,.0f} s" if whole else (f"~{seconds * budget / steps / 60:,.0f} min" if steps else "-")
    score, evaluation = result["score"], result["eval"]
    if evaluation is None:
        verdict = "no evaluation"
    elif not whole:
        verdict = f"stopped at {100 * steps / budget:.0f}%"
    elif score is None:
        verdict = "no score to judge"
    else:
        verdict = "learns" if evaluation >= score else "below score"
    return [command, f"{steps:,}/{budget:,}", f"{seconds:,.0f}", full,
            "-" if evaluation is None else f"{evaluation:,.1f}", "-" if score is None else f"{score:g}", verdict]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "readme_commands")
    args = parser.parse_args()
    commands = [c for c in readme_commands(ROOT / "README.md") if not args.only or any(w in c for w in args.only)]
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda ic: run(ic[1], args.out / f"{ic[0]:02d}", args.minutes), enumerate(commands)))
    print_table(["command", "steps", "train s", "whole budget", "eval return", "score", "verdict"],
                [row(r) for r in results])


if __name__ == "__main__":
    main()
