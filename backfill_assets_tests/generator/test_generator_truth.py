"""The session rule (``sessionize``) and the ground truth files of a generated tree."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from backfill_assets.core.backups.contract import MANIFEST_NAME, Payload, parse_iso_ms
from backfill_assets_dev.generator import (
    SESSION_GAP_MS,
    generate_backups,
    read_truth_folders,
    read_truth_payloads,
    read_truth_sessions,
    read_truth_summary,
    sessionize,
)

T0 = parse_iso_ms("2026-11-20T03:50:00Z")
MIN = 60_000


def payload(pid: str, at_ms: int, *, user: str = "u1", client: int = 7, **extra: object) -> dict:
    return {
        "payload_id": pid,
        "client_id": client,
        "user_id": user,
        "event_time_ms": at_ms,
        "event_type": extra.pop("event_type", "pageview"),
        "device": extra.pop("device", "desktop"),
        **extra,
    }


def test_a_gap_of_exactly_30_minutes_stays_in_the_session() -> None:
    sessions = sessionize([payload("a", T0), payload("b", T0 + SESSION_GAP_MS)])
    assert len(sessions) == 1
    assert sessions[0]["payload_count"] == 2
    assert sessions[0]["session_end_ms"] == T0 + 30 * MIN


def test_30_minutes_and_1_ms_starts_a_new_session() -> None:
    sessions = sessionize([payload("a", T0), payload("b", T0 + SESSION_GAP_MS + 1)])
    assert [(s["first_payload_id"], s["payload_count"]) for s in sessions] == [("a", 1), ("b", 1)]
    assert [s["hour"] for s in sessions] == ["2026-11-20T03", "2026-11-20T04"]


def test_the_gap_is_between_consecutive_payloads_not_from_the_start() -> None:
    chain = [payload(f"p{i}", T0 + i * 20 * MIN) for i in range(6)]  # 100 minutes, 20 apart
    (session,) = sessionize(chain)
    assert session["session_end_ms"] - session["session_start_ms"] == 100 * MIN
    assert session["hour"] == "2026-11-20T03"  # the hour of the start, not of the end


def test_ties_are_ordered_by_payload_id() -> None:
    sessions = sessionize(
        [
            payload("b", T0, device="mobile", event_type="click"),
            payload("a", T0, device="tablet"),
            payload("c", T0 + MIN),
        ]
    )
    (session,) = sessions
    assert session["first_payload_id"] == "a"
    assert session["device"] == "tablet"  # the device of the first payload
    assert session["last_payload_id"] == "c"
    assert session["pageview_count"] == 2


def test_duplicates_are_removed_by_payload_id() -> None:
    original = payload("a", T0)
    sessions = sessionize([original, dict(original), payload("b", T0 + MIN), dict(original)])
    assert len(sessions) == 1
    assert sessions[0]["payload_count"] == 2
    assert sessions[0]["pageview_count"] == 2


def test_users_and_clients_are_separate_and_sessions_are_ordered() -> None:
    sessions = sessionize(
        [
            payload("x", T0, user="u2"),
            payload("y", T0 + MIN, user="u1"),
            payload("z", T0 + 2 * MIN, user="u1", client=3),
            payload("w", T0 - 3 * SESSION_GAP_MS, user="u1"),
        ]
    )
    keys = [(s["client_id"], s["user_id"], s["first_payload_id"]) for s in sessions]
    assert keys == [(3, "u1", "z"), (7, "u1", "w"), (7, "u1", "y"), (7, "u2", "x")]
    assert set(sessions[0]) == {
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
    }


def test_accepts_contract_payload_objects() -> None:
    items = [
        Payload("a", 7, "u1", T0, T0 + 500, "pageview", "https://x.example/", "mobile", None, 1),
        Payload(
            "b", 7, "u1", T0 + MIN, T0 + MIN, "scroll", "https://x.example/", "mobile", None, 2
        ),
    ]
    (session,) = sessionize(items)
    assert session["payload_count"] == 2 and session["pageview_count"] == 1
    assert sessionize([]) == []


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("truth")
    generate_backups(
        root,
        start="2026-11-20T00",
        hours=4,
        clients=2,
        users_per_client=25,
        seed=5,
        duplicate_rate=0.05,
        late_hours_rate=0.1,
        hold_back=["2026-11-20T02/1"],
        workers=1,
    )
    return root


def test_truth_sessions_are_sessionize_of_truth_payloads(root: Path) -> None:
    payloads = read_truth_payloads(root)
    sessions = read_truth_sessions(root)
    assert sessions == sessionize(payloads)
    assert sum(s["payload_count"] for s in sessions) == len(payloads)
    assert len({p["payload_id"] for p in payloads}) == len(payloads)
    assert any(s["payload_count"] > 3 for s in sessions)
    # Some sessions span an hour boundary.
    assert any(
        s["session_end_ms"] // 3_600_000 > s["session_start_ms"] // 3_600_000 for s in sessions
    )


def test_generated_sessions_are_separated_by_more_than_30_minutes(root: Path) -> None:
    start_ms = parse_iso_ms("2026-11-20T00:00:00Z")
    by_user: dict[tuple, list[int]] = {}
    # Only in-window traffic: the backlog before the start is single late payloads.
    for p in (p for p in read_truth_payloads(root) if p["event_time_ms"] >= start_ms):
        by_user.setdefault((p["client_id"], p["user_id"]), []).append(p["event_time_ms"])
    gaps = [b - a for times in map(sorted, by_user.values()) for a, b in itertools.pairwise(times)]
    assert max(gaps) > SESSION_GAP_MS  # users come back
    inside = [g for g in gaps if g <= SESSION_GAP_MS]
    assert inside and max(inside) <= 20 * MIN + 1  # within a session: seconds to 20 minutes


def test_truth_payload_fields(root: Path) -> None:
    payloads = read_truth_payloads(root)
    assert set(payloads[0]) == {
        "payload_id",
        "client_id",
        "user_id",
        "event_time_ms",
        "received_at_ms",
        "event_type",
        "page_url",
        "device",
        "in_tree",
        "schema_version",
        "referrer",
        "received_hour",
        "copies_in_tree",
    }
    assert {p["in_tree"] for p in payloads} == {True, False}
    end_ms = parse_iso_ms("2026-11-20T04:00:00Z")
    assert all(p["in_tree"] == (p["received_at_ms"] < end_ms) for p in payloads)
    assert all(p["copies_in_tree"] == 0 for p in payloads if not p["in_tree"])
    keys = [(p["client_id"], p["event_time_ms"]) for p in payloads]
    assert keys == sorted(keys)


def test_truth_folders_and_summary_match_the_tree(root: Path) -> None:
    folders = read_truth_folders(root)
    summary = read_truth_summary(root)
    assert len(folders) == summary["summary"]["folders"]
    for folder in folders:
        manifest = json.loads((root / folder["path"] / MANIFEST_NAME).read_text())
        assert manifest["records"] == folder["lines"]
        assert folder["lines"] == folder["payloads"] + folder["duplicates"] + folder["malformed"]
        assert folder["held_back"] == folder["path"].startswith("_held_back/")
    assert sum(f["held_back"] for f in folders) == 1
    assert summary["arguments"]["seed"] == 5
    assert summary["arguments"]["hold_back"] == ["2026-11-20T02/1"]
    assert "elapsed_seconds" not in summary["summary"]  # keeps the tree byte-identical


def test_readers_explain_a_missing_truth(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="--no-truth"):
        read_truth_sessions(tmp_path)
