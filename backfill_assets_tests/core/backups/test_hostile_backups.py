"""A file that cannot be read within bounds is refused before Spark holds it: its folder's
hour is held back with one line naming the file and the limit, every other hour is
published; an over-long line is quarantined with its length, the rest of its file read."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from backfill_assets.core.backups import screen
from backfill_assets.core.backups.inventory import take_inventory
from backfill_assets.core.backups.reader import read_folders
from backfill_assets.core.backups.store import LocalBackupStore
from backfill_assets.defs.checks.raw import reconcile
from backfill_assets.settings import ReadLimits
from backfill_assets_tests.helpers.backups import write_backup_folder
from backfill_assets_tests.helpers.hostile import (
    BOMB_HOUR,
    CLEAN_HOUR,
    HOURS,
    LINKS_HOUR,
    LONG_HOUR,
    LONG_LINE_BYTES,
    SMALL_FILES,
    folder_of,
    hostile_tree,
    long_line_file,
    payload_line,
    zstd_bomb,
)

LIMITS = ReadLimits()


class FetchingStore(LocalBackupStore):
    """A local tree read as S3 is: the executors fetch the bytes and judge in Python."""

    def spark_reads_files(self) -> bool:
        return False


@pytest.fixture
def hostile(make_backups, tmp_path: Path):
    root = make_backups(hours=4, clients=2)
    found = hostile_tree(root, tmp_path / "outside")
    yield root, found
    found.close()


def test_the_inventory_opens_only_regular_files_inside_the_tree(hostile, tmp_path: Path):
    root, found = hostile
    store = LocalBackupStore(root=str(root))
    # a folder that links out of the tree, a file larger than its manifest says
    outside_folder = tmp_path / "elsewhere"
    outside_folder.mkdir()
    (folder_of(root, CLEAN_HOUR, 1).parent / "client_id=7").symlink_to(outside_folder)
    grown = folder_of(root, CLEAN_HOUR, 2) / "part-00000.jsonl.zst"
    grown.write_bytes(grown.read_bytes() + b"\0" * 10)
    inventory = take_inventory(store, list(HOURS))
    links = inventory[LINKS_HOUR].all_problems
    link = f"a symbolic link to {found.outside_file}, not a regular file; not opened"
    assert f"{found.outside_link}: {link}" in links
    assert any(p.startswith(f"{found.outside_fifo_link}: a symbolic link") for p in links)
    assert f"{found.fifo_manifest}: a FIFO, not a regular file; not opened" in links
    clean = inventory[CLEAN_HOUR].all_problems
    assert any("client_id=7: outside the backup tree" in p for p in clean), clean
    assert any("part-00000.jsonl.zst: " in p and "more than its manifest says" in p for p in clean)
    # what is refused is not read: the hour fails the reconciliation, naming it
    failing = reconcile(inventory, {}, set())
    assert found.fifo_manifest in failing[LINKS_HOUR]
    assert not any(f.opened for f in found.fifos)
    assert found.outside_file.stat().st_atime == found.outside_atime
    assert inventory[BOMB_HOUR].all_problems == []  # the bomb is the streaming pass's


def test_a_bomb_is_refused_while_decompressing_in_bounded_memory(tmp_path: Path):
    bomb = tmp_path / "bomb.zst"
    bomb.write_bytes(zstd_bomb(3 * 2**30))
    # in a process of its own, so that its peak memory is its own: what the screening
    # adds to the peak after the imports
    code = (
        "import resource\n"
        "from backfill_assets.core.backups import screen\n"
        "from backfill_assets.core.backups.store import LocalBackupStore\n"
        "from backfill_assets.settings import ReadLimits\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        f"store = LocalBackupStore(root={str(tmp_path)!r})\n"
        "print(screen.screen_file(store, 'bomb.zst', 1, ReadLimits()).refused)\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[0] == (
        f"file_refused: decompresses past the limit of {LIMITS.part_expanded_bytes} bytes "
        "(BACKFILL_MAX_PART_EXPANDED_BYTES; stopped there); 1 lines not read"
    )
    assert int(out[1]) < 32 * 1024  # KiB: a few chunks, not the GiBs it expands to


def test_long_lines_are_told_from_chunk_ends_as_a_split_would():
    rng = random.Random(5)
    limit = 64
    for _ in range(300):
        lines = [b"z" * rng.choice([0, 1, 30, 63, 64, 65, 200]) for _ in range(rng.randint(1, 8))]
        data = b"\n".join(lines) + rng.choice([b"", b"\n"])
        cuts = (
            sorted(rng.sample(range(1, len(data)), min(len(data) - 1, 5))) if len(data) > 1 else []
        )
        chunks = []
        for start, end in zip([0, *cuts], [*cuts, len(data)], strict=True):
            chunks += [data[i : min(end, i + limit)] for i in range(start, end, limit)]
        split = data.split(b"\n")
        if split[-1] == b"":
            split.pop()
        assert screen._has_long_line(iter(chunks), limit) == any(len(x) > limit for x in split)
        got = list(screen._lines(iter(chunks), limit))
        assert [n for _, n in got] == [len(x) for x in split]
        assert [x for x, n in got if n <= limit] == [x for x in split if len(x) <= limit]


def test_a_file_with_a_long_line_is_judged_streaming_and_named_when_its_frame_breaks(
    tmp_path: Path,
):
    import hashlib

    import pyarrow as pa

    limits = ReadLimits(line_bytes=1024)
    store = LocalBackupStore(root=str(tmp_path))
    where = {"hour": BOMB_HOUR, "client_id": 1, "hour_start_ms": 0}
    good = long_line_file(5000, [payload_line(1, BOMB_HOUR, 1)], [])
    found = {}
    for name, data in (("good.zst", good), ("broken.zst", good + b"junk")):
        (tmp_path / name).write_bytes(data)
        assert screen.screen_file(store, name, 2, limits) == screen.Screened(long_line=True)
        sha = hashlib.sha256(data).hexdigest()
        rows = pa.Table.from_batches(screen.judge_file(store, name, where, sha, 2, limits))
        found[name] = [(r["line_number"], r["kind"], r["reason"]) for r in rows.to_pylist()]
    assert found["good.zst"] == [
        (1, "payload", None),
        (2, "quarantine", screen.long_line_reason(5000, 1024)),
    ]
    [(number, _, reason)] = found["broken.zst"]
    assert number is None and reason.startswith("file_unreadable: ")


@pytest.mark.parametrize("store_kind", [LocalBackupStore, FetchingStore])
def test_both_readers_refuse_a_file_past_the_limit(spark, tmp_path: Path, store_kind):
    limits = ReadLimits(part_expanded_bytes=2**20)
    good = [payload_line(1, BOMB_HOUR, n) for n in range(3)]
    import zstandard

    write_backup_folder(
        tmp_path,
        BOMB_HOUR,
        1,
        {
            "part-00000.jsonl.zst": zstandard.ZstdCompressor().compress(
                ("\n".join(good) + "\n").encode()
            ),
            "part-00001.jsonl.zst": zstd_bomb(64 * 2**20),
        },
        records={"part-00001.jsonl.zst": 1},
    )
    store = store_kind(root=str(tmp_path))
    folders = take_inventory(store, [BOMB_HOUR], limits)[BOMB_HOUR].folders
    with read_folders(spark, store, folders, limits=limits) as lines:
        rows = lines.all.select("kind", "file", "line_number", "reason").collect()
    assert sorted(r.line_number for r in rows if r.kind == "payload") == [1, 2, 3]
    refused = [r for r in rows if r.line_number is None]
    assert len(refused) == 1 and refused[0].file.endswith("part-00001.jsonl.zst")
    assert refused[0].reason.startswith(
        f"file_refused: decompresses past the limit of {2**20} bytes"
    )


def _jvm_peak_kib(spark) -> int:
    """The peak resident memory of the session's JVM so far (``VmHWM``)."""
    status = Path(f"/proc/{spark.sparkContext._gateway.proc.pid}/status").read_text()
    return next(int(x.split()[1]) for x in status.splitlines() if x.startswith("VmHWM:"))


def _counts(spark, table: str, hours: list[str], where=None) -> dict[str, int]:
    frame = spark.table(table).where(F.col("hour").isin(hours))
    if where is not None:
        frame = frame.where(where)
    return {r["hour"]: r["count"] for r in frame.groupBy("hour").count().collect()}


def test_hostile_files_hold_back_their_hours_and_the_rest_is_published(spark, hostile, run_release):
    root, found = hostile
    peak_before = _jvm_peak_kib(spark)
    release = run_release(root, HOURS[0], HOURS[-1])
    assert not release.success
    failures = " | ".join(release.failures)
    # one line per held-back hour, naming the file and the limit
    folder, name = found.bomb.rsplit("/", 1)
    assert (
        f"{folder}: 1 unreadable/corrupt file(s): {name}: file_refused: decompresses past"
        in failures
    )
    assert "BACKFILL_MAX_PART_EXPANDED_BYTES" in failures
    assert found.outside_link in failures or found.fifo_manifest in failures
    published = _counts(spark, "raw.payloads", list(HOURS))
    assert set(published) == {CLEAN_HOUR, LONG_HOUR}
    quarantined = _counts(spark, "raw.quarantine", list(HOURS), F.col("line_number").isNotNull())
    inventory = take_inventory(LocalBackupStore(root=str(root)), list(HOURS))
    for hour in (CLEAN_HOUR, LONG_HOUR):
        assert published[hour] + quarantined.get(hour, 0) == inventory[hour].expected_records
    long = (
        spark.table("raw.quarantine")
        .where(F.col("file") == found.long_line)
        .select("line_number", "reason", F.length("raw_text").alias("kept"))
        .collect()
    )
    assert [(r.line_number, r.kept) for r in long] == [(2, screen.LONG_LINE_PREFIX)]
    assert long[0].reason.startswith(
        f"line_too_long: {LONG_LINE_BYTES} bytes, past the limit of {LIMITS.line_bytes} bytes"
    )
    ids = {
        r.payload_id
        for r in spark.table("raw.payloads").where(F.col("hour") == LONG_HOUR).collect()
    }
    assert {json.loads(payload_line(1, LONG_HOUR, n))["payload_id"] for n in (1, 2)} <= ids
    small = _counts(spark, "raw.payloads", [LONG_HOUR], F.col("client_id") == 3)
    assert small == {LONG_HOUR: SMALL_FILES}
    assert not any(f.opened for f in found.fifos)
    assert found.outside_file.stat().st_atime == found.outside_atime
    grown = _jvm_peak_kib(spark) - peak_before
    # a fresh JVM grows by ~0.75 GiB for this release; the bomb read by Spark held 3 GiB+
    assert grown < 1.5 * 2**20, f"the JVM's peak resident memory grew by {grown} KiB"
