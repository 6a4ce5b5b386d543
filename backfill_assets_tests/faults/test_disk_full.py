"""A disk filled during the shadow write and during the publish: the failure line an operator
sees (the CLI prints each run's failures) says "no space left on device" with the path, the
published data stays what it was, and once space is freed a retry publishes.

The warehouse is a small tmpfs mounted for the test (root only), filled by a file."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from backfill_assets.layers.registry import LAYERS
from backfill_assets.publishing import publisher
from backfill_assets.publishing.tables import partition_locations

FIRST, LAST = "2026-11-20T00", "2026-11-20T03"
TABLES = LAYERS["raw"].tables


def _can_mount() -> bool:
    return os.geteuid() == 0 and Path("/proc/filesystems").read_text().find("tmpfs") >= 0


@pytest.fixture
def small_warehouse(warehouse, base_settings) -> Iterator[Path]:
    """The suite's warehouse directory on a 64 MB tmpfs of its own, for this test."""
    if not _can_mount():
        pytest.skip("mounting a tmpfs needs root")
    root = Path(base_settings.warehouse_dir)
    root.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(root)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip()}")
    try:
        yield root
    finally:
        subprocess.run(["umount", "-l", str(root)], check=True)


def fill(root: Path) -> Path:
    """Fill the file system of ``root`` to the last byte; the filler's path."""
    filler = root / "filler"
    chunk = b"\0" * (1 << 20)
    with open(filler, "wb", buffering=0) as out:
        for size in (1 << 20, 1 << 12, 1):
            try:
                while True:
                    out.write(chunk[:size])
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    return filler


def published(spark) -> dict:
    return {table: partition_locations(spark, table) for table in TABLES}


def test_a_full_disk_is_named_with_its_path_and_publishes_nothing_until_freed(
    spark, small_warehouse: Path, make_backups, run_release
):
    backups = make_backups(hours=4)
    first = run_release(backups, FIRST, "2026-11-20T01", downstream=False)
    assert first.success, first.failures
    dry = run_release(backups, "2026-11-20T02", LAST, downstream=False, publish=False)
    assert dry.success, dry.failures
    before = published(spark)
    filler = fill(small_warehouse)

    # during the shadow write
    shadow = run_release(backups, "2026-11-20T02", LAST, downstream=False)
    assert not shadow.success
    line = shadow.failures[0]
    assert "no space left on device" in line and str(small_warehouse) in line, line
    assert "Py4J" not in line and "\n" not in line
    assert published(spark) == before

    # during the publish (of the dry run built before the disk filled)
    publish = run_release(backups, "2026-11-20T02", LAST, publish_only=dry.release_id)
    assert not publish.success
    line = publish.failures[0]
    assert "no space left on device" in line and str(small_warehouse) in line, line
    assert "Py4J" not in line and "\n" not in line
    filler.unlink()
    assert published(spark) == before

    # space freed: the retry publishes
    retry = run_release(backups, "2026-11-20T02", LAST, publish_only=dry.release_id)
    assert retry.success, retry.failures
    after = published(spark)
    assert set(after["raw.payloads"]) == {f"2026-11-20T0{h}" for h in range(4)}
    assert publisher.verify(spark, TABLES) == []
