"""Malformed lines: what a broken tag, proxy or backup tool can put in a part file.

Every line made here breaks the contract (``contract.parse_line`` rejects it) and none is a
ground-truth payload (its ``payload_id``, when it has one, is fresh). Lines are ``str``;
bytes that are not UTF-8 are carried as surrogate escapes and written with
``errors="surrogateescape"``.
"""

from __future__ import annotations

import json

import numpy as np

from backfill_assets.core.backups.contract import format_iso_ms

HOUR_MS = 3_600_000
ENCODING_ERRORS = "surrogateescape"

_GARBAGE = (
    "<html><body><h1>502 Bad Gateway</h1></body></html>",
    "ERROR: upstream connection reset by peer",
    "\x00\x00\x00\x00",
    "{payload_id: 'not-json'}",
    "",
    "pageview,7,https://www.example.com/",
)
_NOT_OBJECT = ("[1, 2, 3]", "42", '"pageview"', "null", "true", "[]")
_REQUIRED_V1 = (
    "payload_id",
    "client_id",
    "user_id",
    "event_time",
    "received_at",
    "event_type",
    "page_url",
    "device",
)
_REQUIRED_V2 = tuple("event_time_ms" if f == "event_time" else f for f in _REQUIRED_V1)
_UNKNOWN_EVENT_TYPES = ("purchase", "PageView", "page_view", "", "click ")

KINDS = (
    "truncated",
    "garbage",
    "not_utf8",
    "not_object",
    "missing_field",
    "null_field",
    "wrong_type",
    "unknown_event_type",
)
KIND_WEIGHTS = (0.2, 0.1, 0.05, 0.1, 0.2, 0.05, 0.2, 0.1)


def _template(rng: np.random.Generator, client_id: int, hour_start_ms: int) -> dict:
    """A payload that would be valid in the folder (client_id, hour); a fresh payload_id."""
    received = hour_start_ms + int(rng.integers(0, HOUR_MS))
    event = received - int(rng.integers(100, 10_000))
    h = rng.bytes(16).hex()
    record: dict = {"schema_version": int(rng.integers(1, 3)), "payload_id": f"junk-{h}"}
    record["client_id"] = client_id
    record["user_id"] = rng.bytes(8).hex()
    if record["schema_version"] == 1:
        record["event_time"] = format_iso_ms(event)
    else:
        record["event_time_ms"] = event
    record["received_at"] = format_iso_ms(received)
    record["event_type"] = "pageview"
    record["page_url"] = "https://www.example.com/products?utm_source=x"
    record["device"] = "desktop"
    if record["schema_version"] == 2:
        record["referrer"] = None
    return record


def _pick(rng: np.random.Generator, options: tuple) -> object:
    return options[int(rng.integers(len(options)))]


def malformed_line(rng: np.random.Generator, client_id: int, hour_start_ms: int) -> str:
    """One malformed line (no newline) for the folder (client_id, hour)."""
    kind = KINDS[int(rng.choice(len(KINDS), p=KIND_WEIGHTS))]
    record = _template(rng, client_id, hour_start_ms)
    required = _REQUIRED_V1 if record["schema_version"] == 1 else _REQUIRED_V2
    if kind == "truncated":
        text = json.dumps(record, separators=(",", ":"))
        return text[: int(rng.integers(1, len(text)))]  # a proper prefix is never valid JSON
    if kind == "garbage":
        return str(_pick(rng, _GARBAGE))
    if kind == "not_utf8":
        # Latin-1 bytes where UTF-8 is expected (0xE9 0x74 is not valid UTF-8).
        return '{"page_url":"https://www.example.com/caf\udce9t\udcff"}'
    if kind == "not_object":
        if rng.random() < 0.3:
            return "[" + json.dumps(record, separators=(",", ":")) + "]"
        return str(_pick(rng, _NOT_OBJECT))
    if kind in ("missing_field", "null_field"):
        field = str(_pick(rng, required))
        if kind == "missing_field":
            del record[field]
        else:
            record[field] = None
        return json.dumps(record, separators=(",", ":"))
    if kind == "wrong_type":
        variant = int(rng.integers(6))
        if variant == 0:
            record["client_id"] = str(client_id)
        elif variant == 1:
            record["client_id"] = True
        elif variant == 2:
            record["client_id"] = client_id + 0.5
        elif variant == 3:
            record["user_id"] = int(rng.integers(1, 10**9))
        elif variant == 4:
            record["received_at"] = hour_start_ms + 1_000
        else:
            record["schema_version"] = "2"
        return json.dumps(record, separators=(",", ":"))
    record["event_type"] = _pick(rng, _UNKNOWN_EVENT_TYPES)
    return json.dumps(record, separators=(",", ":"))
