"""The judged-line rows every backup reader produces, and their Python (Arrow) builder.

``PARSED_SCHEMA`` is the one row shape of a judged line: a payload with its typed fields,
or a quarantine row with its file, line number, reason and raw text. ``ParsedRows``
builds Arrow batches of it from ``contract.parse_line`` verdicts, for the readers that
judge lines in Python workers (the JVM path's undecided lines, and the executors' path).
"""

from __future__ import annotations

from backfill_assets.core.backups import contract

KIND_PAYLOAD = "payload"
KIND_QUARANTINE = "quarantine"

PARSED_SCHEMA = (
    "kind string, hour string, client_id bigint, file string, line_number bigint, "
    "reason string, raw_text string, payload_id string, user_id string, "
    "event_time timestamp, received_at timestamp, event_type string, page_url string, "
    "device string, referrer string, schema_version int, received_outside_hour boolean"
)
TYPES = dict(c.strip().split(" ") for c in PARSED_SCHEMA.split(","))  # column -> Spark type
COLUMNS = list(TYPES)
_PAYLOAD_FIELDS = ("payload_id", "user_id", "event_type", "page_url", "device", "referrer")


class ParsedRows:
    """Rows of ``PARSED_SCHEMA`` accumulated column-wise, emitted as one Arrow batch."""

    def __init__(self) -> None:
        self.columns: dict[str, list] = {c: [] for c in COLUMNS}

    def add(
        self,
        *,
        hour: str,
        client_id: int,
        file: str,
        line_number: int | None,
        hour_start_ms: int,
        payload: contract.Payload | None = None,
        reason: str | None = None,
        raw: bytes | None = None,
    ) -> None:
        """One judged line: ``payload`` if valid, else ``reason`` and the line's ``raw``
        bytes (``line_number`` None for a whole-file verdict)."""
        rows, p = self.columns, payload
        rows["kind"].append(KIND_PAYLOAD if p else KIND_QUARANTINE)
        rows["hour"].append(hour)
        rows["client_id"].append(client_id)
        rows["file"].append(file)
        rows["line_number"].append(line_number)
        rows["reason"].append(None if p else reason)
        rows["raw_text"].append(
            raw.decode("utf-8", "backslashreplace") if raw is not None and not p else None
        )
        for name in _PAYLOAD_FIELDS:
            rows[name].append(getattr(p, name) if p else None)
        rows["schema_version"].append(p.schema_version if p else None)
        rows["event_time"].append(p.event_time_ms * 1000 if p else None)
        rows["received_at"].append(p.received_at_ms * 1000 if p else None)
        rows["received_outside_hour"].append(
            contract.received_outside_hour(p, hour_start_ms) if p else None
        )

    def judge(
        self,
        line: bytes,
        *,
        hour: str,
        client_id: int,
        file: str,
        line_number: int,
        hour_start_ms: int,
    ) -> None:
        """Add ``line`` with the contract's reference verdict."""
        payload, reason = None, None
        try:
            payload = contract.parse_line(line, client_id, hour_start_ms)
        except contract.Rejected as exc:
            reason = str(exc)
        self.add(
            hour=hour,
            client_id=client_id,
            file=file,
            line_number=line_number,
            hour_start_ms=hour_start_ms,
            payload=payload,
            reason=reason,
            raw=line,
        )

    def batch(self):
        """The rows as one ``pyarrow.RecordBatch`` of ``PARSED_SCHEMA``."""
        import pyarrow as pa

        ts = pa.timestamp("us", tz="UTC")
        types = {
            "client_id": pa.int64(),
            "line_number": pa.int64(),
            "schema_version": pa.int32(),
            "event_time": ts,
            "received_at": ts,
            "received_outside_hour": pa.bool_(),
        }
        return pa.RecordBatch.from_arrays(
            [pa.array(self.columns[c], type=types.get(c, pa.string())) for c in COLUMNS],
            names=COLUMNS,
        )
