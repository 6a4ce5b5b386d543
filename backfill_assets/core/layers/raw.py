"""The raw layer's Spark work (Dagster-free): the columns of its tables, the counts of one
pass over the judged lines, and the quarantine rows (``defs.layers.raw`` wires them)."""

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from backfill_assets.core.backups.reader import KIND_PAYLOAD, KIND_QUARANTINE
from backfill_assets.core.layers import rules
from backfill_assets.core.layers.shadow_stats import stats_aggregates
from backfill_assets.core.names import LINES_READ

RULES_BY = ("client_id",)  # the row rules are counted per (hour, client): the lines read

PAYLOAD_COLUMNS = [
    "payload_id",
    "client_id",
    "user_id",
    "event_time",
    "received_at",
    "event_type",
    "page_url",
    "device",
    "referrer",
    "schema_version",
]
QUARANTINE_COLUMNS = ["client_id", "file", "line_number", "reason", "raw_text"]


def is_payload() -> Column:
    """A judged line (with the erasure mark) that becomes a payload row."""
    return (F.col("kind") == KIND_PAYLOAD) & ~F.col("_erased")


def counts(parsed: DataFrame) -> list[dict]:
    """Per (hour, client, file) of judged rows (with lineage and the erasure mark), in one
    Spark action: the lines read, valid lines whose received_at is outside their folder's
    hour (contract: they belong to the folder's hour; a measure of clock skew and
    redelivery), lines left out as erased, the rows and checksum of the payloads to write
    (no read-back after the write), and the payloads breaking a pandera rule, for the check
    step (no second scan)."""
    from backfill_assets.core.layers.models import RawPayloadSchema

    payload = is_payload()
    stats = stats_aggregates(PAYLOAD_COLUMNS, where=payload)  # the written data columns
    rows = (
        parsed.groupBy("hour", "client_id", "file")
        .agg(
            F.count(F.col("line_number")).alias(LINES_READ),  # file-level rows have none
            F.sum((payload & F.col("received_outside_hour")).cast("int")).alias("outside"),
            F.sum(F.col("_erased").cast("int")).alias("erased"),
            rules.broken_count(RawPayloadSchema, where=payload).alias("broken"),
            *[column.alias(name) for name, column in stats.items()],
        )
        .collect()
    )
    return [row.asDict() for row in rows]


def by_hour(counted: list[dict]) -> tuple[dict[str, int], dict[str, int]]:
    """Lines received outside their hour and lines of erased users, per hour."""
    outside: dict[str, int] = {}
    erased_lines: dict[str, int] = {}
    for row in counted:
        outside[row["hour"]] = outside.get(row["hour"], 0) + int(row["outside"] or 0)
        erased_lines[row["hour"]] = erased_lines.get(row["hour"], 0) + int(row["erased"] or 0)
    return outside, erased_lines


def quarantine(kept: DataFrame) -> DataFrame:
    """The quarantine rows to write. Usually few rows, spread over every partition of the
    lines: gathered by hour first, so that each hour is one file (a file per task and hour
    was a hundred tiny files). A rebalance, not a repartition: adaptive execution splits an
    hour of many rows (a disaster hour, every line malformed) over several tasks and files
    instead of writing it in one task."""
    return (
        kept.where(F.col("kind") == KIND_QUARANTINE)
        .select(*QUARANTINE_COLUMNS, "run_id", "code_version", "hour")
        .hint("rebalance", "hour")
    )
