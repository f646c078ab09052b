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
