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

import dagster as dg
from dagster_pyspark import LazyPySparkResource
from py4j.protocol import Py4JJavaError
from pydantic import Field
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from backfill_assets.core import tags
from backfill_assets.core.backups.inventory import backup_bounds
from backfill_assets.core.backups.store import BackupStore
from backfill_assets.core.errors import cause_line
from backfill_assets.core.layers.shadow_io import (
    PLAIN_ENCODED_COLUMNS,
    ShadowVersion,
    shadow_root,
    write_shadow,
)
from backfill_assets.core.layers.shadow_stats import (
    Measured,
    WithRules,
)
from backfill_assets.core.layers.upstream import PartialWindow, UpstreamGap, resolve_upstream
from backfill_assets.core.names import ROWS
from backfill_assets.core.warehouse import audit
from backfill_assets.core.warehouse.tables import (
    run_id,
)
from backfill_assets.defs.resources.spark import usage_metadata
from backfill_assets.release.instance import run_tags as tags_of_run
from backfill_assets.release.keys import table_name

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

    def handle_output(
        self, context: dg.OutputContext, obj: "DataFrame | Measured | WithRules"
    ) -> None:
        """Write the shadow version (``core.layers.shadow_io``); a failure of Spark or of the
        file system ends the step with its cause in words and the table's location."""
        try:
            self._write(context, obj)
        except (Py4JJavaError, PySparkException, OSError) as exc:
            table = table_name(context.asset_key)
            where = shadow_root(self.warehouse_dir, table)
            context.log.error(f"writing {table} under {where} failed: {exc}")
            raise dg.Failure(
                description=f"{table}: writing the shadow version failed: "
                f"{cause_line(exc, where)}; nothing of it was published",
            ) from exc

    def _write(self, context: dg.OutputContext, obj: "DataFrame | Measured | WithRules") -> None:
        table = table_name(context.asset_key)
        hours = sorted(context.asset_partition_keys)
        if not hours:
            raise dg.Failure(
                description=f"{table}: the run has no partition to write (a range in the "
                f"future, or outside the partitions?); nothing was written",
                allow_retries=False,
            )
        target = ShadowVersion(
            table=table,
            version=run_id(context.run_id),
            hours=hours,
            release=tags.release_id(run_tags(context), context.run_id),
            run_id=context.run_id,
            code_version=context.asset_spec.code_version,
        )
        started = time.monotonic()
        context.log.info(f"writing {table} version {target.version} for {len(hours)} hour(s)")
        version_root, stats = write_shadow(
            self.spark, self.warehouse_dir, obj, target, self.plain_encoded_columns
        )
        seconds = time.monotonic() - started
        rows_written = sum(s[0] for s in stats.values())
        context.add_output_metadata(
            {
                "table": table,
                "write_seconds": round(seconds, 2),
                "rows_per_second": round(rows_written / seconds) if seconds else 0,
                "version": target.version,
                "release_id": target.release,
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
        audit.append(self.warehouse_dir, audit.RELEASE_READS, view.reads(reader, this_run))
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
