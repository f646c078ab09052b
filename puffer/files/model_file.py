"""model.safetensors: a trained policy as data, the file a user keeps, shares and loads.

The weights (observation normalization statistics among them: they are the policy's buffers)
are safetensors tensors; the header's metadata holds, as JSON under "puffer", what rebuilds the
policy and its agent: the run's config (the policy section builds the network, the env section
names what it acts in), the flat and native spaces (puffer.files.space_json), and what the training
was (steps, epochs, wall time, the command). Reading it unpickles nothing: safetensors parses a
JSON header and raw tensor bytes, and the config is built only from puffer's own targets
(puffer.files.trust.check_config) unless the reader trusts the file's code.

What lives here: `save(path, policy, spaces, config, training)` and `read(path) -> ModelFile`.
What does not: the Agent around a loaded policy (puffer.agent), checkpoints for resuming, which
must carry pickled envs (puffer.files.checkpoint).
"""

from __future__ import annotations

import errno
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from gymnasium import spaces

from puffer.errors import CheckpointError
from puffer.files import space_json
from puffer.files.checkpoint import write_atomic

NAME = "model.safetensors"
FORMAT = "puffer.model/1"


@dataclass
class ModelFile:
    """What a model file holds: the policy's state_dict, the run's config, the flat observation
    and action spaces the policy takes and samples, the native action space the env takes, and
    facts about the training (global_step, epoch, wall_seconds, command, puffer_version)."""

    state_dict: dict[str, torch.Tensor]
    config: dict
    observation_space: spaces.Space
    action_space: spaces.Space
    native_action_space: spaces.Space
    training: dict[str, Any] = field(default_factory=dict)
    # Agents whose spaces differ (puffer.emulation.padding): each agent's own observation and action space,
    # in the env's agent order, so that the agent takes and returns them per agent.
    agent_spaces: dict[str, tuple[spaces.Space, spaces.Space]] | None = None


def save(path: str | Path, model: ModelFile) -> Path:
    """Write `model` to `path` atomically."""
    from safetensors.torch import save as to_bytes

    path = Path(path)
    header = {"format": FORMAT, "config": model.config, "training": model.training,
              "observation_space": space_json.to_json(model.observation_space),
              "action_space": space_json.to_json(model.action_space),
              "native_action_space": space_json.to_json(model.native_action_space)}
    if model.agent_spaces is not None:
        header["agent_spaces"] = [[agent, space_json.to_json(obs), space_json.to_json(act)]
                                  for agent, (obs, act) in model.agent_spaces.items()]
    # safetensors refuses tensors that share memory or are views: every one its own copy
    tensors = {name: value.detach().to("cpu").contiguous().clone() for name, value in model.state_dict.items()}
    write_atomic(path, [to_bytes(tensors, metadata={"puffer": json.dumps(header)})], what="model file")
    return path


def read(path: str | Path, key: str = "path", device: str | torch.device = "cpu") -> ModelFile:
    """The model file at `path`; an error naming the file if it is torn or not puffer's."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    where = f"{key}: {path}"
    try:
        with safe_open(str(path), framework="pt", device=str(device)) as file:
            metadata = file.metadata() or {}
            tensors = {name: file.get_tensor(name) for name in file.keys()}  # noqa: SIM118 - safe_open has no items()
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(errno.EIO, f"{where} is not a readable model file (truncated, empty or "
                              f"another kind of file: {exc})") from None
    try:
        header = json.loads(metadata["puffer"])
        if header.get("format") != FORMAT:
            raise ValueError(f"format {header.get('format')!r}, expected {FORMAT!r}")
        agent_spaces = header.get("agent_spaces")
        if agent_spaces is not None:
            agent_spaces = {agent: (space_json.from_json(obs), space_json.from_json(act))
                            for agent, obs, act in agent_spaces}
        return ModelFile(tensors, header["config"],
                         space_json.from_json(header["observation_space"]),
                         space_json.from_json(header["action_space"]),
                         space_json.from_json(header["native_action_space"]), header.get("training") or {},
                         agent_spaces)
    except (KeyError, ValueError, TypeError) as exc:
        raise CheckpointError(errno.EINVAL, f"{where} is a safetensors file but not a puffer model "
                              f"({exc!r})") from None
