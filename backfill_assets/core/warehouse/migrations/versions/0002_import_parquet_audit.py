"""Import the Parquet audit tables an earlier version wrote under ``<warehouse>/audit``.

Every row of each table's live location: ``<warehouse>/audit/<name>``, or the newest
``_generations/<name>/<generation>`` a compaction moved it to (the one not sealed with
``_compacted``). Hidden files (``_``/``.`` prefix: unfinished appends, seals) are skipped,
as Spark skipped them. The Parquet files stay where they are (vacuum no longer reads them).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from alembic import context, op

from backfill_assets.core.warehouse.database import UtcTime
from backfill_assets.settings import Settings

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

# The audit tables the Parquet writer wrote (each under <warehouse>/audit/<name>).
TABLES = (
    "shadow_partitions",
    "release_reads",
    "check_results",
    "publications",
    "deletions",
    "approvals",
    "erasures",
    "erased_lines",
    "cancellations",
)
SEAL = "_compacted"
GENERATIONS = "_generations"
BATCH = 5000


def _filesystem(warehouse_dir: str):
    """(pyarrow file system, path in it) of the warehouse; S3 through the configured
    endpoint and region, with the credentials of the environment."""
    import pyarrow.fs as pafs

    if not warehouse_dir.startswith(("s3a://", "s3://")):
        return pafs.LocalFileSystem(), warehouse_dir.removeprefix("file:")
    configured = Settings.from_env()
    options: dict = {"region": configured.s3_region} if configured.s3_region else {}
    if configured.s3_endpoint:
        scheme, _, host = configured.s3_endpoint.rpartition("://")
        options.update(endpoint_override=host, scheme=scheme or "https")
    return pafs.S3FileSystem(**options), warehouse_dir.split("://", 1)[1]


def _live_location(fs, audit_dir: str, name: str) -> str | None:
    import pyarrow.fs as pafs

    generations = fs.get_file_info(
        pafs.FileSelector(f"{audit_dir}/{GENERATIONS}/{name}", allow_not_found=True)
    )
    for info in sorted(generations, key=lambda i: i.path, reverse=True):
        if (
            info.type == pafs.FileType.Directory
            and fs.get_file_info(f"{info.path}/{SEAL}").type == pafs.FileType.NotFound
        ):
            return info.path
    original = f"{audit_dir}/{name}"
    return original if fs.get_file_info(original).type == pafs.FileType.Directory else None


def _parquet_rows(fs, location: str) -> list[dict]:
    import pyarrow.dataset as ds
    import pyarrow.fs as pafs

    files = sorted(  # part-<time>-<uuid>.parquet: in the order they were appended
        i.path
        for i in fs.get_file_info(pafs.FileSelector(location))
        if i.type == pafs.FileType.File
        and not i.base_name.startswith(("_", "."))
        and i.base_name.endswith(".parquet")
    )
    if not files:
        return []
    return ds.dataset(files, filesystem=fs, format="parquet").to_table().to_pylist()


def _value(value: object, dialect: sa.Dialect) -> object:
    """A time as revision 0001's columns store it (reflected, they are plain TEXT on SQLite)."""
    if isinstance(value, datetime):
        return UtcTime().process_bind_param(value, dialect)
    return value


def upgrade() -> None:
    warehouse_dir = context.config.attributes.get("warehouse_dir")
    if not warehouse_dir:
        return
    fs, root = _filesystem(warehouse_dir)
    audit_dir = f"{root}/audit"
    bind = op.get_bind()
    metadata = sa.MetaData()
    metadata.reflect(bind=bind)
    for name, table in metadata.tables.items():
        if name not in TABLES:
            continue
        location = _live_location(fs, audit_dir, name)
        if location is None:
            continue
        names = [c.name for c in table.columns if c.name != "_row"]
        found = _parquet_rows(fs, location)
        for start in range(0, len(found), BATCH):
            batch = [
                {n: _value(r.get(n), bind.dialect) for n in names}
                for r in found[start : start + BATCH]
            ]
            bind.execute(table.insert(), batch)


def downgrade() -> None:
    pass
