"""The payload ids of an hour as a digest (the transformed layer's reconciliation with raw).

Exact sums of two independent 64-bit hashes of the ids: the same ids give the same digest;
ids that differ (one missing, one extra, one twice) give another, but with a probability
of about 2**-128.
"""

from collections.abc import Mapping

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from backfill_assets.core.layers.shadow_stats import exact_sum, summed

_ID_HASHES = {
    "ids_xx": lambda: F.xxhash64("payload_id"),
    "ids_xx_salted": lambda: F.xxhash64(F.lit("reconciliation"), "payload_id"),
}
NO_IDS = (0, (0,) * len(_ID_HASHES))  # the digest of an hour without rows


def id_digest_columns(hashed: bool = False) -> dict[str, Column]:
    """Aggregates of a frame with ``payload_id``: the digest of its ids (``id_digest``).
    ``hashed``: of a frame whose columns are already the ids' hashes (``id_hashes``)."""
    columns: dict[str, Column] = {}
    for name, hash_of in _ID_HASHES.items():
        columns.update(exact_sum(F.col(name) if hashed else hash_of(), name))
    return columns


def id_hashes(df: DataFrame) -> DataFrame:
    """``hour`` and the two hashes of each row's ``payload_id``, named as in ``_ID_HASHES``."""
    return df.select("hour", *[hash_of().alias(name) for name, hash_of in _ID_HASHES.items()])


def id_digest(values: Mapping) -> tuple[int, ...]:
    """The digest of ``id_digest_columns``' aggregated values."""
    return tuple(summed(values, name) for name in _ID_HASHES)


def id_digests(df: DataFrame, hashed: bool = False) -> dict[str, tuple[int, tuple[int, ...]]]:
    """Per hour: the rows of ``df`` (with ``payload_id``, or its ``id_hashes`` if
    ``hashed``), and the digest of their ids."""
    rows = (
        df.groupBy("hour")
        .agg(
            F.count(F.lit(1)).alias("ids"),
            *[c.alias(n) for n, c in id_digest_columns(hashed).items()],
        )
        .collect()
    )
    return {r["hour"]: (int(r["ids"]), id_digest(r)) for r in rows}
