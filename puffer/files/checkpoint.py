"""Checkpoints: signed, written atomically, the last K kept, found again by `resume=<path>|latest`.

What lives here: the file side (atomic writes, signing, pruning, finding and reading the latest,
with a fallback past an unreadable or unsigned one; which part of a resumed multirun a run of it
continues: `place_in_multirun`) and the process-wide random states. The
check that a checkpoint fits the run resuming from it is puffer.config.resume's. What goes into a checkpoint is the
trainer's `state_dict` (puffer.training.trainer); the model file a user shares is puffer.files.model_file's.

The file: MAGIC, the length of a JSON header, the header (format, the signing key's id, the
HMAC-SHA256 of the payload under this user's key: puffer.files.trust), then the payload, `torch.save`'s
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

from puffer import renamed
from puffer.errors import CheckpointError, ConfigError
from puffer.files import trust
from puffer.files.trust import OPT_IN, UntrustedFileError

log = logging.getLogger(__name__)

PATTERN = "epoch_*.pt"
MAGIC = b"PUFFER-SIGNED-CHECKPOINT\n"
FORMAT = 1


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
        mine = None if signed or trust_code else trust.key_id(trust.user_key())
        if mine is not None and header.get("key_id") == mine:
            # this user's own file whose bytes no longer match: torn or altered, not another's
            raise CheckpointError(errno.EIO, f"{where} is damaged: written and signed by you, its contents "
                                  "changed since (a truncated copy, a disk error, an edit); use an earlier "
                                  "checkpoint (resume=<run dir> falls back to the newest intact one)")
        if envs and not signed and not trust_code:
            raise UntrustedFileError(
                f"{where} is not signed by this user's key (signed by key {header.get('key_id')}, "
                f"yours is {mine}): it was written by another user or "
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
            # classes pickled under module paths renamed since: puffer.renamed
            return torch.load(io.BytesIO(payload), map_location=map_location, weights_only=False,
                              pickle_module=renamed)
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


def place_in_multirun(resume: str | None, sweep_dir: str | Path | None, run_dir: str | Path) -> str | None:
    """`resume`, unless it names a multirun's sweep directory (Hydra's multirun.yaml in it) and
    this run is part of a multirun (`sweep_dir`, with the run in `run_dir` under it): then the
    directory at this run's place in that multirun (<resume>/<n>, <resume>/<n>/seed_<s>,
    <resume>/batches/<name>), so that one `resume=` continues every run of a multirun launched
    again with its sweep. A place with no checkpoint (a run the interrupted multirun never got
    to) starts from the beginning, with a warning: None. ConfigError if the multirun holds no
    checkpoint at all."""
    if not resume or sweep_dir is None or not (Path(resume) / "multirun.yaml").is_file():
        return resume
    place = Path(run_dir).resolve().relative_to(Path(sweep_dir).resolve())
    found = Path(resume) / place
    if candidates(found):
        return str(found)
    if not candidates(resume):  # (the whole multirun searched only where this place has nothing)
        raise ConfigError(f"resume={resume!r} is a multirun with no checkpoint in it: nothing to resume")
    log.warning("resume=%s: no checkpoint in its %s/ (a run it never got to, or one it ran with another "
                "launcher or sweep): the run in %s starts from the beginning", resume, place, run_dir)
    return None


def rng_state() -> dict:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
