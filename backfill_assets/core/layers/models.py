"""pandera models of the tables (PySpark backend): types, nullability, value rules.

Imported where data is validated (``core.layers.rules``' callers, inside a run's steps),
never at the code location's import: pandera brings pandas, about a second of every
process that loads the definitions (``test_imports`` holds it)."""

from __future__ import annotations

import pandera.pyspark as pa
import pyspark.sql.types as T
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from backfill_assets.core.backups.contract import DEVICES, EVENT_TYPES, SCHEMA_VERSIONS
from backfill_assets.core.layers.schemas import (
    DURATION_IS_DIFFERENCE,
    END_NOT_BEFORE_START,
    HOUR_OF,
    STARTS_IN_PARTITION_HOUR,
    session_id_of,
)
from backfill_assets.core.layers.urls import normalize_url_column


def _all_hold(rules: dict[str, Column]) -> Column:
    combined = F.lit(True)
    for rule in rules.values():
        combined = combined & F.coalesce(rule, F.lit(False))
    return combined


class RowRulesModel(pa.DataFrameModel):
    """A model whose cross-column rules are Spark predicates (``row_rules``), so that
    ``core.layers.rules`` can count their violations per hour in the same aggregation."""

    @classmethod
    def row_rules(cls) -> dict[str, Column]:
        """Row rules across columns: name -> Column that is true on a good row."""
        return {}

    @pa.dataframe_check
    def row_rules_hold(cls, df: DataFrame) -> bool:
        return df.where(~_all_hold(cls.row_rules())).limit(1).count() == 0


class RawPayloadSchema(RowRulesModel):
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
        # No rule ties received_at to the partition hour: the folder decides the hour, and
        # a line received outside it is valid (contract update; counted by the raw layer).
        return {}


class TransformedPayloadSchema(RawPayloadSchema):
    """``shadow.transformed_payloads`` / ``transformed.payloads``: one row per distinct
    payload of the received hour, ``page_url`` normalized (the raw columns and rules, plus
    normalization)."""

    @classmethod
    def row_rules(cls) -> dict[str, Column]:
        return {
            **RawPayloadSchema.row_rules(),
            "page_url:normalized": normalize_url_column(F.col("page_url")) == F.col("page_url"),
        }


class SessionSchema(RowRulesModel):
    """``shadow.sessions`` / ``aggregated.sessions``: one row per session starting in the hour."""

    session_id: T.StringType() = pa.Field(
        nullable=False, str_length={"min_value": 32, "max_value": 32}
    )
    client_id: T.LongType() = pa.Field(nullable=False, ge=0)
    user_id: T.StringType() = pa.Field(nullable=False, str_length={"min_value": 1})
    session_start_at: T.TimestampType() = pa.Field(nullable=False)
    session_end_at: T.TimestampType() = pa.Field(nullable=False)
    duration_seconds: T.DoubleType() = pa.Field(nullable=False, ge=0)
    payload_count: T.LongType() = pa.Field(nullable=False, ge=1)
    pageview_count: T.LongType() = pa.Field(nullable=False, ge=0)
    entry_url: T.StringType() = pa.Field(nullable=False, str_length={"min_value": 1})
    exit_url: T.StringType() = pa.Field(nullable=False, str_length={"min_value": 1})
    device: T.StringType() = pa.Field(nullable=False, isin=list(DEVICES))
    may_be_truncated: T.BooleanType() = pa.Field(nullable=False)
    run_id: T.StringType() = pa.Field(nullable=False)
    code_version: T.StringType() = pa.Field(nullable=False)
    hour: T.StringType() = pa.Field(nullable=False)

    @classmethod
    def row_rules(cls) -> dict[str, Column]:
        """Row rules across columns: true on a good row."""
        start, end = F.col("session_start_at"), F.col("session_end_at")
        return {
            END_NOT_BEFORE_START: end >= start,
            DURATION_IS_DIFFERENCE: F.col("duration_seconds")
            == (F.unix_micros(end) - F.unix_micros(start)) / F.lit(1_000_000.0),
            STARTS_IN_PARTITION_HOUR: F.date_format(start, HOUR_OF) == F.col("hour"),
            "session_id:sha256_of_client_user_start": F.col("session_id")
            == session_id_of(F.col("client_id"), F.col("user_id"), start),
            "pageview_count:at_most_payload_count": F.col("pageview_count")
            <= F.col("payload_count"),
        }
