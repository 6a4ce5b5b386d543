"""The SQLite ledger file's own integrity, checked before anything opens it read-write.

The ledger records what is published; a ledger that disappeared, was damaged or went back
to an earlier state while the metastore still holds what it published must stop every
command and run, never be replaced by an empty one or written into. So before a process
opens a SQLite ledger (``database.engine``, the CLI's preflight, the sensor, each publish):

- **missing**: allowed only on first use. Every committed publish or rollback records the
  ledger's newest publication row in a marker beside it (``ledger.sqlite`` ->
  ``ledger.published``, not matched by ``ledger.sqlite*``): a missing ledger with a marker
  is refused (an empty one would forget what is published), without one it is created;
- **damaged**: not a SQLite header, empty while the marker says it published, a stale
  rollback journal beside it (a WAL ledger never writes one; SQLite would replay it and
  roll the file back), or failing SQLite's ``quick_check`` (read-only: a stale ``-wal`` is
  read, not checkpointed into the file);
- **rolled back**: its newest publication row older than the marker's (a stale journal
  replayed, a copy restored from before the last publish).

A refusal is ``LedgerDamaged``: one line naming the file, what is wrong and what to do
(docs/runbook.md, "The ledger database is missing or damaged"). Standard library only: the
CLI checks before it imports anything heavy.
"""

from __future__ import annotations

import json
import os
import sqlite3
from contextlib import closing
from pathlib import Path
from urllib.parse import quote

MARKER_SUFFIX = ".published"
HEADER = b"SQLite format 3\x00"
_WAL_MODE = b"\x02\x02"  # header bytes 18-19 of a database in WAL mode
RUNBOOK_SECTION = "docs/runbook.md, 'The ledger database is missing or damaged'"
WHAT_TO_DO = (
    f"restore it and its {MARKER_SUFFIX} marker from the newest backup, then run "
    f"`backfill-assets verify` ({RUNBOOK_SECTION})"
)


class LedgerUnavailable(RuntimeError):
    """The ledger database cannot be reached or written; the message names it and why."""


class LedgerDamaged(LedgerUnavailable):
    """The ledger database is missing, damaged or older than what it published: nothing
    may read or write it until it is restored (the message names the file and says how)."""


def sqlite_file(url: str) -> Path | None:
    """The file of a ``sqlite:///`` ledger URL (None for another database)."""
    return Path(url.removeprefix("sqlite:///")) if url.startswith("sqlite:///") else None


def marker_of(db: Path) -> Path:
    """The marker beside a ledger file: its newest publication row when it last published."""
    return db.with_suffix(MARKER_SUFFIX)


def recorded(db: Path) -> int | None:
    """The newest publication row the marker recorded (None: nothing published yet)."""
    marker = marker_of(db)
    try:
        return int(json.loads(marker.read_text())["last_publication_row"])
    except (FileNotFoundError, NotADirectoryError):  # a folder that is not: named elsewhere
        return None
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise LedgerDamaged(
            f"ledger marker {marker} cannot be read ({type(error).__name__}: {error}); {WHAT_TO_DO}"
        ) from None


def mark(db: Path, last_row: int | None) -> None:
    """Record ``last_row`` (the ledger's newest publication row, just committed) in the
    marker, unless it holds a newer one (two runs committing at once: the lower value is
    the safe one to lose). Written to a temporary file and renamed: never half written."""
    if not last_row or (recorded(db) or 0) >= last_row:
        return
    marker = marker_of(db)
    partial = marker.with_name(f".{marker.name}.{os.getpid()}")
    partial.write_text(json.dumps({"ledger": str(db), "last_publication_row": last_row}) + "\n")
    os.replace(partial, marker)


def check(db: Path) -> None:
    """Refuse (``LedgerDamaged``) a ledger file that is missing while it published, damaged,
    or older than its marker; a missing file on first use passes (it will be created)."""
    last_marked = recorded(db)
    if not db.exists():
        if last_marked is None:
            return
        raise LedgerDamaged(
            f"ledger database {db} is missing, but it recorded publications (up to row "
            f"{last_marked}, says {marker_of(db).name}): an empty ledger would forget what "
            f"is published; {WHAT_TO_DO}"
        )
    problem = _file_problem(db, last_marked) or _database_problem(db, last_marked)
    if problem:
        raise LedgerDamaged(
            f"ledger database {db} {problem}: nothing was read or written; {WHAT_TO_DO}"
        )


def check_integrity(db: Path) -> None:
    """SQLite's full ``integrity_check`` of the ledger file, read-only (``verify``): refused
    as ``LedgerDamaged`` naming the first problem it finds."""
    check(db)
    uri = f"file:{quote(str(db))}?mode=ro"
    try:
        with closing(sqlite3.connect(uri, uri=True, timeout=60)) as connection:
            verdict = _one_line(connection.execute("PRAGMA integrity_check(1)").fetchone()[0])
    except sqlite3.DatabaseError as error:
        verdict = str(error)
    if verdict != "ok":
        raise LedgerDamaged(
            f"ledger database {db} fails SQLite's integrity check ({verdict}): {WHAT_TO_DO}"
        )


def _file_problem(db: Path, last_marked: int | None) -> str | None:
    if not db.is_file():
        return None  # a folder, a device: the read-write open names it (``unavailable``)
    with db.open("rb") as file:
        head = file.read(100)
    if not head:
        return "is empty, but it recorded publications" if last_marked else None
    if not head.startswith(HEADER):
        return "is not a SQLite database (its header is damaged)"
    journal = db.with_name(db.name + "-journal")
    if head[18:20] == _WAL_MODE and journal.exists() and journal.stat().st_size > 0:
        return (
            f"has a stale rollback journal {journal.name} beside it (a ledger in WAL mode "
            f"never writes one; opening the ledger would roll it back to an earlier state)"
        )
    return None


def _database_problem(db: Path, last_marked: int | None) -> str | None:
    """SQLite's quick check and the newest publication row, on a read-only connection."""
    uri = f"file:{quote(str(db))}?mode=ro"
    try:
        with closing(sqlite3.connect(uri, uri=True, timeout=60)) as connection:
            verdict = _one_line(connection.execute("PRAGMA quick_check(1)").fetchone()[0])
            if verdict != "ok":
                return f"fails SQLite's integrity check ({verdict})"
            last = _last_publication_row(connection)
    except sqlite3.OperationalError as error:
        if "readonly" in str(error):  # a hot journal a read-only connection cannot replay
            return f"needs a journal replayed to be read ({error})"
        return None  # locked, unreadable: the read-write open names it (``unavailable``)
    except sqlite3.DatabaseError as error:  # malformed, not a database
        return f"is damaged ({error})"
    if last_marked is None:
        mark(db, last)  # a ledger that published before markers existed
        return None
    if (last or 0) < last_marked:
        return (
            f"is older than what it published: its newest publication row is {last or 0}, "
            f"but row {last_marked} was committed ({marker_of(db).name}; a stale journal "
            f"replayed, or a copy from before the last publish)"
        )
    return None


def _one_line(verdict: str) -> str:
    """SQLite's verdict on one line (it reports "*** in database main ***" on a line of its
    own before the problem)."""
    return " ".join(str(verdict).replace("*** in database main ***", "").split())


def _last_publication_row(connection: sqlite3.Connection) -> int | None:
    try:
        return connection.execute("SELECT max(_row) FROM publications").fetchone()[0]
    except sqlite3.OperationalError:  # a new file: no schema yet
        return None
