"""One warm driver JVM for local runs, one after the other (local master only).

A release is up to two runs, each a process of its own. Each launched a driver JVM and
paid for it twice: the JVM's start, and every step's first calls in a JVM whose compiler
had not warmed yet (a step costs about twice as much in a cold JVM). A ``backfill`` or
``resume`` that runs its own daemon starts a host (``driver_host``) while its code server
loads, and ``driver_host --run COMMAND`` one for COMMAND's life (``make ui``'s ``dagster
dev``): it launches one driver JVM, as a run would, and writes a file (its gateway's port
and secret, the JVM's pid; readable by its owner only) once the JVM listens. Local runs
are one at a time (the run queue), so they never share it at once. A run whose environment
names that file (``settings.DRIVER_HOST_ENV``) attaches to the JVM (PySpark's
``PYSPARK_GATEWAY_PORT``) instead of launching its own: it starts its own Spark context
there, and at its end stops it and shuts the embedded metastore's database down, so the
JVM holds nothing between runs. A context a killed run left is stopped by the next run
before it starts its own. One process at a time: a process attaches only while it holds
the host file's lock (``claim``; the kernel releases it with the process), so a second
Spark user at once (a ``sql`` command beside a run) launches a JVM of its own instead of
stopping the first one's context. The host exits at the end of its input (the command's
end or death) or of its COMMAND, and its JVM with it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path

from backfill_assets.settings import driver_host_file

GATEWAY_ENV = ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET")  # PySpark's, to attach


@dataclass(frozen=True)
class Host:
    """A running host's driver JVM: its gateway and its pid."""

    port: int
    secret: str
    pid: int

    def gateway_env(self) -> dict[str, str]:
        return dict(zip(GATEWAY_ENV, (str(self.port), self.secret), strict=True))

    def write(self, path: Path) -> None:
        """Into ``path``, whole or not at all, readable by its owner only."""
        scratch = path.with_suffix(".tmp")
        fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump({"port": self.port, "secret": self.secret, "pid": self.pid}, out)
        os.replace(scratch, path)


def hosted(env: dict[str, str] | None = None) -> Host | None:
    """The host JVM this process's environment names, if it has written its file and
    runs; None otherwise (the caller launches a JVM of its own)."""
    path = driver_host_file(env)
    if not path:
        return None
    try:
        host = Host(**json.loads(Path(path).read_text()))
        os.kill(host.pid, 0)
    except (OSError, ValueError, TypeError):
        return None
    return host


# The host file's descriptors this process holds locked (``claim``): at most one, as
# PySpark's gateway is one per process (``SparkContext._gateway``).
_claims: list[int] = []


def claim(env: dict[str, str] | None = None) -> bool:
    """The host file ``env`` names, locked for this process alone until ``release`` (or
    its end); False if another process holds it (its session runs in the JVM) or it is
    gone."""
    try:
        fd = os.open(driver_host_file(env) or "", os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    _claims.append(fd)
    return True


def release() -> None:
    """Let the next process attach to the host's JVM (its context stopped first)."""
    while _claims:
        os.close(_claims.pop())


def stop_leftover_context(jvm) -> bool:
    """Stop a Spark context still active in the host JVM ``jvm`` (a run killed before its
    end left it, with any job it ran); True if there was one."""
    env = getattr(jvm.org.apache.spark, "SparkEnv$").__getattr__("MODULE$").get()
    if env is None:
        return False
    jvm.org.apache.spark.SparkContext.getOrCreate().stop()
    return True


def shut_down_database(jvm, database: str) -> None:
    """Shut the embedded Derby database ``database`` down in ``jvm``: its lock is released
    (another process may open the metastore) and the next context reopens it. Derby
    answers a shutdown with an exception; the engine stays (its driver registered)."""
    from py4j.protocol import Py4JJavaError

    with contextlib.suppress(Py4JJavaError):
        jvm.java.sql.DriverManager.getConnection(f"jdbc:derby:{database};shutdown=true")
