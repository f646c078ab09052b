"""Ray backend: one actor per worker, each stepping a contiguous slice of envs.

For users who outgrow one machine: `ray.init(address=...)` joins an existing cluster
(`vec.ray_address`), otherwise a local Ray is started for the run. Results come back through Ray's
object store (copies, unlike the shared memory of Multiprocessing); `envs_per_batch < num_envs` gives
the same async batches, over `ray.wait`. Needs the ray extra: pip install 'puffer[ray]'.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time

import numpy as np

from puffer import renamed
from puffer.emulation import Buffers
from puffer.vector import base  # the helpers every backend shares, as base.<name>
from puffer.vector.base import EnvGroup, Received, VecConfigError, VecEnv
from puffer.vector.multiprocessing import WorkerError
from puffer.vector.reaper import ray_processes

log = logging.getLogger(__name__)


class _Worker:
    """Runs inside a Ray actor: builds its envs once, then steps them on request."""

    def __init__(self, creators, env_args, env_kwargs, first: int, agents_per_env: int):
        envs = base.build_envs(creators, env_args, env_kwargs, first)
        self.first, self.agents_per_env = first, agents_per_env
        self.buffers = Buffers.allocate(envs[0].single_observation_space, len(envs) * agents_per_env)
        self.group = EnvGroup(envs, first, self.buffers, agents_per_env)

    def save(self) -> dict:
        return base.pickled_envs(self.group.envs)

    def load(self, envs: bytes, buffers: dict | None = None) -> None:
        """Continue from saved envs, and from the rows of the buffers they had written: the
        flags an env writes only at a reset (masks) must not come back as zeros."""
        self.group.close()
        self.group = EnvGroup(renamed.loads(envs), self.first, self.buffers, self.agents_per_env)
        if buffers is not None:
            base.restore(self.buffers, buffers)

    def ready(self) -> bool:
        return True

    def where(self) -> tuple[str, int]:
        return socket.gethostname(), os.getpid()

    def reset(self, seed):
        return self._result(self.group.reset(seed))

    def step(self, actions):
        return self._result(self.group.step(actions))

    def _result(self, infos):
        b = self.buffers
        return b.observations, b.rewards, b.terminals, b.truncations, b.masks, list(infos)

    def close(self) -> None:
        self.group.close()

    def stack(self) -> str:
        """Where every thread of this actor is, asked while a step is stuck: this method runs in
        its own concurrency group (its own thread), beside the busy one."""
        import sys
        import threading
        import traceback

        names = {t.ident: t.name for t in threading.enumerate()}
        return "\n".join(f"thread {names.get(ident, ident)}:\n" + "".join(traceback.format_stack(frame))
                         for ident, frame in sys._current_frames().items() if ident != threading.get_ident())


def _import_ray():
    try:
        import ray
    except ImportError as exc:
        raise VecConfigError("vec.backend=ray needs Ray: pip install 'puffer[ray]'") from exc
    return ray


def reap(processes: list, timeout: float = 3.0) -> None:
    """Kill what is left of `processes` after `timeout` seconds. ray.shutdown() after a Ctrl-C
    inside ray.init (measured here at 2.1 s into the start-up) leaves the dashboard and
    runtime-env agents running, orphaned: no Ray process may outlive the run."""
    import psutil

    _, alive = psutil.wait_procs(processes, timeout=timeout)
    for process in alive:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            continue
    if alive:
        log.warning("ray.shutdown() left %d Ray process(es) running; killed them", len(alive))


# An HTTP/2 client's connection preface and an empty SETTINGS frame: a gRPC server (Ray's GCS, the
# Ray client server) answers with a SETTINGS frame of its own (frame type 4, the 4th byte).
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def check_reachable(address: str | None, timeout: float = 5.0) -> None:
    """A host:port (or ray://host:port) address must answer as Ray does within `timeout`: ray.init
    on an address where nothing listens, or where another kind of server listens, waits for
    minutes. Ray's services are gRPC, so the check is an HTTP/2 handshake. `auto` is checked at the
    address Ray itself would pick (RAY_ADDRESS, else the session its temp folder records), where a
    session whose head has stopped made ray.init retry for 9.5 minutes."""
    if address == "auto":
        found = auto_address()
        if found is not None:
            try:
                check_reachable(found, timeout)
            except VecConfigError as exc:
                raise VecConfigError(
                    f"vec.ray_address='auto': Ray's recorded session (RAY_ADDRESS, else "
                    f"<ray temp dir>/ray_current_cluster) is {found}, and {str(exc).split(': ', 1)[1]} "
                    "A stale session: `ray stop` clears it; start a cluster with `ray start --head`, or leave "
                    "vec.ray_address out for a local Ray") from None
        return
    if address is None or ":" not in address:
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not port.isdigit():
        raise VecConfigError(f"vec.ray_address={address!r}: expected host:port, ray://host:port or auto")
    try:
        connection = socket.create_connection((host, int(port)), timeout=timeout)
    except OSError as exc:
        raise VecConfigError(f"vec.ray_address={address!r}: nothing answered at {host}:{port} within "
                             f"{timeout:g} s ({exc.strerror or exc}); is the Ray head running?") from None
    with connection:
        try:
            connection.sendall(HTTP2_PREFACE)
            answer = connection.recv(9)
        except OSError:  # a timeout, a reset
            answer = b""
    if len(answer) < 4 or answer[3] != 4:
        raise VecConfigError(f"vec.ray_address={address!r}: something listens at {host}:{port}, but not Ray "
                             f"(no gRPC answer within {timeout:g} s); give the Ray head's GCS address "
                             "(`ray start --head` prints it) or ray://host:10001")


def auto_address() -> str | None:
    """The address ray.init(address='auto') would join, by Ray's own lookup (its private
    services module: None where this Ray has none, or finds no session; ray.init then says so
    at once)."""
    try:
        from ray._private.services import get_ray_address_from_environment
    except ImportError:
        return None
    try:
        found = get_ray_address_from_environment("auto", None)
    except ConnectionError:
        return None
    return found if found and found != "auto" else None


@contextlib.contextmanager
def local_ray_started(local: bool):
    """While a local Ray starts: its node advertised on 127.0.0.1, and its processes in process
    groups of their own.

    Ray turns the loopback address it is given into this machine's outward address unless its
    cluster mode is off (as on macOS and Windows; RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER is read when
    ray is imported, hence the constant too). Ray starts its GCS, raylet and helpers in the run's
    process group, so a signal to that group (SLURM, `timeout`, `kill -- -PGID`) ended them
    while the run was saving its envs from them; in groups of their own they get no group
    signal, and the run closes them (or the watchdog, if it dies)."""
    if not local:
        yield
        return
    from ray._private import ray_constants, services

    from puffer.runtime.processes import environment_variable

    before, popen = ray_constants.ENABLE_RAY_CLUSTER, services.ConsolePopen

    class OwnGroupPopen(popen):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("process_group", 0)
            super().__init__(*args, **kwargs)

    ray_constants.ENABLE_RAY_CLUSTER = False
    services.ConsolePopen = OwnGroupPopen
    try:
        # (read by Ray's processes started now)
        with environment_variable(ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR, "0"):
            yield
    finally:
        services.ConsolePopen = popen
        ray_constants.ENABLE_RAY_CLUSTER = before


def private_token() -> None:
    """Ray writes the token of its authentication (~/.ray/auth_token) readable by everyone
    (0644): whoever reads it can run code on the local Ray. Made the user's alone (0600)."""
    import stat
    from pathlib import Path

    token = Path.home() / ".ray" / "auth_token"
    try:
        info = token.stat()
        if info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) & 0o077:
            token.chmod(0o600)
    except FileNotFoundError:
        return


class Ray(VecEnv):
    backend_name = "ray"
    steps_in_workers = True

    def __init__(self, env_creators, env_args=None, env_kwargs=None, num_envs: int = 1,
                 num_workers: int | None = None, envs_per_batch: int | None = None,
                 zero_copy: bool = True, seed: int = 0, address: str | None = None,
                 overwork: bool = True, step_timeout: float | None = 300.0,
                 restart_failed_workers: int = 0, **unused):
        ray = _import_ray()
        check_reachable(address)
        # A cluster has more cores than this machine: the local core count is no limit here.
        creators, num_workers, driver = base.prepare_workers(env_creators, env_args, env_kwargs, num_envs,
                                                        num_workers, envs_per_batch, overwork)
        super().__init__(driver, num_envs, envs_per_batch, seed)
        driver.close()
        self._ray = ray
        self._started_ray = not ray.is_initialized()
        self.num_workers = num_workers
        self.envs_per_worker = num_envs // num_workers
        self.workers_per_batch = self.envs_per_batch // self.envs_per_worker
        self.step_timeout = step_timeout
        self.buffers = Buffers.allocate(self.single_observation_space, self.num_rows)
        self._actors: list = []
        self._pending: dict = {}  # ref -> worker, of every command not yet received
        self._sent_at: dict = {}  # ref -> when its command was sent
        self._idle: set[int] = set()
        self._received: list[int] | None = None
        self._reaper = None  # the watchdog of a local Ray (puffer.vector.reaper)
        self.restart_budget = restart_failed_workers  # self-healing: VecEnv.count_restart
        self._build = (creators, env_args, env_kwargs)
        try:
            self._start(address)
        except BaseException:  # Ctrl-C during start-up too: no Ray process or actor left behind
            self.close()
            raise

    def _start(self, address) -> None:
        """Start (or join) Ray and the actors; every actor built its envs, or its error is raised."""
        if self._started_ray:
            self._init_ray(address)
        # stack() in a concurrency group of its own, so that it answers while a step is stuck;
        # every other method stays in the default group, one at a time, in order
        self._remote = self._ray.remote(num_cpus=0, concurrency_groups={"inspect": 1})(_Worker)
        self._actors = [self._new_actor(w) for w in range(self.num_workers)]
        self._pending = {actor.ready.remote(): w for w, actor in enumerate(self._actors)}
        self._drain()

    def _init_ray(self, address) -> None:
        """Join the cluster at `address`, or start a local Ray: no dashboard, its node advertised
        on loopback, and a watchdog that ends it if this process dies without closing it (Ray's
        own token authentication, on by default for a local Ray since 2.5x, is left on)."""
        local = address is None
        if local:  # the watchdog first: a run that dies inside ray.init leaves no Ray behind
            from puffer.vector import reaper

            self._reaper = reaper.start(os.getpid())
        try:
            with local_ray_started(local):
                self._ray.init(address=address, include_dashboard=False, log_to_driver=False,
                               configure_logging=False, **({"_node_ip_address": "127.0.0.1"} if local else {}))
        except (ConnectionError, TimeoutError, RuntimeError, ValueError) as exc:
            if local:
                raise
            raise VecConfigError(f"vec.ray_address={address!r}: no Ray cluster there ({type(exc).__name__}: "
                                 f"{str(exc).splitlines()[0] if str(exc) else 'no answer'}); start one with "
                                 "`ray start --head`, or leave vec.ray_address out for a local Ray") from None
        if local:
            private_token()

    def _new_actor(self, w: int):
        creators, env_args, env_kwargs = self._build
        per = self.envs_per_worker
        return self._remote.remote(creators[w * per : (w + 1) * per], env_args, env_kwargs, w * per,
                                   self.agents_per_env)

    def _restarted(self, w: int, failure: str):
        """A new actor for failed worker w, its envs reset on fresh seeds; its result reads as a
        truncation of each env (see puffer.vector.multiprocessing). None past the budget."""
        if not self.count_restart(w, failure, name="ray worker"):
            return None
        self._ray.kill(self._actors[w])
        self._actors[w] = self._new_actor(w)
        try:
            # its start and env build are not a step (as at the first start): no step_timeout
            self._ray.get(self._actors[w].ready.remote())
            result = self._ray.get(self._actors[w].reset.remote(self.restart_seed()), timeout=self.step_timeout)
        except Exception as exc:  # any failure of the new actor is final
            self.close()
            raise WorkerError(f"ray worker {w} failed again while being restarted: {exc}") from exc
        obs, rewards, terminals, truncations, masks, _ = result
        return (obs, np.zeros_like(rewards), np.zeros_like(terminals), np.ones_like(truncations), masks, [])

    def local_worker_pids(self) -> list[int]:
        """The actors running on this machine (a local Ray's, or this node's of a cluster)."""
        here = socket.gethostname()
        found = self._ray.get([actor.where.remote() for actor in self._actors])
        return [pid for host, pid in found if host == here]

    def _rows(self, w: int) -> slice:
        per = self.envs_per_worker * self.agents_per_env
        return slice(w * per, (w + 1) * per)

    def async_reset(self, seed: int | None = None) -> None:
        seed = self.seed if seed is None else seed
        self._drain()
        self._pending = {actor.reset.remote(seed): w for w, actor in enumerate(self._actors)}
        self._sent_at = dict.fromkeys(self._pending, time.monotonic())
        self._idle, self._received = set(), None

    def send(self, actions, env_ids=None) -> None:
        workers = (self._received if env_ids is None
                   else base.whole_groups(env_ids, self.envs_per_worker, "workers"))
        if workers is None:
            raise RuntimeError("send() called before recv(): it steps the envs recv() returned")
        if not set(workers) <= self._idle:
            raise RuntimeError(f"send(): workers {sorted(set(workers) - self._idle)} are still stepping")
        actions = self.check_actions(actions, len(workers) * self.envs_per_worker * self.agents_per_env)
        per = self.envs_per_worker * self.agents_per_env
        now = time.monotonic()
        for i, w in enumerate(workers):
            ref = self._actors[w].step.remote(actions[i * per : (i + 1) * per])
            self._pending[ref], self._sent_at[ref] = w, now
        self._idle -= set(workers)
        if self._received is not None and set(self._received) <= set(workers):
            self._received = None

    def recv(self):
        if not self._pending:
            raise RuntimeError("recv(): nothing is stepping; send() first")
        count = min(self.workers_per_batch, len(self._pending))
        ready = self._wait(count)
        workers, infos = [], []
        for ref in ready:
            w = self._pending.pop(ref)
            self._sent_at.pop(ref, None)
            obs, rewards, terminals, truncations, masks, worker_infos = self._get(ref, w, restart=True)
            rows = self._rows(w)
            b = self.buffers
            b.observations[rows], b.rewards[rows], b.terminals[rows] = obs, rewards, terminals
            b.truncations[rows], b.masks[rows] = truncations, masks
            workers.append(w)
            infos += worker_infos
        workers.sort()
        self._received = workers
        self._idle |= set(workers)
        rows = base.rows_of(workers, self.envs_per_worker * self.agents_per_env)
        b = self.buffers
        env_ids = np.concatenate([np.arange(w * self.envs_per_worker, (w + 1) * self.envs_per_worker)
                                  for w in workers])
        return Received(b.observations[rows], b.rewards[rows], b.terminals[rows], b.truncations[rows],
                        infos, env_ids, b.masks[rows])

    def get_state(self) -> dict | None:
        """Every actor's envs, pickled there, and a copy of the buffers; None (with a warning)
        when they can't be captured. Call it between rollouts, with no actor stepping."""
        if base.stepping(set(self._pending.values())):
            return None
        refs = [actor.save.remote() for actor in self._actors]
        return base.workers_state(self.backend_name, [self._get(ref, w) for w, ref in enumerate(refs)], self.buffers)

    def set_state(self, state: dict) -> None:
        saved = base.check_saved_workers(state, self.num_workers)
        self._drain()
        rows = self.envs_per_worker * self.agents_per_env
        self._pending = {
            actor.load.remote(envs, {k: v[w * rows : (w + 1) * rows] for k, v in state["buffers"].items()}): w
            for w, (actor, envs) in enumerate(zip(self._actors, saved, strict=True))}
        self._drain()
        base.restore(self.buffers, state["buffers"])
        # as after a recv() of every worker: the restored observations await their actions
        self._received, self._idle = list(range(self.num_workers)), set(range(self.num_workers))

    def _wait(self, count: int) -> list:
        """The first `count` pending refs to be ready; a step pending past step_timeout is an
        error naming the actor, its envs and its stack."""
        ready: list = []
        while len(ready) < count:
            waiting = [ref for ref in self._pending if ref not in ready]
            timeout = None
            if self.step_timeout is not None:
                oldest = min(self._sent_at.get(ref, time.monotonic()) for ref in waiting)
                timeout = max(0.0, oldest + self.step_timeout - time.monotonic())
            got, _ = self._ray.wait(waiting, num_returns=count - len(ready), timeout=timeout)
            ready += got
            if len(ready) < count:
                self._check_stuck([ref for ref in waiting if ref not in got])
        return ready

    def _check_stuck(self, waiting: list) -> None:
        now = time.monotonic()
        for ref in waiting:
            sent = self._sent_at.get(ref)
            if sent is None or now - sent < self.step_timeout:
                continue
            w = self._pending[ref]
            try:
                asked = self._actors[w].stack.options(concurrency_group="inspect").remote()
                stack = self._ray.get(asked, timeout=10)
                where = f"its stack:\n{stack}"
            except Exception as exc:  # the actor may be gone or hung in C: say so, then raise ours
                where = f"it did not answer a request for its stack ({exc!r})"
            stuck = (f"{self.worker_label(w, 'ray worker')} has been busy with one "
                     f"step for {now - sent:.0f} s (vec.step_timeout={self.step_timeout:g}); {where}")
            if self.restarts_left > 0:  # killed, its step fails, and _get restarts it
                log.warning("%s", stuck)
                self._sent_at.pop(ref)
                self._ray.kill(self._actors[w])
                continue
            self.close()
            raise WorkerError(stuck)

    def _get(self, ref, w: int, restart: bool = False):
        """The result of `ref` from worker w; a failed step or reset (`restart`) restarts the
        worker where vec.restart_failed_workers allows."""
        try:
            return self._ray.get(ref)
        except (self._ray.exceptions.RayTaskError, self._ray.exceptions.RayActorError) as exc:
            result = self._restarted(w, str(exc)) if restart else None
            if result is not None:
                return result
            after = self.after_restarts()
            self.close()
            raise WorkerError(f"{self.worker_label(w, 'ray worker')} failed{after}:\n{exc}") from exc

    def _drain(self) -> None:
        while self._pending:
            ref = self._wait(1)[0]  # under step_timeout too
            w = self._pending.pop(ref)
            self._sent_at.pop(ref, None)
            self._get(ref, w)

    def close(self) -> None:
        if self._closed:
            return
        super().close()
        for actor in self._actors:
            self._ray.kill(actor)
        if self._started_ray:
            spawned = ray_processes()
            self._ray.shutdown()
            reap(spawned)
        if self._reaper is not None:  # its Ray is shut down: nothing left for it to do
            self._reaper.terminate()
            self._reaper.wait()
