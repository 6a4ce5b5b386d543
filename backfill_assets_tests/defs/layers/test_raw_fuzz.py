"""Fuzz corpus through the real raw layer: every line of every file gets a verdict.

Real zstd part files with manifests (one frame per file; some without content size; one
file not valid UTF-8 throughout), a generated corpus of random bytes, random JSON,
mutations of valid lines, unicode edge cases, extreme numbers, deep nesting and long lines,
run through the raw layer's Dagster run (Spark reads, decompresses and judges). For every
file: published payloads + quarantined lines = manifest records, and each line's verdict is
the Python reference's.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import zstandard
from pyspark.sql import functions as F

from backfill_assets.core.backups import contract
from backfill_assets.defs.layers.raw import MANIFEST_RECONCILIATION
from backfill_assets_tests.helpers.backups import write_backup_folder
from backfill_assets_tests.helpers.corpus import (
    CLIENT_ID,
    HOUR,
    HOUR_START_MS,
    edge_lines,
    fuzz_lines,
)


def _frame(lines: list[bytes], streaming: bool) -> bytes:
    data = b"".join(line + b"\n" for line in lines)
    cctx = zstandard.ZstdCompressor()
    if not streaming:
        return cctx.compress(data)
    stream = cctx.compressobj()  # a streaming writer: no content size in the frame header
    return stream.compress(data) + stream.flush()


def test_fuzz_corpus_every_line_gets_the_reference_verdict(spark, tmp_path: Path, run_release):
    lines = edge_lines() + fuzz_lines(seed=11, count=2500)
    assert all(b"\n" not in line for line in lines)
    utf8 = [line for line in lines if _is_utf8(line)]
    files = {
        "part-00000.jsonl.zst": _frame(utf8[: len(utf8) // 2], streaming=False),
        "part-00001.jsonl.zst": _frame(utf8[len(utf8) // 2 :], streaming=True),
        "part-00002.jsonl.zst": _frame(lines, streaming=True),  # not UTF-8 throughout
        "part-00003.jsonl.zst": _frame([], streaming=False),
    }
    root = tmp_path / "tree"
    write_backup_folder(root, HOUR, CLIENT_ID, files)
    by_file = {
        "part-00000.jsonl.zst": utf8[: len(utf8) // 2],
        "part-00001.jsonl.zst": utf8[len(utf8) // 2 :],
        "part-00002.jsonl.zst": lines,
        "part-00003.jsonl.zst": [],
    }

    runs = run_release(root, HOUR, HOUR, downstream=False, publish=False).runs

    assert runs[0].checks[MANIFEST_RECONCILIATION]["passed"], runs[0].checks
    payloads = spark.table("shadow.raw_payloads").where(F.col("run_id") == runs[0].run_id)
    quarantine = spark.table("shadow.raw_quarantine").where(F.col("run_id") == runs[0].run_id)
    rejected = {
        (r.file.rsplit("/", 1)[1], r.line_number): (r.reason, r.raw_text)
        for r in quarantine.select("file", "line_number", "reason", "raw_text").collect()
    }
    valid_ids = Counter(r.payload_id for r in payloads.select("payload_id").collect())
    expected_ids: Counter[str] = Counter()
    for name, file_lines in by_file.items():
        for number, line in enumerate(file_lines, start=1):
            try:
                payload = contract.parse_line(line, CLIENT_ID, HOUR_START_MS)
            except contract.Rejected as exc:
                assert rejected.pop((name, number)) == (
                    str(exc),
                    line.decode("utf-8", "backslashreplace"),
                ), (name, number, line[:200])
            else:
                expected_ids[payload.payload_id] += 1
    assert not rejected  # no quarantine row without a line
    assert valid_ids == expected_ids
    manifest_records = sum(len(v) for v in by_file.values())
    assert payloads.count() + quarantine.count() == manifest_records


def _is_utf8(line: bytes) -> bool:
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
