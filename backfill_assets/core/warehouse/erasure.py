"""Erasures: a user's data kept out of every replay and purged from every stored version.

Replaying backups brings back whatever they hold, so an erasure request (client_id,
user_id, requested_at, reason) must outlive the data it erases:

1. **Recorded** (``backfill-assets erase``, the ``erase_user`` job) in the append-only
   ``audit.erasures``. The user id itself is never stored: only a salted SHA-256 digest of
   (client_id, user_id) (salt ``BACKFILL_ERASURE_SALT``; set a secret one in production,
   the same wherever the CLI and the code location run).
2. **Honoured by every build from then on**: the raw layer drops the user's lines as it
   reads the backups (payloads by their ``user_id``, malformed lines by the ``"user_id"``
   they carry in their text), so neither the payload tables nor the quarantine ever hold
   them; they are counted per (hour, client) in ``audit.erased_lines``, and the manifest
   reconciliation counts them as accounted for.
3. **A release of every published hour that holds the user**: the job finds those hours in
   every published table and requests one Dagster backfill of them (all layers).
4. **Purged once that release is published**: its publish step deletes every shadow
   version that still holds the user (superseded and unpublished versions, quarantine
   text), records each in ``audit.deletions`` (kind ``erasure``), and a rollback or publish
   that would need one is refused saying why. A version still *published* with the user's
   data (an hour the release held back) is named in the log until a release replaces it.

Backups are read-only and outside this: the backup tool's own retention governs them;
every replay of them honours the erasure.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

from backfill_assets import settings
from backfill_assets.core.warehouse import audit, database, publisher, retention
from backfill_assets.core.warehouse.tables import partition_locations, table_exists

ENV_SALT = settings.ERASURE_SALT_ENV
DEFAULT_SALT = "backfill-assets-erasure"
KIND = audit.ERASURE_KIND
RECORDED, RELEASE_REQUESTED = "recorded", "release_requested"
_DIGEST = re.compile(r"^[0-9a-f]{64}$")
# The user id a malformed line carries in its text (up to the end of the line if cut off).
_USER_IN_TEXT = r'"user_id"\s*:\s*"([^"]*)'
# Tables whose rows name a user, and the column that does ("raw_text": a quarantined line).
PUBLISHED_USER_TABLES = {
    "raw.payloads": "user_id",
    "raw.quarantine": "raw_text",
    "transformed.payloads": "user_id",
    "aggregated.sessions": "user_id",
}
SHADOW_USER_TABLES = {
    "shadow.raw_payloads": "user_id",
    "shadow.raw_quarantine": "raw_text",
    "shadow.transformed_payloads": "user_id",
    "shadow.sessions": "user_id",
}


def salt(env: Mapping[str, str] | None = None) -> str:
    return settings.erasure_salt(DEFAULT_SALT, env)


def user_digest(client_id: int, user_id: str, salt_: str | None = None) -> str:
    """The salted digest an erasure is recorded and matched by."""
    if not user_id:
        raise ValueError("the user id must not be empty")
    text = "\x1f".join((salt_ if salt_ is not None else salt(), str(int(client_id)), user_id))
    return hashlib.sha256(text.encode()).hexdigest()


def validate_digest(value: str) -> str:
    if not _DIGEST.match(value or ""):
        raise ValueError(f"invalid user digest {value!r}: expected 64 lowercase hex digits")
    return value


def user_of(column: str) -> Column:
    """The user a row names: its ``user_id``, or the one in a quarantined line's text."""
    if column == "user_id":
        return F.col("user_id")
    return F.regexp_extract(F.coalesce(F.col(column), F.lit("")), _USER_IN_TEXT, 1)


def digest_of(client_id: Column, user: Column, salt_: str) -> Column:
    return F.sha2(F.concat_ws("\x1f", F.lit(salt_), client_id.cast("string"), user), 256)


def erased(user: Column, digests: Sequence[str], salt_: str) -> Column:
    """True for a row of an erased user (never null)."""
    matched = digest_of(F.col("client_id"), user, salt_).isin(list(digests))
    return F.coalesce(matched & (F.coalesce(user, F.lit("")) != ""), F.lit(False))


def line_erased(wanted: Sequence[str], salt_: str) -> Column:
    """For judged backup lines: True for a line of an erased user (a payload by its
    ``user_id``, a malformed line by the one in its text); a constant without erasures."""
    if not wanted:
        return F.lit(False)
    return erased(F.coalesce(F.col("user_id"), user_of("raw_text")), wanted, salt_)


def digests(spark: SparkSession) -> list[str]:
    """Every recorded erasure's digest (no Spark job when nothing was ever erased)."""
    rows = audit.rows(audit.warehouse_of(spark), audit.ERASURES)
    return sorted({r["user_digest"] for r in rows})


def erased_counts(spark: SparkSession, version: str) -> dict[tuple[str, int], int]:
    """(hour, client_id) -> lines the raw build of ``version`` left out as erased."""
    rows = audit.rows(audit.warehouse_of(spark), audit.ERASED_LINES, {"version": version})
    return {(r["hour"], int(r["client_id"])): int(r["lines"]) for r in rows}


def _rows_of_erased(
    spark: SparkSession,
    tables: Mapping[str, str],
    wanted: Sequence[str],
    salt_: str,
    columns: Sequence[str],
    client_id: int | None = None,
) -> dict[str, list]:
    """Table -> the distinct ``columns`` of its rows that belong to an erased user (one job
    per existing table of ``tables``: table -> the column naming the user)."""
    found = {}
    for table, column in tables.items():
        if not table_exists(spark, table):
            continue
        spark.catalog.refreshTable(table)
        rows = spark.table(table)
        if client_id is not None:  # pruning only: the digest covers the client too
            rows = rows.where(F.col("client_id") == int(client_id))
        found[table] = (
            rows.where(erased(user_of(column), wanted, salt_)).select(*columns).distinct().collect()
        )
    return found


def hours_holding(
    spark: SparkSession, client_id: int, digest: str, salt_: str
) -> dict[str, list[str]]:
    """Published table -> the hours whose published rows hold the user (one job each)."""
    found = _rows_of_erased(spark, PUBLISHED_USER_TABLES, [digest], salt_, ["hour"], client_id)
    return {table: sorted(r["hour"] for r in rows) for table, rows in found.items() if rows}


def releases_requested(spark: SparkSession, release_id: str) -> list[dict]:
    """The erasures that requested ``release_id``."""
    where = {"event": RELEASE_REQUESTED, "release_id": release_id}
    return audit.rows(audit.warehouse_of(spark), audit.ERASURES, where)


def purge(
    spark: SparkSession,
    warehouse_dir: str,
    layers: Sequence[publisher.Layer],
    *,
    run_id: str,
    salt_: str,
) -> tuple[list[retention.Deletion], list[str]]:
    """Delete every shadow version that holds an erased user and is not published, holding
    every layer's publish lock; returns (deletions, published hours still holding one).

    One job per shadow table that names users (whatever the number of versions), one
    listing per published table."""
    with database.fence(warehouse_dir, [layer.name for layer in layers]):
        published = publisher.published_tables(layers)
        publisher.recover(spark, warehouse_dir, published)
        wanted = digests(spark)
        if not wanted:
            return [], []
        live = {
            loc: (table, hour)
            for table in published
            if table_exists(spark, table)
            for hour, loc in partition_locations(spark, table).items()
        }
        found = _rows_of_erased(spark, SHADOW_USER_TABLES, wanted, salt_, ["hour", "version"])
        holding = {(t, r["hour"], r["version"]) for t, rows in found.items() for r in rows}
        if not holding:
            return [], []
        written = audit.rows(
            warehouse_dir,
            audit.SHADOW_PARTITIONS,
            {"table_name": {t for t, _, _ in holding}, "version": {v for _, _, v in holding}},
        )
        gone = audit.deleted(spark)
        deletions, still_live, seen = [], set(), set(gone)
        for r in written:
            if (r["table_name"], r["hour"], r["version"]) not in holding:
                continue
            if r["location"] in live:
                still_live.add(" ".join(live[r["location"]]))
                continue
            if r["location"] in seen:
                continue
            seen.add(r["location"])
            deletions.append(
                retention.Deletion(
                    r["table_name"],
                    r["hour"],
                    r["version"],
                    r["location"],
                    int(r["row_count"] or 0),
                    r["release_id"],
                    KIND,
                    "holds data of an erased user (audit.erasures)",
                )
            )
        deletions = retention.sized(spark, deletions)
        retention.delete(spark, warehouse_dir, deletions, run_id=run_id)
    return deletions, sorted(still_live)
