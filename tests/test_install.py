"""A wheel built from this tree runs on its own: configs and sweeps inside, the `puffer` command."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def venv_with_these_dependencies(path: Path) -> Path:
    """A new venv whose dependencies are the ones this interpreter imports (the machine's, or
    the user's own venv's: `system_site_packages` would give the base interpreter's instead),
    its site-packages directories listed in a .pth file; puffer itself is left to install."""
    venv.create(path, with_pip=True)
    (site_packages,) = (path / "lib").glob("python*/site-packages")
    outer = [entry for entry in sys.path if entry.endswith(("site-packages", "dist-packages"))
             and Path(entry).is_dir()]
    (site_packages / "outer_dependencies.pth").write_text("\n".join(outer) + "\n")
    return path


def build_wheel(wheels: Path) -> Path:
    build_existed = (ROOT / "build").exists()
    try:
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                        "-w", str(wheels), str(ROOT)], check=True, capture_output=True, text=True)
    finally:  # setuptools builds in the tree; leave it as it was
        if not build_existed:
            shutil.rmtree(ROOT / "build", ignore_errors=True)
    (wheel,) = wheels.glob("puffer-*.whl")
    return wheel


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory):
    """A venv of its own with puffer's wheel and its core dependencies only (from the package
    registry, as a user's `pip install .` gets them): no dev extras, nothing of this interpreter's."""
    root = tmp_path_factory.mktemp("bare")
    wheel = build_wheel(root / "wheels")
    venv.create(root / "venv", with_pip=True)
    python = root / "venv" / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(wheel)], check=True, capture_output=True,
                   text=True, timeout=900)
    return python, wheel


def run_in(python: Path, args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-m", "puffer", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "WANDB_MODE": "offline"})


@pytest.mark.slow
@pytest.mark.parametrize(("args", "extra"), [
    (["env=atari/breakout", "vec=multiprocessing"], "atari"),
    (["env=box2d/lunarlander"], "box2d"),
    (["env=mujoco/halfcheetah"], "mujoco"),
    (["env=minigrid/doorkey"], "minigrid"),
    (["env=pettingzoo/kaz"], "pettingzoo"),
    (["logger=tensorboard"], "tensorboard"),
    (["vec=ray", "vec.ray_address=auto"], "ray"),
    (["-m", "+sweep=ppo_optuna"], "sweeps"),
    (["train.total_timesteps=512", "eval.video=true"], "video"),
])
def test_a_core_install_names_the_extra_a_readme_command_needs_at_once(bare_venv, tmp_path, args, extra):
    python, _ = bare_venv
    result = run_in(python, [*args, "hydra.run.dir=run", "hydra.sweep.dir=multirun"], tmp_path)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert f"pip install 'puffer[{extra}]'" in last, result.stderr[-2000:]
    assert "Traceback" not in result.stderr and not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.slow
def test_the_video_extra_alone_records_a_cartpole_video(bare_venv, tmp_path):
    python, wheel = bare_venv
    subprocess.run([str(python), "-m", "pip", "install", "-q", f"{wheel}[video]"], check=True,
                   capture_output=True, text=True, timeout=900)
    result = run_in(python, ["train.total_timesteps=1024", "eval.episodes=1", "eval.video=true",
                             "hydra.run.dir=run"], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    (video,) = (tmp_path / "run" / "videos").glob("*.mp4")
    assert video.stat().st_size > 1000 and "XDG_RUNTIME_DIR" not in result.stderr


def test_the_wheel_installs_and_runs_the_default_job_outside_the_checkout(tmp_path):
    wheel = build_wheel(tmp_path / "wheels")
    bin_dir = venv_with_these_dependencies(tmp_path / "venv") / "bin"
    subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    str(wheel)], check=True, capture_output=True, text=True)
    work = tmp_path / "elsewhere"
    work.mkdir()
    where = subprocess.run([str(bin_dir / "python"), "-c", "import puffer; print(puffer.__file__)"],
                           cwd=work, check=True, capture_output=True, text=True).stdout
    assert str(tmp_path / "venv") in where  # the wheel's copy, not this checkout
    result = subprocess.run([str(bin_dir / "puffer"), "train.total_timesteps=512", "eval.episodes=2",
                             "hydra.run.dir=run"], cwd=work, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (work / "run" / "model.safetensors").is_file() and (work / "run" / "metrics.jsonl").is_file()
    # the Python API finds the same packaged configs
    api = subprocess.run([str(bin_dir / "python"), "-c", "import puffer; puffer.train("
                          "'train.total_timesteps=256', 'eval.episodes=0', run_dir='api')"],
                         cwd=work, capture_output=True, text=True, timeout=300)
    assert api.returncode == 0, api.stderr[-3000:]
    assert (work / "api" / "model.safetensors").is_file()
    # the sweeps travel too: a suite composes without --config-dir
    sweep = subprocess.run([str(bin_dir / "puffer"), "+suite=classic", "--cfg", "hydra"], cwd=work,
                           capture_output=True, text=True, timeout=120)
    assert sweep.returncode == 0 and "classic/acrobot" in sweep.stdout, sweep.stderr[-2000:]
