"""The ledger database: the audit tables in a transactional database through SQLAlchemy.

A SQLite file under ``DATA_ROOT`` by default (nothing to start), PostgreSQL in production
(``BACKFILL_LEDGER_URL``, ``settings.ledger_url``). The first use of a database in a process
upgrades its schema with alembic (``migrations/``), so an existing deployment upgrades in
place; the first migration also imports the Parquet audit tables an earlier version wrote
under ``<warehouse>/audit``, every row, once.

Tables are named ``<name>`` for ``audit.<name>`` (the database is the ledger's own: Spark's
``sql`` reads it as the catalog ``audit``). ``open_transactions`` holds
one row per published table with a prepared ledger transaction and no outcome: its primary
key is the table, so two transactions can never be open on one table at once.

``fence`` is the publish fence of a set of layers for the code that writes outside Dagster's
``publish`` pool (a CLI ``verify`` settling a crash, ``rollback``) and for the publish steps
themselves: a session advisory lock per layer on PostgreSQL, an exclusive (write)
transaction on a per-layer SQLite file locally; both are released by the database when the
holder's connection ends, also when it is killed.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import threading
import zlib
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from backfill_assets import settings
from backfill_assets.core.warehouse import ledger_file
from backfill_assets.core.warehouse.ledger_file import LedgerDamaged, LedgerUnavailable

__all__ = ["LedgerDamaged", "LedgerUnavailable"]  # raised by this module's functions

OPEN_TRANSACTIONS = "open_transactions"
# Alembic's version table, of its own: the database may be shared (Dagster's keeps
# ``alembic_version``).
VERSION_TABLE = "audit_schema_version"
_MIGRATIONS = Path(__file__).with_name("migrations")
_LOCK = threading.Lock()


class UtcTime(sa.types.TypeDecorator):
    """A UTC time: ``timestamp with time zone`` on PostgreSQL; on SQLite ISO text
    (``YYYY-MM-DD HH:MM:SS.ffffff``, UTC) declared ``TEXT``, so that it sorts in time order
    and Spark's JDBC reader hands it over exactly, as a string (its SQLite driver misreads
    sub-second digits and zones of a declared timestamp)."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: sa.Dialect) -> sa.types.TypeEngine:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(sa.Text())
        return dialect.type_descriptor(sa.DateTime(timezone=True))

    def process_bind_param(self, value: datetime | None, dialect: sa.Dialect) -> object:
        if value is None or dialect.name != "sqlite":
            return value
        aware = value if value.tzinfo else value.replace(tzinfo=UTC)
        return aware.astimezone(UTC).replace(tzinfo=None).isoformat(" ", "microseconds")

    def process_result_value(self, value: object, dialect: sa.Dialect) -> datetime | None:
        if value is None or dialect.name != "sqlite":
            return value  # type: ignore[return-value]
        return datetime.fromisoformat(str(value)).replace(tzinfo=UTC)


_SQL_TYPES = {
    "string": sa.Text,
    "bigint": sa.BigInteger,
    "boolean": sa.Boolean,
    "timestamp": UtcTime,
}


class FenceTimeout(RuntimeError):
    """Another holder kept a layer's publish fence past ``BACKFILL_LOCK_TIMEOUT_SECONDS``."""


def sql_name(table: str) -> str:
    """The database table of an audit table (``audit.publications`` -> ``publications``)."""
    return table.partition(".")[2]


def columns(ddl: str) -> list[tuple[str, str]]:
    """(name, type) pairs of a ``"name type, ..."`` column list."""
    return [tuple(column.split()) for column in ddl.split(",")]  # type: ignore[misc]


def sql_table(metadata: sa.MetaData, table: str, ddl: str) -> sa.Table:
    cols = [sa.Column(n, _SQL_TYPES[kind]()) for n, kind in columns(ddl)]
    return sa.Table(
        sql_name(table), metadata, sa.Column("_row", sa.Integer, primary_key=True), *cols
    )


def redacted(url: str) -> str:
    """``url`` with its password hidden, for messages."""
    return sa.engine.make_url(url).render_as_string(hide_password=True)


@functools.cache
def _engine(url: str) -> Engine:
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        # A connection per transaction: nothing held open between a publish's steps, and a
        # file that became unreachable fails the next transaction rather than a cached one.
        engine = sa.create_engine(url, connect_args={"timeout": 60}, poolclass=sa.pool.NullPool)
        sa.event.listen(engine, "connect", _sqlite_pragmas)
        sa.event.listen(engine, "begin", _sqlite_begin)
        return engine
    return sa.create_engine(url, pool_pre_ping=True)


def _sqlite_pragmas(connection: sqlite3.Connection, _record: object) -> None:
    connection.isolation_level = None  # transactions begun by ``_sqlite_begin``, DDL too
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.close()


def _sqlite_begin(connection: Connection) -> None:
    """Every transaction takes the database's write lock when it begins (readers go on, in
    WAL mode): two processes upgrading a new database, or opening transactions on one
    table, run one after the other."""
    connection.exec_driver_sql("BEGIN IMMEDIATE")


def _alembic_config(warehouse_dir: str):
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    config.attributes["warehouse_dir"] = warehouse_dir
    return config


@functools.cache
def _upgraded(url: str, warehouse_dir: str) -> Engine:
    """The engine of ``url``, its file checked first (a SQLite ledger missing while it
    published, damaged or rolled back is refused before anything opens it read-write)."""
    from alembic import command

    check_file(url)
    engine = _engine(url)
    config = _alembic_config(warehouse_dir)
    with engine.begin() as connection:
        if engine.dialect.name == "postgresql":  # one upgrade at a time
            connection.execute(sa.select(sa.func.pg_advisory_xact_lock(_advisory_key("schema"))))
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
    return engine


def engine(warehouse_dir: str) -> Engine:
    """The ledger database of ``warehouse_dir``, its schema upgraded (once per process)."""
    from alembic.util import CommandError

    url = settings.ledger_url(warehouse_dir)
    with _LOCK:
        try:
            return _upgraded(url, warehouse_dir)
        except sa.exc.DatabaseError as error:
            if not ledger_error(error):
                raise
            raise unavailable(url, error) from error
        except CommandError as error:  # a schema revision this code does not know
            raise LedgerUnavailable(
                f"ledger database {_named(url)}: its schema cannot be upgraded ({error}): "
                f"run the code version that wrote it, or restore the ledger from its backup "
                f"({ledger_file.RUNBOOK_SECTION})"
            ) from None


def check_file(url: str) -> None:
    """Refuse a SQLite ledger file that is missing while it published, damaged or rolled
    back (``ledger_file.check``); nothing to check here for a database server."""
    db = ledger_file.sqlite_file(url)
    if db is not None:
        ledger_file.check(db)


def check(warehouse_dir: str) -> None:
    """``check_file`` of ``warehouse_dir``'s ledger, now (not once per process): before a
    publish or a rollback, and at every evaluation of the sensor."""
    check_file(settings.ledger_url(warehouse_dir))


def ledger_error(error: sa.exc.DatabaseError) -> bool:
    """An error of the database itself (unreachable, unwritable, malformed file), not of
    a statement (a constraint, a syntax error)."""
    return isinstance(error, sa.exc.OperationalError) or type(error) is sa.exc.DatabaseError


def _named(url: str) -> str:
    """The ledger database as messages name it: a SQLite file by its path, a server by its
    URL without its password."""
    db = ledger_file.sqlite_file(url)
    return str(db) if db is not None else redacted(url)


def unavailable(url: str, error: BaseException) -> LedgerUnavailable:
    """The ledger could not be reached or written: the database named (a SQLite file by
    its path, a server without its password) and the driver's cause. A file SQLite calls
    malformed is damaged: restored from its backup, never written into."""
    cause = str(getattr(error, "orig", None) or error).strip().splitlines()[0]
    if type(error) is sa.exc.DatabaseError:
        return LedgerDamaged(
            f"ledger database {_named(url)} is damaged ({cause}): {ledger_file.WHAT_TO_DO}"
        )
    parsed = sa.engine.make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database:
        return LedgerUnavailable(f"ledger database {redacted(url)} unavailable: {cause}")
    if _full(Path(parsed.database).parent):  # SQLite says "disk I/O error" for a full disk
        cause = f"no space left on device ({cause})"
    return LedgerUnavailable(f"ledger database {parsed.database} unavailable: {cause}")


def _full(folder: Path) -> bool:
    try:
        return os.statvfs(folder).f_bavail == 0
    except OSError:
        return False


@contextmanager
def transaction(warehouse_dir: str) -> Iterator[Connection]:
    """One database transaction on the ledger (committed when the block ends); a database
    that cannot be reached or written raises ``LedgerUnavailable`` naming it."""
    db = engine(warehouse_dir)
    try:
        with db.begin() as connection:
            yield connection
    except sa.exc.DatabaseError as error:
        if not ledger_error(error):
            raise
        raise unavailable(str(db.url), error) from error


def mark_published(warehouse_dir: str, last_row: int | None) -> None:
    """After a committed publish or rollback: its newest publication row in the SQLite
    ledger's marker (``ledger_file.mark``), so a ledger that loses it is refused."""
    db = ledger_file.sqlite_file(settings.ledger_url(warehouse_dir))
    if db is not None:
        ledger_file.mark(db, last_row)


def health(warehouse_dir: str) -> str:
    """``verify``'s check of the ledger database itself, as one line: reachable, its schema
    at this code's newest revision, and for SQLite its full ``integrity_check``. Raises
    ``LedgerUnavailable`` (``LedgerDamaged``) naming the database and what to do."""
    from alembic.script import ScriptDirectory

    url = settings.ledger_url(warehouse_dir)
    head = ScriptDirectory.from_config(_alembic_config(warehouse_dir)).get_current_head()
    with transaction(warehouse_dir) as connection:  # reachable, checked, upgraded
        query = f"SELECT version_num FROM {VERSION_TABLE}"
        revision = connection.exec_driver_sql(query).scalar()
    if revision != head:
        raise LedgerUnavailable(
            f"ledger database {_named(url)}: schema at revision {revision}, but this code's "
            f"newest is {head}: run the code version that wrote it, or restore the ledger "
            f"from its backup ({ledger_file.RUNBOOK_SECTION})"
        )
    db = ledger_file.sqlite_file(url)
    if db is not None:
        ledger_file.check_integrity(db)
    checked = "SQLite integrity check ok" if db is not None else "reachable"
    return f"ledger database {_named(url)}: {checked}, schema at revision {revision} (newest)"


def jdbc_options(warehouse_dir: str) -> dict[str, str]:
    """How Spark's JDBC reader opens the ledger database (``url``, ``driver``, credentials):
    the drivers are installed with the S3A jars (``make jars``, deploy/spark-jars.txt)."""
    url = engine(warehouse_dir).url
    if url.get_backend_name() == "sqlite":
        return {"url": f"jdbc:sqlite:{url.database}", "driver": "org.sqlite.JDBC"}
    if url.get_backend_name() == "postgresql":
        options = {
            "url": f"jdbc:postgresql://{url.host}:{url.port or 5432}/{url.database}",
            "driver": "org.postgresql.Driver",
        }
        options.update({k: v for k, v in (("user", url.username), ("password", url.password)) if v})
        return options
    raise ValueError(f"ledger database {redacted(str(url))}: no JDBC driver for Spark's `sql`")


# ------------------------------------------------------------------------------- fence


def _advisory_key(layer: str) -> int:
    return zlib.crc32(f"backfill_assets/publish/{layer}".encode()) - 2**31


@contextmanager
def _postgres_fence(db: Engine, layer: str, timeout: float) -> Iterator[None]:
    with db.connect() as connection:
        connection.execute(sa.text(f"SET lock_timeout = {int(timeout * 1000)}"))
        try:
            connection.execute(sa.select(sa.func.pg_advisory_lock(_advisory_key(layer))))
        except sa.exc.OperationalError as error:
            raise FenceTimeout(_timeout_message(layer, timeout)) from error
        connection.commit()
        try:
            yield
        finally:
            connection.execute(sa.select(sa.func.pg_advisory_unlock(_advisory_key(layer))))
            connection.commit()


@contextmanager
def _sqlite_fence(db: Engine, layer: str, timeout: float) -> Iterator[None]:
    folder = Path(str(db.url.database)).with_suffix(".fences")
    folder.mkdir(parents=True, exist_ok=True)
    connection = sqlite3.connect(folder / f"{layer}.sqlite", timeout=timeout, isolation_level=None)
    try:
        try:
            connection.execute("BEGIN EXCLUSIVE")
        except sqlite3.OperationalError as error:
            if "locked" not in str(error):  # not another holder: the file system's cause
                raise unavailable(f"sqlite:///{folder / layer}.sqlite", error) from error
            raise FenceTimeout(_timeout_message(layer, timeout)) from error
        yield
    finally:
        connection.close()  # ends the transaction: the fence is released


def _timeout_message(layer: str, timeout: float) -> str:
    return (
        f"layer {layer!r} is being published or rolled back by another run; gave up after "
        f"waiting {timeout:g}s ({settings.LOCK_TIMEOUT_ENV}): let it finish, then retry"
    )


@contextmanager
def fence(warehouse_dir: str, layers: Sequence[str]) -> Iterator[None]:
    """Hold the publish fence of ``layers`` in ``warehouse_dir``'s ledger database."""
    with fence_on(engine(warehouse_dir), layers):
        yield


@contextmanager
def fence_on(db: Engine, layers: Sequence[str]) -> Iterator[None]:
    """Hold the publish fence of ``layers`` (sorted, so two holders cannot deadlock),
    waiting at most ``BACKFILL_LOCK_TIMEOUT_SECONDS`` for each."""
    timeout = settings.lock_timeout_seconds()
    one = _postgres_fence if db.dialect.name == "postgresql" else _sqlite_fence
    with ExitStack() as stack:
        for layer in sorted(set(layers)):
            stack.enter_context(one(db, layer, timeout))
        yield
