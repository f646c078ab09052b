"""The GPU path in one table: SPS, where the time went, GPU utilization and peak memory.

    python bench/gpu.py [--scale 1.0] [--cases ocean,breakout,squares] [--allow-cpu]

For each case, a short `python -m puffer mode=profile` run with `device=auto`, first float32 and
eager (the reference), then `runtime.amp=bf16 runtime.compile=true`, side by side with their SPS ratio.
Cases: ocean/cartpole (native batched envs, MLP), atari/breakout (Nature CNN, CleanRL's settings,
multiprocessing envs) and ocean/squares (a small pixel env, CNN). CUDA is synchronised only at the
end (profile.sync_cuda=false), so the SPS is what training gets; the breakdown then charges
queued kernels to the section that waits for them. GPU utilization is sampled from nvidia-smi
every half second while a run trains, peak memory is torch's own (perf/gpu_mem_peak_mb).

Needs a CUDA device (refuses without one: a CPU table would say nothing about the GPU path);
`--allow-cpu` runs it on the CPU anyway, without compile, to check the script itself.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import print_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from puffer.loggers.base import read_metrics  # noqa: E402

# case: (overrides, profile steps at --scale 1)
CASES = {
    "ocean": (["env=ocean/cartpole"], 2_000_000),
    "breakout": (["env=atari/breakout", "vec=multiprocessing"], 100_000),
    "squares": (["env=ocean/squares"], 200_000),
}
VARIANTS = {"fp32 eager": [], "bf16 + compile": ["runtime.amp=bf16", "runtime.compile=true"]}


class GpuSampler:
    """nvidia-smi's utilization.gpu every 0.5 s in a thread, while the block runs."""

    def __init__(self):
        self.samples: list[float] = []
        self.smi = shutil.which("nvidia-smi")

    def __enter__(self):
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self) -> None:
        while self.smi and not self.stop.wait(0.5):
            out = subprocess.run([self.smi, "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
                                  "--id=0"], capture_output=True, text=True)
            if out.returncode == 0 and out.stdout.strip():
                self.samples.append(float(out.stdout.split()[0]))

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()

    def mean(self) -> float | str:
        return sum(self.samples) / len(self.samples) if self.samples else "n/a"


def profile(overrides: list[str], steps: int, device: str, workdir: Path) -> tuple[dict, float | str]:
    args = [sys.executable, "-m", "puffer", "mode=profile", f"profile.timesteps={steps}",
            "profile.sync_cuda=false", f"device={device}", *overrides, f"hydra.run.dir={workdir}"]
    with GpuSampler() as sampler:
        result = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{result.stderr[-3000:]}")
    records = [r for r in read_metrics(workdir / "metrics.jsonl") if "perf/sps" in r]
    return records[-1], sampler.mean()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every case's steps")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--allow-cpu", action="store_true")
    args = parser.parse_args()
    import torch

    if torch.cuda.is_available():
        device, variants = "auto", VARIANTS
        print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}")
    elif args.allow_cpu:
        device, variants = "cpu", {"fp32 eager": [], "bf16": ["runtime.amp=bf16"]}
        print("no CUDA device: running on the CPU to check the script (--allow-cpu)")
    else:
        sys.exit("bench/gpu.py needs a CUDA device (or --allow-cpu to check the script on the CPU)")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in args.cases.split(","):
            overrides, steps = CASES[case]
            steps = max(1, int(steps * args.scale))
            reference_sps = None
            for name, extra in variants.items():
                m, util = profile(overrides + extra, steps, device, Path(tmp) / f"{case}-{len(rows)}")
                reference_sps = reference_sps or m["perf/sps"]
                rows.append([case, name, m["perf/sps"], m["perf/sps"] / reference_sps,
                             *(m.get(f"perf/{s}_pct", 0.0) for s in ("env", "forward", "copy", "learn", "misc")),
                             util, m.get("perf/gpu_mem_peak_mb", "n/a"), m["perf/threads_learn"]])
    print_table(["case", "variant", "SPS", "x fp32", "env %", "forward %", "copy %", "learn %", "misc %",
                 "GPU util %", "GPU peak MB", "CPU threads"], rows)


if __name__ == "__main__":
    main()
