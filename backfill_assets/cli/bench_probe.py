"""A release's driver memory, measured in a driver of its own (the bench starts this module).

``python -m backfill_assets.cli.bench_probe BACKUPS WORK START HOURS [DRIVER_MEMORY]``
backfills every layer over ``HOURS`` hours from ``START`` of the backup tree ``BACKUPS``, in a
new Python process with a new Spark JVM (its heap ``DRIVER_MEMORY``, e.g. ``512m``, when
given), a scratch ``DATA_ROOT`` and ``DAGSTER_HOME`` under ``WORK``, and prints one JSON
object: the release's outcome and what it needed of the driver's memory.

Why a process of its own: in one long-lived process, every release leaves the JVM heap,
Spark's status store and the Python allocator a little fuller, so a range measured after
another one is charged for both. In production every run has a driver of its own; so does
each range measured here, and the short and the long range compare like for like.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import asdict
from pathlib import Path

from backfill_assets.cli.bench import (
    bench_ranges,
    measure_driver_memory,
    run_project,
    tiny_tags,
)


def jvm_peak_rss_mb(spark) -> float | None:
    """The Spark JVM's peak resident set (``VmHWM``), in MB; None where ``/proc`` has none."""
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)  # kB
    return None


def probe(
    backups: Path, work: Path, start: str, hours: int, driver_memory: str | None = None
) -> dict:
    """The release of ``hours`` hours in this process (see the module docstring), in a
    driver whose heap is ``driver_memory`` (Spark's ``spark.driver.memory``; the configured
    one by default)."""
    import dagster as dg

    from backfill_assets.definitions import build_definitions
    from backfill_assets.launch import LAYERS
    from backfill_assets.resources.spark import SparkResource, spark_config
    from backfill_assets.settings import Settings

    settings = Settings.from_env(
        {
            "BACKUP_ROOT": str(backups),
            "DATA_ROOT": str(work / "data"),
            "DAGSTER_HOME": str(work / "dagster_home"),
        }
    )
    (work / "dagster_home").mkdir(parents=True, exist_ok=True)
    config = spark_config(settings, resolve=False)
    if driver_memory:
        config["spark.driver.memory"] = driver_memory
    # The session the code location's resource then finds (getOrCreate), started here.
    spark = SparkResource(spark_config=config, data_root=settings.data_root).spark_session
    spark.range(1).count()  # the JVM and the metastore up before the measure, as in the bench
    spark.catalog.listDatabases()
    defs = build_definitions(settings)
    with dg.DagsterInstance.local_temp(
        str(work / "dagster_home"), overrides={"telemetry": {"enabled": False}}
    ) as instance:
        (runs, seconds), memory = measure_driver_memory(
            spark,
            lambda: run_project(
                defs, instance, bench_ranges(list(LAYERS), start, hours), tiny_tags()
            ),
        )
    return {
        "hours": hours,
        "driver_memory": spark.sparkContext.getConf().get("spark.driver.memory"),
        "success": all(r.success for r in runs) and len(runs) == len(LAYERS) + 1,
        "seconds": round(seconds, 1),
        **asdict(memory),
        "jvm_rss_peak_mb": jvm_peak_rss_mb(spark),
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    memory = args[4] if len(args) == 5 else None
    if (
        len(args) not in (4, 5)
        or not args[3].isdigit()
        or (memory is not None and not re.fullmatch(r"[0-9]+[kKmMgG]?", memory))
    ):
        print(
            "usage: python -m backfill_assets.cli.bench_probe BACKUPS WORK START HOURS "
            "[DRIVER_MEMORY, e.g. 512m]",
            file=sys.stderr,
        )
        return 2
    backups, work, start, hours = Path(args[0]), Path(args[1]), args[2], int(args[3])
    measured = probe(backups, work, start, hours, memory)
    print(json.dumps(measured), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
