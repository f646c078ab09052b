"""Files are data: nothing planted in a model file, an agent folder or a checkpoint runs when
puffer reads it, unless the reader opts in with trust_code; checkpoints are signed per user."""

from __future__ import annotations

import json
import logging
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import puffer
from puffer.errors import CheckpointError
from puffer.files import checkpoint, model_file, trust
from puffer.files.trust import UntrustedFileError
from puffer.run import run

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["train.total_timesteps=1024", "train.num_steps=32", "eval.episodes=2"]


class Payload:
    """Unpickling it writes `marker`: the code a malicious file would run."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('ran')",)


@pytest.fixture
def marker(tmp_path):
    path = tmp_path / "payload_ran"
    yield path
    assert not path.exists(), "a planted payload ran"


@pytest.fixture
def trained(make_cfg, tmp_path):
    """A small CartPole run with checkpoints at epochs 2 and 4."""
    run_dir = tmp_path / "outputs" / "trained"
    run(make_cfg(*SMALL, "runtime.checkpoint_interval=2",
                 "runtime.keep_checkpoints=0"), run_dir)
    return run_dir


def sign_with_another_key(state: dict, path: Path, tmp_path: Path, monkeypatch) -> Path:
    """`state` as a checkpoint signed by a key that is not this user's (another user's file)."""
    with monkeypatch.context() as patched:
        patched.setenv(trust.KEY_FILE_VARIABLE, str(tmp_path / "another_users.key"))
        checkpoint.save_atomic(state, path)
    return path


def planted_checkpoint(trained: Path, marker: Path, tmp_path: Path, monkeypatch) -> Path:
    """The run's last checkpoint with a payload in place of its pickled envs, signed by another
    key, saved as the run's newest checkpoint."""
    state = checkpoint.read(trained / "checkpoints" / "epoch_000002.pt")
    state["rollout"]["env_state"]["workers"] = [pickle.dumps(Payload(marker))]
    path = trained / "checkpoints" / "epoch_000099.pt"
    return sign_with_another_key(state, path, tmp_path, monkeypatch)


def test_a_checkpoint_signed_by_another_key_is_refused_with_the_opt_in_named(
        make_cfg, trained, marker, tmp_path, monkeypatch):
    planted = planted_checkpoint(trained, marker, tmp_path, monkeypatch)
    with pytest.raises(UntrustedFileError, match="not signed by this user's key.*trust_code=true"):
        run(make_cfg(*SMALL, f"resume={planted}"), tmp_path / "resumed")
    assert not (tmp_path / "resumed" / "checkpoints").exists()


@pytest.mark.parametrize("how", ["dir", "latest"])
def test_resume_of_a_run_or_latest_skips_a_planted_checkpoint_for_the_newest_signed_one(
        make_cfg, trained, marker, tmp_path, monkeypatch, caplog, how):
    planted = planted_checkpoint(trained, marker, tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)  # resume=latest looks under ./outputs
    value = trained if how == "dir" else "latest"
    metrics = run(make_cfg(*SMALL, "train.total_timesteps=1536", f"resume={value}"), tmp_path / "resumed")
    assert metrics["train/epoch"] == 6  # went on from epoch 4, the newest signed checkpoint
    assert f"{planted.relative_to(tmp_path) if how == 'latest' else planted} is not signed by this user's key" in caplog.text


def test_an_unsigned_pickle_is_refused_as_a_checkpoint_a_model_and_an_agent(make_cfg, trained, marker, tmp_path):
    """A checkpoint written by torch.save (an older puffer's, or planted) holds arbitrary pickles."""
    planted = trained / "checkpoints" / "epoch_000099.pt"
    torch.save({"policy": {}, "optimizer": {}, "payload": Payload(marker)}, planted)
    with pytest.raises(UntrustedFileError, match="unsigned checkpoint.*trust_code=true"):
        run(make_cfg(*SMALL, f"resume={planted}"), tmp_path / "resumed")
    with pytest.raises(UntrustedFileError, match="unsigned checkpoint"):
        puffer.load(planted)
    folder = tmp_path / "shared_agent"
    folder.mkdir()
    torch.save({"policy": {}, "payload": Payload(marker)}, folder / "model.pt")  # an older run's model file
    with pytest.raises(UntrustedFileError, match="trust_code"):
        puffer.load(folder)
    with pytest.raises(UntrustedFileError, match="trust_code"):
        run(make_cfg("mode=eval", f"checkpoint={folder}"), tmp_path / "eval")


def test_a_payload_inside_the_checkpoint_data_never_unpickles(trained, marker, tmp_path, monkeypatch):
    """Signed by another key, a payload among the tensors: read as weights only, it is refused."""
    state = checkpoint.read(trained / "checkpoints" / "epoch_000002.pt")
    state["policy"]["evil"] = Payload(marker)
    planted = sign_with_another_key(state, tmp_path / "epoch_000001.pt", tmp_path, monkeypatch)
    with pytest.raises(UntrustedFileError, match="objects other than tensors"):
        puffer.load(planted)


def test_puffer_load_reads_another_users_checkpoint_as_weights_without_unpickling_its_envs(
        trained, marker, tmp_path, monkeypatch):
    planted = planted_checkpoint(trained, marker, tmp_path, monkeypatch)
    agent = puffer.load(planted)
    assert agent.act(np.zeros(4, np.float32)) in (0, 1)


def test_a_model_file_that_is_a_pickle_is_not_a_model(tmp_path, marker):
    fake = tmp_path / "model.safetensors"
    fake.write_bytes(pickle.dumps(Payload(marker)))
    with pytest.raises(CheckpointError, match="not a readable model file"):
        puffer.load(fake)


@pytest.mark.parametrize("section, bad", [
    # a nested _target_: Hydra's recursive instantiation would call it with the file's arguments
    ("policy", {"_target_": "puffer.policies.networks.Default", "hidden_size": {"_target_": "builtins.open", "mode": "w"}}),
    ("policy", {"_target_": "puffer.build.torch.load"}),  # torch's code, reached through puffer's namespace
    ("env", {"_target_": "builtins.exec"}),
    ("env", {"_target_": "puffer.envs.make_gymnasium", "id": "CartPole-v1", "wrappers": ["os.system"]}),
])
def test_a_model_file_whose_config_names_other_code_is_refused_everywhere(
        make_cfg, trained, marker, tmp_path, section, bad):
    saved = model_file.read(trained / "model.safetensors")
    bad = json.loads(json.dumps(bad).replace('"mode": "w"', f'"file": "{marker}", "mode": "w"'))
    saved.config[section] = bad
    folder = tmp_path / "shared_agent"
    model_file.save(folder / "model.safetensors", saved)
    with pytest.raises(UntrustedFileError, match=f"{section}.*trust_code=true"):
        puffer.load(folder)
    with pytest.raises(UntrustedFileError, match=section):
        run(make_cfg("mode=eval", f"checkpoint={folder}"), tmp_path / "eval")
    with pytest.raises(UntrustedFileError, match=section):
        run(make_cfg("mode=export", f"checkpoint={folder}", f"mode.dir={tmp_path / 'again'}"), tmp_path / "export")


def test_trust_code_resumes_a_colleagues_checkpoint(make_cfg, trained, tmp_path, monkeypatch):
    state = checkpoint.read(trained / "checkpoints" / "epoch_000004.pt")
    theirs = sign_with_another_key(state, tmp_path / "theirs.pt", tmp_path, monkeypatch)
    metrics = run(make_cfg(*SMALL, "train.total_timesteps=1280", f"resume={theirs}", "trust_code=true"),
                  tmp_path / "resumed")
    assert metrics["train/epoch"] == 5


def test_the_signing_key_is_made_once_and_readable_by_the_user_alone(tmp_path, monkeypatch):
    monkeypatch.setenv(trust.KEY_FILE_VARIABLE, str(tmp_path / "dir" / "signing.key"))
    key = trust.user_key()
    assert trust.user_key() == key and len(key) == 64
    assert (tmp_path / "dir" / "signing.key").stat().st_mode & 0o777 == 0o600
    assert trust.verify(b"data", trust.sign(b"data")) and not trust.verify(b"datA", trust.sign(b"data"))


def test_a_tampered_checkpoint_fails_its_signature(trained, tmp_path):
    path = trained / "checkpoints" / "epoch_000004.pt"
    data = bytearray(path.read_bytes())
    data[-100] ^= 1  # one bit of the payload
    tampered = tmp_path / "epoch_000004.pt"
    tampered.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="is damaged: written and signed by you, its contents changed since"):
        checkpoint.read(tampered)
    truncated = tmp_path / "epoch_000003.pt"  # a copy cut short: damaged, not "another user's"
    truncated.write_bytes(path.read_bytes()[:-5000])
    with pytest.raises(CheckpointError, match="is damaged.*an earlier checkpoint"):
        checkpoint.read(truncated)


ACTS = """
import json, sys
import numpy as np
import puffer
agent = puffer.load(sys.argv[1])
observations = np.asarray(json.loads(sys.argv[2]), np.float32)
print(json.dumps(agent.act(observations).tolist()))
"""


def test_an_exported_agent_loads_alone_in_a_fresh_process_and_its_card_matches_a_fresh_eval(make_cfg, tmp_path):
    trained = tmp_path / "run"
    run(make_cfg("train.total_timesteps=4096", "eval.episodes=2"), trained)
    folder = tmp_path / "agents" / "cartpole"
    exported = run(make_cfg("mode=export", f"checkpoint={trained}", f"mode.dir={folder}", "eval.episodes=5",
                            "mode.video=false"), tmp_path / "export")
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "config.yaml", "model.safetensors",
                                                        "results.json"]
    observations = np.random.default_rng(0).uniform(-0.2, 0.2, (32, 4)).astype(np.float32)
    here = puffer.load(trained).act(observations).tolist()
    shutil.move(trained, tmp_path / "elsewhere")  # the folder alone, no run directory
    alone = tmp_path / "alone"
    alone.mkdir()
    result = subprocess.run([sys.executable, "-c", ACTS, str(folder), json.dumps(observations.tolist())],
                            cwd=alone, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == here
    # the model card's numbers are those of a fresh mode=eval of the folder
    fresh = run(make_cfg("mode=eval", f"checkpoint={folder}", "eval.episodes=5"), tmp_path / "eval")
    results = json.loads((folder / "results.json").read_text())
    assert results["eval/return_mean"] == fresh["eval/return_mean"] == exported["eval/return_mean"]
    card = (folder / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: puffer\n")
    assert f"{fresh['eval/return_mean']:.2f} +- {fresh['eval/return_ci95']:.2f}" in card
    assert "over 5 episodes" in card and "training steps | 4,096" in card
    assert "python -m puffer" not in card or "trained with" in card
    with pytest.raises(Exception, match="mode.dir=.*not an empty folder"):
        run(make_cfg("mode=export", f"checkpoint={folder}", f"mode.dir={folder}"), tmp_path / "again")


def test_export_records_a_replay_where_the_env_renders(make_cfg, tmp_path):
    pytest.importorskip("imageio")
    pytest.importorskip("pygame")
    run(make_cfg(*SMALL), tmp_path / "run")
    folder = tmp_path / "agent"
    run(make_cfg("mode=export", f"checkpoint={tmp_path / 'run'}", f"mode.dir={folder}", "eval.episodes=2"),
        tmp_path / "export")
    assert (folder / "replay.mp4").stat().st_size > 1000
    assert "![replay](replay.mp4)" in (folder / "README.md").read_text()


class FailsLater(gym.Env):
    """CartPole that raises at its `fail_at`-th step: a simulator that breaks mid-run."""

    def __init__(self, fail_at: int = 100, render_mode=None):
        self.env = gym.make("CartPole-v1")
        self.observation_space, self.action_space = self.env.observation_space, self.env.action_space
        self.fail_at, self.t = fail_at, 0

    def reset(self, seed=None, options=None):
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        self.t += 1
        if self.t == self.fail_at:
            raise RuntimeError("the simulator broke")
        return self.env.step(action)


def test_a_run_that_fails_saves_its_last_completed_epoch_which_resumes(make_cfg, tmp_path, caplog):
    gym.register(id="puffer_test/FailsLater-v0", entry_point=FailsLater)
    # 8 envs x 32 steps an epoch; each env fails at its 100th step, inside epoch 4
    env = ["env=classic/gym", "env.id=puffer_test/FailsLater-v0", "train.num_steps=32", "vec.num_envs=8",
           "eval.episodes=0"]
    with pytest.raises(Exception, match="the simulator broke"):
        run(make_cfg(*env, "train.total_timesteps=8192"), tmp_path / "run")
    (saved,) = (tmp_path / "run" / "checkpoints").glob("epoch_*.pt")
    assert saved.name == "epoch_000003.pt" and "the last completed epoch is saved" in caplog.text
    state = checkpoint.read(saved)
    assert state["global_step"] == 3 * 32 * 8 and state["rollout"] is None
    metrics = run(make_cfg(*env, "train.total_timesteps=1024", f"resume={saved}"), tmp_path / "resumed")
    assert metrics["train/epoch"] == 4


def test_checkpoint_minutes_saves_during_a_run_without_an_epoch_interval(make_cfg, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="puffer")
    run(make_cfg(*SMALL, "runtime.checkpoint_minutes=0.0001", "runtime.keep_checkpoints=0"), tmp_path)
    saved = sorted((tmp_path / "checkpoints").glob("epoch_*.pt"))
    assert len(saved) > 2 and "runtime.checkpoint_minutes=0.0001" in caplog.text


# -- a model file's config is data (issue 44): payloads that the walk of `_target_`s alone missed
def opens(marker: Path) -> str:
    """A node that, once built, creates `marker`: the code a crafted config would run."""
    return f"{{_target_: builtins.open, file: '{marker}', mode: w}}"


def interpolations(marker: Path) -> dict[str, tuple[str, object]]:
    """Where an interpolation could hide a `_target_` (a resolver builds the node only when
    OmegaConf resolves it): name -> (dotted key, value)."""
    decoded = f"${{oc.create:${{oc.decode:\"{opens(marker)}\"}}}}"
    return {
        "policy_value": ("policy.log_std_init", decoded),
        "env_kwargs": ("env.kwargs", {"render_mode": decoded}),
        "wrappers_list": ("env.wrappers", f"${{oc.create:${{oc.decode:\"[{opens(marker)}]\"}}}}"),
        "nested_in_a_list": ("policy.hidden_size", [1, [decoded]]),
        "custom_resolver": ("policy.hidden_size", "${half:128}"),  # one of puffer's own resolvers
        "in_a_key": ("env.kwargs", {"${oc.env:HOME}": 1}),
    }


def planted_model(trained: Path, folder: Path, **settings) -> Path:
    """The trained run's model file with `settings` (dotted key -> value) in its config, as a
    shared agent folder."""
    saved = model_file.read(trained / "model.safetensors")
    for dotted, value in settings.items():
        node = saved.config
        *parents, last = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    model_file.save(folder / "model.safetensors", saved)
    return folder


def refused_everywhere(make_cfg, folder: Path, tmp_path: Path, match: str) -> None:
    """puffer.load, mode=eval and mode=export each refuse `folder` with one UntrustedFileError."""
    with pytest.raises(UntrustedFileError, match=match):
        puffer.load(folder)
    with pytest.raises(UntrustedFileError, match=match):
        run(make_cfg("mode=eval", f"checkpoint={folder}"), tmp_path / "eval")
    with pytest.raises(UntrustedFileError, match=match):
        run(make_cfg("mode=export", f"checkpoint={folder}", f"mode.dir={tmp_path / 'exported'}"), tmp_path / "export")
    assert not (tmp_path / "exported" / "model.safetensors").exists()


@pytest.mark.parametrize("case", list(interpolations(Path("m"))))
def test_an_interpolation_in_a_model_files_config_is_never_resolved(make_cfg, trained, marker, tmp_path, case):
    dotted, value = interpolations(marker)[case]
    folder = planted_model(trained, tmp_path / "shared_agent", **{dotted: value})
    refused_everywhere(make_cfg, folder, tmp_path, r"an interpolation.*trust_code=true")


def test_an_interpolation_in_another_users_checkpoint_is_never_resolved(
        make_cfg, trained, marker, tmp_path, monkeypatch):
    state = checkpoint.read(trained / "checkpoints" / "epoch_000002.pt")
    state["config"]["policy"]["log_std_init"] = interpolations(marker)["policy_value"][1]
    planted = sign_with_another_key(state, tmp_path / "theirs.pt", tmp_path, monkeypatch)
    with pytest.raises(UntrustedFileError, match="an interpolation"):
        puffer.load(planted)
    with pytest.raises(UntrustedFileError, match="an interpolation"):
        run(make_cfg("mode=eval", f"checkpoint={planted}"), tmp_path / "eval")


@pytest.mark.parametrize("settings, match", [
    # puffer's own functions: a file reader that unpickles what the folder ships beside it
    ({"env": {"_target_": "puffer.files.checkpoint.read", "path": "payload.pt", "trust_code": True}},
     "trust_code"),
    ({"env": {"_target_": "puffer.files.checkpoint.read", "path": "payload.pt"}}, "env makers"),
    ({"env": {"_target_": "puffer.agent.load", "path": "payload.pt"}}, "env makers"),
    ({"policy._target_": "puffer.agent.load"}, "policy classes"),
    ({"policy._target_": "puffer.policies.build.build_policy"}, "policy classes"),  # a function
    ({"policy._target_": "puffer.training.ppo.PPO"}, "policy classes"),  # puffer's, not a policy
    # Hydra's call keys, the opt-in, wrappers that call or write
    ({"policy._args_": [["x"]]}, "_args_"),
    ({"policy._partial_": True}, "_partial_"),
    ({"trust_code": True}, "opt-in comes from your command line"),
    ({"env.wrappers": ["gymnasium.wrappers.TransformObservation"]}, "wrapper classes"),
    ({"env.wrappers": [{"_target_": "gymnasium.wrappers.RecordVideo", "video_folder": "/tmp/x"}]},
     "wrapper classes"),
    ({"env.wrappers": [{"_target_": "gymnasium.wrappers.TimeLimit", "max_episode_steps": {"_target_": "os.getcwd"}}]},
     "env.wrappers"),
    ({"env.wrappers": ["collections.UserList"]}, "wrapper classes"),
    # a module imported to make the env runs as it is imported
    ({"env.id": "this:Zen-v0"}, "suites' packages"),
])
def test_a_model_file_may_name_only_allowed_classes_and_no_opt_in(
        make_cfg, trained, marker, tmp_path, settings, match):
    folder = planted_model(trained, tmp_path / "shared_agent", **settings)
    refused_everywhere(make_cfg, folder, tmp_path, match)


def test_allowed_wrappers_and_suite_ids_still_load_and_trust_code_reads_the_rest(trained, tmp_path):
    wrappers = [{"_target_": "gymnasium.wrappers.TimeLimit", "max_episode_steps": 50},
                "gymnasium.wrappers.RecordEpisodeStatistics"]
    folder = planted_model(trained, tmp_path / "ok", **{"env.wrappers": wrappers})
    assert puffer.load(folder).act(np.zeros(4, np.float32)) in (0, 1)
    folder = planted_model(trained, tmp_path / "trusted", **{"policy.hidden_size": "${half:128}"})
    with pytest.raises(UntrustedFileError):
        puffer.load(folder)
    with pytest.raises(RuntimeError, match="size mismatch"):  # trusted: resolved to 64, not the trained 32
        puffer.load(folder, trust_code=True)


def test_a_run_with_trust_code_writes_files_that_load_without_it(make_cfg, trained, tmp_path):
    """The opt-in is the reader's: it never travels in the model file or the checkpoint."""
    run_dir = tmp_path / "with_opt_in"
    run(make_cfg(*SMALL, "trust_code=true"), run_dir)
    assert "trust_code" not in model_file.read(run_dir / "model.safetensors").config
    assert "trust_code" not in checkpoint.read(sorted((run_dir / "checkpoints").glob("*.pt"))[-1])["config"]
    assert puffer.load(run_dir).act(np.zeros(4, np.float32)) in (0, 1)


# -- the key is the user's, or it is not used (issue 44)
def a_key(path: Path, mode: int = 0o600, owner: int | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("ab" * 32)
    path.chmod(mode)
    if owner is not None:
        os.chown(path, owner, -1)
    return path


def other_user() -> int:
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    return 4242


@pytest.mark.parametrize("case, match", [
    ("world_readable", "mode 0644"),
    ("group_writable", "mode 0620"),
    ("another_users_file", "owned by another user"),
    ("link_to_another_users_file", "a link to .*owned by another user"),
    ("another_users_link", "a link owned by another user"),
    ("in_a_folder_others_write", "a folder that others can write"),
    ("another_users_in_a_shared_sticky_folder", "owned by another user"),
    ("a_directory", "not a regular file"),
])
def test_a_key_file_that_others_could_write_or_read_is_refused_before_training(
        make_cfg, tmp_path, monkeypatch, case, match):
    key = tmp_path / "keys" / "signing.key"
    if case == "world_readable":
        a_key(key, 0o644)
    elif case == "group_writable":
        a_key(key, 0o620)
    elif case == "another_users_file":
        a_key(key, owner=other_user())
    elif case == "link_to_another_users_file":
        target = a_key(tmp_path / "theirs" / "signing.key", owner=other_user())
        key.parent.mkdir()
        key.symlink_to(target)
    elif case == "another_users_link":
        target = a_key(tmp_path / "mine" / "signing.key")
        key.parent.mkdir()
        key.symlink_to(target)
        os.lchown(key, other_user(), -1)
    elif case == "in_a_folder_others_write":
        a_key(key)
        key.parent.chmod(0o777)
    elif case == "another_users_in_a_shared_sticky_folder":
        a_key(key, owner=other_user())
        key.parent.chmod(0o1777)
    else:
        key.mkdir(parents=True)
    monkeypatch.setenv(trust.KEY_FILE_VARIABLE, str(key))
    with pytest.raises(UntrustedFileError, match=f"{match}.*PUFFER_KEY_FILE"):
        run(make_cfg(*SMALL), tmp_path / "run")
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # refused before the first epoch


def test_a_checkpoint_signed_with_a_leaked_key_does_not_resume(make_cfg, trained, marker, tmp_path, monkeypatch):
    """Another user read a world-readable key and signed a pickle with it: refused, nothing runs."""
    key = a_key(tmp_path / "keys" / "signing.key")
    monkeypatch.setenv(trust.KEY_FILE_VARIABLE, str(key))
    state = checkpoint.read(trained / "checkpoints" / "epoch_000002.pt", trust_code=True)
    state["rollout"]["env_state"]["workers"] = [pickle.dumps(Payload(marker))]
    planted = tmp_path / "epoch_000003.pt"
    checkpoint.save_atomic(state, planted)  # what the reader of the leaked key can sign
    key.chmod(0o644)
    with pytest.raises(UntrustedFileError, match="mode 0644"):
        run(make_cfg(*SMALL, f"resume={planted}"), tmp_path / "resumed")
