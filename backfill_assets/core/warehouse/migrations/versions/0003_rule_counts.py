"""The rule counts a build keeps for its checks (``audit.rule_counts``).

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

from backfill_assets.core.warehouse.database import UtcTime

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rule_counts",
        sa.Column("_row", sa.Integer, primary_key=True),
        sa.Column("table_name", sa.Text),
        sa.Column("version", sa.Text),
        sa.Column("model", sa.Text),
        sa.Column("by_columns", sa.Text),
        sa.Column("groups", sa.Text),
        sa.Column("run_id", sa.Text),
        sa.Column("counted_at", UtcTime()),
    )
    op.create_index("ix_rule_counts_table_name_version", "rule_counts", ["table_name", "version"])


def downgrade() -> None:
    op.drop_table("rule_counts")
