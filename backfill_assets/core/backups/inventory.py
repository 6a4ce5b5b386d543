"""What the backup tree holds for a set of hours: folders, manifests, files, problems.

The inventory is taken on the driver (listing + small manifest reads, no Spark) and is the
single source for three things: which files Spark reads, what the reconciliation check
expects (manifest ``records``), and which hours cannot be trusted (missing, open, or
inconsistent folders), each problem named with its folder.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from backfill_assets.core.backups.contract import MANIFEST_NAME, PART_FILE_SUFFIX, is_int
from backfill_assets.core.backups.store import REGULAR, BackupStore, Entry, NotRegularFile
from backfill_assets.core.hours import InvalidHourError, backup_hour_path, parse_hour
from backfill_assets.settings import MAX_MANIFEST_BYTES_ENV, MAX_PART_EXPANDED_BYTES_ENV, ReadLimits

# Names of the contract, matched whole (``fullmatch``: no trailing newline) and in ASCII
# digits only (``\d`` would take ``hour=٠٣`` for ``hour=03``).
_CLIENT_DIR = re.compile(r"client_id=([0-9]{1,18})")
_DATE_DIR = re.compile(r"date=([0-9]{4}-[0-9]{2}-[0-9]{2})")
_HOUR_DIR = re.compile(r"hour=([0-9]{2})")
_PART_FILE = re.compile(r"part-[0-9]{5}" + re.escape(PART_FILE_SUFFIX))
_SHA256 = re.compile(r"[0-9a-fA-F]{64}")
_FIX = "its files are read by no hour: rename it to the contract's layout or remove it"


@dataclass(frozen=True)
class PartFile:
    rel_path: str
    name: str
    records: int
    sha256: str
    size: int


@dataclass(frozen=True)
class Folder:
    """One (hour, client) folder of the tree."""

    hour: str
    client_id: int
    rel_path: str
    closed: bool
    records: int | None  # manifest records, None when the folder has no usable manifest
    files: tuple[PartFile, ...]  # the manifest's files that are present (what Spark reads)
    manifest_sha256: str | None
    problems: tuple[str, ...]


@dataclass
class HourInventory:
    hour: str
    exists: bool
    folders: list[Folder] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    # Folders beside this hour's that follow no name of the contract (``hour=24``,
    # ``date=2026-13-01``): their lines could belong here and are read by nobody.
    stray: list[str] = field(default_factory=list)

    @property
    def all_problems(self) -> list[str]:
        return self.problems + self.stray + [p for f in self.folders for p in f.problems]

    @property
    def expected_records(self) -> int:
        return sum(f.records or 0 for f in self.folders)

    def fingerprint(self) -> str:
        """Digest of the hour's manifests: changes when a manifest appears or changes."""
        parts = sorted(f"{f.client_id}:{f.manifest_sha256}" for f in self.folders)
        return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def date_of_folder(name: str) -> str | None:
    """``date=YYYY-MM-DD`` (a real calendar date) -> ``YYYY-MM-DD``; None otherwise."""
    match = _DATE_DIR.fullmatch(name)
    if not match:
        return None
    try:
        datetime.strptime(match.group(1), "%Y-%m-%d")
    except ValueError:
        return None
    return match.group(1)


def hour_of_folder(name: str) -> str | None:
    """``hour=HH`` with HH in 00..23 -> ``HH``; None otherwise (``hour=24``, ``hour=7``)."""
    match = _HOUR_DIR.fullmatch(name)
    return match.group(1) if match and int(match.group(1)) < 24 else None


def client_of_folder(name: str) -> int | None:
    """``client_id=<int>`` in canonical form (ASCII digits, no leading zero) -> the id;
    None otherwise (``client_id=007``, ``client_id=٧``, ``client_id=x``)."""
    match = _CLIENT_DIR.fullmatch(name)
    if not match or str(int(match.group(1))) != match.group(1):
        return None
    return int(match.group(1))


def _hours_of_date(store: BackupStore, date: str) -> list[str]:
    """The hour keys of ``raw/date=<date>``'s well-named hour folders (the others are
    reported by the inventory as stray folders of the date's hours)."""
    hours = []
    for entry in store.list_dir(f"raw/date={date}"):
        hh = hour_of_folder(entry)
        if hh is not None:
            try:
                parse_hour(f"{date}T{hh}")
            except InvalidHourError:
                continue
            hours.append(f"{date}T{hh}")
    return sorted(hours)


def backup_bounds(store: BackupStore) -> tuple[str, str] | None:
    """First and newest hour folders of the tree (a few listings), None if it is empty."""
    dates = sorted(d for e in store.list_dir("raw") if (d := date_of_folder(e)))
    earliest = next((hours[0] for d in dates if (hours := _hours_of_date(store, d))), None)
    newest = next((hours[-1] for d in reversed(dates) if (hours := _hours_of_date(store, d))), None)
    return (earliest, newest) if earliest and newest else None


def unique_files(folders: Iterable[Folder]) -> list[tuple[Folder, PartFile]]:
    """Each part file of ``folders`` once, with its folder (the first entry of a path): a
    manifest that lists a file twice is its folder's problem, never a file read twice."""
    seen: set[str] = set()
    out = []
    for folder in folders:
        for part in folder.files:
            if part.rel_path not in seen:
                seen.add(part.rel_path)
                out.append((folder, part))
    return out


def stray_folders(store: BackupStore, dates: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """Entries of the tree that no hour can be read from, each with what to do:
    entries of ``raw/`` that are not ``date=YYYY-MM-DD`` folders (every hour's problem),
    and, per date of ``dates``, entries of ``raw/date=D/`` that are not ``hour=00..23``."""
    tree = [
        f"raw/{entry}: not a date folder (expected date=YYYY-MM-DD, a real date); {_FIX}"
        for entry in store.list_dir("raw")
        if date_of_folder(entry) is None
    ]
    per_date = {
        date: [
            f"raw/date={date}/{entry}: not an hour folder (expected hour=00..hour=23); {_FIX}"
            for entry in store.list_dir(f"raw/date={date}")
            if hour_of_folder(entry) is None
        ]
        for date in dates
    }
    return tree, per_date


def _not_regular(entry: Entry) -> str:
    link = f" to {entry.target}" if entry.target else ""
    return f"a {entry.kind}{link}, not a regular file"


def _refused_manifest(store: BackupStore, rel: str, limit: int) -> str | None:
    """Why the manifest ``rel`` is not opened (told by its lstat), or None."""
    entry = store.entry(rel)
    if entry.kind != REGULAR:
        return f"{rel}: {_not_regular(entry)}; not opened"
    if entry.size is not None and entry.size > limit:
        return (
            f"{rel}: {entry.size} bytes, past the limit of {limit} bytes "
            f"({MAX_MANIFEST_BYTES_ENV}); not opened"
        )
    return None


def _read_manifest(
    store: BackupStore, folder_rel: str, limit: int
) -> tuple[dict | None, bytes | None, str | None]:
    rel = f"{folder_rel}/{MANIFEST_NAME}"
    try:
        refused = _refused_manifest(store, rel, limit)
        if refused:
            return None, None, refused
        raw = store.read_bytes(rel, limit)
    except FileNotFoundError:
        return None, None, None
    except NotRegularFile as exc:  # replaced by a link or a FIFO since its lstat
        return None, None, f"{rel}: {exc.strerror}; refused"
    except ValueError as exc:  # grown past the limit since its lstat
        return None, None, f"{rel}: {exc} ({MAX_MANIFEST_BYTES_ENV}); refused"
    try:
        manifest = json.loads(raw)
        if not isinstance(manifest, dict):
            raise ValueError("not a JSON object")
        return manifest, raw, None
    except ValueError as exc:
        return None, raw, f"{folder_rel}/{MANIFEST_NAME}: unreadable manifest ({exc})"
    except RecursionError:  # arrays or objects nested deeper than Python's parser goes
        return None, raw, f"{folder_rel}/{MANIFEST_NAME}: unreadable manifest (nested too deep)"


# The largest count or size a manifest may state: a 64-bit signed integer, what Spark and
# the ledger store (a larger one would overflow them, not describe a file).
MAX_MANIFEST_NUMBER = 2**63 - 1


def _count(value: object, most: int = MAX_MANIFEST_NUMBER, what: str = "records") -> int:
    """A manifest count: a JSON integer in ``0..most`` (not 12.9, "12", true, 1e400),
    else ValueError."""
    if not is_int(value) or not 0 <= value <= most:  # type: ignore[operator]
        raise ValueError(f"{what} must be an integer from 0 to {most}, got {str(value)[:40]}")
    return value  # type: ignore[return-value]


def _size(entry: dict) -> int:
    """A listed file's ``bytes`` (-1 when the manifest gives none), bounded like a count."""
    return _count(entry["bytes"], what="bytes") if "bytes" in entry else -1


def _refused_part(store: BackupStore, rel: str, listed_bytes: int, limit: int) -> str | None:
    """Why the part file ``rel`` is not read (told by its lstat, before any open): not a
    regular file, larger than its manifest says, or past the limit; None if it may be."""
    entry = store.entry(rel)
    if entry.kind != REGULAR:
        return f"{rel}: {_not_regular(entry)}; not opened"
    if entry.size is None:
        return None
    if 0 <= listed_bytes < entry.size:
        return (
            f"{rel}: {entry.size} bytes, more than its manifest says ({listed_bytes}); not opened"
        )
    if entry.size > limit:
        return (
            f"{rel}: {entry.size} bytes, past the limit of {limit} bytes "
            f"({MAX_PART_EXPANDED_BYTES_ENV}); not opened"
        )
    return None


def _folder(store: BackupStore, hour: str, client_id: int, rel: str, limits: ReadLimits) -> Folder:
    outside = store.outside_tree(rel)
    if outside:  # a link out of the tree: nothing of it is listed or opened
        problem = f"{rel}: outside the backup tree (it is {outside}); not read"
        return Folder(hour, client_id, rel, False, None, (), None, (problem,))
    names = store.list_dir(rel)
    present = {n for n in names if _PART_FILE.fullmatch(n)}
    problems = [
        f"{rel}/{n}: unexpected file in backup folder"
        for n in names
        if n not in present and n != MANIFEST_NAME
    ]
    manifest, raw, error = (
        _read_manifest(store, rel, limits.manifest_bytes)
        if MANIFEST_NAME in names
        else (None, None, None)
    )
    if error:
        problems.append(error)
    if manifest is None:
        if not error:
            problems.append(
                f"{rel}: no {MANIFEST_NAME} "
                "(folder still being written, or the backup tool crashed)"
            )
        return Folder(hour, client_id, rel, False, None, (), None, tuple(problems))

    files: list[PartFile] = []
    listed: set[str] = set()
    try:
        if not is_int(manifest.get("client_id")) or manifest.get("client_id") != client_id:
            problems.append(f"{rel}: manifest client_id {manifest.get('client_id')!r} != folder")
        expected_hour = f"{parse_hour(hour):%Y-%m-%dT%H}:00:00Z"
        if manifest.get("hour") != expected_hour:
            problems.append(f"{rel}: manifest hour {manifest.get('hour')!r} != {expected_hour}")
        for entry in manifest["files"]:
            # a file's lines each end in a newline: no more of them than its expanded bytes
            records = _count(entry["records"], limits.part_expanded_bytes)
            name, sha = entry["name"], entry["sha256"]
            if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
                raise ValueError(f"sha256 of {name!r} is not 64 hex digits: {sha!r}")
            if name in listed:
                problems.append(f"{rel}/{name}: listed more than once in the manifest (read once)")
                continue
            listed.add(name)
            if name not in present:
                problems.append(f"{rel}/{name}: listed in the manifest but missing")
                continue
            size = _size(entry)
            refused = _refused_part(store, f"{rel}/{name}", size, limits.part_expanded_bytes)
            if refused:
                problems.append(refused)
                continue
            files.append(PartFile(f"{rel}/{name}", name, records, sha.lower(), size))
        records = _count(manifest["records"])
        listed_records = sum(_count(e["records"]) for e in manifest["files"])
        if records != listed_records:
            problems.append(
                f"{rel}: manifest records {records} != sum of its files {listed_records}"
            )
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        problems.append(f"{rel}/{MANIFEST_NAME}: malformed manifest ({exc})")
        return Folder(hour, client_id, rel, True, None, (), None, tuple(problems))
    problems.extend(
        f"{rel}/{n}: part file not listed in the manifest" for n in sorted(present - listed)
    )
    sha = hashlib.sha256(raw or b"").hexdigest()
    return Folder(hour, client_id, rel, True, records, tuple(files), sha, tuple(problems))


def take_inventory(
    store: BackupStore, hours: list[str], limits: ReadLimits | None = None
) -> dict[str, HourInventory]:
    """Inventory of ``hours`` (validated keys) in the tree of ``store``.

    Nothing but regular files inside the tree is opened: a folder that links out of the
    tree, a manifest or part file that is not a regular file (a link, a FIFO) or is past
    its limit (``limits``, default ``ReadLimits.from_env()``), and a part file larger than
    its manifest says are problems of their hour, named, never opened.

    Folders that follow no name of the contract (``stray_folders``) are problems of every
    hour they could hold lines of: an entry of ``raw/date=D/`` of the hours of D, an entry
    of ``raw/`` of every hour (its date cannot be told).
    """
    limits = limits or ReadLimits.from_env()
    result: dict[str, HourInventory] = {}
    tree_stray, date_stray = stray_folders(
        store, sorted({f"{parse_hour(h):%Y-%m-%d}" for h in hours})
    )
    for hour in hours:
        hour_rel = f"raw/{backup_hour_path(hour)}"
        entries = store.list_dir(hour_rel)
        inventory = HourInventory(
            hour=hour,
            exists=bool(entries),
            stray=tree_stray + date_stray[f"{parse_hour(hour):%Y-%m-%d}"],
        )
        if not entries:
            inventory.problems.append(
                f"{hour_rel}: no backup folder for hour {hour} (backup outage?)"
            )
        for entry in entries:
            client_id = client_of_folder(entry)
            if client_id is None:
                inventory.problems.append(
                    f"{hour_rel}/{entry}: unexpected entry (not client_id=<int>, ASCII digits "
                    f"without leading zeros); {_FIX}"
                )
                continue
            inventory.folders.append(_folder(store, hour, client_id, f"{hour_rel}/{entry}", limits))
        result[hour] = inventory
    return result
