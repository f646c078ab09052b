"""The networks: `Default` (an MLP actor-critic over any emulated observation), `NatureCNN` (pixels),
`QNetwork` (action values: PQN, DQN), `SACNetwork` (a squashed Gaussian actor and twin critics),
and `ObsEncoder` (flat row -> features, unflattening structured observations per leaf: images,
symbol grids, text, vectors). What does not live here: the action distributions and heads
(puffer.policies.distributions), the wrappers around a network (puffer.policies.wrappers),
the training loop (puffer.training).

A policy maps a batch of flat observations to `(dist_params, value)`; `ActionDist` built from the
action space interprets `dist_params`: logits for categorical spaces, `(mean, log_std)` for Box,
`(logits, mean, log_std)` for HybridBox.
"""

from __future__ import annotations

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from puffer.config.schema import PIXEL_LAYOUTS
from puffer.emulation.spaces import ObsLayout, format_path
from puffer.policies.distributions import ActionHead, SquashedGaussian
from puffer.policies.layers import EnsembleMLP, default_init, layer_init, mlp

IMAGE_FEATURES = 256  # features of each image leaf of a structured observation


def nature_convs(chw: tuple[int, ...]) -> tuple[nn.Sequential, int]:
    """The Nature DQN's convolutions (32-8-4, 64-4-2, 64-3-1, ReLUs, flattened) for (C, H, W)
    frames, and how many features they give."""
    convs = nn.Sequential(
        layer_init(nn.Conv2d(chw[0], 32, 8, stride=4)), nn.ReLU(),
        layer_init(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),
        layer_init(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(),
        nn.Flatten(),
    )
    with torch.no_grad():
        return convs, convs(torch.zeros(1, *chw)).shape[1]


def is_image(space: spaces.Space) -> bool:
    """Frames large enough for the Nature CNN: a Box of 2 (H, W) or 3 (channels first or last)
    dims whose values are pixels, uint8 or declared 0-255, and whose spatial sides are 36 or more."""
    if not (isinstance(space, spaces.Box) and len(space.shape) in (2, 3)):
        return False
    pixels = space.dtype == np.uint8 or (np.all(space.low == 0) and np.all(space.high == 255))
    if not pixels:
        return False
    shape = tuple(space.shape)
    if len(shape) == 2:
        spatial = shape
    else:
        spatial = shape[:2] if pixel_layout(shape) == "hwc" else shape[1:]
    return min(spatial) >= 36


class ImageEncoder(nn.Module):
    """The Nature CNN torso on one image ((C, H, W), (H, W, C) or (H, W), pixels scaled by
    1/255), then a linear layer to IMAGE_FEATURES (SB3's CombinedExtractor does the same for
    Dict observations): a top-level image observation or an image leaf of a structured one."""

    def __init__(self, shape: tuple[int, ...]):
        super().__init__()
        self.shape = shape = tuple(int(d) for d in shape)
        self.layout = "hw" if len(shape) == 2 else pixel_layout(shape)
        chw = {"hw": (1, *shape), "hwc": (shape[-1], *shape[:2]), "chw": shape}[self.layout]
        self.convs, flat = nature_convs(chw)
        self.linear = nn.Sequential(layer_init(nn.Linear(flat, IMAGE_FEATURES)), nn.ReLU())

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        if self.layout == "hwc":
            frames = frames.permute(0, 3, 1, 2)
        elif self.layout == "hw":
            frames = frames.unsqueeze(1)
        return self.linear(self.convs(frames.float() / 255.0))


SYMBOL_EMBEDDING, SYMBOL_FEATURES, SYMBOL_VOCABULARY = 8, 256, 1 << 16


def is_symbol_grid(space: spaces.Space) -> bool:
    """A 2-d Box of signed or wide integers, each cell one symbol of a bounded set (NetHack's
    glyph ids, 0..5976 over 21x79): values that name things, not pixel intensities. uint8 grids
    stay images or floats (MiniGrid's object/colour/state channels train as floats)."""
    if not (isinstance(space, spaces.Box) and len(space.shape) == 2 and space.dtype.kind in "iu"
            and space.dtype != np.uint8 and min(space.shape) >= 2):
        return False
    low, high = np.min(space.low), np.max(space.high)
    return 1 < int(high) - int(low) + 1 <= SYMBOL_VOCABULARY


class SymbolGridEncoder(nn.Module):
    """A grid of symbol ids -> features: a learned embedding per symbol (ids from the space's
    lowest), flattened in grid order, then a linear layer and ReLU."""

    def __init__(self, space: spaces.Box):
        super().__init__()
        self.shape = tuple(int(d) for d in space.shape)
        self.low, vocabulary = int(np.min(space.low)), int(np.max(space.high)) - int(np.min(space.low)) + 1
        self.embed = nn.Embedding(vocabulary, SYMBOL_EMBEDDING)
        self.project = nn.Sequential(
            layer_init(nn.Linear(int(np.prod(self.shape)) * SYMBOL_EMBEDDING, SYMBOL_FEATURES)), nn.ReLU())

    def forward(self, grid: torch.Tensor) -> torch.Tensor:
        ids = (grid.long() - self.low).clamp(0, self.embed.num_embeddings - 1)
        return self.project(self.embed(ids).flatten(1))


TEXT_EMBEDDING, TEXT_FEATURES = 16, 64


class TextEncoder(nn.Module):
    """A Text leaf's character codes -> features: a learned embedding per character (code 0, the
    padding, embeds to zeros), the sequence flattened in order, then a linear layer and ReLU."""

    def __init__(self, vocabulary: int, max_length: int):
        super().__init__()
        self.embed = nn.Embedding(vocabulary + 1, TEXT_EMBEDDING, padding_idx=0)
        self.project = nn.Sequential(layer_init(nn.Linear(max_length * TEXT_EMBEDDING, TEXT_FEATURES)), nn.ReLU())

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        return self.project(self.embed(codes.long()).flatten(1))


class ObsEncoder(nn.Module):
    """Flat observations -> float features, an encoder chosen from the space at every level: an
    image (pixel frames of 36x36 or more, `is_image`) by a small CNN, whether it is the whole
    observation or a leaf of a Dict/Tuple; a structured space (the emulated FlatBox remembers it)
    is unflattened and each leaf encoded: images by a CNN each, other Boxes as floats, Discrete
    and MultiDiscrete as one-hots, MultiBinary as 0/1 floats, Text by a character embedding
    (TextEncoder); the leaves are concatenated. Any other Box is flattened."""

    def __init__(self, observation_space: spaces.Space):
        super().__init__()
        native = getattr(observation_space, "native", None)
        self.layout = ObsLayout(native) if native is not None else None
        self.image = None  # the encoder of a top-level image or symbol grid
        if self.layout is None:
            kind = "flat"
            if is_image(observation_space):
                kind, self.image = "cnn", ImageEncoder(observation_space.shape)
                self.out_dim = IMAGE_FEATURES
            elif is_symbol_grid(observation_space):
                kind, self.image = "embedding", SymbolGridEncoder(observation_space)
                self.out_dim = SYMBOL_FEATURES
            else:
                self.out_dim = int(np.prod(observation_space.shape))
            self.leaves = [("obs", kind, self.out_dim)]
            return
        self.encoders = []
        self.out_dim = 0
        self.cnns = nn.ModuleList()  # one small Nature torso per image leaf (or embedding per symbol grid)
        self.texts = nn.ModuleList()  # one character embedding per text leaf
        for leaf in self.layout.leaves:
            if is_image(leaf.space):
                encode = ("cnn", [IMAGE_FEATURES], len(self.cnns))
                self.cnns.append(ImageEncoder(leaf.shape))
            elif is_symbol_grid(leaf.space):
                encode = ("embedding", [SYMBOL_FEATURES], len(self.cnns))
                self.cnns.append(SymbolGridEncoder(leaf.space))
            elif isinstance(leaf.space, spaces.Text):
                encode = ("text", [TEXT_FEATURES], len(self.texts))
                self.texts.append(TextEncoder(len(leaf.space.character_set), leaf.size))
            elif isinstance(leaf.space, spaces.Discrete):
                encode = ("onehot", [int(leaf.space.n)], [int(leaf.space.start)])
            elif isinstance(leaf.space, spaces.MultiDiscrete):
                encode = ("onehot", leaf.space.nvec.ravel().tolist(), leaf.space.start.ravel().tolist())
            else:
                encode = ("float", [leaf.size], None)
            self.encoders.append(encode)
            self.out_dim += sum(encode[1])
        self.leaves = [(format_path("obs", leaf.path), kind, sum(sizes))
                       for leaf, (kind, sizes, _) in zip(self.layout.leaves, self.encoders, strict=True)]

    def describe(self) -> str:
        """How each leaf is read, for the run's log: e.g. `obs: cnn -> 256`."""
        return ", ".join(f"{name}: {kind} -> {size}" for name, kind, size in self.leaves)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        batch = obs.shape[0]
        if self.layout is None:
            if self.image is not None:
                return self.image(obs)
            return obs.reshape(batch, -1).float()
        parts = []
        for (kind, sizes, starts), value in zip(self.encoders, self.layout.leaf_values(obs), strict=True):
            if kind in ("cnn", "embedding"):
                parts.append(self.cnns[starts](value.reshape(batch, *self.cnns[starts].shape)))
                continue
            value = value.reshape(batch, -1)
            if kind == "text":
                parts.append(self.texts[starts](value))
                continue
            if kind == "float":
                parts.append(value.float())
                continue
            for column, (n, start) in enumerate(zip(sizes, starts, strict=True)):
                index = (value[:, column].long() - start).clamp(0, n - 1)
                parts.append(nn.functional.one_hot(index, n).float())
        return torch.cat(parts, dim=-1)


class Default(nn.Module):
    """Separate actor and critic MLPs over the encoded observation (CleanRL's agent, extended to
    structured observations and every emulated action space).

    `ortho_init=False` gives every layer PyTorch's default initialization instead of orthogonal
    weights with small action and value heads (SB3's `ortho_init=False`, which the zoo's MuJoCo
    settings use: the action means start spread rather than all near 0)."""

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space,
                 hidden_size: int = 64, num_layers: int = 2, activation: str = "tanh",
                 log_std_init: float = 0.0, ortho_init: bool = True):
        super().__init__()
        self.encoder = ObsEncoder(observation_space)
        self.actor = mlp(self.encoder.out_dim, hidden_size, num_layers, activation)
        self.critic = mlp(self.encoder.out_dim, hidden_size, num_layers, activation)
        self.action_head = ActionHead(action_space, hidden_size, log_std_init)
        self.value_head = layer_init(nn.Linear(hidden_size, 1), std=1.0)
        if not ortho_init:
            default_init(self)

        self.hidden_out = 2 * hidden_size  # encode(): actor and critic features side by side

    def encode(self, obs: torch.Tensor) -> torch.Tensor:
        features = self.encoder(obs)
        return torch.cat([self.actor(features), self.critic(features)], dim=-1)

    def decode(self, hidden: torch.Tensor):
        actor, critic = hidden.chunk(2, dim=-1)
        return self.action_head(actor), self.value_head(critic).squeeze(-1)

    def forward(self, obs: torch.Tensor):
        features = self.encoder(obs)
        return self.action_head(self.actor(features)), self.value_head(self.critic(features)).squeeze(-1)




class QNetwork(nn.Module):
    """Action values for a Discrete action space: the encoded observation, an MLP (with a
    LayerNorm before each activation by default, as PQN's network: Gallici et al. 2024 find
    that it keeps Q-learning stable without a target network), and one output per action.

    As every policy it returns `(dist_params, value)`: the Q-values, read by `ActionDist` as
    logits (so the deterministic action, which evaluation, `puffer.load(...).act` and export
    take, is the greedy one), and the greatest of them, the state's value under the greedy
    policy, which the collector stores for the Q-learning targets. A Q-learner acts
    epsilon-greedily while it trains (its trainer chooses the actions)."""

    # the value is the greatest Q-value (an action mask keeps it to the allowed actions':
    # puffer.policies.wrappers.ActionMasked)
    greedy_value = True

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space,
                 hidden_size: int = 128, num_layers: int = 2, activation: str = "relu",
                 layer_norm: bool = True, dueling: bool = False):
        super().__init__()
        if not isinstance(action_space, spaces.Discrete):
            raise ValueError(f"policy=q learns a value per action of a Discrete action space; this env's "
                             f"is {action_space}")
        self.encoder = ObsEncoder(observation_space)
        self.body = mlp(self.encoder.out_dim, hidden_size, num_layers, activation, layer_norm)
        self.q_head = layer_init(nn.Linear(hidden_size, int(action_space.n)))
        # dueling (Wang et al. 2016): a state value beside the actions' advantages, Q = V + A - mean(A)
        self.value_head = layer_init(nn.Linear(hidden_size, 1)) if dueling else None
        self.hidden_out = hidden_size

    def encode(self, obs: torch.Tensor) -> torch.Tensor:
        return self.body(self.encoder(obs))

    def decode(self, hidden: torch.Tensor):
        q = self.q_head(hidden)
        if self.value_head is not None:
            q = self.value_head(hidden) + q - q.mean(-1, keepdim=True)
        return q, q.max(-1).values

    def forward(self, obs: torch.Tensor):
        return self.decode(self.encode(obs))


class TwinCritic(nn.Module):
    """`critics` Q(s, a) estimates (SAC's twin critics, Fujimoto et al. 2018's clipped double Q):
    an observation encoder of their own and an ensemble of MLPs over [features, unit action]."""

    def __init__(self, observation_space: spaces.Space, action_dims: int, hidden_size: int, num_layers: int,
                 activation: str, critics: int = 2):
        super().__init__()
        self.encoder = ObsEncoder(observation_space)
        self.q = EnsembleMLP(critics, self.encoder.out_dim + action_dims, hidden_size, num_layers, activation)

    def forward(self, features: torch.Tensor, unit_action: torch.Tensor, detach: bool = False) -> torch.Tensor:
        """(critics, batch) Q-values of encoded observations (`self.encoder`) and unit actions."""
        return self.q(torch.cat([features, unit_action.to(features.dtype)], -1), detach).squeeze(-1)


class SACNetwork(nn.Module):
    """SAC's networks (Haarnoja et al. 2018, with SB3's MlpPolicy shapes): an actor, the encoded
    observation through an MLP to the mean and log std (clamped to [LOG_STD_MIN, LOG_STD_MAX]) of a
    Gaussian squashed into the action bounds (its `action_dist`), and twin critics with their own
    encoder. Layers keep PyTorch's default initialization, as SB3's SAC does (`log_std_init`: the
    actor's initial log std instead, in every state).

    As every policy it returns `(dist_params, value)`: the actor's `(mean, log_std)`, read by the
    squashed Gaussian (so evaluation, `puffer.load(...).act` and export take the squashed mean),
    and as value the smaller critic's Q of that deterministic action. The SAC trainer reads the
    actor and critics apart (`actor_params`, `critic`)."""

    LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0  # SB3's clamp

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space,
                 hidden_size: int = 256, num_layers: int = 2, activation: str = "relu",
                 log_std_init: float | None = None, critics: int = 2):
        super().__init__()
        if not isinstance(action_space, spaces.Box) or len(action_space.shape) != 1:
            raise ValueError(f"policy=sac acts in a 1-d Box of continuous actions; this env's is {action_space}")
        self.action_dist = SquashedGaussian(action_space)
        dims = int(action_space.shape[0])
        self.encoder = ObsEncoder(observation_space)
        self.actor = mlp(self.encoder.out_dim, hidden_size, num_layers, activation)
        self.mean = nn.Linear(hidden_size, dims)
        self.log_std = nn.Linear(hidden_size, dims)
        default_init(self)
        if log_std_init is not None:  # a chosen initial exploration: std exp(log_std_init) in every state
            nn.init.constant_(self.log_std.bias, float(log_std_init))
            self.log_std.weight.data.mul_(0.01)
        self.critic = TwinCritic(observation_space, dims, hidden_size, num_layers, activation, critics)

    def actor_params(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.actor(self.encoder(obs))
        return self.mean(hidden), self.log_std(hidden).clamp(self.LOG_STD_MIN, self.LOG_STD_MAX)

    def forward(self, obs: torch.Tensor):
        params = self.actor_params(obs)
        q = self.critic(self.critic.encoder(obs), torch.tanh(params[0]))
        return params, q.min(0).values


def pixel_layout(shape: tuple[int, ...], layout: str = "auto") -> str:
    """chw or hwc for a 3-d frame shape: `auto` takes a last axis of 1, 3 or 4 (gray, RGB, RGBA)
    after a larger first one as channels last (gymnasium's render and most envs' frames)."""
    if layout not in PIXEL_LAYOUTS:
        raise ValueError(f"policy.layout={layout!r}: expected one of {PIXEL_LAYOUTS}")
    if layout != "auto":
        return layout
    return "hwc" if shape[-1] in (1, 3, 4) and shape[0] > 4 else "chw"


class NatureCNN(nn.Module):
    """The Nature DQN torso (conv 32-8-4, 64-4-2, 64-3-1, linear 512) shared by the actor and
    the critic, on uint8 pixels scaled by 1/255, (C, H, W) or (H, W, C) (`layout`, found from
    the shape by default). `channels_last` keeps activations NHWC, about twice as fast on CPUs;
    it changes no result."""

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space,
                 hidden_size: int = 512, channels_last: bool = True, layout: str = "auto"):
        super().__init__()
        shape = tuple(observation_space.shape)
        if len(shape) != 3:
            raise ValueError(f"policy=cnn expects (C, H, W) or (H, W, C) pixel observations, got "
                             f"shape {shape}")
        self.hwc = pixel_layout(shape, layout) == "hwc"
        if self.hwc:  # the env's (H, W, C) frames are viewed as (C, H, W) in encode(), no copy
            shape = (shape[2], shape[0], shape[1])
        if min(shape[1:]) < 36:
            raise ValueError(f"policy=cnn needs frames of at least 36x36 (the Nature CNN's kernels "
                             f"and strides), got {shape[1]}x{shape[2]}; use policy=default (an MLP "
                             "over the flattened pixels) for small grids")
        self.channels_last = channels_last
        self.scale = 1.0 / 255.0 if np.dtype(observation_space.dtype) == np.uint8 else 1.0
        self.convs, flat = nature_convs(shape)
        self.trunk = nn.Sequential(layer_init(nn.Linear(flat, hidden_size)), nn.ReLU())
        self.hidden_out = hidden_size
        self.action_head = ActionHead(action_space, hidden_size)
        self.value_head = layer_init(nn.Linear(hidden_size, 1), std=1.0)
        if channels_last:
            self.to(memory_format=torch.channels_last)

    def encode(self, obs: torch.Tensor) -> torch.Tensor:
        # Reorder the uint8 pixels, then make one float copy and scale it in place: one
        # minibatch-sized float allocation instead of three (float, scaled, reordered).
        if self.hwc:  # NHWC memory viewed as NCHW is channels_last already
            obs = obs.permute(0, 3, 1, 2)
        if self.channels_last:
            obs = obs.contiguous(memory_format=torch.channels_last)
        # (copy=True: a float input must not be scaled in place under its caller)
        x = obs.to(torch.float32, copy=True).mul_(self.scale) if self.scale != 1.0 else obs.float()
        return self.trunk(self.convs(x))

    def decode(self, hidden: torch.Tensor):
        return self.action_head(hidden), self.value_head(hidden).squeeze(-1)

    def forward(self, obs: torch.Tensor):
        return self.decode(self.encode(obs))
