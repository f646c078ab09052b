"""Files written before the package was laid out in folders (commit 773e1fc, module paths like
puffer.policies.networks, puffer.emulation.spaces, puffer.emulation.actions inside their configs and pickles) still load, and a
checkpoint of theirs resumes bit for bit."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file

import puffer
from puffer.run import run

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "cartpole_773e1fc"
# the command that wrote them (seed=3, serial, CartPole-v1, the default policy), with the
# CartPole settings shipped then (the zoo's, gamma 0.99 and gae_lambda 0.95)
WRITTEN_WITH = ["train.total_timesteps=2048", "train.num_steps=64", "eval.episodes=0",
                "runtime.checkpoint_interval=2", "runtime.keep_checkpoints=0", "seed=3",
                "preset=zoo", "train.gamma=0.99", "train.gae_lambda=0.95"]


def test_a_model_file_of_the_flat_layout_loads_and_acts():
    agent = puffer.load(FIXTURES / "model.safetensors")
    actions = [agent.act(np.array([0.0, 0.1 * i, 0.02, -0.1], np.float32)) for i in range(-3, 4)]
    assert all(a in (0, 1) for a in actions)
    saved = load_file(FIXTURES / "model.safetensors")
    for name, value in agent.policy.state_dict().items():
        assert torch.equal(value, saved[name]), name


def test_a_checkpoint_of_the_flat_layout_resumes_bit_for_bit(make_cfg, tmp_path):
    run(make_cfg(*WRITTEN_WITH, f"resume={FIXTURES / 'epoch_000002.pt'}", "trust_code=true"), tmp_path)
    written = [json.loads(line) for line in (FIXTURES / "metrics.jsonl").read_text().splitlines()]
    resumed = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    keys = ["global_step", "train/policy_loss", "train/value_loss", "train/entropy", "train/approx_kl"]
    assert [[r[k] for k in keys] for r in resumed] == [[r[k] for k in keys] for r in written[2:]]
    final, expected = load_file(tmp_path / "model.safetensors"), load_file(FIXTURES / "model.safetensors")
    assert final.keys() == expected.keys()
    assert all(torch.equal(final[name], expected[name]) for name in expected)
