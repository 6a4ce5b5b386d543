"""Helpers for tests that drive real Dagster backfills through the CLI: one Dagster instance
and ONE ``dagster-daemon`` shared by the commands of a test module (module-scoped
fixtures), instead of a daemon started and stopped by each command.

A command finds the module's daemon by its heartbeat (``launch.DaemonSupervisor``) and
does not start its own; what each command prints and exits with is the operator's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import dagster as dg

from backfill_assets.core.warehouse.publisher import PROVISIONAL
from backfill_assets.release import launch
from backfill_assets.release.instance import prepare_dagster_home
from backfill_assets.release.keys import table_key
from backfill_assets.release.state import metadata_value
from backfill_assets.settings import PROJECT_ROOT, Settings
from backfill_assets_dev.stack.servers import Processes

BIN = Path(sys.executable).parent / "backfill-assets"
COMMAND_TIMEOUT_SECONDS = 1500


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


def cli(env: Mapping[str, str], *args: str) -> subprocess.CompletedProcess:
    """Run ``backfill-assets ARGS`` as an operator would; its output in ``.output``."""
    done = subprocess.run(
        [str(BIN), *args],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_SECONDS,
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
            daemon = processes.start(
                "dagster-daemon",
                [str(BIN.with_name("dagster-daemon")), "run", "-w", str(launch.WORKSPACE)],
                log=logs / "daemon.log",
                env=launch.settings_env(settings, env),
                cwd=PROJECT_ROOT,
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


def published_state(env: Mapping[str, str], tables: tuple[str, ...]) -> dict:
    """table -> hour -> [location, rows] as the metastore and the files say, read in a
    Spark session of a process of its own (the embedded metastore serves one JVM)."""
    code = f"""
import json
from backfill_assets.core.warehouse.tables import partition_locations, table_exists
from backfill_assets.core.spark.session import spark_session
from backfill_assets.settings import Settings

spark = spark_session(Settings.from_env())
state = {{}}
for table in {list(tables)!r}:
    if not table_exists(spark, table):
        continue
    rows = {{r["hour"]: r["count"] for r in spark.table(table).groupBy("hour").count().collect()}}
    where = partition_locations(spark, table)
    state[table] = {{h: [at, rows.get(h, 0)] for h, at in where.items()}}
print(json.dumps(state))
"""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", code], env=dict(env), capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert time.monotonic() - started < COMMAND_TIMEOUT_SECONDS
    import json

    return json.loads(done.stdout.strip().splitlines()[-1])


def latest(instance: dg.DagsterInstance, key: dg.AssetKey, hours: list[str]) -> dict[str, dict]:
    """hour -> metadata of the latest materialization of ``key`` there (published hours)."""
    found = {}
    for hour in hours:
        result = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=key, asset_partitions=[hour]), limit=1
        )
        if result.records:
            found[hour] = result.records[0].asset_materialization.metadata
    return found


def provisional(instance: dg.DagsterInstance, hours: list[str]) -> dict[str, str]:
    """Published session hour -> its provisional note ("" once final)."""
    return {
        h: str(metadata_value(meta, PROVISIONAL) or "")
        for h, meta in latest(instance, table_key("aggregated.sessions"), hours).items()
    }


def backfill_id_of(done: subprocess.CompletedProcess) -> str:
    """The release id a ``backfill`` or ``publish`` command printed ("submitted ... ID:")."""
    return next(
        line.split(":")[0].split()[-1]
        for line in done.stdout.splitlines()
        if line.startswith("submitted ")
    )


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
