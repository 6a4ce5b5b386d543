"""The readers of part files give the same rows: Spark's own (local trees) and the
executors' Python path (stores Spark cannot open, such as S3 without hadoop-aws); and
within Spark's own, the undecided lines judged on the driver or in a Python worker."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from backfill_assets.core.backups.inventory import take_inventory
from backfill_assets.core.backups.parsed_rows import COLUMNS
from backfill_assets.core.backups.reader import read_folders
from backfill_assets.core.backups.spark_contract import UNDECIDED, judge
from backfill_assets.core.backups.store import LocalBackupStore
from backfill_assets_tests.helpers.backups import write_backup_folder, zst
from backfill_assets_tests.helpers.corpus import CLIENT_ID, HOUR, edge_lines, fuzz_lines


class FetchingStore(LocalBackupStore):
    """A local tree read as S3 is: the executors fetch the bytes and judge in Python."""

    def spark_reads_files(self) -> bool:
        return False


def _rows(spark, store, **options) -> list[tuple]:
    folders = [f for h in take_inventory(store, [HOUR]).values() for f in h.folders]
    with read_folders(spark, store, folders, **options) as lines:
        return sorted(
            (tuple(r) for r in lines.all.select(*COLUMNS).collect()), key=lambda r: repr(r)
        )


def _reason_kind(row: tuple) -> tuple:
    """The row with its reason cut to the reason's kind (``file_unreadable``, ...)."""
    return (*row[:5], (row[5] or "").split(":")[0], *row[6:])


def test_the_executors_path_gives_the_rows_of_the_spark_path(spark, tmp_path: Path):
    lines = edge_lines() + fuzz_lines(seed=5, count=300)
    good = zst(lines)
    write_backup_folder(
        tmp_path,
        HOUR,
        CLIENT_ID,
        {"part-00000.jsonl.zst": good, "part-00001.jsonl.zst": good[:-9]},
        records={"part-00001.jsonl.zst": 10},
    )
    # the manifest's digest of the truncated file is its own: the frame is what is broken
    spark_rows = _rows(spark, LocalBackupStore(root=str(tmp_path)))
    fetched_rows = _rows(spark, FetchingStore(root=str(tmp_path)))
    kinds = {r[0] for r in spark_rows}
    assert kinds == {"payload", "quarantine"}
    assert any(r[4] is None and "file_unreadable" in r[5] for r in spark_rows)
    # payload rows and line verdicts are identical; whole-file reasons may word the zstd
    # error differently (the JVM's decompressor vs Python's), their kind must agree
    assert [_reason_kind(r) for r in fetched_rows] == [_reason_kind(r) for r in spark_rows]
    assert len(spark_rows) == len(lines) + 1


def test_undecided_lines_get_the_same_rows_on_the_driver_and_in_a_worker(spark, tmp_path: Path):
    lines = edge_lines() + fuzz_lines(seed=7, count=300)
    write_backup_folder(tmp_path, HOUR, CLIENT_ID, {"part-00000.jsonl.zst": zst(lines)})
    store = LocalBackupStore(root=str(tmp_path))
    on_driver = _rows(spark, store)
    in_worker = _rows(spark, store, driver_judged_lines=0)
    assert on_driver == in_worker
    assert len(on_driver) == len(lines)
    assert {r[0] for r in on_driver} == {"payload", "quarantine"}
    # the corpus has lines only the reference decides: the two paths had work to do
    frame = spark.createDataFrame([(bytearray(line),) for line in lines], "b binary")
    judged = judge(
        frame.select(F.col("b").cast("string").alias("line"), F.lit(CLIENT_ID).alias("c")),
        "line",
        "c",
    )
    assert judged.where(F.col("reason") == UNDECIDED).count() > 10


def test_a_file_listed_twice_is_read_once_by_both_readers(spark, tmp_path: Path):
    """A manifest listing a part file twice is the inventory's problem; neither reader reads
    the file twice (nor joins its lines against two expected rows)."""
    lines = edge_lines()[:40]
    folder = write_backup_folder(tmp_path, HOUR, CLIENT_ID, {"part-00000.jsonl.zst": zst(lines)})
    manifest = json.loads((folder / "_MANIFEST.json").read_text())
    manifest["files"] *= 2
    manifest["records"] *= 2
    (folder / "_MANIFEST.json").write_text(json.dumps(manifest))
    store = LocalBackupStore(root=str(tmp_path))
    (inventory,) = take_inventory(store, [HOUR]).values()
    assert any("listed more than once in the manifest" in p for p in inventory.all_problems)
    # and a folder handed to the readers with the entry twice (the readers' own guard)
    (listed,) = inventory.folders
    doubled = dataclasses.replace(listed, files=listed.files * 2)
    for reading in (store, FetchingStore(root=str(tmp_path))):
        for folders in ([listed], [doubled]):
            with read_folders(spark, reading, folders) as rows:
                numbers = sorted(r.line_number for r in rows.all.select("line_number").collect())
            assert numbers == list(range(1, len(lines) + 1)), type(reading).__name__


def test_the_first_pass_over_the_valid_lines_holds_only_them_and_restores_the_session(
    spark, tmp_path: Path
):
    """``bulk`` holds the lines the JVM found valid and ``rest`` every other row (quarantined,
    and those the reference judged, valid or not); the first pass runs without adaptive
    execution (so that its own stage fills the cache) and gives the session its setting
    back, also when the action fails."""
    lines = edge_lines() + fuzz_lines(seed=9, count=200)
    write_backup_folder(tmp_path, HOUR, CLIENT_ID, {"part-00000.jsonl.zst": zst(lines)})
    store = LocalBackupStore(root=str(tmp_path))
    folders = [f for h in take_inventory(store, [HOUR]).values() for f in h.folders]
    adaptive = "spark.sql.adaptive.enabled"
    before = spark.conf.get(adaptive)
    with read_folders(spark, store, folders) as judged:
        seen = judged.first_pass(
            lambda bulk: (spark.conf.get(adaptive), [r.kind for r in bulk.collect()])
        )
        assert spark.conf.get(adaptive) == before
        setting, kinds = seen
        assert setting == "false" and set(kinds) == {"payload"}
        rest = {r.kind for r in judged.rest.select("kind").collect()}
        assert rest == {"payload", "quarantine"}  # the corpus has lines only Python decides
        assert len(kinds) + judged.rest.count() == len(lines) == judged.all.count()

        def fails(bulk):
            raise RuntimeError("the action failed")

        with pytest.raises(RuntimeError, match="the action failed"):
            judged.first_pass(fails)
        assert spark.conf.get(adaptive) == before


def test_each_line_is_parsed_once(spark, tmp_path: Path, capsys):
    """The judged lines are cached from a plan with one JSON parse per line: no filter is
    pushed below it as a pruned ``from_json`` of its own (as the optimizer does with a
    filter on the fields of a ``from_json`` projection), since the filters apply to the
    cache. And each file is split into lines once: no filter inferred from the explode
    (``size(items) > 0``) splits it again in the scan."""
    write_backup_folder(tmp_path, HOUR, CLIENT_ID, {"part-00000.jsonl.zst": zst(edge_lines())})
    store = LocalBackupStore(root=str(tmp_path))
    folders = [f for h in take_inventory(store, [HOUR]).values() for f in h.folders]
    with read_folders(spark, store, folders) as judged:
        judged.first_pass(lambda bulk: bulk.explain())  # the plan of the pass that caches
        plan = capsys.readouterr().out
        assert plan.count("from_json(") == 1, plan
        assert plan.count("split(value") == 1, plan
        assert judged.all.count() == len(edge_lines())


def test_the_manifests_entries_are_a_local_relation(spark, tmp_path: Path, capsys):
    """The manifests' entries the lines are joined with reach the plan as a local table
    (through Arrow), not as an RDD of pickled Python rows, whose every job starts Python
    workers (1-1.5 s in a session that had none: the raw layer needs none)."""
    write_backup_folder(tmp_path, HOUR, CLIENT_ID, {"part-00000.jsonl.zst": zst(edge_lines())})
    store = LocalBackupStore(root=str(tmp_path))
    folders = [f for h in take_inventory(store, [HOUR]).values() for f in h.folders]
    with read_folders(spark, store, folders) as judged:
        judged.first_pass(lambda bulk: bulk.explain())
        plan = capsys.readouterr().out
    assert "LocalTableScan" in plan, plan
    assert "ExistingRDD" not in plan, plan


def test_a_file_whose_digest_differs_gives_one_row_and_none_of_its_lines(spark, tmp_path: Path):
    """The digests are checked in the same pass as the lines, so the lines of a file whose
    digest differs (here: the manifest's, the file decompresses fine) were read, judged and
    cached; none of them may come out, and the first pass counts without them."""
    lines = edge_lines()
    folder = write_backup_folder(
        tmp_path,
        HOUR,
        CLIENT_ID,
        {"part-00000.jsonl.zst": zst(lines), "part-00001.jsonl.zst": zst(lines[:50])},
    )
    manifest = json.loads((folder / "_MANIFEST.json").read_text())
    tampered = next(f for f in manifest["files"] if f["name"] == "part-00001.jsonl.zst")
    tampered["sha256"] = "0" * 64
    (folder / "_MANIFEST.json").write_text(json.dumps(manifest))
    store = LocalBackupStore(root=str(tmp_path))
    folders = [f for h in take_inventory(store, [HOUR]).values() for f in h.folders]
    with read_folders(spark, store, folders) as judged:
        counted = judged.first_pass(lambda bulk: bulk.groupBy("file").count().collect())
        rows = judged.all.select("kind", "file", "line_number", "reason").collect()
    assert {r["file"].rsplit("/", 1)[-1] for r in counted} == {"part-00000.jsonl.zst"}
    from_tampered = [r for r in rows if r.file.endswith("part-00001.jsonl.zst")]
    assert len(from_tampered) == 1
    assert from_tampered[0].line_number is None
    assert from_tampered[0].reason.startswith("file_digest_mismatch: sha256 ")
    assert from_tampered[0].reason.endswith(" 50 lines not read")
    assert len(rows) == len(lines) + 1  # every line of the other file, exactly once
