"""The payload contract, line by line (no Spark): every bad line has a named reason."""

import json

import pytest

from backfill_assets.core.backups import contract
from backfill_assets.core.backups.contract import Rejected, parse_line

HOUR = contract.parse_iso_ms("2026-11-20T03:00:00Z")
V1 = {
    "schema_version": 1,
    "payload_id": "p1",
    "client_id": 7,
    "user_id": "u1",
    "event_time": "2026-11-20T03:15:42.123Z",
    "received_at": "2026-11-20T03:15:43.000Z",
    "event_type": "pageview",
    "page_url": "https://Example.com/a/?utm_source=x#f",
    "device": "mobile",
}
V2 = {
    **{k: v for k, v in V1.items() if k != "event_time"},
    "schema_version": 2,
    "event_time_ms": 1795144542123,
    "referrer": None,
}


def line(record: object) -> bytes:
    return json.dumps(record).encode()


def reason(record_or_bytes: object, client_id: int = 7) -> str:
    raw = record_or_bytes if isinstance(record_or_bytes, bytes) else line(record_or_bytes)
    with pytest.raises(Rejected) as info:
        parse_line(raw, client_id, HOUR)
    return str(info.value)


def test_v1_and_v2_parse_to_the_same_typed_payload():
    one, two = parse_line(line(V1), 7, HOUR), parse_line(line(V2), 7, HOUR)
    assert one.event_time_ms == two.event_time_ms == 1795144542123
    assert (one.schema_version, two.schema_version) == (1, 2)
    assert one.referrer is None and two.referrer is None


def test_missing_schema_version_means_v1_and_unknown_keys_are_ignored():
    record = {k: v for k, v in V1.items() if k != "schema_version"} | {"extra": {"x": 1}}
    payload = parse_line(line(record), 7, HOUR)
    assert payload.schema_version == 1
    assert not hasattr(payload, "extra")


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b"not json at all", contract.NOT_JSON),
        (b"", contract.NOT_JSON),
        (b"\xff\xfe{}", contract.NOT_UTF8),
        (b"[1, 2]", contract.NOT_OBJECT),
        (b"42", contract.NOT_OBJECT),
    ],
)
def test_undecodable_lines(raw: bytes, code: str):
    assert reason(raw).startswith(code + ":")


@pytest.mark.parametrize(
    ("change", "code", "detail"),
    [
        ({"user_id": None}, contract.MISSING_FIELD, "user_id"),
        ({"client_id": "7"}, contract.WRONG_TYPE, "client_id must be integer"),
        ({"client_id": True}, contract.WRONG_TYPE, "client_id must be integer"),
        ({"client_id": 7.5}, contract.WRONG_TYPE, "client_id"),
        ({"event_type": "hover"}, contract.UNKNOWN_EVENT_TYPE, "hover"),
        ({"device": "watch"}, contract.UNKNOWN_DEVICE, "watch"),
        ({"schema_version": 3}, contract.UNSUPPORTED_VERSION, "3"),
        ({"schema_version": "1"}, contract.WRONG_TYPE, "schema_version"),
        ({"event_time": "yesterday"}, contract.BAD_VALUE, "event_time"),
        ({"page_url": "/relative"}, contract.BAD_VALUE, "page_url"),
        ({"page_url": "http://@:80/"}, contract.BAD_VALUE, "with a host"),
        ({"client_id": 8}, contract.CLIENT_MISMATCH, "client_id 8"),
    ],
)
def test_contract_violations_are_named(change: dict, code: str, detail: str):
    record = {k: v for k, v in {**V1, **change}.items() if v is not None or k == "referrer"}
    text = reason(record)
    assert text.startswith(code + ":") and detail in text


def test_v2_requires_integer_event_time_ms():
    assert reason({**V2, "event_time_ms": "1795144542123"}).startswith(contract.WRONG_TYPE)
    no_time = {k: v for k, v in V2.items() if k != "event_time_ms"}
    assert reason(no_time) == f"{contract.MISSING_FIELD}: event_time_ms"


def test_iso_round_trip():
    assert contract.format_iso_ms(contract.parse_iso_ms("2026-11-20T03:15:42.123Z")) == (
        "2026-11-20T03:15:42.123Z"
    )


def test_received_at_outside_the_folder_hour_is_valid_and_counted():
    """Contract update: the folder decides the hour; such a line is only counted."""
    late = {**V1, "received_at": "2026-11-20T05:00:00Z"}
    early = {**V2, "received_at": "2026-11-20T02:59:59.999Z"}
    inside = parse_line(line(V1), 7, HOUR)
    for record in (late, early):
        payload = parse_line(line(record), 7, HOUR)
        assert contract.received_outside_hour(payload, HOUR)
        assert payload.received_at_ms == contract.parse_iso_ms(record["received_at"])
    assert not contract.received_outside_hour(inside, HOUR)


@pytest.mark.parametrize(
    ("raw", "code", "detail"),
    [
        # issue 9 item 2: each of these crashed a Python worker instead of a quarantine row
        (line({**V1, "page_url": "http://[::1/x"}), contract.BAD_VALUE, "Invalid IPv6 URL"),
        (line({**V1, "page_url": "http://ex\uff0fample.com/"}), contract.BAD_VALUE, "NFKC"),
        (line({**V1, "user_id": "\ud800"}), contract.BAD_VALUE, "user_id holds a lone surrogate"),
        (line({**V2, "referrer": "x\udfff"}), contract.BAD_VALUE, "referrer"),
        (line({**V1, "page_url": "https://a.example/\ud83d"}), contract.BAD_VALUE, "page_url"),
        (b"[" * 200_000, contract.NOT_JSON, "nested too deeply"),
        (b'{"a":' * 100_000, contract.NOT_JSON, ""),
        (b'{"x":' + b"9" * 5000 + b"}", contract.NOT_JSON, "digits"),
        (
            line({**V1, "received_at": "9999-12-31T23:59:59-23:59"}),
            contract.BAD_VALUE,
            "offset -23:59 is not UTC",
        ),
        (
            line({**V1, "received_at": "9999-12-31T23:59:59.999999Z"}),
            contract.BAD_VALUE,
            "out of range",
        ),
        (line({**V1, "event_time": "\x00"}), contract.BAD_VALUE, "event_time"),
        (b'{"payload_id":"p1","payload_id":7}', contract.WRONG_TYPE, "payload_id"),  # last wins
        (b"\xed\xa0\x80", contract.NOT_UTF8, "invalid continuation"),  # encoded surrogate
        (line({**V2, "event_time_ms": 1795144542123.0}), contract.WRONG_TYPE, "got float"),
        (line({**V2, "event_time_ms": 10**30}), contract.BAD_VALUE, str(10**30)),
        (line({**V1, "client_id": float("nan")}), contract.WRONG_TYPE, "got float"),
    ],
)
def test_every_line_gets_a_verdict_never_an_exception(raw: bytes, code: str, detail: str):
    text = reason(raw)
    assert text.startswith(code + ":") and detail in text


@pytest.mark.parametrize(
    "text",
    [
        "2026-11-20",  # a date without a time: fromisoformat read it as midnight
        "20261120",
        "2026-W47-5",
        "2026-W47-5T03:15:42Z",
        "2026-324T03:15:42Z",
        "20261120T031542Z",
        "20261120T031542.123Z",
        "2026-11-20T03",
        "2026-11-20T03:15",
        "2026-11-20T03:15Z",
        "2026-11-20 03:15:42Z",
        "2026-11-20T03:15:42.Z",
        "2026-11-20T03:15:42+0000",
        "2026-11-20T03:15:42+00",
        "2026-11-20T03:15:42+00:00:00",
        "2026-11-20t03:15:42z",
        "2026-11-20T03:15:42Z\n",
        " 2026-11-20T03:15:42Z",
        "\u0662\u0660\u0662\u0666-11-20T03:15:42Z",  # Arabic-Indic digits
    ],
)
def test_a_timestamp_needs_a_date_and_a_time_to_the_second(text: str):
    for base, name in ((V1, "event_time"), (V1, "received_at"), (V2, "received_at")):
        detail = reason({**base, name: text})
        assert detail.startswith(f"{contract.BAD_VALUE}: {name} is not an ISO-8601 UTC time")


@pytest.mark.parametrize("text", ["2026-11-20T04:15:42+01:00", "2026-11-19T22:15:42.5-05:00"])
def test_a_timestamp_with_another_zone_is_not_utc(text: str):
    """The contract's timestamps are UTC strings: ``Z``, a zero offset, or no designator."""
    offset = text[-6:]
    assert f"offset {offset} is not UTC" in reason({**V1, "event_time": text})


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("2026-11-20T03:15:42.123Z", 1795144542123),
        ("2026-11-20T03:15:42.123", 1795144542123),  # naive means UTC
        ("2026-11-20T03:15:42.123+00:00", 1795144542123),
        ("2026-11-20T03:15:42.123-00:00", 1795144542123),
        ("2026-11-20T03:15:42,123Z", 1795144542123),
        ("2026-11-20T03:15:42Z", 1795144542000),
    ],
)
def test_utc_timestamps_of_the_contract_are_accepted(text: str, ms: int):
    assert parse_line(line({**V1, "event_time": text}), 7, HOUR).event_time_ms == ms
