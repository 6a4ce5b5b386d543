"""What the tables' rules share with the builds: the session id, the names of the session
rules that have checks of their own, and the hour format.

The pandera models themselves are in ``core.layers.models``: pandera (and pandas with it)
loads only in a process that validates (a run), not in every process that loads the code
location (the CLI, the code server, the daemon's and the UI's)."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

HOUR_OF = "yyyy-MM-dd'T'HH"
ISO_MS = "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"
# Session row rules that have their own blocking check (see checks/aggregated.py).
END_NOT_BEFORE_START = "session_end_at:not_before_start"
DURATION_IS_DIFFERENCE = "duration_seconds:equals_end_minus_start"
STARTS_IN_PARTITION_HOUR = "session_start_at:in_partition_hour"


def session_id_of(client_id: Column, user_id: Column, start: Column) -> Column:
    """``session_id``: first 32 hex characters of the SHA-256 of the UTF-8 string
    ``"{client_id}|{user_id}|{start as YYYY-MM-DDTHH:MM:SS.mmmZ}"`` (session time zone UTC)."""
    text = F.concat_ws("|", client_id.cast("string"), user_id, F.date_format(start, ISO_MS))
    return F.substring(F.sha2(text, 256), 1, 32)


# The distinct session ids of an hour: an aggregate evaluated with the session rules
# (``rules.evaluate(..., extra=...)``), in the build's read-back or the check's own scan.
DISTINCT_SESSION_IDS = "distinct_session_ids"


def session_id_aggregates() -> dict[str, Column]:
    return {DISTINCT_SESSION_IDS: F.count_distinct("session_id")}
