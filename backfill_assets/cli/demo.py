"""``backfill-assets demo`` (``make demo``): the whole story on a generated day of backups.

1. generate a day of backups for several clients (fixed seed) in ``BACKUP_ROOT``, with an
   outage: some clients' folders of a few hours are held back (they land late);
2. run the live pipeline over the day (every layer of ``launch.LAYERS``);
3. reconcile: nothing to see, a client with no folder looks like a client with no traffic;
4. the late files land;
5. reconcile with the sensor's own evaluation: findings recorded as observations, ranges
   requested (raw -> transformed -> sessions);
6. run exactly those requests, in order, as the daemon's run queue would;
7. reconcile again: nothing left;
8. report the backfill (text, and Markdown + PNG under ``DATA_ROOT/reports``) with the
   published numbers checked against the ground truth.

It honours ``BACKUP_ROOT``, ``DATA_ROOT`` and ``DAGSTER_HOME``; the runs, checks,
observations and lineage show in ``make ui``. Running it again regenerates the demo's
backup tree (only a tree the generator wrote: ``raw/``, ``_held_back/``, ``_truth/``) and
publishes new versions over the previous demo's; nothing else is deleted. The runs' own
logs (Dagster event log, Spark) go to ``DATA_ROOT/demo.log``. Exit code 1 if a run fails
or a number does not match the ground truth.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from backfill_assets.cli.main import CommandError

if TYPE_CHECKING:
    import dagster as dg

    from backfill_assets.launch import LayerRun
    from backfill_assets.publishing.publisher import Layer
    from backfill_assets.reporting.expected import Delivery
    from backfill_assets.reporting.report import BackfillReport
    from backfill_assets.sensors.findings import RangeRequest
    from backfill_assets.settings import Settings

START = "2026-11-20T00"
LAST = "2026-11-20T23"
CLIENTS = 4
USERS_PER_CLIENT = 150
SEED = 7
# The outage: the backup uploads of client 2 (09:00-11:59) and client 3 (10:00) land late.
OUTAGE = ("2026-11-20T09/2", "2026-11-20T10/2", "2026-11-20T11/2", "2026-11-20T10/3")
LOG_NAME = "demo.log"


def register(subparsers: argparse._SubParsersAction) -> None:
    text = (
        "the whole story on a generated day of backups: outage, live run, late files, "
        "reconciliation, scoped backfill, report against the ground truth"
    )
    p = subparsers.add_parser("demo", help="run the README's demo (make demo)", description=text)
    p.set_defaults(handler=run)


class _Steps:
    """Numbered steps with their timings."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.count = 0
        self.spent: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str, title: str) -> Iterator[None]:
        self.count += 1
        print(f"\n== {self.count}. {title}", flush=True)
        began = time.monotonic()
        yield
        self.spent[name] = self.spent.get(name, 0.0) + time.monotonic() - began

    def summary(self) -> str:
        parts = ", ".join(f"{name} {seconds:.0f}s" for name, seconds in self.spent.items())
        return f"Done in {time.monotonic() - self.started:.0f}s ({parts})"


@contextlib.contextmanager
def _quiet(log_path: Path) -> Iterator[None]:
    """Send everything written to stderr (logs, Dagster's event log, warnings, and the Spark
    JVM, which inherits the descriptor when it starts) to ``log_path``; the demo's own
    account goes to stdout."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    with open(log_path, "ab") as log:
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def _check_backup_root(root: str) -> None:
    """Refuse anything but a local folder that is empty or holds a generated tree."""
    from backfill_assets.generator import TRUTH_DIR
    from backfill_assets.settings import is_uri

    if is_uri(root):
        raise CommandError(
            f"BACKUP_ROOT={root} is not a local path: the demo generates its "
            f"backups locally; point BACKUP_ROOT at a local folder"
        )
    path = Path(root)
    if (path / "raw").exists() and not (path / TRUTH_DIR / "summary.json").exists():
        raise CommandError(
            f"{path}/raw holds a backup tree that the generator did not write (no "
            f"{TRUTH_DIR}/summary.json); the demo never touches real backups: point "
            f"BACKUP_ROOT at another folder (e.g. BACKUP_ROOT=var/demo-backups)"
        )
    if (path / "raw").exists():
        print(
            f"  resetting the demo's generated backup tree under {path} "
            f"(raw/, _held_back/, _truth/)"
        )


def _show(layer_run: LayerRun) -> None:
    checks = list(layer_run.checks.values())
    passed = sum(1 for c in checks if c["passed"])
    print(
        f"  [{'ok' if layer_run.success else 'FAILED'}] {layer_run.layer:<11} "
        f"{layer_run.first}..{layer_run.last} ({layer_run.hours:>2} h) in "
        f"{layer_run.seconds:5.1f}s, checks {passed}/{len(checks)} passed, run "
        f"{layer_run.run_id}",
        flush=True,
    )
    for failure in layer_run.failures:
        print(f"      failure: {failure}")


def run(args: argparse.Namespace) -> int:
    from backfill_assets.settings import Settings

    settings = Settings.from_env()
    log_path = Path(settings.data_root) / LOG_NAME
    print(
        f"backfill-assets demo\n  BACKUP_ROOT  {settings.backup_root}\n  DATA_ROOT    "
        f"{settings.data_root}\n  DAGSTER_HOME {settings.dagster_home}\n  run logs     "
        f"{log_path}"
    )
    with _quiet(log_path):
        code = _demo(settings, log_path)
    logging.getLogger("py4j").setLevel(logging.WARNING)  # its goodbye at interpreter exit
    return code


def _demo(settings: Settings, log_path: Path) -> int:
    from backfill_assets import launch, tags
    from backfill_assets.definitions import build_definitions
    from backfill_assets.generator import generate_backups, land_held_back
    from backfill_assets.instance import get_instance
    from backfill_assets.layers.registry import LAYERS
    from backfill_assets.partitions import hour_range
    from backfill_assets.reporting import expected
    from backfill_assets.reporting.report import build_report
    from backfill_assets.resources import BACKUPS
    from backfill_assets.sensors.findings import (
        REQUEST_ID_TAG,
        REQUESTED_BY,
        ReconcileConfig,
        Window,
        allowed_outside,
    )
    from backfill_assets.sensors.reconciliation import Evaluation, evaluate

    step = _Steps()
    layers = [LAYERS[name] for name in launch.LAYERS if name in LAYERS]
    day = hour_range(START, LAST)

    with step(
        "generate",
        f"Generate a day of backups ({CLIENTS} clients, seed {SEED}) with "
        f"an outage: {len(OUTAGE)} folders held back",
    ):
        _check_backup_root(settings.backup_root)
        summary = generate_backups(
            settings.backup_root,
            start=START,
            hours=len(day),
            clients=CLIENTS,
            users_per_client=USERS_PER_CLIENT,
            seed=SEED,
            hold_back=list(OUTAGE),
            force=True,
        )
        print(
            f"  {summary.folders} folders, {summary.lines:,} lines ({summary.malformed} "
            f"malformed, {summary.duplicates} duplicate deliveries) for {START}..{LAST}; "
            f"held back: {', '.join(summary.held_back_folders)}"
        )
        seen_live = expected.read_deliveries(settings.backup_root)

    defs = build_definitions(settings)
    instance = get_instance(settings)
    store = defs.resources[BACKUPS]
    keys = {layer.name: launch.layer_keys(defs, layer.name) for layer in layers}
    config = ReconcileConfig.from_env()
    cursor: list[str | None] = [None]  # the sensor's cursor between evaluations

    def reconcile() -> Evaluation:
        evaluation = evaluate(instance, keys, store, config, cursor[0], layers)
        cursor[0] = evaluation.result.cursor
        for event in evaluation.result.asset_events:  # what the daemon records for a tick
            instance.report_runless_asset_event(event)
        assert evaluation.reconciliation is not None
        print("\n".join(f"  {line}" for line in evaluation.reconciliation.lines()))
        return evaluation

    with step("live run", "Live pipeline over the day (the outage goes unnoticed)"):
        # Sessions at the day's edges read hours outside the tree: empty, not missing.
        bounds = Window(tuple(day), START, LAST)
        outside = sorted(
            {h for layer in layers for h in allowed_outside(layer.name, START, LAST, bounds)}
        )
        runs = launch.launch(
            defs,
            instance,
            [(layer.name, START, LAST) for layer in layers],
            reason="demo: live pipeline",
            requested_by="demo",
            on_run=_show,
            extra_tags={
                tags.MODE: "live",
                tags.ALLOW_MISSING_HOURS: ",".join(outside),
                REQUEST_ID_TAG: f"demo-live-{time.strftime('%Y%m%dT%H%M%S')}",
            },
        )
        if len(runs) != len(layers) or not all(r.success for r in runs):
            print(f"the live pipeline failed; see {log_path} and `make ui`")
            return 1

    with step("reconcile", "Reconciliation after the live run"):
        reconcile()
        print(
            "  (a client with no folder looks like a client with no traffic: the outage "
            "is invisible until its files land)"
        )

    with step("land", "The late files land"):
        moved = land_held_back(settings.backup_root)
        print(f"  {len(moved)} folder(s) landed: {', '.join(moved)}")
        seen_after = expected.read_deliveries(settings.backup_root)

    with step("reconcile", "Reconciliation (the sensor's evaluation): findings, requests"):
        evaluation = reconcile()
        assert evaluation.reconciliation is not None
        requests = evaluation.reconciliation.plan.requests
        if not requests:
            print("  nothing requested, but the late files changed published hours")
            return 1

    title = f"Backfill the requested ranges ({len(requests)} run(s), in order)"
    with step("backfill", title):
        for request in requests:
            runs = launch.launch(
                defs,
                instance,
                [(request.layer, request.first, request.last)],
                reason=request.reason,
                requested_by=REQUESTED_BY,
                on_run=_show,
                extra_tags=request.tags(evaluation.request_id),
            )
            if not all(r.success for r in runs):
                print(f"a backfill run failed; see {log_path} and `make ui`")
                return 1

    with step("reconcile", "Reconciliation again"):
        again = reconcile()

    with step("report", f"Report of backfill {evaluation.request_id}"):
        report = build_report(instance, layers, backfill_id=evaluation.request_id)
        lines, truth_ok = _truth_lines(
            instance, layers, settings.backup_root, requests, seen_live, seen_after, report
        )
        report.truth = lines
        markdown, chart = report.write(Path(settings.reports_dir) / evaluation.request_id)
        print(report.text(), end="")
        print(f"written: {markdown} and {chart}")

    print(f"\n== {step.summary()}")
    print(
        f"`make ui` shows the runs, the checks, the lineage and the reconciliation "
        f"observations (asset raw/payloads, partitions {requests[0].first}.."
        f"{requests[0].last})."
    )
    assert again.reconciliation is not None
    return 0 if truth_ok and not again.reconciliation.actionable else 1


def _truth_lines(
    instance: dg.DagsterInstance,
    layers: Sequence[Layer],
    root: str,
    requests: Sequence[RangeRequest],
    seen_live: Sequence[Delivery],
    seen_after: Sequence[Delivery],
    report: BackfillReport,
) -> tuple[list[str], bool]:
    """The published numbers against the ground truth, and whether they all match."""
    from backfill_assets.partitions import hour_range
    from backfill_assets.reporting import expected
    from backfill_assets.sensors.state import published_from_instance

    day = hour_range(START, LAST)
    published = published_from_instance(instance, layers, day)
    lines, ok = [], True

    def compare(
        label: str, layer: str, actual: dict[str, tuple], truth: dict[str, tuple], what: str
    ) -> None:
        nonlocal ok
        good = [h for h in day if actual.get(h) == truth.get(h)]
        ok &= len(good) == len(day)
        bad = sorted(set(day) - set(good))
        lines.append(
            f"ground truth, {label}: {len(good)}/{len(day)} hours match ({what})"
            + (f"; DIFFER: {', '.join(bad)}" if bad else "")
        )

    if "raw" in published:
        rows = published["raw"]
        compare(
            "raw",
            "raw",
            {
                h: (p.rows.get("raw.payloads", 0), p.rows.get("raw.quarantine", 0))
                for h, p in rows.items()
            },
            expected.raw_rows(root),
            "payload rows and quarantined lines per hour",
        )
    if "transformed" in published:
        compare(
            "transformed",
            "transformed",
            {h: (p.lines,) for h, p in published["transformed"].items()},
            {h: (n,) for h, n in expected.transformed_rows(seen_after).items()},
            "distinct payloads per received hour",
        )
    for request in requests:
        table = next(
            (
                t
                for _, t in next(x for x in layers if x.name == request.layer).pairs
                if t.endswith(".sessions")
            ),
            None,
        )
        if table is None:
            continue
        hours = hour_range(request.first, request.last)
        rows = published.get(request.layer, {})
        before = expected.sessions(seen_live, hours)
        after = expected.sessions(seen_after, hours)
        truth = (sum(len(s) for s in before.values()), sum(len(s) for s in after.values()))
        actual = (
            sum((p.before or 0) for p in report.partitions if p.table == table and p.hour in hours),
            sum(rows[h].rows.get(table, 0) for h in hours if h in rows),
        )
        recovered = sum(
            len(
                {expected.session_key(s) for s in after[h]}
                - {expected.session_key(s) for s in before[h]}
            )
            for h in hours
        )
        ok &= actual == truth
        lines.append(
            f"ground truth, sessions of {hours[0]}..{hours[-1]}: published {actual[0]:,} -> "
            f"{actual[1]:,}, truth {truth[0]:,} -> {truth[1]:,} "
            f"({'match' if actual == truth else 'DIFFER'}); {recovered:,} session(s) "
            f"recovered (missing or cut short before the late files landed, right now)"
        )
    return lines, ok
