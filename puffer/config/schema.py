"""Config schemas: one typed dataclass per config group, registered in Hydra's ConfigStore.

What lives here: the schemas (so a typo or a wrong type in a YAML file or an override is rejected
with the key named, before any env is built) and the vocabularies their keys take. What does
not: the checks no type can express (puffer.config.validate), the YAML values (conf/), the code
the configs build.

Each YAML file links its schema from its defaults list (`- /schema/train@_here_` etc.).
"""

from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

# The configs and sweeps travel inside the package (in a checkout, puffer/conf and puffer/sweeps
# link to the top-level conf/ and sweeps/), so that the CLI, the console script, puffer.train and
# an installed wheel all find them here.
CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
SWEEPS_DIR = Path(__file__).resolve().parents[1] / "sweeps"


@dataclass
class AlgorithmConfig:
    """What every algorithm has, because the trainer's loop and the collector read it: the
    algorithm (`_target_`, a puffer.training.trainer.Trainer subclass), the budget, the rollout's
    length, the optimizer and its schedule, the discount and the reward scaler. An algorithm's
    own settings are fields of a subclass (TrainConfig: PPO's and SPO's), registered as its
    schema; the `train` section takes any of them. How the process runs the training
    (checkpoints, threads, precision) is RuntimeConfig's."""

    _target_: str = "puffer.training.ppo.PPO"
    total_timesteps: int = 500_000
    learning_rate: float = 2.5e-4
    anneal_lr: bool = True
    # How anneal_lr decays the LR to 0: linear | cosine (puffer.training.optim.lr_scale).
    lr_schedule: str = "linear"
    # adam | muon (Muon for weight matrices, Adam for the rest; puffer.training.optim.make_optimizer).
    optimizer: str = "adam"
    adam_eps: float = 1e-5
    num_steps: int = 128
    num_minibatches: int = 4
    gamma: float = 0.99
    # Rewards divided by the running std of the discounted return, clipped to +-reward_clip
    # (puffer.training.reward_scaler.RewardScaler); episode returns are still logged unscaled.
    norm_reward: bool = False
    reward_clip: float = 10.0


@dataclass
class TrainConfig(AlgorithmConfig):
    """PPO's settings (and SPO's, which reads the same), with CleanRL's names and ppo.py
    defaults. Named TrainConfig since the first Python API (puffer.frameworks.cleanrl.Config)."""

    update_epochs: int = 4
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
    max_grad_norm: float = 0.5
    target_kl: float | None = None
    # V-trace-clipped advantages (PufferLib 3.0's "puffer advantage", puffer.training.advantage.gae):
    # after the first update epoch, GAE is recomputed with each TD error weighted by
    # min(pi/mu, vtrace_rho_clip) and each trace by min(pi/mu, vtrace_c_clip).
    vtrace: bool = False
    vtrace_rho_clip: float = 1.0
    vtrace_c_clip: float = 1.0
    # Prioritized sampling: minibatches drawn with replacement with probability proportional to
    # |advantage|^prio_alpha (samples; whole rows for recurrent policies), the policy loss
    # weighted by (n p)^-beta, beta annealed from prio_beta0 to 1 (puffer.training.minibatches.Priority).
    prioritized: bool = False
    prio_alpha: float = 0.8
    prio_beta0: float = 0.2


@dataclass
class QLearningConfig(AlgorithmConfig):
    """What every Q-learner reads (puffer.training.qlearning): epsilon-greedy exploration and
    gradient clipping."""

    max_grad_norm: float = 10.0
    # Epsilon of the epsilon-greedy actions: from start_e to end_e, linearly over the first
    # exploration_fraction of train.total_timesteps, then end_e.
    start_e: float = 1.0
    end_e: float = 0.05
    exploration_fraction: float = 0.5


@dataclass
class PQNConfig(QLearningConfig):
    """PQN's settings (puffer.training.pqn; Gallici et al. 2024), with CleanRL's pqn.py names and
    defaults: Q(lambda) targets over each rollout, no replay buffer and no target network."""

    _target_: str = "puffer.training.pqn.PQN"
    learning_rate: float = 2.5e-4
    update_epochs: int = 4
    # lambda of the Q(lambda) targets: 0 is one-step Q-learning, 1 the Monte Carlo return.
    q_lambda: float = 0.65


@dataclass
class ReplayConfig(AlgorithmConfig):
    """What every learner from a replay buffer reads (puffer.training.replay.LearnsFromReplay):
    each epoch's rollout (train.num_steps of every row, SB3's train_freq) goes into the buffer,
    then gradient_steps minibatches of batch_size transitions are drawn from it."""

    num_minibatches: int = 1  # (not read: each gradient step draws batch_size transitions)
    # Transitions the replay buffer keeps (rows of the flat batch: one per agent step).
    buffer_size: int = 1_000_000
    batch_size: int = 256
    # Steps collected before the first gradient step.
    learning_starts: int = 100
    # Gradient steps after each epoch's rollout; 0: as many as the rollout's transitions.
    gradient_steps: int = 0
    # How far each update moves a target network towards the online one (1: a copy).
    tau: float = 0.005
    # Keep the replay buffer in checkpoints (resume continues bit for bit); false leaves it out,
    # with a warning: a resumed run refills it from its next rollouts.
    save_replay: bool = True


@dataclass
class DQNConfig(ReplayConfig, QLearningConfig):
    """DQN's settings (puffer.training.dqn; Mnih et al. 2015), with SB3's names and defaults where
    they mean the same: the replay buffer's minibatches train the network against a target
    network, acting epsilon-greedily (the buffer is filled by that policy before learning_starts)."""

    _target_: str = "puffer.training.dqn.DQN"
    learning_rate: float = 1e-4
    anneal_lr: bool = False
    num_steps: int = 4
    batch_size: int = 32
    gradient_steps: int = 1
    # Steps between target network updates, each moving it by tau.
    target_update_interval: int = 10_000
    tau: float = 1.0
    # The target's own argmax (false) or the online network's (true: Double DQN, van Hasselt 2016).
    double_q: bool = False
    # Prioritized replay (Schaul et al. 2016, proportional): transitions drawn with probability
    # proportional to |TD error|^prio_alpha, the loss weighted by (n p)^-beta / its max, beta
    # annealed from prio_beta0 to 1 (the names of PPO's prioritized minibatches).
    prioritized: bool = False
    prio_alpha: float = 0.6
    prio_beta0: float = 0.4
    end_e: float = 0.05
    exploration_fraction: float = 0.1


@dataclass
class SACConfig(ReplayConfig):
    """SAC's settings (puffer.training.sac; Haarnoja et al. 2018, with automatic entropy tuning),
    with SB3's names and defaults where they mean the same: the replay buffer's minibatches train
    the twin critics, the actor and the entropy coefficient, and each step moves the target
    critics by tau. Before learning_starts the actions are uniform in the bounds (SB3's warm-up)."""

    _target_: str = "puffer.training.sac.SAC"
    learning_rate: float = 3e-4
    anneal_lr: bool = False
    adam_eps: float = 1e-8
    num_steps: int = 1
    # The entropy coefficient (alpha): learned from this initial value towards target_entropy
    # (autotune, SB3's ent_coef='auto'), or fixed at it.
    ent_coef: float = 1.0
    autotune: bool = True
    # The policy's entropy that autotune aims at; null: minus the number of action dimensions.
    target_entropy: float | None = None
    # Exploration noise correlated in time while collecting (puffer.policies.distributions.CorrelatedNoise):
    # each row's Gaussian draw keeps this share of its last one; 0 draws afresh each step (SAC's).
    noise_correlation: float = 0.0


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
    # Torch intra-op threads while learning; 0: the thread policy (puffer.runtime.threads) picks what
    # helps the model (one for small MLPs), within this job's share of the usable CPUs.
    torch_threads: int = 0
    # Torch threads while collecting; 0: the thread policy picks (one unless the forward pass
    # is large, never more than the CPUs that env worker processes leave free).
    rollout_threads: int = 0
    # torch.compile the policy's forward pass (collecting and learning; a feed-forward policy's):
    # the first steps pay for compiling it (10-25 s on these CPUs, a few with a warm inductor cache).
    compile: bool = False
    # Keep freed host memory in the process for reuse (glibc malloc) instead of faulting it in
    # again each minibatch: ~10% of a CPU Atari update (see puffer.runtime.allocator).
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
class SuiteEnvConfig:
    """What every env built by name from a suite takes: its constructor's kwargs, and what
    emulation (puffer.emulation) reads: how many steps to check observations against the
    declared space, how many elements of a Sequence observation to keep."""

    kwargs: dict[str, Any] = field(default_factory=dict)
    validate_steps: int = 1000
    # Elements kept from a Sequence observation (padded to this many, with their count).
    max_sequence_length: int = 16


@dataclass
class GymnasiumEnvConfig(SuiteEnvConfig):
    """Any env registered with gymnasium, by id."""

    _target_: str = "puffer.envs.make_gymnasium"
    id: str = MISSING
    # Wrappers applied in order: dotted class paths, or {_target_: path, its kwargs...}.
    wrappers: list[Any] = field(default_factory=list)


@dataclass
class PettingZooEnvConfig(SuiteEnvConfig):
    """A PettingZoo env module (e.g. pettingzoo.butterfly.pistonball_v6), built as a parallel env."""

    _target_: str = "puffer.envs.make_pettingzoo"
    module: str = MISSING


@dataclass
class AtariEnvConfig:
    """An ALE game with the baselines' preprocessing (puffer.envs.atari); needs the atari extra."""

    _target_: str = "puffer.envs.atari.make"
    game: str = MISSING
    # The probability that the previous action repeats (Machado et al. 2018's protocol).
    sticky_actions: float = 0.25
    frame_skip: int = 4
    # Up to this many no-op actions after a reset: varied starts.
    noop_max: int = 30
    screen_size: int = 84  # grayscale frames resized to screen_size x screen_size
    frame_stack: int = 4
    # Training only (eval_kwargs turns them off): a lost life ends the episode; sign-clipped rewards.
    episodic_life: bool = True
    clip_rewards: bool = True
    max_episode_steps: int = 108_000  # ALE frames (the emulator's, not agent steps): 30 minutes at 60 frames/s
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
    _target_: str = "puffer.policies.networks.Default"
    hidden_size: int = 64
    num_layers: int = 2
    activation: str = "tanh"
    # The initial log standard deviation of a Gaussian action head (continuous actions).
    log_std_init: float = 0.0
    # false: PyTorch's default initialization of every layer (SB3's ortho_init=False) instead of
    # orthogonal weights with a small-init action head.
    ortho_init: bool = True
    # lstm: wrap the policy in puffer.policies.wrappers.LSTMWrapper; null: feed-forward.
    rnn: str | None = None
    # Standardize the float leaves of observations with running statistics kept in the policy
    # (puffer.policies.normalize.NormalizedPolicy), clipped to +-obs_clip.
    norm_obs: bool = False
    obs_clip: float = 10.0


@dataclass
class QPolicyConfig:
    """puffer.policies.networks.QNetwork: a value per action (Q-learning: train=pqn, dqn), an MLP with a
    LayerNorm before each activation (layer_norm, PQN's)."""

    _target_: str = "puffer.policies.networks.QNetwork"
    hidden_size: int = 128
    num_layers: int = 2
    activation: str = "relu"
    layer_norm: bool = True
    # A state value and the actions' advantages, Q = V + A - mean(A) (Wang et al. 2016's dueling head).
    dueling: bool = False
    rnn: str | None = None
    norm_obs: bool = False
    obs_clip: float = 10.0


@dataclass
class SACPolicyConfig:
    """puffer.policies.networks.SACNetwork: a squashed Gaussian actor and twin critics (SAC:
    train=sac), MLPs with SB3's MlpPolicy shapes."""

    _target_: str = "puffer.policies.networks.SACNetwork"
    hidden_size: int = 256
    num_layers: int = 2
    activation: str = "relu"
    # The actor's initial log std (its log_std layer's bias; the layer's weights start small):
    # null keeps PyTorch's default initialization, SB3's.
    log_std_init: float | None = None
    rnn: str | None = None
    norm_obs: bool = False
    obs_clip: float = 10.0


@dataclass
class CNNPolicyConfig:
    """puffer.policies.networks.NatureCNN: the Nature DQN torso (32-8-4, 64-4-2, 64-3-1, 512) shared by
    actor and critic; observations / 255."""

    _target_: str = "puffer.policies.networks.NatureCNN"
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
    # W&B's group, name and extra tags; null: puffer.build.run_identity's (env, algorithm, the
    # settings the command line changed; the name adds the seed). job_type is the mode.
    group: str | None = None
    tags: list[str] = field(default_factory=list)
    name: str | None = None
    # offline | online | disabled; null: online when an API key is configured, else offline.
    mode: str | None = None
    # Seconds to wait for W&B to start online; then the run goes on, logged offline.
    init_timeout: float = 30.0
    # Artifacts uploaded to W&B: none, final (the final model.safetensors) or all (with every
    # epoch checkpoint).
    log_checkpoints: str = "none"


@dataclass
class ModeConfig:
    """train: train, evaluate, save. profile: a short training, then where the time went.
    eval: evaluate `checkpoint` with the evaluation protocol. benchmark: random-action env
    throughput (puffer.vector.benchmark.RLBenchmark). export: `checkpoint`'s agent as a folder to share
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
    """Data-parallel learning under torchrun (puffer.runtime.distributed); ignored without a launcher."""

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
    # any algorithm's schema (an AlgorithmConfig subclass): conf/train/<name>.yaml picks one
    train: AlgorithmConfig = field(default_factory=AlgorithmConfig)
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
    # multi-objective search, e.g. [eval/return_mean, perf/time_to_score_s]. With trial_seeds,
    # an entry may name how its seeds' values combine: `min(eval/return_mean)` (one of
    # OBJECTIVE_STATS; a bare key is their mean).
    objective: list[str] | None = None
    # How many seeds one job trains: seed, seed+1, ... one after another, each in
    # <job dir>/seed_<s>, so that a sweep trial is judged on more than one seed's luck.
    trial_seeds: int = 1
    # Load files that can run code: checkpoints not signed by this user's key (resume unpickles
    # the envs inside them), pickled model.pt files of older runs, model files whose config names
    # code outside puffer. Only for files from someone you trust (puffer.files.trust).
    trust_code: bool = False


# Each algorithm's schema by its ConfigStore name (schema/<name>): conf/train/<option>.yaml
# links one, and a train.* key of another algorithm's is named as such (puffer.cli.overrides).
ALGORITHM_SCHEMAS: dict[str, type] = {"train": TrainConfig, "train_pqn": PQNConfig, "train_dqn": DQNConfig,
                                      "train_sac": SACConfig}

# The vocabularies: the values a key may take, checked by puffer.config.validate and used by
# the code they name (its tables are keyed by these).
MODES = ("train", "profile", "eval", "benchmark", "export")
BACKENDS = ("serial", "multiprocessing", "ray", "auto")
LOGGER_BACKENDS = ("wandb", "tensorboard")
WANDB_MODES = (None, "offline", "online", "disabled")
OPTIMIZERS = ("adam", "muon")
SCHEDULES = ("linear", "cosine")
ACTIVATIONS = ("tanh", "relu", "gelu")
PIXEL_LAYOUTS = ("auto", "chw", "hwc")
# how an objective entry combines a trial's seeds: min(eval/return_mean)
OBJECTIVE_STATS = ("mean", "median", "min", "max")


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
    # (preset_env/ and tuned/: what a preset or an algorithm gives each env, read through
    # `preset` and `train`, not chosen themselves)
    for group in sorted(p for p in CONF_DIR.rglob("*") if p.is_dir() and p.name != "hydra"
                        and p.relative_to(CONF_DIR).parts[0] not in ("preset_env", "tuned")):
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
        **ALGORITHM_SCHEMAS, "runtime": RuntimeConfig, "vec": VecConfig, "logger": LoggerConfig, "mode": ModeConfig,
        "profile": ProfileConfig,
        "env_gymnasium": GymnasiumEnvConfig, "env_pettingzoo": PettingZooEnvConfig,
        "env_atari": AtariEnvConfig, **OCEAN_SCHEMAS,
        "policy_cnn": CNNPolicyConfig,
        "policy_default": DefaultPolicyConfig,
        "policy_q": QPolicyConfig,
        "policy_sac": SACPolicyConfig,
    }.items():
        cs.store(group="schema", name=name, node=node)


register()
