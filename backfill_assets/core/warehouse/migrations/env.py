"""Alembic's environment: migrations run on the connection ``database.engine`` hands in."""

from alembic import context

from backfill_assets.core.warehouse.database import VERSION_TABLE

context.configure(connection=context.config.attributes["connection"], version_table=VERSION_TABLE)
with context.begin_transaction():
    context.run_migrations()
