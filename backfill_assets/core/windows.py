"""Session windows: which received hours a session hour reads, and the reverse.

Sessions of hour H are rebuilt from the payloads received in ``[H - lookback, H + lookahead]``
(the half-cut session problem), so damaged received hours ``[T1, T2]`` touch the session
hours ``[T1 - lookahead, T2 + lookback]``.
"""

from __future__ import annotations

from backfill_assets.core.hours import clamp_range, shift_hour

# The session window, one definition: the aggregated layer's partition mapping (what the UI
# shows a backfill reads), its build and the release's hold-back rules all use it. Measure
# what a wider one would recover with ``backfill-assets halfcut`` before changing it.
LOOKBACK_HOURS = 3
LOOKAHEAD_HOURS = 3
DEFAULT_LOOKBACK_HOURS = LOOKBACK_HOURS
DEFAULT_LOOKAHEAD_HOURS = LOOKAHEAD_HOURS


def received_window(
    hour: str, lookback: int = DEFAULT_LOOKBACK_HOURS, lookahead: int = DEFAULT_LOOKAHEAD_HOURS
) -> tuple[str, str]:
    """Received hours that sessions starting in ``hour`` are built from (inclusive)."""
    return shift_hour(hour, -lookback), shift_hour(hour, lookahead)


def session_hours_touching(
    first: str,
    last: str,
    lookback: int = DEFAULT_LOOKBACK_HOURS,
    lookahead: int = DEFAULT_LOOKAHEAD_HOURS,
) -> tuple[str, str]:
    """Session hours whose window touches received hours ``first..last`` (inclusive), cut
    to the partitions (as Dagster derives them through the partition mapping)."""
    span = clamp_range(shift_hour(first, -lookahead), shift_hour(last, lookback))
    return span or (first, last)
