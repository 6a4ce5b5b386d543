"""The ``dagster-daemon`` a command starts when none serves the instance
(``DaemonSupervisor``), its code server, and the stopping of their process groups."""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import functools
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import dagster as dg

from backfill_assets.core.spark import driver_host, shared_driver
from backfill_assets.release.launch import (
    IN_FLIGHT,
    LOCATION,
    WORKSPACE,
    GraphQLTarget,
    LaunchError,
    bin_path,
    settings_env,
)
from backfill_assets.release.prestart import Prestarted
from backfill_assets.settings import DRIVER_HOST_ENV, Settings

log = logging.getLogger(__name__)
T = TypeVar("T")

CODE_MODULE = "backfill_assets.definitions"
CODE_SERVER_START_SECONDS = 300  # loading the definitions (PySpark, pandera) on a busy host


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """The daemon must not outlive the command that started it, even after SIGKILL; and it
    must stop when told. A command started with SIGINT ignored (a shell's background job,
    ``nohup``) passes that on, and Dagster's processes answer SIGTERM with SIGINT's
    handler: the code server ignored the stop and was killed 30 s later, at the end of
    every such command. They start with the default handlers."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    os.setsid()
    for interrupt in (signal.SIGINT, signal.SIGTERM):
        signal.signal(interrupt, signal.SIG_DFL)


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs. Zombies do not count: a member whose
    parent died waits to be reaped by init, up to a second or more here after it has
    exited, holding nothing but its process id."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            state, _ppid, group = stat.read_text().rpartition(")")[2].split()[:3]
            if int(group) == pgid and state != "Z":
                return True
    return False


def _group_gone(pgid: int, seconds: float) -> bool:
    """Wait up to ``seconds`` until no process of group ``pgid`` is left running; True if
    none is."""
    deadline = time.monotonic() + seconds
    while _group_alive(pgid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def stop_process_groups(processes: list[subprocess.Popen], timeout: float = 30.0) -> None:
    """SIGTERM the process groups ``processes`` lead, all at once, and wait until every
    member is gone (the daemon, the code server, run workers and their Spark JVMs),
    SIGKILL after ``timeout``: a command returns only when nothing it started is left."""
    started = time.monotonic()
    for process in processes:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
    for process in processes:
        pgid = process.pid
        left = max(timeout - (time.monotonic() - started), 0.0)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=left)
        if not _group_gone(pgid, timeout - (time.monotonic() - started)):
            log.warning("process group %d still alive %.0fs after SIGTERM: SIGKILL", pgid, timeout)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            _group_gone(pgid, 5)
        process.wait()


def listens(path: Path) -> bool:
    """A code server listens on the Unix socket ``path`` (it binds once it has loaded the
    definitions)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def code_server_workspace(folder: Path) -> Path:
    """Write ``folder/workspace.yaml``: the code location served on the Unix socket
    ``folder/code.sock`` (a daemon and GraphQL calls given it load no code); returns the
    socket's path."""
    sock = folder / "code.sock"
    location = {"socket": str(sock), "location_name": LOCATION}
    (folder / "workspace.yaml").write_text(json.dumps({"load_from": [{"grpc_server": location}]}))
    return sock


def code_server_command(sock: Path) -> list[str]:
    """``dagster api grpc`` serving the project's definitions on the Unix socket ``sock``."""
    return [bin_path("dagster"), "api", "grpc", "--module-name", CODE_MODULE,
            "--socket", str(sock), "--location-name", LOCATION]  # fmt: skip


class DaemonSupervisor:
    """Make sure a Dagster daemon serves the instance while a command waits on it.

    If another process (``make ui``, a production deployment, another CLI) runs one, it is
    used; otherwise this process starts ``dagster-daemon run`` and stops it on exit (also
    when this process is killed). One starter at a time: an OS lock on
    ``$DAGSTER_HOME/daemon.lock`` (released by the kernel if the holder dies); a waiting
    command starts its own when the holder has finished.

    A daemon of its own gets a code server of its own (``dagster api grpc`` on a Unix
    socket, started by ``prepare`` while the command does its own work): the daemon, the
    command's GraphQL calls (``workspace``) and the runs use it, so the definitions are
    loaded once per command, not once per process; and ``kick`` restarts the daemon alone
    (no code to load) so that its backfill iteration, which Dagster runs as the daemon
    starts and then every 30 s, sees a run's end at once.

    The daemon and the command's GraphQL call start from processes started ahead
    (``release.prestart``) with the code server, so Dagster's imports are not waited for;
    a kick restarts the daemon in its own process (``Prestarted.restart``), which imports
    Dagster once per command.
    """

    def __init__(self, settings: Settings, instance: dg.DagsterInstance, log_file: Path):
        self.settings = settings
        self.instance = instance
        self.log_file = log_file
        self.lock_path = Path(settings.dagster_home) / "daemon.lock"
        self._lock = None
        self.process: subprocess.Popen | None = None
        self.code_server: subprocess.Popen | None = None
        self._scratch: Path | None = None
        self._next_daemon: Prestarted | None = None  # started ahead, not yet running
        self._daemon: Prestarted | None = None  # the running daemon's process
        self._graphql: Prestarted | None = None
        self.driver_host: subprocess.Popen | None = None  # the runs' driver JVM's host
        self._run_env: dict[str, str] = {}  # what the code server passes on to the runs

    def _external_daemon(self) -> bool:
        """A daemon we did not start sent a heartbeat after the last one we stopped."""
        stopped_at = 0.0
        with contextlib.suppress(OSError, ValueError):
            stopped_at = float(json.loads(self.lock_path.read_text() or "{}").get("stopped", 0))
        beats = self.instance.get_daemon_heartbeats()
        newest = max((b.timestamp for b in beats.values()), default=0.0)
        return newest > max(stopped_at, time.time() - 90)

    def _owns(self) -> bool:
        """Take the starter's lock; True if this command is to run the daemon."""
        if self._lock is None:
            handle = open(self.lock_path, "a+")  # noqa: SIM115 - held for the command's life
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                return False  # another command runs the daemon for us
            self._lock = handle
        return not self._external_daemon()

    def _started(self, start: Callable[..., T]) -> T:
        """``start`` a process of this command's: its environment, its output into the log,
        stopped with the command (``_die_with_parent``)."""
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as out:
            return start(
                env={**settings_env(self.settings), **self._run_env},
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
            )

    def _spawn(self, command: list[str], **popen) -> subprocess.Popen:
        return self._started(functools.partial(subprocess.Popen, command, **popen))

    def _prestart_daemon(self) -> None:
        if self._next_daemon is None:
            self._next_daemon = self._started(functools.partial(Prestarted, "dagster-daemon"))

    def prepare(self, *, driver: bool = False) -> None:
        """Start the code server of a daemon this command will run (none if another process
        serves the instance); returns at once, ``workspace`` waits for it. With ``driver``
        (a release's runs will use Spark), also a driver JVM the runs attach to, one after
        the other (``core.spark.driver_host``), where they can share one."""
        if self.code_server is not None or not self._owns():
            return
        self._scratch = Path(tempfile.mkdtemp(prefix="backfill-assets-"))
        if driver and driver_host.wanted(self.settings) and shared_driver.hosted() is None:
            # where runs look for it (a host that serves this command already, as
            # ``driver_host --run``'s, is in the runs' environment as it is in this one)
            self._run_env[DRIVER_HOST_ENV] = str(self._scratch / "driver.json")
        sock = code_server_workspace(self._scratch)
        log.info("starting the code server for this command (log: %s)", self.log_file)
        self.code_server = self._spawn(code_server_command(sock))
        self._prestart_daemon()
        self._graphql = Prestarted(
            "dagster-graphql",
            env=settings_env(self.settings),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    def start_driver(self, *, short_run: bool) -> None:
        """Launch the driver JVM the runs of this command's release attach to (``prepare``
        with ``driver``; nothing otherwise), for a short life if ``short_run``."""
        path = self._run_env.get(DRIVER_HOST_ENV)
        if path is None or self.driver_host is not None:
            return
        command = driver_host.command(Path(path), short_run=short_run)
        self.driver_host = self._spawn(command, stdin=subprocess.PIPE)

    def graphql_process(self) -> Prestarted | None:
        """The process prestarted for this command's (first) GraphQL call, once (None if
        there is none, or it died: the call then starts its own)."""
        process, self._graphql = self._graphql, None
        return process if process is not None and process.process.poll() is None else None

    def graphql_target(self) -> GraphQLTarget:
        """Where this command's next GraphQL call goes: its code server (``workspace``), in
        the process prestarted for the first call."""
        return GraphQLTarget(self.workspace(), self.graphql_process())

    def workspace(self) -> Path:
        """The workspace file for Dagster processes of this command: the code server's once
        it serves (``prepare``), else the project's (each process loads the code itself)."""
        if self.code_server is None or self._scratch is None:
            return WORKSPACE
        sock = self._scratch / "code.sock"
        deadline = time.monotonic() + CODE_SERVER_START_SECONDS
        while not listens(sock):
            if self.code_server.poll() is not None:
                raise LaunchError(
                    f"the code server exited with {self.code_server.returncode} while loading "
                    f"{CODE_MODULE}; see {self.log_file}"
                )
            if time.monotonic() > deadline:
                raise LaunchError(f"the code server did not start in time; see {self.log_file}")
            time.sleep(0.1)
        return self._scratch / "workspace.yaml"

    def _daemon_args(self) -> list[str]:
        return ["run", "-w", str(self.workspace())]

    def _start_daemon(self) -> None:
        log.info("starting dagster-daemon for this command (log: %s)", self.log_file)
        args = self._daemon_args()
        ahead, self._next_daemon = self._next_daemon, None
        if ahead is None or ahead.process.poll() is not None:  # none, or it died waiting
            ahead = self._started(functools.partial(Prestarted, "dagster-daemon"))
        self._daemon = ahead
        self.process = ahead.start(args, again=True)

    def ensure(self) -> None:
        """Called while waiting: start a daemon if none serves the instance."""
        if self.process is not None:
            if self.process.poll() is not None:
                raise LaunchError(
                    f"dagster-daemon exited with {self.process.returncode}; see {self.log_file}"
                )
            return
        if self.code_server is None:
            self.prepare()
        if self.code_server is not None:
            self._start_daemon()

    def kick(self) -> None:
        """Restart the daemon this command runs, so that its backfill iteration runs now
        (a run of the backfill ended); nothing if another process runs the daemon. Its
        process stops the daemon's threads (Dagster's answer to an interrupt) and starts
        them again: one daemon at a time, its imports done."""
        if self._daemon is None or self.process is None or self.process.poll() is not None:
            return
        log.info("restarting dagster-daemon for this command (log: %s)", self.log_file)
        self._daemon.restart(self._daemon_args())

    def busy(self) -> list[str]:
        """Backfills and runs of the instance still in flight (the daemon serves them all)."""
        backfills = [
            b.backfill_id
            for b in self.instance.get_backfills(limit=100)
            if b.status.value in ("REQUESTED", "CANCELING", "FAILING")
        ]
        runs = self.instance.get_runs(filters=dg.RunsFilter(statuses=IN_FLIGHT), limit=100)
        return backfills + [r.run_id for r in runs]

    def close(self, *, drain: bool = False, poll_seconds: float = 1.0) -> None:
        """Stop the daemon this command started and its code server. With ``drain``, first
        wait until nothing else is in flight: the daemon's code server also runs other
        commands' runs, which stopping it now would kill."""
        if drain and self.process is not None:
            waiting = self.busy()
            if waiting:
                log.info(
                    "waiting for %d other backfill(s)/run(s) this daemon serves before "
                    "stopping it: %s",
                    len(waiting),
                    ", ".join(waiting[:5]),
                )
            while waiting and self.process.poll() is None:
                time.sleep(poll_seconds)
                waiting = self.busy()
            if not waiting and self.code_server is not None:
                # It serves no run: nothing of it to end cleanly, and its gRPC shutdown on
                # SIGTERM takes 1.5 s that every command would wait for.
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.code_server.pid, signal.SIGKILL)
        for ahead in (self._next_daemon, self._graphql):
            if ahead is not None:
                ahead.cancel()
        if self._daemon is not None:
            self._daemon.end()  # stopped below, its process then exits
        self._next_daemon = self._graphql = self._daemon = None
        stop_process_groups(
            [p for p in (self.process, self.code_server, self.driver_host) if p is not None]
        )
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
        if self._lock is not None:
            if self.process is not None:
                self.lock_path.write_text(json.dumps({"stopped": time.time()}))
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
        self.process, self.code_server, self._lock, self._scratch = None, None, None, None
        self.driver_host, self._run_env = None, {}

    def __enter__(self) -> DaemonSupervisor:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(drain=exc_type is None)
