"""pandera models of the tables (PySpark backend): types, nullability, value rules."""

from __future__ import annotations

import pandera.pyspark as pa
import pyspark.sql.types as T
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from backfill_assets.backups.contract import DEVICES, EVENT_TYPES, SCHEMA_VERSIONS

HOUR_OF = "yyyy-MM-dd'T'HH"


class RawPayloadSchema(pa.DataFrameModel):
    """``shadow.raw_payloads`` / ``raw.payloads``: one row per valid backup line."""

    payload_id: T.StringType() = pa.Field(nullable=False, str_length={"min_value": 1})
    client_id: T.LongType() = pa.Field(nullable=False, ge=0)
    user_id: T.StringType() = pa.Field(nullable=False, str_length={"min_value": 1})
    event_time: T.TimestampType() = pa.Field(nullable=False)
    received_at: T.TimestampType() = pa.Field(nullable=False)
    event_type: T.StringType() = pa.Field(nullable=False, isin=list(EVENT_TYPES))
    page_url: T.StringType() = pa.Field(nullable=False, str_length={"min_value": 1})
    device: T.StringType() = pa.Field(nullable=False, isin=list(DEVICES))
    referrer: T.StringType() = pa.Field(nullable=True)
    schema_version: T.IntegerType() = pa.Field(nullable=False, isin=list(SCHEMA_VERSIONS))
    run_id: T.StringType() = pa.Field(nullable=False)
    code_version: T.StringType() = pa.Field(nullable=False)
    hour: T.StringType() = pa.Field(nullable=False)

    @classmethod
    def row_rules(cls) -> dict[str, Column]:
        """Row rules across columns: true on a good row."""
        return {
            "received_at:in_partition_hour": F.date_format("received_at", HOUR_OF) == F.col("hour"),
        }

    @pa.dataframe_check
    def received_in_partition_hour(cls, df: DataFrame) -> bool:
        rule = cls.row_rules()["received_at:in_partition_hour"]
        return df.where(~F.coalesce(rule, F.lit(False))).limit(1).count() == 0
