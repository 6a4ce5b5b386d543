"""Real processes for the tests: the ``backfill-assets`` command (run to its end, several at
once, or started in a process group of its own), Python children, Dagster's daemon, fault
pauses (a process held at a named fault point, then killed there), the processes an
instance left behind, and a memory cap for a release's processes.

A test that drives real Dagster backfills through the CLI can share ONE ``dagster-daemon``
between its commands (``shared_daemon``) instead of one started and stopped by each
command: a command finds it by its heartbeat (``release.daemon.DaemonSupervisor``) and does not
start its own; what each command prints and exits with is the operator's.

A process started in a group of its own (``start_in_group``, ``start_cli``) is killed with
its group (``kill_group``): a command's daemon, code server, runs and JVMs with it.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import dagster as dg

from backfill_assets.core.spark import driver_host
from backfill_assets.release import daemon, launch
from backfill_assets.release.instance import prepare_dagster_home
from backfill_assets.settings import DRIVER_HOST_ENV, PROJECT_ROOT, Settings
from backfill_assets_dev.generator import generate_backups
from backfill_assets_dev.stack.servers import Processes, Server, libpq_url

BIN_DIR = Path(sys.executable).parent  # this environment's console scripts
BIN = BIN_DIR / "backfill-assets"
COMMAND_TIMEOUT_SECONDS = 1500
# The folder holding ``backfill_assets_tests``: a Python child imports the suite's helpers
# from it (``importable``).
TESTS_ROOT = Path(__file__).resolve().parents[2]


def bin_of(name: str) -> str:
    """The console script ``name`` of this environment (``dagster``, ``dagster-daemon``)."""
    return str(BIN_DIR / name)


def importable(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the suite's root first on ``PYTHONPATH``: a ``python -c`` child imports
    ``backfill_assets_tests`` (and the packages beside it) as the test process does."""
    return {
        **env,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS_ROOT), env.get("PYTHONPATH")])),
    }


# -- the CLI ------------------------------------------------------------------------------


def cli_env(tmp: Path, backups: Path, **extra: str) -> dict[str, str]:
    """The environment of an operator's shell for a tree and a data root under ``tmp``
    (the default partitions: no BACKFILL_PARTITIONS_START/END)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("BACKFILL_PARTITIONS_START", "BACKFILL_PARTITIONS_END")
    }
    env.update(
        {
            "BACKUP_ROOT": str(backups),
            "DATA_ROOT": str(tmp / "data"),
            "DAGSTER_HOME": str(tmp / "home"),
            "BACKFILL_RECONCILE_SENSOR": "off",
            "DAGSTER_DISABLE_TELEMETRY": "1",
        }
    )
    env.update(extra)
    return env


# One evaluation of the reconciliation sensor, as a tick of the daemon makes it, for
# ``python -c`` in an operator's environment: the lines a test appends (indented by four
# spaces) read ``result`` and ``instance`` and print what the test asserts.
SENSOR_TICK = """
import json, sys
import dagster as dg
from backfill_assets.definitions import build_definitions
from backfill_assets.core.backups.store import LocalBackupStore
from backfill_assets.defs.sensors.reconciliation import SENSOR_NAME
from backfill_assets.settings import Settings

settings = Settings.from_env()
defs = build_definitions(settings)
with dg.DagsterInstance.get() as instance:
    context = dg.build_sensor_context(
        instance=instance, definitions=defs,
        resources={"backups": LocalBackupStore(root=settings.backup_root)},
    )
    result = defs.resolve_sensor_def(SENSOR_NAME)(context)
"""

# ``operator_tree``'s four hours as a release in chunks of two hours per run, inside
# partitions that end with the tree.
CHUNKS_OF_TWO_HOURS = {
    "BACKFILL_HOURS_PER_RUN": "2",
    "BACKFILL_PARTITIONS_START": "2026-11-20T00",
    "BACKFILL_PARTITIONS_END": "2026-11-20T04",
}


def operator_tree(
    tmp: Path, monkeypatch, hours: int = 4, users_per_client: int = 10
) -> tuple[dict[str, str], Settings]:
    """A generated tree of ``hours`` hours from 2026-11-20T00 of 2 clients in
    ``tmp/backups`` (a long one needs more users: with few, a night hour has no backup
    folder, which a release holds back as missing), and the environment an operator runs
    ``backfill-assets`` with against it (data and Dagster home under ``tmp``, the
    reconciliation sensor off); its roots are
    set in this process too (``monkeypatch``), so the settings returned and the instance
    they give are the commands'."""
    generate_backups(
        tmp / "backups",
        start="2026-11-20T00",
        hours=hours,
        clients=2,
        users_per_client=users_per_client,
        seed=3,
        workers=1,
    )
    env = {
        **os.environ,
        "BACKUP_ROOT": str(tmp / "backups"),
        "DATA_ROOT": str(tmp / "data"),
        "DAGSTER_HOME": str(tmp / "home"),
        "BACKFILL_RECONCILE_SENSOR": "off",
        "DAGSTER_DISABLE_TELEMETRY": "1",
    }
    for key in ("BACKUP_ROOT", "DATA_ROOT", "DAGSTER_HOME"):
        monkeypatch.setenv(key, env[key])
    return env, Settings.from_env()


def cli(
    env: Mapping[str, str], *args: str, timeout: float = COMMAND_TIMEOUT_SECONDS, **run
) -> subprocess.CompletedProcess:
    """Run ``backfill-assets ARGS`` as an operator would; its output in ``.output`` (stdout
    then stderr). ``run``: more arguments of ``subprocess.run`` (``preexec_fn``)."""
    done = subprocess.run(
        [str(BIN), *args], env=dict(env), capture_output=True, text=True, timeout=timeout, **run
    )
    done.output = done.stdout + done.stderr  # type: ignore[attr-defined]
    return done


def cli_together(env: Mapping[str, str], *commands: list[str]) -> list:
    """Start ``backfill-assets`` commands at once (they queue in the one instance: the
    daemon's iterations overlap, not their runs) and wait for all; each as ``cli`` returns."""
    started = [
        subprocess.Popen(
            [str(BIN), *args],
            env=dict(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args in commands
    ]
    done = []
    for process, args in zip(started, commands, strict=True):
        stdout, stderr = process.communicate(timeout=COMMAND_TIMEOUT_SECONDS)
        result = subprocess.CompletedProcess(args, process.returncode, stdout, stderr)
        result.output = stdout + stderr  # type: ignore[attr-defined]
        done.append(result)
    return done


# -- process groups -----------------------------------------------------------------------


def start_in_group(command: Sequence[str], **popen) -> subprocess.Popen:
    """``command`` in a process group (a session) of its own, for ``kill_group``;
    ``popen``: the other arguments of ``subprocess.Popen``."""
    return subprocess.Popen(list(command), start_new_session=True, **popen)


def start_cli(args: Sequence[str], env: Mapping[str, str], **popen) -> subprocess.Popen:
    """``backfill-assets ARGS`` in a process group of its own; its output (stdout and stderr
    together, text) in ``.stdout`` unless ``popen`` says otherwise."""
    options = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True, **popen}
    return start_in_group([str(BIN), *args], env=dict(env), **options)


def kill_group(process: subprocess.Popen, timeout: float | None = None) -> None:
    """SIGKILL the process group ``process`` leads (``start_in_group``) and reap it."""
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=timeout)


def kill_group_if_running(process: subprocess.Popen) -> None:
    """``kill_group`` unless ``process`` has ended."""
    if process.poll() is None:
        kill_group(process)


def start_python(
    code: str, *args: str, env: Mapping[str, str] | None = None, stdin: int | None = None
) -> subprocess.Popen:
    """``python -c CODE ARGS`` with its stdout and stderr in pipes (text), ``stdin`` if
    asked; ``env``: its environment (else this process's)."""
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def run_python(
    code: str, env: Mapping[str, str], timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """``python -c CODE`` to its end in ``env``; asserts it exited 0 (its stderr's tail)."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@contextmanager
def one_driver_jvm(env: Mapping[str, str], where: Path) -> Iterator[dict[str, str]]:
    """``env`` naming a driver JVM held for the block (``core.spark.driver_host``), as an
    operator's shell under ``driver_host --run``: the runs of every command of ``env``, and
    every Spark session a process of ``env`` starts, attach to it in turn (one at a time,
    as local runs are) instead of launching a JVM each. The JVM starts for a short life, as
    a command's does for tiny releases."""
    path = where / "driver.json"
    host = start_in_group(
        driver_host.command(path, short_run=True),
        env=dict(env), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert "serves the runs" in host.stdout.readline(), "the driver JVM did not start"
        yield {**env, DRIVER_HOST_ENV: str(path)}
    finally:
        host.stdin.close()  # the host's end of input: it stops its JVM and exits
        try:
            host.wait(timeout=60)
        finally:
            kill_group_if_running(host)


def processes_with(setting: str) -> dict[int, str]:
    """Live processes whose environment holds ``setting`` (``KEY=value``): pid -> process
    group, state and command line."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if setting.encode() in environ:
            try:
                stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
                command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
            except OSError:
                continue
            found[int(proc.name)] = f"state {stat[0]} ppid {stat[1]} pgid {stat[2]}: {command}"
    return found


# -- fault pauses -------------------------------------------------------------------------


@contextmanager
def fault_pause(fifo: Path, pause_at: str, *, arm: bool = True) -> Iterator[tuple[dict, Callable]]:
    """The FIFO a process writes ``pause_at`` into when it reaches that fault point and
    stops there (``faults.checkpoint``: no sleeps). Yields the environment to give the
    process (``arm``: with the pause set, else the process arms it itself) and
    ``reached(process, describe)``, which returns once the point is reached, or fails with
    ``describe()`` if the process exits first."""
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo)
    env = {"BACKFILL_ASSETS_PAUSE_FIFO": str(fifo)}
    if arm:
        env["BACKFILL_ASSETS_PAUSE_AT"] = pause_at
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    keeper = os.open(fifo, os.O_WRONLY)  # no end of file before the process writes

    def reached(process, describe: Callable[[], str]) -> None:
        while not select.select([reader], [], [], 5)[0]:
            if process.poll() is not None:
                raise AssertionError(describe())
        assert os.read(reader, 4096).decode().startswith(pause_at)  # one or more writers

    try:
        yield env, reached
    finally:
        os.close(reader)
        os.close(keeper)


def kill_at_fault(
    command: list[str], env: dict[str, str], fifo: Path, pause_at: str, *, arm: bool = True
) -> int:
    """Start ``command`` in a process group of its own, wait until it reaches the fault
    point ``pause_at`` (``fault_pause``), then SIGKILL the group. ``arm``: set the pause in
    its environment (else the process arms it itself, once it is ready). Fails, with its
    stderr, if it exits before the point. Returns its pid."""
    errors = fifo.with_suffix(".stderr")
    with fault_pause(fifo, pause_at, arm=arm) as (pause, reached), open(errors, "w") as stderr:
        process = start_in_group(
            command, env={**env, **pause}, stdout=subprocess.DEVNULL, stderr=stderr
        )
        try:
            reached(
                process,
                lambda: (
                    f"exited with {process.returncode} before {pause_at}: "
                    f"{errors.read_text()[-3000:]}"
                ),
            )
        finally:
            kill_group(process, timeout=60)
    assert process.returncode == -signal.SIGKILL
    return process.pid


@contextmanager
def cli_at_fault(
    args: Sequence[str],
    env: Mapping[str, str],
    fifo: Path,
    pause_at: str,
    *,
    stderr: int = subprocess.STDOUT,
) -> Iterator[subprocess.Popen]:
    """``backfill-assets ARGS`` (``start_cli``) held at the fault point ``pause_at`` of its
    release (``fault_pause``): yields the process once a run of it reached the point (fails
    with the end of its output if it ends first); the process group is killed at the end of
    the block if the command is still running. ``stderr``: with its stdout (the default)
    or in a pipe of its own (``subprocess.PIPE``)."""
    with fault_pause(fifo, pause_at) as (pause, reached):
        process = start_cli(args, {**env, **pause}, stderr=stderr)
        try:
            output = process.stdout if stderr == subprocess.STDOUT else process.stderr
            reached(process, lambda: f"the release ended first: {output.read()[-3000:]}")
            yield process
        finally:
            kill_group_if_running(process)
            kill_inheriting(f"BACKFILL_ASSETS_PAUSE_FIFO={fifo}")


def kill_inheriting(setting: str) -> None:
    """SIGKILL every process whose environment holds ``setting``: what a command started
    and left behind when it was killed (its daemon's code server, a run held at a fault
    point), so that a failed test leaves no process."""
    for pid in processes_with(setting):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# -- Dagster's daemon ---------------------------------------------------------------------


def start_daemon(processes: Processes, env: Mapping[str, str], log: Path) -> Server:
    """A ``dagster-daemon`` with ``env`` in a process group of its own (``processes``:
    stopped by PID), its output in ``log``, as ``make ui``'s ``dagster dev`` runs Dagster's:
    over one code server of the project's definitions (started first, on a Unix socket),
    which launches the runs, with a driver JVM they share (``driver_host --run``: a local
    master only). (A daemon given the project's workspace file starts a code server of its
    own and a new one every minute: the definitions loaded again, about 2.5 s of CPU.)"""
    scratch = Path(tempfile.mkdtemp(prefix="daemon-"))  # short: a socket path's limit
    sock = daemon.code_server_workspace(scratch)
    server = processes.start(
        "code server",
        driver_host.around(daemon.code_server_command(sock)),
        log=log,
        env=env,
        cwd=PROJECT_ROOT,
    )
    server.cleanup = scratch
    processes.wait_until(
        server, lambda: daemon.listens(sock), what="the code server's socket", timeout=180
    )
    return processes.start(
        "dagster-daemon",
        [bin_of("dagster-daemon"), "run", "-w", str(scratch / "workspace.yaml")],
        log=log,
        env=env,
        cwd=PROJECT_ROOT,
    )


def responds(url: str) -> bool:
    """Whether ``url`` answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def start_webserver(
    processes: Processes, env: Mapping[str, str], log: Path, workspace: Path = launch.WORKSPACE
) -> tuple[Server, str]:
    """A ``dagster-webserver`` of ``workspace`` on 127.0.0.1 and a free port, with ``env``
    (``processes``: stopped by PID); returns it and its URL once it serves."""
    port = processes.free_port()
    command = [bin_of("dagster-webserver"), "-h", "127.0.0.1", "-p", str(port), "-w"]
    web = processes.start(
        "dagster-webserver", [*command, str(workspace)], log=log, env=env, cwd=PROJECT_ROOT
    )
    url = f"http://127.0.0.1:{port}"
    processes.wait_until(web, lambda: responds(f"{url}/server_info"), what="the UI")
    return web, url


@contextmanager
def shared_daemon(env: Mapping[str, str], logs: Path) -> Iterator[dg.DagsterInstance]:
    """A ``dagster-daemon`` serving the instance of ``env`` until the block ends; yields the
    instance once the daemon's first heartbeat is stored (commands then use it)."""
    settings = Settings.from_env(env)
    prepare_dagster_home(settings)
    saved = os.environ.get("DAGSTER_HOME")
    os.environ["DAGSTER_HOME"] = settings.dagster_home
    processes = Processes()
    try:
        with dg.DagsterInstance.get() as instance:
            daemon = start_daemon(
                processes, launch.settings_env(settings, env), logs / "daemon.log"
            )
            processes.wait_until(
                daemon,
                lambda: bool(instance.get_daemon_heartbeats()),
                what="the daemon's first heartbeat",
                timeout=180,
                poll=0.5,
            )
            yield instance
    finally:
        processes.stop_all()
        if saved is None:
            os.environ.pop("DAGSTER_HOME", None)
        else:
            os.environ["DAGSTER_HOME"] = saved


def wait_for_postgres_heartbeat(processes: Processes, daemon: Server, url: str) -> None:
    """Until the daemon's heartbeats are in the instance's Postgres database ``url``."""
    import psycopg2

    def beating() -> bool:
        with psycopg2.connect(libpq_url(url)) as conn, conn.cursor() as cur:
            cur.execute("SELECT to_regclass('daemon_heartbeats') IS NOT NULL")
            if not cur.fetchone()[0]:
                return False
            cur.execute("SELECT count(*) FROM daemon_heartbeats")
            return cur.fetchone()[0] > 0

    processes.wait_until(daemon, beating, what="daemon heartbeat", timeout=240, poll=1.0)


# -- a memory cap -------------------------------------------------------------------------


@dataclass
class MemoryCap:
    """A memory cgroup of its own (v1 or v2) capping what the processes put in it use:
    ``join`` (a ``preexec_fn``) puts a child in it, children of it inherit it; ``peak`` and
    ``oom_kills`` are read once it is left (``memory_cap``)."""

    path: Path
    v2: bool
    peak: int = 0
    oom_kills: int = 0

    def join(self) -> None:  # pragma: no cover - runs in the child before exec
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def _read(self) -> None:
        if self.v2:
            self.peak = int((self.path / "memory.peak").read_text())
            events = (self.path / "memory.events").read_text().split()
        else:
            self.peak = int((self.path / "memory.max_usage_in_bytes").read_text())
            events = (self.path / "memory.oom_control").read_text().split()
        pairs = dict(zip(events[::2], events[1::2], strict=False))
        self.oom_kills = int(pairs.get("oom_kill", 0))


def _memory_cgroup_root() -> tuple[Path, bool] | None:
    """This process's memory cgroup directory and whether it is cgroup v2 (None if none)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return Path("/sys/fs/cgroup/memory") / path.lstrip("/"), False
        if controllers == "" and Path("/sys/fs/cgroup/cgroup.controllers").exists():
            return Path("/sys/fs/cgroup") / path.lstrip("/"), True
    return None


@contextmanager
def memory_cap(limit_bytes: int, name: str) -> Iterator[MemoryCap]:
    """A memory cgroup capped at ``limit_bytes`` for the processes started in the block
    (``MemoryCap.join``); skips the test where this process may not create one (not root,
    no memory controller). Its peak and OOM kills are read at the end of the block."""
    import pytest

    root = _memory_cgroup_root()
    if root is None:
        pytest.skip("no memory cgroup to cap a release's memory with")
    base, v2 = root
    path = base / f"{name}-{os.getpid()}"
    try:
        path.mkdir()
        limit = "memory.max" if v2 else "memory.limit_in_bytes"
        (path / limit).write_text(str(limit_bytes))
    except OSError as exc:
        pytest.skip(f"cannot create a memory cgroup under {base}: {exc}")
    cap = MemoryCap(path, v2)
    try:
        yield cap
    finally:
        cap._read()
        path.rmdir()  # its processes have exited (the block waited for them)
