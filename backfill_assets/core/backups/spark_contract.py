"""``contract.parse_line`` in the JVM for the common case: a valid line never leaves Spark.

``core.backups.contract`` stays the single source of truth. ``judge`` expresses, as built-in
Spark functions, every check ``contract.validate`` makes of a *valid* line, and produces its
typed values exactly as the reference does (same integer and timestamp semantics, down to
Python's float rounding of fractional seconds).

A line is parsed once, by ``from_json`` with the contract's fields as its schema and
Jackson's strict JSON (no single quotes, comments, NaN, leading zeros, control characters):
integers are ``bigint`` (a float, boolean, string or 19+ digit number fails the record)
and strings are ``string``. A record that fails to parse or convert is caught by the
corrupt-record column. Spark's JSON reader is lenient in five ways, and ``judge`` closes each:

- a non-string JSON value read as a string becomes its JSON text (``123``, ``true``,
  ``{...}``, ``"Infinity"``): a string field whose value could be such a text is not
  decided here (enums, timestamps and URLs cannot be);
- text after the first value is ignored: a line is decided here only if it is one object
  without nested braces or brackets followed by blanks, or if it parses as exactly one
  JSON value (``json_array_length``) and nests fewer than 400 levels (Python's recursion
  limit, not Jackson's, decides deeper lines);
- a lone surrogate escape becomes ``?``: a line with any surrogate escape goes to Python;
- bytes that are not UTF-8 become U+FFFD: such a line goes to Python;
- an absent ``schema_version`` (version 1) and a JSON ``null`` both read as null: the
  version is taken as absent only in a line that cannot spell the key (neither
  ``"schema_version"`` nor any ``\\u`` escape in it).

A line the JVM does not find valid (or cannot decide exactly) gets the verdict
``UNDECIDED`` and the reader hands it to ``contract.parse_line`` itself, which words the
quarantine reason. Those are the malformed lines (a fraction of a percent of a backup) and a
few valid but unusual ones: the lenient cases above; a timestamp not of the form
``YYYY-MM-DDTHH:MM:SS[.f{1,6}][Z]`` (the reference accepts a few more: ``+00:00``, a
comma, 7+ fraction digits); a
``page_url`` whose host has brackets or non-ASCII characters (``urlsplit``'s IPv6 and NFKC
checks), that holds tab/CR/LF or control characters before the host, or a user name (the
reference requires a host after it); a v1 line whose
ignored ``event_time_ms`` is not an integer.

``backfill_assets_tests/core/backups/test_spark_contract.py`` runs both on a generated corpus
of edge cases and asserts that the JVM never accepts a line the reference rejects, and that
the typed values of the lines it accepts are the reference's.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from backfill_assets.core.backups import contract

UNDECIDED = "undecided"  # the reason of a line left to the Python reference

_JSON_WS = "[ \\t\\r\\n]*"
# YYYY-MM-DDTHH:MM:SS[.f{1,6}][Z] (ASCII digits), a form the reference accepts; any other
# form (a zero offset, a comma, a date without a time, ...) is left to contract.parse_iso_ms.
_ISO = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?Z?\z"
# An absolute http(s) URL whose host part is ASCII without brackets: urlsplit accepts it
# without any of its checks applying (netloc chars: ASCII except \t \n \r # / ? [ ]), and
# its hostname is not empty: no userinfo (no "@": such a URL is left to the reference) and
# a first character that is not the port's ":".
_URL_OK = (
    r"^[Hh][Tt][Tt][Pp][Ss]?://[\x00-\x08\x0b\x0c\x0e-\x22\x24-\x2e\x30-\x39\x3b-\x3e"
    r"\x41-\x5a\x5c\x5e-\x7f][\x00-\x08\x0b\x0c\x0e-\x22\x24-\x2e\x30-\x3e\x41-\x5a"
    r"\x5c\x5e-\x7f]*([/?#][^\t\r\n]*)?\z"
)


# The contract's fields as from_json reads them: integers as bigint, strings as string; the
# corrupt-record column flags a line that does not parse or convert.
_FIELDS = {
    "payload_id": "string",
    "client_id": "bigint",
    "user_id": "string",
    "event_time": "string",
    "event_time_ms": "bigint",
    "received_at": "string",
    "event_type": "string",
    "page_url": "string",
    "device": "string",
    "referrer": "string",
}
_SCHEMA = ", ".join(
    [*(f"{n} {t}" for n, t in _FIELDS.items()), "schema_version bigint", "_corrupt_record string"]
)
_JSON_OPTIONS = {  # Jackson as strict as Python's json (a few are Spark's defaults already)
    "mode": "PERMISSIVE",
    "columnNameOfCorruptRecord": "_corrupt_record",
    "allowSingleQuotes": "false",
    "allowNonNumericNumbers": "false",
    "allowComments": "false",
    "allowUnquotedFieldNames": "false",
    "allowNumericLeadingZeros": "false",
    "allowBackslashEscapingAnyCharacter": "false",
    "allowUnquotedControlChars": "false",
}
# One object with no brace or bracket inside, then blanks: nothing else can follow it.
_FLAT_OBJECT = "^" + _JSON_WS + r"\{[^{}\[\]]*\}" + _JSON_WS + r"\z"
_MAX_NESTING = 400  # deeper lines go to Python (whose recursion limit decides them)
_SURROGATE_ESCAPE = r"\\u[dD][89a-fA-F]"  # from_json would turn a lone one into '?'
_UNICODE_ESCAPE = "\\u"
# What from_json makes of a non-string value read as a string: a number, true, false, an
# object or array, or a quoted "Infinity" (1e400). A string like that is left to Python.
_NOT_STRING_TEXT = r'(?s)^([-+0-9.eE]+|true|false|[\[{"].*)\z'
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


def _time_ms(name: str) -> Column:
    """``contract.parse_iso_ms`` of a ``_ISO``-form string: epoch ms, or null (not a valid
    calendar time, or not of that form). Spark reads the time (naive means UTC, as in the
    reference) exactly to the microsecond; the ms are then rounded in the same IEEE steps
    as Python's ``int(total_us / 10**6 * 1000 + 0.5)`` (for times after 1970, all that
    the contract's range admits)."""
    text = _c(f"s_{name}")
    utc = F.when(text.endswith("Z"), text).otherwise(F.concat(text, F.lit("Z")))
    seconds = F.unix_micros(F.try_to_timestamp(utc)).cast("double") / F.lit(1_000_000.0)
    return F.when(text.rlike(_ISO), (seconds * F.lit(1000.0) + F.lit(0.5)).cast("long"))


def judge(frame: DataFrame, line: str, client_id: str, *, utf8: str | None = None) -> DataFrame:
    """``frame`` with the verdict of its column ``line`` (a string, possibly not valid
    UTF-8) read from the folder of column ``client_id``: ``VERDICT_COLUMNS`` added.
    ``utf8``: a boolean column true where ``line`` is known to be UTF-8 (its file is), so
    that only the other lines are checked.

    Filter the result above a cache (as the reader does), not directly: Spark pushes a
    filter on these columns below the parse as one more ``from_json`` of its own per line.

    ``reason`` is null for a valid line (a payload) and ``UNDECIDED`` for any other line
    (left to the Python reference); the typed columns hold the payload's values
    (``client_id_value`` is the line's own ``client_id``).
    """
    text = F.col(line)
    # 1. parse once; is the line one object and nothing else?
    one_value = (F.json_array_length(F.concat(F.lit("["), text, F.lit("]"))) == 1) & (
        F.json_array_length(F.concat(F.lit("["), text, F.lit(",0]"))) == 2
    )
    nesting = F.length(text) - F.length(F.translate(text, "[{", ""))  # an upper bound
    single = (  # the common case, one regex: no other value can follow the object
        text.rlike(_FLAT_OBJECT)
        | (text.rlike("^" + _JSON_WS + r"\{") & (nesting < _MAX_NESTING) & one_value)
    )
    escaped = text.contains(_UNICODE_ESCAPE)
    valid_utf8 = F.is_valid_utf8(text) if utf8 is None else F.col(utf8) | F.is_valid_utf8(text)
    staged = frame.select(
        "*",
        F.from_json(text, _SCHEMA, _JSON_OPTIONS).alias("_j_r"),
        (
            valid_utf8
            & F.when(escaped, ~text.rlike(_SURROGATE_ESCAPE)).otherwise(F.lit(True))
            & F.coalesce(single, F.lit(False))
        ).alias("_j_plain"),
    )
    # 2. the fields; the version: from_json reads an absent one and a JSON null both as
    # null, so an absent version (1) is only decided here for a line that cannot spell the
    # key (neither the name nor a \u escape); an integer must be one (bigint).
    given = F.col("_j_r.schema_version")
    absent = given.isNull() & ~text.contains('"schema_version"') & ~escaped
    staged = staged.select(
        "*",
        *(F.col(f"_j_r.{n}").alias(f"_j_s_{n}") for n in _FIELDS),
        F.when(absent, F.lit(1)).otherwise(given).alias("_j_version"),
    )
    # 3. timestamps
    staged = staged.select("*", *(_time_ms(n).alias(f"_j_{n}_ms") for n in _TIMES))
    # 4. valid: every check of contract.validate passes (any failure: left to Python)
    version = _c("version")
    v1, v2 = version == 1, version == 2

    def in_range(ms: Column) -> Column:
        return ms.between(contract._MIN_MS, contract._MAX_MS - 1)

    def a_string(value: Column) -> Column:  # not possibly the JSON text of another type
        return ~value.rlike(_NOT_STRING_TEXT)

    payload_id, user_id, referrer = _c("s_payload_id"), _c("s_user_id"), _c("s_referrer")
    event_time_ms_v2 = _c("s_event_time_ms")
    checks = [
        _c("plain"),
        F.col("_j_r._corrupt_record").isNull(),
        version.isin(*contract.SCHEMA_VERSIONS),
        payload_id != "",
        a_string(payload_id),
        user_id != "",
        a_string(user_id),
        v2 | in_range(_c("event_time_ms")),  # an ISO form: a JSON string
        v1 | in_range(event_time_ms_v2),
        in_range(_c("received_at_ms")),
        _c("s_event_type").isin(*contract.EVENT_TYPES),
        _c("s_device").isin(*contract.DEVICES),
        F.coalesce(_c("s_page_url").rlike(_URL_OK), F.lit(False)),
        v1 | referrer.isNull() | a_string(referrer),
        _c("s_client_id") == F.col(client_id),
    ]
    valid = checks[0]
    for check in checks[1:]:
        valid = valid & check
    reason = F.when(~F.coalesce(valid, F.lit(False)), F.lit(UNDECIDED))
    return staged.select(
        *(c for c in staged.columns if not c.startswith("_j_")),
        reason.alias("reason"),
        payload_id.alias("payload_id"),
        _c("s_client_id").alias("client_id_value"),
        user_id.alias("user_id"),
        F.when(v1, _c("event_time_ms")).otherwise(event_time_ms_v2).alias("event_time_ms"),
        _c("received_at_ms").alias("received_at_ms"),
        _c("s_event_type").alias("event_type"),
        _c("s_page_url").alias("page_url"),
        _c("s_device").alias("device"),
        F.when(v2, referrer).alias("referrer"),
        version.cast("int").alias("schema_version"),
    )
