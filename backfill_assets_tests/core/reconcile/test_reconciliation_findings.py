"""Reconciliation's pure logic: findings per hour and client, and the ranges to request."""

from __future__ import annotations

import pytest

from backfill_assets.core.backups.inventory import Folder, HourInventory, PartFile
from backfill_assets.core.hours import backup_hour_path, hour_range
from backfill_assets.core.names import Layer
from backfill_assets.core.reconcile import findings as F
from backfill_assets.core.reconcile import requests as R
from backfill_assets.core.windows import session_hours_touching

RAW = Layer(
    "raw",
    "shadow.raw_payloads",
    (("shadow.raw_payloads", "raw.payloads"), ("shadow.raw_quarantine", "raw.quarantine")),
    (),
    "raw-1",
)
TRANSFORMED = Layer(
    "transformed",
    "shadow.transformed_payloads",
    (("shadow.transformed_payloads", "transformed.payloads"),),
    (),
    "transformed-1",
)
SESSIONS = Layer(
    "sessions", "shadow.sessions", (("shadow.sessions", "agg.sessions"),), (), "sessions-1"
)
LAYERS = [RAW, TRANSFORMED, SESSIONS]
NAMES = [layer.name for layer in LAYERS]
DAY = hour_range("2026-11-20T00", "2026-11-20T23")
WINDOW = F.Window(tuple(DAY), DAY[0], DAY[-1])


def plan_ranges(layers, first, last):
    """The project's rule: received-hour layers keep the range, sessions widen it."""
    upstream = any(layer != "sessions" for layer in layers)
    return [
        (layer, *session_hours_touching(first, last))
        if layer == "sessions" and upstream
        else (layer, first, last)
        for layer in layers
    ]


def folder(
    hour: str, client: int, files: dict[str, int], *, closed: bool = True, sha: str = "a"
) -> Folder:
    rel = f"raw/{backup_hour_path(hour)}/client_id={client}"
    parts = tuple(PartFile(f"{rel}/{n}", n, r, f"{sha}{n}", 10) for n, r in files.items())
    problems = () if closed else (f"{rel}: no _MANIFEST.json (folder still being written)",)
    return Folder(
        hour,
        client,
        rel,
        closed,
        sum(files.values()) if closed else None,
        parts if closed else (),
        "m" if closed else None,
        problems,
    )


def inventory(*folders: Folder, hours: list[str] = DAY) -> dict[str, HourInventory]:
    result = {h: HourInventory(h, exists=False) for h in hours}
    for f in folders:
        result[f.hour].exists = True
        result[f.hour].folders.append(f)
    for inv in result.values():
        if not inv.exists:
            inv.problems.append(f"no backup folder for hour {inv.hour}")
    return result


def published(
    layer: Layer,
    hour: str,
    rows: int,
    *,
    at: float = 100.0,
    code: str | None = None,
    read: dict | None = None,
) -> F.Published:
    tables = [t for _, t in layer.pairs]
    return F.Published(
        layer.name,
        hour,
        {tables[0]: rows, **{t: 0 for t in tables[1:]}},
        "v1",
        code or layer.code_version,
        at,
        "run1",
        read,
    )


def healthy(hours=DAY) -> tuple[dict[str, HourInventory], dict[str, dict[str, F.Published]]]:
    """Every hour: clients 1 and 2 with 10 records each, all read and published."""
    folders = [folder(h, c, {"part-00000.jsonl.zst": 10}) for h in hours for c in (1, 2)]
    read = {c: {"part-00000.jsonl.zst": "apart-00000.jsonl.zst"} for c in (1, 2)}
    pub = {
        "raw": {h: published(RAW, h, 20, read=read) for h in hours},
        "transformed": {h: published(TRANSFORMED, h, 20, at=200.0) for h in hours},
        "sessions": {h: published(SESSIONS, h, 5, at=300.0) for h in hours},
    }
    return inventory(*folders, hours=list(hours)), pub


def find(inv, pub, **kwargs) -> list[F.Finding]:
    return F.find(inv, pub, LAYERS, WINDOW, plan=plan_ranges, **kwargs)


def test_healthy_tree_has_no_findings() -> None:
    inv, pub = healthy()
    assert find(inv, pub) == []


def test_a_late_manifest_is_found_per_hour_and_per_client() -> None:
    inv, pub = healthy()
    hour = "2026-11-20T09"
    inv[hour].folders.append(folder(hour, 3, {"part-00000.jsonl.zst": 7}))
    found = find(inv, pub)
    assert [(f.hour, f.kind, f.client_id) for f in found] == [
        (hour, F.COUNT_MISMATCH, None),
        (hour, F.MANIFEST_APPEARED, 3),
    ]
    assert "published 20 line(s)" in found[0].detail and "now say 27 (+7)" in found[0].detail
    assert "client_id=3: manifest of 7 record(s)" in found[1].detail
    assert all(f.actionable for f in found)


def test_a_changed_file_with_the_same_count_is_found_by_digest() -> None:
    inv, pub = healthy()
    hour = "2026-11-20T04"
    inv[hour].folders[0] = folder(hour, 1, {"part-00000.jsonl.zst": 10}, sha="b")
    found = find(inv, pub)
    assert [(f.kind, f.client_id) for f in found] == [(F.MANIFEST_CHANGED, 1)]
    assert "different digest part-00000.jsonl.zst" in found[0].detail


def test_without_read_lineage_only_counts_are_compared() -> None:
    inv, pub = healthy()
    hour = "2026-11-20T09"
    pub["raw"][hour] = published(RAW, hour, 20, read=None)
    inv[hour].folders.append(folder(hour, 3, {"part-00000.jsonl.zst": 7}))
    assert [f.kind for f in find(inv, pub)] == [F.COUNT_MISMATCH]


def test_missing_and_inconsistent_hours_are_reported_for_a_person() -> None:
    inv, pub = healthy()
    del pub["raw"]["2026-11-20T05"]
    inv["2026-11-20T05"] = HourInventory(
        "2026-11-20T05", exists=False, problems=["no backup folder (backup outage?)"]
    )
    inv["2026-11-20T06"].folders.append(folder("2026-11-20T06", 3, {}, closed=False))
    found = {(f.hour, f.kind): f for f in find(inv, pub)}
    assert set(found) == {("2026-11-20T05", F.MISSING_HOUR), ("2026-11-20T06", F.BACKUP_PROBLEM)}
    assert not any(f.actionable for f in found.values())
    assert "--allow-missing-hours" in found[("2026-11-20T05", F.MISSING_HOUR)].detail
    assert (
        R.plan(list(found.values()), NAMES, WINDOW, max_hours=48, plan_ranges=plan_ranges).requests
        == []
    )


def test_unpublished_hours_wait_for_the_live_pipeline_within_the_grace_period() -> None:
    inv, pub = healthy()
    for hour in ("2026-11-20T03", "2026-11-20T23"):
        del pub["raw"][hour]
    found = {f.hour: f for f in find(inv, pub, grace_hours=2)}
    assert found["2026-11-20T03"].kind == F.UNPUBLISHED and found["2026-11-20T03"].actionable
    assert not found["2026-11-20T23"].actionable
    assert "the live pipeline's turn" in found["2026-11-20T23"].detail


def test_an_older_code_version_is_stale_in_every_layer() -> None:
    inv, pub = healthy()
    pub["transformed"]["2026-11-20T02"] = published(
        TRANSFORMED, "2026-11-20T02", 20, at=200.0, code="transformed-0"
    )
    found = find(inv, pub)
    assert [(f.layer, f.hour, f.kind) for f in found] == [("transformed", "2026-11-20T02", F.STALE)]
    assert "transformed-0" in found[0].detail and "transformed-1" in found[0].detail


def test_a_downstream_partition_older_than_its_input_is_outdated() -> None:
    inv, pub = healthy()
    pub["transformed"]["2026-11-20T10"] = published(TRANSFORMED, "2026-11-20T10", 20, at=400.0)
    found = find(inv, pub)
    # sessions 07..13 read transformed 10, republished after them
    assert [(f.layer, f.hour) for f in found] == [
        ("sessions", h) for h in hour_range("2026-11-20T07", "2026-11-20T13")
    ]
    assert {f.kind for f in found} == {F.OUTDATED}


def test_requests_cover_the_damaged_hours_and_the_session_hours_around_them() -> None:
    inv, pub = healthy()
    for hour, client in (("2026-11-20T09", 3), ("2026-11-20T10", 3), ("2026-11-20T16", 4)):
        inv[hour].folders.append(folder(hour, client, {"part-00000.jsonl.zst": 5}))
    found = find(inv, pub)
    planned = R.plan(found, NAMES, WINDOW, max_hours=48, plan_ranges=plan_ranges)
    assert [(r.layer, r.first, r.last) for r in planned.requests] == [
        ("raw", "2026-11-20T09", "2026-11-20T10"),
        ("raw", "2026-11-20T16", "2026-11-20T16"),
        ("transformed", "2026-11-20T09", "2026-11-20T10"),
        ("transformed", "2026-11-20T16", "2026-11-20T16"),
        ("sessions", "2026-11-20T06", "2026-11-20T19"),  # 06..13 and 13..19 overlap
    ]
    tags = planned.requests[0].tags("req-1")
    assert tags["dagster/asset_partition_range_start"] == "2026-11-20T09"
    assert tags["backfill_assets/mode"] == "backfill"
    assert tags["backfill_assets/requested_by"] == "reconciliation-sensor"
    assert tags["backfill_assets/reason"].startswith(
        "reconciliation: count_mismatch in raw 2026-11-20T09..2026-11-20T10"
    )
    assert (
        "manifest_appeared in raw 2026-11-20T09..2026-11-20T10 (client 3)"
        in tags["backfill_assets/reason"]
    )


def test_session_ranges_are_clipped_to_the_tree_and_read_outside_hours_as_empty() -> None:
    inv, pub = healthy()
    inv["2026-11-20T01"].folders.append(folder("2026-11-20T01", 3, {"p": 1}))
    planned = R.plan(find(inv, pub), NAMES, WINDOW, max_hours=48, plan_ranges=plan_ranges)
    sessions = planned.requests[-1]
    assert (sessions.layer, sessions.first, sessions.last) == ("sessions", DAY[0], "2026-11-20T04")
    # the window of session hour 00 reaches back to the previous day, which has no data
    assert sessions.allow_missing == ("2026-11-19T21", "2026-11-19T22", "2026-11-19T23")
    assert (
        sessions.tags("r")["backfill_assets/allow_missing_hours"]
        == "2026-11-19T21,2026-11-19T22,2026-11-19T23"
    )
    assert planned.requests[0].allow_missing == ()


def test_hours_in_flight_or_requested_for_the_same_damage_are_not_requested_again() -> None:
    inv, pub = healthy()
    inv["2026-11-20T09"].folders.append(folder("2026-11-20T09", 3, {"p": 5}))
    found = find(inv, pub)
    first = R.plan(found, NAMES, WINDOW, max_hours=48, plan_ranges=plan_ranges)
    assert first.requested_hours == 7
    in_flight = {"raw": {"2026-11-20T09": "release a in flight"}}
    second = R.plan(
        found,
        NAMES,
        WINDOW,
        max_hours=48,
        in_flight=in_flight,
        requested={k: v for k, v in first.targets.items() if k != "raw"},
        plan_ranges=plan_ranges,
    )
    assert second.requests == []
    held = "held by release a in flight (it rebuilds this hour or its sessions)"
    assert second.skipped["raw"]["2026-11-20T09"] == held
    # the sessions that hour touches are not requested either: a release rooted at the
    # damage would rebuild the held hour
    assert second.status("sessions", "2026-11-20T08") == f"not requested: {held}"
    # the damage changes (another manifest lands): requested again
    inv["2026-11-20T09"].folders.append(folder("2026-11-20T09", 4, {"p": 2}))
    third = R.plan(
        find(inv, pub),
        NAMES,
        WINDOW,
        max_hours=48,
        requested=first.targets,
        plan_ranges=plan_ranges,
    )
    assert [r.layer for r in third.requests] == ["raw", "transformed", "sessions"]


def test_the_cap_defers_what_does_not_fit_and_leaves_big_groups_to_a_person() -> None:
    inv, pub = healthy()
    for hour in ("2026-11-20T02", "2026-11-20T20"):
        inv[hour].folders.append(folder(hour, 3, {"p": 1}))
    found = find(inv, pub)
    planned = R.plan(found, NAMES, WINDOW, max_hours=7, plan_ranges=plan_ranges)
    assert {(r.layer, r.first) for r in planned.requests} == {
        ("raw", "2026-11-20T02"),
        ("transformed", "2026-11-20T02"),
        ("sessions", DAY[0]),
    }
    assert {why for _, why in planned.deferred} == {
        "cap of 7 hours per evaluation reached; next evaluation"
    }
    too_small = R.plan(found, NAMES, WINDOW, max_hours=3, plan_ranges=plan_ranges)
    assert too_small.requests == []
    assert all("a person should launch it" in why for _, why in too_small.deferred)


def test_reconcile_config_reads_the_environment_and_names_bad_values() -> None:
    config = F.ReconcileConfig.from_env({"BACKFILL_MAX_HOURS_PER_TICK": "12"})
    assert (config.max_hours_per_tick, config.interval_seconds) == (12, 300)
    with pytest.raises(ValueError, match="BACKFILL_MAX_HOURS_PER_TICK='many'"):
        F.ReconcileConfig.from_env({"BACKFILL_MAX_HOURS_PER_TICK": "many"})
    with pytest.raises(ValueError, match="BACKFILL_RECONCILE_WINDOW_HOURS=0 must be at least 1"):
        F.ReconcileConfig.from_env({"BACKFILL_RECONCILE_WINDOW_HOURS": "0"})


def test_contiguous_ranges_and_descriptions() -> None:
    hours = ["2026-11-20T23", "2026-11-21T00", "2026-11-20T05"]
    assert F.contiguous_ranges(hours) == [
        ("2026-11-20T05", "2026-11-20T05"),
        ("2026-11-20T23", "2026-11-21T00"),
    ]
    assert F.describe_hours(hours) == "2026-11-20T05, 2026-11-20T23..2026-11-21T00"


def _reconciliation(inv, pub) -> R.Reconciliation:
    found = find(inv, pub)
    planned = R.plan(found, NAMES, WINDOW, max_hours=48, plan_ranges=plan_ranges)
    hours = {name: frozenset(pub.get(name, {})) for name in NAMES}
    return R.Reconciliation(WINDOW, found, planned, "dagster", 48, tuple(NAMES), hours)


def test_the_health_line_never_counts_an_unpublished_hour_as_healthy() -> None:
    """Nothing published: every layer 0% healthy, its hours named as not published (no
    finding for a downstream layer must not read as health)."""
    inv, _ = healthy()
    result = _reconciliation(inv, {})
    for name in NAMES:
        numbers = result.health()[name]
        assert numbers["completeness"] == 0.0 and numbers["healthy_hours"] == 0
        assert numbers["unpublished"] == DAY
    lines = [line for line in result.lines() if "health " in line]
    assert len(lines) == 3
    assert all("24 of 24 hour(s) not published: 2026-11-20T00..2026-11-20T23" in x for x in lines)


def test_held_back_hours_are_named_not_published_in_every_layer() -> None:
    """A release whose hours 00-02 were held back and 03 published: 00-02 are named in
    every layer, only 03 (and the other hours published before) counts as healthy."""
    inv, pub = healthy()
    for name in NAMES:
        for hour in DAY[:3]:
            del pub[name][hour]
    health = _reconciliation(inv, pub).health()
    for name in NAMES:
        assert health[name]["unpublished"] == DAY[:3]
        assert health[name]["healthy_hours"] == len(DAY) - 3
        assert health[name]["completeness"] < 1.0
    line = next(x for x in _reconciliation(inv, pub).lines() if "health sessions" in x)
    assert "3 of 24 hour(s) not published: 2026-11-20T00..2026-11-20T02" in line, line
