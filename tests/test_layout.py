"""Files written before the package was laid out in folders (commit 773e1fc, module paths like
puffer.policies.networks, puffer.emulation.spaces, puffer.emulation.actions inside their configs and pickles) still load, and a
checkpoint of theirs resumes to the same run (bit for bit on the CPU that wrote them)."""

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


def test_a_checkpoint_of_the_flat_layout_resumes_to_the_same_run(make_cfg, tmp_path):
    run(make_cfg(*WRITTEN_WITH, f"resume={FIXTURES / 'epoch_000002.pt'}", "trust_code=true"), tmp_path)
    written = [json.loads(line) for line in (FIXTURES / "metrics.jsonl").read_text().splitlines()]
    resumed = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    keys = ["global_step", "train/policy_loss", "train/value_loss", "train/entropy", "train/approx_kl"]
    # Bit for bit on the CPU that wrote them; another CPU's kernels (MKL's AVX-512 paths on an
    # AMD EPYC, say) round differently in the last bits, so across machines: to float tolerance.
    # Bit-for-bit resume on one machine: tests/test_train.py, tests/test_reliability.py.
    assert [r["global_step"] for r in resumed] == [r["global_step"] for r in written[2:]]
    np.testing.assert_allclose([[r[k] for k in keys[1:]] for r in resumed],
                               [[r[k] for k in keys[1:]] for r in written[2:]], rtol=1e-4, atol=1e-7)
    final, expected = load_file(tmp_path / "model.safetensors"), load_file(FIXTURES / "model.safetensors")
    assert final.keys() == expected.keys()
    for name in expected:
        torch.testing.assert_close(final[name], expected[name], rtol=1e-4, atol=1e-5, msg=name)
