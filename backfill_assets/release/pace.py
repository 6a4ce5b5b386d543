"""How far a running release is, and how long it has left: the figures of ``backfill``'s
progress line and of the report.

- **built**: hours of each layer the release has a candidate of (the ledger's
  ``audit.shadow_partitions``), of the hours its backfill targets (``progress.targeted``);
- **checked**: those whose candidate passed every check of its layer (the ledger's
  ``audit.check_results`` for the candidate's version);
- **runs**: the release's runs done of those requested so far (Dagster requests a layer's
  runs as their upstream hours are built, so the second figure grows);
- **time left**: at the release's own pace (hours built and checked per second since its
  first run started), or, before its first hour is built, its estimate
  (``backfill_assets/estimate_seconds``, the CLI's estimate before launching) less the time
  since it was requested.

Two SQL queries on the ledger and two on the instance: no Spark. ``Reporter`` prints the
line at its own pace while ``launch.follow`` polls (every 0.5 s).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import dagster as dg

from backfill_assets.core import tags
from backfill_assets.core.names import LAYERS, Layer
from backfill_assets.core.warehouse import audit, ledger_file
from backfill_assets.release.progress import targeted
from backfill_assets.settings import Settings, ledger_url, progress_seconds

log = logging.getLogger(__name__)
# A backfill's statuses once it has ended (``launch.follow`` waits for one of them).
FINISHED = {"COMPLETED", "COMPLETED_SUCCESS", "COMPLETED_FAILED", "FAILED", "CANCELED"}
RUN_DONE = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}


@dataclass(frozen=True)
class LayerProgress:
    name: str
    total: int  # hours the release's backfill targets
    built: int
    checked: int


def time_left(
    done: float, total: float, elapsed: float | None, estimate_seconds: float | None = None
) -> float | None:
    """Seconds left: at the pace so far (``done`` of ``total`` in ``elapsed`` seconds), or,
    before anything is done, what is left of the estimate (None: nothing to go by)."""
    if total <= 0 or done >= total:
        return 0.0
    if done > 0 and elapsed:
        return elapsed / done * (total - done)
    if estimate_seconds is not None:
        return max(estimate_seconds - (elapsed or 0.0), 0.0)
    return None


def duration(seconds: float) -> str:
    """``45 s``, ``6 min``, ``2.5 h``: a duration as an operator reads it."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


@dataclass(frozen=True)
class Progress:
    layers: tuple[LayerProgress, ...]
    runs_done: int
    runs: int  # requested so far
    elapsed: float | None  # seconds since the first run started
    left: float | None  # seconds, None: unknown
    finished: bool = False

    @property
    def figures(self) -> tuple[int, int]:
        """(hours built and checked, of how many): the pace's units, every layer."""
        done = sum(x.built + x.checked for x in self.layers)
        return done, 2 * sum(x.total for x in self.layers)

    def line(self) -> str:
        parts = [
            f"{x.name} {x.built}/{x.total} h built, {x.checked}/{x.total} checked"
            for x in self.layers
        ]
        parts.append(f"{self.runs_done} run(s) done of {self.runs} requested so far")
        if self.elapsed is not None:
            parts[-1] += f" in {duration(self.elapsed)}"
        done, total = self.figures
        if self.finished:
            parts.append("finished")
        elif total and done >= total:
            parts.append("every hour built and checked")
        elif self.left is None:
            parts.append("time left unknown until an hour is built")
        else:
            parts.append(f"about {duration(self.left)} left")
        return "progress: " + "; ".join(parts)


def ledger_figures(
    warehouse_dir: str, release: str, layers: Sequence[Layer]
) -> dict[str, tuple[set[str], set[str]]]:
    """Layer -> (hours built, hours checked) of the release, from the ledger (SQL); nothing
    while a SQLite ledger does not exist yet (the first run creates it: not this reader)."""
    db = ledger_file.sqlite_file(ledger_url(warehouse_dir))
    if db is not None and not db.exists():
        return {}
    of_table = {layer.checked_table: layer for layer in layers}
    where = {"release_id": release, "table_name": list(of_table)}
    newest: dict[tuple[str, str], str] = {}
    for r in audit.rows(warehouse_dir, audit.SHADOW_PARTITIONS, where, "written_at"):
        newest[(r["table_name"], r["hour"])] = r["version"]
    outcomes: dict[tuple[str, str, str], dict[str, bool]] = {}
    if newest:
        where = {"table_name": list(of_table), "version": set(newest.values())}
        for r in audit.rows(warehouse_dir, audit.CHECK_RESULTS, where, "checked_at"):
            key = (r["table_name"], r["hour"], r["version"])
            outcomes.setdefault(key, {})[r["check_name"]] = bool(r["passed"])
    found: dict[str, tuple[set[str], set[str]]] = {}
    for (table, hour), version in newest.items():
        layer = of_table[table]
        built, checked = found.setdefault(layer.name, (set(), set()))
        built.add(hour)
        results = outcomes.get((table, hour, version), {})
        if results and all(results.get(name) for name in layer.checks):
            checked.add(hour)
    return found


def release_runs(instance: dg.DagsterInstance, release: str) -> list[dg.RunRecord]:
    """The runs of a release's backfill and of its re-executions."""
    unique = {}
    for tag in tags.RELEASE_TAGS:
        for record in instance.get_run_records(filters=dg.RunsFilter(tags={tag: release})):
            unique[record.dagster_run.run_id] = record
    return list(unique.values())


def release_progress(
    instance: dg.DagsterInstance,
    asset_graph,
    warehouse_dir: str,
    release: str,
    layers: Sequence[Layer],
    now: float | None = None,
) -> Progress | None:
    """The release's progress (None: it is not a backfill of this instance)."""
    target = targeted(instance, asset_graph, release, layers)
    if target is None:
        return None
    now = time.time() if now is None else now
    ledger = ledger_figures(warehouse_dir, release, layers)
    rows = []
    for name, hours in target.items():
        built, checked = ledger.get(name, (set(), set()))
        wanted = set(hours)
        rows.append(LayerProgress(name, len(wanted), len(built & wanted), len(checked & wanted)))
    records = release_runs(instance, release)
    starts = [r.start_time for r in records if r.start_time]
    done = [r for r in records if r.dagster_run.status in RUN_DONE]
    backfill = instance.get_backfill(release)
    finished = backfill is not None and backfill.status.value in FINISHED
    elapsed = now - min(starts) if starts else None
    if finished and done:
        ends = [r.end_time for r in done if r.end_time]
        elapsed = max(ends) - min(starts) if ends and starts else elapsed
    progress = Progress(tuple(rows), len(done), len(records), elapsed, None, finished)
    since_request = now - backfill.backfill_timestamp if backfill else elapsed
    units, total = progress.figures
    left = time_left(units, total, elapsed if units else since_request, _estimate(backfill))
    return dataclasses.replace(progress, left=left)


def _estimate(backfill) -> float | None:
    text = (backfill.tags if backfill is not None else {}).get(tags.ESTIMATE_SECONDS)
    try:
        return float(text) if text else None
    except ValueError:
        return None


class Reporter:
    """Prints a release's progress line every ``every`` seconds while ``launch.follow``
    polls (``tick``), and when a run ends (``tick(ended=True)``); a failing query is
    logged once and the line skipped: following goes on."""

    def __init__(
        self,
        figures: Callable[[], Progress | None],
        every: float,
        out: Callable[[str], None] = print,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.figures, self.every, self.out, self.clock = figures, every, out, clock
        self.last: float | None = None
        self.failed = False

    def tick(self, ended: bool = False) -> None:
        now = self.clock()
        if self.last is None:
            self.last = now  # the first line comes after one interval, not at submission
        if not ended and now - self.last < self.every:
            return
        self.last = now
        try:
            progress = self.figures()
        except Exception as exc:  # progress only informs: following goes on whatever failed
            if not self.failed:
                log.warning("progress unavailable: %s", exc)
            self.failed = True
            return
        if progress is not None:
            self.out(progress.line())


def reporter(
    settings: Settings,
    asset_graph,
    instance: dg.DagsterInstance,
    release: str,
    out: Callable[[str], None] = print,
) -> Reporter:
    """The ``Reporter`` of a release the CLI follows: every layer, every
    ``BACKFILL_PROGRESS_SECONDS``."""
    layers = list(LAYERS.values())
    return Reporter(
        lambda: release_progress(instance, asset_graph, settings.warehouse_dir, release, layers),
        progress_seconds(),
        out,
    )
