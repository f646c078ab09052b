"""A wheel built from this tree runs on its own: configs and sweeps inside, the `puffer` command."""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
from pathlib import Path

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


def test_the_wheel_installs_and_runs_the_default_job_outside_the_checkout(tmp_path):
    wheels = tmp_path / "wheels"
    build_existed = (ROOT / "build").exists()
    try:
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                        "-w", str(wheels), str(ROOT)], check=True, capture_output=True, text=True)
    finally:  # setuptools builds in the tree; leave it as it was
        if not build_existed:
            shutil.rmtree(ROOT / "build", ignore_errors=True)
    (wheel,) = wheels.glob("puffer-*.whl")
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
