"""Before launching: how long a release of a range should take.

From the backup manifests of the range (bytes, records, files: no part file is read) and
the rate this instance measured on its latest releases that read backups: compressed
backup bytes per second of the release's whole wall time (every run of the release:
builds, checks, publish). The CLI prints it and tags the backfill with it
(``backfill_assets/estimate_seconds``), so the dry run records it and its report sets it
beside the time it took.
"""

from __future__ import annotations

from dataclasses import dataclass

import dagster as dg

from backfill_assets.core import tags
from backfill_assets.core.backups.inventory import take_inventory
from backfill_assets.core.backups.store import BackupStore
from backfill_assets.core.reporting.render import format_bytes
from backfill_assets.release.keys import table_key
from backfill_assets.release.report import runs_of_release

RAW_SHADOW = table_key("shadow.raw_payloads")
_RELEASES_MEASURED = 5


@dataclass(frozen=True)
class Estimate:
    hours: int
    folders: int
    files: int
    bytes: int
    records: int
    rate: float | None  # backup bytes per second of release wall time, measured
    measured_releases: int

    @property
    def seconds(self) -> float | None:
        return self.bytes / self.rate if self.rate else None

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


def estimate(instance: dg.DagsterInstance, store: BackupStore, hours: list[str]) -> Estimate:
    """The estimate for a release whose raw layer reads ``hours`` (validated keys)."""
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
    )
