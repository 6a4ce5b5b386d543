"""Reading backups whose files Spark cannot open itself (S3 without hadoop-aws on the image).

The executors fetch the files' bytes (``BackupStore.read_files``: pyarrow on S3), and one
Python function per batch (``mapInArrow``) checks each file's SHA-256 against its manifest,
decompresses the zstd frame (content size may be absent) and judges every line with the
contract's reference verdict (``contract.parse_line``). Same rows as ``reader``'s JVM path
(``PARSED_SCHEMA``); slower, and used only where that path cannot read the store.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import unquote

from pyspark.sql import DataFrame, SparkSession

from backfill_assets.core import faults
from backfill_assets.core.backups import contract, screen
from backfill_assets.core.backups.inventory import Folder, unique_files
from backfill_assets.core.backups.parsed_rows import ParsedRows
from backfill_assets.core.backups.store import BackupStore
from backfill_assets.core.hours import parse_hour
from backfill_assets.settings import ReadLimits


@dataclass(frozen=True)
class _Expected:
    hour: str
    hour_start_ms: int
    client_id: int
    sha256: str
    records: int


class _TooLarge(Exception):
    pass


def _decompress(data: bytes, limit: int) -> bytes:
    """Every frame of ``data``; ``_TooLarge`` if they decompress past ``limit`` (a small
    frame can expand to GiBs): told first by a pass that streams a chunk at a time and
    keeps nothing (it cannot tell a truncated frame; the whole decompression then can)."""
    import io

    import zstandard

    counted = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
    total = 0
    while chunk := counted.read(2**20):
        total += len(chunk)
        if total > limit:
            raise _TooLarge
    out = []
    while data:
        obj = zstandard.ZstdDecompressor().decompressobj()
        out.append(obj.decompress(data))
        if not obj.eof:
            raise ValueError("truncated zstd frame")
        data = obj.unused_data
    return b"".join(out)


def _parse_file(
    rel: str, content: bytes, exp: _Expected, rows: ParsedRows, limits: ReadLimits
) -> None:
    where = {"hour": exp.hour, "client_id": exp.client_id, "file": rel}

    def whole_file(reason: str) -> None:
        rows.add(**where, line_number=None, hour_start_ms=exp.hour_start_ms, reason=reason)

    faults.checkpoint(faults.SHADOW_WRITE)
    digest = hashlib.sha256(content).hexdigest()
    if digest != exp.sha256:
        whole_file(
            f"{contract.FILE_DIGEST_MISMATCH}: sha256 {digest} != manifest {exp.sha256} "
            f"({len(content)} bytes); {exp.records} lines not read"
        )
        return
    try:
        text = _decompress(content, limits.part_expanded_bytes)
    except _TooLarge:
        reason = screen.too_large_reason(limits.part_expanded_bytes)
        whole_file(f"{reason}; {exp.records} lines not read")
        return
    except Exception as exc:  # zstd errors have no common base class worth naming
        whole_file(f"{contract.FILE_UNREADABLE}: {exc}; {exp.records} lines not read")
        return
    lines = text.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for number, line in enumerate(lines, start=1):
        rows.judge(line, **where, line_number=number, hour_start_ms=exp.hour_start_ms)


def _parser(expected: dict[str, _Expected], limits: ReadLimits):
    def parse_batches(batches: Iterator) -> Iterator:
        for batch in batches:
            paths = batch.column("path").to_pylist()
            contents = batch.column("content").to_pylist()
            for path, content in zip(paths, contents, strict=True):
                rel = unquote(path[path.rfind("raw/date=") :])
                rows = ParsedRows()
                _parse_file(rel, content, expected[rel], rows, limits)
                yield rows.batch()

    return parse_batches


def read_with_executors(
    spark: SparkSession,
    store: BackupStore,
    folders: list[Folder],
    schema: str,
    limits: ReadLimits,
) -> DataFrame:
    """Every line of the folders' part files, judged in Python on the executors (a file
    that decompresses past ``limits`` is one ``file_refused`` row)."""
    expected = {  # each file once: the first entry of a path, as in ``reader``
        f.rel_path: _Expected(
            folder.hour,
            int(parse_hour(folder.hour).timestamp() * 1000),
            folder.client_id,
            f.sha256,
            f.records,
        )
        for folder, f in unique_files(folders)
    }
    files = store.read_files(spark, sorted(expected))
    return files.mapInArrow(_parser(expected, limits), schema)
