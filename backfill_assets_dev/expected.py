"""What the published tables should hold, computed without Spark from a generated tree.

An independent oracle for the demo (and tests): raw rows per hour from the generator's
ground truth (``_truth/folders.json``), and the transformed and session counts from the
tree's closed folders read in plain Python with the contract's parser, sessionized with
``generator.truth.sessionize`` over each session hour's received window.
"""

from __future__ import annotations

import io
import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

import zstandard

from backfill_assets.core.backups.contract import MANIFEST_NAME, Payload, Rejected, parse_line
from backfill_assets.core.hours import hour_range, parse_hour
from backfill_assets.core.windows import (
    DEFAULT_LOOKAHEAD_HOURS,
    DEFAULT_LOOKBACK_HOURS,
    received_window,
)
from backfill_assets_dev.generator.truth import read_truth_folders, sessionize

Delivery = tuple[str, Payload]  # (received hour, valid payload)


def raw_rows(root: str | Path) -> dict[str, tuple[int, int]]:
    """Hour -> (payload rows, quarantined lines) of every folder the generator wrote
    (held-back ones included: compare after they landed)."""
    rows: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for folder in read_truth_folders(root):
        rows[folder["hour"]][0] += folder["lines"] - folder["malformed"]
        rows[folder["hour"]][1] += folder["malformed"]
    return {hour: (v[0], v[1]) for hour, v in rows.items()}


def read_deliveries(root: str | Path) -> list[Delivery]:
    """Every valid line of the closed folders under ``<root>/raw``, with its received hour."""
    deliveries: list[Delivery] = []
    for manifest_path in sorted(
        Path(root, "raw").glob("date=*/hour=*/client_id=*/" + MANIFEST_NAME)
    ):
        manifest = json.loads(manifest_path.read_text())
        hour = f"{manifest['hour'][:13]}"
        start_ms = int(parse_hour(hour).timestamp() * 1000)
        for entry in manifest["files"]:
            with open(manifest_path.parent / entry["name"], "rb") as raw:
                reader = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
                for line in io.BufferedReader(reader):
                    try:
                        payload = parse_line(line.rstrip(b"\n"), manifest["client_id"], start_ms)
                    except Rejected:
                        continue
                    deliveries.append((hour, payload))
    return deliveries


def transformed_rows(deliveries: Iterable[Delivery]) -> dict[str, int]:
    """Hour -> distinct payloads received in it (the transformed layer's rows)."""
    ids: dict[str, set[str]] = defaultdict(set)
    for hour, payload in deliveries:
        ids[hour].add(payload.payload_id)
    return {hour: len(v) for hour, v in ids.items()}


def sessions(
    deliveries: Sequence[Delivery],
    hours: Sequence[str],
    lookback: int = DEFAULT_LOOKBACK_HOURS,
    lookahead: int = DEFAULT_LOOKAHEAD_HOURS,
) -> dict[str, list[dict]]:
    """Session hour -> the sessions starting in it, built from the payloads received in its
    window ``[H - lookback, H + lookahead]`` (the aggregated layer's rule)."""
    by_hour: dict[str, list[Payload]] = defaultdict(list)
    for hour, payload in deliveries:
        by_hour[hour].append(payload)
    result = {}
    for hour in hours:
        first, last = received_window(hour, lookback, lookahead)
        visible = [p for h in hour_range(first, last) for p in by_hour.get(h, ())]
        result[hour] = [s for s in sessionize(visible) if s["hour"] == hour]
    return result


def session_key(session: dict) -> tuple:
    """What makes two sessions the same session with the same content."""
    return (
        session["client_id"],
        session["user_id"],
        session["session_start_ms"],
        session["session_end_ms"],
        session["payload_count"],
    )
