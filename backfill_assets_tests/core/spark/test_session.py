"""A process's driver JVM is gone, with its hold on the embedded metastore, when the work
that started it has ended: a run when it reports its end, a command when it exits.

Each case runs in a real subprocess and prints its JVM's pid; this process (no kin of
that JVM) then looks for the JVM and for a holder of the metastore's lock.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from backfill_assets.core.spark import preflight
from backfill_assets_tests.helpers.processes import kill_group, run_python, start_in_group

JVM_PID = "int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())"


def _env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "BACKUP_ROOT": str(tmp_path / "backups"),
        "DATA_ROOT": str(tmp_path / "data"),
        "DAGSTER_HOME": str(tmp_path / "dagster_home"),
    }


def _gone(pid: int) -> bool:
    return not Path(f"/proc/{pid}").exists()


def test_a_run_that_reports_its_end_has_stopped_its_jvm_and_freed_the_metastore(
    tmp_path: Path,
) -> None:
    """The run's process is still alive (it waits on its input) when this is checked."""
    data_root = str(tmp_path / "data")
    script = f"""
import sys
import dagster as dg
from backfill_assets.defs.resources.spark import SparkResource

jvm = []

@dg.asset
def uses_the_metastore(pyspark: SparkResource) -> None:
    spark = pyspark.spark_session
    spark.sql("SHOW DATABASES").collect()
    jvm.append({JVM_PID})

result = dg.materialize(
    [uses_the_metastore],
    resources={{"pyspark": SparkResource(spark_config={{}}, data_root={data_root!r})}},
)
print(result.success, jvm[0], flush=True)
sys.stdin.readline()
"""
    run = start_in_group(
        [sys.executable, "-c", script],
        env=_env(tmp_path),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        success, jvm = run.stdout.readline().split()
        assert success == "True"
        assert _gone(int(jvm))
        assert preflight.metastore_in_use(data_root) is None
    finally:
        kill_group(run, timeout=60)


def test_a_command_that_exited_has_stopped_its_jvm_and_freed_the_metastore(
    tmp_path: Path,
) -> None:
    script = f"""
from backfill_assets.core.spark.session import spark_session
from backfill_assets.settings import Settings

spark = spark_session(Settings.from_env())
spark.sql("SHOW DATABASES").collect()
print({JVM_PID})
"""
    done = run_python(script, _env(tmp_path))
    assert "Exception" not in done.stderr, done.stderr[-3000:]
    assert _gone(int(done.stdout.split()[-1]))
    assert preflight.metastore_in_use(str(tmp_path / "data")) is None
