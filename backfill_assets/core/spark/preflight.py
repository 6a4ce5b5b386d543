"""Checks of what a command or a run needs, made before Spark starts (one line each).

Without them a wrong path or a busy metastore surfaces after 70-100 s as "Unable to
instantiate SessionHiveMetaStoreClient" deep in Spark's log. Each check raises
``PreflightError`` with one line naming the cause and what to do:

- ``DATA_ROOT`` / ``DAGSTER_HOME`` must be folders this process can create and write in
  (a probe file is created and removed; permission bits alone do not tell, e.g. for root);
- the embedded Derby metastore (``$DATA_ROOT/metastore_db``) must not be held by another
  process: Derby holds an exclusive POSIX lock on ``metastore_db/dbex.lck`` while a JVM
  has the database open (released by the kernel when that process dies, so a crash
  leaves no stale lock); the holder's PID is read from ``/proc/locks`` where available,
  and a holder that is ending (being killed, exiting, or a driver JVM whose Python process
  was killed and which exits at the end of its input) is waited for, not named;
- ``BACKUP_ROOT`` must exist and hold ``raw/`` for commands that read backups.

Called by the CLI (``cli.main``, per subcommand, see ``COMMAND_NEEDS``) and by the Spark
resource before a run starts its session (``core.spark.session.SparkResource``).
"""

from __future__ import annotations

import errno
import fcntl
import os
import select
import signal
import sys
import tempfile
from pathlib import Path

from backfill_assets.core.warehouse import ledger_file
from backfill_assets.settings import Settings, is_uri, ledger_url, metastore_dir

DATA = "data"  # DATA_ROOT writable
METASTORE = "metastore"  # the embedded metastore free (implies DATA)
DAGSTER = "dagster"  # DAGSTER_HOME writable
BACKUPS = "backups"  # BACKUP_ROOT exists with raw/
LEDGER = "ledger"  # a SQLite ledger not missing (after it published), damaged or rolled back

# What each subcommand needs before it starts (commands not listed need nothing).
# backfill, publish and rollback submit to Dagster and wait: their runs queue behind a run
# holding the metastore (each run checks it when its session starts), so they only need
# the locations to be usable.
COMMAND_NEEDS: dict[str, frozenset[str]] = {
    "backfill": frozenset({DATA, DAGSTER, BACKUPS, LEDGER}),
    "publish": frozenset({DATA, DAGSTER, LEDGER}),
    "approve": frozenset({LEDGER}),
    "sql": frozenset({METASTORE, LEDGER}),
    "rollback": frozenset({DATA, DAGSTER, LEDGER}),
    "cancel": frozenset({DATA, DAGSTER, LEDGER}),
    "resume": frozenset({DATA, DAGSTER, LEDGER}),
    "vacuum": frozenset({DATA, DAGSTER, LEDGER}),
    "erase": frozenset({LEDGER}),
    "verify": frozenset({METASTORE, LEDGER}),
    "halfcut": frozenset({METASTORE}),
    "reconcile": frozenset({DAGSTER, BACKUPS}),
    "report": frozenset({DATA, DAGSTER}),
    "demo": frozenset({METASTORE, DAGSTER}),
}
DERBY_LOCK = "dbex.lck"


class PreflightError(Exception):
    """Something the operator must fix before the command or run can start (one line)."""


def _reason(exc: OSError, path: str) -> str:
    text = exc.strerror or type(exc).__name__
    where = exc.filename if exc.filename and os.fspath(exc.filename) != path else None
    return f"{text}: {where}" if where else text


def check_writable(variable: str, path: str, holds: str) -> None:
    """``path`` is a folder this process can create and write a file in."""
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".preflight-"):
            pass
    except OSError as exc:
        raise PreflightError(
            f"{variable}={path} is not writable ({_reason(exc, path)}); it holds {holds}: "
            f"set {variable} to a folder you can write"
        ) from None


def check_data_root(data_root: str) -> None:
    """``DATA_ROOT`` (and its metastore folder, if present) can be written."""
    if is_uri(data_root):
        return
    check_writable("DATA_ROOT", data_root, "the warehouse and the embedded metastore")
    metastore = metastore_dir(data_root)
    # No probe file inside Derby's own folder: the permission bits tell for a non-root user.
    if Path(metastore).exists() and not os.access(metastore, os.W_OK | os.X_OK):
        raise PreflightError(
            f"DATA_ROOT={data_root}: the embedded metastore {metastore} is not writable by "
            f"this user: fix its permissions or point DATA_ROOT at another folder"
        )


def _lock_holders(path: Path) -> list[int]:
    """PIDs holding a POSIX lock on ``path`` (Linux ``/proc/locks``; [] elsewhere)."""
    try:
        st = path.stat()
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return []
    ident = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids = []
    for line in lines:
        fields = line.split()
        if ident in fields and "->" not in fields:
            pids.append(int(fields[fields.index(ident) - 1]))
    return pids


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def _command_line(pid: int, limit: int | None = 100) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    text = " ".join(raw.decode(errors="replace").replace("\0", " ").split())
    return text if limit is None or len(text) <= limit else text[: limit - 3] + "..."


_PF_EXITING = 0x4  # /proc/<pid>/stat flags: the process is exiting
_PYSPARK_DRIVER = "pyspark-shell"  # the application PySpark's launcher names for its JVM


def _writes_to(pid: int, pipe: str) -> bool:
    """``pid`` has ``pipe`` (``pipe:[inode]``) open for writing; a process whose files this
    one may not list (another user's) might: True; one that has exited meanwhile: False."""
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except PermissionError:
        return True
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(fd) != pipe:
                continue
            flags = Path(f"/proc/{pid}/fdinfo/{fd.name}").read_text().split("flags:", 1)[1]
        except (OSError, IndexError):
            continue  # closed meanwhile
        if int(flags.split()[0], 8) & (os.O_WRONLY | os.O_RDWR):
            return True
    return False


def _input_orphaned(pid: int) -> bool:
    """``pid`` is a PySpark driver JVM whose Python process is gone (killed): no process
    can write to its standard input any more, and it exits on its own at the end of it
    (its gateway server stops, its shutdown hooks run), within a second or two."""
    try:
        pipe = os.readlink(f"/proc/{pid}/fd/0")
    except OSError:
        return False
    if not pipe.startswith("pipe:") or _PYSPARK_DRIVER not in _command_line(pid, limit=None):
        return False
    others = (p for p in Path("/proc").iterdir() if p.name.isdigit() and p.name != str(pid))
    return not any(_writes_to(int(other.name), pipe) for other in others)


def _await_exit_if_ending(pid: int, timeout: float = 30.0) -> bool:
    """If ``pid`` is ending, wait for it to exit; True once it has. Ending: being killed
    (SIGKILL pending), already exiting (the kernel drops its locks only after unmapping
    its memory, which takes a while for a JVM), or a driver JVM whose Python process died
    (``_input_orphaned``). A process that is not ending is not waited for."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        flags = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[6])
    except (OSError, ValueError, IndexError):
        return True  # already gone
    pending = 0
    for line in status.splitlines():
        if line.startswith(("SigPnd:", "ShdPnd:")):
            pending |= int(line.split()[1], 16)
    killed = pending & (1 << (signal.SIGKILL - 1)) or flags & _PF_EXITING
    if not (killed or _input_orphaned(pid)):
        return False
    try:
        exited = os.pidfd_open(pid)
    except OSError:
        return True  # already gone
    try:
        return bool(select.select([exited], [], [], timeout)[0])
    finally:
        os.close(exited)


def _describe(pid: int) -> str:
    parent = _parent(pid)
    started_by = f", started by PID {parent}: {_command_line(parent)}" if parent else ""
    return f"PID {pid}{started_by}"


def metastore_in_use(data_root: str, host: int | None = None) -> str | None:
    """Who holds the embedded metastore of ``data_root`` (a description), or None if free.

    A lock held by this process or by its own JVM (a session already running here), or by
    the driver JVM ``host`` it attaches to, does not count: that session keeps using the
    metastore it has open.
    """
    lock = Path(metastore_dir(data_root)) / DERBY_LOCK
    if not lock.exists():
        return None
    ours = {os.getpid(), *([host] if host else [])}
    others = [p for p in _lock_holders(lock) if p not in ours and _parent(p) not in ours]
    for pid in others:
        if _await_exit_if_ending(pid):
            continue  # it was ending and is gone now (with its lock)
        return _describe(pid)
    try:
        fd = os.open(lock, os.O_RDWR)
    except OSError:
        return None  # cannot tell; the DATA_ROOT check names unwritable folders
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EAGAIN):
            return "another process" if not _lock_holders(lock) else None
        return None
    finally:
        os.close(fd)  # releases the probe lock (this process held no other lock on it)
    return None


def _session_running_here() -> bool:
    """A Spark session is already running in this process (it keeps its metastore)."""
    pyspark = sys.modules.get("pyspark")
    return bool(pyspark and pyspark.SparkContext._active_spark_context is not None)


def check_metastore(data_root: str, host: int | None = None) -> None:
    """The embedded metastore of ``data_root`` is not held by another process than the
    driver JVM ``host`` (when given)."""
    if is_uri(data_root) or _session_running_here():
        return
    holder = metastore_in_use(data_root, host)
    if holder:
        raise PreflightError(
            f"the embedded metastore {metastore_dir(data_root)} is in use by {holder}; "
            f"it serves one process at a time: wait for that process to finish (or stop "
            f"it), or point DATA_ROOT at another folder"
        )


def check_ledger(data_root: str) -> None:
    """The SQLite ledger of ``data_root`` is not missing while it published, damaged or
    rolled back (``core.warehouse.ledger_file``); a database server is checked when opened."""
    try:
        url = ledger_url(f"{data_root}/warehouse")
    except ValueError:
        return  # a URI DATA_ROOT without BACKFILL_LEDGER_URL: named when the ledger opens
    db = ledger_file.sqlite_file(url)
    if db is None:
        return
    try:
        ledger_file.check(db)
    except ledger_file.LedgerDamaged as exc:
        raise PreflightError(str(exc)) from None


def before_spark(data_root: str, host: int | None = None) -> None:
    """What a local Spark session needs: a writable DATA_ROOT, a free metastore, and a
    ledger that is not damaged (every run's work ends in it). ``host``: the pid of the
    driver JVM the session attaches to (``driver_host``), whose metastore is its own."""
    check_ledger(data_root)
    check_data_root(data_root)
    check_metastore(data_root, host)


def check_dagster_home(dagster_home: str) -> None:
    check_writable("DAGSTER_HOME", dagster_home, "the Dagster instance (runs, event log)")


def check_backup_root(backup_root: str) -> None:
    """``BACKUP_ROOT`` exists and holds ``raw/`` (local trees; object stores are listed
    by the command itself)."""
    if is_uri(backup_root):
        return
    root = Path(backup_root)
    if not root.is_dir():
        raise PreflightError(
            f"BACKUP_ROOT={backup_root} does not exist (or is not a folder): point "
            f"BACKUP_ROOT at a backup tree (<root>/raw/date=YYYY-MM-DD/hour=HH/client_id=N)"
        )
    if not (root / "raw").is_dir():
        raise PreflightError(
            f"BACKUP_ROOT={backup_root} has no raw/ folder, so it is not a backup tree: "
            f"point BACKUP_ROOT at the folder that holds raw/date=YYYY-MM-DD/..."
        )


def check(settings: Settings, needs: frozenset[str]) -> None:
    """Run the checks of ``needs`` (``LEDGER``, ``DATA``, ``METASTORE``, ``DAGSTER``,
    ``BACKUPS``): the ledger first, so a damaged one is named whatever else is wrong."""
    if LEDGER in needs:
        check_ledger(settings.data_root)
    if BACKUPS in needs:
        check_backup_root(settings.backup_root)
    if DATA in needs or METASTORE in needs:
        check_data_root(settings.data_root)
    if METASTORE in needs:
        check_metastore(settings.data_root)
    if DAGSTER in needs:
        check_dagster_home(settings.dagster_home)


def needs_of(command: str, options: dict[str, object]) -> frozenset[str]:
    """What ``command`` needs, given its parsed options (some start Spark only on request)."""
    needs = set(COMMAND_NEEDS.get(command, frozenset()))
    if command == "reconcile" and options.get("source") == "ledger":
        needs.update({METASTORE, LEDGER})
    if command == "report" and options.get("diff"):
        needs.add(METASTORE)
    return frozenset(needs)
