"""Small DataFrames made on the driver without Python workers.

``spark.createDataFrame`` of a Python list is an RDD of pickled rows: every job that scans
it starts Python workers on the executors, 1-1.5 s in a session that had none (the
release's layers need none). These helpers build the same frames in the JVM instead.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType


def empty(spark: SparkSession, schema: StructType | str) -> DataFrame:
    """A frame of no rows with ``schema``: an RDD of no partitions, so no task ever runs."""
    return spark.createDataFrame(spark.sparkContext.emptyRDD(), schema)


def local(spark: SparkSession, rows: Sequence[Sequence], schema: StructType | str) -> DataFrame:
    """``rows`` (tuples in the order of ``schema``'s fields, a ``StructType`` or its DDL) as a
    local relation, through Arrow: a table in the plan itself."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    struct = schema if isinstance(schema, StructType) else StructType.fromDDL(schema)
    columns = to_arrow_schema(struct, timezone="UTC")
    records = [dict(zip(columns.names, row, strict=True)) for row in rows]
    return spark.createDataFrame(pa.Table.from_pylist(records, columns), struct)
