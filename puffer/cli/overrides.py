"""Command-line `key=value` overrides checked before Hydra sees them, so that a mistake is one
line with its fix and never a run: an unknown key names the nearest valid ones, a key that moved
names its new home, a key without its group names the group, and `+key` into a typed group (which
Hydra would store beside the schema and nothing would read) is refused the same way.

What lives here: the check and its messages. What does not: the schemas (puffer.config) and the
env= choices (puffer.envs.catalog). HYDRA_FULL_ERROR=1 skips the check and leaves it to Hydra.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from puffer.config.resume import MOVED_TO_RUNTIME

log = logging.getLogger(__name__)

# Keys of earlier versions -> where they live now.
MOVED = {
    **{f"train.{key}": f"runtime.{key}" for key in MOVED_TO_RUNTIME},
    "train.eval_episodes": "eval.episodes",
    "vec.batch_size": "vec.envs_per_batch",
    "env.num_envs": "env.num_rows (an ocean env's rows; vec.num_envs counts env objects)",
}


def split(arg: str) -> tuple[str, str, str] | None:
    """(prefix '+' / '++' / '', key, value) of a `key=value` override (a group choice such as
    env=... too); None for flags, deletions (~key), hydra.* keys and Hydra's group@package and
    group/subgroup forms."""
    if arg.startswith(("-", "~")) or "=" not in arg:
        return None
    key, value = arg.split("=", 1)
    prefix = "++" if key.startswith("++") else "+" if key.startswith("+") else ""
    key = key[len(prefix):]
    if "@" in key or "/" in key or key.startswith("hydra."):
        return None
    return prefix, key, value


def leaf_paths(node, prefix: str = "") -> list[str]:
    paths = []
    for key in node:
        path = f"{prefix}{key}"
        value = node._get_node(key)
        if isinstance(value, DictConfig) and not value._is_missing() and not value._is_none():
            paths += leaf_paths(value, f"{path}.")
        paths.append(path)
    return paths


def _typed(node) -> bool:
    """A node whose keys a schema fixes (a dataclass), where Hydra's `+key` would add one that
    nothing reads."""
    return isinstance(node, DictConfig) and dataclasses.is_dataclass(OmegaConf.get_type(node))


def problem(cfg: DictConfig, arg: str) -> str | None:
    """The one-line error for override `arg` against the composed `cfg`, or None if it is fine."""
    parts = split(arg)
    if parts is None:
        return None
    prefix, key, _ = parts
    parent_key, _, leaf = key.rpartition(".")
    parent = OmegaConf.select(cfg, parent_key, throw_on_missing=False) if parent_key else cfg
    if isinstance(parent, DictConfig) and leaf in parent.keys():
        if prefix == "+":  # Hydra's `+` adds a key that is not there yet
            return f"{arg}: {key} is a key already; set it with {key}={parts[2]}"
        return None  # (a ??? value that must be set is a key too)
    if parent_key and isinstance(parent, DictConfig) and not _typed(parent):
        if prefix:
            return None  # +env.kwargs.x=...: a free-form dict takes new keys
        return f"{arg}: {parent_key} has no key {leaf} yet; add one with +{key}=..."
    if key in MOVED:
        return f"{arg}: {key} has moved; it is {MOVED[key]} now"
    if parent_key == "train" and not prefix:
        owners = algorithms_with(leaf)
        if owners:
            chosen = algorithm_options(OmegaConf.get_type(cfg.train))
            return (f"{arg}: train.{leaf} is not a setting of {' or '.join(f'train={o}' for o in chosen)}; "
                    f"it is one of {', '.join(f'train={o}' for o in owners)}")
    paths = leaf_paths(cfg)
    if not parent_key:  # a key without its group: learning_rate=1e-3
        homes = [p for p in paths if p.rsplit(".", 1)[-1] == key]
        if homes:
            return f"{arg}: no top-level key {key}; did you mean {' or '.join(homes)}?"
    near = difflib.get_close_matches(key, paths, n=3, cutoff=0.75)
    hint = f"did you mean {', '.join(near)}? " if near else ""
    what = (f"{parent_key or 'the config'} takes no new key {leaf} (its keys are typed)" if prefix
            else f"no key {key}")
    return f"{arg}: {what}; {hint}`python -m puffer --cfg job` prints every key"


def algorithm_schemas() -> dict[str, type]:
    """Each train= option (conf/train/<option>.yaml) with the schema its defaults link."""
    import re

    from puffer.config import CONF_DIR
    from puffer.config.schema import ALGORITHM_SCHEMAS

    found = {}
    for path in sorted((CONF_DIR / "train").glob("*.yaml")):
        linked = re.search(r"/schema/(\w+)@_here_", path.read_text())
        if linked and linked[1] in ALGORITHM_SCHEMAS:
            found[path.stem] = ALGORITHM_SCHEMAS[linked[1]]
    return found


def algorithm_options(schema: type) -> list[str]:
    """The train= options whose settings `schema` types (PPO's: ppo and spo)."""
    return [option for option, linked in algorithm_schemas().items() if linked is schema] or ["?"]


def algorithms_with(key: str) -> list[str]:
    """The train= options that have `key` among their settings."""
    return [option for option, schema in algorithm_schemas().items()
            if key in {f.name for f in dataclasses.fields(schema)}]


# Hydra's own command-line flags (python -m puffer --help lists them), and those that take a value.
FLAGS_WITH_VALUES = {"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn",
                     "--config-dir", "-cd", "--info", "-i", "--experimental-rerun", "--shell-completion", "-sc"}
HYDRA_FLAGS = FLAGS_WITH_VALUES | {"--help", "-h", "--hydra-help", "--version", "--resolve", "--run", "-r",
                                   "--multirun", "-m"}


def habits(args: list[str]) -> tuple[list[str], str | None]:
    """Other libraries' command-line habits (PufferLib's `puffer train <env>`, argparse flags):
    (the arguments, the first bare word read as mode=<it> where it names a mode; the one-line
    pointer for the first habit puffer cannot read, or None)."""
    from puffer.config.schema import MODES

    words = [i for i, arg in enumerate(args) if "=" not in arg and not arg.startswith("-")
             and not (i and args[i - 1] in FLAGS_WITH_VALUES)]
    if words and args[words[0]] in MODES:
        args = [*args[:words[0]], f"mode={args[words[0]]}", *args[words[0] + 1:]]
    for i, arg in enumerate(args):
        previous = args[i - 1] if i else ""
        if arg.startswith("--") and arg.split("=", 1)[0] not in HYDRA_FLAGS:
            flag, _, value = arg[2:].partition("=")
            value = value or (args[i + 1] if i + 1 < len(args) and "=" not in args[i + 1]
                              and not args[i + 1].startswith("-") else "<value>")
            key = flag.replace("-", "_")
            spelled = {"env_id": f"env=classic/gym env.id={value}", "env": f"env={value}"}.get(key, f"{key}={value}")
            return args, (f"{arg}: puffer's settings are key=value overrides, not flags: {spelled} "
                          "(python -m puffer --cfg job prints every key)")
        if "=" not in arg and not arg.startswith("-") and previous not in FLAGS_WITH_VALUES:
            return args, (f"{arg}: puffer takes key=value overrides; an env is env=<name> (python -m puffer "
                          f"--info envs lists them), a mode the first word or mode=<name> ({', '.join(MODES)})")
    return args, None


def composition_error(exc: Exception, args: tuple[str, ...] = ()) -> str | None:
    """Hydra's multi-line composition errors as one line: an unknown group option with the
    options there are, a value of the wrong type with the type expected."""
    from hydra.errors import ConfigCompositionException, MissingConfigException

    text = str(exc)
    if isinstance(exc, MissingConfigException) and "Could not find '" in text:
        missing = text.split("Could not find '", 1)[1].split("'", 1)[0]  # e.g. vec/foo
        group, _, option = missing.rpartition("/")
        options = [line.strip() for line in text.split("Available options in", 1)[-1].splitlines()[1:]
                   if line.startswith("\t") and "provider=" not in line] if "Available options" in text else []
        near = difflib.get_close_matches(option, options, n=1, cutoff=0.5)
        hint = f"did you mean {group}={near[0]}? " if near else ""
        if (group, option) == ("policy", "lstm"):  # an LSTM wraps any policy
            hint = "an LSTM on top of a policy is policy.rnn=lstm; "
        return (f"{group}={option}: no such option; {hint}{group} takes {', '.join(options)}" if options
                else f"{missing}: no such config")
    if (isinstance(exc, ConfigCompositionException) and exc.__cause__ is not None
            and text.startswith("Error merging override ")):
        override = text.removeprefix("Error merging override ").strip()
        reason = str(exc.__cause__).splitlines()[0]
        key, _, value = override.partition("=")
        if "converted to Integer" in reason and _integral(value):  # 1e6: YAML reads a float
            reason += f"; an integer is written without an exponent: {key}={int(float(value))}"
        return f"{override}: {reason}"
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    if isinstance(exc, (HydraException, OmegaConfBaseException)):  # any other: Hydra's first lines
        because = str(exc.__cause__).splitlines()[0] if exc.__cause__ is not None else text.splitlines()[0]
        key = text.split("Could not override '", 1)[1].split("'", 1)[0] if "Could not override '" in text else None
        arg = next((a for a in args if key and a.split("=", 1)[0].lstrip("+") == key), None)
        return f"{arg}: {because}" if arg else text.splitlines()[0].rstrip(".") + f": {because}"
    return None


def _integral(value: str) -> bool:
    try:
        return float(value).is_integer()
    except ValueError:
        return False


def override_args(args: list[str]) -> list[str]:
    """The command line's overrides: its flags and their values left out."""
    return [arg for i, arg in enumerate(args) if not arg.startswith("-")
            and not (i and args[i - 1] in FLAGS_WITH_VALUES)]


def parsed(args: list[str]) -> tuple[dict, str | None]:
    """Each override as Hydra's grammar reads it ({arg: Override}), and the one line for the first
    it cannot read (a bracket left open, a quote missing), which Hydra reports as a few lines and
    exit 1."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    parser, read = OverridesParser.create(), {}
    for arg in override_args(args):
        try:
            (read[arg],) = parser.parse_overrides([arg])
        except OverrideParseException as exc:
            return read, (f"{arg}: not a key=value override Hydra can read ({str(exc).splitlines()[0]}); a list "
                          "is key=[a,b], and a value with spaces or brackets goes in quotes: 'key=[a, b]'")
    return read, None


def config_flags(args: list[str]) -> str | None:
    """--config-dir / --config-name naming a folder or a config that is not there."""
    def value(*flags: str) -> str | None:
        for i, arg in enumerate(args):
            name, eq, given = arg.partition("=")
            if name in flags:
                return given if eq else (args[i + 1] if i + 1 < len(args) else "")
        return None

    from puffer.config import CONF_DIR

    folder = value("--config-dir", "-cd")
    if folder is not None and not Path(folder).is_dir():
        return f"--config-dir={folder}: no such folder"
    name = value("--config-name", "-cn")
    if name is not None:
        found = [d for d in (CONF_DIR, folder and Path(folder)) if d and (d / f"{name.removesuffix('.yaml')}.yaml").is_file()]
        if not found:
            return (f"--config-name={name}: no config {name}.yaml in {CONF_DIR}"
                    + (f" or {folder}" if folder else "") + "; puffer's own is config")
    return None


def check(args: list[str]) -> str | None:
    """The first problem among command-line overrides, checked against the config that their
    group choices (env=..., train=spo, +sweep=..., hydra/launcher=...) compose: each key, each
    value's type (every value of a multirun's list) and each group option (every option of a
    multirun's list)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from puffer.config import CONF_DIR

    read, unreadable = parsed(args)
    missing = unreadable or config_flags(args)
    if missing is not None:
        return missing
    groups = {p.name for p in CONF_DIR.iterdir() if p.is_dir()} | {"sweep", "suite"}
    choices, other_options, keys = [], [], []
    for arg in override_args(args):
        name, eq, value = arg.partition("=")
        key = name.lstrip("+")
        if not eq:
            continue
        if key in groups or key.startswith("hydra/"):  # a group choice (Hydra's own: hydra/launcher=...)
            if "(" in value:  # a sweep function (choice(...), range(...)): not composed here
                return None
            first, *others = value.split(",")  # a multirun's options: the first composes the config
            choices.append(f"{name}={first}")
            other_options += [f"{name}={option}" for option in others]
        elif split(arg) is not None or key.startswith("hydra."):
            keys.append(arg)
    if not choices and not keys:  # the default config: nothing to check (and no compose to pay for)
        return None
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            try:
                cfg = compose(config_name="config", overrides=choices)
                for option in other_options:  # each other option of a multirun's group list
                    key = option.split("=", 1)[0]
                    compose(config_name="config", overrides=[c for c in choices if c.split("=", 1)[0] != key] + [option])
            except Exception as exc:  # a bad group choice, named in one line where we can
                return composition_error(exc)
            message = next((message for arg in keys if (message := problem(cfg, arg)) is not None), None)
            return message or (values_problem(compose, choices, {arg: read[arg] for arg in keys}) if keys else None)
    finally:
        GlobalHydra.instance().clear()


def values_problem(compose, choices: list[str], keys: dict) -> str | None:
    """Each value's type as Hydra merges it: the config composed with every key's first value, then
    each further value of a multirun's list (seed=0,1,a) set on it. `keys`: {arg: its Override}."""
    from hydra.core.override_parser.types import ValueType
    from omegaconf.errors import OmegaConfBaseException

    firsts, rest = [], []
    for arg, override in keys.items():
        if not override.is_sweep_override():
            firsts.append(arg)
            continue
        if override.value_type == ValueType.INTERVAL_SWEEP:  # no list of values: Optuna's to draw
            continue
        values = list(override.sweep_string_iterator())
        name = arg.split("=", 1)[0]
        firsts.append(f"{name}={values[0]}")
        rest += [(f"{name}={value}", name.lstrip("+"), value) for value in values[1:]]
    try:
        cfg = compose(config_name="config", overrides=choices + firsts, return_hydra_config=True)
    except Exception as exc:
        return composition_error(exc, firsts)
    for arg, key, value in rest:
        try:
            OmegaConf.update(cfg, key, value, merge=True)
        except OmegaConfBaseException as exc:  # a value the key's type does not take
            return f"{arg}: {str(exc).splitlines()[0]}"
    return None
