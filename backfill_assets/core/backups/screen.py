"""Part files read within bounds before Spark holds them (``ReadLimits``).

Spark reads a part file whole (``wholetext``: one row per file, split into lines in the
JVM), so a file that decompresses to GiBs, or holds a line of hundreds of MB, would sit in
the JVM's memory before any verdict. Every part file of a local tree is therefore streamed
once first, on the driver (``screen_files``: threads, as zstd decompresses with the GIL
released; a chunk at a time, so memory stays a chunk per thread whatever the file holds):

- a file that decompresses past ``part_expanded_bytes`` is **refused**: decompression
  stops at the limit, Spark never reads it, and its one ``file_refused`` quarantine row
  (no line number) fails its folder's hour in the raw reconciliation, so the release holds
  that hour back (and every hour that reads it) and publishes the others;
- a file with a line past ``line_bytes`` is not given to Spark either: the reference
  (``contract.parse_line``) judges its lines here, streaming (``judge_file``), and each
  over-long line becomes one ``line_too_long`` quarantine row with its length and its
  first ``LONG_LINE_PREFIX`` bytes; the rest of the file is read as usual.

A file whose frame is broken is left to Spark, which names it ``file_unreadable`` (it
decompresses no further than this pass did). The pass tells an over-long line without
looking at each line: a chunk is at most ``line_bytes`` long, so only a line that spans
chunks can be too long, and the bytes before a chunk's first newline and after its last
tell that (``bytes.find``/``rfind``, which stop early).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import BinaryIO

import zstandard

from backfill_assets.core.backups import contract
from backfill_assets.core.backups.parsed_rows import ParsedRows
from backfill_assets.core.backups.store import BackupStore, NotRegularFile
from backfill_assets.settings import MAX_LINE_BYTES_ENV, MAX_PART_EXPANDED_BYTES_ENV, ReadLimits

CHUNK_BYTES = 2**20  # decompressed bytes read at a time (at most the line limit)
LONG_LINE_PREFIX = 1024  # bytes of an over-long line kept as its quarantine raw_text
BATCH_LINES = 8192  # lines judged here per Arrow batch


@dataclass(frozen=True)
class Screened:
    """What streaming a part file found: why it is refused (None: it may be read), and
    whether a line of it is past the line limit."""

    refused: str | None = None
    long_line: bool = False


class _TooLarge(Exception):
    """The file decompresses past the limit (decompression stopped there)."""


def _chunks(handle: BinaryIO, limits: ReadLimits) -> Iterator[bytes]:
    """The decompressed bytes of every frame of ``handle``, a bounded chunk at a time;
    ``_TooLarge`` once they pass ``part_expanded_bytes``."""
    size = min(CHUNK_BYTES, limits.line_bytes)
    reader = zstandard.ZstdDecompressor().stream_reader(
        handle, read_size=2**17, read_across_frames=True, closefd=False
    )
    total = 0
    while chunk := reader.read(size):
        total += len(chunk)
        if total > limits.part_expanded_bytes:
            raise _TooLarge
        yield chunk


def too_large_reason(limit: int) -> str:
    return (
        f"{contract.FILE_REFUSED}: decompresses past the limit of {limit} bytes "
        f"({MAX_PART_EXPANDED_BYTES_ENV}; stopped there)"
    )


def long_line_reason(length: int, limit: int) -> str:
    return (
        f"{contract.LINE_TOO_LONG}: {length} bytes, past the limit of {limit} bytes "
        f"({MAX_LINE_BYTES_ENV}); raw_text holds its first {LONG_LINE_PREFIX} bytes"
    )


def _has_long_line(chunks: Iterator[bytes], limit: int) -> bool:
    """Whether a line is longer than ``limit``, for chunks of at most ``limit`` bytes (a
    line inside one chunk is shorter): only the bytes before a chunk's first newline and
    after its last are looked at (no pass over every byte: ``find``/``rfind`` stop early)."""
    run = 0  # bytes of the line being read
    for chunk in chunks:
        first = chunk.find(b"\n")
        if first < 0:
            run += len(chunk)
            if run > limit:  # too long already, whatever ends it
                return True
            continue
        if run + first > limit:
            return True
        run = len(chunk) - chunk.rfind(b"\n") - 1
    return run > limit  # a last line without its newline


def screen_file(store: BackupStore, rel: str, records: int, limits: ReadLimits) -> Screened:
    """Stream the part file ``rel`` once (``records``: its manifest's, for the reason)."""
    long_line = False
    try:
        with store.open_file(rel) as handle:
            chunks = _chunks(handle, limits)
            long_line = _has_long_line(chunks, limits.line_bytes)
            for _ in chunks:  # the rest of a file with a long line: its size is bounded too
                pass
            return Screened(long_line=long_line)
    except _TooLarge:
        reason = too_large_reason(limits.part_expanded_bytes)
        return Screened(refused=f"{reason}; {records} lines not read")
    except zstandard.ZstdError:  # a broken frame, named file_unreadable: by Spark, or
        return Screened(long_line=long_line)  # by judge_file once a line was too long
    except NotRegularFile as exc:  # replaced by a link or a FIFO since the inventory
        return Screened(
            refused=f"{contract.FILE_REFUSED}: {exc.strerror}; {records} lines not read"
        )
    except OSError as exc:
        return Screened(
            refused=f"{contract.FILE_REFUSED}: cannot be opened ({exc.strerror}); "
            f"{records} lines not read"
        )


def screen_files(
    store: BackupStore, files: dict[str, int], limits: ReadLimits
) -> dict[str, Screened]:
    """``screen_file`` of every file (rel -> manifest records) on a few threads; only
    the files with something to say are returned."""
    workers = min(len(files), os.cpu_count() or 1) or 1
    with ThreadPoolExecutor(workers, thread_name_prefix="screen") as pool:
        found = pool.map(lambda item: (item[0], screen_file(store, *item, limits)), files.items())
        return {rel: s for rel, s in found if s.refused or s.long_line}


class _Hashing:
    """A file object that hashes what is read from it (the manifest's digest)."""

    def __init__(self, handle: BinaryIO):
        self.handle, self.digest = handle, hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.handle.read(size)
        self.digest.update(data)
        return data


def _lines(chunks: Iterator[bytes], limit: int) -> Iterator[tuple[bytes, int]]:
    """(line, length) of each line; a line past ``limit`` comes as its first
    ``LONG_LINE_PREFIX`` bytes with its whole length, never held whole."""
    held = bytearray()
    skipped: int | None = None  # bytes of an over-long line so far
    prefix = b""
    for chunk in chunks:
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            piece = chunk[start:end]
            if skipped is not None:
                yield prefix, skipped + len(piece)
                skipped = None
            else:
                line = bytes(held) + piece if held else piece
                held.clear()
                yield (line[:LONG_LINE_PREFIX] if len(line) > limit else line), len(line)
            start = end + 1
        rest = chunk[start:]
        if skipped is not None:
            skipped += len(rest)
        else:
            held += rest
            if len(held) > limit:
                skipped, prefix = len(held), bytes(held[:LONG_LINE_PREFIX])
                held.clear()
    if skipped is not None:
        yield prefix, skipped
    elif held:
        yield bytes(held), len(held)


def judge_file(
    store: BackupStore,
    rel: str,
    where: dict,
    sha256: str,
    records: int,
    limits: ReadLimits,
) -> list:
    """Every line of a part file with over-long lines judged by the reference, streaming
    (``where``: its hour, client_id and hour_start_ms), as Arrow batches of
    ``PARSED_SCHEMA`` (of ``BATCH_LINES`` rows: no Python object per line is kept): a
    payload or quarantine row per line, ``line_too_long`` for a line past the limit; one
    whole-file row instead if its bytes are not the manifest's or cannot be read."""
    where = {**where, "file": rel}

    def whole_file(reason: str) -> list:
        refused = ParsedRows()
        refused.add(**where, line_number=None, reason=f"{reason}; {records} lines not read")
        return [refused.batch()]

    rows, batches, limit = ParsedRows(), [], limits.line_bytes
    try:
        with store.open_file(rel) as handle:
            hashing = _Hashing(handle)
            lines = _lines(_chunks(hashing, limits), limit)
            for number, (line, length) in enumerate(lines, start=1):
                if length > limit:
                    reason = long_line_reason(length, limit)
                    rows.add(**where, line_number=number, reason=reason, raw=line)
                else:
                    rows.judge(line, **where, line_number=number)
                if number % BATCH_LINES == 0:
                    batches.append(rows.batch())
                    rows = ParsedRows()
            while hashing.read(2**17):  # bytes after the last frame are the file's too
                pass
    except _TooLarge:  # grown since it was screened
        return whole_file(too_large_reason(limits.part_expanded_bytes))
    except zstandard.ZstdError as exc:
        return whole_file(f"{contract.FILE_UNREADABLE}: {exc}")
    except OSError as exc:
        return whole_file(f"{contract.FILE_REFUSED}: {exc.strerror}")
    actual = hashing.digest.hexdigest()
    if actual != sha256:
        return whole_file(f"{contract.FILE_DIGEST_MISMATCH}: sha256 {actual} != manifest {sha256}")
    return [*batches, rows.batch()]
