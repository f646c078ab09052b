"""Config schemas: one typed dataclass per config group, registered in Hydra's ConfigStore.

What lives here: the schemas (so a typo or a wrong type in a YAML file or an override is rejected
with the key named, before any env is built), the checks no type can express (`validate`), and
`resolve_device`. What does not: the YAML values (conf/), the code the configs build.

Each YAML file links its schema from its defaults list (`- /schema/train@_here_` etc.).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, make_dataclass
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

# The configs and sweeps travel inside the package (in a checkout, puffer/conf and puffer/sweeps
# link to the top-level conf/ and sweeps/), so that the CLI, the console script, puffer.train and
# an installed wheel all find them here.
CONF_DIR = Path(__file__).resolve().parent / "conf"
SWEEPS_DIR = Path(__file__).resolve().parent / "sweeps"


class ConfigError(ValueError):
    """A configuration value that cannot work; the message names the key, the value and why."""


@dataclass
class TrainConfig:
    """The algorithm (`_target_`, a puffer.trainer.Trainer subclass) and its settings: PPO's
    hyper-parameters with CleanRL's names and ppo.py defaults. How the process runs them
    (checkpoints, threads, precision) is RuntimeConfig's."""

    _target_: str = "puffer.ppo.PPO"
    total_timesteps: int = 500_000
    learning_rate: float = 2.5e-4
    anneal_lr: bool = True
    # How anneal_lr decays the LR to 0: linear | cosine (puffer.optim.lr_scale).
    lr_schedule: str = "linear"
    # adam | muon (Muon for weight matrices, Adam for the rest; puffer.optim.make_optimizer).
    optimizer: str = "adam"
    num_steps: int = 128
    num_minibatches: int = 4
    update_epochs: int = 4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    norm_adv: bool = True
    clip_coef: float = 0.2
    # clip_coef decays linearly to 0 over training, like the LR (rl-baselines3-zoo's lin_0.2):
    # late updates cannot move a solved policy far, which keeps CartPole from collapsing.
    anneal_clip: bool = False
    clip_vloss: bool = True
    vf_clip_coef: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    # Rewards divided by the running std of the discounted return, clipped to +-reward_clip
    # (puffer.normalize.RewardScaler); episode returns are still logged unscaled.
    norm_reward: bool = False
    reward_clip: float = 10.0
    max_grad_norm: float = 0.5
    target_kl: float | None = None
    adam_eps: float = 1e-5
    # V-trace-clipped advantages (PufferLib 3.0's "puffer advantage", puffer.advantage.gae):
    # after the first update epoch, GAE is recomputed with each TD error weighted by
    # min(pi/mu, vtrace_rho_clip) and each trace by min(pi/mu, vtrace_c_clip).
    vtrace: bool = False
    vtrace_rho_clip: float = 1.0
    vtrace_c_clip: float = 1.0
    # Prioritized sampling: minibatches drawn with replacement with probability proportional to
    # |advantage|^prio_alpha (samples; whole rows for recurrent policies), the policy loss
    # weighted by (n p)^-beta, beta annealed from prio_beta0 to 1 (puffer.minibatches.Priority).
    prioritized: bool = False
    prio_alpha: float = 0.8
    prio_beta0: float = 0.2


@dataclass
class RuntimeConfig:
    """How this process runs the training, whatever the algorithm: checkpoints, threads,
    compilation, precision, progress lines. A resumed run keeps its checkpoint's values unless
    the command line sets them."""

    # Checkpoint every N epochs (an epoch = one rollout + one update); 0: only at the end.
    checkpoint_interval: int = 0
    # And after the first epoch that ends this many minutes after the last checkpoint, so that a
    # crash or a killed job costs minutes, not the run; 0: off. (A run that fails on an error
    # saves its last completed epoch in any case.)
    checkpoint_minutes: float = 10.0
    # How many epoch checkpoints to keep (the newest); 0 keeps all.
    keep_checkpoints: int = 3
    # Torch intra-op threads while learning; 0: the thread policy (puffer.threads) picks what
    # helps the model (one for small MLPs), within this job's share of the usable CPUs.
    torch_threads: int = 0
    # Torch threads while collecting; 0: the thread policy picks (one unless the forward pass
    # is large, never more than the CPUs that env worker processes leave free).
    rollout_threads: int = 0
    compile: bool = False
    # Keep freed host memory in the process for reuse (glibc malloc) instead of faulting it in
    # again each minibatch: ~10% of a CPU Atari update (see puffer.allocator).
    retain_memory: bool = True
    # Mixed precision for the policy's forward passes: bf16 or null (float32). Mainly for CUDA.
    amp: str | None = None
    # Seconds between progress lines when stdout is not a terminal.
    log_interval: float = 5.0
    # Stop training after the first epoch that ends this many seconds of training in (then save,
    # evaluate, as at the end); null: train.total_timesteps alone decides. A time-to-score search
    # bounds what a hopeless trial costs with it.
    max_seconds: float | None = None


@dataclass
class EvalConfig:
    """The evaluation protocol (puffer.evaluation): after training, and with mode=eval."""

    # Full episodes, on seeds apart from training's, with the deterministic and the stochastic
    # policy; 0 skips the evaluation.
    episodes: int = 20
    # The most steps one episode may take; one that reaches it is cut (and counted as
    # eval/truncated), so an env with no time limit cannot hang the end of a run.
    max_steps: int = 100_000
    # Record the first `video_episodes` episodes of the deterministic evaluation as MP4 files in
    # <run dir>/videos (the env rendered as rgb_array: full frames, not the policy's input).
    video: bool = False
    video_episodes: int = 1
    video_fps: int = 30
    # During training, every `video_interval` epochs (0: never): the first `video_episodes`
    # deterministic episodes of the current policy as <run dir>/videos/epoch_<N>_<k>.mp4.
    video_interval: int = 0
    # Show the deterministic evaluation episodes live in a window (render_mode='human'); needs
    # a display. mode=eval checkpoint=<run> eval.watch=true is rl-zoo's `enjoy`.
    watch: bool = False
    # The episode return that counts as solved, for perf/time_to_score_s (the training seconds
    # until an epoch's episodes reach it on average, with the stochastic policy); null: the env's
    # registered reward_threshold (gymnasium's spec: CartPole-v1 475), or none.
    score: float | None = None


@dataclass
class VecConfig:
    """backend: serial | multiprocessing | ray | auto (measure the candidates, keep the fastest)."""

    backend: str = "serial"
    num_envs: int = 8
    num_workers: int | None = None
    # Envs per recv(); less than num_envs gives async batches (multiprocessing, ray). (Not the
    # samples of an update: those are train.num_steps * the rows of all envs.)
    envs_per_batch: int | None = None
    # Allow more workers than this machine has cores.
    overwork: bool = False
    # multiprocessing: fork | spawn | forkserver; null: the platform's default.
    start_method: str | None = None
    # multiprocessing, synchronous batches: the main process steps worker 0's envs itself
    # instead of waiting idle; false keeps every env out of the main process.
    step_in_main: bool = True
    # A worker busy with one step (or reset) for longer than this many seconds is stuck: an
    # error naming it, its envs and its Python stack (envs stepped in the main process too:
    # serial, multiprocessing's worker 0). null: wait forever.
    step_timeout: float | None = 300.0
    # multiprocessing, ray: restart a worker whose env raised, whose process died or that is stuck
    # (past step_timeout), this many times in all, before its failure stops training. Its envs
    # reset on fresh seeds; the episodes they were in are left out of the rollout (logged as
    # vec/worker_restarts). 0: the first failure is an error.
    restart_failed_workers: int = 0
    # ray: the cluster to join (e.g. ray://head:10001 or auto); null starts a local Ray.
    ray_address: str | None = None
    # auto: seconds of random-action stepping per candidate.
    autotune_seconds: float = 1.0


@dataclass
class GymnasiumEnvConfig:
    """Any env registered with gymnasium, by id."""

    _target_: str = "puffer.envs.make_gymnasium"
    id: str = MISSING
    kwargs: dict[str, Any] = field(default_factory=dict)
    validate_steps: int = 1000
    # Wrappers applied in order: dotted class paths, or {_target_: path, its kwargs...}.
    wrappers: list[Any] = field(default_factory=list)
    # Elements kept from a Sequence observation (padded to this many, with their count).
    max_sequence_length: int = 16


@dataclass
class PettingZooEnvConfig:
    """A PettingZoo env module (e.g. pettingzoo.butterfly.pistonball_v6), built as a parallel env."""

    _target_: str = "puffer.envs.make_pettingzoo"
    module: str = MISSING
    kwargs: dict[str, Any] = field(default_factory=dict)
    validate_steps: int = 1000
    # Elements kept from a Sequence observation (padded to this many, with their count).
    max_sequence_length: int = 16


@dataclass
class AtariEnvConfig:
    """An ALE game with the baselines' preprocessing (puffer.envs.atari); needs the atari extra."""

    _target_: str = "puffer.envs.atari.make"
    game: str = MISSING
    sticky_actions: float = 0.25
    frame_skip: int = 4
    noop_max: int = 30
    screen_size: int = 84
    frame_stack: int = 4
    episodic_life: bool = True
    clip_rewards: bool = True
    max_episode_steps: int = 108_000
    validate_steps: int = 1000
    # Evaluation plays full games with true rewards.
    eval_kwargs: dict[str, Any] = field(
        default_factory=lambda: {"episodic_life": False, "clip_rewards": False})


# The native envs (puffer.envs.ocean): config name -> (class, the constructor arguments a config
# may set, with their defaults). One schema each, `env_ocean_<name>`, built below.
OCEAN_ENVS: dict[str, tuple[str, dict[str, Any]]] = {
    # CartPole: `num_rows` carts stepped at once in one env object (a row each; vec.num_envs
    # counts env objects).
    "cartpole": ("CartPole", {"num_rows": 1024, "max_steps": 500}),
    "squares": ("Squares", {"num_rows": 64, "episode_length": 8}),  # a CNN's quick check
    "herd": ("Herd", {"num_agents": 4, "size": 16, "max_steps": 32}),  # agents that leave
    # The sanity envs: each isolates one capability (see its module's docstring).
    "memory": ("Memory", {"num_rows": 1024, "delay": 4}),
    "bandit": ("Bandit", {"num_rows": 1024, "arms": 4, "delay": 8}),
    "password": ("Password", {"num_rows": 1024, "length": 8, "key": 0}),
    "stochastic": ("Stochastic", {"num_rows": 1024, "p": 0.75, "horizon": 16}),
    "continuous": ("Continuous", {"num_rows": 1024, "horizon": 8}),
    "spaces": ("Spaces", {"num_rows": 1024, "horizon": 4}),
    "multiagent": ("Multiagent", {"num_games": 256, "num_agents": 4, "min_agents": 2, "horizon": 8}),
    "nim": ("Nim", {"num_rows": 1024, "min_pile": 5, "max_pile": 15}),
    # Small games: speed and learning beyond the sanity checks; they render for videos.
    "pong": ("Pong", {"num_rows": 1024, "points": 3, "max_steps": 2000, "pixels": False}),
    "snake": ("Snake", {"num_arenas": 256, "num_snakes": 4, "size": 16, "num_food": 8, "view": 4,
                        "max_steps": 1000}),
}


def _ocean_schema(cls: str, defaults: dict[str, Any]) -> type:
    return make_dataclass(f"Ocean{cls}Config", [
        ("_target_", str, field(default=f"puffer.envs.ocean.{cls}")),
        *[(key, type(value), field(default=value)) for key, value in defaults.items()]])


OCEAN_SCHEMAS = {f"env_ocean_{name}": _ocean_schema(cls, defaults)
                 for name, (cls, defaults) in OCEAN_ENVS.items()}


@dataclass
class DefaultPolicyConfig:
    _target_: str = "puffer.models.Default"
    hidden_size: int = 64
    num_layers: int = 2
    activation: str = "tanh"
    # The initial log standard deviation of a Gaussian action head (continuous actions).
    log_std_init: float = 0.0
    # false: PyTorch's default initialization of every layer (SB3's ortho_init=False) instead of
    # orthogonal weights with a small-init action head.
    ortho_init: bool = True
    # lstm: wrap the policy in puffer.models.LSTMWrapper; null: feed-forward.
    rnn: str | None = None
    # Standardize the float leaves of observations with running statistics kept in the policy
    # (puffer.normalize.NormalizedPolicy), clipped to +-obs_clip.
    norm_obs: bool = False
    obs_clip: float = 10.0


@dataclass
class CNNPolicyConfig:
    """puffer.models.NatureCNN: the Nature DQN torso (32-8-4, 64-4-2, 64-3-1, 512) shared by
    actor and critic; observations / 255."""

    _target_: str = "puffer.models.NatureCNN"
    hidden_size: int = 512
    channels_last: bool = True
    # auto | chw | hwc: where the channels of the env's frames are (auto: from the shape).
    layout: str = "auto"
    rnn: str | None = None
    norm_obs: bool = False
    obs_clip: float = 10.0


@dataclass
class LoggerConfig:
    """The local metrics file is always written; `backends` adds wandb (Weights & Biases) and/or
    tensorboard (event files in the run directory), e.g. logger.backends=[wandb,tensorboard]."""

    backends: list[str] = field(default_factory=list)
    project: str = "puffer"
    entity: str | None = None
    group: str | None = None
    job_type: str = "train"
    tags: list[str] = field(default_factory=list)
    name: str | None = None
    # offline | online | disabled; null: online when an API key is configured, else offline.
    mode: str | None = None
    # Seconds to wait for W&B to start online; then the run goes on, logged offline.
    init_timeout: float = 30.0
    log_checkpoints: bool = True


@dataclass
class ModeConfig:
    """train: train, evaluate, save. profile: a short training, then where the time went.
    eval: evaluate `checkpoint` with the evaluation protocol. benchmark: random-action env
    throughput (puffer.bench.RLBenchmark). export: `checkpoint`'s agent as a folder to share
    (puffer.export)."""

    name: str = "train"
    # mode=benchmark: seconds per env measured
    seconds: float = 5.0
    # mode=export: the agent folder to write (model.safetensors, README.md model card,
    # config.yaml, results.json, replay.mp4 where the env renders); it must be new or empty.
    dir: str | None = None
    # mode=export: record replay.mp4 (the first deterministic evaluation episode) where the
    # env renders to rgb_array and the video extra is installed.
    video: bool = True


@dataclass
class ProfileConfig:
    """Read by mode=profile (and `sync_cuda` by any mode on CUDA)."""

    # Training steps of a profile run (at most train.total_timesteps).
    timesteps: int = 50_000
    # Synchronise CUDA at section boundaries so kernels are charged where they were launched;
    # null: on for mode=profile, off otherwise (it costs a little speed).
    sync_cuda: bool | None = None
    # Also record a torch profiler trace (trace.json in the run directory, chrome://tracing).
    torch_trace: bool = False


@dataclass
class DistConfig:
    """Data-parallel learning under torchrun (puffer.distributed); ignored without a launcher."""

    # auto: nccl on CUDA, gloo on CPU
    backend: str = "auto"
    # Seconds a collective (a gradient all-reduce, a checkpoint gather) may wait for the other
    # ranks before it raises instead of hanging.
    timeout: float = 300.0


@dataclass
class RunConfig:
    env: Any = MISSING
    vec: VecConfig = field(default_factory=VecConfig)
    policy: Any = MISSING
    train: TrainConfig = field(default_factory=TrainConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    mode: ModeConfig = field(default_factory=ModeConfig)
    profile: ProfileConfig = field(default_factory=ProfileConfig)
    dist: DistConfig = field(default_factory=DistConfig)
    seed: int = 0
    device: str = "auto"
    # A checkpoint file, a run directory (its newest checkpoint) or `latest` (newest under outputs/).
    resume: str | None = None
    # mode=eval and mode=export: the checkpoint, run directory, agent folder or `latest` whose
    # policy is evaluated or exported.
    checkpoint: str | None = None
    # What `python -m puffer` returns to a sweeper: null, the evaluation return (or the first of
    # env/episode_return, benchmark/sps, perf/sps there is); or a list of metric keys for a
    # multi-objective search, e.g. [eval/return_mean, perf/time_to_score_s].
    objective: list[str] | None = None
    # Load files that can run code: checkpoints not signed by this user's key (resume unpickles
    # the envs inside them), pickled model.pt files of older runs, model files whose config names
    # code outside puffer. Only for files from someone you trust (puffer.trust).
    trust_code: bool = False


def half(n: int) -> int:
    """`${half:${vec.num_envs}}` in a config: half the envs, e.g. async half batches that
    follow a `vec.num_envs=...` override."""
    return int(n) // 2


def sweeps_dir() -> str:
    """`${puffer_sweeps:}`: the sweep configs shipped in the package (puffer/sweeps)."""
    return str(SWEEPS_DIR)


def help_groups() -> str:
    """`${puffer_help_groups:}`: the options of each config group a user picks from, for --help.
    Hydra's own list also shows the typed schemas and the bases the env files build on (the
    env/*/default.yaml files), which are not choices."""
    lines = []
    for group in sorted(p for p in CONF_DIR.rglob("*") if p.is_dir() and p.name != "hydra"):
        options = sorted(f.stem for f in group.glob("*.yaml")
                         if not (f.stem == "default" and group.parent.name == "env"))
        if options:
            lines.append(f"  {group.relative_to(CONF_DIR).as_posix()}: {', '.join(options)}")
    for group in sorted(p for p in SWEEPS_DIR.iterdir() if p.is_dir()):
        options = sorted(f.stem for f in group.glob("*.yaml"))
        if options:
            lines.append(f"  +{group.name}: {', '.join(options)}   (with -m)")
    return "\n".join(lines)


def register() -> None:
    OmegaConf.register_new_resolver("half", half, replace=True)
    OmegaConf.register_new_resolver("puffer_sweeps", sweeps_dir, replace=True)
    OmegaConf.register_new_resolver("puffer_help_groups", help_groups, replace=True)
    cs = ConfigStore.instance()
    cs.store(name="run_schema", node=RunConfig)
    for name, node in {
        "train": TrainConfig, "runtime": RuntimeConfig, "vec": VecConfig, "logger": LoggerConfig, "mode": ModeConfig,
        "profile": ProfileConfig,
        "env_gymnasium": GymnasiumEnvConfig, "env_pettingzoo": PettingZooEnvConfig,
        "env_atari": AtariEnvConfig, **OCEAN_SCHEMAS,
        "policy_cnn": CNNPolicyConfig,
        "policy_default": DefaultPolicyConfig,
    }.items():
        cs.store(group="schema", name=name, node=node)


register()


MODES = ("train", "profile", "eval", "benchmark", "export")
BACKENDS = ("serial", "multiprocessing", "ray", "auto")
LOGGER_BACKENDS = ("wandb", "tensorboard")
WANDB_MODES = (None, "offline", "online", "disabled")


def _require(ok: bool, key: str, value: Any, expected: str) -> None:
    if not ok:
        raise ConfigError(f"{key}={value!r}: expected {expected}")


def validate(cfg) -> None:
    """Reject impossible values and combinations before any env starts, each with its key, its
    value and what was expected. `cfg` is the composed run config."""
    _require(cfg.mode.name in MODES, "mode.name", cfg.mode.name, f"one of {MODES}")
    _require(cfg.seed >= 0, "seed", cfg.seed, "an integer >= 0")
    _require(cfg.mode.seconds > 0, "mode.seconds", cfg.mode.seconds, "seconds > 0")
    _require(cfg.profile.timesteps > 0, "profile.timesteps", cfg.profile.timesteps, "an integer > 0")
    _check_env_and_policy(cfg)
    _check_vec(cfg.vec)
    _check_train(cfg.train, cfg.vec)
    _check_runtime(cfg.runtime)
    e = cfg.eval
    _require(e.episodes >= 0, "eval.episodes", e.episodes, "an integer >= 0 (0: no evaluation)")
    _require(e.max_steps >= 1, "eval.max_steps", e.max_steps, "an integer >= 1")
    _require(e.video_episodes >= 1, "eval.video_episodes", e.video_episodes, "an integer >= 1")
    _require(e.video_fps >= 1, "eval.video_fps", e.video_fps, "an integer >= 1")
    _require(e.video_interval >= 0, "eval.video_interval", e.video_interval,
             "an integer >= 0 (epochs between training videos; 0: none)")
    if e.watch:
        _require(has_display(), "eval.watch", e.watch,
                 "a display to show the episodes in (DISPLAY or WAYLAND_DISPLAY is not set); "
                 "record them instead with eval.video=true")
        _require(e.episodes > 0, "eval.episodes", e.episodes, "> 0 with eval.watch=true")
    for backend in cfg.logger.backends:
        _require(backend in LOGGER_BACKENDS, "logger.backends", list(cfg.logger.backends),
                 f"a list of {LOGGER_BACKENDS}")
    _require(cfg.logger.mode in WANDB_MODES, "logger.mode", cfg.logger.mode,
             "offline, online, disabled or null")
    _require(cfg.dist.backend in ("auto", "gloo", "nccl"), "dist.backend", cfg.dist.backend,
             "auto, gloo or nccl")
    _require(cfg.dist.timeout > 0, "dist.timeout", cfg.dist.timeout, "seconds > 0")
    _require(cfg.logger.init_timeout > 0, "logger.init_timeout", cfg.logger.init_timeout, "seconds > 0")
    if cfg.mode.name in ("eval", "export"):
        _require(cfg.checkpoint is not None, "checkpoint", cfg.checkpoint,
                 f"a run directory, agent folder, model or checkpoint file, or `latest` with mode={cfg.mode.name}")
        _require(e.episodes > 0, "eval.episodes", e.episodes, f"> 0 with mode={cfg.mode.name}")
    if cfg.mode.name == "export":
        _require(bool(cfg.mode.dir), "mode.dir", cfg.mode.dir,
                 "the folder to export the agent to, e.g. mode.dir=agents/cartpole")
    resolve_device(cfg.device)


def has_display() -> bool:
    """Whether a window can open: always on macOS and Windows, on Linux with an X or Wayland display."""
    import os
    import sys

    return sys.platform != "linux" or bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _check_env_and_policy(cfg) -> None:
    missing = sorted(OmegaConf.missing_keys(cfg.env))
    if missing:
        key = missing[0] if missing[0].startswith("env.") else f"env.{missing[0]}"
        raise ConfigError(f"{key} is required by this env config and was not given "
                          "(e.g. python -m puffer env=classic/gym env.id=MountainCar-v0)")
    if "max_sequence_length" in cfg.env:
        _require(cfg.env.max_sequence_length >= 1, "env.max_sequence_length", cfg.env.max_sequence_length,
                 "an integer >= 1")
    if "validate_steps" in cfg.env:
        _require(cfg.env.validate_steps >= 0, "env.validate_steps", cfg.env.validate_steps,
                 "an integer >= 0 (0: no checks)")
    p = cfg.policy
    for key in ("hidden_size", "num_layers"):
        if key in p:
            _require(p[key] >= 1, f"policy.{key}", p[key], "an integer >= 1")
    if "obs_clip" in p:
        _require(p.obs_clip > 0, "policy.obs_clip", p.obs_clip, "a number > 0")
    if "activation" in p:
        from puffer.models import ACTIVATIONS

        _require(p.activation in ACTIVATIONS, "policy.activation", p.activation, f"one of {sorted(ACTIVATIONS)}")
    if "log_std_init" in p:
        _require(math.isfinite(p.log_std_init), "policy.log_std_init", p.log_std_init, "a finite number")
    if "layout" in p:
        from puffer.models import PIXEL_LAYOUTS

        _require(p.layout in PIXEL_LAYOUTS, "policy.layout", p.layout, f"one of {PIXEL_LAYOUTS}")
    _require(p.get("rnn") in (None, "lstm"), "policy.rnn", p.get("rnn"), "lstm or null")


def _check_vec(v) -> None:
    _require(v.backend in BACKENDS, "vec.backend", v.backend, f"one of {BACKENDS}")
    _require(v.num_envs >= 1, "vec.num_envs", v.num_envs, "an integer >= 1")
    _require(v.step_timeout is None or v.step_timeout > 0, "vec.step_timeout", v.step_timeout,
             "seconds > 0, or null to wait forever")
    _require(v.restart_failed_workers >= 0, "vec.restart_failed_workers", v.restart_failed_workers,
             "an integer >= 0")
    _require(v.restart_failed_workers == 0 or v.backend in ("multiprocessing", "ray"),
             "vec.restart_failed_workers", v.restart_failed_workers,
             f"0 with vec.backend={v.backend}: workers are restarted by vec=multiprocessing and vec=ray")
    _require(v.backend != "serial" or v.num_workers in (None, 1), "vec.num_workers", v.num_workers,
             "null with vec=serial (this process steps every env); workers need vec=multiprocessing or ray")
    if v.num_workers is not None:
        _require(v.num_workers >= 1 and v.num_envs % v.num_workers == 0, "vec.num_workers", v.num_workers,
                 f"a divisor of vec.num_envs={v.num_envs} (each worker steps as many envs)")
    if v.envs_per_batch is not None:
        _require(1 <= v.envs_per_batch <= v.num_envs and v.num_envs % v.envs_per_batch == 0,
                 "vec.envs_per_batch", v.envs_per_batch, f"a divisor of vec.num_envs={v.num_envs}, or null (all of them)")
    _require(v.start_method in (None, "fork", "spawn", "forkserver"), "vec.start_method", v.start_method,
             "fork, spawn, forkserver or null")
    _require(v.autotune_seconds > 0, "vec.autotune_seconds", v.autotune_seconds, "seconds > 0")


# Train keys where infinity means "no limit"; every other number must be finite (an infinite
# coefficient is otherwise a non-finite loss after the envs have started).
UNBOUNDED_TRAIN_KEYS = ("clip_coef", "vf_clip_coef", "max_grad_norm", "reward_clip", "target_kl")


def _check_train(t, v) -> None:
    for key, value in t.items():
        if isinstance(value, float):
            _require(not math.isnan(value) and (math.isfinite(value) or key in UNBOUNDED_TRAIN_KEYS),
                     f"train.{key}", value, "a finite number")
    _require(t.total_timesteps > 0, "train.total_timesteps", t.total_timesteps, "an integer > 0")
    _require(t.num_steps >= 1, "train.num_steps", t.num_steps, "an integer >= 1")
    _require(t.learning_rate > 0 and math.isfinite(t.learning_rate), "train.learning_rate",
             t.learning_rate, "a finite number > 0")
    _require(0 <= t.gamma <= 1, "train.gamma", t.gamma, "a number in [0, 1]")
    _require(0 <= t.gae_lambda <= 1, "train.gae_lambda", t.gae_lambda, "a number in [0, 1]")
    _require(t.update_epochs >= 1, "train.update_epochs", t.update_epochs, "an integer >= 1")
    for key in ("clip_coef", "vf_clip_coef", "max_grad_norm", "adam_eps", "reward_clip"):
        _require(t[key] > 0, f"train.{key}", t[key], "a number > 0")
    for key in ("ent_coef", "vf_coef"):
        _require(t[key] >= 0, f"train.{key}", t[key], "a number >= 0")
    _require(t.target_kl is None or t.target_kl > 0, "train.target_kl", t.target_kl, "a number > 0 or null")
    _require(t.num_minibatches >= 1, "train.num_minibatches", t.num_minibatches, "an integer >= 1")
    batch = t.num_steps * v.num_envs
    _require(t.num_minibatches <= batch, "train.num_minibatches", t.num_minibatches,
             f"at most the batch of train.num_steps * vec.num_envs = {batch} steps")
    from puffer.optim import OPTIMIZERS, SCHEDULES

    for key in ("vtrace_rho_clip", "vtrace_c_clip", "prio_alpha"):
        _require(t[key] > 0, f"train.{key}", t[key], "a number > 0")
    _require(0 <= t.prio_beta0 <= 1, "train.prio_beta0", t.prio_beta0, "a number in [0, 1]")
    _require(t.optimizer in OPTIMIZERS, "train.optimizer", t.optimizer, f"one of {OPTIMIZERS}")
    _require(t.lr_schedule in SCHEDULES, "train.lr_schedule", t.lr_schedule, f"one of {SCHEDULES}")
    algorithm_class(t._target_)


def _check_runtime(r) -> None:
    _require(r.checkpoint_interval >= 0, "runtime.checkpoint_interval", r.checkpoint_interval,
             "an integer >= 0 (0: only at the end)")
    _require(math.isfinite(r.checkpoint_minutes) and r.checkpoint_minutes >= 0, "runtime.checkpoint_minutes",
             r.checkpoint_minutes, "minutes >= 0 (0: off)")
    _require(r.keep_checkpoints >= 0, "runtime.keep_checkpoints", r.keep_checkpoints,
             "an integer >= 0 (0 keeps all)")
    for key in ("torch_threads", "rollout_threads"):
        _require(r[key] >= 0, f"runtime.{key}", r[key], "an integer >= 0 (0 picks for the machine)")
    _require(r.amp in (None, "bf16"), "runtime.amp", r.amp, "bf16 or null")
    _require(r.log_interval >= 0, "runtime.log_interval", r.log_interval, "a number >= 0")
    _require(r.max_seconds is None or r.max_seconds > 0, "runtime.max_seconds", r.max_seconds,
             "seconds > 0 or null")


def algorithm_class(target: str) -> type:
    """The trainer class `train._target_` names; a clear error unless it is a puffer Trainer."""
    from hydra.utils import get_class

    from puffer.trainer import Trainer

    try:
        cls = get_class(target)
    except Exception as exc:  # hydra wraps import errors of every kind
        raise ConfigError(f"train._target_={target!r}: cannot import it ({exc}); expected a "
                          "puffer.trainer.Trainer subclass such as puffer.ppo.PPO") from None
    _require(isinstance(cls, type) and issubclass(cls, Trainer), "train._target_", target,
             "a puffer.trainer.Trainer subclass such as puffer.ppo.PPO")
    return cls


def resolve_device(device: str) -> str:
    """`auto` -> cuda when available, else cpu; checks that an explicit device exists."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return device
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(f"device={device!r}: CUDA is not available here; use device=auto or cpu")
        index = device.partition(":")[2]
        if index and (not index.isdigit() or int(index) >= torch.cuda.device_count()):
            raise ConfigError(
                f"device={device!r}: expected cuda or cuda:N with N < {torch.cuda.device_count()}"
            )
        return device
    raise ConfigError(f"device={device!r}: expected auto, cpu, cuda or cuda:N")
