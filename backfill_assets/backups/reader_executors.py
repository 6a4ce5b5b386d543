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

from backfill_assets import faults
from backfill_assets.backups import contract
from backfill_assets.backups.inventory import Folder
from backfill_assets.partitions import parse_hour
from backfill_assets.resources.backup_store import BackupStore

KIND_PAYLOAD = "payload"
KIND_QUARANTINE = "quarantine"


@dataclass(frozen=True)
class _Expected:
    hour: str
    hour_start_ms: int
    client_id: int
    sha256: str
    records: int


def _decompress(data: bytes) -> bytes:
    import zstandard

    out = []
    while data:
        obj = zstandard.ZstdDecompressor().decompressobj()
        out.append(obj.decompress(data))
        if not obj.eof:
            raise ValueError("truncated zstd frame")
        data = obj.unused_data
    return b"".join(out)


def _parse_file(rel: str, content: bytes, exp: _Expected, rows: dict[str, list]) -> None:
    def emit(
        kind: str,
        line_number: int | None,
        reason: str | None,
        raw: str | None,
        payload: contract.Payload | None = None,
    ) -> None:
        rows["kind"].append(kind)
        rows["hour"].append(exp.hour)
        rows["client_id"].append(exp.client_id)
        rows["file"].append(rel)
        rows["line_number"].append(line_number)
        rows["reason"].append(reason)
        rows["raw_text"].append(raw)
        for name in (
            "payload_id",
            "user_id",
            "event_type",
            "page_url",
            "device",
            "referrer",
            "schema_version",
        ):
            rows[name].append(getattr(payload, name) if payload else None)
        rows["event_time"].append(payload.event_time_ms * 1000 if payload else None)
        rows["received_at"].append(payload.received_at_ms * 1000 if payload else None)
        rows["received_outside_hour"].append(
            contract.received_outside_hour(payload, exp.hour_start_ms) if payload else None
        )

    faults.checkpoint(faults.SHADOW_WRITE)
    digest = hashlib.sha256(content).hexdigest()
    if digest != exp.sha256:
        emit(
            KIND_QUARANTINE,
            None,
            f"{contract.FILE_DIGEST_MISMATCH}: sha256 {digest} != manifest {exp.sha256} "
            f"({len(content)} bytes); {exp.records} lines not read",
            None,
        )
        return
    try:
        text = _decompress(content)
    except Exception as exc:  # zstd errors have no common base class worth naming
        emit(
            KIND_QUARANTINE,
            None,
            f"{contract.FILE_UNREADABLE}: {exc}; {exp.records} lines not read",
            None,
        )
        return
    lines = text.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for number, line in enumerate(lines, start=1):
        try:
            payload = contract.parse_line(line, exp.client_id, exp.hour_start_ms)
        except contract.Rejected as exc:
            emit(KIND_QUARANTINE, number, str(exc), line.decode("utf-8", "backslashreplace"))
        else:
            emit(KIND_PAYLOAD, number, None, None, payload)


def _parser(expected: dict[str, _Expected], columns: list[str]):
    def parse_batches(batches: Iterator) -> Iterator:
        import pyarrow as pa

        ts = pa.timestamp("us", tz="UTC")
        types = {
            "client_id": pa.int64(),
            "line_number": pa.int64(),
            "schema_version": pa.int32(),
            "event_time": ts,
            "received_at": ts,
        }
        for batch in batches:
            paths = batch.column("path").to_pylist()
            contents = batch.column("content").to_pylist()
            for path, content in zip(paths, contents, strict=True):
                rel = unquote(path[path.rfind("raw/date=") :])
                rows: dict[str, list] = {c: [] for c in columns}
                _parse_file(rel, content, expected[rel], rows)
                yield pa.RecordBatch.from_arrays(
                    [pa.array(rows[c], type=types.get(c, pa.string())) for c in columns],
                    names=columns,
                )

    return parse_batches


def read_with_executors(
    spark: SparkSession,
    store: BackupStore,
    folders: list[Folder],
    schema: str,
    columns: list[str],
) -> DataFrame:
    """Every line of the folders' part files, judged in Python on the executors."""
    expected = {
        f.rel_path: _Expected(
            folder.hour,
            int(parse_hour(folder.hour).timestamp() * 1000),
            folder.client_id,
            f.sha256,
            f.records,
        )
        for folder in folders
        for f in folder.files
    }
    files = store.read_files(spark, sorted(expected))
    return files.mapInArrow(_parser(expected, columns), schema)
