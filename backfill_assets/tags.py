"""Run tags an operator (UI launch dialog, CLI) or a sensor sets on a backfill run."""

from __future__ import annotations

from collections.abc import Mapping

PREFIX = "backfill_assets"
REASON = f"{PREFIX}/reason"
REQUESTED_BY = f"{PREFIX}/requested_by"
TICKET = f"{PREFIX}/ticket"
MODE = f"{PREFIX}/mode"  # backfill | dry_run | live
ALLOW_MISSING_HOURS = f"{PREFIX}/allow_missing_hours"  # "true" or comma-separated hours
SESSION_LOOKBACK = f"{PREFIX}/session_lookback_hours"
SESSION_LOOKAHEAD = f"{PREFIX}/session_lookahead_hours"
LAYER = f"{PREFIX}/layer"  # the layer a run rebuilds (production tag concurrency)
REQUEST_ID = f"{PREFIX}/request_id"  # every run of one launch or reconciliation request
DAGSTER_BACKFILL = "dagster/backfill"
MODES = ("backfill", "dry_run", "live")


def run_manifest(tags: Mapping[str, str]) -> dict[str, str | None]:
    """The run manifest carried into lineage and the ledger."""
    return {
        "reason": tags.get(REASON),
        "requested_by": tags.get(REQUESTED_BY),
        "ticket": tags.get(TICKET),
        "mode": tags.get(MODE) or ("backfill" if tags.get(DAGSTER_BACKFILL) else "live"),
        "backfill_id": tags.get(DAGSTER_BACKFILL),
    }


def allowed_missing_hours(tags: Mapping[str, str], hours: list[str]) -> set[str]:
    value = (tags.get(ALLOW_MISSING_HOURS) or "").strip()
    if value.lower() == "true":
        return set(hours)
    return {h.strip() for h in value.split(",") if h.strip()}
