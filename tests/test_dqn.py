"""DQN (train=dqn): the replay buffer's transitions (next observations across episode ends and
rollouts), its checkpoint round trip, the target network's schedule, resume bit for bit with the
buffer, and learning."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces
from resumes import assert_resumes_bit_for_bit

from puffer.files import checkpoint
from puffer.loggers import read_metrics
from puffer.run import run
from puffer.training.replay import ReplayBuffer
from puffer.training.rollout import Rollout

SMALL = ["train=dqn", "train.total_timesteps=4096", "train.num_steps=32", "vec.num_envs=4", "train.learning_starts=256",
         "train.gradient_steps=8", "train.target_update_interval=512", "eval.episodes=0", "runtime.torch_threads=1"]


def one_row_rollout(obs, valid, terminals) -> Rollout:
    T = len(obs)
    r = Rollout(T, 1, spaces.Box(-1e3, 1e3, (1,)), (), np.int64, torch.device("cpu"), torch.nn.Linear(1, 1))
    r.obs[:, 0, 0] = torch.tensor(obs, dtype=torch.float32)
    r.valid[:, 0] = torch.tensor(valid)
    r.terminals[:, 0] = torch.tensor(terminals, dtype=torch.float32)
    r.actions[:, 0] = torch.arange(T)
    r.rewards[:, 0] = torch.arange(T, dtype=torch.float32) * 10
    return r


def test_the_buffer_keeps_valid_steps_with_their_next_observation_in_a_ring():
    """Observations 1, 2 end an episode (2 is its final observation, the dummy step's, not a
    transition), 3 starts the next; 4 is what the next rollout starts from."""
    r = one_row_rollout([1, 2, 3], valid=[True, False, True], terminals=[0, 0, 0])
    buffer = ReplayBuffer(3, r)
    assert buffer.add_rollout(r, torch.tensor([[4.0]])) == 2
    assert buffer.obs[:2, 0].tolist() == [1, 3] and buffer.next_obs[:2, 0].tolist() == [2, 4]
    assert buffer.actions[:2].tolist() == [0, 2] and buffer.rewards[:2].tolist() == [0, 20]
    buffer.add_rollout(r, torch.tensor([[5.0]]))  # two more: the oldest is overwritten
    assert buffer.size == 3 and buffer.next == 1
    assert buffer.obs[:, 0].tolist() == [3, 3, 1] and buffer.next_obs[:, 0].tolist() == [5, 4, 2]

    copy = ReplayBuffer(3, r)
    copy.load_state_dict(buffer.state_dict())
    drawn = [b.sample(16, torch.Generator().manual_seed(0))[2] for b in (buffer, copy)]
    assert all(torch.equal(a, b) for a, b in zip(*drawn, strict=True))
    with pytest.raises(ValueError, match="train.buffer_size=2"):
        ReplayBuffer(2, r).load_state_dict(buffer.state_dict())


def test_prioritized_draws_follow_the_td_errors_and_weigh_the_frequent_ones_down():
    from puffer.training.minibatches import Priority

    r = one_row_rollout(list(range(8)), valid=[True] * 8, terminals=[0] * 8)
    buffer = ReplayBuffer(8, r)
    buffer.add_rollout(r, torch.tensor([[8.0]]))
    assert buffer.priorities.tolist() == [1.0] * 8  # new transitions: the highest priority so far
    buffer.update_priorities(torch.arange(8), torch.tensor([0.0, 0, 0, 9, 0, 0, 0, 3]))
    assert buffer.max_priority == pytest.approx(9.0)
    index, weights, (obs, *_) = buffer.sample(4000, torch.Generator().manual_seed(0), Priority(1.0, 1.0, torch.Generator()))
    share = torch.bincount(index, minlength=8).float() / len(index)
    assert share[3].item() == pytest.approx(0.75, abs=0.03) and share[7].item() == pytest.approx(0.25, abs=0.03)
    assert torch.equal(obs[:, 0], index.float())
    # (n p)^-1 over its max: the rarer transition weighs 1, the 3x more frequent one 1/3
    assert weights[index == 7].max().item() == pytest.approx(1.0) and weights[index == 3].max().item() == pytest.approx(1 / 3)


@pytest.mark.parametrize("vec", ["serial", "multiprocessing"])
def test_a_resumed_dqn_run_matches_an_uninterrupted_one_bit_for_bit(make_cfg, tmp_path, vec):
    options = ["train.double_q=true", "train.prioritized=true"]
    assert_resumes_bit_for_bit(make_cfg, tmp_path, [*SMALL, f"vec={vec}", *options], middle=16, end=32,
                               keys=["train/td_loss", "train/q_values", "train/epsilon", "train/replay_size"])
    state = checkpoint.read(tmp_path / "full" / "checkpoints" / "epoch_000016.pt")
    logged = read_metrics(tmp_path / "full" / "metrics.jsonl")[15]["train/replay_size"]
    # every step but the dummy steps after episode ends, and the target synced at step 2,048
    assert state["replay"]["size"] == logged > 0.9 * 16 * 32 * 4 and state["target_synced_at"] == 2048


def test_without_the_buffer_in_its_checkpoint_a_run_says_so(make_cfg, tmp_path, caplog):
    run(make_cfg(*SMALL, "train.save_replay=false", "train.total_timesteps=1024"), tmp_path / "a")
    assert "train.save_replay=false: the checkpoint leaves the replay buffer out" in caplog.text
    run(make_cfg(*SMALL, "train.total_timesteps=2048", f"resume={tmp_path / 'a'}"), tmp_path / "b")
    assert "the checkpoint holds no replay buffer: it refills from the next rollouts" in caplog.text


def test_the_target_follows_the_online_network_on_its_schedule(make_cfg, tmp_path):
    """Every 512 steps (4 epochs of 128): a copy (tau 1), or a quarter of the way (tau 0.25)."""
    from omegaconf import OmegaConf

    from puffer.build import make_env_creator, make_policy, make_vecenv
    from puffer.training.dqn import DQN

    cfg = make_cfg(*SMALL, "train.total_timesteps=1024")
    vecenv = make_vecenv(cfg, make_env_creator(cfg))
    try:
        trainer = DQN(OmegaConf.to_object(cfg.train), vecenv, make_policy(cfg, vecenv))
        online = lambda: torch.cat([p.flatten() for p in trainer.policy.parameters()])  # noqa: E731
        target = lambda: torch.cat([p.flatten() for p in trainer.target.parameters()])  # noqa: E731
        for epoch in range(1, 5):
            trainer.collect()
            before = target().clone()
            trainer.update()
            assert torch.equal(target(), online()) if epoch == 4 else torch.equal(target(), before)
        assert not torch.equal(before, online())  # (the online network learned meanwhile)
        trainer.config.tau = 0.25
        before = target().clone()
        for _ in range(4):
            trainer.collect()
            trainer.update()
        assert torch.allclose(target(), before + 0.25 * (online() - before), atol=1e-6)
    finally:
        vecenv.close()


def test_dqn_learns_the_password_and_its_agent_loads(make_cfg, tmp_path):
    """Eight right bits in a row, paid only after the last: 1.0 for seeds 0-2 as shipped."""
    import puffer

    metrics = run(make_cfg("train=dqn", "env=ocean/password", "eval.episodes=50"), tmp_path)
    assert metrics["eval/return_mean"] >= 0.95
    agent = puffer.load(tmp_path)
    assert type(agent.policy).__name__ == "QNetwork"


def test_pixels_are_kept_as_bytes_and_read_by_the_nature_torso(make_cfg, tmp_path):
    """Atari's path at a small scale: `train=dqn policy=q` on ocean/squares' frames."""
    from omegaconf import OmegaConf

    from puffer.build import make_env_creator, make_policy, make_vecenv
    from puffer.policies.networks import ImageEncoder
    from puffer.training.dqn import DQN

    cfg = make_cfg("env=ocean/squares", "train=dqn", "policy=q", "train.learning_starts=0", "train.num_steps=4")
    vecenv = make_vecenv(cfg, make_env_creator(cfg))
    try:
        trainer = DQN(OmegaConf.to_object(cfg.train), vecenv, make_policy(cfg, vecenv))
        assert any(isinstance(m, ImageEncoder) for m in trainer.policy.modules())
        trainer.collect()
        metrics = trainer.update()
        assert trainer.replay.obs.dtype == torch.uint8 and trainer.replay.size > 0
        assert np.isfinite(metrics["train/td_loss"])
    finally:
        vecenv.close()
