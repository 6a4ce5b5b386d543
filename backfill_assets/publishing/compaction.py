"""Audit compaction: an audit table's small appended files rewritten as one file, while
builds keep appending, without a reader ever counting a row twice or missing one.

Appends (``audit.append``) add one file each to the table's location and take no lock.
A compaction never changes a file that a reader may have listed. It builds the table anew
elsewhere and swaps the table's location, one metastore call (a reader resolves the table
before or after it):

1. list the files of the table's location L and write their rows as one file into a new
   location N, which nobody reads yet;
2. *seal* L: write ``audit.SEAL`` into it (where the table goes, and a deadline);
3. carry into N every file of L that is not one of the listed ones (appended since);
4. count the rows of N against those of L's files, and swap the table to N, unless the
   deadline has passed (then give up: the table stays at L, whole, and N is deleted);
5. carry what reached L since step 3.

An appender looks for the seal *after* its file is in place. No seal: the file was there
before the seal, so step 3 carries it before the swap (a reader sees it in L, then in N).
A seal: the appender waits for the swap (at most until the deadline, plus a margin), then
carries its file into the new location itself before returning. So an append that has
returned is in the table from then on. A compaction killed at any step leaves the table
where it was or where it went, whole; its seal lapses at the deadline.

A superseded location is kept for ``GRACE`` after its seal (a reader that listed it before
the swap still reads its files), then deleted by a later compaction of the same table.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from pyspark.sql import SparkSession

from backfill_assets import faults
from backfill_assets.publishing import audit
from backfill_assets.publishing.tables import location, split_table, table_exists, table_location

DEFAULT_MIN_FILES = 32  # the vacuum job compacts an audit table with this many files or more
SEAL_SECONDS = 60.0  # from the seal to the swap, at most; past it the compaction gives up
GRACE = timedelta(hours=1)  # how long a superseded location is kept for readers
GENERATIONS = "_generations"  # <warehouse>/audit/_generations/<table>/<generation>

COMPACTED = "compacted"
TOO_FEW_FILES = "too few files"
WOULD_COMPACT = "would compact"
GAVE_UP = "gave up"


@dataclass(frozen=True)
class Compaction:
    """What one compaction of an audit table did."""

    table: str
    files: int  # files in the table's location when listed
    outcome: str  # COMPACTED, TOO_FEW_FILES, WOULD_COMPACT (dry run) or GAVE_UP
    rows: int = 0  # rows of the new location when swapped
    carried: int = 0  # files appended during the compaction, carried into the new location
    location: str | None = None  # where the table is now
    detail: str = ""
    deleted: tuple[str, ...] = ()  # superseded locations deleted (sealed longer than GRACE)


def visible_files(spark: SparkSession, where: str) -> list[str]:
    """The names of the data files in ``where`` that Spark reads (not ``_`` or ``.``
    hidden ones), sorted; [] if it does not exist."""
    filesystem, directory = audit.hadoop_path(spark, where)
    if not filesystem.exists(directory):
        return []
    names = [s.getPath().getName() for s in filesystem.listStatus(directory) if s.isFile()]
    return sorted(n for n in names if not n.startswith(("_", ".")))


def _read(spark: SparkSession, table: str, where: str, names: Iterable[str]):
    """The rows of files ``names`` of ``where``, with the table's schema."""
    return spark.read.schema(audit.schema(table)).parquet(*[f"{where}/{n}" for n in names])


def _rows(spark: SparkSession, table: str, where: str, names: list[str]) -> int:
    return _read(spark, table, where, names).count() if names else 0  # from the footers


def _seal(spark: SparkSession, where: str, into: str, deadline: datetime, at: datetime) -> None:
    """Write ``where``'s seal (replacing a lapsed one of an earlier attempt)."""
    body = {"into": into, "sealed_at": at.isoformat(), "deadline": deadline.isoformat()}
    audit.write_file(spark, where, audit.SEAL, json.dumps(body).encode(), replace=True)


def _unseal(spark: SparkSession, where: str) -> None:
    filesystem, directory = audit.hadoop_path(spark, where)
    filesystem.delete(spark._jvm.org.apache.hadoop.fs.Path(directory, audit.SEAL), False)


def _delete(spark: SparkSession, where: str) -> bool:
    """Delete the folder ``where`` and everything in it; whether it existed."""
    filesystem, directory = audit.hadoop_path(spark, where)
    return bool(filesystem.delete(directory, True))


def _carry_new(spark: SparkSession, old: str, new: str, known: set[str]) -> list[str]:
    """Carry the files of ``old`` that are not ``known`` into ``new``; their names."""
    fresh = [n for n in visible_files(spark, old) if n not in known]
    for name in fresh:
        audit.carry(spark, old, name, new)
    return fresh


def _qualified(spark: SparkSession, where: str) -> str:
    filesystem, directory = audit.hadoop_path(spark, where)
    return filesystem.makeQualified(directory).toString()


def delete_superseded(
    spark: SparkSession, warehouse_dir: str, table: str, now: datetime
) -> list[str]:
    """Delete the table's superseded locations sealed longer than ``GRACE`` ago, and
    generations a killed compaction built but never swapped in (older than ``GRACE``);
    never the table's location. Returns what was deleted."""
    _, name = split_table(table)
    current = _qualified(spark, table_location(spark, table))
    original = f"{warehouse_dir}/audit/{name}"
    generations = f"{warehouse_dir}/audit/{GENERATIONS}/{name}"
    filesystem, directory = audit.hadoop_path(spark, generations)
    built = (
        [s for s in filesystem.listStatus(directory) if s.isDirectory()]
        if filesystem.exists(directory)
        else []
    )
    candidates = [(original, None)] + [
        (s.getPath().toString(), s.getModificationTime()) for s in built
    ]
    deleted = []
    for where, modified_ms in candidates:
        if _qualified(spark, where) == current:
            continue
        seal = audit.read_seal(spark, where)
        if seal is not None:
            lapsed = seal["sealed_at"] < now - GRACE
        else:  # never swapped in (a killed or abandoned compaction): by its age
            lapsed = modified_ms is not None and modified_ms / 1000 < (now - GRACE).timestamp()
        if lapsed and _delete(spark, where):
            deleted.append(where)
    return deleted


def compact(
    spark: SparkSession,
    warehouse_dir: str,
    table: str,
    *,
    min_files: int = DEFAULT_MIN_FILES,
    dry_run: bool = False,
    seal_seconds: float = SEAL_SECONDS,
    now: Callable[[], datetime] = audit.now,
    progress: Callable[[str], None] | None = None,
) -> Compaction | None:
    """Compact audit table ``table`` if it has at least ``min_files`` files (at least 2);
    None if it does not exist. ``progress(step)`` is called after each step ("written",
    "sealed", "swapped"), with the table still readable whole (for logs and tests)."""
    if table not in audit.TABLES:
        raise ValueError(f"{table!r} is not an audit table")
    if not table_exists(spark, table):
        return None
    step = progress or (lambda _: None)
    old = table_location(spark, table)
    listed = visible_files(spark, old)
    deleted = () if dry_run else tuple(delete_superseded(spark, warehouse_dir, table, now()))
    if len(listed) < max(min_files, 2):
        return Compaction(table, len(listed), TOO_FEW_FILES, location=old, deleted=deleted)
    if dry_run:
        return Compaction(table, len(listed), WOULD_COMPACT, location=old)
    _, name = split_table(table)
    generation = f"{now():%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:12]}"
    new = location(f"{warehouse_dir}/audit/{GENERATIONS}/{name}/{generation}")
    _read(spark, table, old, listed).coalesce(1).write.mode("errorifexists").parquet(new)
    step("written")
    sealed_at = now()
    deadline = sealed_at + timedelta(seconds=seal_seconds)
    _seal(spark, old, new, deadline, sealed_at)
    faults.checkpoint(faults.AUDIT_COMPACTION)
    step("sealed")
    carried = _carry_new(spark, old, new, set(listed))
    expected = _rows(spark, table, old, [*listed, *carried])
    got = _rows(spark, table, new, visible_files(spark, new))
    problem = (
        f"{got} rows in {new} against {expected} in the files of {old}"
        if got != expected
        else f"past its deadline ({seal_seconds:g} s after the seal)"
        if now() >= deadline
        else ""
    )
    if problem:  # the table stays at ``old``; appenders that saw the seal stop waiting
        _unseal(spark, old)
        _delete(spark, new)
        return Compaction(table, len(listed), GAVE_UP, location=old, detail=problem)
    spark.sql(f"ALTER TABLE {table} SET LOCATION '{new}'")
    spark.catalog.refreshTable(table)
    step("swapped")
    carried += _carry_new(spark, old, new, {*listed, *carried})
    return Compaction(
        table,
        len(listed),
        COMPACTED,
        rows=got,
        carried=len(carried),
        location=new,
        deleted=deleted,
    )
