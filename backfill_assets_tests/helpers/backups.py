"""Backup folders written by hand (``write_backup_folder``: part files and their
manifest, hostile ones included), part-file bytes (``zst``), and a tree's lines parsed in
plain Python (``read_tree_lines``), for the tests that need more than a generated tree."""

from __future__ import annotations

from pathlib import Path


def write_backup_folder(
    root: Path,
    hour: str,
    client_id: int,
    files: dict[str, bytes],
    *,
    manifest: dict | None = None,
    records: dict[str, int] | None = None,
    closed: bool = True,
) -> Path:
    """Write one (hour, client) folder by hand: ``files`` are compressed part-file bytes.

    The manifest is derived from the files unless ``manifest`` overrides fields of it;
    ``records`` overrides the per-file line counts; ``closed=False`` writes no manifest.
    """
    import hashlib
    import json

    import zstandard

    from backfill_assets.core.hours import backup_hour_path, parse_hour

    folder = root / "raw" / backup_hour_path(hour) / f"client_id={client_id}"
    folder.mkdir(parents=True, exist_ok=True)
    entries = []
    for name, data in files.items():
        (folder / name).write_bytes(data)
        if name in (records or {}):  # given: a hostile file is never decompressed here
            count = (records or {})[name]
        else:
            try:
                count = zstandard.ZstdDecompressor().decompressobj().decompress(data).count(b"\n")
            except zstandard.ZstdError:
                count = 0
        entries.append(
            {
                "name": name,
                "records": count,
                "bytes": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
            }
        )
    if closed:
        body = {
            "client_id": client_id,
            "hour": f"{parse_hour(hour):%Y-%m-%dT%H}:00:00Z",
            "records": sum(e["records"] for e in entries),
            "files": entries,
            "closed_at": f"{parse_hour(hour):%Y-%m-%dT%H}:59:59Z",
        }
        body.update(manifest or {})
        (folder / "_MANIFEST.json").write_text(json.dumps(body))
    return folder


def zst(lines: list[bytes | str]) -> bytes:
    """Compress lines into one zstd frame (newline-terminated), as the backup tool does."""
    import zstandard

    raw = b"".join((x.encode() if isinstance(x, str) else x) + b"\n" for x in lines)
    return zstandard.ZstdCompressor().compress(raw)


def read_tree_lines(root: Path) -> tuple[list[tuple], list[tuple]]:
    """Parse every closed folder's part files in Python: (valid, malformed) line keys."""
    import json

    import zstandard

    from backfill_assets.core.backups.contract import Rejected, parse_iso_ms, parse_line

    valid, malformed = [], []
    for manifest in sorted((root / "raw").glob("date=*/hour=*/client_id=*/_MANIFEST.json")):
        body = json.loads(manifest.read_text())
        client_id, hour_ms = body["client_id"], parse_iso_ms(body["hour"])
        for entry in body["files"]:
            path = manifest.parent / entry["name"]
            rel = str(path.relative_to(root))
            text = zstandard.ZstdDecompressor().decompressobj().decompress(path.read_bytes())
            lines = text.split(b"\n")
            if lines and lines[-1] == b"":
                lines.pop()
            for number, line in enumerate(lines, start=1):
                try:
                    payload = parse_line(line, client_id, hour_ms)
                    valid.append((payload.payload_id, payload.received_at_ms, payload.client_id))
                except Rejected:
                    malformed.append((rel, number))
    return valid, malformed
