"""Shared fixtures: compose the real configs in conf/ with Hydra's compose API."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

import puffer.config  # noqa: F401  (registers the schemas)

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
# The tests' checkpoints are signed with a key of their own (puffer.files.trust), not the user's.
if "PUFFER_KEY_FILE" not in os.environ:
    import tempfile

    os.environ["PUFFER_KEY_FILE"] = os.path.join(tempfile.mkdtemp(prefix="puffer-test-key-"), "signing.key")


def wait_for_epochs(proc, run_dir: Path, epochs: int = 3, timeout: float = 120, output=None) -> None:
    """Until the run in `run_dir` (started as `proc`) has logged `epochs` epochs; fails with what
    it printed (`output()`, or its stdout) if it exits or times out first."""
    import time

    metrics = Path(run_dir) / "metrics.jsonl"
    deadline = time.monotonic() + timeout
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= epochs):
        if proc.poll() is not None or time.monotonic() >= deadline:
            raise AssertionError(output() if output is not None else proc.stdout.read() if proc.stdout else "")
        time.sleep(0.2)


def marked_processes(marker: str) -> list:
    """Live processes whose environment holds PUFFER_TEST_MARKER=marker (a test's subprocess
    and everything it started, Ray's and torchrun's processes included)."""
    import psutil

    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("PUFFER_TEST_MARKER") == marker:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found


def assert_no_marked_process_left(marker: str, within: float = 10.0) -> None:
    import time

    deadline = time.monotonic() + within
    while marked_processes(marker) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not [p.name() for p in marked_processes(marker)]


@pytest.fixture
def make_cfg():
    """make_cfg(*overrides) -> the composed run config, as `python -m puffer` would see it."""

    def _compose(*overrides: str):
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return compose(config_name="config", overrides=list(overrides))

    return _compose


@pytest.fixture
def cli(tmp_path):
    """cli(*overrides) runs `python -m puffer` in a subprocess with its outputs under tmp_path."""
    import subprocess

    def _run(*overrides: str, timeout: float = 300, check: bool = True):
        args = [sys.executable, "-m", "puffer", f"hydra.run.dir={tmp_path}/run",
                f"hydra.sweep.dir={tmp_path}/multirun", *overrides]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        result = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
        return result

    return _run
