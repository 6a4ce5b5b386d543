"""A disk filled during the shadow write and during the publish, as the operator meets it:
real ``backfill-assets`` commands, Dagster's asset backfills run by one daemon for the
test, the default partitions. The CLI's failure line says "no space left on device" with
the path, the published data stays what it was, and once space is freed a retry publishes.
The releases are of the raw layer only: the shadow write and the publish are the same code
for every layer, and each downstream layer would add runs, not cases.

The warehouse (``$DATA_ROOT/warehouse``: tables and shadows) and the ledger database (a
SQLite file beside them, as an operator keeping both on one disk has it) are on a small
tmpfs mounted for the test (root only) and filled by a file: the shadow write fails on the
tables' files, the publish on the ledger's prepare (its swaps are pointers in the
metastore). The metastore and the Dagster instance stay on the ordinary disk."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from backfill_assets.core.names import LAYERS
from backfill_assets.settings import LEDGER_URL_ENV
from backfill_assets_dev.generator import generate_backups
from backfill_assets_tests.helpers.processes import (
    cli,
    cli_env,
    cli_together,
    shared_daemon,
)
from backfill_assets_tests.helpers.releases import published_state

pytestmark = pytest.mark.slow

FIRST, LAST = "2026-11-20T00", "2026-11-20T03"
RAW = ("--layers", "raw", "--no-downstream")
PUBLISHED = ("--from", FIRST, "--to", "2026-11-20T01", *RAW)
REPAIR = ("--from", "2026-11-20T02", "--to", LAST, *RAW)
TABLES = LAYERS["raw"].tables
NO_SPACE = "no space left on device"


def _can_mount() -> bool:
    return os.geteuid() == 0 and "tmpfs" in Path("/proc/filesystems").read_text()


@pytest.fixture
def small_warehouse(tmp_path: Path) -> Iterator[Path]:
    """``$DATA_ROOT/warehouse`` on a 64 MB tmpfs of its own, unmounted at the end."""
    if not _can_mount():
        pytest.skip("mounting a tmpfs needs root")
    root = tmp_path / "data" / "warehouse"
    root.mkdir(parents=True)
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


def failure_lines(output: str) -> list[str]:
    return [line.strip() for line in output.splitlines() if line.strip().startswith("failure:")]


def assert_names_full_disk(done, where: Path) -> None:
    """Exit 1, a failure line naming the full disk and a path on it, no JVM call."""
    assert done.returncode == 1, done.output[-4000:]
    lines = [line for line in failure_lines(done.output) if NO_SPACE in line]
    assert lines and str(where) in lines[0], done.output[-4000:]
    assert "Py4J" not in done.output and "Traceback" not in done.output, done.output[-4000:]


def test_a_full_disk_is_named_with_its_path_and_publishes_nothing_until_freed(
    tmp_path: Path, small_warehouse: Path, driver_jvm: dict[str, str]
):
    backups = tmp_path / "backups"
    generate_backups(
        backups, start=FIRST, hours=4, clients=2, users_per_client=25, seed=11, workers=1
    )
    shell = cli_env(
        tmp_path, backups, **{LEDGER_URL_ENV: f"sqlite:///{small_warehouse}/ledger.sqlite"}
    )
    # one driver JVM (the worker's warm one) for the daemon's runs and the test's reads
    env = {**shell, **driver_jvm}
    before = _fails_on_a_full_disk_then_publishes(env, tmp_path, small_warehouse)
    after = published_state(env, TABLES)
    assert {h: after["raw.payloads"][h] for h in before["raw.payloads"]} == before["raw.payloads"]
    rows = {h: n for h, (_, n) in after["raw.payloads"].items()}
    assert set(rows) == {f"2026-11-20T0{h}" for h in range(4)} and all(rows.values())


def _fails_on_a_full_disk_then_publishes(
    env: dict[str, str], tmp_path: Path, small_warehouse: Path
) -> dict:
    """The published state before the disk filled, once the retry has published."""
    with shared_daemon(env, tmp_path / "logs"):
        # hours 00..01 published; a dry run of 02..03 built (shadows written, not published)
        first, dry = cli_together(
            env,
            ["backfill", *PUBLISHED, "--reason", "first"],
            ["backfill", *REPAIR, "--dry-run", "--reason", "repair"],
        )
        assert first.returncode == 0, first.output[-4000:]
        assert dry.returncode == 0, dry.output[-4000:]
        dry_id = dry.stdout.split("submitted dry run ", 1)[1].split(":", 1)[0]
        before = published_state(env, TABLES)
        assert set(before["raw.payloads"]) == {FIRST, "2026-11-20T01"}
        filler = fill(small_warehouse)

        # a release of 02..03 (its shadow write) and the dry run's publish on a full disk
        shadow, publish = cli_together(
            env,
            ["backfill", *REPAIR, "--reason", "disk full"],
            ["publish", "--backfill", dry_id, "--reason", "disk full"],
        )
        assert_names_full_disk(shadow, small_warehouse)
        assert_names_full_disk(publish, small_warehouse)
        filler.unlink()
        assert published_state(env, TABLES) == before

        # space freed: the retry publishes the dry run
        retry = cli(env, "publish", "--backfill", dry_id, "--reason", "space freed")
        assert retry.returncode == 0, retry.output[-4000:]
    return before
