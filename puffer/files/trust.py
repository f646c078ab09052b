"""Which files may run code when puffer reads them, and the per-user key that decides it.

- A model file (`model.safetensors`, an exported agent folder) is data: tensors and a JSON header,
  read without unpickling anything. The config inside it is instantiated only where its
  `_target_`s are puffer's own classes and gymnasium's wrappers (`check_targets`): a config is
  code too, since Hydra calls whatever `_target_` names.
- A training checkpoint holds the envs mid-episode as pickles (bit-identical resume needs them),
  and a pickle can run any code. puffer signs each checkpoint it writes with an HMAC-SHA256 under
  a key of this user's (`user_key`: created on first use, readable by the user alone) and
  unpickles the envs of a checkpoint only when the signature verifies. Weights, optimizer state
  and counters load with torch's `weights_only=True` in any case.
- The one opt-in, for files from someone you trust (a colleague's checkpoint, files written
  before signing): `trust_code=true` on the command line, `trust_code=True` in Python. Its name
  says what it allows.

What does not live here: the file formats themselves (puffer.files.checkpoint, puffer.files.model_file).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

KEY_FILE_VARIABLE = "PUFFER_KEY_FILE"

OPT_IN = ("pass trust_code=true (Python: trust_code=True) only if you trust whoever wrote it, "
          "since loading it can run any code")

# Where a config read from a file may point `_target_` (and env.wrappers entries) without the
# opt-in: puffer's own code and the suites' wrappers. Checked on the object a name resolves to
# (`puffer.build.torch.load` is torch's code, not puffer's).
TRUSTED_TARGETS = ("puffer.", "gymnasium.wrappers.", "minigrid.wrappers.")
# The sections whose `_target_` a model file may set, at their top level only: a nested one
# would be called by Hydra's recursive instantiation with whatever arguments the file holds.
TARGET_SECTIONS = ("env", "policy")


class UntrustedFileError(ValueError):
    """A file that could run code when loaded, refused; the message says why and names the opt-in."""


def key_path() -> Path:
    """$PUFFER_KEY_FILE, else $XDG_CONFIG_HOME/puffer/signing.key (~/.config by default)."""
    if os.environ.get(KEY_FILE_VARIABLE):
        return Path(os.environ[KEY_FILE_VARIABLE])
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "puffer" / "signing.key"


def user_key() -> bytes:
    """This user's signing key: read, or made on first use (32 random bytes, mode 0600). Two
    processes that start at once agree: the file is linked into place only if it is absent."""
    path = key_path()
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, secrets.token_hex(32).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process made it first: use theirs
        finally:
            tmp.unlink(missing_ok=True)
    key = path.read_bytes().strip()
    if len(key) < 32:
        raise UntrustedFileError(f"the signing key {path} is too short ({len(key)} bytes); delete it "
                                 "and puffer makes a new one (checkpoints signed with the old one then "
                                 "need trust_code=true)")
    return key


def key_id(key: bytes) -> str:
    """A short public name of a key, for messages: which key signed a file."""
    return hashlib.sha256(b"puffer key id\0" + key).hexdigest()[:12]


def sign(data: bytes, key: bytes | None = None) -> str:
    return hmac.new(key if key is not None else user_key(), data, hashlib.sha256).hexdigest()


def verify(data: bytes, signature: str, key: bytes | None = None) -> bool:
    return hmac.compare_digest(sign(data, key), signature)


def check_targets(config: dict, where: str, trust_code: bool = False) -> None:
    """Refuse a config from a file whose `_target_`s (or env.wrappers entries) name code outside
    puffer and the suites' wrappers, or that sets a `_target_` below the top of env and policy,
    unless `trust_code`: building the config calls that code."""
    if trust_code:
        return
    targets = [found for section in TARGET_SECTIONS for found in _targets(config.get(section), section)]
    for key, target in targets:
        if key not in {f"{section}._target_" for section in TARGET_SECTIONS} and ".wrappers[" not in key:
            raise UntrustedFileError(f"{where}: its config sets {key}={target!r}; a model file may "
                                     "name code only in env._target_, env.wrappers and policy._target_; "
                                     + OPT_IN)
        if not _trusted(target):
            raise UntrustedFileError(
                f"{where}: its config sets {key}={target!r}, which is not puffer's or gymnasium's "
                f"code, and building it would call that code; {OPT_IN}")


def _trusted(target) -> bool:
    if not isinstance(target, str) or not target.startswith(TRUSTED_TARGETS):
        return False
    from hydra.utils import get_object

    try:
        obj = get_object(target)
    except (ImportError, AttributeError, ValueError):
        return True  # nothing to call: building the config fails with its own error
    name = f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}"
    return name.startswith(TRUSTED_TARGETS)


def _targets(node, prefix: str):
    if isinstance(node, dict):
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            if key == "_target_":
                yield path, value
            elif key == "wrappers" and isinstance(value, list):
                for i, wrapper in enumerate(value):
                    if isinstance(wrapper, str):
                        yield f"{path}[{i}]", wrapper
                    else:
                        yield from _targets(wrapper, f"{path}[{i}]")
            else:
                yield from _targets(value, path)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _targets(value, f"{prefix}[{i}]")
