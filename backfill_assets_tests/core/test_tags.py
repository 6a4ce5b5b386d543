"""The run manifest read from a run's tags, however the run was launched."""

from backfill_assets.core import tags


def test_requested_by_is_the_launchers_tag_else_the_dagster_user():
    from_ui = {tags.USER: "alice@example.com", tags.REASON: "bad deploy"}
    assert tags.run_manifest(from_ui)["requested_by"] == "alice@example.com"
    named = {**from_ui, tags.REQUESTED_BY: "on-call"}  # the CLI, a sensor, or typed at launch
    assert tags.run_manifest(named)["requested_by"] == "on-call"
    assert tags.run_manifest({})["requested_by"] is None


def test_the_manifest_names_the_release_and_its_mode():
    in_backfill = {tags.DAGSTER_BACKFILL: "abcdefgh", tags.TICKET: "OPS-1"}
    manifest = tags.run_manifest(in_backfill)
    assert (manifest["mode"], manifest["backfill_id"], manifest["ticket"]) == (
        "backfill",
        "abcdefgh",
        "OPS-1",
    )
    assert tags.run_manifest({tags.MODE: "dry_run"})["mode"] == "dry_run"
    assert tags.release_id({}, "run-1") == "run-1"


def test_refusals_are_the_lines_of_the_refused_tag():
    assert tags.refusals({}) == []
    assert tags.refusals({tags.REFUSED: "transformed_shadow: a\n\naggregated_shadow: b"}) == [
        "transformed_shadow: a",
        "aggregated_shadow: b",
    ]
