"""Atari training throughput vs the model-bound ceiling, in one run.

    python bench/train_atari.py [--steps 20480] [--game breakout] [override ...]

Rows:
- ceiling: the Nature CNN alone with CleanRL's ppo_atari shapes and no env at all: the rollout's
  forward passes (8 envs x 128 steps) plus 4 epochs x 4 minibatches of forward+backward+Adam per
  batch; samples per second of that is the most any trainer can reach with this model here
  (channels_last: measured before and after puffer's run, the higher one counts);
- puffer: `env=atari/<game> vec=multiprocessing` training, same hyper-parameters, same number of
  gradient steps per sample; its SPS and the profiler's breakdown.
Target on a 2-core CPU: puffer >= 450 SPS, >= 80% of the ceiling (the widely used single-file PPO
reaches about 210 SPS with these settings).
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from gymnasium import spaces
from hydra import compose, initialize_config_dir

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import print_table  # noqa: E402

import puffer.config  # noqa: E402,F401
from puffer.monitor import profiler  # noqa: E402
from puffer.policies.distributions import ActionDist  # noqa: E402
from puffer.policies.networks import NatureCNN
from puffer.run import run  # noqa: E402
from puffer.runtime.allocator import retain_freed_memory  # noqa: E402
from puffer.runtime.threads import usable_cpus  # noqa: E402

CONF = Path(__file__).resolve().parents[1] / "conf"
NUM_ENVS, NUM_STEPS, EPOCHS, MINIBATCHES = 8, 128, 4, 4


def ceiling_sps(channels_last: bool, batches: int = 3) -> float:
    """Samples/second of the model's own work per batch: rollout forwards + the PPO update."""
    torch.set_num_threads(usable_cpus())
    obs_space = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    action_space = spaces.Discrete(4)
    policy = NatureCNN(obs_space, action_space, channels_last=channels_last)
    dist = ActionDist(action_space)
    optimizer = torch.optim.Adam(policy.parameters(), lr=2.5e-4, eps=1e-5, fused=True)
    batch = NUM_ENVS * NUM_STEPS
    obs = torch.randint(0, 256, (batch, 4, 84, 84), dtype=torch.uint8)
    actions = torch.randint(0, 4, (batch,))
    minibatch = batch // MINIBATCHES

    def one_batch():
        with torch.inference_mode():
            for t in range(NUM_STEPS):
                policy(obs[t * NUM_ENVS : (t + 1) * NUM_ENVS])
        for _ in range(EPOCHS):
            for start in range(0, batch, minibatch):
                params, value = policy(obs[start : start + minibatch])
                logprob, entropy = dist.log_prob_entropy(params, actions[start : start + minibatch])
                loss = -(logprob.mean()) + value.pow(2).mean() - 0.01 * entropy.mean()
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()

    one_batch()  # warm-up
    started = time.perf_counter()
    for _ in range(batches):
        one_batch()
    return batches * batch / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=20_480)
    parser.add_argument("--game", default="breakout")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for puffer's run, "
                        "e.g. vec.envs_per_batch=4")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    # puffer's trainer keeps freed memory for reuse (runtime.retain_memory); the ceiling gets the
    # same allocator, so that it stays the most this model can do here.
    retain_freed_memory()
    # The ceiling is measured before and after puffer's run and the higher kept: this VM's speed
    # drifts by tens of percent within minutes, and a low ceiling would flatter puffer's share.
    ceiling_nchw = ceiling_sps(channels_last=False)
    ceiling_before = ceiling_sps(channels_last=True)
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[
            f"env=atari/{args.game}", "vec=multiprocessing", f"train.total_timesteps={args.steps}",
            "eval.episodes=0", *args.overrides])
    metrics = run(cfg, tempfile.mkdtemp(prefix="puffer-bench-atari-"))
    sps = metrics["perf/sps"]
    ceiling_after = ceiling_sps(channels_last=True)
    ceiling = max(ceiling_before, ceiling_after)
    print_table(["run", "SPS", "share of ceiling"], [
        ["ceiling: Nature CNN alone, NCHW", ceiling_nchw, f"{sps / ceiling_nchw:.0%}"],
        ["ceiling: channels_last, before puffer's run", ceiling_before, f"{sps / ceiling_before:.0%}"],
        ["ceiling: channels_last, after puffer's run", ceiling_after, f"{sps / ceiling_after:.0%}"],
        [f"puffer env=atari/{args.game} vec=multiprocessing", sps, f"{sps / ceiling:.0%} (of the higher)"],
    ])
    print("\npuffer's time breakdown:")
    print(profiler.table(metrics))
    print(f"verdict: {profiler.verdict(metrics)}")


if __name__ == "__main__":
    main()
