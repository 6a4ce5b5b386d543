"""Errors a user can cause fail before Spark starts, in one line (issue 9 item 5).

Every command below runs in a real subprocess with ``JAVA_HOME`` pointing nowhere: had it
started Spark, it would fail with Spark's "Java gateway process exited" instead of the
preflight's line, so the message itself shows that no JVM was started.

Tests run as root, for whom permission bits do not stop a write; an unwritable folder is
made by placing it under a regular file (``mkdir`` fails with ENOTDIR for every user).
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
from pathlib import Path

import pytest

from backfill_assets.cli.main import main
from backfill_assets.core.spark import preflight
from backfill_assets_tests.helpers.processes import cli, kill_group, run_python, start_in_group


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


def test_a_metastore_held_by_another_process_is_named_and_released_when_it_dies(
    tmp_path: Path,
) -> None:
    """A real second process holds the embedded Derby metastore; the CLI names its PID."""
    env = {**_env(tmp_path), "JAVA_HOME": os.environ.get("JAVA_HOME", "")}
    if not env["JAVA_HOME"]:
        del env["JAVA_HOME"]
    holder = start_in_group(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "from backfill_assets.core.spark.session import spark_session\n"
            "from backfill_assets.settings import Settings\n"
            "spark = spark_session(Settings.from_env())\n"
            "spark.sql('SHOW DATABASES').collect()\n"  # boots the embedded metastore
            "print('ready', flush=True)\n"
            "sys.stdin.readline()\n",
        ],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
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
