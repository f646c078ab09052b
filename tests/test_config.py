"""Config composition and validation: typos and wrong types are rejected with the key named."""

from __future__ import annotations

import importlib
import math
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium import spaces
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ConfigKeyError, ValidationError
from traces import assert_backends_agree

import puffer
from puffer.build import check, make_env_creator
from puffer.config import CONF_DIR, ConfigError, validate
from puffer.emulation import PufferEnv

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_single_run_commands() -> list[list[str]]:
    """The overrides of each `python -m puffer ...` line in the README's shell blocks that
    starts one run (multirun sweeps are composed by tests/test_sweeps.py)."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S):
        for line in block.splitlines():
            words = shlex.split(line.split("#")[0])
            if "puffer" not in words or words[words.index("puffer") - 1] != "-m":
                continue
            overrides = words[words.index("puffer") + 1 :]
            if not any(w.startswith("-") for w in overrides):  # -m, --cfg, --config-dir
                commands.append(overrides)
    return commands


@pytest.mark.parametrize("overrides", readme_single_run_commands(),
                         ids=lambda words: " ".join(words) or "defaults")
def test_every_run_command_in_the_readme_composes_and_builds_its_env(make_cfg, overrides, monkeypatch):
    if "eval.watch=true" in overrides:  # a desktop command: this machine has no display
        monkeypatch.setenv("DISPLAY", ":0")
    if "device=cuda" in overrides and not torch.cuda.is_available():  # a GPU machine's command
        overrides = [o for o in overrides if o != "device=cuda"]
    cfg = make_cfg(*overrides)
    validate(cfg)
    env = make_env_creator(cfg)()
    try:
        assert isinstance(env, PufferEnv)
    finally:
        env.close()


def test_the_readme_commands_are_found():
    commands = readme_single_run_commands()
    assert [] in commands and ["env=atari/breakout", "vec=multiprocessing"] in commands
    assert len(commands) >= 10


def test_default_config_is_cartpole_ppo_on_cpu_friendly_defaults(make_cfg):
    cfg = make_cfg()
    assert cfg.env.id == "CartPole-v1"
    assert cfg.vec.backend == "serial"
    assert cfg.mode.name == "train"
    assert cfg.device == "auto"
    assert cfg.train.total_timesteps == 100_000
    validate(cfg)


def test_overrides_compose_from_groups(make_cfg):
    cfg = make_cfg("env=classic/cartpole", "vec=multiprocessing", "train.total_timesteps=50000", "seed=3")
    assert (cfg.vec.backend, cfg.train.total_timesteps, cfg.seed) == ("multiprocessing", 50000, 3)


def test_preset_zoo_gives_an_env_rl_zoos_settings_and_keeps_the_rest(make_cfg):
    """CartPole ships settings tuned for time to score; preset=zoo gives rl-baselines3-zoo's
    (hyperparams/ppo.yml: n_steps 32, 20 epochs of one 256 batch, gamma 0.98, lambda 0.8, 64
    wide); an env whose config is the zoo's already keeps its own; overrides still win."""
    tuned, zoo = make_cfg("env=classic/cartpole"), make_cfg("env=classic/cartpole", "preset=zoo")
    assert (tuned.train.num_steps, tuned.train.gamma, tuned.policy.hidden_size) == (64, 0.98, 32)
    assert (zoo.vec.num_envs, zoo.train.num_steps, zoo.train.num_minibatches, zoo.train.update_epochs) == (8, 32, 1, 20)
    assert (zoo.train.learning_rate, zoo.train.gamma, zoo.train.gae_lambda, zoo.policy.hidden_size) == (0.001, 0.98, 0.8, 64)
    assert make_cfg("env=classic/acrobot", "preset=zoo") == make_cfg("env=classic/acrobot")
    assert make_cfg("preset=zoo", "train.gamma=0.9").train.gamma == 0.9
    validate(zoo)


def test_every_preset_file_belongs_to_a_preset_an_algorithm_and_an_env_config():
    """conf/preset_env/<preset>/<train>/<env config>.yaml is read only when all three exist: a
    typo there would be ignored in silence."""
    files = sorted((CONF_DIR / "preset_env").rglob("*.yaml"))
    assert files
    for path in files:
        preset, algorithm, *env = path.relative_to(CONF_DIR / "preset_env").with_suffix("").parts
        assert (CONF_DIR / "preset" / f"{preset}.yaml").is_file(), path
        assert (CONF_DIR / "train" / f"{algorithm}.yaml").is_file(), path
        assert (CONF_DIR / "env" / Path(*env).with_suffix(".yaml")).is_file(), path


def test_every_tuned_file_belongs_to_an_algorithm_and_an_env_config():
    """conf/tuned/<train>/<env config>.yaml likewise: read only when both exist."""
    files = sorted((CONF_DIR / "tuned").rglob("*.yaml"))
    assert files
    for path in files:
        algorithm, *env = path.relative_to(CONF_DIR / "tuned").with_suffix("").parts
        assert (CONF_DIR / "train" / f"{algorithm}.yaml").is_file(), path
        assert (CONF_DIR / "env" / Path(*env).with_suffix(".yaml")).is_file(), path


def test_an_algorithm_reads_only_its_own_tuning(make_cfg):
    """An env's PPO settings (conf/tuned/ppo) are PPO's and SPO's, not another algorithm's."""
    assert make_cfg("env=classic/acrobot", "train=spo").train.num_steps == 256
    assert make_cfg("env=atari/breakout", "train=spo").train.clip_coef == 0.1


def test_env_tuned_settings_override_generic_train_defaults(make_cfg):
    cfg = make_cfg("env=classic/acrobot")
    assert cfg.env.id == "Acrobot-v1"
    assert cfg.train.num_steps == 256
    assert cfg.train.vf_coef == 0.5  # CleanRL's default, untouched by the env


@pytest.mark.parametrize("override", ["train.learning_rat=1e-3", "vec.num_env=4", "env.idd=CartPole-v1"])
def test_unknown_key_is_rejected_with_its_name(make_cfg, override):
    with pytest.raises((ConfigCompositionException, ConfigKeyError)) as info:
        make_cfg(override)
    assert override.split("=")[0].split(".")[-1] in str(info.value) + str(info.value.__cause__)


def test_wrong_type_is_rejected_with_its_name(make_cfg):
    with pytest.raises((ConfigCompositionException, ValidationError)) as info:
        make_cfg("train.num_steps=lots")
    assert "num_steps" in str(info.value) + str(info.value.__cause__)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("train.learning_rate=-0.1", "train.learning_rate=-0.1"),
        ("train.num_minibatches=100000", "train.num_minibatches=100000"),
        ("train.gamma=1.5", "train.gamma=1.5"),
        ("vec.backend=threads", "vec.backend='threads'"),
        ("device=tpu", "device='tpu'"),
        ("logger.mode=sometimes", "logger.mode='sometimes'"),
        ("train._target_=puffer.policies.networks.Default", "train._target_='puffer.policies.networks.Default'"),
        ("train._target_=puffer.nowhere.PPO", "train._target_='puffer.nowhere.PPO': cannot import"),
        ("seed=-1", "seed=-1: expected an integer in [0, 2**62)"),
        ("policy.num_layers=0", "policy.num_layers=0: expected an integer >= 1"),
        ("env=classic/gym", "env.id is required by this env config"),
        ("train.vf_coef=inf", "train.vf_coef=inf: expected a finite number"),
        ("train.learning_rate=nan", "train.learning_rate=nan: expected a finite number"),
        ("runtime.checkpoint_minutes=-1", "runtime.checkpoint_minutes=-1.0"),
        ("mode=export", "checkpoint=None: expected a run directory, agent folder"),
        ("trial_seeds=0", "trial_seeds=0: expected an integer >= 1"),
        ("trial_seeds=2 mode=eval checkpoint=x", "trial_seeds=2: expected 1 with resume= or a mode other"),
        ('objective=["best(eval/return_mean)"]', "objective='best(eval/return_mean)': expected a metric key, "
                                                "or one inside one of ('mean', 'median', 'min', 'max')"),
    ],
)
def test_impossible_values_are_rejected_before_envs_start(make_cfg, override, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        check(make_cfg(*override.split(" ")))


def test_a_sweeps_objective_combines_a_trials_seeds_as_each_entry_says(make_cfg):
    from puffer.__main__ import objective

    runs = [{"eval/return_mean": 500.0, "perf/time_to_score_s": 3.0},
            {"eval/return_mean": 200.0, "perf/time_to_score_s": 9.0},
            {"eval/return_mean": 480.0, "perf/time_to_score_s": 4.0}]
    cfg = make_cfg("trial_seeds=3", 'objective=["min(eval/return_mean)","median(perf/time_to_score_s)",'
                                    '"max(perf/time_to_score_s)",perf/sps,eval/return_mean]')
    values = objective(cfg, runs)
    assert values[:3] == (200.0, 4.0, 9.0) and math.isnan(values[3]) and values[4] == pytest.approx(393.333, abs=1e-3)
    assert objective(make_cfg(), runs) == pytest.approx(393.333, abs=1e-3)  # the mean of the default key
    assert objective(make_cfg(), runs[:1]) == 500.0


def test_a_missing_eval_checkpoint_names_the_checkpoint_key(make_cfg, tmp_path):
    from puffer.errors import CheckpointError
    from puffer.run import run

    with pytest.raises(CheckpointError, match="checkpoint='bogus': no such checkpoint"):
        run(make_cfg("mode=eval", "checkpoint=bogus"), tmp_path)


def test_cuda_device_without_cuda_is_a_clear_error(make_cfg):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ConfigError, match="CUDA is not available"):
        validate(make_cfg("device=cuda"))


def test_unknown_gymnasium_id_names_the_key(make_cfg):
    creator = make_env_creator(make_cfg("env=classic/gym", "env.id=NoSuchEnv-v9"))
    with pytest.raises(ConfigError, match="env.id='NoSuchEnv-v9'"):
        creator()


def test_an_unregistered_module_id_names_the_module_to_install(make_cfg):
    creator = make_env_creator(make_cfg("env=classic/gym", "env.id=nosuchpkg:Foo-v0"))
    with pytest.raises(ConfigError, match="env.id='nosuchpkg:Foo-v0': cannot import 'nosuchpkg'"):
        creator()


@pytest.mark.parametrize("args", [["hydra.run.dir=/etc/hostname/run"], ["-m", "hydra.sweep.dir=/etc/hostname/m"]])
def test_an_output_dir_that_cannot_be_written_is_one_line_before_hydra_starts(args, tmp_path):
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "puffer", *args], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().count("\n") == 0 and "/etc/hostname is not a folder" in result.stderr


def test_eval_on_an_env_with_other_spaces_is_one_error_before_any_episode(make_cfg, tmp_path):
    from puffer.run import run

    run(make_cfg("train.total_timesteps=256", "train.num_steps=32", "eval.episodes=0"), tmp_path / "run")
    with pytest.raises(ConfigError, match="trained on observations .* the env this command names \\(Acrobot-v1\\)"):
        overrides = ["mode=eval", f"checkpoint={tmp_path / 'run'}", "env=classic/acrobot"]
        run(make_cfg(*overrides), tmp_path / "eval", overrides=overrides)


def test_cli_prints_the_composed_job_config(cli):
    result = cli("seed=7", "train.total_timesteps=123", "--cfg", "job")
    assert "seed: 7" in result.stdout
    assert "total_timesteps: 123" in result.stdout
    assert "id: CartPole-v1" in result.stdout


def test_cli_rejects_a_typo_before_training(cli):
    result = cli("train.learning_rat=1e-3", check=False)
    assert result.returncode != 0
    assert "learning_rat" in result.stderr
    assert "Traceback" not in result.stderr or "Key 'learning_rat'" in result.stderr


@pytest.mark.parametrize(("value", "processes"), [("true", 1), ("false", 2)])
def test_vec_step_in_main_reaches_the_multiprocessing_backend(make_cfg, value, processes):
    from puffer.build import make_vecenv

    cfg = make_cfg("vec=multiprocessing", "vec.num_envs=2", "vec.num_workers=2", f"vec.step_in_main={value}")
    with make_vecenv(cfg, make_env_creator(cfg)) as vec:
        assert len(vec.processes) == processes


def test_box2d_configs_build_their_envs_and_keep_variants_apart(make_cfg):
    pytest.importorskip("Box2D")
    from gymnasium import spaces

    from puffer.build import make_env_creator
    from puffer.envs import describe
    from puffer.report.references import lookup

    cfg = make_cfg("env=box2d/lunarlander_continuous")
    env = make_env_creator(cfg)()
    try:
        assert isinstance(env.single_action_space, spaces.Box)
    finally:
        env.close()
    assert describe(cfg.env) == "LunarLander-v3(continuous=True)"
    assert lookup(describe(cfg.env)).reference != lookup(describe(make_cfg("env=box2d/lunarlander").env)).reference


def test_workers_with_the_serial_backend_are_rejected_naming_the_key(make_cfg):
    with pytest.raises(ConfigError, match="vec.num_workers=2: expected null with vec=serial"):
        validate(make_cfg("vec=serial", "vec.num_workers=2"))
    validate(make_cfg("vec=multiprocessing", "vec.num_workers=2"))


@pytest.mark.parametrize(("override", "message"), [
    ("seed=-1", "ConfigError: seed=-1: expected an integer in [0, 2**62)"),
    ("resume=/no/such/run", "CheckpointError: [Errno 2] resume='/no/such/run': no such checkpoint"),
    ("env=classic/gym", "ConfigError: env.id is required by this env config"),
])
def test_cli_errors_are_one_message_without_a_traceback(cli, override, message):
    result = cli(override, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert message in output and "HYDRA_FULL_ERROR=1" in output
    assert "Traceback" not in output


def test_help_says_what_puffer_is_and_how_to_run_it(cli):
    output = cli("--help").stdout
    assert output.startswith("puffer: config-driven reinforcement learning")
    assert "powered by Hydra" not in output and "mode=eval checkpoint=" in output
    assert "env/classic: acrobot, cartpole" in output  # the groups and their options
    groups = output.split("== Groups")[1].split("== Config")[0]
    # only choices: not the typed schemas, not the bases the env files build on
    assert "schema" not in groups and "default" not in groups.split("policy:")[0]
    assert "+suite: atari, box2d, classic" in groups and "policy: cnn, default" in groups


def test_env_wrappers_from_the_command_line_wrap_in_order(make_cfg):
    from puffer.build import make_env_creator

    cfg = make_cfg("env=classic/gym", "env.id=CartPole-v1",
                   "env.wrappers=[{_target_: gymnasium.wrappers.TimeLimit, max_episode_steps: 7},"
                   "gymnasium.wrappers.RecordEpisodeStatistics]")
    env = make_env_creator(cfg)()
    try:
        assert type(env.env).__name__ == "RecordEpisodeStatistics"
        env.reset(seed=0)
        lengths = []
        for _ in range(20):
            _, _, _, _, infos = env.step(np.zeros(1, np.int64))
            lengths += [info["episode_length"] for info in infos if "episode_length" in info]
        assert lengths and set(lengths) <= set(range(1, 8))  # cut at 7 steps by the TimeLimit
    finally:
        env.close()
    with pytest.raises(ConfigError, match=r"env.wrappers\[0\]='no.such.Wrapper': cannot import it"):
        make_env_creator(make_cfg("env=classic/gym", "env.id=CartPole-v1", "env.wrappers=[no.such.Wrapper]"))()


def test_minigrid_and_toy_text_configs_build(make_cfg):
    pytest.importorskip("minigrid")
    from puffer.build import make_env_creator

    for name, shape in (("toy_text/frozenlake", (1,)), ("toy_text/taxi", (1,))):
        env = make_env_creator(make_cfg(f"env={name}"))()
        try:
            assert env.single_observation_space.shape == shape, name
        finally:
            env.close()
    # MiniGrid as the env gives it: the grid, the direction and the mission text
    env = make_env_creator(make_cfg("env=minigrid/doorkey"))()
    try:
        native = env.single_observation_space.native
        assert native["image"].shape == (7, 7, 3) and native["direction"] == spaces.Discrete(4)
        from minigrid.core.mission import MissionSpace

        assert isinstance(native["mission"], MissionSpace)  # read as text (puffer.emulation.spaces)
    finally:
        env.close()
    grid = make_env_creator(make_cfg("env=minigrid/doorkey", "env.wrappers=[minigrid.wrappers.ImgObsWrapper]"))()
    assert grid.single_observation_space.shape == (7, 7, 3)
    grid.close()


@pytest.mark.parametrize("overrides", [
    "train.ent_coef=-1", "train.vf_coef=-1", "train.target_kl=-1", "train.adam_eps=0", "train.vf_clip_coef=-1",
    "vec.envs_per_batch=3", "vec.envs_per_batch=0", "vec=multiprocessing vec.num_workers=3", "vec.start_method=bogus",
    "policy.activation=bogus", "policy.rnn=gru", "profile.timesteps=0", "mode.seconds=0",
    "env.validate_steps=-1", "runtime.log_interval=-1", "vec.autotune_seconds=0", "policy=cnn policy.layout=xy",
    "logger.init_timeout=0", "policy.log_std_init=nan", "vec.restart_failed_workers=2", "vec=auto vec.restart_failed_workers=1",
    "vec=multiprocessing vec.restart_failed_workers=-1", "eval.video_interval=-1"])
def test_values_that_were_accepted_or_failed_late_are_rejected_by_key(make_cfg, overrides):
    last = overrides.split()[-1]
    key, value = last.split("=")
    with pytest.raises(ConfigError, match=rf"^{re.escape(key)}="):
        validate(make_cfg(*overrides.split()))


def test_a_wrong_env_name_suggests_the_nearest_configs_before_hydra_starts(cli):
    result = cli("-m", "env=classic/cartpole,box2d/lunarlandr", check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "env=box2d/lunarlandr: no such env config; did you mean box2d/lunarlander" in result.stderr
    with pytest.raises(ConfigError, match="env=classic/cartpol: .*did you mean classic/cartpole"):
        puffer.train("env=classic/cartpol")


def test_info_envs_lists_every_env_config_with_what_it_runs_and_needs(cli):
    from puffer.envs.catalog import env_names

    listing = cli("--info", "envs").stdout.splitlines()
    names = [line.split()[0] for line in listing[1:]]
    assert names == env_names() and len(names) >= 20 and "atari/default" not in names
    rows = {line.split()[0]: line for line in listing[1:]}
    assert "CartPole-v1" in rows["classic/cartpole"] and rows["classic/cartpole"].endswith("-")
    assert "breakout" in rows["atari/breakout"] and "pip install 'puffer[atari]'" in rows["atari/breakout"]
    assert "any: env.id=" in rows["classic/gym"]


def concrete_env_configs() -> list[str]:
    """Every shipped env config that names its env (not the 'any id' ones)."""
    from puffer.envs.catalog import catalog

    return [row.name for row in catalog() if not row.runs.startswith("any:")]


@pytest.mark.parametrize("name", concrete_env_configs())
def test_every_shipped_env_config_trains_an_epoch_evaluates_and_saves(make_cfg, tmp_path, name):
    from puffer.envs.catalog import EXTRAS

    family = name.split("/")[0]
    if family in EXTRAS:
        pytest.importorskip(EXTRAS[family][1])
    from puffer.run import run

    # the config as shipped, made small: 2 envs x 32 steps, one epoch, a short evaluation episode
    metrics = run(make_cfg(f"env={name}", "vec.num_envs=2", "vec.envs_per_batch=null", "train.num_steps=32",
                           "train.num_minibatches=2", "train.total_timesteps=64", "eval.episodes=1",
                           "eval.max_steps=20"), tmp_path)
    assert metrics["train/epoch"] == 1 and (tmp_path / "model.safetensors").is_file()
    assert "eval/return_mean" in metrics or metrics.get("eval/truncated") == 1


# One config per family of the extras in pyproject.toml (which .ci/run installs): what a user of
# that suite types first.
FAMILY_CONFIGS = ["classic/cartpole", "toy_text/taxi", "box2d/lunarlander", "mujoco/hopper", "atari/breakout",
                  "minigrid/doorkey", "pettingzoo/kaz", "pettingzoo/connect_four", "pettingzoo/simple_adversary",
                  "ocean/herd"]


@pytest.mark.parametrize("name", FAMILY_CONFIGS)
def test_each_family_steps_alike_on_serial_and_multiprocessing_and_trains_from_the_cli(make_cfg, cli, name):
    """The family's extra is installed; its env, built from the CLI config, steps bit-identically
    on Serial and Multiprocessing workers for the same seed and actions; and `python -m puffer`
    trains it a few thousand steps on Multiprocessing workers, evaluates and exits 0."""
    from puffer.build import make_env_creator, make_vecenv
    from puffer.envs.catalog import EXTRAS

    family = name.split("/")[0]
    if family in EXTRAS:
        importlib.import_module(EXTRAS[family][1])  # installed by .ci/run: a missing one fails
    def make(backend):
        cfg = make_cfg(f"env={name}", f"vec={backend}", "vec.num_envs=2", "vec.envs_per_batch=null",
                       *(["vec.num_workers=2"] if backend == "multiprocessing" else []))
        return make_vecenv(cfg, make_env_creator(cfg), seed=3)

    def actions(vec):
        vec.action_space.seed(0)  # the same valid random actions on both backends
        return lambda step: vec.action_space.sample()

    assert_backends_agree(make, 40, 3, actions)
    result = cli(f"env={name}", "vec=multiprocessing", "vec.num_envs=2", "vec.num_workers=2",
                 "vec.envs_per_batch=null", "train.num_steps=64", "train.num_minibatches=2",
                 "train.total_timesteps=2048", "eval.episodes=1", "eval.max_steps=200", timeout=600)
    assert "eval/return_mean" in result.stdout + result.stderr


def test_the_generic_pettingzoo_config_takes_any_module_and_nothing_of_kaz(make_cfg):
    cfg = make_cfg("env=pettingzoo/parallel", "env.module=mpe2.simple_spread_v3", "+env.kwargs.N=2")
    assert dict(cfg.env.kwargs) == {"N": 2}  # no max_cycles: 900 from the KAZ config
    env = make_env_creator(cfg)()
    assert env.num_agents == 2 and env.name.startswith("simple_spread")
    with pytest.raises(ConfigError, match="env.module is required"):
        validate(make_cfg("env=pettingzoo/parallel"))


class BrokenConstructor:
    """An env whose constructor fails (a broken dependency of a real suite, say)."""

    def __init__(self, **kwargs):
        raise AttributeError("module 'mujoco' has no attribute 'MjModel'")


def test_an_env_whose_constructor_fails_is_one_line_naming_the_id_and_the_cause(make_cfg):
    import gymnasium as gym

    gym.register(id="puffer_test/Broken-v0", entry_point=BrokenConstructor)
    creator = make_env_creator(make_cfg("env=classic/gym", "env.id=puffer_test/Broken-v0"))
    with pytest.raises(ConfigError, match=r"env.id='puffer_test/Broken-v0': making it failed \(AttributeError: "
                                          "module 'mujoco' has no attribute 'MjModel'\\)"):
        creator()


def test_an_unregistered_id_points_at_the_package_prefix(make_cfg):
    creator = make_env_creator(make_cfg("env=classic/gym", "env.id=MiniGrid-NoSuch-v0"))
    with pytest.raises(ConfigError, match="env.id=<package>:<id>"):
        creator()


@pytest.mark.parametrize(("module", "install"), [
    ("pettingzoo.sisl.nosuch_v0", "pip install 'pettingzoo\\[sisl\\]'"),
    ("pettingzoo.butterfly.nosuch_v0", "pip install 'puffer\\[pettingzoo\\]'"),
])
def test_a_pettingzoo_module_that_does_not_import_names_its_familys_extra(make_cfg, module, install):
    creator = make_env_creator(make_cfg("env=pettingzoo/parallel", f"env.module={module}"))
    with pytest.raises(ConfigError, match=install):
        creator()


def test_a_run_is_labelled_by_the_maker_the_config_names(make_cfg):
    from puffer.envs import describe

    assert describe(make_cfg("env._target_=my_lab.envs.make").env) == "my_lab.envs.make"
    assert describe(make_cfg("env=classic/acrobot").env) == "Acrobot-v1"
