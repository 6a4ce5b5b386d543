"""The Spark plan that reads backup part files and judges every line in the JVM
(``reader`` describes the whole read): the files' digest checks, the lines split and
numbered, and the rows of both in one frame of ``PARSED_SCHEMA``'s columns plus ``kind``."""

from __future__ import annotations

from collections.abc import Iterator

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from backfill_assets.core import faults
from backfill_assets.core.backups import contract
from backfill_assets.core.backups.parsed_rows import KIND_PAYLOAD, KIND_QUARANTINE
from backfill_assets.core.backups.spark_contract import UNDECIDED, judge

KIND_UNDECIDED = "undecided"  # a line for the Python reference
KIND_FILE = "file"  # one row per expected file: its digest check
KIND_READ = "read"  # one row per file Spark decompressed (marks it readable)

# The part of a file's path the inventory names it by: raw/date=…/hour=…/client_id=…/part-…
_REL_PATH = r"(raw/date=[^/]+/hour=[^/]+/client_id=[^/]+/[^/]+)$"
_HOUR_MS = contract.HOUR_MS
# Typed nulls of the file rows (which carry no line).
_FILE_ROW_NULLS = (
    ("raw_text", "string"),
    ("payload_id", "string"),
    ("user_id", "string"),
    ("event_time", "timestamp"),
    ("received_at", "timestamp"),
    ("event_type", "string"),
    ("page_url", "string"),
    ("device", "string"),
    ("referrer", "string"),
    ("schema_version", "int"),
    ("received_outside_hour", "boolean"),
    ("raw_bytes", "binary"),
)
_PAYLOAD_FIELDS = (
    "payload_id",
    "user_id",
    "event_type",
    "page_url",
    "device",
    "referrer",
    "schema_version",
)


def _rel(path: Column) -> Column:
    return F.regexp_extract(path, _REL_PATH, 1)


def _checkpoint(batches: Iterator) -> Iterator:
    faults.checkpoint(faults.SHADOW_WRITE)
    yield from batches


def _file_checks(spark: SparkSession, paths: list[str], expected: DataFrame) -> DataFrame:
    """One row per file: the manifest entry, the actual digest and size."""
    files = spark.read.format("binaryFile").load(paths)
    if faults.armed(faults.SHADOW_WRITE):  # fault-injection tests: a Python step to stop in
        files = files.mapInArrow(_checkpoint, files.schema)
    return files.select(
        _rel(F.col("path")).alias("file"),
        F.sha2(F.col("content"), 256).alias("actual_sha256"),
        F.length(F.col("content")).alias("bytes"),
    ).join(F.broadcast(expected), "file")


def _texts(spark: SparkSession, paths: list[str], expected: DataFrame) -> DataFrame:
    """One row per file Spark could decompress: its whole text and its manifest entry."""
    # Joined with the manifests' entries, a local relation (no job): not with the digests'
    # verdicts, which would make the digest pass a job of its own before this one.
    files = F.broadcast(expected.select("file", "hour", "client_id", "hour_start_ms"))
    return (
        spark.read.option("ignoreCorruptFiles", "true")
        .text(paths, wholetext=True)
        .select(_rel(F.col("_metadata.file_path")).alias("file"), "value")
        .join(files, "file")
    )


def _lines(texts: DataFrame) -> DataFrame:
    """One row per line of each file (``pos``, ``line``), plus one read-marker row per file
    (``pos == n``, a null line)."""
    value = F.col("value")
    raw_split = F.transform(  # each line keeps its bytes, valid UTF-8 or not
        F.split(F.decode(value.cast("binary"), "ISO-8859-1"), "\n", -1),
        lambda x: F.encode(x, "ISO-8859-1").cast("string"),
    )
    # A file that is UTF-8 throughout has only UTF-8 lines (a newline byte is never part
    # of a multi-byte character): the judge checks the lines of the other files alone.
    texts = texts.select("*", F.is_valid_utf8(value).alias("utf8"))
    parts = F.when(F.col("utf8"), F.split(value, "\n", -1)).otherwise(raw_split)
    # "a\nb\n" splits into ["a", "b", ""]: the empty string after the last newline is no
    # line (as in the reference); one null element is appended as the file's read marker.
    keys = ("file", "hour", "client_id", "hour_start_ms", "utf8")
    split = texts.select(*keys, parts.alias("parts"))
    parts = F.col("parts")
    # Sized before the explode, so that no exploded row carries its file's whole array.
    sized = split.select(
        *keys,
        F.size(parts).alias("n"),
        (F.size(parts) - F.when(F.element_at(parts, -1) == "", 1).otherwise(0)).alias("n_lines"),
        F.concat(parts, F.array(F.lit(None).cast("string"))).alias("items"),
    )
    return sized.select(
        *keys,
        "n",
        "n_lines",
        # ``_outer``: the same rows here (``items`` is never empty), but no filter inferred
        # from it. For an inner explode Spark infers ``size(items) > 0`` and pushes it
        # below these projections into the scan, where it splits every file a second time
        # (and re-encodes every line of a file that is not UTF-8 throughout).
        F.posexplode_outer("items").alias("pos", "line"),
    ).where((F.col("pos") < F.col("n_lines")) | (F.col("pos") == F.col("n")))


def _line_rows(lines: DataFrame) -> DataFrame:
    """Each line judged (``spark_contract.judge``) as a row with its kind."""
    judged = judge(lines, "line", "client_id", utf8="utf8")
    reason, line = F.col("reason"), F.col("line")
    hour_start = F.col("hour_start_ms")
    kind = (
        F.when(F.col("pos") == F.col("n"), F.lit(KIND_READ))
        .when(reason.isNull(), F.lit(KIND_PAYLOAD))
        .when(reason == UNDECIDED, F.lit(KIND_UNDECIDED))
        .otherwise(F.lit(KIND_QUARANTINE))
    )
    judged = judged.withColumn("kind", kind)
    kind = F.col("kind")
    is_payload = kind == KIND_PAYLOAD
    received_ms = F.col("received_at_ms")
    payload = {name: F.when(is_payload, F.col(name)).alias(name) for name in _PAYLOAD_FIELDS}
    return judged.select(
        "kind",
        "hour",
        "client_id",
        "file",
        (F.col("pos") + 1).cast("long").alias("line_number"),
        F.when(kind == KIND_QUARANTINE, reason).alias("reason"),
        F.when(kind == KIND_QUARANTINE, line).alias("raw_text"),
        payload["payload_id"],
        payload["user_id"],
        F.when(is_payload, F.timestamp_millis(F.col("event_time_ms"))).alias("event_time"),
        F.when(is_payload, F.timestamp_millis(received_ms)).alias("received_at"),
        payload["event_type"],
        payload["page_url"],
        payload["device"],
        payload["referrer"],
        payload["schema_version"],
        F.when(is_payload, ~received_ms.between(hour_start, hour_start + (_HOUR_MS - 1))).alias(
            "received_outside_hour"
        ),
        F.when(kind == KIND_UNDECIDED, line.cast("binary")).alias("raw_bytes"),
        F.lit(None).cast("bigint").alias("records"),
        F.lit(None).cast("boolean").alias("empty"),
    )


def _file_rows(checks: DataFrame) -> DataFrame:
    """One row per expected file: a ``file_digest_mismatch`` reason if its digest differs."""
    digest_ok = F.col("actual_sha256") == F.col("sha256")
    mismatch = F.concat(
        F.lit(f"{contract.FILE_DIGEST_MISMATCH}: sha256 "),
        F.col("actual_sha256"),
        F.lit(" != manifest "),
        F.col("sha256"),
        F.lit(" ("),
        F.col("bytes").cast("string"),
        F.lit(" bytes); "),
        F.col("records").cast("string"),
        F.lit(" lines not read"),
    )
    return checks.select(
        F.lit(KIND_FILE).alias("kind"),
        "hour",
        "client_id",
        "file",
        F.lit(None).cast("long").alias("line_number"),
        F.when(~digest_ok, mismatch).alias("reason"),
        *(F.lit(None).cast(t).alias(c) for c, t in _FILE_ROW_NULLS),
        "records",
        (F.col("bytes") == 0).alias("empty"),
    )


def parse(spark: SparkSession, paths: list[str], expected: DataFrame) -> DataFrame:
    """Every line judged in the JVM (``UNDECIDED`` ones marked), plus file-level rows:
    the lines of every expected file, whatever its digest (``read_folders`` leaves out
    those of a file whose digest differs, which its file row names)."""
    checks = _file_checks(spark, paths, expected)
    line_rows = _line_rows(_lines(_texts(spark, paths, expected)))
    return line_rows.unionByName(_file_rows(checks))
