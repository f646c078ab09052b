"""When does a second torch thread help the learner? One PPO minibatch step (forward, backward,
Adam) timed at 1 and N threads, alone and two processes at once, with puffer's bounded OpenMP spin
(GOMP_SPINCOUNT, see puffer/__init__.py) and with libgomp's default.

    python bench/threads.py [--threads 2] [--seconds 2]

Each (model, threads, spin) is measured in fresh subprocesses, since OpenMP reads its settings
once at start-up. The FLOPs column is what puffer.runtime.threads counts for the same step
(torch's FlopCounterMode): the thread policy gives the learner more than one thread only above
`puffer.runtime.threads.FLOPS_PER_EXTRA_THREAD` per thread, chosen from this table. Run it on a quiet
machine (`uptime`): it is about the model, not about contention.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import print_table  # noqa: E402

# name: (observation shape and dtype, policy kwargs, minibatch rows) — the shipped configs' sizes.
MODELS = {
    "mlp 64x2 tanh (CartPole, mb 256)": ((4,), "float32", {"hidden_size": 64}, 256),
    "mlp 64x2 relu (ocean, mb 2048)": ((4,), "float32", {"hidden_size": 64, "activation": "relu"}, 2048),
    "mlp 256x2 tanh (376 obs, mb 512)": ((376,), "float32", {"hidden_size": 256}, 512),
    "mlp 1024x3 relu (376 obs, mb 1024)": ((376,), "float32",
                                           {"hidden_size": 1024, "num_layers": 3, "activation": "relu"}, 1024),
    "cnn 128 (squares 1x36x36, mb 512)": ((1, 36, 36), "uint8", {"cnn": True, "hidden_size": 128}, 512),
    "nature cnn (Atari 4x84x84, mb 256)": ((4, 84, 84), "uint8", {"cnn": True}, 256),
}

CHILD = r"""
import json, sys, time
import numpy as np, torch
from gymnasium import spaces
from puffer.policies.networks import Default, NatureCNN
from puffer.runtime.threads import learn_step_flops
shape, dtype, kwargs, rows, threads, seconds = json.loads(sys.argv[1])
torch.set_num_threads(threads)
torch.manual_seed(0)
kwargs = dict(kwargs)
high = 255 if dtype == "uint8" else 1.0
obs_space = spaces.Box(0, high, tuple(shape), dtype)
act_space = spaces.Discrete(4)
policy = (NatureCNN if kwargs.pop("cnn", False) else Default)(obs_space, act_space, **kwargs)
opt = torch.optim.Adam(policy.parameters(), lr=1e-4, fused=True)
obs = torch.from_numpy(np.stack([obs_space.sample() for _ in range(rows)]))
def step():
    logits, value = policy(obs)
    loss = logits.logsumexp(-1).mean() + value.pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
for _ in range(3):
    step()
n, started = 0, time.perf_counter()
while time.perf_counter() - started < seconds:
    step(); n += 1
elapsed = time.perf_counter() - started
print(json.dumps({"ms": 1000 * elapsed / n, "flops": learn_step_flops(policy, obs_space, rows)}))
"""


def measure(spec, threads: int, spin: str | None, seconds: float, copies: int = 1) -> dict:
    """ms per step (the slowest of `copies` processes run at once) and the step's FLOPs.
    spin: GOMP_SPINCOUNT, or None for libgomp's own default (300,000)."""
    shape, dtype, kwargs, rows = spec
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    if spin is not None:
        env["GOMP_SPINCOUNT"] = spin
    arg = json.dumps([shape, dtype, kwargs, rows, threads, seconds])
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, arg], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(copies)]
    results = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError("a measuring process failed")
    return max(results, key=lambda r: r["ms"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    n, ours = args.threads, os.environ.get("GOMP_SPINCOUNT", "3000")
    print(f"load average before: {os.getloadavg()[0]:.2f}; 1 vs {n} threads; spin: GOMP_SPINCOUNT "
          f"{ours} (puffer) or libgomp's default; 'x2': two processes at once, the slower one's time")
    rows = []
    for name, spec in MODELS.items():
        one = measure(spec, 1, ours, args.seconds)
        many = measure(spec, n, ours, args.seconds)
        many2 = measure(spec, n, ours, args.seconds, copies=2)
        default = measure(spec, n, None, args.seconds)
        default2 = measure(spec, n, None, args.seconds, copies=2)
        rows.append([name, one["flops"] / 1e6, one["ms"], many["ms"], one["ms"] / many["ms"],
                     many2["ms"] / many["ms"], default["ms"], default2["ms"] / default["ms"]])
    print_table(["model, minibatch", "MFLOP/step", "1 thread ms", f"{n} ms", "speedup", "x2 slowdown",
                 f"{n} ms default spin", "x2 slowdown"], rows)


if __name__ == "__main__":
    main()
