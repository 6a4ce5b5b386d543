"""Runs attach to the one driver JVM a host holds (``driver_host``; real processes, a real
JVM, a real embedded metastore): each starts and stops its own Spark context there, the
metastore is free for any other process between them, and a context a killed run left
is stopped by the next one, which goes on in the same JVM; one process at a time attaches."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from backfill_assets.core.spark import driver_host, preflight, shared_driver
from backfill_assets.settings import DRIVER_HOST_ENV

pytestmark = pytest.mark.slow

# A run's use of Spark: a session from the code location's configuration (attached to the
# host its environment names), a table of the metastore written and read, then stopped,
# or held until killed (its context left active).
RUN = """
import sys
from backfill_assets.core.spark.session import spark_config, start_session, stop_driver
from backfill_assets.settings import Settings

settings = Settings.from_env()
spark = start_session(spark_config(settings, resolve=False), settings.data_root)
jvm = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
spark.sql("CREATE TABLE IF NOT EXISTS default.runs (n INT) USING parquet")
spark.sql(f"INSERT INTO default.runs VALUES ({sys.argv[1]})")
print(jvm, sorted(r.n for r in spark.table("default.runs").collect()), flush=True)
if sys.argv[2] == "hold":
    sys.stdin.readline()  # until killed
stop_driver()
"""


def _run(env: dict[str, str], n: int, hold: bool = False) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", RUN, str(n), "hold" if hold else "end"],
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_runs_share_the_hosts_jvm_and_leave_the_metastore_free(tmp_path: Path):
    data_root = tmp_path / "data"
    host_file = tmp_path / "driver.json"
    env = {
        **os.environ,
        "DATA_ROOT": str(data_root),
        "DAGSTER_HOME": str(tmp_path / "home"),
        DRIVER_HOST_ENV: str(host_file),
    }
    host = subprocess.Popen(
        driver_host.command(host_file, short_run=True),
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        assert "serves the runs" in host.stdout.readline()  # its JVM listens
        jvm = shared_driver.hosted(env)
        assert jvm is not None and (host_file.stat().st_mode & 0o777) == 0o600

        first = _run(env, 1)
        assert first.communicate(timeout=300)[0].split()[0] == str(jvm.pid)
        assert first.returncode == 0
        assert preflight.metastore_in_use(str(data_root)) is None  # free between runs

        killed = _run(env, 2, hold=True)
        assert killed.stdout.readline() == f"{jvm.pid} [1, 2]\n"  # in the host's JVM
        # a second Spark user at once (another data root) launches a JVM of its own
        beside = _run({**env, "DATA_ROOT": str(tmp_path / "beside")}, 7)
        out = beside.communicate(timeout=300)[0]
        assert beside.returncode == 0 and out.split()[0] != str(jvm.pid), out
        assert out.endswith(" [7]\n"), out
        killed.kill()  # its context stays active in the JVM, the metastore open
        killed.wait()

        after = _run(env, 3)
        out = after.communicate(timeout=300)[0]
        assert after.returncode == 0 and out == f"{jvm.pid} [1, 2, 3]\n"
        assert preflight.metastore_in_use(str(data_root)) is None
    finally:
        host.stdin.close()  # the command's end: the host and its JVM exit
        try:
            host.wait(timeout=60)
        finally:
            os.killpg(host.pid, signal.SIGKILL) if host.poll() is None else None
    assert host.returncode == 0
    with pytest.raises(ProcessLookupError):
        os.kill(jvm.pid, 0)


# A process of ``driver_host --run``'s command: the host its environment names, and its own
# exit status.
NAMED = """
import sys
from backfill_assets.core.spark import shared_driver
from backfill_assets.settings import driver_host_file

host = shared_driver.hosted()
print(host.pid, driver_host_file(), flush=True)
sys.exit(3)
"""


def test_a_command_run_with_a_host_finds_its_jvm_and_the_jvm_ends_with_it(tmp_path: Path):
    """``driver_host --run COMMAND`` (``make ui``'s ``dagster dev``, a test's daemon): the
    command's processes find the JVM, its status is the host's, and nothing is left."""
    env = {**os.environ, "DATA_ROOT": str(tmp_path / "data"), "DAGSTER_HOME": str(tmp_path)}
    env.pop(DRIVER_HOST_ENV, None)
    done = subprocess.run(
        driver_host.around([sys.executable, "-c", NAMED]),
        env=env, capture_output=True, text=True, timeout=300, start_new_session=True,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    pid, path = done.stdout.split()
    assert f"driver JVM {pid} serves the runs of: {sys.executable} -c" in done.stderr
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid), 0)  # the JVM ended with the command
    assert not Path(path).parent.exists()  # and the host's file with it
