"""Hostile backup files for the tests: a decompression bomb, links out of the tree, FIFOs,
a very long line, a folder of many small part files (``hostile_tree`` puts one of each in
one folder of a generated 4-hour tree)."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import zstandard

from backfill_assets.core.hours import backup_hour_path

_MAGIC = bytes.fromhex("28b52ffd")
_BLOCK = 128 * 1024  # a zstd block's most bytes (window of 128 KiB: descriptor 7 << 3)
_RLE = 1  # block type: one byte repeated Block_Size times

BOMB_BYTES = 3 * 2**30  # what the bomb expands to (one line)
LONG_LINE_BYTES = 300 * 10**6  # the very long line
SMALL_FILES = 2000  # part files of the many-files folder
HOURS = ("2026-11-20T00", "2026-11-20T01", "2026-11-20T02", "2026-11-20T03")
BOMB_HOUR, LINKS_HOUR, CLEAN_HOUR, LONG_HOUR = HOURS
HOSTILE_PART = "part-00090.jsonl.zst"
OUTSIDE_LINK = "part-00091.jsonl.zst"  # a link to a FIFO outside the tree


def zstd_bomb(expanded: int, fill: bytes = b"x") -> bytes:
    """One zstd frame of RLE blocks (4 bytes per 128 KiB): ``expanded`` bytes of ``fill``
    and no newline; no content size in its header (as a streaming writer leaves it)."""
    header = _MAGIC + bytes([0x00, 7 << 3])
    full, rest = divmod(expanded, _BLOCK)
    sizes = [_BLOCK] * full + ([rest] if rest else [])
    blocks = [
        ((i == len(sizes) - 1) | (_RLE << 1) | (size << 3)).to_bytes(3, "little") + fill
        for i, size in enumerate(sizes)
    ]
    return header + b"".join(blocks)


def long_line_file(length: int, before: list[str], after: list[str]) -> bytes:
    """A part file: the lines ``before``, one line of ``length`` bytes, the lines ``after``
    (compressed a MiB at a time: the line is never held whole here)."""
    compressor = zstandard.ZstdCompressor(level=1).compressobj()
    out = [compressor.compress("".join(f"{x}\n" for x in before).encode())]
    chunk = b"y" * 2**20
    for start in range(0, length, len(chunk)):
        out.append(compressor.compress(chunk[: min(len(chunk), length - start)]))
    out.append(compressor.compress(("\n" + "".join(f"{x}\n" for x in after)).encode()))
    out.append(compressor.flush())
    return b"".join(out)


def payload_line(client_id: int, hour: str, n: int) -> str:
    """A valid line of the contract for ``client_id`` in ``hour`` (``YYYY-MM-DDTHH``)."""
    return json.dumps(
        {
            "payload_id": f"hostile-{client_id}-{hour}-{n}",
            "client_id": client_id,
            "user_id": f"user-{n % 7}",
            "event_time": f"{hour}:10:00.000Z",
            "received_at": f"{hour}:10:01.000Z",
            "event_type": "pageview",
            "page_url": "https://shop.example/a",
            "device": "desktop",
        }
    )


def folder_of(root: Path, hour: str, client_id: int) -> Path:
    return root / "raw" / backup_hour_path(hour) / f"client_id={client_id}"


def add_to_manifest(folder: Path, entries: list[dict]) -> None:
    """Append file entries to a folder's manifest (its records with them)."""
    path = folder / "_MANIFEST.json"
    manifest = json.loads(path.read_text())
    manifest["files"] += entries
    manifest["records"] += sum(e["records"] for e in entries)
    path.write_text(json.dumps(manifest))


def entry(name: str, data: bytes, records: int) -> dict:
    return {
        "name": name,
        "records": records,
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }


@dataclass
class FifoWatch:
    """A FIFO whose writer waits (in a thread) for anyone to open it for reading: ``opened``
    tells whether someone did; ``close`` ends the wait by opening it once itself."""

    path: Path
    _opened: threading.Event = field(default_factory=threading.Event)
    _closing: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        os.mkfifo(self.path)
        self._thread = threading.Thread(target=self._wait, daemon=True)
        self._thread.start()

    def _wait(self) -> None:
        fd = os.open(self.path, os.O_WRONLY)  # returns once a reader has opened it
        if not self._closing.is_set():
            self._opened.set()
        os.close(fd)

    @property
    def opened(self) -> bool:
        return self._opened.is_set()

    def close(self) -> None:
        self._closing.set()
        fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        assert self._thread is not None
        self._thread.join(timeout=30)
        os.close(fd)


@dataclass
class Hostile:
    """What ``hostile_tree`` put where."""

    bomb: str  # part files, relative to the tree's root
    outside_link: str
    outside_fifo_link: str
    fifo_manifest: str
    long_line: str
    small_files_folder: str
    outside_file: Path
    outside_atime: float
    fifos: list[FifoWatch]

    def close(self) -> None:
        for fifo in self.fifos:
            fifo.close()


def hostile_tree(root: Path, outside: Path, bomb_bytes: int = BOMB_BYTES) -> Hostile:
    """One hostile case per folder of a generated 4-hour tree (clients 1 and 2, ``HOURS``):
    a bomb of ``bomb_bytes`` (3 GiB) (00, client 1); a link to a file outside the tree and
    one to a FIFO outside (01, client 1); a FIFO as the manifest (01, client 2); a 300 MB
    line between two valid lines (03, client 1); and a folder of 2,000 one-line part files
    (03, client 3). Hour 02 is left clean."""
    rel = lambda p: str(p.relative_to(root))  # noqa: E731
    bomb_folder = folder_of(root, BOMB_HOUR, 1)
    bomb = zstd_bomb(bomb_bytes)
    (bomb_folder / HOSTILE_PART).write_bytes(bomb)
    add_to_manifest(bomb_folder, [entry(HOSTILE_PART, bomb, 1)])

    outside.mkdir(parents=True, exist_ok=True)
    secret = outside / "secret.jsonl.zst"
    secret_bytes = zstandard.ZstdCompressor().compress(
        (payload_line(1, LINKS_HOUR, 0) + "\n").encode()
    )
    secret.write_bytes(secret_bytes)
    atime = secret.stat().st_mtime - 3 * 86400  # before its mtime: any read moves it
    os.utime(secret, (atime, secret.stat().st_mtime))
    fifo_outside = FifoWatch(outside / "outside.fifo")
    links = folder_of(root, LINKS_HOUR, 1)
    (links / HOSTILE_PART).symlink_to(secret)
    (links / OUTSIDE_LINK).symlink_to(fifo_outside.path)
    add_to_manifest(
        links,
        [entry(HOSTILE_PART, secret_bytes, 1), {**entry(OUTSIDE_LINK, b"", 1), "bytes": 1}],
    )
    fifo_folder = folder_of(root, LINKS_HOUR, 2)
    (fifo_folder / "_MANIFEST.json").unlink()
    fifo_manifest = FifoWatch(fifo_folder / "_MANIFEST.json")

    long_folder = folder_of(root, LONG_HOUR, 1)
    long = long_line_file(
        LONG_LINE_BYTES, [payload_line(1, LONG_HOUR, 1)], [payload_line(1, LONG_HOUR, 2)]
    )
    (long_folder / HOSTILE_PART).write_bytes(long)
    add_to_manifest(long_folder, [entry(HOSTILE_PART, long, 3)])

    many = folder_of(root, LONG_HOUR, 3)
    many.mkdir()
    entries = []
    compressor = zstandard.ZstdCompressor()
    for n in range(SMALL_FILES):
        data = compressor.compress((payload_line(3, LONG_HOUR, n) + "\n").encode())
        name = f"part-{n:05d}.jsonl.zst"
        (many / name).write_bytes(data)
        entries.append(entry(name, data, 1))
    manifest = {
        "client_id": 3,
        "hour": f"{LONG_HOUR}:00:00Z",
        "records": SMALL_FILES,
        "files": entries,
        "closed_at": f"{LONG_HOUR}:59:59Z",
    }
    (many / "_MANIFEST.json").write_text(json.dumps(manifest))
    return Hostile(
        bomb=rel(bomb_folder / HOSTILE_PART),
        outside_link=rel(links / HOSTILE_PART),
        outside_fifo_link=rel(links / OUTSIDE_LINK),
        fifo_manifest=rel(fifo_folder / "_MANIFEST.json"),
        long_line=rel(long_folder / HOSTILE_PART),
        small_files_folder=rel(many),
        outside_file=secret,
        outside_atime=atime,
        fifos=[fifo_outside, fifo_manifest],
    )
