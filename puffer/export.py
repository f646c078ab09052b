"""mode=export: a trained agent as a folder anyone can load, evaluate and share.

    python -m puffer mode=export checkpoint=outputs/2026-12-05/10-00-00 mode.dir=agents/cartpole

The folder follows the layout of Hugging Face model repositories (as SB3's and CleanRL's shared
agents do), so `huggingface_hub.HfApi().upload_folder(folder_path=..., repo_id=...)` publishes
it as it is:
- `model.safetensors`: the weights, spaces and config (puffer.files.model_file; data only);
- `README.md`: the model card, with the hub's metadata block (library, tags, the evaluation as
  `model-index`) and the env, algorithm, steps, wall time, the evaluation's mean with its Student's
  t 95% interval over `eval.episodes` held-out episodes, the command that trained it, puffer's
  version and how to load it;
- `results.json`: the evaluation's numbers; `config.yaml`: the run's config, for readers;
- `replay.mp4`: the first deterministic evaluation episode, where the env renders to rgb_array
  and the video extra is installed (otherwise a warning says why there is none).

`puffer.load(<folder>)` and `mode=eval checkpoint=<folder>` take the folder. Nothing here needs a
network. What does not live here: the model file's format (puffer.files.model_file), the evaluation
protocol (puffer.evaluation).
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

import puffer
from puffer.agent import evaluation_config, load_for_evaluation, model_path
from puffer.build import make_env_creator
from puffer.config.validate import resolve_device
from puffer.errors import ConfigError
from puffer.evaluation.runs import check_recording, final_evaluation
from puffer.files import model_file
from puffer.monitor.progress import env_name

log = logging.getLogger(__name__)


def export(cfg: DictConfig, run_dir: Path, overrides: list[str] | None = None) -> dict[str, float]:
    """Write the agent of `cfg.checkpoint` into `cfg.mode.dir`; returns its evaluation (on the
    env it was trained on, unless the command line, `overrides`, names another)."""
    target = Path(cfg.mode.dir)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ConfigError(f"mode.dir={cfg.mode.dir!r}: exists and is not an empty folder; name a new one")
    source = model_path(cfg.checkpoint, key="checkpoint")
    device = resolve_device(cfg.device)
    agent = load_for_evaluation(cfg, source, device, overrides)
    cfg = evaluation_config(cfg, agent, overrides)
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target) as scratch:
        settings = with_video(cfg, cfg.mode.video and can_record(cfg)).eval
        metrics = final_evaluation(settings, cfg.seed, agent.policy, make_env_creator(cfg, evaluation=True),
                                   device, Path(scratch), game="module" in cfg.env)
        videos = sorted((Path(scratch) / "videos").glob("*.mp4"))
        if videos:
            shutil.move(videos[0], target / "replay.mp4")
    agent.save(target / model_file.NAME)
    results = {"env": env_label(cfg), "episodes": cfg.eval.episodes, "seed": cfg.seed,
               "source": str(source), **metrics}
    (target / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (target / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(agent.config or {})))
    (target / "README.md").write_text(model_card(agent, cfg, metrics))
    log.info("agent exported to %s: %s (eval/return_mean %.2f +- %.2f over %d episodes)", target,
             ", ".join(sorted(p.name for p in target.iterdir())), metrics["eval/return_mean"],
             metrics["eval/return_ci95"], cfg.eval.episodes)
    return metrics


def with_video(cfg: DictConfig, video: bool) -> DictConfig:
    cfg = cfg.copy()
    cfg.eval.video, cfg.eval.video_episodes, cfg.eval.video_interval = video, 1, 0
    return cfg


def can_record(cfg: DictConfig) -> bool:
    """Whether replay.mp4 can be made (the check a run makes before recording: the video extra,
    a render_mode, one rendered frame); a warning says why not otherwise."""
    try:
        check_recording(make_env_creator(cfg, evaluation=True), cfg.seed, env_name(cfg), "mode.video")
    except ConfigError as exc:
        log.warning("no replay.mp4: %s", exc)
        return False
    return True


def env_label(cfg: DictConfig) -> str:
    return env_name(cfg)


def model_card(agent, cfg: DictConfig, metrics: dict[str, float]) -> str:
    """README.md: the hub's metadata block, then what the agent is and how well it plays."""
    config = agent.config or {}
    env = env_label(cfg)
    algorithm = str((config.get("train") or {}).get("_target_", "puffer.training.ppo.PPO")).rsplit(".", 1)[-1]
    training = agent.training or {}
    mean, ci, std = metrics["eval/return_mean"], metrics["eval/return_ci95"], metrics["eval/return_std"]
    steps = training.get("global_step")
    seconds = training.get("wall_seconds")
    episodes = cfg.eval.episodes
    front = {
        "library_name": "puffer",
        "tags": ["reinforcement-learning", "deep-reinforcement-learning", "puffer", env],
        "model-index": [{"name": f"{algorithm}-{env}", "results": [{
            "task": {"type": "reinforcement-learning", "name": "reinforcement-learning"},
            "dataset": {"name": env, "type": env},
            "metrics": [{"type": "mean_reward", "value": f"{mean:.2f} +/- {std:.2f}", "name": "mean_reward",
                         "verified": False}]}]}],
    }
    rows = [
        ("env", f"`{env}`"),
        ("algorithm", f"{algorithm} (`{(config.get('train') or {}).get('_target_', '')}`)"),
        ("training steps", f"{steps:,}" if isinstance(steps, int) else "not recorded"),
        ("training wall time", f"{seconds:,.0f} s" if isinstance(seconds, (int, float)) else "not recorded"),
        ("evaluation", f"{mean:.2f} +- {ci:.2f} (Student's t 95% interval; std {std:.2f}) over {episodes} "
                       f"episodes, deterministic policy, seeds from {cfg.seed} apart from training's"),
        ("stochastic policy", f"{metrics['eval/stochastic_return_mean']:.2f} +- "
                              f"{metrics['eval/stochastic_return_ci95']:.2f}"),
        ("trained with", f"`{training.get('command', 'not recorded')}`"),
        ("puffer", f"{training.get('puffer_version', 'unknown')} (exported with {puffer.__version__})"),
    ]
    table = "\n".join(["| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)])
    replay = "\n![replay](replay.mp4)\n" if (Path(cfg.mode.dir) / "replay.mp4").is_file() else ""
    return f"""---
{OmegaConf.to_yaml(OmegaConf.create(front)).rstrip()}
---

# {algorithm} agent for {env}

A policy trained with [puffer](https://pypi.org/project/puffer/).
{replay}
{table}

## Use it

```python
import puffer

agent = puffer.load("path/to/this/folder")   # model.safetensors: weights, spaces, config; no code runs
action = agent.act(observation)              # the env's own observation in, its own action out
```

Evaluate it again (the numbers above come from this protocol):

```bash
python -m puffer mode=eval checkpoint=path/to/this/folder eval.episodes={episodes} seed={cfg.seed}
```

## Share it

```python
from huggingface_hub import HfApi

HfApi().upload_folder(folder_path="path/to/this/folder", repo_id="<user>/{algorithm.lower()}-{env}")
```

`config.yaml` is the run's full config; `results.json` the evaluation's numbers.
"""
