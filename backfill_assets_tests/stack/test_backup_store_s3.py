"""``S3BackupStore`` against a real S3 API (moto on 127.0.0.1): the same inventory as the
local tree it was copied from, and the executor-side fetch returns the stored bytes."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from dagster_aws.s3 import S3Resource

from backfill_assets.core.backups.inventory import take_inventory
from backfill_assets.core.backups.store import LocalBackupStore, S3BackupStore, _s3_fetcher
from backfill_assets.core.hours import hour_range
from backfill_assets_dev.generator import generate_backups
from backfill_assets_dev.stack import servers
from backfill_assets_dev.stack.production import AWS


def test_s3_store_lists_reads_and_fetches_like_the_local_tree(
    s3_endpoint: str, tmp_path: Path, monkeypatch
):
    for name, value in AWS.items():
        monkeypatch.setenv(name, value)
    root = tmp_path / "backups"
    generate_backups(root, start="2026-11-20T00", hours=2, clients=2, users_per_client=10, seed=3)
    client = servers.s3_client(s3_endpoint, AWS)
    servers.upload_tree(client, root / "raw", "store-test", "a/b/raw")
    local = LocalBackupStore(root=str(root))
    resource = S3Resource(endpoint_url=s3_endpoint)  # the client the code location hands it
    s3 = S3BackupStore(
        root="s3://store-test/a/b",
        client_factory=resource.get_client,
        endpoint_url=resource.endpoint_url,
        region=resource.region_name,
    )
    hours = hour_range("2026-11-20T00", "2026-11-20T02")  # the last hour has no folder
    assert s3.list_dir("raw/date=2026-11-20") == local.list_dir("raw/date=2026-11-20")
    assert s3.list_dir("raw/date=2026-11-21") == []
    assert take_inventory(s3, hours) == take_inventory(local, hours)

    rels = [
        f"{folder.rel_path}/{f.name}"
        for inventory in take_inventory(local, hours).values()
        for folder in inventory.folders
        for f in folder.files
    ]
    assert rels
    fetch = _s3_fetcher(s3.endpoint(), None)
    keys = [f"store-test/a/b/{rel}" for rel in rels]
    (batch,) = fetch(iter([pa.RecordBatch.from_pydict({"key": keys})]))
    assert batch.column("path").to_pylist() == [f"s3://{k}" for k in keys]
    assert batch.column("content").to_pylist() == [(root / rel).read_bytes() for rel in rels]
    assert s3.spark_path(rels[0]) == f"s3://store-test/a/b/{rels[0]}"
