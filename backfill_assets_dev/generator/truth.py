"""Ground truth of a generated backup tree: the session rule and readers of ``<root>/_truth``.

``sessionize`` is the contract's session rule as a pure function, so that tests of every
layer can compute the sessions they expect from any set of payloads (for example only the
payloads a given read window can see) and compare.

Files under ``<root>/_truth/`` (see ``generate.generate_backups``):

- ``payloads.jsonl.zst``: every distinct valid payload generated, in or out of the tree.
- ``sessions.jsonl.zst``: ``sessionize`` of all of them.
- ``folders.json``: every hour/client folder written, with its line counts.
- ``summary.json``: the generation summary and arguments.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

import zstandard

SESSION_GAP_MS = 1_800_000
TRUTH_DIR = "_truth"
PAYLOADS_FILE = "payloads.jsonl.zst"
SESSIONS_FILE = "sessions.jsonl.zst"
FOLDERS_FILE = "folders.json"
SUMMARY_FILE = "summary.json"

SESSION_FIELDS = (
    "client_id",
    "user_id",
    "session_start_ms",
    "session_end_ms",
    "payload_count",
    "pageview_count",
    "device",
    "first_payload_id",
    "last_payload_id",
    "hour",
)


@lru_cache(maxsize=65_536)
def _hour_of_epoch_hour(epoch_hour: int) -> str:
    return datetime.fromtimestamp(epoch_hour * 3600, tz=UTC).strftime("%Y-%m-%dT%H")


def hour_key_of_ms(epoch_ms: int) -> str:
    """The UTC hour key ``YYYY-MM-DDTHH`` containing ``epoch_ms``."""
    return _hour_of_epoch_hour(epoch_ms // 3_600_000)


def _fields(payload: Mapping[str, Any] | object) -> tuple:
    if isinstance(payload, Mapping):
        get = payload.__getitem__
    else:

        def get(name: str) -> Any:
            return getattr(payload, name)

    return (
        get("client_id"),
        get("user_id"),
        get("event_time_ms"),
        get("payload_id"),
        get("event_type"),
        get("device"),
    )


def sessionize(payloads: Iterable[Mapping[str, Any] | object]) -> list[dict[str, Any]]:
    """The sessions of a set of payloads, by the contract's rule.

    Each payload is a mapping (or an object with attributes, like ``contract.Payload``)
    with ``payload_id``, ``client_id``, ``user_id``, ``event_time_ms``, ``event_type`` and
    ``device``. Payloads are de-duplicated by ``payload_id`` (the first occurrence wins);
    per (client_id, user_id) they are ordered by (event_time_ms, payload_id), and a gap of
    more than 30 minutes (> ``SESSION_GAP_MS``) between consecutive payloads starts a new
    session. A session's ``device`` is its first payload's and its ``hour`` is the UTC hour
    of its start. Sessions come ordered by (client_id, user_id, session_start_ms).
    """
    seen: set[str] = set()
    rows = []
    for payload in payloads:
        row = _fields(payload)
        if row[3] in seen:
            continue
        seen.add(row[3])
        rows.append(row)
    return sessionize_rows(rows)


def sessionize_rows(rows: list[tuple]) -> list[dict[str, Any]]:
    """``sessionize`` over distinct rows ``(client_id, user_id, event_time_ms, payload_id,
    event_type, device)``; sorts ``rows`` in place. The generator's fast path."""
    rows.sort()  # payload_ids are distinct, so the order is (client, user, time, payload_id)
    sessions: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for client_id, user_id, event_ms, payload_id, event_type, device in rows:
        if (
            current is None
            or current["client_id"] != client_id
            or current["user_id"] != user_id
            or event_ms - current["session_end_ms"] > SESSION_GAP_MS
        ):
            current = {
                "client_id": client_id,
                "user_id": user_id,
                "session_start_ms": event_ms,
                "session_end_ms": event_ms,
                "payload_count": 0,
                "pageview_count": 0,
                "device": device,
                "first_payload_id": payload_id,
                "last_payload_id": payload_id,
                "hour": hour_key_of_ms(event_ms),
            }
            sessions.append(current)
        current["session_end_ms"] = event_ms
        current["payload_count"] += 1
        current["pageview_count"] += event_type == "pageview"
        current["last_payload_id"] = payload_id
    return sessions


def iter_jsonl_zst(path: str | Path) -> Iterator[dict[str, Any]]:
    """The JSON objects of a zstd-compressed JSON-lines file (any number of frames)."""
    with open(path, "rb") as raw:
        reader = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
        for line in io.TextIOWrapper(reader, encoding="utf-8"):
            if line.strip():
                yield json.loads(line)


def truth_dir(root: str | Path) -> Path:
    """``<root>/_truth``."""
    return Path(root) / TRUTH_DIR


def _require(path: Path) -> Path:
    if not path.exists():
        raise FileNotFoundError(
            f"no ground truth at {path}: generate the tree with truth enabled "
            "(backfill-assets generate without --no-truth)"
        )
    return path


def read_truth_payloads(root: str | Path) -> list[dict[str, Any]]:
    """Every distinct valid payload generated (``_truth/payloads.jsonl.zst``).

    Fields: payload_id, client_id, user_id, event_time_ms, received_at_ms (first delivery),
    event_type, page_url, device, in_tree, plus schema_version, referrer (null when null or
    absent), received_hour (hour key of the first delivery) and copies_in_tree (deliveries
    written under ``raw/`` or ``_held_back/``). Ordered by client_id, event_time_ms.
    """
    return list(iter_jsonl_zst(_require(truth_dir(root) / PAYLOADS_FILE)))


def read_truth_sessions(root: str | Path) -> list[dict[str, Any]]:
    """The true sessions (``_truth/sessions.jsonl.zst``), fields ``SESSION_FIELDS``."""
    return list(iter_jsonl_zst(_require(truth_dir(root) / SESSIONS_FILE)))


def read_truth_folders(root: str | Path) -> list[dict[str, Any]]:
    """Every folder written: hour, client_id, path, held_back, lines, malformed, duplicates,
    received_outside_hour (valid lines whose ``received_at`` is outside the folder's hour:
    they belong to the folder's hour, and the raw layer counts them per hour)."""
    return json.loads(_require(truth_dir(root) / FOLDERS_FILE).read_text())["folders"]


def read_truth_summary(root: str | Path) -> dict[str, Any]:
    """``_truth/summary.json``: ``{"summary": {...}, "arguments": {...}}``."""
    return json.loads(_require(truth_dir(root) / SUMMARY_FILE).read_text())
