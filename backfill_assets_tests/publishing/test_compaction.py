"""Audit compaction: one file, every row exactly once, also while appends go on."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta
from pathlib import Path

from backfill_assets.publishing import audit, compaction
from backfill_assets.publishing.tables import table_location

TABLE = audit.CHECK_RESULTS


def rows(tag: str) -> list[dict]:
    """Two rows whose run_id is ``tag``."""
    return [
        {
            "table_name": "raw.payloads",
            "hour": f"2026-11-20T{h:02d}",
            "version": tag,
            "check_name": "rules",
            "passed": h == 0,
            "detail": f"{tag} ✓",
            "run_id": tag,
            "checked_at": audit.now(),
        }
        for h in range(2)
    ]


def append(spark, settings, tag: str) -> None:
    audit.append(spark, settings.warehouse_dir, TABLE, rows(tag))


def seen(spark) -> Counter:
    """Rows per tag, as a reader of the table sees them now."""
    return Counter(r.run_id for r in audit.read(spark, TABLE).select("run_id").collect())


def local(location: str) -> Path:
    return Path(location.removeprefix("file:"))


def test_a_compaction_leaves_one_file_with_every_row_once(spark, warehouse, base_settings):
    directory = base_settings.warehouse_dir
    for i in range(5):
        append(spark, base_settings, f"b{i}")
    before = sorted(tuple(r) for r in audit.read(spark, TABLE).collect())
    old = table_location(spark, TABLE)

    few = compaction.compact(spark, directory, TABLE, min_files=6)
    assert (few.outcome, few.files) == (compaction.TOO_FEW_FILES, 5)
    dry = compaction.compact(spark, directory, TABLE, min_files=2, dry_run=True)
    assert dry.outcome == compaction.WOULD_COMPACT
    assert table_location(spark, TABLE) == old
    assert audit.read_seal(spark, old) is None

    done = compaction.compact(spark, directory, TABLE, min_files=2)
    assert (done.outcome, done.files, done.rows, done.carried) == (compaction.COMPACTED, 5, 10, 0)
    new = table_location(spark, TABLE)
    assert new != old and local(new) == local(done.location)
    assert len(compaction.visible_files(spark, new)) == 1
    assert sorted(tuple(r) for r in audit.read(spark, TABLE).collect()) == before
    assert audit.read(spark, TABLE).schema == audit.schema(TABLE)
    # the superseded location is kept (a reader may have listed it), sealed
    assert len(compaction.visible_files(spark, old)) == 5
    assert local(audit.read_seal(spark, old)["into"]) == local(new)

    append(spark, base_settings, "after")  # into the table's new location
    assert seen(spark) == Counter({**{f"b{i}": 2 for i in range(5)}, "after": 2})
    assert len(compaction.visible_files(spark, new)) == 2

    # A later compaction deletes what was superseded longer than the grace ago, never the
    # location it supersedes itself.
    later = audit.now() + compaction.GRACE + timedelta(minutes=1)
    again = compaction.compact(spark, directory, TABLE, min_files=2, now=lambda: later)
    assert again.outcome == compaction.COMPACTED
    assert [local(d) for d in again.deleted] == [local(old)]
    assert not local(old).exists() and local(new).exists()
    assert seen(spark) == Counter({**{f"b{i}": 2 for i in range(5)}, "after": 2})


def test_appends_during_a_compaction_are_read_exactly_once_at_every_step(
    spark, warehouse, base_settings
):
    for i in range(3):
        append(spark, base_settings, f"b{i}")
    first = table_location(spark, TABLE)
    returned = {f"b{i}" for i in range(3)}  # appends that have returned
    waiting: list[threading.Thread] = []
    steps = []

    def step(name: str) -> None:
        steps.append(name)
        now = seen(spark)  # the table as a reader sees it at this step
        assert set(now.values()) == {2}, (name, now)  # no batch twice, none in part
        assert returned <= set(now), (name, returned - set(now))
        if name == "written":  # before the seal: the compaction carries it before the swap
            append(spark, base_settings, "before-seal")
            returned.add("before-seal")
        elif name == "sealed":  # after it: the append waits for the swap, carries its file
            waiting.append(threading.Thread(target=append, args=(spark, base_settings, "sealed")))
            waiting[0].start()

    done = compaction.compact(spark, base_settings.warehouse_dir, TABLE, min_files=2, progress=step)
    waiting[0].join(timeout=300)
    assert not waiting[0].is_alive()
    returned.add("sealed")
    assert steps == ["written", "sealed", "swapped"]
    assert done.outcome == compaction.COMPACTED and done.carried >= 1
    assert seen(spark) == Counter({tag: 2 for tag in returned})
    new = table_location(spark, TABLE)
    assert local(new) == local(done.location)

    # An appender that found the table where it was before the swap and writes only now,
    # after the compaction ended: its file follows the table before the append returns.
    audit.append_to(spark, TABLE, first, rows("late"))
    assert seen(spark) == Counter({**{tag: 2 for tag in returned}, "late": 2})
    # the compacted file, then each batch appended since the listing (carried) and this one
    assert len(compaction.visible_files(spark, new)) == 4


def test_a_compaction_past_its_deadline_gives_up_and_the_table_stays(
    spark, warehouse, base_settings
):
    for i in range(3):
        append(spark, base_settings, f"b{i}")
    old = table_location(spark, TABLE)

    done = compaction.compact(
        spark, base_settings.warehouse_dir, TABLE, min_files=2, seal_seconds=0
    )
    assert done.outcome == compaction.GAVE_UP and "deadline" in done.detail
    assert table_location(spark, TABLE) == old
    assert audit.read_seal(spark, old) is None  # appends do not wait for it
    assert not local(done.location).joinpath(compaction.GENERATIONS).exists()
    generations = local(old).parent / compaction.GENERATIONS / "check_results"
    assert not any(generations.iterdir()) if generations.exists() else True
    append(spark, base_settings, "after")
    assert seen(spark) == Counter({"b0": 2, "b1": 2, "b2": 2, "after": 2})
