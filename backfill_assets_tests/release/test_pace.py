"""A release's progress: hours built and checked from the ledger, the time left at its own
pace (or its estimate before its first hour), printed at the reporter's pace only."""

from pathlib import Path

import pytest

from backfill_assets.core.names import LAYERS
from backfill_assets.core.warehouse import audit, database
from backfill_assets.release.pace import (
    LayerProgress,
    Progress,
    Reporter,
    duration,
    ledger_figures,
    time_left,
)


def test_time_left_is_the_pace_so_far_or_the_estimate_before_anything_is_done() -> None:
    assert time_left(12, 72, 600) == pytest.approx(3000)  # 12 units in 10 min: 60 left
    assert time_left(0, 72, 100, estimate_seconds=900) == 800  # the estimate, less elapsed
    assert time_left(0, 72, 1000, estimate_seconds=900) == 0  # overdue: not negative
    assert time_left(0, 72, 100) is None  # nothing done, nothing estimated
    assert time_left(72, 72, 100) == 0 and time_left(0, 0, None) == 0
    assert [duration(s) for s in (45, 360, 9000)] == ["45 s", "6 min", "2.5 h"]


def test_the_line_names_every_layer_the_runs_and_the_time_left() -> None:
    layers = (LayerProgress("raw", 72, 12, 12), LayerProgress("sessions", 74, 0, 0))
    line = Progress(layers, 3, 7, 600.0, 360.0).line()
    assert line == (
        "progress: raw 12/72 h built, 12/72 checked; sessions 0/74 h built, 0/74 checked; "
        "3 run(s) done of 7 requested so far in 10 min; about 6 min left"
    )
    assert (
        Progress(layers, 0, 1, None, None)
        .line()
        .endswith("0 run(s) done of 1 requested so far; time left unknown until an hour is built")
    )
    assert Progress(layers, 7, 7, 600.0, 0.0, finished=True).line().endswith("; finished")
    complete = (LayerProgress("raw", 2, 2, 2),)  # the backfill not marked ended yet
    assert Progress(complete, 1, 1, 60.0, 0.0).line().endswith("; every hour built and checked")


def test_the_reporter_prints_at_its_own_pace_and_when_a_run_ends() -> None:
    now, lines, asked = [0.0], [], []

    def figures() -> Progress:
        asked.append(now[0])
        return Progress((), 0, 1, None, None)

    reporter = Reporter(figures, 30, lines.append, clock=lambda: now[0])
    for _ in range(100):  # 50 s of the CLI's polls every 0.5 s
        reporter.tick()
        now[0] += 0.5
    assert asked == [30.0]  # one query in 50 s, after one interval
    reporter.tick(ended=True)  # a run ended: a line now
    assert asked == [30.0, 50.0] and len(lines) == 2

    def broken() -> Progress:
        raise RuntimeError("ledger unavailable")

    failing = Reporter(broken, 1, lines.append, clock=lambda: now[0])
    failing.tick(ended=True)  # logged, never raised: following goes on
    assert len(lines) == 2 and failing.failed


def test_built_and_checked_come_from_the_ledger_newest_candidate(tmp_path: Path) -> None:
    warehouse = str(tmp_path / "data" / "warehouse")
    raw = LAYERS["raw"]
    hours = ["2026-11-20T00", "2026-11-20T01", "2026-11-20T02"]
    now = audit.now()
    candidates = [
        {"table_name": raw.checked_table, "hour": h, "version": f"v{i}", "release_id": "r1",
         "written_at": now}
        for i, h in enumerate(hours)
    ]  # fmt: skip
    other = {**candidates[0], "release_id": "r2", "version": "x"}
    results = [  # hour 00 passes both checks, hour 01 fails one, hour 02 is not checked yet
        {"table_name": raw.checked_table, "hour": h, "version": v, "check_name": name,
         "passed": not (h == hours[1] and name == raw.checks[0]), "checked_at": now}
        for h, v in ((hours[0], "v0"), (hours[1], "v1"))
        for name in raw.checks
    ]  # fmt: skip
    assert ledger_figures(warehouse, "r1", list(LAYERS.values())) == {}  # no ledger yet
    assert not (tmp_path / "data").exists()  # and none created by asking
    with database.transaction(warehouse) as connection:
        audit.insert(connection, audit.SHADOW_PARTITIONS, [*candidates, other])
        audit.insert(connection, audit.CHECK_RESULTS, results)
    found = ledger_figures(warehouse, "r1", list(LAYERS.values()))
    assert found == {"raw": (set(hours), {hours[0]})}
    assert ledger_figures(warehouse, "nothing", list(LAYERS.values())) == {}
