"""Command-line mistakes are one line with the fix, exit 2, before anything starts (puffer.overrides)."""

from __future__ import annotations

import pytest

from puffer import overrides

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
]


@pytest.mark.parametrize(("args", "says"), MISTAKES)
def test_each_mistake_is_named_with_its_fix(args, says):
    message = overrides.check(args)
    assert message is not None and says in message and "\n" not in message
    assert message.startswith(args[-1] + ":")  # each list ends with its mistake


@pytest.mark.parametrize("args", [
    ["train.learning_rate=1e-3", "seed=3", "device=cpu"],
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
