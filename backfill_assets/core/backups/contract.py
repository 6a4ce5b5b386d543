"""The payload contract of ``shared/backup-format.md`` as code: constants and one line's verdict.

``parse_line`` is the single source of truth of a line's verdict: pure Python, readable, and
**total**: whatever bytes a line holds, it returns a typed payload or raises ``Rejected``
with a quarantine reason ``"<code>: <detail>"``; no other exception escapes it. The Spark
reader expresses the same rules as JVM column expressions (``core.backups.spark_contract``) and
sends the rare lines it cannot decide exactly to this function; a parity test holds the two
to identical verdicts.

The folder, not the line, decides a payload's received hour: a line whose ``received_at``
lies outside its folder's hour is valid (clock drift, redelivery) and only counted
(``received_outside_hour``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit

EVENT_TYPES = ("pageview", "click", "scroll", "form_submit", "custom")
DEVICES = ("desktop", "mobile", "tablet")
SCHEMA_VERSIONS = (1, 2)
PART_FILE_SUFFIX = ".jsonl.zst"
MANIFEST_NAME = "_MANIFEST.json"

# Reason codes of the quarantine (the part before the colon of ``reason``).
NOT_UTF8 = "not_utf8"
NOT_JSON = "not_json"
NOT_OBJECT = "not_object"
MISSING_FIELD = "missing_field"
WRONG_TYPE = "wrong_type"
BAD_VALUE = "bad_value"
UNKNOWN_EVENT_TYPE = "unknown_event_type"
UNKNOWN_DEVICE = "unknown_device"
UNSUPPORTED_VERSION = "unsupported_schema_version"
CLIENT_MISMATCH = "client_mismatch"
LINE_TOO_LONG = "line_too_long"  # past ReadLimits.line_bytes: never held whole
# File-level reasons (line_number is null): the file's lines could not be read at all.
FILE_DIGEST_MISMATCH = "file_digest_mismatch"
FILE_UNREADABLE = "file_unreadable"
FILE_REFUSED = "file_refused"  # past a ReadLimits bound, or no longer a regular file

_MIN_MS = 946_684_800_000  # 2000-01-01
_MAX_MS = 4_102_444_800_000  # 2100-01-01
HOUR_MS = 3_600_000
# A timestamp of the contract ("ISO-8601 UTC string, e.g. 2026-11-20T03:15:42.123Z"): a
# calendar date and a time to the second in ISO-8601's extended format, ASCII digits, an
# optional fraction, and UTC: ``Z``, a zero offset, or no designator (read as UTC).
# ``datetime.fromisoformat`` alone also takes a date without a time (``2026-11-20``,
# ``20261120``, ``2026-W47-5``: midnight), hours or minutes only, and other zones.
_ISO_UTC = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}([.,][0-9]+)?"
    r"(?P<zone>Z|[+-][0-9]{2}:[0-9]{2})?"
)
_UTC_ZONES = (None, "Z", "+00:00", "-00:00")


@dataclass(frozen=True, slots=True)
class Payload:
    payload_id: str
    client_id: int
    user_id: str
    event_time_ms: int
    received_at_ms: int
    event_type: str
    page_url: str
    device: str
    referrer: str | None
    schema_version: int


class Rejected(ValueError):
    """A line that breaks the contract; ``str()`` is the quarantine reason."""

    def __init__(self, code: str, detail: str):
        super().__init__(f"{code}: {detail}")
        self.code = code


def is_int(value: object) -> bool:
    """A JSON integer: a number without a fraction, not a boolean."""
    return isinstance(value, int) and not isinstance(value, bool)


def parse_iso_ms(value: str) -> int:
    """ISO-8601 UTC string -> epoch milliseconds: ``YYYY-MM-DDTHH:MM:SS[.f]`` then ``Z``,
    ``+00:00`` or nothing (naive means UTC); ``ValueError`` for any other form."""
    match = _ISO_UTC.fullmatch(value)
    if match is None:
        raise ValueError("not of the form YYYY-MM-DDTHH:MM:SS[.fff]Z")
    if match["zone"] not in _UTC_ZONES:
        raise ValueError(f"offset {match['zone']} is not UTC")
    moment = datetime.fromisoformat(value)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000 + (0.5 if moment.timestamp() >= 0 else -0.5))


def format_iso_ms(epoch_ms: int) -> str:
    """Epoch milliseconds -> ``YYYY-MM-DDTHH:MM:SS.mmmZ``."""
    moment = datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{epoch_ms % 1000:03d}Z"


def received_outside_hour(payload: Payload, hour_start_ms: int) -> bool:
    """Whether a valid line's ``received_at`` lies outside its folder's hour (it still belongs
    to the folder's hour; the count per hour measures clock skew and redelivery)."""
    return not hour_start_ms <= payload.received_at_ms < hour_start_ms + HOUR_MS


def _field(record: dict, name: str, kind: type | str) -> object:
    if name not in record or record[name] is None:
        raise Rejected(MISSING_FIELD, name)
    value = record[name]
    ok = is_int(value) if kind == "int" else isinstance(value, kind)  # type: ignore[arg-type]
    if not ok:
        expected = "integer" if kind == "int" else "string"
        raise Rejected(WRONG_TYPE, f"{name} must be {expected}, got {type(value).__name__}")
    return value


def _timestamp(record: dict, name: str) -> int:
    text = _field(record, name, str)
    try:
        value = parse_iso_ms(text)  # type: ignore[arg-type]
    except (ValueError, OverflowError) as exc:
        raise Rejected(
            BAD_VALUE, f"{name} is not an ISO-8601 UTC time ({exc}): {text!r}"[:200]
        ) from None
    if not _MIN_MS <= value < _MAX_MS:
        raise Rejected(BAD_VALUE, f"{name} out of range: {text!r}")
    return value


def _is_unicode(text: str) -> bool:
    """False for a string holding a lone surrogate (a JSON escape like ``"\\ud800"``): it
    has no UTF-8 form, so it cannot be stored."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def validate(record: object, client_id: int, hour_start_ms: int) -> Payload:
    """Check one decoded JSON value against the contract of the folder it was read from."""
    if not isinstance(record, dict):
        raise Rejected(NOT_OBJECT, f"JSON {type(record).__name__}, not an object")
    version = record.get("schema_version", 1)
    if not is_int(version):
        raise Rejected(WRONG_TYPE, f"schema_version must be integer, got {type(version).__name__}")
    if version not in SCHEMA_VERSIONS:
        raise Rejected(UNSUPPORTED_VERSION, str(version))
    payload_id = _field(record, "payload_id", str)
    record_client = _field(record, "client_id", "int")
    user_id = _field(record, "user_id", str)
    if version == 1:
        event_time_ms = _timestamp(record, "event_time")
    else:
        event_time_ms = _field(record, "event_time_ms", "int")
        if not _MIN_MS <= event_time_ms < _MAX_MS:  # type: ignore[operator]
            raise Rejected(BAD_VALUE, f"event_time_ms out of range: {event_time_ms}")
    received_at_ms = _timestamp(record, "received_at")
    event_type = _field(record, "event_type", str)
    page_url = _field(record, "page_url", str)
    device = _field(record, "device", str)
    referrer = record.get("referrer") if version == 2 else None
    if referrer is not None and not isinstance(referrer, str):
        raise Rejected(
            WRONG_TYPE, f"referrer must be string or null, got {type(referrer).__name__}"
        )
    if not payload_id or not user_id:
        raise Rejected(BAD_VALUE, "payload_id and user_id must not be empty")
    if event_type not in EVENT_TYPES:
        raise Rejected(UNKNOWN_EVENT_TYPE, repr(event_type)[:100])
    if device not in DEVICES:
        raise Rejected(UNKNOWN_DEVICE, repr(device)[:100])
    for name, text in (("payload_id", payload_id), ("user_id", user_id), ("referrer", referrer)):
        if text is not None and not _is_unicode(text):  # type: ignore[arg-type]
            raise Rejected(BAD_VALUE, f"{name} holds a lone surrogate: {text!r}"[:200])
    try:
        parts = urlsplit(page_url)  # type: ignore[arg-type]
    except ValueError as exc:  # "Invalid IPv6 URL", a host invalid under NFKC, ...
        raise Rejected(
            BAD_VALUE, f"page_url is not a valid URL ({exc}): {page_url!r}"[:200]
        ) from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:  # "http://@:80/"
        raise Rejected(
            BAD_VALUE, f"page_url is not an absolute http(s) URL with a host: {page_url!r}"[:200]
        )
    if not _is_unicode(page_url):  # type: ignore[arg-type]
        raise Rejected(BAD_VALUE, f"page_url holds a lone surrogate: {page_url!r}"[:200])
    if record_client != client_id:
        raise Rejected(
            CLIENT_MISMATCH, f"client_id {record_client} in folder client_id={client_id}"
        )
    return Payload(
        payload_id=payload_id,  # type: ignore[arg-type]
        client_id=record_client,  # type: ignore[arg-type]
        user_id=user_id,  # type: ignore[arg-type]
        event_time_ms=event_time_ms,  # type: ignore[arg-type]
        received_at_ms=received_at_ms,
        event_type=event_type,  # type: ignore[arg-type]
        page_url=page_url,  # type: ignore[arg-type]
        device=device,  # type: ignore[arg-type]
        referrer=referrer,
        schema_version=version,
    )


def parse_line(line: bytes, client_id: int, hour_start_ms: int) -> Payload:
    """Decode one line of a part file and validate it; raises ``Rejected`` with the reason."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Rejected(NOT_UTF8, str(exc)[:200]) from None
    try:
        record = json.loads(text)
    except ValueError as exc:
        raise Rejected(NOT_JSON, str(exc)[:200]) from None
    except RecursionError:
        raise Rejected(NOT_JSON, "nested too deeply") from None
    try:
        return validate(record, client_id, hour_start_ms)
    except RecursionError:  # a deep unknown value compared or repr'd
        raise Rejected(NOT_JSON, "nested too deeply") from None
