"""Small DataFrames made on the driver without Python workers.

``spark.createDataFrame`` of a Python list is an RDD of pickled rows: every job that scans
it starts Python workers on the executors, 1-1.5 s in a session that had none (the
release's layers need none). These helpers build the same frames in the JVM instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType


def empty(spark: SparkSession, schema: StructType | str) -> DataFrame:
    """A frame of no rows with ``schema``: an RDD of no partitions, so no task ever runs."""
    return spark.createDataFrame(spark.sparkContext.emptyRDD(), schema)


def local(
    spark: SparkSession,
    rows: Sequence[Sequence],
    arrow_fields: Sequence[tuple[str, Any]],
    schema: StructType | str,
) -> DataFrame:
    """``rows`` (tuples in the order of ``arrow_fields``: (name, Arrow type or its name)) as a
    local relation with ``schema``, through Arrow: a table in the plan itself."""
    import pyarrow as pa

    columns = pa.schema([pa.field(name, kind) for name, kind in arrow_fields])
    records = [dict(zip(columns.names, row, strict=True)) for row in rows]
    return spark.createDataFrame(pa.Table.from_pylist(records, columns), schema)
