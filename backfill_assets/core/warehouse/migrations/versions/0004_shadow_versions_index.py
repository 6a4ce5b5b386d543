"""An index on ``audit.shadow_partitions`` by (table, version): the checks find the hours a
run wrote, and the release it belongs to, with one indexed lookup (no Spark job).

Revision ID: 0004
Revises: 0003
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

INDEX = "ix_shadow_partitions_table_name_version"


def upgrade() -> None:
    op.create_index(INDEX, "shadow_partitions", ["table_name", "version"])


def downgrade() -> None:
    op.drop_index(INDEX, "shadow_partitions")
