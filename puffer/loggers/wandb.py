"""Weights & Biases: the only module that imports wandb.

A W&B failure never stops training: the logger warns once, stops sending, and the local metrics
file (always written) keeps everything.
"""

from __future__ import annotations

import logging
import netrc
import os
from pathlib import Path

from puffer.loggers.base import Logger

log = logging.getLogger(__name__)

NAMESPACES = ("train", "env", "perf", "eval")
MODEL_FILE = "model.safetensors"  # puffer.files.model_file.NAME (loggers sit below files)


def has_api_key() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (FileNotFoundError, netrc.NetrcParseError):
        return False


def pick_mode(mode: str | None) -> str:
    """The configured mode; unset -> WANDB_MODE, else online with an API key, else offline."""
    return mode or os.environ.get("WANDB_MODE") or ("online" if has_api_key() else "offline")


class WandbLogger(Logger):
    def __init__(self, cfg, run_dir: Path, config: dict, name: str, tags: list[str], group: str, job_type: str,
                 alongside: bool = False):
        """`name`, `tags`, `group` and `job_type`: the run's identity (puffer.build.run_identity).
        `alongside`: other runs of this process stay open beside it (the members of a batch)."""
        import wandb

        self.failed = False
        os.environ.setdefault("WANDB_START_METHOD", "thread")  # avoids hangs under Hydra
        settings = dict(
            # (W&B refuses tags over 64 characters and groups over 128)
            project=cfg.project, entity=cfg.entity, group=group[:128], job_type=job_type,
            tags=list(dict.fromkeys(tag[:64] for tag in tags)), name=name, config=config, dir=str(run_dir),
            # Hydra's basic launcher runs multirun jobs in one process: never merge into the
            # previous job's run; members of a batch log at once, each to its own run.
            reinit="create_new" if alongside else "finish_previous",
        )
        mode = pick_mode(cfg.mode)
        try:
            # silent, and one line of ours below: W&B's own are a screenful per run, some of
            # them after the multirun's last line
            self.run = wandb.init(mode=mode, settings=wandb.Settings(init_timeout=cfg.init_timeout, silent=True),
                                  **settings)
        except Exception as exc:  # no network, a bad key, a server down: train on regardless
            if mode != "online":
                raise
            log.warning("W&B could not start online (%s); continuing offline: the run is kept "
                        "under %s for `wandb sync`", str(exc).splitlines()[0], run_dir / "wandb")
            self.run = wandb.init(mode="offline", settings=wandb.Settings(silent=True), **settings)
            mode = "offline"
        kept = Path(self.run.dir).parent
        if mode == "online":
            log.info("W&B run %r (group %r): %s", name, group, self.run.url)
        elif mode == "offline":
            log.info("W&B run %r (group %r): offline, kept in %s (wandb sync %s uploads it)", name, group,
                     kept, kept)
        self.log_checkpoints = cfg.log_checkpoints
        self.run.define_metric("global_step")
        for namespace in NAMESPACES:
            self.run.define_metric(f"{namespace}/*", step_metric="global_step")
        # the episode return again against wall-clock training time: time to score in the charts
        self.run.define_metric("perf/train_seconds")
        self.run.define_metric("time/*", step_metric="perf/train_seconds")

    def _guard(self, what: str, fn, *args) -> None:
        if self.failed:
            return
        try:
            fn(*args)
        except Exception as exc:  # W&B must never stop training; the metrics file has it all
            self.failed = True
            log.warning("W&B %s failed (%r); W&B logging is off for the rest of the run", what, exc)

    def log(self, metrics: dict[str, float], step: int) -> None:
        against_time = ({"time/episode_return": metrics["env/episode_return"]}
                        if "env/episode_return" in metrics and "perf/train_seconds" in metrics else {})
        self._guard("log", self.run.log, {**metrics, **against_time, "global_step": step})

    def log_checkpoint(self, path: Path) -> None:
        """Uploaded as an artifact as logger.log_checkpoints says: none (the default), final (the
        final model.safetensors), all (every epoch checkpoint too)."""
        final = Path(path).name == MODEL_FILE
        if self.log_checkpoints == "all" or (self.log_checkpoints == "final" and final):
            self._guard("checkpoint upload", self._log_artifact, path)

    def _log_artifact(self, path: Path) -> None:
        import wandb

        artifact = wandb.Artifact(f"{self.run.id}-model", type="model")
        artifact.add_file(str(path))
        self.run.log_artifact(artifact)

    def log_table(self, name: str, columns: list[str], rows: list) -> None:
        self._guard("table", self._log_table, name, columns, rows)

    def _log_table(self, name: str, columns: list[str], rows: list) -> None:
        import wandb

        data = wandb.Table(columns=columns, data=[list(row) for row in rows])
        self.run.log({name: data, f"{name}_chart": wandb.plot.bar(data, columns[0], columns[1],
                                                                   title=name)})

    def log_video(self, name: str, path: Path, step: int | None = None) -> None:
        self._guard("video", self._log_video, name, path, step)

    def _log_video(self, name: str, path: Path, step: int | None) -> None:
        import wandb

        record = {name: wandb.Video(str(path), format="mp4")}
        if step is not None:  # on the same x axis as the metrics
            record["global_step"] = step
        self.run.log(record)

    def close(self) -> None:
        self.failed = False  # finish even after a failure, so the next run starts clean
        self._guard("finish", self.run.finish)
