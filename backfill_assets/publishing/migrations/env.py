"""Alembic's environment: migrations run on the connection ``database.engine`` hands in."""

from alembic import context

# A version table of its own: the database may be shared (Dagster's keeps `alembic_version`).
VERSION_TABLE = "audit_schema_version"

context.configure(connection=context.config.attributes["connection"], version_table=VERSION_TABLE)
with context.begin_transaction():
    context.run_migrations()
