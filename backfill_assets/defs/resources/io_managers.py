"""The PySpark IO manager of the release: shadow tables out, release candidates in.

An output of asset ``shadow/<name>`` for run R and hours H1..Hn becomes Parquet files under
``<warehouse_dir>/shadow/<name>/version=R/hour=H`` (one Spark job for the whole range),
registered as partitions (hour, version) of the Spark table ``shadow.<name>``. A shadow
partition is immutable: a later run writes a new version beside it, never over it, so a
published pointer to it can never change under a reader. Each partition's row count and
checksum are recorded in ``audit.shadow_partitions`` (with the release id: the Dagster
backfill, else the run) and in the output's metadata: read back from the written rows, or
measured by the asset over the rows it wrote (``Measured``). An output ``WithRules`` names
the pandera model its check evaluates: the read-back (or, for rows the asset cached, the
cache) counts the model's rules too, for the check step of the same run
(``core.layers.rules.precount``), which then scans nothing.

Inputs are the upstream shadow asset of the same release: for each upstream hour the
input reads, the newest version the *release* wrote if it rebuilt that hour, else the
*published* partition (``published_table`` in the input's metadata). What was read, and
from where, is recorded in ``audit.release_reads``, so publishing can hold back what was
built on a held-back hour and refuse a release whose published inputs changed since.
"""

import time
from dataclasses import dataclass, field

import dagster as dg
from dagster_pyspark import LazyPySparkResource
from py4j.protocol import Py4JJavaError
from pydantic import Field
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from backfill_assets.core import tags
from backfill_assets.core.backups.inventory import backup_bounds
from backfill_assets.core.backups.store import BackupStore
from backfill_assets.core.errors import cause_line
from backfill_assets.core.hours import parse_hour
from backfill_assets.core.layers.shadow_stats import (
    Measured,
    Stats,
    WithRules,
    partition_stats,
    stats_and_rules,
)
from backfill_assets.core.names import ROWS
from backfill_assets.core.warehouse import audit
from backfill_assets.core.warehouse.publisher import (
    SOURCE_EMPTY,
    SOURCE_OUTSIDE,
    SOURCE_PUBLISHED,
    SOURCE_RELEASE,
    SOURCE_UNAVAILABLE,
)
from backfill_assets.core.warehouse.tables import (
    ensure_table,
    location,
    partition_locations,
    register_partitions,
    run_id,
    split_table,
)
from backfill_assets.defs.resources.spark import usage_metadata
from backfill_assets.release.instance import run_tags as tags_of_run
from backfill_assets.release.keys import table_name

SHADOW_PARTITION_COLUMNS = ["hour", "version"]
# Columns of nearly one value per row (ids, millisecond timestamps): Parquet's dictionary
# only costs there (built up to its size limit, then abandoned for plain encoding). Plain
# from the start, a day of raw payloads (1.6M rows) is written in 5.1 s instead of 6.4 s
# (warm) and takes 62 MB instead of 67 MB.
PLAIN_ENCODED_COLUMNS = (
    "payload_id",
    "session_id",
    "event_time",
    "received_at",
    "session_start_at",
    "session_end_at",
)


def qualify(path: str) -> str:
    """A location as the metastore reports it (``file:/abs/path`` for local paths)."""
    return f"file:{path}" if path.startswith("/") else path


# Per-partition metadata of a shadow materialization: the hour's rows and checksum.
CHECKSUM = "checksum"

# Input metadata: the published table of the upstream, and the shadow table that reads it.
PUBLISHED_TABLE = "published_table"
READER_TABLE = "reader_table"
# Input metadata: the reader builds each hour from a window of upstream hours, so an upstream
# hour without data (not in the backups yet, or not published) is read as empty and the
# hours whose window holds it are published provisional, instead of refusing the build.
WINDOW_MAY_LACK_DATA = "window_may_lack_data"


def run_tags(context: dg.InputContext | dg.OutputContext) -> dict[str, str]:
    return tags_of_run(context.step_context.instance, context.step_context.run_id)


class ShadowTableIOManager(dg.ConfigurableIOManager):
    """Writes Spark DataFrames to run-scoped shadow partitions of the run's release; reads
    upstream hours from the same release, else from what is published."""

    pyspark: dg.ResourceDependency[LazyPySparkResource]
    warehouse_dir: str
    # The backup tree, to read hours outside it (before its first, after its newest) as
    # empty when a session window reaches there.
    backups: dg.ResourceDependency[BackupStore | None] = None
    plain_encoded_columns: list[str] = Field(
        default=list(PLAIN_ENCODED_COLUMNS),
        description="Columns written without a Parquet dictionary, where a table has them "
        "(nearly one value per row: the dictionary only costs).",
    )

    @property
    def spark(self) -> SparkSession:
        return self.pyspark.spark_session

    def _root(self, table: str) -> str:
        _, name = split_table(table)
        return location(f"{self.warehouse_dir}/shadow/{name}")

    def handle_output(
        self, context: dg.OutputContext, obj: "DataFrame | Measured | WithRules"
    ) -> None:
        """Write the shadow version; a failure of Spark or of the file system ends the step
        with its cause in words and the table's location (the JVM's stack in the log)."""
        try:
            self._write(context, obj)
        except (Py4JJavaError, PySparkException, OSError) as exc:
            table = table_name(context.asset_key)
            where = self._root(table)
            context.log.error(f"writing {table} under {where} failed: {exc}")
            raise dg.Failure(
                description=f"{table}: writing the shadow version failed: "
                f"{cause_line(exc, where)}; nothing of it was published",
            ) from exc

    def _write_parquet(self, obj: DataFrame, version_root: str) -> None:
        writer = obj.write.mode("overwrite").partitionBy("hour")
        if version_root.startswith("s3a://"):
            # S3A's committers cannot overwrite partitions dynamically; the version's folder
            # is this run's alone (version = run id), so replacing it whole is the same.
            writer = writer.option("partitionOverwriteMode", "static")
        for column in self.plain_encoded_columns:
            if column in obj.columns:
                writer = writer.option(f"parquet.enable.dictionary#{column}", "false")
        writer.parquet(version_root)

    def _read_back(
        self,
        obj: DataFrame,
        checked: WithRules | None,
        table: str,
        version: str,
        hours: list[str],
    ) -> Stats:
        """The written partitions' stats (and the checked model's rules), from the rows the
        asset cached if it did, else from the table."""
        written = (
            obj
            if checked is not None and checked.cached
            else self.spark.table(table).where(
                (F.col("version") == version) & F.col("hour").isin(hours)
            )
        )
        return (
            partition_stats(written)
            if checked is None
            else stats_and_rules(table, version, written, checked)
        )

    def _record(
        self,
        context: dg.OutputContext,
        table: str,
        version: str,
        version_root: str,
        hours: list[str],
        stats: Stats,
        release: str,
        code_version: str | None,
    ) -> None:
        """Each written partition's rows and checksum in ``audit.shadow_partitions``."""
        now = audit.now()
        audit.append(
            self.spark,
            self.warehouse_dir,
            audit.SHADOW_PARTITIONS,
            [
                {
                    "table_name": table,
                    "hour": h,
                    "version": version,
                    "location": qualify(f"{version_root}/hour={h}"),
                    "row_count": stats.get(h, (0, ""))[0],
                    "checksum": stats.get(h, (0, "0:0"))[1],
                    "code_version": stats.get(h, (0, "", None))[2] or code_version,
                    "run_id": context.run_id,
                    "written_at": now,
                    "release_id": release,
                }
                for h in hours
            ],
        )

    def _write(self, context: dg.OutputContext, obj: "DataFrame | Measured | WithRules") -> None:
        stats, checked = None, None
        if isinstance(obj, Measured):
            obj, stats = obj.frame, obj.stats
        elif isinstance(obj, WithRules):
            obj, checked = obj.frame, obj
        table = table_name(context.asset_key)
        version = run_id(context.run_id)
        hours = sorted(context.asset_partition_keys)
        if not hours:
            raise dg.Failure(
                description=f"{table}: the run has no partition to write (a range in the "
                f"future, or outside the partitions?); nothing was written",
                allow_retries=False,
            )
        for hour in hours:
            parse_hour(hour)
        release = tags.release_id(run_tags(context), context.run_id)
        root = self._root(table)
        version_root = f"{root}/version={version}"
        code_version = context.asset_spec.code_version
        started = time.monotonic()
        ensure_table(
            self.spark, table, obj.schema.add("version", "string"), SHADOW_PARTITION_COLUMNS, root
        )
        context.log.info(f"writing {table} version {version} for {len(hours)} hour(s)")
        self._write_parquet(obj, version_root)
        register_partitions(
            self.spark, table, {(h, version): f"{version_root}/hour={h}" for h in hours}
        )
        if stats is None:  # read back what was written (or its cache): one Spark action
            stats = self._read_back(obj, checked, table, version, hours)
        self._record(context, table, version, version_root, hours, stats, release, code_version)
        seconds = time.monotonic() - started
        rows_written = sum(s[0] for s in stats.values())
        context.add_output_metadata(
            {
                "table": table,
                "write_seconds": round(seconds, 2),
                "rows_per_second": round(rows_written / seconds) if seconds else 0,
                "version": version,
                "release_id": release,
                "location": dg.MetadataValue.path(version_root),
                "rows_written": rows_written,
                **usage_metadata(self.pyspark),
            }
        )
        # Each hour's own counts go on that hour's event only (not a whole-range dict on
        # every event): the event log grows linearly with the hours of a run.
        for h in hours:
            context.step_context.add_asset_metadata(
                {ROWS: stats.get(h, (0, ""))[0], CHECKSUM: stats.get(h, (0, "0:0"))[1]},
                asset_key=context.asset_key,
                partition_key=h,
            )

    def load_input(self, context: dg.InputContext) -> "DataFrame | UpstreamGap | PartialWindow":
        """The upstream hours of this input: the release's candidate where the release
        rebuilt the hour, the published partition otherwise (see ``resolve_upstream``);
        records what was read in ``audit.release_reads``.

        Hours with neither: declared empty (tag ``allow_missing_hours``) are read as empty;
        for a windowed reader (``WINDOW_MAY_LACK_DATA``) the others too, as a
        ``PartialWindow`` naming them (the hours built from them are provisional); else an
        ``UpstreamGap``: the build refuses (``defs.layers.common.refuse``)."""
        reader = context.definition_metadata[READER_TABLE]
        run = run_tags(context)
        this_run = context.step_context.run_id
        before, after = self.outside_backups(context)
        declared = tags.allowed_missing_hours(run, []) | before
        view = resolve_upstream(
            self.spark,
            table_name(context.asset_key),
            context.definition_metadata[PUBLISHED_TABLE],
            sorted(context.asset_partition_keys),
            tags.release_id(run, this_run),
            allowed_empty=declared,
            outside=after - declared,
            windowed=bool(context.definition_metadata.get(WINDOW_MAY_LACK_DATA)),
        )
        if view.missing:
            return UpstreamGap(
                f"{view.published} is not published for {len(view.missing)} hour(s) that "
                f"{reader} reads, and this release did not rebuild them: "
                f"{', '.join(view.missing[:24])}{' ...' if len(view.missing) > 24 else ''}. "
                f"Nothing was built. Include them in the backfill, or declare them empty "
                f"with {tags.ALLOW_MISSING_HOURS}=<hour>,<hour>",
                view.missing,
            )
        audit.append(
            self.spark, self.warehouse_dir, audit.RELEASE_READS, view.reads(reader, this_run)
        )
        context.log.info(
            f"{reader} reads {len(view.candidates)} hour(s) of {view.upstream} from release "
            f"{view.release_id}, {len(view.live)} published hour(s) of {view.published}"
            + (
                f", {len(view.empty)} hour(s) as empty (declared, or before the backups)"
                if view.empty
                else ""
            )
            + (
                f", {len(view.outside)} hour(s) after the newest backup hour as empty"
                if view.outside
                else ""
            )
            + (
                f", {len(view.unavailable)} unpublished hour(s) read as empty"
                if view.unavailable
                else ""
            )
        )
        if view.without_data and context.definition_metadata.get(WINDOW_MAY_LACK_DATA):
            return PartialWindow(view.frame, view.without_data)
        return view.frame

    def outside_backups(self, context: dg.InputContext) -> tuple[set[str], set[str]]:
        """The input's hours (before the backup tree's first hour, after its newest): no
        data exists there. Before: the data's beginning, read as empty for good; after:
        not yet, read as empty and what is built from them is provisional."""
        if self.backups is None:
            return set(), set()
        bounds = backup_bounds(self.backups)
        if bounds is None:  # no backups at all (a wrong BACKUP_ROOT?): nothing is "outside"
            return set(), set()
        hours = set(context.asset_partition_keys)
        return {h for h in hours if h < bounds[0]}, {h for h in hours if h > bounds[1]}


@dataclass(frozen=True)
class PartialWindow:
    """A windowed reader's input where some upstream hours had no data to read (read as
    empty): ``without_data`` maps each such hour to why (``SOURCE_OUTSIDE``: outside the
    backups; ``SOURCE_UNAVAILABLE``: neither published nor rebuilt by the release)."""

    frame: DataFrame
    without_data: dict[str, str]


def unwrap(read: "DataFrame | PartialWindow") -> tuple[DataFrame, dict[str, str]]:
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
    the published partition of ``published``; two small lookups, no scan of the data.
    An hour with neither is declared empty (``allowed_empty``), outside the backups
    (``outside``), unavailable (a ``windowed`` reader's gap) or missing (refused)."""
    for hour in hours:
        parse_hour(hour)
    written = audit.read(spark, audit.SHADOW_PARTITIONS).where(
        (F.col("table_name") == upstream)
        & (F.col("release_id") == release_id)
        & F.col("hour").isin(hours)
    )
    newest = F.row_number().over(Window.partitionBy("hour").orderBy(F.col("written_at").desc()))
    candidates = {
        r["hour"]: (r["version"], r["location"])
        for r in written.withColumn("_n", newest).where(F.col("_n") == 1).collect()
    }
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
