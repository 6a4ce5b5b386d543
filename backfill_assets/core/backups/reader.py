"""Spark reading of backup part files: Spark decompresses, parses and judges every line.

One plan, no per-file or per-hour jobs, nothing collected to the driver but a bounded
number of lines only the Python reference can judge:

- **Files**: Spark's ``binaryFile`` source reads the compressed bytes and ``sha2`` checks
  each file against its manifest entry (in the JVM), in the same job as the lines (no job
  of its own before it). A file whose digest differs is one ``file_digest_mismatch``
  quarantine row and none of its lines: they are left out once the first pass has found
  the mismatch (which then counts again, from the cache, without them).
- **Lines**: Spark's text source decompresses each ``.jsonl.zst`` file itself (zstd-jni
  in the pyspark wheel; content size may be absent) with ``wholetext``: one row per file,
  split on ``\\n`` and ``posexplode``-d, so line numbers are exact by construction (no
  ordering assumption across splits or tasks). A file that is not UTF-8 throughout is split
  on its raw bytes (through ISO-8859-1) so that each line keeps its bytes. A file Spark
  cannot decompress (``ignoreCorruptFiles``) yields no row and becomes one
  ``file_unreadable`` quarantine row.
- **Bounds**: before Spark opens anything, every part file is streamed once within the
  ``ReadLimits`` (``core.backups.screen``): a file that decompresses past its limit is left out
  as one ``file_refused`` row, and a file with a line past its limit is judged on the
  driver, streaming, by the reference (its over-long lines quarantined as
  ``line_too_long``); Spark reads the others.
- **Verdicts**: ``spark_contract.judge`` applies ``contract.parse_line``'s rules as column
  expressions. The rare lines it cannot decide exactly (``UNDECIDED``: not UTF-8, not
  JSON, exotic numbers or timestamps, ...) go to ``contract.parse_line`` itself: on the
  driver when they are few (at most ``DRIVER_JUDGED_LINES`` lines and
  ``DRIVER_JUDGED_BYTES``: no Python worker to start), else in a Python worker; a valid
  line never does.
- **Caches**: the judged lines are cached once, by the caller's first action over the valid
  lines (``JudgedLines.bulk``; the raw layer's counts: the cache costs no job of its own);
  everything but the valid lines (quarantined, undecided, file and read rows: few) is
  cached apart after that, so the counts and the quarantine write never scan the valid
  lines again.

Every line comes out exactly once: as a payload, or as a quarantine row with its file, line
number, reason and raw text.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TypeVar

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from backfill_assets.core import frames
from backfill_assets.core.backups import contract, screen
from backfill_assets.core.backups.inventory import Folder, unique_files
from backfill_assets.core.backups.parsed_rows import (
    COLUMNS,
    KIND_PAYLOAD,
    KIND_QUARANTINE,
    PARSED_SCHEMA,
    TYPES,
    ParsedRows,
)
from backfill_assets.core.backups.reader_executors import read_with_executors
from backfill_assets.core.backups.spark_lines import KIND_FILE, KIND_READ, KIND_UNDECIDED, parse
from backfill_assets.core.backups.store import BackupStore
from backfill_assets.core.hours import parse_hour
from backfill_assets.settings import ReadLimits

_UNDECIDED_COLUMNS = ("hour", "client_id", "file", "line_number", "raw_bytes")
# What the rows that are not valid lines need (their payload columns are null).
_SIDE_COLUMNS = (
    "kind",
    "hour",
    "client_id",
    "file",
    "line_number",
    "reason",
    "raw_text",
    "raw_bytes",
    "records",
    "empty",
)
# The manifests' entries.
_FILES_SCHEMA = (
    "file string, hour string, client_id bigint, hour_start_ms bigint, sha256 string, "
    "records bigint"
)
# Undecided lines judged on the driver at most (else in one Python worker on an executor).
DRIVER_JUDGED_LINES = 10_000
DRIVER_JUDGED_BYTES = 16 * 2**20


def _parsed(frame: DataFrame) -> DataFrame:
    """``frame``'s rows as ``PARSED_SCHEMA`` rows: the columns it lacks are typed nulls."""
    have = set(frame.columns)
    return frame.select(*(c if c in have else F.lit(None).cast(TYPES[c]).alias(c) for c in COLUMNS))


def _judged_by_reference(records: Iterable[Mapping], hour_starts: dict[str, int]):
    """``contract.parse_line`` over undecided lines (``_UNDECIDED_COLUMNS`` records): one
    Arrow batch of ``PARSED_SCHEMA``."""
    rows = ParsedRows()
    for record in records:
        rows.judge(
            record["raw_bytes"],
            hour=record["hour"],
            client_id=record["client_id"],
            file=record["file"],
            line_number=record["line_number"],
            hour_start_ms=hour_starts[record["hour"]],
        )
    return rows.batch()


def _reference(hour_starts: dict[str, int]):
    """The reference in a Python worker (Arrow batches in, rows out)."""

    def judge(batches: Iterator) -> Iterator:
        for batch in batches:
            yield _judged_by_reference(batch.to_pylist(), hour_starts)

    return judge


def _judge_undecided(
    spark: SparkSession, lines: DataFrame, hour_starts: dict[str, int], max_lines: int
) -> DataFrame:
    """The undecided lines judged by ``contract.parse_line``: on the driver when they are at
    most ``max_lines`` lines and ``DRIVER_JUDGED_BYTES`` (one small Spark action sizes them;
    no Python worker to start), else in one Python task, cached for the caller's actions."""
    size = lines.agg(
        F.count(F.lit(1)).alias("lines"), F.sum(F.length("raw_bytes")).alias("bytes")
    ).first()
    if size["lines"] <= max_lines and (size["bytes"] or 0) <= DRIVER_JUDGED_BYTES:
        import pyarrow as pa

        batch = _judged_by_reference((r.asDict() for r in lines.collect()), hour_starts)
        return spark.createDataFrame(pa.Table.from_batches([batch]), PARSED_SCHEMA)
    return (
        lines.repartition(1)  # one Python task
        .mapInArrow(_reference(hour_starts), PARSED_SCHEMA)
        .persist(StorageLevel.MEMORY_AND_DISK)
    )


def _screened(
    spark: SparkSession, store: BackupStore, expected: list[tuple], limits: ReadLimits
) -> tuple[list[tuple], DataFrame | None]:
    """``expected`` streamed within ``limits`` (``screen``): the entries Spark may read,
    and the rows of the others (a ``file_refused`` row each, or their lines judged here),
    None if there are none."""
    found = screen.screen_files(store, {e[0]: e[5] for e in expected}, limits)
    if not found:
        return expected, None
    import pyarrow as pa

    batches = []
    for rel, hour, client_id, hour_start_ms, sha256, records in expected:
        if rel not in found:
            continue
        where = {"hour": hour, "client_id": client_id, "hour_start_ms": hour_start_ms}
        refused = found[rel].refused
        if refused:
            rows = ParsedRows()
            rows.add(**where, file=rel, line_number=None, reason=refused)
            batches.append(rows.batch())
        else:
            batches.extend(screen.judge_file(store, rel, where, sha256, records, limits))
    frame = spark.createDataFrame(pa.Table.from_batches(batches), PARSED_SCHEMA)
    return [e for e in expected if e[0] not in found], frame


_ADAPTIVE = "spark.sql.adaptive.enabled"
_T = TypeVar("_T")


class JudgedLines:
    """What ``read_folders`` yields: every line judged (schema ``PARSED_SCHEMA``), in two
    parts. ``bulk``: the lines the JVM judged valid (nearly all of them); the caller's
    first action over it is the one that reads, judges and caches the files, so it should
    be one the caller needs anyway (the raw layer's counts). ``rest``: every other row
    (quarantined lines, lines judged by the Python reference, file-level rows: few), judged
    from the cache when first asked for. ``all``: both. (From a store Spark cannot open,
    the executors' reader judges every line in one pass: ``bulk`` is every row of every
    kind and ``rest`` is empty.)"""

    def __init__(
        self,
        bulk: DataFrame,
        rest: Callable[[], DataFrame],
        left_out: Callable[[], list[str]] | None = None,
    ):
        self._bulk = bulk
        self._judge_rest = rest
        self._rest: DataFrame | None = None
        # after the first pass: the files none of whose lines count (digest mismatch)
        self._left_out = left_out

    def first_pass(self, action: Callable[[DataFrame], _T]) -> _T:
        """``action(bulk)``, the caller's first action: in the same pass as the reading,
        judging and caching of the files. Adaptive execution would fill the cache in a job
        of its own (a table-cache query stage) and then scan it again for the action; it is
        off for this one action, so that the action's first stage fills the cache.

        That pass judges the lines of every file and checks the files' digests beside
        them; should a digest differ, the action runs once more, over the cache, without
        that file's lines (which ``bulk``, ``rest`` and ``all`` leave out too)."""
        conf = self._bulk.sparkSession.conf
        was = conf.get(_ADAPTIVE)
        conf.set(_ADAPTIVE, "false")
        try:
            result = action(self._bulk)
        finally:
            conf.set(_ADAPTIVE, was)
        if self._left_out and self._left_out():  # a digest mismatch: rare
            result = action(self.bulk)  # again, from the cache, without those files' lines
        return result

    @property
    def bulk(self) -> DataFrame:
        """The valid lines, but those of a file left out (its digest differs)."""
        left_out = self._left_out() if self._left_out else []
        return self._bulk.where(~F.col("file").isin(left_out)) if left_out else self._bulk

    @property
    def rest(self) -> DataFrame:
        if self._rest is None:
            self._rest = self._judge_rest()
        return self._rest

    @property
    def all(self) -> DataFrame:
        return self.bulk.unionByName(self.rest)


def _unreadable(files: DataFrame, read: DataFrame) -> DataFrame:
    """The file rows of the non-empty files whose digest matched but which Spark could not
    decompress (no read marker): a ``file_unreadable`` reason each."""
    reason = F.concat(
        F.lit(
            f"{contract.FILE_UNREADABLE}: not a complete zstd frame of text "
            "(Spark could not decompress it); "
        ),
        F.col("records").cast("string"),
        F.lit(" lines not read"),
    )
    return (
        files.where(F.col("reason").isNull() & ~F.col("empty"))
        .join(read, "file", "left_anti")
        .withColumn("reason", reason)
    )


class _SparkRead:
    """The lines Spark judged (``judged``, cached) and what ``JudgedLines`` asks of them
    after the first pass; ``held``: every frame cached, released by ``release``."""

    def __init__(
        self,
        judged: DataFrame,
        hour_starts: dict[str, int],
        driver_judged_lines: int,
        screened: DataFrame | None,
    ):
        self.judged = judged
        self.held = [judged]
        self._hour_starts = hour_starts
        self._driver_judged_lines = driver_judged_lines
        self._screened = screened
        self._left_out: list[str] | None = None

    @functools.cached_property
    def side(self) -> DataFrame:
        # The few rows that are not valid lines, cached apart in a few partitions: the
        # counts, the undecided lines and the quarantine write read them without scanning
        # the valid lines again (nor scheduling a task per partition of the judged lines).
        # A coalesce, not a shuffle: the judged lines are cached by the time these are
        # first asked for (after the first pass), so a few tasks scan that cache (0.55-0.8 s
        # for the day's 58 partitions, against 0.9-1.2 s through a shuffle). (Asked for
        # before it, they would judge the lines in these few tasks: the same work.)
        # Without the payload columns (null on these rows): the scan of the judged lines
        # reads only the columns kept here.
        rows = (
            self.judged.where(F.col("kind") != KIND_PAYLOAD)
            .select(*_SIDE_COLUMNS)
            .coalesce(self.judged.sparkSession.sparkContext.defaultParallelism)
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
        self.held.append(rows)
        return rows

    def left_out(self) -> list[str]:
        """The files whose digest differs from their manifest's: none of their lines count
        (one small action over the side rows; the file rows are one per expected file)."""
        if self._left_out is None:
            kind = F.col("kind")
            mismatched = self.side.where((kind == KIND_FILE) & F.col("reason").isNotNull())
            self._left_out = sorted(r.file for r in mismatched.select("file").collect())
        return self._left_out

    def rest(self) -> DataFrame:
        kind = F.col("kind")
        bad = self.left_out()
        lines = self.side.where(~F.col("file").isin(bad)) if bad else self.side
        undecided = _judge_undecided(
            self.judged.sparkSession,
            lines.where(kind == KIND_UNDECIDED).select(*_UNDECIDED_COLUMNS),
            self._hour_starts,
            self._driver_judged_lines,
        )
        self.held.append(undecided)
        rejected = _parsed(lines.where(kind == KIND_QUARANTINE))
        files = self.side.where(kind == KIND_FILE)
        read = self.side.where(kind == KIND_READ).select("file")
        corrupt = files.where(F.col("reason").isNotNull())
        file_rows = _parsed(
            corrupt.unionByName(_unreadable(files, read)).withColumn("kind", F.lit(KIND_QUARANTINE))
        )
        judged_rest = rejected.unionByName(undecided).unionByName(file_rows)
        return judged_rest if self._screened is None else judged_rest.unionByName(self._screened)

    def lines(self) -> JudgedLines:
        valid = self.judged.where(F.col("kind") == KIND_PAYLOAD).select(*COLUMNS)
        return JudgedLines(valid, self.rest, self.left_out)

    def release(self) -> None:
        for frame in reversed(self.held):
            frame.unpersist()


@contextmanager
def _read_with_executors(
    spark: SparkSession, store: BackupStore, folders: list[Folder], limits: ReadLimits
) -> Iterator[JudgedLines]:
    """From a store Spark cannot open: the executors' reader judges every line in one pass."""

    # cached as well: the caller's counts and its two writes read the backups once
    parsed = read_with_executors(spark, store, folders, PARSED_SCHEMA, limits).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    try:
        yield JudgedLines(parsed, lambda: frames.empty(spark, PARSED_SCHEMA))
    finally:
        parsed.unpersist()


@contextmanager
def read_folders(
    spark: SparkSession,
    store: BackupStore,
    folders: list[Folder],
    *,
    driver_judged_lines: int = DRIVER_JUDGED_LINES,
    limits: ReadLimits | None = None,
) -> Iterator[JudgedLines]:
    """Every line of the closed folders' part files, judged (``JudgedLines``).

    A context manager: the judged lines are cached (memory and disk) while the caller uses
    them (it may run several Spark actions on them) and released on exit.
    ``driver_judged_lines``: the most undecided lines judged on the driver. ``limits``
    (default ``ReadLimits.from_env()``): what one file may cost to read.
    """
    limits = limits or ReadLimits.from_env()
    hour_starts = {f.hour: int(parse_hour(f.hour).timestamp() * 1000) for f in folders}
    expected = [  # each file once, even if a manifest lists it twice (the inventory's problem)
        (f.rel_path, folder.hour, folder.client_id, hour_starts[folder.hour], f.sha256, f.records)
        for folder, f in unique_files(folders)
    ]
    if not expected:
        empty = frames.empty(spark, PARSED_SCHEMA)
        yield JudgedLines(empty, lambda: empty)
        return
    if not store.spark_reads_files():
        with _read_with_executors(spark, store, folders, limits) as lines:
            yield lines
        return
    expected, screened = _screened(spark, store, expected, limits)
    if not expected:  # every file refused or judged here
        empty = frames.empty(spark, PARSED_SCHEMA)
        yield JudgedLines(empty, lambda: empty if screened is None else screened)
        return
    paths = [store.spark_path(rel) for rel, *_ in sorted(expected)]
    entries = frames.local(spark, expected, _FILES_SCHEMA)  # no Python worker
    judged = parse(spark, paths, entries).persist(StorageLevel.MEMORY_AND_DISK)
    read = _SparkRead(judged, hour_starts, driver_judged_lines, screened)
    try:
        yield read.lines()
    finally:
        read.release()
