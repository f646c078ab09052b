"""Command-line mistakes are one line with the fix, exit 2, before anything starts (puffer.cli.overrides)."""

from __future__ import annotations

import pytest

from puffer.cli import overrides

MISTAKES = [  # (the command line, what the one line must say)
    (["train.learning_rat=1e-3"], "did you mean train.learning_rate?"),
    (["+train.learning_rat=1e-3"], "train takes no new key learning_rat (its keys are typed); did you mean train.learning_rate?"),
    (["+runtime.chekpoint_interval=5"], "did you mean runtime.checkpoint_interval"),
    (["+eval.episode=5"], "did you mean eval.episodes"),
    (["train.eval_episodes=5"], "train.eval_episodes has moved; it is eval.episodes now"),
    (["train.checkpoint_interval=5"], "it is runtime.checkpoint_interval now"),
    (["learning_rate=1e-3"], "no top-level key learning_rate; did you mean train.learning_rate?"),
    (["env=classic/gym", "env.idd=CartPole-v1"], "did you mean env.id?"),
    (["env=ocean/memory", "env.delai=3"], "did you mean env.delay?"),
    (["-m", "env=ocean/memory,ocean/bandit", "seed=0,1", "train.gama=0.9"], "did you mean train.gamma?"),
    (["env=classic/gym", "env.id=CartPole-v1", "env.kwargs.sutton_barto_reward=true"],
     "env.kwargs has no key sutton_barto_reward yet; add one with +env.kwargs.sutton_barto_reward=..."),
    (["vec=multiproc"], "vec=multiproc: no such option; did you mean vec=multiprocessing? vec takes auto, "
                        "multiprocessing, ray, serial"),
    (["train=sp0"], "did you mean train=spo?"),
    (["train.learning_rate=abc"], "train.learning_rate=abc: Value 'abc' of type 'str' could not be converted to Float"),
    (["env=ocean/memory", "env.delay=1.5"], "could not be converted to Integer"),
    (["eval.video=maybe"], "is not a valid bool"),
    # Hydra's own rejections, each a few lines and exit 1 from Hydra itself
    (["train.learning_rate=["], "not a key=value override Hydra can read (no viable alternative at input '[')"),
    (["+train.learning_rate=1"], "train.learning_rate is a key already; set it with train.learning_rate=1"),
    (["hydra/launcher=nosuch"], "hydra/launcher=nosuch: no such option; hydra/launcher takes basic, joblib"),
    (["hydra/sweeper=optina"], "did you mean hydra/sweeper=optuna? hydra/sweeper takes basic, optuna"),
    (["hydra.job.chdir=maybe"], "Value 'maybe' is not a valid bool"),
    (["hydra.nosuch=1"], "Key 'nosuch' not in 'HydraConf'"),
    (["--config-name=nosuch"], "no config nosuch.yaml in"),
    (["--config-dir=/nonexistent/conf"], "no such folder"),
]

MULTIRUN_MISTAKES = [  # every value of a multirun's list, not its first alone
    (["-m", "seed=0,1,b"], "seed=b: Value 'b' of type 'str' could not be converted to Integer"),
    (["-m", "hydra/launcher=members", "seed=a,1"], "seed=a: Value 'a' of type 'str'"),
    (["-m", "train=ppo,sp0"], "train=sp0: no such option; did you mean train=spo?"),
    (["-m", "env=ocean/memory", "env.delay=1,2.5"], "env.delay=2.5: Value '2.5' of type 'str' could not be converted to Integer"),
]


@pytest.mark.parametrize(("args", "says"), MISTAKES)
def test_each_mistake_is_named_with_its_fix(args, says):
    message = overrides.check(args)
    assert message is not None and says in message and "\n" not in message
    assert message.startswith(args[-1] + ":")  # each list ends with its mistake


@pytest.mark.parametrize(("args", "says"), MULTIRUN_MISTAKES)
def test_each_value_of_a_multirun_list_is_checked(args, says):
    message = overrides.check(args)
    assert message is not None and message.startswith(says) and "\n" not in message


@pytest.mark.parametrize("args", [
    ["train.learning_rate=1e-3", "seed=3", "device=cpu"],
    ["-m", "seed=range(0,3)", "train.learning_rate=0.001,0.003", "hydra.sweep.dir=x"],
    ["-m", "hydra/sweeper=optuna", "train.learning_rate=interval(0.001,0.01)"],
    ["--cfg", "job", "seed=3"],
    ["-m", "++train.learning_rate=0.001,0.003"],
    ["env=ocean/memory", "env.delay=3", "policy.rnn=lstm"],
    ["env=classic/gym", "env.id=CartPole-v1", "+env.kwargs.sutton_barto_reward=true"],  # a free-form dict
    ["env=pettingzoo/parallel", "env.module=mpe2.simple_spread_v3", "logger=wandb", "logger.project=p"],
    ["-m", "env=classic/cartpole,ocean/cartpole", "seed=0,1,2", "hydra/launcher=basic"],
    ["mode=eval", "checkpoint=outputs/run", "eval.video=true"],
    ["-m", "+sweep=time_to_score", "train.total_timesteps=1000"],
    ["train.learning_rate=choice(1e-3,3e-3)", "env=choice(ocean/memory,ocean/bandit)"],  # sweep syntax
])
def test_valid_command_lines_pass(args):
    assert overrides.check(args) is None


def test_a_typo_exits_2_with_one_line_and_writes_no_run_directory(cli, tmp_path):
    result = cli("+train.learning_rat=1e-3", check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "+train.learning_rat=1e-3: train takes no new key learning_rat (its keys are typed); did you "
        "mean train.learning_rate? `python -m puffer --cfg job` prints every key"]
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("args", [["hydra/launcher=nosuch"], ["-m", "seed=0,x"], ["hydra.run.dir="]])
def test_hydra_level_rejections_exit_2_with_one_line(cli, tmp_path, args):
    result = cli(*args, check=False)
    assert (result.returncode, len(result.stderr.strip().splitlines())) == (2, 1), result.stderr
    assert not (tmp_path / "run").exists() and not (tmp_path / "multirun").exists()


@pytest.mark.parametrize(("args", "blocked", "says"), [
    (["env=atari/breakout"], "ale_py", "env=atari/breakout needs the atari extra (ale_py is not installed): "
                                       "pip install 'puffer[atari]'"),
    (["logger=tensorboard"], "tensorboard", "pip install 'puffer[tensorboard]'"),
    (["-m", "+sweep=ppo_optuna"], "hydra_plugins.hydra_optuna_sweeper", "pip install 'puffer[sweeps]'"),
    # puffer's own launcher configs, through the Hydra plugin each builds on (was Hydra's 9 lines)
    (["-m", "seed=0,1", "hydra/launcher=local_parallel"], "hydra_plugins.hydra_joblib_launcher",
     "hydra/launcher=local_parallel needs the sweeps extra"),
    (["-m", "seed=0,1", "hydra/launcher=slurm"], "hydra_plugins.hydra_submitit_launcher",
     "hydra/launcher=slurm needs the sweeps extra"),
    (["-m", "seed=0,1", "hydra/launcher=ray_cluster"], "hydra_plugins.hydra_ray_launcher",
     "hydra/launcher=ray_cluster needs the sweeps extra"),
])
def test_a_missing_extra_is_named_before_anything_starts(tmp_path, args, blocked, says):
    """The extra's module made unimportable in a fresh interpreter (as if never installed)."""
    import subprocess
    import sys

    script = (f"import sys; sys.modules[{blocked!r}] = None; from puffer.__main__ import cli; "
              f"sys.argv = ['puffer', *{args!r}, 'hydra.run.dir=run', 'hydra.sweep.dir=multirun']; cli()")
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2 and says in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not list(tmp_path.iterdir())


def test_a_suite_without_multirun_is_refused(cli, tmp_path):
    result = cli("+suite=classic", check=False)
    assert result.returncode == 2 and "+suite=classic is a grid of runs: add -m" in result.stderr
    assert not (tmp_path / "run").exists()
    shown = cli("+suite=classic", "--cfg", "hydra")  # printing the grid runs nothing: allowed
    assert "classic/acrobot" in shown.stdout


def test_the_report_without_matplotlib_names_the_extra(tmp_path):
    import subprocess
    import sys

    script = ("import sys; sys.modules['matplotlib'] = None; from puffer.report.__main__ import main; "
              f"sys.argv = ['report', {str(tmp_path)!r}]; main()")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip() == ("python -m puffer.report needs matplotlib for its plots (the sweeps "
                                     "extra): pip install 'puffer[sweeps]'")


def test_info_envs_tells_a_pettingzoo_family_whose_own_dependencies_are_missing():
    """pettingzoo installed but not what its sisl family imports (Box2D): multiwalker is not
    runnable, and the line says what installs it; the butterfly family still is."""
    import subprocess
    import sys

    script = ("import sys; sys.modules['Box2D'] = None; from puffer.__main__ import cli; "
              "sys.argv = ['puffer', '--info', 'envs']; cli()")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    rows = {line.split()[0]: line.split()[2:] for line in result.stdout.splitlines()[1:]}
    assert rows["pettingzoo/multiwalker"] == ["no", "pip", "install", "'pettingzoo[sisl]'"]
    assert rows["pettingzoo/kaz"][0] == "yes" and rows["box2d/lunarlander"][0] == "no"


@pytest.mark.parametrize("override", ["train.learning_rat=1e-3", "+train.learning_rat=1e-3"])
def test_the_python_api_runs_the_clis_checks(tmp_path, override):
    """puffer.train(...) was a 57-line Hydra traceback for a typo, and trained at the default rate
    with exit 0 for its `+key` form."""
    import puffer
    from puffer.errors import ConfigError

    with pytest.raises(ConfigError, match=r"train\.learning_rate") as raised:
        puffer.train(override, run_dir=tmp_path / "run")
    assert len(str(raised.value).splitlines()) == 1
    assert not (tmp_path / "run").exists()


BAD_VALUES = [  # (overrides, the key the one line names): each refused before any env starts
    (["runtime.torch_threads=100000"], "runtime.torch_threads=100000"),  # segfaulted inside OpenMP
    (["seed=99999999999999999999"], "seed=99999999999999999999"),  # an overflow traceback
    (["trial_seeds=0"], "trial_seeds=0"),  # an IndexError: a job of no runs
    (["trial_seeds=-1"], "trial_seeds=-1"),
    (["env=ocean/cartpole", "env.num_rows=0"], "env.num_rows=0"),  # ZeroDivisionError
    (["env=ocean/cartpole", "env.num_rows=-1"], "env.num_rows=-1"),
    (["env=ocean/snake", "env.size=0"], "env.size=0"),
    (["objective=[nosuch/metric]"], "objective='nosuch/metric'"),  # a sweep then optimised NaN
    (["checkpoint=some/run"], "checkpoint='some/run'"),  # ignored by mode=train, in silence
    (["eval.score=nan"], "eval.score=nan"),  # accepted in silence
]


@pytest.mark.parametrize(("args", "names"), BAD_VALUES)
def test_each_bad_value_is_one_line_before_any_env_starts(make_cfg, tmp_path, args, names):
    from puffer.errors import ConfigError
    from puffer.run import run_seeds

    with pytest.raises(ConfigError) as raised:
        run_seeds(make_cfg(*args, "train.total_timesteps=1024"), tmp_path / "run")
    message = str(raised.value)
    assert message.startswith(f"{names}: expected") and "\n" not in message
    assert not (tmp_path / "run").exists()  # not even the run directory


def test_a_wrapper_missing_its_arguments_is_one_line_naming_it(make_cfg, tmp_path):
    from puffer.errors import ConfigError
    from puffer.run import run

    with pytest.raises(ConfigError, match=r"env.wrappers\[0\]='gymnasium.wrappers.TimeLimit': .*'max_episode_steps'.*"
                                          r"\{_target_: gymnasium.wrappers.TimeLimit, <argument>: <value>\}"):
        run(make_cfg("env.wrappers=[gymnasium.wrappers.TimeLimit]", "train.total_timesteps=1024"), tmp_path / "run")


def test_bad_values_exit_2_with_one_line_from_the_cli(cli):
    result = cli("trial_seeds=0", check=False)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() + result.stdout.splitlines() if "[ERROR]" in line]
    assert len(errors) == 1 and "trial_seeds=0: expected an integer >= 1" in errors[0]
    assert "Traceback" not in result.stderr + result.stdout


def test_an_uneven_minibatch_split_is_said_with_the_key(make_cfg, caplog):
    from puffer.config.validate import validate

    validate(make_cfg("train.num_minibatches=3"))  # 8 envs x 64 steps = 512
    assert "train.num_minibatches=3 does not divide the batch of train.num_steps * vec.num_envs = 512 steps: " \
           "its minibatches hold 171 and 170 steps" in caplog.text


@pytest.mark.parametrize(("args", "says"), [
    (["puffer_breakout", "seed=1"], "puffer_breakout: puffer takes key=value overrides; an env is env=<name>"),
    (["--env-id", "CartPole-v1"], "--env-id: puffer's settings are key=value overrides, not flags: "
                                  "env=classic/gym env.id=CartPole-v1"),
    (["--train.learning-rate", "3e-4"], "not flags: train.learning_rate=3e-4"),
    (["--total-timesteps=1000"], "not flags: total_timesteps=1000"),
])
def test_other_libraries_habits_get_a_pointer(args, says):
    _, problem = overrides.habits(args)
    assert problem is not None and problem.startswith(f"{args[0]}: ") and says in problem and "\n" not in problem


def test_the_first_word_may_name_the_mode_and_hydras_flags_pass():
    assert overrides.habits(["eval", "checkpoint=latest"]) == (["mode=eval", "checkpoint=latest"], None)
    assert overrides.habits(["seed=1", "train", "x"]) == (["seed=1", "mode=train", "x"],
                                                          overrides.habits(["x"])[1])  # then x: no mode
    assert overrides.habits(["--cfg", "job", "-m", "seed=0,1", "--info", "envs"])[1] is None


@pytest.mark.parametrize(("args", "says"), [
    (["train.total_timesteps=1e6"], "an integer is written without an exponent: train.total_timesteps=1000000"),
    (["policy=lstm"], "an LSTM on top of a policy is policy.rnn=lstm"),
])
def test_a_float_budget_and_policy_lstm_say_the_form_that_works(args, says):
    message = overrides.check(args)
    assert message is not None and says in message


def test_puffer_train_with_the_mode_first_trains(cli, tmp_path):
    result = cli("train", "train.total_timesteps=512", "eval.episodes=0")
    assert (tmp_path / "run" / "model.safetensors").exists(), result.stderr


@pytest.mark.parametrize("folder", ["/proc/puffer-run", "/sys/puffer-run"])
def test_a_run_dir_the_system_refuses_is_one_line(folder):
    """Writable by the permission bits (as root), refused by the kernel: was Hydra's traceback."""
    import subprocess
    import sys
    from pathlib import Path

    result = subprocess.run([sys.executable, "-m", "puffer", f"hydra.run.dir={folder}"], capture_output=True,
                            text=True, timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().startswith(f"hydra.run.dir='{folder}': ")
    assert "refuses a new folder" in result.stderr or "is not writable" in result.stderr


def test_help_piped_into_a_reader_that_leaves_early_is_no_traceback(tmp_path):
    import subprocess
    import sys

    result = subprocess.run(f"{sys.executable} -m puffer --help | head -1", shell=True, cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert result.stdout.startswith("puffer:") and "Traceback" not in result.stderr, result.stderr
