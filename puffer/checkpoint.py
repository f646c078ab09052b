"""Checkpoints: signed, written atomically, the last K kept, found again by `resume=<path>|latest`.

What lives here: the file side (atomic writes, signing, pruning, finding and reading the latest,
with a fallback past an unreadable or unsigned one), the check that a checkpoint fits the run
resuming from it, and the process-wide random states. What goes into a checkpoint is the
trainer's `state_dict` (puffer.trainer); the model file a user shares is puffer.model_file's.

The file: MAGIC, the length of a JSON header, the header (format, the signing key's id, the
HMAC-SHA256 of the payload under this user's key: puffer.trust), then the payload, `torch.save`'s
zip. It is read with torch's `weights_only=True` (tensors, numbers, strings, bytes and numpy
arrays, nothing that runs code); the envs inside it, pickled by their workers, are unpickled only
when resuming from a checkpoint whose signature verifies, or with `trust_code`.
"""

from __future__ import annotations

import errno
import io
import json
import logging
import os
import pickle
import random
import struct
from pathlib import Path

import numpy as np
import torch

from puffer import trust
from puffer.trust import OPT_IN, UntrustedFileError

log = logging.getLogger(__name__)

PATTERN = "epoch_*.pt"
MAGIC = b"PUFFER-SIGNED-CHECKPOINT\n"
FORMAT = 1


class CheckpointError(OSError):
    """A checkpoint could not be written or found; earlier checkpoints are intact."""


def save_atomic(obj, path: Path) -> None:
    """`obj` as a signed checkpoint file at `path` (see the module's docstring), written atomically."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    payload = buffer.getvalue()
    key = trust.user_key()
    header = json.dumps({"format": FORMAT, "key_id": trust.key_id(key),
                         "hmac_sha256": trust.sign(payload, key)}).encode()
    write_atomic(path, [MAGIC, struct.pack("<Q", len(header)), header, payload])


def write_atomic(path: Path, chunks: list[bytes], what: str = "checkpoint") -> None:
    """Write to a temporary file, fsync, then rename: a crash, an interrupt or a full disk never
    leaves a torn file (nor its temporary file), and the previous one stays as it was."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tmp.open("wb") as file:
            for chunk in chunks:
                file.write(chunk)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        code = exc.errno or (errno.ENOSPC if _disk_full(path) else errno.EIO)
        tmp.unlink(missing_ok=True)
        reason = "the disk is full" if code == errno.ENOSPC else exc.strerror or str(exc)
        raise CheckpointError(code, f"could not write {what} {path}: {reason}") from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _disk_full(path: Path) -> bool:
    try:
        stats = os.statvfs(path.parent)
    except OSError:
        return False
    return stats.f_bavail * stats.f_frsize < 1 << 20


def prune(directory: Path, keep: int) -> None:
    """Delete all but the newest `keep` checkpoints (0 keeps them all)."""
    if keep <= 0:
        return
    for old in sorted(directory.glob(PATTERN))[:-keep]:
        old.unlink()


def candidates(root: str | Path, single_runs: bool = False) -> list[Path]:
    """Checkpoints under `root`, newest first. `single_runs`: leave out the jobs of multiruns
    (outputs/multirun/...), which `resume=latest` must not pick up."""
    root = Path(root)
    found = [p for p in root.glob(f"**/checkpoints/{PATTERN}")
             if not (single_runs and "multirun" in p.relative_to(root).parts)]
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def find_latest(root: str | Path, key: str = "resume") -> Path:
    """The newest checkpoint under `root` (a run directory or the whole outputs/ tree); `key`
    is the config key that asked, for the error."""
    found = candidates(root, single_runs=True)
    if not found:
        raise CheckpointError(errno.ENOENT, f"{key}=latest: no checkpoint under {Path(root).resolve()}")
    return found[0]


def read(path: str | Path, key: str = "resume", map_location=None, trust_code: bool = False,
         envs: bool = True) -> dict:
    """The checkpoint at `path`, with an error that names the file when it is torn, empty or not
    a checkpoint. `envs`: the caller will unpickle the envs inside it (a resume), so the file must
    be signed by this user's key, or `trust_code` given; without them (the policy alone, as
    puffer.load reads it) an unsigned file is read all the same, since nothing in it is
    unpickled but data."""
    path = Path(path)
    where = f"{key}: {path}"
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CheckpointError(exc.errno or errno.EIO, f"{where} cannot be read: {exc.strerror}") from None
    if data.startswith(MAGIC):
        header, payload = _split(data, where)
        signed = trust.verify(payload, str(header.get("hmac_sha256", "")))
        if envs and not signed and not trust_code:
            raise UntrustedFileError(
                f"{where} is not signed by this user's key (signed by key {header.get('key_id')}, "
                f"yours is {trust.key_id(trust.user_key())}): it was written by another user or "
                f"machine, or changed since, and resuming unpickles the envs inside it; {OPT_IN}")
        state = _load_payload(payload, where, map_location, unpickle=signed or trust_code)
    elif not trust_code:
        if not data.startswith(b"PK"):  # not torch's zip either
            raise CheckpointError(errno.EIO, f"{where} is not a readable checkpoint (truncated, empty or "
                                  "another kind of file)")
        raise UntrustedFileError(f"{where} is an unsigned checkpoint (written by puffer before it signed "
                                 f"its checkpoints, or by another program), and reading it unpickles "
                                 f"whatever it holds; {OPT_IN}")
    else:
        state = _load_payload(data, where, map_location, unpickle=True)
    if not isinstance(state, dict) or "policy" not in state:
        raise CheckpointError(errno.EINVAL, f"{where} is not a puffer checkpoint")
    return state


def _split(data: bytes, where: str) -> tuple[dict, bytes]:
    """A signed file's (header, payload)."""
    start = len(MAGIC) + 8
    try:
        (length,) = struct.unpack("<Q", data[len(MAGIC):start])
        header = json.loads(data[start:start + length])
    except (struct.error, ValueError) as exc:
        raise CheckpointError(errno.EIO, f"{where} is not a readable checkpoint (truncated header: "
                              f"{exc})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise CheckpointError(errno.EINVAL, f"{where} is a checkpoint of another format "
                              f"({header.get('format') if isinstance(header, dict) else header!r}); "
                              f"this version of puffer reads format {FORMAT}")
    return header, data[start + length:]


def _load_payload(payload: bytes, where: str, map_location, unpickle: bool) -> dict:
    """torch.load with weights_only=True; a file this user's key signed (or one trusted with
    trust_code) that holds more than data is unpickled whole, as it was written."""
    try:
        try:
            with torch.serialization.safe_globals(numpy_globals()):
                return torch.load(io.BytesIO(payload), map_location=map_location, weights_only=True)
        except pickle.UnpicklingError as exc:
            if not unpickle:
                raise UntrustedFileError(f"{where} holds objects other than tensors and arrays "
                                         f"({str(exc).splitlines()[0]}), and is not signed by this "
                                         f"user's key; {OPT_IN}") from None
            return torch.load(io.BytesIO(payload), map_location=map_location, weights_only=False)
    except (RuntimeError, EOFError, OSError, ValueError) as exc:
        if isinstance(exc, UntrustedFileError):
            raise
        raise CheckpointError(errno.EIO, f"{where} is not a readable checkpoint (truncated, "
                              f"empty or another kind of file: {exc})") from None


def numpy_globals() -> list:
    """What numpy arrays and scalars unpickle through: construction from raw data, no code."""
    try:
        from numpy._core import multiarray
    except ImportError:  # numpy 1.x
        from numpy.core import multiarray
    dtypes = [getattr(np.dtypes, name) for name in dir(np.dtypes) if name.endswith("DType")]
    return [multiarray._reconstruct, multiarray.scalar, np.ndarray, np.dtype, *dtypes]


def load(value: str, outputs: str | Path = "outputs", key: str = "resume",
         map_location=None, trust_code: bool = False) -> tuple[Path, dict]:
    """(path, state) for `resume=`/`checkpoint=` values as `resolve` reads them. For a run
    directory or `latest`, an unreadable or unsigned newest checkpoint is skipped with a warning
    naming it, for the newest readable, signed one; a file named explicitly must be readable
    (and signed, unless `trust_code`) itself."""
    path = Path(value)
    if value != "latest" and not path.is_dir():
        path = resolve(value, outputs, key)
        if path.suffix == ".safetensors":
            raise CheckpointError(errno.EINVAL, f"{key}={value!r}: {path} holds a trained policy only (a model "
                                  "file: for puffer.load, mode=eval and mode=export); resume needs a "
                                  "training checkpoint: the run directory or its checkpoints/epoch_*.pt")
        return path, read(path, f"{key}={value!r}", map_location, trust_code)
    root = outputs if value == "latest" else path
    found = candidates(root, single_runs=value == "latest")
    if not found:
        resolve(value, outputs, key)  # raises the not-found error
    for i, candidate in enumerate(found):
        try:
            return candidate, read(candidate, f"{key}={value!r}", map_location, trust_code)
        except (CheckpointError, UntrustedFileError) as exc:
            if i + 1 == len(found):
                raise
            log.warning("%s; using the previous one, %s", exc, found[i + 1])
    raise AssertionError("unreachable")


def resolve(value: str, outputs: str | Path = "outputs", key: str = "resume") -> Path:
    """`latest` -> the newest checkpoint under outputs/; a run directory -> its newest; a file ->
    itself. `key` (resume, checkpoint) is the config key the value came from, for the error."""
    if value == "latest":
        return find_latest(outputs, key)
    path = Path(value)
    if path.is_dir():
        return find_latest(path, key)
    if not path.is_file():
        raise CheckpointError(errno.ENOENT, f"{key}={value!r}: no such checkpoint file or run directory")
    return path


def rng_state() -> dict:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


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
    from omegaconf import OmegaConf

    from puffer.config import ConfigError

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
    since (vec.batch_size is vec.envs_per_batch, an ocean env's num_envs its num_rows) and
    train keys moved to runtime."""
    saved = state.get("config")
    if not saved:
        return saved
    saved = dict(saved)
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
    from omegaconf import OmegaConf

    from puffer.config import ConfigError

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
