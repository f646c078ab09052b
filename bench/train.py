"""Training throughput on CartPole: puffer vs a straightforward single-file PPO, in one run.

    python bench/train.py [--seeds 0] [--reference-steps 100000]

Rows:
- reference: a CleanRL-style PPO loop written here (gymnasium SyncVectorEnv, 4 envs x 128 steps,
  a torch tensor made per step, CleanRL's ppo.py defaults), the baseline;
- puffer on gymnasium's CartPole-v1 (Serial backend, the large-batch settings below);
- puffer on `env=ocean/cartpole` (native batched CartPole, its config as shipped).
Each row: steps/second over the whole training, the deterministic evaluation return (20 episodes,
seeds apart from training's), wall time, and SPS as a multiple of the reference.
Targets: puffer >= 30,000 SPS with evaluation return >= 475, and >= 10x the reference.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from hydra import compose, initialize_config_dir
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import print_table  # noqa: E402

import puffer.config  # noqa: E402,F401
from puffer.emulation import GymnasiumPufferEnv  # noqa: E402
from puffer.evaluation import evaluate  # noqa: E402
from puffer.run import run  # noqa: E402

CONF = Path(__file__).resolve().parents[1] / "conf"
# puffer on gymnasium CartPole: the ocean config's learning settings over 256 gymnasium envs.
GYM_FAST = ["env=classic/cartpole", "vec.num_envs=256", "policy.activation=relu",
            "train.total_timesteps=500000", "runtime.torch_threads=1", "train.num_steps=32",
            "train.num_minibatches=4", "train.update_epochs=4", "train.learning_rate=0.003",
            "train.gamma=0.99", "train.gae_lambda=0.95", "train.clip_vloss=false",
            "train.ent_coef=0"]


def layer(n_in: int, n_out: int, std: float = np.sqrt(2)) -> nn.Linear:
    linear = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(linear.weight, std)
    nn.init.constant_(linear.bias, 0.0)
    return linear


class ReferenceAgent(nn.Module):
    """CleanRL's ppo.py agent; forward() returns (logits, value) for puffer's evaluation."""

    def __init__(self):
        super().__init__()
        self.critic = nn.Sequential(layer(4, 64), nn.Tanh(), layer(64, 64), nn.Tanh(), layer(64, 1, 1.0))
        self.actor = nn.Sequential(layer(4, 64), nn.Tanh(), layer(64, 64), nn.Tanh(), layer(64, 2, 0.01))

    def forward(self, x):
        return self.actor(x), self.critic(x).squeeze(-1)


def reference_ppo(total_timesteps: int, seed: int) -> tuple[ReferenceAgent, float]:
    """CleanRL ppo.py's loop, kept as plain as the original: returns the agent and the SPS."""
    num_envs, num_steps, num_minibatches, update_epochs = 4, 128, 4, 4
    lr, gamma, gae_lambda, clip, ent_coef, vf_coef, max_grad_norm = 2.5e-4, 0.99, 0.95, 0.2, 0.01, 0.5, 0.5
    torch.manual_seed(seed)
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(num_envs)])
    agent = ReferenceAgent()
    optimizer = torch.optim.Adam(agent.parameters(), lr=lr, eps=1e-5)
    batch_size = num_envs * num_steps
    minibatch_size = batch_size // num_minibatches
    obs = torch.zeros((num_steps, num_envs, 4))
    actions = torch.zeros((num_steps, num_envs))
    logprobs, rewards, dones, values = (torch.zeros((num_steps, num_envs)) for _ in range(4))
    next_obs = torch.Tensor(envs.reset(seed=seed)[0])
    next_done = torch.zeros(num_envs)
    num_iterations = total_timesteps // batch_size
    started = time.perf_counter()
    for iteration in range(1, num_iterations + 1):
        optimizer.param_groups[0]["lr"] = (1.0 - (iteration - 1.0) / num_iterations) * lr
        for step in range(num_steps):
            obs[step], dones[step] = next_obs, next_done
            with torch.no_grad():
                logits, value = agent(next_obs)
                probs = torch.distributions.Categorical(logits=logits)
                action = probs.sample()
            values[step], actions[step], logprobs[step] = value, action, probs.log_prob(action)
            next_obs, reward, term, trunc, _ = envs.step(action.numpy())
            rewards[step] = torch.tensor(reward).view(-1)
            next_obs, next_done = torch.Tensor(next_obs), torch.Tensor(np.logical_or(term, trunc))
        with torch.no_grad():
            next_value = agent(next_obs)[1]
            advantages = torch.zeros_like(rewards)
            lastgaelam = 0
            for t in reversed(range(num_steps)):
                nextnonterminal = 1.0 - (next_done if t == num_steps - 1 else dones[t + 1])
                nextvalues = next_value if t == num_steps - 1 else values[t + 1]
                delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
                advantages[t] = lastgaelam = delta + gamma * gae_lambda * nextnonterminal * lastgaelam
            returns = advantages + values
        b_obs, b_logprobs, b_actions = obs.reshape(-1, 4), logprobs.reshape(-1), actions.reshape(-1)
        b_advantages, b_returns, b_values = advantages.reshape(-1), returns.reshape(-1), values.reshape(-1)
        b_inds = np.arange(batch_size)
        for _ in range(update_epochs):
            np.random.shuffle(b_inds)
            for start in range(0, batch_size, minibatch_size):
                mb = b_inds[start : start + minibatch_size]
                logits, newvalue = agent(b_obs[mb])
                probs = torch.distributions.Categorical(logits=logits)
                newlogprob, entropy = probs.log_prob(b_actions.long()[mb]), probs.entropy()
                ratio = (newlogprob - b_logprobs[mb]).exp()
                mb_adv = b_advantages[mb]
                mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
                pg_loss = torch.max(-mb_adv * ratio, -mb_adv * torch.clamp(ratio, 1 - clip, 1 + clip)).mean()
                v_clipped = b_values[mb] + torch.clamp(newvalue - b_values[mb], -clip, clip)
                v_loss = 0.5 * torch.max((newvalue - b_returns[mb]) ** 2, (v_clipped - b_returns[mb]) ** 2).mean()
                loss = pg_loss - ent_coef * entropy.mean() + v_loss * vf_coef
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), max_grad_norm)
                optimizer.step()
    sps = num_iterations * batch_size / (time.perf_counter() - started)
    envs.close()
    return agent, sps


def gym_cartpole():
    return GymnasiumPufferEnv(env=gym.make("CartPole-v1"))


def puffer_row(name: str, overrides: list[str], seed: int) -> list:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[*overrides, f"seed={seed}"])
    started = time.perf_counter()
    metrics = run(cfg, tempfile.mkdtemp(prefix="puffer-bench-"))
    return [name, seed, metrics["perf/sps"], metrics["eval/return_mean"],
            time.perf_counter() - started, cfg.train.total_timesteps]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, nargs="*", default=[0])
    parser.add_argument("--reference-steps", type=int, default=100_000)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    rows = []
    for seed in args.seeds:
        started = time.perf_counter()
        torch.set_num_threads(1)
        agent, sps = reference_ppo(args.reference_steps, seed)
        result = evaluate(agent, gym_cartpole, 20, seed)
        rows.append(["reference (CleanRL-style)", seed, sps, result["return_mean"],
                     time.perf_counter() - started, args.reference_steps])
        rows.append(puffer_row("puffer, gymnasium CartPole, Serial", GYM_FAST, seed))
        rows.append(puffer_row("puffer, ocean/cartpole", ["env=ocean/cartpole"], seed))
    reference = {row[1]: row[2] for row in rows if row[0].startswith("reference")}
    table = [[*row[:4], f"{row[2] / reference[row[1]]:.1f}x", row[4], row[5]] for row in rows]
    print_table(["run", "seed", "SPS", "eval return", "vs reference", "wall s", "env steps"], table)


if __name__ == "__main__":
    main()
