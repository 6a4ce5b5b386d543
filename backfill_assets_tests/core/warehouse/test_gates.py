"""Change gates: a large change of a published hour waits for approval; a small one does not."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import pytest
import zstandard
from pyspark.sql import functions as F

from backfill_assets.core import tags
from backfill_assets.core.hours import backup_hour_path
from backfill_assets.core.reporting.verdicts import held_back_verdict
from backfill_assets.core.warehouse import audit, gates, publisher
from backfill_assets.core.warehouse.tables import partition_locations
from backfill_assets.defs.publish import PublishConfig, approval_of
from backfill_assets_tests.helpers.backups import write_backup_folder, zst

SMALL, LARGE = "2026-11-20T00", "2026-11-20T01"


def thin(root: Path, hour: str, client_id: int, keep: float) -> None:
    """Rewrite one (hour, client) folder keeping the first ``keep`` share of each file's
    lines, with a manifest that matches (a smaller but well-formed backup)."""
    folder = root / "raw" / backup_hour_path(hour) / f"client_id={client_id}"
    files = {}
    for part in sorted(folder.glob("*.jsonl.zst")):
        data = zstandard.ZstdDecompressor().decompressobj().decompress(part.read_bytes())
        lines = data.splitlines()
        kept = lines[: int(len(lines) * keep)]
        files[part.name] = zst(kept)
    shutil.rmtree(folder)
    write_backup_folder(root, hour, client_id, files)


def test_limits_name_the_change_and_let_small_ones_through():
    limits = gates.Limits()
    assert limits.breach("rows", 8210, 4012) == "rows 8,210 -> 4,012, -51%, over the 20% limit"
    assert limits.breach("rows", 1000, 850) is None  # -15%
    assert limits.breach("users", 10, 250) is None  # growth is not gated by default
    growth = gates.Limits.from_env({gates.ENV_MAX_INCREASE: "1"})
    assert growth.breach("users", 10, 25) == "users 10 -> 25, +150%, over the 100% limit"
    assert gates.Limits.from_env({gates.ENV_MAX_INCREASE: "off"}).max_increase is None
    assert limits.breach("rows", 0, 500) is None  # nothing published to compare with
    assert gates.Limits.from_env({gates.ENV_MAX_DECREASE: "0.05"}).breach("rows", 100, 90)
    with pytest.raises(ValueError, match=gates.ENV_MAX_DECREASE):
        gates.Limits.from_env({gates.ENV_MAX_DECREASE: "lots"})
    with pytest.raises(ValueError, match=gates.ENV_MAX_DECREASE):
        gates.Limits.from_env({gates.ENV_MAX_DECREASE: "1.5"})


def test_findings_name_clients_removed_or_unknown_first(spark):
    """A client whose rows would all go, or that nobody published near the hour, is named
    first, whatever the hour's total does; a known client's appearance is a repair."""
    assert gates.measure(spark, "shadow.not_gated", {(SMALL, "v1"): 1}) == {}
    old = {"rows": 100.0, "client 1 rows": 60.0, "client 2 rows": 40.0}
    new = {"rows": 130.0, "client 1 rows": 100.0, "client 3 rows": 30.0}
    assert gates.appearing(old, new) == ["3"]
    found = gates.findings(gates.Limits(), "raw", SMALL, old, new)
    assert found == [
        f"raw {SMALL}: client 2 rows 40 -> 0, every row of the client removed",
        f"raw {SMALL}: client 3 rows 0 -> 30, a client with no published rows within 24 hours",
    ]
    assert gates.findings(gates.Limits(), "raw", SMALL, old, new, known={"3"}) == found[:1]
    smaller = {"rows": 85.0, "client 1 rows": 30.0, "client 2 rows": 55.0}
    assert gates.findings(gates.Limits(), "raw", SMALL, old, smaller) == [
        f"raw {SMALL}: client 1 rows 60 -> 30, -50%, over the 20% limit"
    ]
    measured = {"rows": 8210.0}
    assert gates.findings(gates.Limits(), "raw", SMALL, measured, {"rows": 4012.0}) == [
        f"raw {SMALL}: rows 8,210 -> 4,012, -51%, over the 20% limit"
    ]


def test_an_approval_needs_a_reason_and_valid_hours():
    with pytest.raises(dg.Failure, match="approval_reason"):
        approval_of(PublishConfig(release_id="r1", approve=True), {})
    with pytest.raises(dg.Failure, match="approve_hours"):
        approval_of(
            PublishConfig(release_id="r1", approve=True, approval_reason="x", approve_hours=["x"]),
            {},
        )
    given = approval_of(
        PublishConfig(release_id="r1", approve=True, approval_reason=" fix "),
        {"backfill_assets/requested_by": "bob"},
    )
    assert (given.approved_by, given.reason, given.hours) == ("bob", "fix", None)
    at_launch = approval_of(PublishConfig(), {"backfill_assets/approve_changes": "true"})
    assert at_launch is not None and at_launch.reason.startswith("approved at launch")
    assert approval_of(PublishConfig(), {}) is None


def test_a_gate_holds_a_large_change_until_approved_and_lets_a_small_one_through(
    spark, make_backups, run_release, instance: dg.DagsterInstance, tmp_path: Path, base_settings
):
    backups = make_backups(hours=2)
    live = run_release(backups, SMALL, LARGE, layers=("raw",), downstream=False)
    assert live.success, live.failures
    before = partition_locations(spark, "raw.payloads")
    rows_before = {
        r["hour"]: r["count"] for r in spark.table("raw.payloads").groupBy("hour").count().collect()
    }

    changed = tmp_path / "changed"
    shutil.copytree(backups, changed)
    thin(changed, SMALL, 1, keep=0.9)  # a few percent of the hour
    thin(changed, LARGE, 1, keep=0.3)  # a third of the hour gone
    release = run_release(changed, SMALL, LARGE, layers=("raw",), downstream=False)

    # The small change is published; the large one is held, naming the change and the way out.
    assert not release.success
    failure = next(f for f in release.failures if "held back" in f)
    rows_after = spark.table("shadow.raw_payloads").where(
        (F.col("hour") == LARGE) & F.col("run_id").isin([r.run_id for r in release.runs])
    )
    expected = f"change gate: raw {LARGE}: rows {rows_before[LARGE]:,} -> {rows_after.count():,}, "
    assert expected in failure and "over the 20% limit" in failure, failure
    assert f"backfill-assets approve --backfill {release.release_id}" in failure
    assert f"raw {SMALL}" not in failure
    now = partition_locations(spark, "raw.payloads")
    assert now[LARGE] == before[LARGE]  # unchanged while it waits
    assert now[SMALL] != before[SMALL]
    # an expected outcome, not a crash: the run succeeded, tagged, the verdict in metadata
    publish_run = instance.get_run_by_id(release.run_of("release/publish").run_id)
    assert publish_run.status == dg.DagsterRunStatus.SUCCESS
    assert publish_run.tags[tags.HELD_BACK] == "1"
    assert not instance.all_logs(publish_run.run_id, of_type=dg.DagsterEventType.STEP_FAILURE)
    published = instance.get_latest_materialization_event(dg.AssetKey(["release", "publish"]))
    assert published.run_id == publish_run.run_id
    metadata = published.asset_materialization.metadata
    assert metadata["awaiting_approval"].value == [f"raw {LARGE}"]
    assert metadata["verdict"].value in failure

    # An approval on record for another change of the hour (given when something else was
    # published there, say) does not cover this one: still held, saying so.
    version = rows_after.select("version").first()["version"]
    other_change = f"raw {LARGE}: rows 1,000 -> 10, -99%, over the 20% limit"
    audit.append(
        base_settings.warehouse_dir,
        audit.APPROVALS,
        [
            {
                "release_id": release.release_id,
                "layer": "raw",
                "hour": LARGE,
                "version": version,
                "gate": other_change,
                "approved_by": "mallory",
                "reason": "an earlier change",
                "approved_at": audit.now(),
            }
        ],
    )
    again = run_release(changed, SMALL, LARGE, publish_only=release.release_id)
    assert not again.success
    published = instance.get_latest_materialization_event(dg.AssetKey(["release", "publish"]))
    assert published.run_id == again.run_of("release/publish").run_id
    reasons = published.asset_materialization.metadata["held_back"].value[f"raw {LARGE}"]
    assert reasons[0].startswith(expected), reasons
    assert reasons[-1] == (
        f"change gate: the approval on record (by mallory) was for another change: {other_change}"
    )
    assert partition_locations(spark, "raw.payloads")[LARGE] == before[LARGE]

    # Approved: published by the same release, the approval on record with who and why.
    approved = run_release(
        changed,
        SMALL,
        LARGE,
        publish_only=release.release_id,
        publish_config={
            "approve": True,
            "approval_reason": "client 1 re-sent a corrected, smaller export",
            "approved_by": "alice",
        },
    )
    assert approved.success, approved.failures
    after = partition_locations(spark, "raw.payloads")
    assert after[SMALL] == now[SMALL] and after[LARGE] != before[LARGE]
    approvals = audit.read(spark, audit.APPROVALS).where(F.col("approved_by") != "mallory")
    records = [r.asDict() for r in approvals.collect()]
    assert len(records) == 1
    record = records[0]
    assert (record["release_id"], record["layer"], record["hour"]) == (
        release.release_id,
        "raw",
        LARGE,
    )
    assert record["approved_by"] == "alice"
    assert record["reason"] == "client 1 re-sent a corrected, smaller export"
    assert record["gate"].startswith(f"raw {LARGE}: rows ")
    published = instance.get_latest_materialization_event(dg.AssetKey(["release", "publish"]))
    assert published.run_id == approved.runs[0].run_id
    assert published.asset_materialization.metadata["approvals"].value[0]["approved_by"] == "alice"


def test_a_wrong_backup_root_never_publishes_and_a_late_folder_still_repairs(
    spark, make_backups, run_release, instance: dg.DagsterInstance, tmp_path: Path
):
    """After a release from a 2-client tree: an empty folder, an empty ``raw/`` and another
    source's tree of the same hours with one client fewer change nothing published, each
    saying why in a line naming the hour (and, for the vanished client, the client); a
    known client's late folder landing in a published hour still publishes."""
    backups = make_backups(hours=2)
    late = tmp_path / "late"
    shutil.copytree(backups, late)
    shutil.rmtree(late / "raw" / backup_hour_path(LARGE) / "client_id=2")
    first = run_release(late, SMALL, LARGE, layers=("raw",), downstream=False)
    assert first.success, first.failures
    repaired = run_release(backups, SMALL, LARGE, layers=("raw",), downstream=False)
    assert repaired.success, repaired.failures  # client 2 is known at SMALL: a repair
    before = partition_locations(spark, "raw.payloads")

    empty = tmp_path / "empty"
    empty.mkdir()
    empty_raw = tmp_path / "empty_raw"
    (empty_raw / "raw").mkdir(parents=True)
    other = make_backups(hours=2, clients=1, seed=5)
    for root in (empty, empty_raw, other):
        release = run_release(root, SMALL, LARGE, layers=("raw",), downstream=False)
        assert not release.success, root
        assert partition_locations(spark, "raw.payloads") == before, root
        if root == other:
            for hour in (SMALL, LARGE):
                assert any(
                    f"change gate: raw {hour}: client 2 rows " in f
                    and "every row of the client removed" in f
                    for f in release.failures
                ), release.failures

    # another source's tree of the same shape (the same clients and hours, another seed):
    # none of the published payload ids survive; held until approved, naming the share
    same_shape = make_backups(hours=2, seed=5)
    release = run_release(same_shape, SMALL, LARGE, layers=("raw",), downstream=False)
    assert not release.success
    assert partition_locations(spark, "raw.payloads") == before
    published = instance.get_latest_materialization_event(dg.AssetKey(["release", "publish"]))
    held = published.asset_materialization.metadata["held_back"].value
    for hour in (SMALL, LARGE):
        assert any(
            f"change gate: raw {hour}: payload ids " in reason
            and "published not in the candidate (100%), over the 10% limit" in reason
            for reason in held[f"raw {hour}"]
        ), held

    def approve(root: Path, held_release: str, reason: str):
        config = {"approve": True, "approval_reason": reason}
        return run_release(root, SMALL, LARGE, publish_only=held_release, publish_config=config)

    approved = approve(same_shape, release.release_id, "the source moved: new ids")
    assert approved.success, approved.failures
    assert partition_locations(spark, "raw.payloads") != before
    repaired = run_release(backups, SMALL, LARGE, layers=("raw",), downstream=False)
    assert not repaired.success  # going back is a change of the same kind: approval again
    back = approve(backups, repaired.release_id, "back to the right source")
    assert back.success, back.failures
    before = partition_locations(spark, "raw.payloads")

    # a client nobody has published near the hour appears: held, naming it
    stranger = make_backups(hours=2, clients=3)
    release = run_release(stranger, SMALL, LARGE, layers=("raw",), downstream=False)
    assert not release.success
    assert any(
        f"change gate: raw {SMALL}: client 3 rows 0 -> " in f and "no published rows" in f
        for f in release.failures
    ), release.failures
    assert partition_locations(spark, "raw.payloads")[SMALL] == before[SMALL]


def test_the_verdict_names_the_hours_held_for_their_own_cause_first():
    """A wrong tree holds raw hours naming the client; the many session hours that only
    wait on them must not push those out of the one line the operator reads."""
    waiting = f"reads transformed {SMALL} {publisher.HELD_UPSTREAM}"
    held = {f"aggregated 2026-11-19T{h}": [waiting] for h in range(10, 22)}
    held["aggregated 2026-11-20T00"] = [waiting, "change gate: aggregated x: sessions 8 -> 2"]
    held[f"transformed {SMALL}"] = [waiting, f"change gate: transformed {SMALL}: rows 9 -> 1"]
    gone = f"change gate: raw {SMALL}: client 2 rows 15 -> 0, every row of the client removed"
    held[f"raw {SMALL}"] = [gone]
    verdict = held_back_verdict("r1", held, [])
    named = verdict.split(": ", 2)[2].split("; ")
    assert named[:3] == [
        f"raw {SMALL} ({gone})",
        f"transformed {SMALL} (change gate: transformed {SMALL}: rows 9 -> 1)",
        "aggregated 2026-11-20T00 (change gate: aggregated x: sessions 8 -> 2)",
    ], verdict
    assert named[3] == f"aggregated 2026-11-19T10 ({waiting})"
    assert verdict.endswith(f"; ... and {len(held) - 10} more")
