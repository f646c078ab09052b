"""Resuming: a checkpoint's config in this version's layout, the check that it fits the run that
resumes it, and the run config a resume continues with.

What lives here: `saved_config` (a saved config migrated: renamed keys, moved sections, renamed
code paths: puffer.renamed), `check_resumable`, `resumed_config`. What does not: reading
the checkpoint file (puffer.files.checkpoint).
"""

from __future__ import annotations

import errno
from pathlib import Path

from omegaconf import OmegaConf

from puffer.errors import CheckpointError, ConfigError
from puffer.renamed import migrate_config

# What a checkpoint's tensors are shaped by: resuming with other values cannot work.
SHAPING_KEYS = ("vec.num_envs", "train.num_steps")


def check_resumable(path: Path, state: dict, cfg) -> None:
    """Before any env starts: `path` is a training checkpoint, and the env, the policy and the
    keys that shape its tensors are the ones it was trained with (each difference named)."""
    if "optimizer" not in state:
        raise CheckpointError(
            errno.EINVAL, f"resume={cfg.resume!r}: {path} holds a trained policy only (an older run's model.pt: for puffer.load "
            "and mode=eval); resume needs a training checkpoint: the run directory or its "
            "checkpoints/epoch_*.pt")
    saved = saved_config(state)
    if not saved:
        return
    now = OmegaConf.to_container(cfg, resolve=True)
    differences = [f"{key}: {a!r} in the checkpoint, {b!r} now"
                   for key, a, b in config_differences(saved, now, ("env", "policy"), SHAPING_KEYS)]
    if differences:
        raise ConfigError(f"resume={cfg.resume!r}: {path} was trained with other settings: "
                          + "; ".join(differences) + ". Pass the original run's values (its "
                          "config.yaml) or start a new run without resume")


# What a resumed run takes from its checkpoint's config unless the command line sets it: the
# run itself. The rest (mode, logger, eval, device, profile, ...) is how this invocation runs.
RUN_SECTIONS = ("env", "vec", "policy", "train", "runtime", "seed")
# Keys that checkpoints written before the runtime section existed hold under train.
MOVED_TO_RUNTIME = ("checkpoint_interval", "keep_checkpoints", "torch_threads", "rollout_threads",
                    "compile", "retain_memory", "amp", "log_interval")


def saved_config(state: dict) -> dict | None:
    """The run config a checkpoint was written with, in this version's layout: keys renamed
    since (vec.batch_size is vec.envs_per_batch, an ocean env's num_envs its num_rows), train
    keys moved to runtime, and code paths renamed since (puffer.renamed)."""
    saved = state.get("config")
    if not saved:
        return saved
    saved = migrate_config(dict(saved))
    if isinstance(saved.get("vec"), dict) and "batch_size" in saved["vec"]:
        vec = dict(saved["vec"])
        vec["envs_per_batch"] = vec.pop("batch_size")
        saved["vec"] = vec
    env = saved.get("env")
    if isinstance(env, dict) and str(env.get("_target_", "")).startswith("puffer.envs.ocean") and "num_envs" in env:
        env = dict(env)
        env["num_rows"] = env.pop("num_envs")
        saved["env"] = env
    if "runtime" not in saved and isinstance(saved.get("train"), dict):
        train = dict(saved["train"])
        saved["runtime"] = {key: train.pop(key) for key in MOVED_TO_RUNTIME if key in train}
        saved["train"] = train
    return saved


def resumed_config(cfg, state: dict, overrides: list[str] | None):
    """`cfg` with the checkpoint's env, vec, policy, train, runtime and seed, except the keys (or
    groups) that `overrides` (this command line) set: `resume=<run>` alone continues that run as
    it was configured. With `overrides` None (a config built in Python), `cfg` is taken as it is."""
    saved = saved_config(state)
    if not saved or overrides is None:
        return cfg
    merged = cfg.copy()
    for section in RUN_SECTIONS:
        if section in saved:
            try:
                # env and policy are replaced whole (their keys depend on the kind of env or
                # model: an Atari checkpoint has no env.id); vec, train and runtime take the saved values
                # key by key into their schemas
                merged[section] = (OmegaConf.merge(merged[section], saved[section])
                                   if section in ("vec", "train", "runtime") else saved[section])
            except Exception as exc:  # omegaconf's validation errors: a key this version lacks
                raise ConfigError(f"resume={cfg.resume!r}: the checkpoint's {section} config does not fit "
                                  f"this version of puffer ({exc}); pass the settings on the command line "
                                  "or start a new run") from None
    for override in overrides:
        key = override.lstrip("+~").split("=", 1)[0].split("@", 1)[0]
        if key.split("/")[0].split(".")[0] not in RUN_SECTIONS:
            continue
        # a group choice (env=atari/breakout) sets its whole section
        key = key.split("/")[0]
        OmegaConf.update(merged, key, OmegaConf.select(cfg, key), merge=False, force_add=True)
    return merged


def config_differences(saved: dict, now: dict, sections: tuple, keys: tuple) -> list[tuple]:
    """(dotted key, saved value, current value) where they differ, over whole `sections` and
    single `keys`."""
    def flat(node, prefix):
        if isinstance(node, dict):
            for key, value in node.items():
                yield from flat(value, f"{prefix}.{key}")
        else:
            yield prefix, node

    def get(config, dotted):
        for part in dotted.split("."):
            config = config.get(part) if isinstance(config, dict) else None
        return config

    names = set(keys)
    for section in sections:
        names |= {key for key, _ in flat(saved.get(section), section)}
        names |= {key for key, _ in flat(now.get(section), section)}
    return [(key, get(saved, key), get(now, key)) for key in sorted(names)
            if get(saved, key) != get(now, key)]


def overridden(group: str, overrides: list[str] | None) -> bool:
    """Whether the command line (`overrides`) set `group` (e.g. env=... or env.id=...)."""
    return any(o.lstrip("+~").startswith((f"{group}=", f"{group}.", f"{group}/")) for o in overrides or [])
