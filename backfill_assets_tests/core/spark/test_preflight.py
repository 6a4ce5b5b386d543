"""Errors a user can cause fail before Spark starts, in one line (issue 9 item 5).

Every command below runs in a real subprocess with ``JAVA_HOME`` pointing nowhere: had it
started Spark, it would fail with Spark's "Java gateway process exited" instead of the
preflight's line, so the message itself shows that no JVM was started.

Tests run as root, for whom permission bits do not stop a write; an unwritable folder is
made by placing it under a regular file (``mkdir`` fails with ENOTDIR for every user).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from backfill_assets.cli.main import main
from backfill_assets.core.spark import preflight
from backfill_assets_tests.helpers.processes import (
    cli,
    kill_group,
    kill_group_if_running,
    run_python,
    start_in_group,
)


def _env(tmp_path: Path, **paths: Path | str) -> dict[str, str]:
    env = {
        **os.environ,
        "BACKUP_ROOT": str(tmp_path / "backups"),
        "DATA_ROOT": str(tmp_path / "data"),
        "DAGSTER_HOME": str(tmp_path / "dagster_home"),
        "JAVA_HOME": str(tmp_path / "no-java"),  # Spark cannot start in these processes
    }
    env.update({name: str(value) for name, value in paths.items()})
    return env


def _cli(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return cli(env, *argv, timeout=120, check=False)


@pytest.fixture
def under_a_file(tmp_path: Path) -> Path:
    """A path no process can create: its parent is a regular file."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    return blocker / "data"


def test_an_unwritable_data_root_fails_in_one_line_before_spark(
    tmp_path: Path, under_a_file: Path
) -> None:
    done = _cli(_env(tmp_path, DATA_ROOT=under_a_file), "sql", "SELECT 1")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"backfill-assets sql: DATA_ROOT={under_a_file} is not writable (Not a directory); "
        f"it holds the warehouse and the embedded metastore: set DATA_ROOT to a folder you "
        f"can write"
    ]


def test_a_run_fails_with_a_dagster_failure_before_its_session_starts(
    tmp_path: Path, under_a_file: Path
) -> None:
    """The Spark resource checks too, so a run launched from the UI fails the same way."""
    script = f"""
import dagster as dg
from backfill_assets.defs.resources.spark import SparkResource

@dg.asset
def needs_spark(pyspark: SparkResource) -> None:
    pyspark.spark_session

result = dg.materialize(
    [needs_spark],
    resources={{"pyspark": SparkResource(spark_config={{}}, data_root={str(under_a_file)!r})}},
    raise_on_error=False,
)
failure = result.get_step_failure_events()[0].step_failure_data.error
from pyspark import SparkContext
print(result.success, SparkContext._gateway is None)
print(failure.cls_name, failure.message.strip().splitlines()[0])
"""
    done = run_python(script, _env(tmp_path))
    success, failure = done.stdout.strip().splitlines()[-2:]
    assert success == "False True"  # the run failed and no JVM was started
    cls_name, message = failure.split(" ", 1)
    assert cls_name == "Failure"
    assert f"DATA_ROOT={under_a_file} is not writable (Not a directory)" in message


def test_unwritable_dagster_home_and_missing_backup_root(
    tmp_path: Path,
    under_a_file: Path,
    make_backups,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, value in _env(tmp_path, DAGSTER_HOME=under_a_file).items():
        monkeypatch.setenv(name, value)
    assert main(["reconcile"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("backfill-assets reconcile: BACKUP_ROOT=")
    assert "does not exist" in err and "point BACKUP_ROOT at a backup tree" in err
    (tmp_path / "backups").mkdir()
    assert main(["backfill", "--from", "2026-11-20T00", "--to", "2026-11-20T01"]) == 2
    assert "has no raw/ folder, so it is not a backup tree" in capsys.readouterr().err

    monkeypatch.setenv("BACKUP_ROOT", str(make_backups(hours=1)))
    assert main(["reconcile"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        f"backfill-assets reconcile: DAGSTER_HOME={under_a_file} is not writable (Not a "
        f"directory); it holds the Dagster instance (runs, event log): set DAGSTER_HOME to a "
        f"folder you can write"
    ]


_HOLD_METASTORE = (
    "import sys\n"
    "from pyspark import SparkContext\n"
    "from backfill_assets.core.spark.session import spark_session\n"
    "from backfill_assets.settings import Settings\n"
    "spark = spark_session(Settings.from_env())\n"
    "spark.sql('SHOW DATABASES').collect()\n"  # boots the embedded metastore
    "print('ready', SparkContext._gateway.proc.pid, flush=True)\n"
    "sys.stdin.readline()\n"
)


def _hold_metastore(tmp_path: Path) -> tuple[subprocess.Popen, int]:
    """A real second process holding the embedded Derby metastore of ``tmp_path/data``
    (its process group of its own) and its driver JVM's PID, once the metastore is open."""
    env = {**_env(tmp_path), "JAVA_HOME": os.environ.get("JAVA_HOME", "")}
    if not env["JAVA_HOME"]:
        del env["JAVA_HOME"]
    holder = start_in_group(
        [sys.executable, "-c", _HOLD_METASTORE],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    ready = holder.stdout.readline().split()
    if ready[:1] != ["ready"]:
        kill_group(holder, timeout=60)
        pytest.fail(f"the holder did not open the metastore: {ready}")
    return holder, int(ready[1])


def test_a_metastore_held_by_another_process_is_named_and_released_when_it_dies(
    tmp_path: Path,
) -> None:
    """A real second process holds the embedded Derby metastore; the CLI names its PID."""
    holder, _ = _hold_metastore(tmp_path)
    try:
        data_root = str(tmp_path / "data")
        assert preflight.metastore_in_use(data_root)

        done = _cli(_env(tmp_path), "sql", "SELECT 1")
        assert done.returncode == 2, done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith(
            f"backfill-assets sql: the embedded metastore {data_root}/metastore_db is in use "
            f"by PID "
        )
        assert f"started by PID {holder.pid}: " in line
        assert "wait for that process to finish (or stop it)" in line
        jvm = int(line.split(" by PID ", 1)[1].split(",", 1)[0])
        jvm_exit = os.pidfd_open(jvm)  # readable once the JVM has exited
    finally:
        kill_group(holder, timeout=60)
    try:
        assert select.select([jvm_exit], [], [], 60)[0], f"JVM {jvm} still alive"
    finally:
        os.close(jvm_exit)
    # The kernel drops a dead process's lock: no stale lock blocks the next command.
    assert preflight.metastore_in_use(str(tmp_path / "data")) is None


# x86_64 and arm64 numbers of poll, select, pselect6 and ppoll
_WAIT_CALLS = {"7", "23", "270", "271", "72", "73"}


def _blocked_in_a_wait(thread: threading.Thread) -> bool:
    """``thread`` is blocked in poll/select (``/proc``: its current system call)."""
    try:
        call = Path(f"/proc/self/task/{thread.native_id}/syscall").read_text().split()[0]
    except (OSError, IndexError):
        return False
    return call in _WAIT_CALLS


def test_a_driver_jvm_whose_python_was_killed_is_waited_for_not_named(tmp_path: Path) -> None:
    """A run or command killed with SIGKILL leaves its driver JVM to end on its own: it
    reads its input to the end, then exits (a second or two). A check made meanwhile, by
    the next run a shared daemon launches, waits for it instead of failing the run."""
    holder, jvm = _hold_metastore(tmp_path)
    jvm_exit = os.pidfd_open(jvm)  # readable once the JVM has exited
    try:
        os.kill(jvm, signal.SIGSTOP)  # it cannot see the end of its input before the check
        holder.kill()  # the Python process alone, as the OOM killer or an operator would
        holder.wait(timeout=60)
        assert preflight._input_orphaned(jvm)
        found: dict[str, str | None] = {}
        data_root = str(tmp_path / "data")
        check = threading.Thread(
            target=lambda: found.update(holder=preflight.metastore_in_use(data_root))
        )
        check.start()
        deadline = time.monotonic() + 60
        while not _blocked_in_a_wait(check) and check.is_alive() and time.monotonic() < deadline:
            select.select([], [], [], 0.05)
        assert check.is_alive(), f"the check returned without waiting: {found}"
        os.kill(jvm, signal.SIGCONT)
        check.join(timeout=60)
        assert not check.is_alive() and found == {"holder": None}
        assert select.select([jvm_exit], [], [], 0)[0], f"JVM {jvm} still alive"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(jvm, signal.SIGKILL)
        os.close(jvm_exit)
        kill_group_if_running(holder)


def test_a_driver_jvm_whose_python_lives_is_not_waited_for(tmp_path: Path) -> None:
    holder, jvm = _hold_metastore(tmp_path)
    try:
        assert not preflight._input_orphaned(jvm)
        assert preflight.metastore_in_use(str(tmp_path / "data")).startswith(f"PID {jvm},")
    finally:
        kill_group(holder, timeout=60)
