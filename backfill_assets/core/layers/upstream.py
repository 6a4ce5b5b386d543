"""What a layer reads of its upstream, hour by hour: the release's candidate where the release
rebuilt the hour, else the published partition; hours with neither are empty (declared, or
outside the backups) or missing (the build refuses). Dagster-free: the IO manager
(``defs.resources.io_managers``) hands it the hours and records what it read."""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from backfill_assets.core.hours import parse_hour
from backfill_assets.core.warehouse import audit
from backfill_assets.core.warehouse.publisher import (
    SOURCE_EMPTY,
    SOURCE_OUTSIDE,
    SOURCE_PUBLISHED,
    SOURCE_RELEASE,
    SOURCE_UNAVAILABLE,
)
from backfill_assets.core.warehouse.tables import partition_locations


@dataclass(frozen=True)
class PartialWindow:
    """A windowed reader's input where some upstream hours had no data to read (read as
    empty): ``without_data`` maps each such hour to why (``SOURCE_OUTSIDE``: outside the
    backups; ``SOURCE_UNAVAILABLE``: neither published nor rebuilt by the release)."""

    frame: DataFrame
    without_data: dict[str, str]


def unwrap(read: DataFrame | PartialWindow) -> tuple[DataFrame, dict[str, str]]:
    """The frame of an input and the upstream hours it read without data."""
    if isinstance(read, PartialWindow):
        return read.frame, read.without_data
    return read, {}


@dataclass(frozen=True)
class UpstreamGap:
    """Upstream hours a build reads that its release did not rebuild, that are not published
    and not declared empty: the build must not run."""

    verdict: str
    missing: list[str]


@dataclass
class UpstreamView:
    """What a downstream build reads of one upstream table, hour by hour."""

    spark: SparkSession
    upstream: str  # the shadow table
    published: str  # its published table
    release_id: str
    candidates: dict[str, tuple[str, str]]  # hour -> (version, location) of the release
    live: dict[str, str]  # hour -> published location, for the hours not rebuilt
    empty: list[str]  # read as empty: declared so, or before the backups' first hour
    missing: list[str]  # hours neither rebuilt, published nor allowed empty: refused
    outside: list[str] = field(default_factory=list)  # outside the backups: read as empty
    unavailable: list[str] = field(default_factory=list)  # a windowed reader's gaps: empty

    @property
    def without_data(self) -> dict[str, str]:
        return {
            **{h: SOURCE_OUTSIDE for h in self.outside},
            **{h: SOURCE_UNAVAILABLE for h in self.unavailable},
        }

    @property
    def frame(self) -> DataFrame:
        """The rows of every hour, candidates and published alike, without ``version``."""
        table = self.spark.table(self.upstream)
        # A literal predicate on the partition columns (one disjunct per version, usually
        # one), not a join with the (hour, version) pairs: Spark prunes the partitions when
        # it plans the scan, and no row is shuffled to find its version.
        hours_of: dict[str, list[str]] = {}
        for hour, (version, _) in sorted(self.candidates.items()):
            hours_of.setdefault(version, []).append(hour)
        chosen = F.lit(False)
        for version, hours in sorted(hours_of.items()):
            chosen = chosen | ((F.col("version") == version) & F.col("hour").isin(hours))
        result = table.where(chosen).drop("version")
        if self.live:
            published = self.spark.table(self.published).where(F.col("hour").isin(list(self.live)))
            result = result.unionByName(published)
        return result

    def reads(self, reader: str, run: str) -> list[dict]:
        now = audit.now()
        rows = [
            (h, SOURCE_RELEASE, version, location)
            for h, (version, location) in self.candidates.items()
        ]
        rows += [(h, SOURCE_PUBLISHED, None, location) for h, location in self.live.items()]
        # each stale once something is published there
        rows += [(h, SOURCE_EMPTY, None, None) for h in self.empty]
        rows += [(h, source, None, None) for h, source in self.without_data.items()]
        return [
            {
                "release_id": self.release_id,
                "run_id": run,
                "reader_table": reader,
                "upstream_table": self.published,
                "hour": h,
                "source": source,
                "version": version,
                "location": location,
                "read_at": now,
            }
            for h, source, version, location in sorted(rows)
        ]


def resolve_upstream(
    spark: SparkSession,
    upstream: str,
    published: str,
    hours: list[str],
    release_id: str,
    *,
    allowed_empty: set[str] = frozenset(),
    outside: set[str] = frozenset(),
    windowed: bool = False,
) -> UpstreamView:
    """Per hour: the newest version of ``upstream`` that release ``release_id`` wrote, else
    the published partition of ``published``; two small lookups (the ledger database and the
    metastore), no Spark job.
    An hour with neither is declared empty (``allowed_empty``), outside the backups
    (``outside``), unavailable (a ``windowed`` reader's gap) or missing (refused)."""
    for hour in hours:
        parse_hour(hour)
    written = audit.rows(
        audit.warehouse_of(spark),
        audit.SHADOW_PARTITIONS,
        {"table_name": upstream, "release_id": release_id, "hour": hours},
        order_by="written_at",
    )
    # oldest first: the newest version of each hour is the one kept
    candidates = {r["hour"]: (r["version"], r["location"]) for r in written}
    locations = partition_locations(spark, published)
    live = {h: locations[h] for h in hours if h not in candidates and h in locations}
    rest = [h for h in hours if h not in candidates and h not in live]
    return UpstreamView(
        spark,
        upstream,
        published,
        release_id,
        candidates,
        live,
        empty=[h for h in rest if h in allowed_empty],
        missing=[h for h in rest if h not in allowed_empty and h not in outside and not windowed],
        outside=[h for h in rest if h not in allowed_empty and h in outside],
        unavailable=[h for h in rest if h not in allowed_empty and h not in outside and windowed],
    )
