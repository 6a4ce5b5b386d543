"""Session windows of the aggregated layer: the fixed window, launch ranges (no Spark)."""

from backfill_assets.core import tags
from backfill_assets.core.hours import hour_range
from backfill_assets.core.names import LAYERS as REGISTRY
from backfill_assets.core.plan import LAYERS, plan_ranges, release_layers, validate_layers
from backfill_assets.core.windows import (
    LOOKAHEAD_HOURS,
    LOOKBACK_HOURS,
    received_window,
    session_hours_touching,
)


def test_the_window_is_fixed_and_is_what_the_layer_reads() -> None:
    assert (LOOKBACK_HOURS, LOOKAHEAD_HOURS) == (3, 3)
    assert received_window("2026-11-20T05") == ("2026-11-20T02", "2026-11-20T08")
    assert session_hours_touching("2026-11-20T10", "2026-11-20T12") == (
        "2026-11-20T07",
        "2026-11-20T15",
    )
    aggregated = REGISTRY["aggregated"]
    assert aggregated.window == (LOOKBACK_HOURS, LOOKAHEAD_HOURS)
    assert aggregated.reads("2026-11-20T05") == hour_range("2026-11-20T02", "2026-11-20T08")


def test_allow_missing_true_does_not_waive_session_windows() -> None:
    """``--allow-missing-hours`` (tag "true") publishes hours without backups as empty raw and
    transformed partitions; a downstream input only waives hours named explicitly."""
    assert tags.allowed_missing_hours({tags.ALLOW_MISSING_HOURS: "true"}, []) == set()
    assert tags.allowed_missing_hours({tags.ALLOW_MISSING_HOURS: "2026-11-20T05"}, []) == {
        "2026-11-20T05"
    }


def test_plan_ranges_maps_damaged_received_hours_to_touched_session_hours() -> None:
    assert LAYERS == ("raw", "transformed", "aggregated")
    assert plan_ranges(LAYERS, "2026-11-20T10", "2026-11-20T12") == [
        ("raw", "2026-11-20T10", "2026-11-20T12"),
        ("transformed", "2026-11-20T10", "2026-11-20T12"),
        ("aggregated", "2026-11-20T07", "2026-11-20T15"),
    ]
    assert plan_ranges(["raw", "aggregated"], "2026-11-20T10", "2026-11-20T10") == [
        ("raw", "2026-11-20T10", "2026-11-20T10"),
        ("aggregated", "2026-11-20T07", "2026-11-20T13"),
    ]
    # Only aggregated: --from/--to are its own session hours.
    assert plan_ranges(["aggregated"], "2026-11-20T10", "2026-11-20T12") == [
        ("aggregated", "2026-11-20T10", "2026-11-20T12")
    ]
    assert validate_layers(["aggregated", "raw"]) == ["raw", "aggregated"]


def test_a_release_rebuilds_downstream_unless_told_not_to() -> None:
    assert release_layers(["raw"]) == ["raw", "transformed", "aggregated"]
    assert release_layers(["transformed"]) == ["transformed", "aggregated"]
    assert release_layers(["raw"], downstream=False) == ["raw"]
