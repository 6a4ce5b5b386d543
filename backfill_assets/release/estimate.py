"""Before launching: how long a release of a range should take.

From the backup manifests of the range (bytes, records, files: no part file is read) and
the rate this instance measured on its latest releases that read backups: compressed
backup bytes per second of the release's whole wall time (every run of the release:
builds, checks, publish). The CLI prints it and tags the backfill with it
(``backfill_assets/estimate_seconds``), so the dry run records it and its report sets it
beside the time it took.

Its cost in **executor core-hours**: the seconds times the executor cores of the
configured Spark (``executor_cores``: ``local[N]``/``local[*]``, the machine's cores for
``*``; else ``spark.cores.max``, else ``spark.executor.cores`` x ``spark.executor.instances``),
the cores a release holds for its wall time. The measured rate is taken as the rate of
those cores (the releases measured ran on the same configuration); before anything is
measured the seconds come from an assumed ``ASSUMED_RECORDS_PER_CORE_SECOND`` per core,
and the line says so. Above ``BACKFILL_MAX_CORE_HOURS`` the CLI refuses the release
unless ``--approve-cost --reason`` (``over_cap``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

import dagster as dg

from backfill_assets.core import tags
from backfill_assets.core.backups.inventory import take_inventory
from backfill_assets.core.backups.store import BackupStore
from backfill_assets.core.reporting.render import format_bytes
from backfill_assets.core.spark.session import SparkConfigError, resolve_conf, spark_config
from backfill_assets.release.keys import table_key
from backfill_assets.release.report import runs_of_release
from backfill_assets.settings import Settings

RAW_SHADOW = table_key("shadow.raw_payloads")
_RELEASES_MEASURED = 5
# Manifest records (payloads) one executor core gets through per second of release wall
# time when nothing is measured yet: docs/benchmarks.md's day release did about 2,800 per
# core (5,554 lines/s on 2 cores), halved for a cluster's fixed costs.
ASSUMED_RECORDS_PER_CORE_SECOND = 1000.0
_LOCAL = re.compile(r"local\[(\*|[0-9]+)(?:,[0-9]+)?\]")


@dataclass(frozen=True)
class Cores:
    """The executor cores a release holds, and how that was derived (for the line)."""

    count: int
    how: str


def _whole(value: str | None) -> int | None:
    try:
        return int(str(value).strip()) if value is not None else None
    except ValueError:  # an unresolved ${VAR}, or not a number
        return None


def executor_cores(conf: Mapping[str, str], machine_cores: int | None = None) -> Cores:
    """The executor cores of a Spark configuration (``spark.master`` and the cores keys)."""
    master = conf.get("spark.master", "local[*]").strip()
    local = _LOCAL.fullmatch(master)
    if local or master == "local":
        machine = machine_cores or os.cpu_count() or 1
        count = 1 if master == "local" else machine if local[1] == "*" else int(local[1])
        return Cores(max(count, 1), f"{master} on a {machine}-core machine")
    cores_max = _whole(conf.get("spark.cores.max"))
    if cores_max:
        return Cores(cores_max, f"spark.cores.max {cores_max}")
    per = _whole(conf.get("spark.executor.cores")) or 1
    instances = _whole(conf.get("spark.executor.instances"))
    if instances:
        return Cores(
            per * instances,
            f"spark.executor.cores {per} x spark.executor.instances {instances}",
        )
    return Cores(per, f"spark.executor.cores {per}, executor instances unknown: one counted")


_CORE_KEYS = ("spark.master", "spark.cores.max", "spark.executor.cores", "spark.executor.instances")


def configured_cores(settings: Settings) -> Cores:
    """``executor_cores`` of the Spark configuration runs of ``settings`` get (its profile's
    ``${VAR}`` resolved from this process's environment where set)."""
    conf = spark_config(settings, resolve=False)
    found = {}
    for key in _CORE_KEYS:
        if key in conf:
            try:
                found[key] = resolve_conf({key: conf[key]})[key]
            except SparkConfigError:  # set only where the run executes: unknown here
                found[key] = conf[key]
    return executor_cores(found)


def core_hours(seconds: float, cores: int) -> float:
    """Executor core-hours of ``seconds`` of wall time on ``cores`` cores."""
    return seconds * cores / 3600


def over_cap(core_hours_estimated: float | None, cap: float | None) -> bool:
    """Whether an estimate needs approval: above the cap (None: no cap, or no estimate)."""
    return cap is not None and core_hours_estimated is not None and core_hours_estimated > cap


def refusal(guess: Estimate, cap: float, what: str) -> str:
    """The one line that refuses ``what`` over the cap, naming the estimate, cap and flag."""
    return (
        f"refused: {what} is estimated at {guess.core_hours:,.3g} executor core-hour(s) "
        f"({guess.records:,} payload(s), {format_bytes(guess.bytes)}, {guess.cores.count} "
        f"core(s)), above BACKFILL_MAX_CORE_HOURS={cap:g}: nothing submitted; approve the "
        f"cost with --approve-cost --reason TEXT, or split the range"
    )


@dataclass(frozen=True)
class Estimate:
    hours: int
    folders: int
    files: int
    bytes: int
    records: int
    rate: float | None  # backup bytes per second of release wall time, measured
    measured_releases: int
    cores: Cores = Cores(1, "one core assumed")

    @property
    def seconds(self) -> float | None:
        """Wall seconds at the measured rate (None: nothing measured yet)."""
        return self.bytes / self.rate if self.rate else None

    @property
    def cost_seconds(self) -> float:
        """The seconds the cost is counted from: measured, else at the assumed rate."""
        if self.seconds is not None:
            return self.seconds
        return self.records / (ASSUMED_RECORDS_PER_CORE_SECOND * self.cores.count)

    @property
    def core_hours(self) -> float:
        return core_hours(self.cost_seconds, self.cores.count)

    def cost(self) -> str:
        assumed = (
            ""
            if self.seconds is not None
            else f" at an assumed {ASSUMED_RECORDS_PER_CORE_SECOND:,.0f} payloads/s per core"
        )
        return (
            f"cost: about {self.core_hours:,.3g} executor core-hour(s) ({self.cores.count} "
            f"core(s): {self.cores.how}){assumed}"
        )

    def line(self) -> str:
        head = (
            f"estimate: {self.hours} hour(s) of backups, {self.folders} folder(s), "
            f"{self.files} file(s), {format_bytes(self.bytes)}, {self.records:,} manifest "
            f"record(s)"
        )
        if self.seconds is None:
            return f"{head}; no measured rate yet (no earlier release read backups here)"
        return (
            f"{head}; at {format_bytes(self.rate)}/s (measured over the last "
            f"{self.measured_releases} release(s)) about {self.seconds:,.0f} s"
        )


def measured_rate(instance: dg.DagsterInstance) -> tuple[float | None, int]:
    """Backup bytes per second of whole-release wall time over the latest successful
    releases that read backups, and how many were measured."""
    page = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=RAW_SHADOW), limit=500)
    read: dict[str, int] = {}  # release -> backup bytes its raw run(s) read
    seen_runs: set[str] = set()
    for record in page.records:
        mat = record.asset_materialization
        if mat is None or record.run_id in seen_runs or "input_bytes" not in mat.metadata:
            continue
        seen_runs.add(record.run_id)
        run = instance.get_run_by_id(record.run_id)
        if run is None or run.status != dg.DagsterRunStatus.SUCCESS:
            continue
        release = tags.release_id(run.tags, run.run_id)
        if release not in read and len(read) >= _RELEASES_MEASURED:
            continue
        read[release] = read.get(release, 0) + int(mat.metadata["input_bytes"].value or 0)
    total_bytes = total_seconds = 0.0
    for release, size in read.items():
        spans = [(r.start_time, r.end_time) for r in runs_of_release(instance, release)]
        seconds = sum(end - start for start, end in spans if start and end)
        if size and seconds:
            total_bytes, total_seconds = total_bytes + size, total_seconds + seconds
    if not total_seconds:
        return None, 0
    return total_bytes / total_seconds, len(read)


def estimate(
    instance: dg.DagsterInstance, store: BackupStore, hours: list[str], cores: Cores | None = None
) -> Estimate:
    """The estimate for a release whose raw layer reads ``hours`` (validated keys), on
    ``cores`` (default: this machine's, as ``local[*]``)."""
    inventory = take_inventory(store, hours)
    folders = [f for inv in inventory.values() for f in inv.folders]
    files = [part for f in folders for part in f.files]
    rate, measured = measured_rate(instance)
    return Estimate(
        hours=len(hours),
        folders=len(folders),
        files=len(files),
        bytes=sum(max(part.size, 0) for part in files),
        records=sum(f.records or 0 for f in folders),
        rate=rate,
        measured_releases=measured,
        cores=cores or executor_cores({}),
    )
