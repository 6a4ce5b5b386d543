"""Erasure end to end: after it, no table, version or file under DATA_ROOT holds the user."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import dagster as dg
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from backfill_assets.cli import erase as erase_cli
from backfill_assets.cli.main import CommandError
from backfill_assets.core import tags
from backfill_assets.core.backups.store import LocalBackupStore
from backfill_assets.core.hours import backup_hour_path
from backfill_assets.core.names import LAYERS
from backfill_assets.core.reconcile.findings import COUNT_MISMATCH, ReconcileConfig
from backfill_assets.core.warehouse import audit, erasure
from backfill_assets.definitions import build_definitions
from backfill_assets.defs.jobs.erase import ERASE_JOB, ERASE_OP
from backfill_assets.release import state
from backfill_assets_tests.helpers.backups import write_backup_folder, zst
from backfill_assets_tests.helpers.releases import end_backfill, execute_release

# the instance fixture with a home: the erase command opens it
pytestmark = pytest.mark.dagster_home

FIRST, LAST = "2026-11-20T00", "2026-11-20T02"
CUT = "2026-11-20T01"


def add_part_file(root: Path, hour: str, client_id: int, lines: list[str]) -> None:
    """Add a part file to a closed (hour, client) folder, its manifest rewritten to match."""
    folder = root / "raw" / backup_hour_path(hour) / f"client_id={client_id}"
    files = {p.name: p.read_bytes() for p in sorted(folder.glob("*.jsonl.zst"))}
    files["part-99999.jsonl.zst"] = zst(lines)
    write_backup_folder(root, hour, client_id, files)


def traces(root: Path, needle: str) -> list[str]:
    """Every file under ``root`` that holds ``needle``: Parquet files by their decoded
    string values (compressed pages hide bytes), every other file by its bytes."""
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if path.suffix == ".parquet":
            table = pq.read_table(path)
            for name in table.column_names:
                column = table[name]
                if (
                    column.type in ("string", "large_string")
                    and pc.any(pc.match_substring(column, needle)).as_py()
                ):
                    found.append(f"{path} ({name})")
        elif needle.encode() in path.read_bytes():
            found.append(str(path))
    return found


def test_erase_arguments_are_checked_and_the_id_never_leaves_the_command():
    args = argparse.Namespace(client=3, user=" u-1 ", reason="DSR 7", requested_at="", ticket="")
    config = erase_cli.validate(args)
    assert config["user_digest"] == erasure.user_digest(3, "u-1")
    assert "u-1" not in repr(config)
    for bad in (
        {"client": -1},
        {"user": " "},
        {"reason": ""},
        {"requested_at": "yesterday"},
    ):
        with pytest.raises(CommandError):
            erase_cli.validate(argparse.Namespace(**{**vars(args), **bad}))


def test_an_erased_user_is_rebuilt_out_of_every_layer_and_purged_from_every_version(
    spark, make_backups, run_release, instance: dg.DagsterInstance, base_settings, settings_for
):
    tree = make_backups(hours=3)
    live = run_release(tree, FIRST, LAST)
    assert live.success, live.failures
    user = (
        spark.table("raw.payloads")
        .where(F.col("client_id") == 1)
        .groupBy("user_id")
        .count()
        .orderBy(F.col("count").desc(), "user_id")
        .first()["user_id"]
    )
    # a malformed line of the user (cut off mid-record): quarantined with its text
    add_part_file(tree, CUT, 1, [f'{{"payload_id":"p-cut","client_id":1,"user_id":"{user}","ev'])
    second = run_release(tree, FIRST, LAST)
    assert second.success, second.failures
    dry = run_release(tree, FIRST, LAST, publish=False)  # an unpublished version too
    assert dry.success, dry.failures
    quarantined = spark.table("raw.quarantine").where(F.col("raw_text").contains(user))
    assert quarantined.count() == 1
    data_root = Path(base_settings.data_root)
    assert traces(data_root, user)  # everywhere, before

    # erase: recorded as a digest, the published hours found, one release requested
    settings = dataclasses.replace(settings_for(tree), dagster_home=instance.root_directory)
    defs = build_definitions(settings)
    config = erase_cli.validate(
        argparse.Namespace(
            client=1, user=user, reason="data subject request 42", requested_at="", ticket="DPO-42"
        )
    )
    erased = defs.resolve_job_def(ERASE_JOB).execute_in_process(
        instance=instance, run_config={"ops": {ERASE_OP: {"config": config}}}
    )
    assert erased.success
    output = next(e for e in erased.all_events if e.is_successful_output)
    metadata = output.step_output_data.metadata
    found = metadata["hours"].value
    assert set(found) >= {"raw.payloads", "raw.quarantine", "transformed.payloads"}
    assert found["raw.quarantine"] == [CUT]
    release_id = metadata["release_id"].value
    backfill = instance.get_backfill(release_id)  # the release Dagster's daemon would run
    assert backfill is not None and backfill.tags[tags.ERASURE] == erased.run_id
    hours = sorted({h for listed in found.values() for h in listed})

    # the release's runs, executed here under the backfill's id (as the daemon would)
    release = execute_release(
        defs,
        instance,
        hours[0],
        hours[-1],
        release_id=release_id,
        extra_tags={tags.ERASURE: erased.run_id},
    )
    assert release.success, release.failures  # the erasure approved its own change gates
    end_backfill(instance, release_id, "COMPLETED_SUCCESS")  # its runs are done
    approvals = audit.read(spark, audit.APPROVALS).where(F.col("release_id") == release_id)
    assert {r.reason for r in approvals.collect()} <= {
        f"erasure {erased.run_id}: removal of an erased user's data"
    }
    counted = audit.read(spark, audit.ERASED_LINES).where(
        F.col("run_id").isin([r.run_id for r in release.runs])
    )
    assert counted.agg(F.sum("lines")).first()[0] >= 2  # payloads and the quarantined line
    assert spark.table("raw.payloads").where(F.col("user_id") == user).count() == 0
    # reconciliation, from Dagster's records and from the ledger, counts the erased lines
    # as accounted for: no drift to repair
    store = LocalBackupStore(root=str(tree))
    config = ReconcileConfig.from_env({})
    window = state.reconcile_window(store, config, FIRST, LAST)
    layers = list(LAYERS.values())
    for published in (
        state.published_from_instance(instance, layers, window.hours),
        state.published_from_ledger(audit.warehouse_of(spark), layers, window.hours),
    ):
        result = state.reconcile(store, published, layers, window, config, source="test")
        assert [f.detail for f in result.findings if f.kind == COUNT_MISMATCH] == []

    # No table, version or file under DATA_ROOT holds the user's id any more; nor does the
    # Dagster instance (run configs carry the digest only).
    assert traces(data_root, user) == []
    assert traces(Path(instance.root_directory), user) == []
    purged = audit.read(spark, audit.DELETIONS).where(F.col("kind") == erasure.KIND)
    assert {r.release_id for r in purged.collect()} >= {live.release_id, dry.release_id}

    # a rollback to a purged version is refused, saying why
    rollback = defs.resolve_job_def("rollback_release").execute_in_process(
        instance=instance,
        run_config={"ops": {"rollback_op": {"config": {"release_id": release_id}}}},
        raise_on_error=False,
    )
    assert not rollback.success
    failure = next(e for e in rollback.all_events if e.is_step_failure)
    assert "purged by erasure run" in failure.step_failure_data.error.message
    # and a later build keeps the user out without being told again
    again = run_release(tree, CUT, CUT, layers=("raw",), downstream=False, publish=False)
    assert again.success, again.failures
    assert spark.table("shadow.raw_payloads").where(F.col("user_id") == user).count() == 0
