"""Of two releases holding an hour, the one created first proceeds; the refusal names it."""

from backfill_assets.release.holds import HELD_BY, Release, by_layer, holders, refusal

A = Release("aaa", 10.0, frozenset({"2026-11-20T00", "2026-11-20T01"}), "alice")
B = Release("bbb", 11.0, frozenset({"2026-11-20T01", "2026-11-20T02"}), "bob")
C = Release("ccc", 9.0, frozenset({"2026-11-20T05"}))


def test_exactly_one_of_two_racing_releases_proceeds() -> None:
    releases = [C, A, B]
    assert holders(releases, B.hours, before=B) == [A]  # the later one stops
    assert holders(releases, A.hours, before=A) == []  # the earlier one proceeds
    assert holders(releases, ["2026-11-20T02"]) == [B]  # at launch: anything in flight
    same_time = Release("aab", 10.0, A.hours)  # a tie is broken by id, never both
    assert len(holders([A, same_time], A.hours, before=same_time)) == 1
    assert holders([A, same_time], A.hours, before=A) == []


def test_the_refusal_is_one_line_naming_the_release_and_the_hours() -> None:
    line = refusal([A], B.hours, "backfill bbb")
    assert "\n" not in line
    assert line.startswith(f"backfill bbb refused: {HELD_BY} in flight: release aaa")
    assert "(requested by alice) holds 2026-11-20T01" in line
    assert "backfill-assets cancel --backfill aaa" in line


def test_every_layer_sees_every_hour_a_release_holds() -> None:
    held = by_layer([A, B], ["raw", "aggregated"])
    assert held["aggregated"]["2026-11-20T01"] == "release aaa in flight"  # the older one
    assert held["raw"]["2026-11-20T02"] == "release bbb in flight"


def test_a_holder_none_of_whose_runs_started_says_so_and_how_to_clear_it() -> None:
    queued = Release("qqq", 8.0, A.hours, started=False)
    line = refusal([queued], A.hours, "backfill bbb")
    assert "release qqq holds 2026-11-20T00..2026-11-20T01, queued: none of its runs" in line
    assert "`backfill-assets cancel --backfill qqq`" in line
    assert "queued" not in refusal([A], A.hours, "backfill bbb")
