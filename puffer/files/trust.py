"""Which files may run code when puffer reads them, and the per-user key that decides it.

- A model file (`model.safetensors`, an exported agent folder) is data: tensors and a JSON header,
  read without unpickling anything. Its config is built only when it is plain data on an
  allowlist (`check_config`): no interpolation (a resolver can build code), no opt-in or Hydra
  key, `_target_`s naming only puffer's env makers and policy classes and the suites' wrapper
  classes: a config is code too, since Hydra calls whatever `_target_` names.
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

# What a file's `_target_`s may name, by where they stand (puffer.files.trust.allowed_target).
ALLOWED = {"env": "puffer's env makers (the env schemas' targets)",
           "policy": "puffer's policy classes (puffer.policies)",
           "wrapper": "gymnasium's or minigrid's wrapper classes that take no callable"}
# Hydra's keys that change how a node is called: a file has no business setting them.
HYDRA_KEYS = ("_args_", "_partial_", "_recursive_", "_convert_")
# Wrapper classes that take no callable but act outside the env: write files where the config
# says, open windows.
ACTING_WRAPPERS = ("RecordVideo", "HumanRendering")
# The packages whose import registers a suite's envs (env.id=<package>:<id>) or holds PettingZoo
# env modules (env.module): those puffer's extras install.
SUITE_MODULES = ("gymnasium", "ale_py", "minigrid", "mujoco", "Box2D", "pettingzoo", "mpe2", "shimmy")
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
    processes that start at once agree: the file is linked into place only if it is absent. A key
    that another user could have written or read is refused (`check_key_file`)."""
    path = key_path()
    if not os.path.lexists(path):
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
    check_key_file(path)
    key = path.read_bytes().strip()
    if len(key) < 32:
        raise UntrustedFileError(f"the signing key {path} is too short ({len(key)} bytes); delete it "
                                 "and puffer makes a new one (checkpoints signed with the old one then "
                                 "need trust_code=true)")
    return key


def check_key_file(path: Path) -> None:
    """The key is this user's alone, or it is not used: a regular file (through a link of this
    user's, if a link) owned by this user, readable and writable by nobody else, in a folder that
    others cannot write (or, like /tmp, one whose sticky bit keeps them from replacing it).
    Otherwise another user could have written it (and signed pickles with it) or read it."""
    import stat

    fix = (f"set {KEY_FILE_VARIABLE} to a file of your own (puffer makes it, mode 0600, if it is "
           f"absent) or fix this one (chmod 600, owned by you)")
    me = os.geteuid()
    link = os.lstat(path)
    if stat.S_ISLNK(link.st_mode) and link.st_uid != me:
        raise UntrustedFileError(f"the signing key {path} is a link owned by another user (uid "
                                 f"{link.st_uid}); {fix}")
    info = os.stat(path)
    where = f"the signing key {path}" + (f" (a link to {os.path.realpath(path)})" if stat.S_ISLNK(link.st_mode) else "")
    if not stat.S_ISREG(info.st_mode):
        raise UntrustedFileError(f"{where} is not a regular file; {fix}")
    if info.st_uid != me:
        raise UntrustedFileError(f"{where} is owned by another user (uid {info.st_uid}), who could sign "
                                 f"files as you; {fix}")
    if info.st_mode & 0o077:
        raise UntrustedFileError(f"{where} has mode {stat.S_IMODE(info.st_mode):04o}: others can read or "
                                 f"write it; {fix}")
    folder = os.stat(os.path.dirname(os.path.realpath(path)))
    if folder.st_mode & 0o022 and not folder.st_mode & stat.S_ISVTX:
        raise UntrustedFileError(f"{where} is in a folder that others can write (mode "
                                 f"{stat.S_IMODE(folder.st_mode):04o}), so they could replace it; {fix}")


def key_id(key: bytes) -> str:
    """A short public name of a key, for messages: which key signed a file."""
    return hashlib.sha256(b"puffer key id\0" + key).hexdigest()[:12]


def sign(data: bytes, key: bytes | None = None) -> str:
    return hmac.new(key if key is not None else user_key(), data, hashlib.sha256).hexdigest()


def verify(data: bytes, signature: str, key: bytes | None = None) -> bool:
    return hmac.compare_digest(sign(data, key), signature)


def check_config(config: dict, where: str, trust_code: bool = False) -> None:
    """Refuse a config read from a file (a model file, a checkpoint, an exported agent) that could
    run code when puffer builds it, unless the reader passed `trust_code`:
    - any string holding `${`: OmegaConf would resolve it, and a resolver (oc.create, oc.decode,
      a custom one) can make a node with a `_target_` that no walk of the file saw;
    - an opt-in (`trust_code: true`) or a Hydra instantiation key (`_args_`, `_partial_`,
      `_recursive_`, `_convert_`) anywhere: those come from the user, never from a file;
    - a `_target_` below the top of env and policy, or one off the allowlist (`allowed_target`):
      the env makers of puffer's own env schemas, puffer's policy classes, and gymnasium's and
      minigrid's wrapper classes that take no callable and act on nothing outside the env;
    - an env.id `<module>:<id>` or env.module outside the suites' packages (`SUITE_MODULES`):
      importing a module runs it."""
    if trust_code:
        return
    for path, key, value in _entries(config, ""):
        text = next((t for t in (key, value) if isinstance(t, str) and "${" in t), None)
        if text is not None:
            raise UntrustedFileError(f"{where}: its config sets {path}={text!r}, an interpolation; puffer "
                                     "never resolves one from a file (a resolver can build code); " + OPT_IN)
        if key == "trust_code" and value:
            raise UntrustedFileError(f"{where}: its config sets {path}={value!r}; an opt-in comes from "
                                     "your command line or call, never from a file; " + OPT_IN)
        if key in HYDRA_KEYS:
            raise UntrustedFileError(f"{where}: its config sets {path}, which changes how Hydra calls "
                                     "code; a model file holds plain values; " + OPT_IN)
    for key, target in (found for section in TARGET_SECTIONS for found in _targets(config.get(section), section)):
        if key not in {f"{section}._target_" for section in TARGET_SECTIONS} and ".wrappers[" not in key:
            raise UntrustedFileError(f"{where}: its config sets {key}={target!r}; a model file may "
                                     "name code only in env._target_, env.wrappers and policy._target_; "
                                     + OPT_IN)
        kind = "env" if key == "env._target_" else "policy" if key == "policy._target_" else "wrapper"
        if not allowed_target(target, kind):
            raise UntrustedFileError(
                f"{where}: its config sets {key}={target!r}, which is not one of {ALLOWED[kind]}, and "
                f"building it would call that code; {OPT_IN}")
    _check_env_modules(config.get("env"), where)


def allowed_target(target, kind: str) -> bool:
    """Whether a file's `_target_` of `kind` (env, policy, wrapper) is on the allowlist, judged on
    the object the name resolves to (`puffer.build.torch.load` is torch's function, not puffer's):
    never a function, since Hydra calls it with whatever arguments the file holds, except the
    env makers puffer's env schemas name."""
    if not isinstance(target, str):
        return False
    if kind == "env":
        return target in env_makers()
    from hydra.utils import get_object

    try:
        obj = get_object(target)
    except (ImportError, AttributeError, ValueError):
        return False
    if not isinstance(obj, type):
        return False
    if kind == "policy":
        import torch

        return obj.__module__.startswith("puffer.policies.") and issubclass(obj, torch.nn.Module)
    import gymnasium

    return (obj.__module__.startswith(("gymnasium.wrappers.", "minigrid.wrappers"))
            and issubclass(obj, gymnasium.Wrapper) and obj.__name__ not in ACTING_WRAPPERS
            and not _takes_a_callable(obj))


def env_makers() -> set[str]:
    """The `_target_`s of puffer's env schemas: the makers a shipped env config names."""
    import dataclasses

    from puffer.config import schema

    classes = [schema.GymnasiumEnvConfig, schema.PettingZooEnvConfig, schema.AtariEnvConfig,
               *schema.OCEAN_SCHEMAS.values()]
    return {field.default for cls in classes for field in dataclasses.fields(cls) if field.name == "_target_"}


def _takes_a_callable(cls: type) -> bool:
    import inspect

    try:
        parameters = inspect.signature(cls.__init__).parameters.values()
    except (TypeError, ValueError):
        return True
    return any("Callable" in str(p.annotation) or "func" in p.name for p in parameters)


def _check_env_modules(env, where: str) -> None:
    """The module that making the env imports (env.id's `<module>:` part, env.module) is a suite's."""
    if not isinstance(env, dict):
        return
    named = [("env.module", str(env["module"]))] if "module" in env else []
    if ":" in str(env.get("id", "")):
        named.append(("env.id", str(env["id"])))
    for key, value in named:
        package = value.split(":", 1)[0].split(".", 1)[0]
        if package not in SUITE_MODULES:
            raise UntrustedFileError(f"{where}: its config sets {key}={value!r}, and making that env imports "
                                     f"{package!r}, which is not one of the suites' packages "
                                     f"({', '.join(SUITE_MODULES)}); importing a module runs it; {OPT_IN}")


def _entries(node, prefix: str):
    """(path, key, value) of every entry of a config at any depth: a mapping's with its key, a
    list's with key None."""
    if isinstance(node, dict):
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            yield path, key, value
            yield from _entries(value, path)
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            yield f"{prefix}[{i}]", None, value
            yield from _entries(value, f"{prefix}[{i}]")


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
