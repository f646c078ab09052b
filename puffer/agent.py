"""A trained policy for users: load it, give it the env's own observations, get the env's actions.

    agent = puffer.load("outputs/2026-12-04/10-00-00")      # a run dir, agent folder, model file or checkpoint
    action = agent.act(obs)                                 # one observation, as the env returns it
    actions = agent.act(batch_of_obs, deterministic=False)  # or a batch (leading dimension)

What lives here: `Agent` (flattening native observations, the policy, decoding actions back into
the native space, a recurrent policy's state) and `load`. What does not: training (puffer.training.trainer),
the evaluation protocol (puffer.evaluation, which takes `agent.policy`), the file format
(puffer.files.model_file).

`model.safetensors` holds the policy's weights (observation normalization statistics included),
the run's config and the spaces, so loading needs neither the run directory nor, for a model
file, the env; and it is data: loading one runs no code from it (puffer.files.trust).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from omegaconf import DictConfig, OmegaConf

from puffer.build import spaces_from_config
from puffer.config.resume import overridden, saved_config
from puffer.emulation.actions import ActionLayout
from puffer.emulation.padding import AgentPadding
from puffer.emulation.spaces import ObsLayout, get_path
from puffer.errors import ConfigError
from puffer.files import checkpoint, model_file, trust
from puffer.monitor.progress import env_name
from puffer.policies.acting import Acting
from puffer.policies.build import build_policy
from puffer.renamed import migrate_config


class Agent:
    """`policy` (which takes flat observation rows) behind the env's native spaces.

    `act(obs)` takes one native observation or a batch of them (each leaf with a leading batch
    dimension) and returns the native action, or a list/array of them for a batch. A recurrent
    policy keeps its state between calls, per batch row: pass `episode_start` (a bool per row)
    when an episode begins, or call `reset()`.

    For a multi-agent env whose agents have different spaces (`agent_spaces`, e.g. MPE
    simple_adversary), `act` takes what the env returns, a dict of each agent's own observation,
    and returns a dict of each agent's own action (the agents it was given, in the env's order
    for a recurrent state)."""

    def __init__(self, policy: torch.nn.Module, observation_space: spaces.Space,
                 action_space: spaces.Space, native_action_space: spaces.Space | None = None,
                 config: dict | None = None, device: str | torch.device = "cpu",
                 training: dict | None = None,
                 agent_spaces: dict[str, tuple[spaces.Space, spaces.Space]] | None = None):
        self.device = torch.device(device)
        self.policy = policy.to(self.device).eval()
        self.observation_space = observation_space  # flat, as the policy sees it
        self.action_space = action_space  # flat, as the policy samples it
        self.native_action_space = native_action_space or action_space
        self.config = config
        self.training = training or {}  # what the training was: steps, wall time, command (model_file)
        self.obs_layout = ObsLayout(getattr(observation_space, "native", observation_space))
        self.action_layout = ActionLayout(self.native_action_space)
        self.acting = Acting(policy, action_space)
        self.recurrent = self.acting.recurrent
        self.state = None
        self.padding = AgentPadding.from_agent_spaces("agent", agent_spaces) if agent_spaces else None

    @classmethod
    def from_env(cls, policy: torch.nn.Module, env, config: dict | None = None, device="cpu",
                 training: dict | None = None) -> Agent:
        """The agent of `policy` for a puffer env (or a vector env's driver env)."""
        layout = getattr(env, "action_layout", None)
        padding = getattr(env, "padding", None)
        return cls(policy, env.single_observation_space, env.single_action_space,
                   layout.space if layout is not None else None, config, device, training,
                   padding.agent_spaces if padding is not None else None)

    # -- acting ------------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget a recurrent policy's state (the next act() starts every row's episode)."""
        self.state = None

    @torch.inference_mode()
    def act(self, obs: Any, deterministic: bool = True, episode_start=None):
        if self.padding is not None and isinstance(obs, dict) and obs and set(obs) <= set(self.padding.agents):
            return self._act_per_agent(obs, deterministic, episode_start)
        rows, batched = self.flatten(obs)
        obs_t = torch.from_numpy(rows).to(self.device)
        starts = None
        if self.recurrent:
            if self.state is None or self.state[0].shape[0] != len(rows):
                self.state = self.acting.initial_state(len(rows), self.device)
            if episode_start is not None:
                starts = torch.as_tensor(np.asarray(episode_start, bool).reshape(-1), device=self.device)
        params, _, self.state = self.acting.outputs(obs_t, self.state, starts)
        action, _ = self.acting.choose(params, deterministic)
        flat = self.acting.to_env(action)
        native = [self.action_layout.decode(row, check=False) for row in flat]
        if not batched:
            return native[0]
        return np.asarray(native) if not isinstance(native[0], (dict, tuple)) else native

    def _act_per_agent(self, obs: dict, deterministic: bool, episode_start) -> dict:
        """Each agent's own observation in its padded row, one batch, each row's action back in
        its agent's own space."""
        agents = [agent for agent in self.padding.agents if agent in obs]
        padded = [self.padding.observation(agent, obs[agent], check=True) for agent in agents]
        batch = {key: np.stack([row[key] for row in padded]) for key in padded[0]}
        actions = self.act(batch, deterministic, episode_start)
        return {agent: self.padding.action(agent, action) for agent, action in zip(agents, actions, strict=True)}

    def flatten(self, obs: Any) -> tuple[np.ndarray, bool]:
        """Native observation(s) -> (flat rows the policy takes, whether a batch was given)."""
        layout = self.obs_layout
        flat = self.observation_space
        if layout.passthrough:
            array = np.asarray(obs, dtype=flat.dtype)
            batched = array.ndim == len(flat.shape) + 1
            if not batched and array.shape != flat.shape:
                raise ValueError(f"observation of shape {array.shape}: expected {flat.shape} or "
                                 f"(batch, *{flat.shape})")
            return (array if batched else array[None]), batched
        leaf = layout.leaves[0]
        first = get_path(obs, leaf.path)
        if isinstance(leaf.space, spaces.Text):  # a string, or a batch of them
            batched = not isinstance(first, str)
        else:
            first = np.asarray(first)
            batched = first.ndim == len(leaf.shape) + 1
        rows = np.zeros((len(first) if batched else 1, *flat.shape), dtype=flat.dtype)
        layout.write(layout.leaf_views(rows), obs)  # a single observation broadcasts into row 0
        return rows, batched

    # -- saving ------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """A model file (model.safetensors): what `load` needs, written atomically, data only."""
        return model_file.save(path, model_file.ModelFile(
            self.policy.state_dict(), self.config or {}, self.observation_space, self.action_space,
            self.native_action_space, self.training,
            self.padding.agent_spaces if self.padding is not None else None))


LEGACY_MODEL = "model.pt"  # the pickled model file of puffer before model.safetensors


def model_path(path: str | Path, key: str = "path") -> Path:
    """A model file or checkpoint as given; for a run directory or an agent folder its
    model.safetensors (or an older run's model.pt), else its newest checkpoint; `latest` the
    newest run under outputs/. `key` names the argument in errors."""
    candidate = Path(path)
    if candidate.is_dir():
        for name in (model_file.NAME, LEGACY_MODEL):
            if (candidate / name).is_file():
                return candidate / name
    return checkpoint.resolve(str(path), key=key)


def load(path: str | Path, device: str = "cpu", trust_code: bool = False) -> Agent:
    """The agent saved at `path` (a run directory, an exported agent folder, model.safetensors, a
    checkpoint, or `latest`). Nothing in the file runs: its config may name only puffer's own
    policy and env classes, and a pickled file (an older run's model.pt) is refused, unless
    `trust_code`, for a file from someone you trust."""
    file = model_path(path)
    where = f"path={str(path)!r}"
    if file.suffix == ".safetensors":
        saved = model_file.read(file, where, device)
        config, spaces_, weights, training = (migrate_config(saved.config), (saved.observation_space, saved.action_space,
                                              saved.native_action_space), saved.state_dict, saved.training)
        agent_spaces = saved.agent_spaces
    else:
        state = checkpoint.read(file, where, map_location=device, trust_code=trust_code, envs=False)
        config, weights, agent_spaces = saved_config(state) or {}, state["policy"], None
        training = {"global_step": state.get("global_step"), "epoch": state.get("epoch"),
                    "wall_seconds": state.get("train_seconds")}
        training = {key: value for key, value in training.items() if value is not None}
        spaces_ = None
        if "observation_space" in state:  # an older run's model.pt (read with trust_code)
            spaces_ = state["observation_space"], state["action_space"], state["native_action_space"]
    trust.check_config(config, f"{where} ({file})", trust_code)
    if spaces_ is None:  # an epoch checkpoint: the spaces come from building the run's env once
        *spaces_, agent_spaces = spaces_from_config(config, agents=True)
    policy = build_policy(config["policy"], spaces_[0], spaces_[1])
    policy.load_state_dict(weights)
    return Agent(policy, *spaces_, config=config, device=device, training=training, agent_spaces=agent_spaces)


def load_for_evaluation(cfg: DictConfig, path: Path, device, overrides: list[str] | None) -> Agent:
    """The policy as it was trained (its architecture is in the file's config); refused, before
    any episode, when the env this command line names has other spaces than it was trained on."""
    agent = load(path, device, trust_code=cfg.trust_code)
    if overridden("env", overrides):
        observation_space, action_space, _ = spaces_from_config(OmegaConf.to_container(cfg, resolve=True))
        if (observation_space, action_space) != (agent.observation_space, agent.action_space):
            raise ConfigError(f"checkpoint={cfg.checkpoint!r}: the policy was trained on observations "
                              f"{agent.observation_space} and actions {agent.action_space}, the env this "
                              f"command names ({env_name(cfg)}) has {observation_space} and {action_space}; "
                              "evaluate it on its own env (leave env= out) or on one with the same spaces")
    return agent


def evaluation_config(cfg: DictConfig, agent: Agent, overrides: list[str] | None) -> DictConfig:
    """`cfg` with the env the agent was trained on, unless the command line names another."""
    saved_env = (agent.config or {}).get("env")
    if saved_env and not overridden("env", overrides):
        cfg = cfg.copy()
        cfg.env = OmegaConf.create(saved_env)
    return cfg
