"""Write a synthetic backup tree that follows ``shared/backup-format.md``, with its ground truth.

``generate_backups`` simulates each client's visitors (``world.simulate_client``), writes
every (hour, client) folder of the range (part files, then the manifest), salts the lines
with malformed ones, and records the ground truth under ``<root>/_truth``. Work is split
by client across processes; each client draws from its own random stream seeded with
``(seed, client_id)`` and results are merged in client order, so the same arguments give a
byte-identical tree whatever the worker count.

``land_held_back`` moves folders that were held back (``hold_back``) into ``raw/``, the way
a late upload of the backup tool would land.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import multiprocessing
import os
import re
import shutil
import signal
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import zstandard

from backfill_assets.core.backups.contract import (
    DEVICES,
    EVENT_TYPES,
    MANIFEST_NAME,
    PART_FILE_SUFFIX,
)
from backfill_assets.core.hours import InvalidHourError, backup_hour_path, hour_range, parse_hour
from backfill_assets.settings import is_uri
from backfill_assets_dev.generator import truth
from backfill_assets_dev.generator.junk import ENCODING_ERRORS, malformed_line
from backfill_assets_dev.generator.world import (
    EXTRA_FRAGMENTS,
    HOUR_MS,
    LATE_DAYS,
    LATE_HOURS,
    PAYLOADS_PER_USER_HOUR,
    ClientWorld,
    WorldShape,
    client_rng,
    json_strings,
    simulate_client,
)

logger = logging.getLogger(__name__)

RAW_DIR = "raw"
HELD_BACK_DIR = "_held_back"
TRUTH_DIR = truth.TRUTH_DIR
ZSTD_LEVEL = 3
# A redelivery this long after the first delivery (a consumer restart) keeps the first
# delivery's received_at; quicker re-sends carry their own.
REDELIVERY_KEEPS_MS = 300_000
STREAM_CHUNK = 1 << 20
# Below this many expected payloads the work runs in-process (no pool start-up).
_PARALLEL_THRESHOLD = 50_000
_HOLD_BACK_SPEC = re.compile(r"^(?P<hour>[^/]+)(?:/(?P<client>\d+))?$")
_FOLDER = re.compile(r"^date=\d{4}-\d{2}-\d{2}/hour=\d{2}/client_id=\d+$")
_FOLDER_PREFIX = re.compile(r"^date=\d{4}-\d{2}-\d{2}(/hour=\d{2}(/client_id=\d+)?)?$")
_PART_NAME = re.compile(r"^part-\d{5}" + re.escape(PART_FILE_SUFFIX) + "$")
# Written at the root of every generated tree: ``--force`` and ``land`` need it.
MARKER_NAME = "_GENERATED_BY_BACKFILL_ASSETS"
MARKER_TEXT = (
    "This backup tree was written by `backfill-assets generate` (synthetic data).\n"
    "`generate --force` and `land` act only on trees holding this file.\n"
)


class GeneratorError(ValueError):
    """Bad generation arguments or an unsafe target; the message says what to change."""


class BackupTreeExistsError(GeneratorError):
    """The target already holds a backup tree (backups are read-only input)."""


@dataclass
class GenerationSummary:
    """What ``generate_backups`` wrote. Line counts are of the tree (raw/ and _held_back/)."""

    start: str
    hours: int
    clients: int
    users_per_client: int
    seed: int
    folders: int = 0
    files: int = 0
    bytes: int = 0
    payloads: int = 0  # distinct valid payloads generated (the truth)
    payloads_in_tree: int = 0  # ... whose first delivery is in the tree
    lines: int = 0  # all lines written, malformed included
    malformed: int = 0
    duplicates: int = 0  # lines that re-deliver a payload already written
    # valid lines whose received_at lies outside their folder's hour (valid, counted)
    received_outside_hour: int = 0
    late: int = 0  # payloads in the tree delivered 1 h or more after their event
    late_hours: int = 0
    late_days: int = 0
    clock_ahead: int = 0  # payloads in the tree whose event_time is after received_at
    held_back: int = 0  # folders written under _held_back/ instead of raw/
    held_back_folders: list[str] = field(default_factory=list)
    elapsed_seconds: float = 0.0

    @property
    def not_in_tree(self) -> int:
        """Payloads first delivered after the range (in the truth, not in the tree)."""
        return self.payloads - self.payloads_in_tree

    def describe(self) -> str:
        """One paragraph for the operator."""
        held = (
            f"; {self.held_back} folder(s) held back under {HELD_BACK_DIR}/ "
            "(land them with `backfill-assets land`)"
            if self.held_back
            else ""
        )
        late_share = self.late / self.payloads_in_tree if self.payloads_in_tree else 0.0
        return (
            f"Generated {self.hours} hour(s) from {self.start} for {self.clients} client(s) x "
            f"{self.users_per_client} users (seed {self.seed}): {self.folders:,} folders, "
            f"{self.files:,} part files, {self.bytes / 1e6:,.1f} MB compressed, "
            f"{self.lines:,} lines = {self.payloads_in_tree:,} distinct payloads + "
            f"{self.duplicates:,} duplicate deliveries + {self.malformed:,} malformed lines "
            f"({self.received_outside_hour:,} lines received outside their folder's hour). "
            f"{self.late:,} payloads ({late_share:.1%}) arrived late "
            f"({self.late_hours:,} hours late, {self.late_days:,} days late), "
            f"{self.clock_ahead:,} with a browser clock ahead of the backup tool; "
            f"{self.not_in_tree:,} more payloads arrive after the range and are only in the "
            f"truth{held}. Took {self.elapsed_seconds:.1f} s."
        )

    def to_dict(self, *, with_elapsed: bool = True) -> dict[str, Any]:
        """The counts as JSON-ready values (without the wall-clock time on request)."""
        out = asdict(self)
        out["not_in_tree"] = self.not_in_tree
        if not with_elapsed:
            del out["elapsed_seconds"]
        return out


@dataclass(frozen=True)
class _ClientTask:
    root: str
    shape: WorldShape
    client_id: int
    hour_keys: tuple[str, ...]
    held_hours: frozenset[int]
    malformed_rate: float
    records_per_file: int
    write_truth: bool


@dataclass
class _ClientResult:
    client_id: int
    counts: dict[str, int]
    folders: list[dict[str, Any]]
    truth_payloads: bytes  # one zstd frame (with content size) or b""
    truth_sessions: bytes


# --------------------------------------------------------------------------- validation


def _check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise GeneratorError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def _check_rate(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise GeneratorError(f"{name} must be a number between 0 and 1, got {value!r}")
    return float(value)


def parse_hold_back(
    specs: Iterable[str], hour_keys: Sequence[str], clients: int
) -> dict[int, frozenset[int]]:
    """Hold-back specs (``YYYY-MM-DDTHH`` or ``YYYY-MM-DDTHH/<client_id>``) -> client -> hours.

    Hours are indexes into ``hour_keys``; a spec without a client holds the hour back for
    every client.
    """
    index = {key: i for i, key in enumerate(hour_keys)}
    held: dict[int, set[int]] = {c: set() for c in range(1, clients + 1)}
    for spec in specs:
        match = _HOLD_BACK_SPEC.match(spec.strip()) if isinstance(spec, str) else None
        if not match:
            raise GeneratorError(
                f"invalid hold-back spec {spec!r}: "
                "expected YYYY-MM-DDTHH or YYYY-MM-DDTHH/<client_id>"
            )
        try:
            parse_hour(match["hour"])
        except InvalidHourError as exc:
            raise GeneratorError(f"invalid hold-back spec {spec!r}: {exc}") from None
        if match["hour"] not in index:
            raise GeneratorError(
                f"hold-back spec {spec!r} is outside the generated range "
                f"{hour_keys[0]}..{hour_keys[-1]}"
            )
        hour = index[match["hour"]]
        if match["client"] is None:
            for hours in held.values():
                hours.add(hour)
            continue
        client = int(match["client"])
        if not 1 <= client <= clients:
            raise GeneratorError(
                f"hold-back spec {spec!r}: client_id {client} is not one of 1..{clients}"
            )
        held[client].add(hour)
    return {client: frozenset(hours) for client, hours in held.items()}


def is_generated_tree(root: str | os.PathLike[str]) -> bool:
    """True if ``root`` holds the generator's marker (or, for trees written before the
    marker existed, the generator's ``_truth/summary.json`` document)."""
    root_path = Path(root)
    if (root_path / MARKER_NAME).is_file():
        return True
    try:
        document = json.loads((root_path / TRUTH_DIR / truth.SUMMARY_FILE).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(document, dict) and {"summary", "arguments"} <= set(document)


def _written_by_generator(path: Path, raw: Path) -> bool:
    """Whether ``path`` (below a ``raw/`` folder) has a name the generator writes."""
    if path.is_symlink():
        return False
    if path.is_dir():
        return bool(_FOLDER_PREFIX.match(path.relative_to(raw).as_posix()))
    folder = path.parent.relative_to(raw).as_posix()
    return bool(_FOLDER.match(folder)) and (
        path.name == MANIFEST_NAME or bool(_PART_NAME.match(path.name))
    )


def _foreign_files(root: Path) -> list[Path]:
    """Files under the generator's folders of ``root`` that the generator does not write."""
    truth_names = {truth.PAYLOADS_FILE, truth.SESSIONS_FILE, truth.FOLDERS_FILE}
    truth_names.add(truth.SUMMARY_FILE)
    foreign = []
    for raw in (root / RAW_DIR, root / HELD_BACK_DIR / RAW_DIR):
        if raw.is_symlink() or raw.is_file():
            foreign.append(raw)
            continue
        paths = sorted(raw.rglob("*")) if raw.is_dir() else []
        foreign.extend(p for p in paths if not _written_by_generator(p, raw))
    held = root / HELD_BACK_DIR
    if held.is_dir():
        foreign.extend(p for p in sorted(held.iterdir()) if p.name != RAW_DIR)
    elif held.exists():
        foreign.append(held)
    truth_dir = root / TRUTH_DIR
    if truth_dir.is_dir():
        foreign.extend(p for p in sorted(truth_dir.iterdir()) if p.name not in truth_names)
    elif truth_dir.exists():
        foreign.append(truth_dir)
    return foreign


def _prepare_root(root: Path, force: bool) -> None:
    """Refuse to write over an existing tree; with ``force`` delete only what we wrote.

    ``force`` deletes ``raw/``, ``_held_back/`` and ``_truth/`` only in a tree the generator
    marked as its own (``MARKER_NAME`` at the root) and only if every file in them is one
    the generator writes: a tree written by anyone else, or holding a foreign file, is
    refused and nothing is deleted.
    """
    if root.exists() and not root.is_dir():
        raise GeneratorError(f"backup root {root} exists and is not a directory")
    ours = [root / RAW_DIR, root / HELD_BACK_DIR, root / TRUTH_DIR]
    occupied = [p for p in ours if p.exists() and (not p.is_dir() or any(p.iterdir()))]
    if occupied and not force:
        raise BackupTreeExistsError(
            f"{occupied[0]} is not empty: a backup tree is read-only input and is never "
            f"overwritten. Choose another output path, or pass --force (force=True) to delete "
            f"{', '.join(str(p) for p in ours)} first (only in a tree the generator wrote)"
        )
    if occupied and not is_generated_tree(root):
        raise BackupTreeExistsError(
            f"{root} was not written by the generator (no {MARKER_NAME}): --force deletes "
            f"only trees the generator wrote, nothing was deleted. Choose another output path"
        )
    foreign = _foreign_files(root) if occupied else []
    if foreign:
        more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
        raise BackupTreeExistsError(
            f"{foreign[0]}{more} was not written by the generator: --force deletes only "
            f"what the generator wrote, nothing was deleted. Move it away or choose another "
            f"output path"
        )
    for path in occupied:
        logger.warning("--force: deleting %s", path)
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    root.mkdir(parents=True, exist_ok=True)
    (root / MARKER_NAME).write_text(MARKER_TEXT)


# ------------------------------------------------------------------------------ writing


def _iso(epoch_ms: np.ndarray) -> list[str]:
    """``YYYY-MM-DDTHH:MM:SS.mmm`` (no ``Z``) of each epoch-millisecond value, vectorised."""
    if len(epoch_ms) == 0:
        return []
    return np.datetime_as_string(epoch_ms.astype("datetime64[ms]"), unit="ms").tolist()


def _hour_label(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pick(strings: Sequence[str], index: np.ndarray) -> list[str]:
    """``[strings[i] for i in index]``, gathered by numpy."""
    return np.asarray(strings, dtype=object)[index].tolist()


def _line_parts(world: ClientWorld) -> tuple[list[str], list[str]]:
    """Per payload, the line before and after ``"received_at":"..."``.

    Duplicate deliveries share both halves, so they differ only in ``received_at``.
    """
    v2 = world.version == 2
    # Version prefix: explicit 1, explicit 2, or omitted (v1 only).
    prefix_code = np.where(v2, 1, np.where(world.omit_version, 2, 0))
    prefixes = _pick(('{"schema_version":1,', '{"schema_version":2,', "{"), prefix_code)
    event_iso = _iso(world.event_ms)
    whens = [
        f'"event_time_ms":{ms},' if is_v2 else f'"event_time":"{iso}Z",'
        for is_v2, ms, iso in zip(v2.tolist(), world.event_ms.tolist(), event_iso, strict=True)
    ]
    users = _pick(json_strings(world.user_ids), world.user)
    client = world.client_id
    heads = [
        f'{prefix}"payload_id":"{pid}","client_id":{client},"user_id":{user},{when}'
        for prefix, pid, user, when in zip(prefixes, world.payload_ids, users, whens, strict=True)
    ]
    ref_strings = [f',"referrer":{r}' for r in json_strings(world.referrers)]
    # -1: null, -2: absent; v1 payloads have no referrer.
    ref_code = np.where(v2, world.referrer, -2)
    ref_code = np.where(ref_code == -1, len(ref_strings), ref_code)
    ref_code = np.where(ref_code == -2, len(ref_strings) + 1, ref_code)
    referrers = _pick([*ref_strings, ',"referrer":null', ""], ref_code)
    extras = _pick([*EXTRA_FRAGMENTS, ""], np.where(world.extra >= 0, world.extra, -1))
    types = _pick(EVENT_TYPES, world.event_type)
    urls = _pick(json_strings(world.urls), world.url)
    devices = _pick(DEVICES, world.user_device[world.user])
    tails = [
        f',"event_type":"{etype}","page_url":{url}{ref},"device":"{device}"{extra}}}'
        for etype, url, ref, device, extra in zip(
            types, urls, referrers, devices, extras, strict=True
        )
    ]
    return heads, tails


def _compress(cctx: zstandard.ZstdCompressor, data: bytes, streaming: bool) -> bytes:
    """One zstd frame; ``streaming`` writes it as a streaming writer would (no content size)."""
    if not streaming:
        return cctx.compress(data)
    stream = cctx.compressobj()
    chunks = [
        stream.compress(data[i : i + STREAM_CHUNK]) for i in range(0, len(data), STREAM_CHUNK)
    ]
    chunks.append(stream.flush())
    return b"".join(chunks)


def _write_folder(
    folder: Path,
    lines: list[str],
    *,
    client_id: int,
    hour_key: str,
    hour_index: int,
    records_per_file: int,
    closed_at: str,
    cctx: zstandard.ZstdCompressor,
) -> tuple[int, int]:
    """Write the part files, then the manifest; returns (files, compressed bytes)."""
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for part, offset in enumerate(range(0, len(lines), records_per_file)):
        chunk = lines[offset : offset + records_per_file]
        data = ("\n".join(chunk) + "\n").encode("utf-8", ENCODING_ERRORS)
        streaming = (hour_index + client_id + part) % 3 == 1
        compressed = _compress(cctx, data, streaming)
        name = f"part-{part:05d}{PART_FILE_SUFFIX}"
        (folder / name).write_bytes(compressed)
        files.append(
            {
                "name": name,
                "records": len(chunk),
                "bytes": len(compressed),
                "sha256": hashlib.sha256(compressed).hexdigest(),
            }
        )
    manifest = {
        "client_id": client_id,
        "hour": f"{hour_key}:00:00Z",
        "records": sum(f["records"] for f in files),
        "files": files,
        "closed_at": closed_at,
    }
    (folder / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
    return len(files), sum(f["bytes"] for f in files)


def _with_malformed(
    lines: list[str], rng: np.random.Generator, rate: float, client_id: int, hour_start_ms: int
) -> tuple[list[str], int]:
    """Insert ``Binomial(len(lines), rate)`` malformed lines at random positions."""
    count = int(rng.binomial(len(lines), rate)) if rate > 0 else 0
    if not count:
        return lines, 0
    positions = np.sort(rng.integers(0, len(lines) + 1, size=count)).tolist()
    out: list[str] = []
    previous = 0
    for position in positions:
        out.extend(lines[previous:position])
        out.append(malformed_line(rng, client_id, hour_start_ms))
        previous = position
    out.extend(lines[previous:])
    return out, count


def _truth_chunks(
    world: ClientWorld, copies: np.ndarray, end_ms: int, cctx: zstandard.ZstdCompressor
) -> tuple[bytes, bytes]:
    """The client's truth payload and session lines, each compressed as one frame."""
    order = np.lexsort((np.arange(len(world)), world.event_ms))
    user = world.user[order]
    pids = _pick(world.payload_ids, order)
    user_ids = _pick(world.user_ids, user)
    event_ms = world.event_ms[order].tolist()
    received = world.received_ms[order]
    types = _pick(EVENT_TYPES, world.event_type[order])
    urls = _pick(json_strings(world.urls), world.url[order])
    devices = _pick(DEVICES, world.user_device[user])
    in_tree = _pick(("false", "true"), (received < end_ms).astype(np.int64))
    ref = np.where(world.version == 2, world.referrer, -1)[order]
    referrers = _pick([*json_strings(world.referrers), "null"], np.where(ref >= 0, ref, -1))
    epoch_hours = received // HOUR_MS
    first_hour = int(epoch_hours.min()) if len(epoch_hours) else 0
    labels = [
        truth.hour_key_of_ms((first_hour + i) * HOUR_MS)
        for i in range(int(epoch_hours.max()) - first_hour + 1 if len(epoch_hours) else 0)
    ]
    received_hours = _pick(labels, epoch_hours - first_hour) if labels else []
    client = world.client_id
    lines = [
        f'{{"payload_id":"{pid}","client_id":{client},"user_id":"{uid}",'
        f'"event_time_ms":{ev},"received_at_ms":{rc},"event_type":"{et}","page_url":{url},'
        f'"device":"{dev}","in_tree":{it},"schema_version":{ver},"referrer":{ref},'
        f'"received_hour":"{rh}","copies_in_tree":{cp}}}\n'
        for pid, uid, ev, rc, et, url, dev, it, ver, ref, rh, cp in zip(
            pids,
            user_ids,
            event_ms,
            received.tolist(),
            types,
            urls,
            devices,
            in_tree,
            world.version[order].tolist(),
            referrers,
            received_hours,
            copies[order].tolist(),
            strict=True,
        )
    ]
    rows = list(zip(itertools.repeat(client), user_ids, event_ms, pids, types, devices))
    sessions = truth.sessionize_rows(rows)
    session_lines = [
        f'{{"client_id":{s["client_id"]},"user_id":"{s["user_id"]}",'
        f'"session_start_ms":{s["session_start_ms"]},"session_end_ms":{s["session_end_ms"]},'
        f'"payload_count":{s["payload_count"]},"pageview_count":{s["pageview_count"]},'
        f'"device":"{s["device"]}","first_payload_id":"{s["first_payload_id"]}",'
        f'"last_payload_id":"{s["last_payload_id"]}","hour":"{s["hour"]}"}}\n'
        for s in sessions
    ]
    return (
        cctx.compress("".join(lines).encode()),
        cctx.compress("".join(session_lines).encode()),
    )


def _run_client(task: _ClientTask) -> _ClientResult:
    """Simulate one client and write all its folders; the unit of parallel work."""
    shape = task.shape
    world = simulate_client(shape, task.client_id)
    n = len(world)
    cctx = zstandard.ZstdCompressor(level=ZSTD_LEVEL)

    # Deliveries: the first of every payload, plus a re-send for the duplicated ones.
    dup = world.dup_received_ms >= 0
    d_payload = np.concatenate([np.arange(n), np.flatnonzero(dup)])
    d_received = np.concatenate([world.received_ms, world.dup_received_ms[dup]])
    d_is_dup = np.concatenate([np.zeros(n, dtype=bool), np.ones(int(dup.sum()), dtype=bool)])
    visible = (d_received >= shape.start_ms) & (d_received < shape.end_ms)
    d_payload, d_received, d_is_dup = d_payload[visible], d_received[visible], d_is_dup[visible]
    order = np.lexsort((d_payload, d_received))
    d_payload, d_received, d_is_dup = d_payload[order], d_received[order], d_is_dup[order]
    d_hour = (d_received - shape.start_ms) // HOUR_MS

    heads, tails = _line_parts(world)
    # A redelivery after a consumer restart keeps the received_at of its first delivery,
    # possibly in an earlier hour than its folder (valid; counted per hour).
    restart = d_is_dup & (d_received - world.received_ms[d_payload] >= REDELIVERY_KEEPS_MS)
    written_ms = np.where(restart, world.received_ms[d_payload], d_received)
    outside = written_ms // HOUR_MS != d_received // HOUR_MS
    received_iso = _iso(written_ms)
    lines = [
        f'{heads[p]}"received_at":"{iso}Z"{tails[p]}'
        for p, iso in zip(d_payload.tolist(), received_iso, strict=True)
    ]
    bounds = np.searchsorted(d_hour, np.arange(shape.hours + 1)).tolist()
    dup_per_hour = np.bincount(d_hour[d_is_dup], minlength=shape.hours).tolist()
    outside_per_hour = np.bincount(d_hour[outside], minlength=shape.hours).tolist()

    counts = dict.fromkeys(("folders", "held_back", "files", "bytes", "lines", "malformed"), 0)
    folders: list[dict[str, Any]] = []
    root = Path(task.root)
    for h, key in enumerate(task.hour_keys):
        lo, hi = bounds[h], bounds[h + 1]
        if lo == hi:
            continue  # no traffic: no folder
        hour_start = shape.start_ms + h * HOUR_MS
        rng = client_rng(shape.seed, task.client_id, h, 1)
        folder_lines, bad = _with_malformed(
            lines[lo:hi], rng, task.malformed_rate, task.client_id, hour_start
        )
        held = h in task.held_hours
        rel = f"{RAW_DIR}/{backup_hour_path(key)}/client_id={task.client_id}"
        path = root / HELD_BACK_DIR / rel if held else root / rel
        closed_at = _hour_label(hour_start + HOUR_MS + int(rng.integers(2_000, 30_000)))
        files, size = _write_folder(
            path,
            folder_lines,
            client_id=task.client_id,
            hour_key=key,
            hour_index=h,
            records_per_file=task.records_per_file,
            closed_at=closed_at,
            cctx=cctx,
        )
        counts["folders"] += 1
        counts["held_back"] += held
        counts["files"] += files
        counts["bytes"] += size
        counts["lines"] += len(folder_lines)
        counts["malformed"] += bad
        folders.append(
            {
                "hour": key,
                "client_id": task.client_id,
                "path": f"{HELD_BACK_DIR}/{rel}" if held else rel,
                "held_back": held,
                "files": files,
                "lines": len(folder_lines),
                "malformed": bad,
                "duplicates": dup_per_hour[h],
                "received_outside_hour": outside_per_hour[h],
                "payloads": hi - lo - dup_per_hour[h],
            }
        )

    in_tree = world.received_ms < shape.end_ms
    counts["payloads"] = n
    counts["payloads_in_tree"] = int(in_tree.sum())
    counts["duplicates"] = int(d_is_dup.sum())
    counts["received_outside_hour"] = int(outside.sum())
    counts["late_hours"] = int((in_tree & (world.delay_kind == LATE_HOURS)).sum())
    counts["late_days"] = int((in_tree & (world.delay_kind == LATE_DAYS)).sum())
    counts["clock_ahead"] = int((in_tree & (world.event_ms > world.received_ms)).sum())

    truth_payloads = truth_sessions = b""
    if task.write_truth:
        copies = np.bincount(d_payload, minlength=n)
        truth_payloads, truth_sessions = _truth_chunks(world, copies, shape.end_ms, cctx)
    return _ClientResult(task.client_id, counts, folders, truth_payloads, truth_sessions)


# ------------------------------------------------------------------------------ public


def _default_sigterm() -> None:
    """A pool worker's initializer: SIGTERM ends it, whatever its parent ignored."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def generate_backups(
    root: str | os.PathLike[str],
    *,
    start: str,
    hours: int,
    clients: int,
    users_per_client: int,
    seed: int,
    malformed_rate: float = 0.002,
    duplicate_rate: float = 0.01,
    late_hours_rate: float = 0.03,
    late_days_rate: float = 0.002,
    clock_ahead_rate: float = 0.01,
    v2_share: float = 0.5,
    hold_back: Sequence[str] = (),
    records_per_file: int = 5000,
    write_truth: bool = True,
    workers: int | None = None,
    force: bool = False,
) -> GenerationSummary:
    """Write a synthetic backup tree under ``root`` (``raw/``, ``_held_back/``, ``_truth/``).

    The hours ``[start, start + hours)`` are written for clients ``1..clients``, each with
    ``users_per_client`` visitors (about ``1.05`` payloads per user and hour). Rates are
    shares of payloads (``malformed_rate``: about that share of lines; one malformed line
    per good line at 1.0; ``clock_ahead_rate``: share of users). ``hold_back`` folders are
    written under ``<root>/_held_back/raw`` (see ``land_held_back``). The same arguments
    give a byte-identical tree whatever ``workers`` is. Raises ``GeneratorError`` on bad
    arguments and ``BackupTreeExistsError`` if ``root`` already holds a tree and not
    ``force`` (which deletes ``raw/``, ``_held_back/`` and ``_truth/`` first, only in a
    tree the generator marked as its own and holding no foreign file). The marker
    ``MARKER_NAME`` is written at the root of every tree.
    """
    began = time.perf_counter()
    if is_uri(os.fspath(root)):
        raise GeneratorError(
            f"cannot generate into {os.fspath(root)}: the generator writes local paths only "
            "(generate locally, then upload the tree)"
        )
    for name, value, minimum in (
        ("hours", hours, 1),
        ("clients", clients, 1),
        ("users_per_client", users_per_client, 1),
        ("seed", seed, 0),
        ("records_per_file", records_per_file, 1),
    ):
        _check_int(name, value, minimum)
    if workers is not None:
        _check_int("workers", workers, 1)
    rates = {
        name: _check_rate(name, value)
        for name, value in (
            ("malformed_rate", malformed_rate),
            ("duplicate_rate", duplicate_rate),
            ("late_hours_rate", late_hours_rate),
            ("late_days_rate", late_days_rate),
            ("clock_ahead_rate", clock_ahead_rate),
            ("v2_share", v2_share),
        )
    }
    if late_hours_rate + late_days_rate > 1:
        raise GeneratorError(
            f"late_hours_rate + late_days_rate must be at most 1, got "
            f"{late_hours_rate} + {late_days_rate}"
        )
    try:
        first = parse_hour(start)
    except InvalidHourError as exc:
        raise GeneratorError(f"start: {exc}") from None
    last = (first + timedelta(hours=hours - 1)).strftime("%Y-%m-%dT%H")
    hour_keys = tuple(hour_range(start, last))
    held = parse_hold_back(list(hold_back), hour_keys, clients)

    root_path = Path(root).expanduser().resolve()
    _prepare_root(root_path, force)
    shape = WorldShape(
        start_ms=int(first.timestamp() * 1000),
        hours=hours,
        users_per_client=users_per_client,
        seed=seed,
        duplicate_rate=rates["duplicate_rate"],
        late_hours_rate=rates["late_hours_rate"],
        late_days_rate=rates["late_days_rate"],
        clock_ahead_rate=rates["clock_ahead_rate"],
        v2_share=rates["v2_share"],
    )
    tasks = [
        _ClientTask(
            root=str(root_path),
            shape=shape,
            client_id=client,
            hour_keys=hour_keys,
            held_hours=held[client],
            malformed_rate=rates["malformed_rate"],
            records_per_file=records_per_file,
            write_truth=write_truth,
        )
        for client in range(1, clients + 1)
    ]
    if workers is None:
        expected = clients * users_per_client * hours * PAYLOADS_PER_USER_HOUR
        workers = 1 if expected < _PARALLEL_THRESHOLD else min(os.cpu_count() or 1, clients)
    workers = min(workers, clients)
    logger.info(
        "generating %d hour(s) from %s for %d client(s) x %d users into %s (%d worker(s))",
        hours,
        start,
        clients,
        users_per_client,
        root_path,
        workers,
    )

    summary = GenerationSummary(
        start=start, hours=hours, clients=clients, users_per_client=users_per_client, seed=seed
    )
    folders: list[dict[str, Any]] = []
    truth_dir = root_path / TRUTH_DIR
    if write_truth:
        truth_dir.mkdir(parents=True, exist_ok=True)
    with _TruthWriter(truth_dir, enabled=write_truth) as sink:
        if workers == 1:
            results: Iterable[_ClientResult] = map(_run_client, tasks)
            _merge(results, summary, folders, sink, clients)
        else:
            # Spawned, not forked: a fork copies the locks other threads of this process
            # hold at that moment (a test runner's, a server's log readers), and a worker
            # that needs one of them waits forever.
            # Closed and joined once every client is merged: the workers end on their own.
            # (Leaving the ``with`` terminates them with SIGTERM, which a worker inherits
            # ignored from a parent that ignores it: Dagster maps SIGTERM to SIGINT's
            # handler, ignored in a process started in the background. The pool's exit
            # then waited forever; the initializer restores the default as well.)
            with multiprocessing.get_context("spawn").Pool(
                workers, initializer=_default_sigterm
            ) as pool:
                _merge(pool.imap(_run_client, tasks), summary, folders, sink, clients)
                pool.close()
                pool.join()

    summary.held_back_folders = sorted(
        (f["path"] for f in folders if f["held_back"]), key=_folder_sort_key
    )
    summary.elapsed_seconds = round(time.perf_counter() - began, 3)
    if write_truth:
        (truth_dir / truth.FOLDERS_FILE).write_text(
            json.dumps({"folders": folders}, indent=1) + "\n"
        )
        arguments = {
            "start": start,
            "hours": hours,
            "clients": clients,
            "users_per_client": users_per_client,
            "seed": seed,
            **rates,
            "hold_back": list(hold_back),
            "records_per_file": records_per_file,
        }
        document = {"summary": summary.to_dict(with_elapsed=False), "arguments": arguments}
        (truth_dir / truth.SUMMARY_FILE).write_text(json.dumps(document, indent=2) + "\n")
    logger.info(
        "done: %d folders, %d files, %d lines (%d payloads) in %.1f s",
        summary.folders,
        summary.files,
        summary.lines,
        summary.payloads_in_tree,
        summary.elapsed_seconds,
    )
    return summary


class _TruthWriter:
    """Streams the clients' truth chunks, in client order, into one zstd frame per file."""

    def __init__(self, directory: Path, *, enabled: bool):
        self.directory, self.enabled = directory, enabled
        self._files: list[Any] = []
        self._writers: list[Any] = []

    def __enter__(self) -> _TruthWriter:
        if self.enabled:
            for name in (truth.PAYLOADS_FILE, truth.SESSIONS_FILE):
                handle = open(self.directory / name, "wb")  # closed in __exit__
                self._files.append(handle)
                # One compressor per stream: a zstd context compresses one stream at a time.
                cctx = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
                self._writers.append(cctx.stream_writer(handle, closefd=False))
        return self

    def add(self, payloads: bytes, sessions: bytes) -> None:
        if not self.enabled:
            return
        dctx = zstandard.ZstdDecompressor()
        for writer, chunk in zip(self._writers, (payloads, sessions), strict=True):
            writer.write(dctx.decompress(chunk))

    def __exit__(self, *exc: object) -> None:
        for writer in self._writers:
            writer.close()
        for handle in self._files:
            handle.close()


def _merge(
    results: Iterable[_ClientResult],
    summary: GenerationSummary,
    folders: list[dict[str, Any]],
    sink: _TruthWriter,
    clients: int,
) -> None:
    """Fold the clients' results (in client order) into the summary and the truth."""
    for done, result in enumerate(results, start=1):
        counts = result.counts
        for name in (
            "folders",
            "files",
            "bytes",
            "payloads",
            "payloads_in_tree",
            "lines",
            "malformed",
            "duplicates",
            "received_outside_hour",
            "late_hours",
            "late_days",
            "clock_ahead",
            "held_back",
        ):
            setattr(summary, name, getattr(summary, name) + counts[name])
        summary.late = summary.late_hours + summary.late_days
        folders.extend(result.folders)
        sink.add(result.truth_payloads, result.truth_sessions)
        logger.info(
            "client %d written (%d/%d): %d folders over %d hours, %d lines",
            result.client_id,
            done,
            clients,
            counts["folders"],
            summary.hours,
            counts["lines"],
        )


def _folder_sort_key(rel: str) -> tuple:
    parts = dict(p.split("=", 1) for p in rel.split("/") if "=" in p)
    return (parts.get("date", ""), parts.get("hour", ""), int(parts.get("client_id", 0)))


def land_held_back(root: str | os.PathLike[str]) -> list[str]:
    """Move every held-back folder from ``<root>/_held_back/raw`` into ``<root>/raw``.

    Part files move first and the manifest last, so a reader never sees a closed folder
    with missing parts. Returns the folders moved (``raw/date=.../hour=../client_id=N``),
    in (date, hour, client) order. Raises ``GeneratorError`` if a destination folder is
    already closed or ``root`` is not a tree the generator wrote (``MARKER_NAME``).
    """
    if is_uri(os.fspath(root)):
        raise GeneratorError(f"cannot land folders in {os.fspath(root)}: local paths only")
    root_path = Path(root)
    held_raw = root_path / HELD_BACK_DIR / RAW_DIR
    if not held_raw.is_dir():
        return []
    if not is_generated_tree(root_path):
        raise GeneratorError(
            f"{root_path} was not written by the generator (no {MARKER_NAME}): land moves "
            f"folders only in generated trees, nothing was moved"
        )
    folders = [p for p in held_raw.glob("date=*/hour=*/client_id=*") if p.is_dir()]
    rels = sorted((p.relative_to(held_raw).as_posix() for p in folders), key=_folder_sort_key)
    moved = []
    for rel in rels:
        if not _FOLDER.match(rel):
            logger.warning("skipping %s: not a backup folder name", held_raw / rel)
            continue
        source, target = held_raw / rel, root_path / RAW_DIR / rel
        if (target / MANIFEST_NAME).exists():
            raise GeneratorError(
                f"cannot land {source}: {target} is already closed (has {MANIFEST_NAME})"
            )
        target.mkdir(parents=True, exist_ok=True)
        entries = sorted(p.name for p in source.iterdir())
        for name in [e for e in entries if e != MANIFEST_NAME] + [
            e for e in entries if e == MANIFEST_NAME
        ]:
            os.replace(source / name, target / name)
        if MANIFEST_NAME not in entries:
            logger.warning("landed %s without a manifest: the folder stays open", rel)
        source.rmdir()
        moved.append(f"{RAW_DIR}/{rel}")
        logger.info("landed %s", f"{RAW_DIR}/{rel}")
    _prune_empty(held_raw, stop=root_path)
    return moved


def _prune_empty(directory: Path, stop: Path) -> None:
    """Remove empty directories below and including ``directory``, never ``stop``."""
    if not directory.is_dir():
        return
    for path in sorted(directory.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    current = directory
    while current != stop and current.is_dir() and not any(current.iterdir()):
        current.rmdir()
        current = current.parent
