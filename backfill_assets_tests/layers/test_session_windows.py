"""Session windows of the aggregated layer: run tags, missing hours, launch ranges (no Spark)."""

import pytest

from backfill_assets import tags
from backfill_assets.launch import LAYERS, plan_ranges, validate_layers
from backfill_assets.layers.aggregated import describe_missing, missing_window_hours, window_hours
from backfill_assets.partitions import hour_range


def test_window_hours_default_and_tags() -> None:
    assert window_hours({}) == (3, 3)
    assert window_hours({tags.SESSION_LOOKBACK: "5", tags.SESSION_LOOKAHEAD: " 0 "}) == (5, 0)
    assert window_hours({tags.SESSION_LOOKAHEAD: ""}) == (3, 3)


@pytest.mark.parametrize("value", ["-1", "2.5", "x", "25", "1e3", "\u00b2"])
def test_window_hours_rejects_bad_tags(value: str) -> None:
    with pytest.raises(ValueError, match="session_lookahead_hours"):
        window_hours({tags.SESSION_LOOKAHEAD: value})


def test_missing_window_hours_names_the_session_hours_that_need_them() -> None:
    published = set(hour_range("2026-11-20T00", "2026-11-20T09")) - {"2026-11-20T05"}
    missing = missing_window_hours(published, "2026-11-20T03", "2026-11-20T07", 3, 3, set())
    assert missing == {
        "2026-11-20T05": hour_range("2026-11-20T03", "2026-11-20T07"),
        "2026-11-20T10": ["2026-11-20T07"],
    }
    assert describe_missing(missing) == (
        "2026-11-20T05 (needed by session hour(s) 2026-11-20T03..2026-11-20T07); "
        "2026-11-20T10 (needed by session hour(s) 2026-11-20T07..2026-11-20T07)"
    )
    declared_empty = {"2026-11-20T05", "2026-11-20T10"}
    assert (
        missing_window_hours(published, "2026-11-20T03", "2026-11-20T07", 3, 3, declared_empty)
        == {}
    )
    assert missing_window_hours(published, "2026-11-20T06", "2026-11-20T06", 0, 3, set()) == {}


def test_allow_missing_true_does_not_waive_session_windows() -> None:
    """``--allow-missing-hours`` (tag "true") publishes hours without backups as empty raw and
    transformed partitions; the aggregated layer only waives hours named explicitly."""
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
    assert plan_ranges(
        ["transformed", "aggregated"], "2026-11-20T10", "2026-11-20T10", lookback=1, lookahead=2
    )[1] == ("aggregated", "2026-11-20T08", "2026-11-20T11")
    assert validate_layers(["aggregated", "raw"]) == ["raw", "aggregated"]
