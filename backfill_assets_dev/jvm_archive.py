"""Making the class-data-sharing archive of the Spark driver's JVM (Java 17's AppCDS):
``make jvm-archive``; the runtime maps it (``backfill_assets.core.spark.jvm_archive``).

A cold Spark driver spends most of its first 20-30 s loading and verifying classes
(Spark, Hive's client, DataNucleus, Derby). ``make jvm-archive`` dumps the classes a
representative local session loads into one archive per environment (``create``); every
later driver JVM maps it (``java_options``) and starts in about half the time: Dagster
runs, CLI commands, the demo and the test suite's processes.

The JVM validates the archive itself: if the JDK or the classpath differ from when it was
dumped (another Java, a driver with extra jars such as the Postgres JDBC driver), it is
ignored and the JVM starts as usual, only slower. A missing archive changes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from backfill_assets.core.spark import jvm_archive as runtime
from backfill_assets.settings import Settings, java_home

# What the archive is dumped from: a local session doing what runs do (Hive DDL on the
# embedded metastore, partitioned Parquet writes, JSON parsing, joins, windows, Arrow).
_WORKLOAD = """
import sys
from pathlib import Path
from pyspark.sql import functions as F, Window
from pyspark.sql import SparkSession
from backfill_assets.core.spark.session import spark_config
from backfill_assets.settings import Settings

settings = Settings.from_env()
conf = spark_config(settings)
conf["spark.driver.extraJavaOptions"] += " " + " ".join(sys.argv[1:])
builder = SparkSession.builder
for key, value in conf.items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
lines = Path(settings.data_root) / "lines.jsonl"
lines.write_text('{"a": 1, "b": "x"}\\n{"a": 2, "b": "y"}\\nnot json\\n')
spark.sql("CREATE DATABASE IF NOT EXISTS warm")
spark.sql(
    "CREATE TABLE IF NOT EXISTS warm.t (a BIGINT, b STRING) PARTITIONED BY (hour STRING) "
    "STORED AS PARQUET"
)
parsed = spark.read.text(str(lines)).select(
    F.from_json("value", "a BIGINT, b STRING").alias("j"), F.sha2("value", 256).alias("d")
)
rows = parsed.select("j.a", "j.b").where("a IS NOT NULL").withColumn("hour", F.lit("h0"))
rows.write.mode("overwrite").insertInto("warm.t")
spark.sql("SHOW PARTITIONS warm.t").collect()
root = settings.data_root
spark.sql(f"ALTER TABLE warm.t ADD PARTITION (hour='h1') LOCATION '{root}/h1'")
spark.sql(f"ALTER TABLE warm.t PARTITION (hour='h1') SET LOCATION '{root}/h2'")
window = Window.partitionBy("b").orderBy("a")
table = spark.table("warm.t")
table.join(table.groupBy("b").count(), "b").withColumn("n", F.row_number().over(window))\\
    .collect()
spark.createDataFrame([(1, "x")], "a BIGINT, b STRING").toPandas()
spark.range(100).mapInArrow(lambda batches: batches, "id BIGINT").collect()
spark.stop()
"""


def java() -> str:
    """The ``java`` Spark's launcher runs (``JAVA_HOME`` first, as spark-class does)."""
    home = java_home()
    return str(Path(home) / "bin" / "java") if home else (shutil.which("java") or "java")


# "... (build 17.0.15+6, mixed mode, sharing)" -> "... (build 17.0.15+6)"
_VM_MODES = re.compile(r", [^()]*\)$")


def identity() -> dict[str, object]:
    """What the archive depends on: the JDK build, the Spark jars and the jars the project
    adds to the driver's classpath (the S3A connector of ``make jars``: a classpath other
    than the dump's makes the JVM ignore the archive quietly)."""
    import pyspark

    printed = subprocess.run([java(), "-version"], capture_output=True, text=True, check=False)
    # Without the "Picked up JAVA_TOOL_OPTIONS: ..." lines a JVM prints for the options of
    # its environment, nor the VM's modes after its build ("mixed mode, sharing"; C1 alone
    # adds "emulated-client"): they change no class the archive holds.
    version = "\n".join(
        _VM_MODES.sub(")", line)
        for line in printed.stderr.strip().splitlines()
        if not line.startswith("Picked up ")
    )
    jars = [[Path(jar).name, Path(jar).stat().st_size] for jar in Settings.from_env().spark_jars]
    return {
        "java": version,
        "pyspark": pyspark.__version__,
        "python": sys.prefix,
        "classpath": jars,
    }


def is_current() -> bool:
    path = runtime.archive_path()
    sidecar = path.with_suffix(".json")
    if not (path.is_file() and sidecar.is_file()):
        return False
    try:
        return json.loads(sidecar.read_text()) == identity()
    except (OSError, ValueError):
        return False


def create() -> Path:
    """Dump the archive from a throwaway local session (30-100 s), atomically."""
    path = runtime.archive_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="jvm-archive-") as scratch:
        dump = Path(scratch) / "spark-driver.jsa"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
        env.update(
            BACKFILL_ENV="local",
            DATA_ROOT=str(Path(scratch) / "data"),
            BACKUP_ROOT=str(Path(scratch) / "backups"),
            PYSPARK_PYTHON=sys.executable,
        )
        Path(env["DATA_ROOT"]).mkdir()
        done = subprocess.run(
            [sys.executable, "-c", _WORKLOAD, f"-XX:ArchiveClassesAtExit={dump}", *runtime.QUIET],
            env=env,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0 or not dump.is_file():
            raise RuntimeError(
                f"could not dump the JVM class archive (exit {done.returncode}):\n"
                + done.stderr[-3000:]
            )
        os.replace(shutil.copy(dump, path.with_suffix(".tmp")), path)
    path.with_suffix(".json").write_text(json.dumps(identity()))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="jvm_archive",
        description="Create (or refresh) the Spark driver's class-data-sharing archive.",
    )
    parser.add_argument("--force", action="store_true", help="recreate even if current")
    args = parser.parse_args(argv)
    if not args.force and is_current():
        print(f"JVM class archive up to date: {runtime.archive_path()}")
        return 0
    started = time.monotonic()
    print("creating the Spark driver's JVM class archive (once per environment) ...")
    path = create()
    size = path.stat().st_size / 2**20
    print(f"JVM class archive: {path} ({size:.0f} MiB, {time.monotonic() - started:.0f}s)")
    return 0
