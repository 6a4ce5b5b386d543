"""The ``dagster-daemon`` a command starts when none serves the instance
(``DaemonSupervisor``), and the stopping of its process group."""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import logging
import os
import signal
import subprocess
import time
from pathlib import Path

import dagster as dg

from backfill_assets.launch import IN_FLIGHT, WORKSPACE, LaunchError, bin_path, settings_env
from backfill_assets.settings import Settings

log = logging.getLogger(__name__)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """The daemon must not outlive the command that started it, even after SIGKILL."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    os.setsid()


def _group_gone(pgid: int, seconds: float) -> bool:
    """Wait up to ``seconds`` until no process of group ``pgid`` is left (exited members
    are reaped by init); True if none is."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # pragma: no cover - a member we may not signal
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def stop_process_group(process: subprocess.Popen, timeout: float = 30.0) -> None:
    """SIGTERM the process group ``process`` leads and wait until every member is gone
    (the daemon, its code server, run workers and their Spark JVMs), SIGKILL after
    ``timeout``: a command returns only when nothing it started is left."""
    pgid = process.pid
    started = time.monotonic()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=timeout)
    if not _group_gone(pgid, timeout - (time.monotonic() - started)):
        log.warning("process group %d still alive %.0fs after SIGTERM: SIGKILL", pgid, timeout)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        _group_gone(pgid, 5)
    process.wait()


class DaemonSupervisor:
    """Make sure a Dagster daemon serves the instance while a command waits on it.

    If another process (``make ui``, a production deployment, another CLI) runs one, it is
    used; otherwise this process starts ``dagster-daemon run`` and stops it on exit (also
    when this process is killed). One starter at a time: an OS lock on
    ``$DAGSTER_HOME/daemon.lock`` (released by the kernel if the holder dies); a waiting
    command starts its own when the holder has finished.
    """

    def __init__(self, settings: Settings, instance: dg.DagsterInstance, log_file: Path):
        self.settings = settings
        self.instance = instance
        self.log_file = log_file
        self.lock_path = Path(settings.dagster_home) / "daemon.lock"
        self._lock = None
        self.process: subprocess.Popen | None = None

    def _external_daemon(self) -> bool:
        """A daemon we did not start sent a heartbeat after the last one we stopped."""
        stopped_at = 0.0
        with contextlib.suppress(OSError, ValueError):
            stopped_at = float(json.loads(self.lock_path.read_text() or "{}").get("stopped", 0))
        beats = self.instance.get_daemon_heartbeats()
        newest = max((b.timestamp for b in beats.values()), default=0.0)
        return newest > max(stopped_at, time.time() - 90)

    def ensure(self) -> None:
        """Called while waiting: start a daemon if none serves the instance."""
        if self.process is not None:
            if self.process.poll() is not None:
                raise LaunchError(
                    f"dagster-daemon exited with {self.process.returncode}; see {self.log_file}"
                )
            return
        if self._lock is None:
            handle = open(self.lock_path, "a+")  # noqa: SIM115 - held for the command's life
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                return  # another command runs the daemon for us
            self._lock = handle
        if self._external_daemon():
            return
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        log.info("starting dagster-daemon for this command (log: %s)", self.log_file)
        with open(self.log_file, "ab") as out:
            self.process = subprocess.Popen(
                [bin_path("dagster-daemon"), "run", "-w", str(WORKSPACE)],
                env=settings_env(self.settings),
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
            )

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
        """Stop the daemon this command started. With ``drain``, first wait until nothing
        else is in flight: the daemon's code server also runs other commands' runs, which
        stopping it now would kill."""
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
        if self.process is not None:
            stop_process_group(self.process)
        if self._lock is not None:
            if self.process is not None:
                self.lock_path.write_text(json.dumps({"stopped": time.time()}))
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
        self.process, self._lock = None, None

    def __enter__(self) -> DaemonSupervisor:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(drain=exc_type is None)
