"""The transformed layer's Spark work (Dagster-free): the raw payloads of each received hour
de-duplicated by ``payload_id`` within the hour, ``page_url`` normalized."""

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from backfill_assets.core.layers import raw
from backfill_assets.core.layers.urls import normalize_urls

PAYLOAD_COLUMNS = list(raw.PAYLOAD_COLUMNS)
# The copy of a payload kept within an hour: earliest delivery, then every other column, so
# the choice is the same in every run whatever the order Spark reads the rows in (copies
# that tie on all of these are identical, so which one is kept does not matter).
DEDUPLICATION_ORDER = [
    "received_at",
    "event_time",
    *(c for c in PAYLOAD_COLUMNS if c not in ("payload_id", "received_at", "event_time")),
]


def deduplicate(payloads: DataFrame, keys: list[str]) -> DataFrame:
    """One row per ``keys`` + ``payload_id``: the first in ``DEDUPLICATION_ORDER``."""
    order = [F.col(c).asc_nulls_last() for c in DEDUPLICATION_ORDER if c in payloads.columns]
    rank = F.row_number().over(Window.partitionBy(*keys, "payload_id").orderBy(*order))
    return payloads.withColumn("_rank", rank).where(F.col("_rank") == 1).drop("_rank")


def transform(raw_payloads: DataFrame) -> DataFrame:
    """Published raw rows (with ``hour``) -> transformed rows (without lineage columns)."""
    distinct = deduplicate(raw_payloads.select(*PAYLOAD_COLUMNS, "hour"), ["hour"])
    return normalize_urls(distinct, "page_url")
