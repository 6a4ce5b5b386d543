"""The audit tables, the open-transaction constraint and the ledger's indexes.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

from backfill_assets.core.warehouse.database import UtcTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# The audit tables as this revision creates them (a migration keeps its own copy).
TABLES = {
    "shadow_partitions": (
        "table_name string, hour string, version string, location string, row_count bigint, "
        "checksum string, code_version string, run_id string, written_at timestamp, "
        "release_id string"
    ),
    "release_reads": (
        "release_id string, run_id string, reader_table string, upstream_table string, "
        "hour string, source string, version string, location string, read_at timestamp"
    ),
    "check_results": (
        "table_name string, hour string, version string, check_name string, passed boolean, "
        "detail string, run_id string, checked_at timestamp"
    ),
    "publications": (
        "event_id string, table_name string, hour string, phase string, mode string, "
        "run_id string, version string, previous_location string, new_location string, "
        "row_count bigint, checksum string, code_version string, backfill_id string, "
        "reason string, requested_by string, ticket string, run_mode string, "
        "recorded_at timestamp, txn_id string"
    ),
    "deletions": (
        "table_name string, hour string, version string, location string, row_count bigint, "
        "bytes bigint, release_id string, kind string, reason string, run_id string, "
        "deleted_at timestamp"
    ),
    "approvals": (
        "release_id string, layer string, hour string, version string, gate string, "
        "approved_by string, reason string, ticket string, run_id string, approved_at timestamp"
    ),
    "erasures": (
        "erasure_id string, event string, client_id bigint, user_digest string, "
        "requested_at timestamp, reason string, requested_by string, ticket string, "
        "release_id string, hours string, run_id string, recorded_at timestamp"
    ),
    "erased_lines": (
        "table_name string, hour string, version string, client_id bigint, lines bigint, "
        "run_id string, recorded_at timestamp"
    ),
    "cancellations": (
        "release_id string, status string, hours string, runs string, cancelled_by string, "
        "reason string, ticket string, run_id string, cancelled_at timestamp"
    ),
}
TYPES = {
    "string": sa.Text,
    "bigint": sa.BigInteger,
    "boolean": sa.Boolean,
    "timestamp": UtcTime,  # timestamptz on PostgreSQL, UTC ISO text on SQLite
}
INDEXES = {
    "publications": [("table_name", "hour"), ("txn_id",), ("backfill_id",)],
    "shadow_partitions": [("release_id",), ("location",), ("table_name", "hour")],
    "check_results": [("version",)],
    "release_reads": [("release_id",), ("location",)],
    "deletions": [("location",)],
    "approvals": [("release_id",)],
}


def upgrade() -> None:
    for name, ddl in TABLES.items():
        columns = [c.split() for c in ddl.split(",")]
        op.create_table(
            name,
            sa.Column("_row", sa.Integer, primary_key=True),
            *[sa.Column(n, TYPES[kind]()) for n, kind in columns],
        )
        for index in INDEXES.get(name, []):
            op.create_index(f"ix_{name}_{'_'.join(index)}", name, list(index))
    op.create_table(
        "open_transactions",
        sa.Column("table_name", sa.Text, primary_key=True),
        sa.Column("txn_id", sa.Text, nullable=False),
        sa.Column("run_id", sa.Text),
        sa.Column("opened_at", UtcTime()),
    )


def downgrade() -> None:
    op.drop_table("open_transactions")
    for name in TABLES:
        op.drop_table(name)
