"""``contract.parse_line`` in the JVM for the common case: a valid line never leaves Spark.

``backups.contract`` stays the single source of truth. ``judge`` expresses, as built-in
Spark functions, every check ``contract.validate`` makes of a *valid* line, and produces its
typed values exactly as the reference does (same integer and timestamp semantics, down to
Python's float rounding of fractional seconds). A JSON value is parsed once into a VARIANT
(``try_parse_json``); each field's JSON type comes from ``schema_of_variant``; each costly
value is computed once in a staged projection and referenced by name.

A line the JVM does not find valid (or cannot decide exactly) gets the verdict
``UNDECIDED`` and the reader hands it to ``contract.parse_line`` itself, which words the
quarantine reason. Those are the malformed lines (a fraction of a percent of a backup) and a
few valid but unusual ones:

- bytes that are not UTF-8, text Spark's JSON parser refuses (not JSON, duplicate keys,
  lone surrogate escapes, nesting beyond Jackson's limits), more than one JSON value;
- a number whose JSON token the VARIANT cannot tell apart (``1.0`` and a 19+ digit integer
  are both ``DECIMAL(p,0)``; ``1e2`` and a 39+ digit integer both ``DOUBLE``), so "an
  integer is a JSON number without a fraction" is decided by Python for them;
- a timestamp not of the form ``YYYY-MM-DDTHH:MM:SS[.f{1,6}][Z]`` (``fromisoformat``
  accepts many more forms);
- a ``page_url`` whose host has brackets or non-ASCII characters (``urlsplit``'s IPv6 and
  NFKC checks) or that holds tab/CR/LF or control characters before the host.

``backfill_assets_tests/backups/test_spark_contract.py`` runs both on a generated corpus
of edge cases and asserts that the JVM never accepts a line the reference rejects, and that
the typed values of the lines it accepts are the reference's.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from backfill_assets.backups import contract

UNDECIDED = "undecided"  # the reason of a line left to the Python reference

_JSON_WS = "[ \\t\\r\\n]*"
# YYYY-MM-DDTHH:MM:SS[.f{1,6}][Z]; any other form is left to datetime.fromisoformat.
_ISO = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z?\z"
# An absolute http(s) URL whose host part is ASCII without brackets: urlsplit accepts it
# without any of its checks applying (netloc chars: ASCII except \t \n \r # / ? [ ]).
_URL_OK = (
    r"^[Hh][Tt][Tt][Pp][Ss]?://[\x00-\x08\x0b\x0c\x0e-\x22\x24-\x2e\x30-\x3e\x40-\x5a"
    r"\x5c\x5e-\x7f]+([/?#][^\t\r\n]*)?\z"
)
_INT_TYPES = ("BIGINT", "INT", "SMALLINT", "TINYINT")


def _div(a: Column, b: int) -> Column:
    return (a / F.lit(b)).cast("long")  # only for non-negative a: truncation is floor


_FIELDS = {
    "schema_version": "int",
    "payload_id": "str",
    "client_id": "int",
    "user_id": "str",
    "event_time": "str",
    "event_time_ms": "int",
    "received_at": "str",
    "event_type": "str",
    "page_url": "str",
    "device": "str",
    "referrer": "str",
}
_TIMES = ("event_time", "received_at")
# Output columns of ``judge`` (besides the input's).
VERDICT_COLUMNS = (
    "reason",
    "payload_id",
    "client_id_value",
    "user_id",
    "event_time_ms",
    "received_at_ms",
    "event_type",
    "page_url",
    "device",
    "referrer",
    "schema_version",
)


def _c(name: str) -> Column:
    return F.col(f"_j_{name}")


def _time_parts(name: str) -> list[Column]:
    """Calendar parts of a ``_ISO``-form string (null-safe: ``try_cast``)."""
    text = _c(f"s_{name}")

    def num(start: int, length: int) -> Column:
        return F.substring(text, start, length).try_cast("long")

    fraction = F.when(
        F.substring(text, 20, 1) == ".", F.regexp_extract(text, r"\.(\d{1,6})", 1)
    ).otherwise(F.lit(""))
    return [
        text.rlike(_ISO).alias(f"_j_{name}_form"),
        num(1, 4).alias(f"_j_{name}_y"),
        num(6, 2).alias(f"_j_{name}_mo"),
        num(9, 2).alias(f"_j_{name}_d"),
        num(12, 2).alias(f"_j_{name}_h"),
        num(15, 2).alias(f"_j_{name}_mi"),
        num(18, 2).alias(f"_j_{name}_s"),
        F.rpad(fraction, 6, "0").try_cast("long").alias(f"_j_{name}_us"),
    ]


def _time_values(name: str) -> list[Column]:
    """``contract.parse_iso_ms`` of the parts: validity and epoch ms (IEEE as Python)."""
    y, mo, d = _c(f"{name}_y"), _c(f"{name}_mo"), _c(f"{name}_d")
    h, mi, s, us = _c(f"{name}_h"), _c(f"{name}_mi"), _c(f"{name}_s"), _c(f"{name}_us")
    leap = ((y % 4 == 0) & (y % 100 != 0)) | (y % 400 == 0)
    days_in_month = (
        F.when(mo.isin(4, 6, 9, 11), 30).when(mo == 2, F.when(leap, 29).otherwise(28)).otherwise(31)
    )
    valid = (
        (y >= 1)
        & mo.between(1, 12)
        & (d >= 1)
        & (d <= days_in_month)
        & (h <= 23)
        & (mi <= 59)
        & (s <= 59)
    )
    # days from civil (H. Hinnant); all terms are non-negative for years >= 1
    yy = y - F.when(mo <= 2, 1).otherwise(0)
    era = _div(yy, 400)
    yoe = yy - era * 400
    doy = _div(153 * (mo + F.when(mo > 2, -3).otherwise(9)) + 2, 5) + d - 1
    doe = yoe * 365 + _div(yoe, 4) - _div(yoe, 100) + doy
    days = era * 146097 + doe - 719468
    total_us = (days * 86400 + h * 3600 + mi * 60 + s) * 1_000_000 + us
    # Python: timestamp() = total_us / 10**6 (a correctly rounded double), then
    # int(ts * 1000 + 0.5) for ts >= 0 (int(ts * 1000 - 0.5) below): the same IEEE steps.
    seconds = total_us.cast("double") / F.lit(1_000_000.0)
    half = F.when(seconds >= 0, F.lit(0.5)).otherwise(F.lit(-0.5))
    ms = F.when(valid, (seconds * F.lit(1000.0) + half).cast("long"))
    return [
        F.coalesce(valid, F.lit(False)).alias(f"_j_{name}_valid"),
        ms.alias(f"_j_{name}_ms"),
    ]


def judge(frame: DataFrame, line: str, client_id: str) -> DataFrame:
    """``frame`` with the verdict of its column ``line`` (a string, possibly not valid
    UTF-8) read from the folder of column ``client_id``: ``VERDICT_COLUMNS`` added.

    ``reason`` is null for a valid line (a payload) and ``UNDECIDED`` for any other line
    (left to the Python reference); the typed columns hold the payload's values
    (``client_id_value`` is the line's own ``client_id``).
    """
    text = F.col(line)
    # 1. parse once (and check that the line holds one JSON value, nothing after it)
    one_value = (F.json_array_length(F.concat(F.lit("["), text, F.lit("]"))) == 1) & (
        F.json_array_length(F.concat(F.lit("["), text, F.lit(",0]"))) == 2
    )
    # A line with a single '{' and '}' (the last non-blank character) that parses as an
    # object holds nothing after it; other lines pay for the two-parse check.
    single_braces = text.rlike(r"^[^{}]*\{[^{}]*\}[ \t\r\n]*\z")
    staged = frame.select(
        "*",
        F.try_parse_json(text).alias("_j_v"),
        (single_braces | F.coalesce(one_value, F.lit(False))).alias("_j_one_value"),
    )
    v = _c("v")
    # 2. each field once, as a VARIANT; whether the root is an object (starts with '{')
    is_object = text.rlike("^" + _JSON_WS + r"\{")
    staged = staged.select(
        "*",
        (F.is_valid_utf8(text) & v.isNotNull() & _c("one_value")).alias("_j_decoded"),
        is_object.alias("_j_object"),
        *(F.try_variant_get(v, f"$.{n}", "variant").alias(f"_j_f_{n}") for n in _FIELDS),
    )
    # 3. each field's JSON type and typed value once
    staged = staged.select(
        "*",
        *(F.schema_of_variant(_c(f"f_{n}")).alias(f"_j_t_{n}") for n in _FIELDS),
        F.coalesce(
            F.try_variant_get(_c("f_page_url"), "$", "string").rlike(_URL_OK), F.lit(False)
        ).alias("_j_url_ok"),
        *(
            F.try_variant_get(_c(f"f_{n}"), "$", "bigint" if kind == "int" else "string").alias(
                f"_j_{'i' if kind == 'int' else 's'}_{n}"
            )
            for n, kind in _FIELDS.items()
        ),
    )
    # 4. timestamp parts; the version
    t = {n: _c(f"t_{n}") for n in _FIELDS}
    staged = staged.select(
        "*",
        *(part for n in _TIMES for part in _time_parts(n)),
        F.when(_c("f_schema_version").isNull(), F.lit(1))
        .when(t["schema_version"].isin(*_INT_TYPES), _c("i_schema_version"))
        .alias("_j_version"),
    )
    # 5. timestamps
    staged = staged.select("*", *(value for n in _TIMES for value in _time_values(n)))
    # 6. valid: every check of contract.validate passes (any failure: left to Python)
    version = _c("version")
    v1, v2 = version == 1, version == 2

    def is_str(name: str) -> Column:
        return t[name] == "STRING"

    def is_int(name: str) -> Column:
        return t[name].isin(*_INT_TYPES)

    def in_range(ms: Column) -> Column:
        return ms.between(contract._MIN_MS, contract._MAX_MS - 1)

    def good_time(name: str) -> Column:
        return is_str(name) & _c(f"{name}_form") & _c(f"{name}_valid") & in_range(_c(f"{name}_ms"))

    payload_id, user_id = _c("s_payload_id"), _c("s_user_id")
    event_time_ms_v2 = _c("i_event_time_ms")
    checks = [
        _c("decoded"),
        _c("object"),
        version.isin(*contract.SCHEMA_VERSIONS),
        is_str("payload_id"),
        is_int("client_id"),
        is_str("user_id"),
        v2 | good_time("event_time"),
        v1 | (is_int("event_time_ms") & in_range(event_time_ms_v2)),
        good_time("received_at"),
        is_str("event_type"),
        is_str("page_url"),
        is_str("device"),
        v1 | _c("f_referrer").isNull() | t["referrer"].isin("VOID", "STRING"),
        payload_id != "",
        user_id != "",
        _c("s_event_type").isin(*contract.EVENT_TYPES),
        _c("s_device").isin(*contract.DEVICES),
        _c("url_ok"),
        _c("i_client_id") == F.col(client_id),
    ]
    valid = checks[0]
    for check in checks[1:]:
        valid = valid & check
    reason = F.when(~F.coalesce(valid, F.lit(False)), F.lit(UNDECIDED))
    record_client = _c("i_client_id")
    return staged.select(
        *(c for c in staged.columns if not c.startswith("_j_")),
        reason.alias("reason"),
        payload_id.alias("payload_id"),
        record_client.alias("client_id_value"),
        user_id.alias("user_id"),
        F.when(v1, _c("event_time_ms")).otherwise(event_time_ms_v2).alias("event_time_ms"),
        _c("received_at_ms").alias("received_at_ms"),
        _c("s_event_type").alias("event_type"),
        _c("s_page_url").alias("page_url"),
        _c("s_device").alias("device"),
        F.when(v2 & (t["referrer"] == "STRING"), _c("s_referrer"))
        .otherwise(F.lit(None).cast("string"))
        .alias("referrer"),
        version.cast("int").alias("schema_version"),
    )
