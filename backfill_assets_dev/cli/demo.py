"""``backfill-assets demo`` (``make demo``): the whole story on a generated day of backups.

1. generate a day of backups for several clients (fixed seed) in ``BACKUP_ROOT``, with an
   outage: some clients' folders of a few hours are held back (they land late);
2. run the live pipeline over the day: one release (a Dagster asset backfill of every
   layer of ``plan.LAYERS`` and ``release/publish``, mode ``live``);
3. a tick of the reconciliation sensor: nothing to see, a client with no folder looks
   like a client with no traffic;
4. the late files land;
5. a tick of the sensor: it records its findings as observations and submits the release
   that repairs them (raw -> transformed -> sessions, one publish transaction), a real
   Dagster backfill marked as launched by the sensor, which the demo follows;
6. a tick of the sensor again: nothing left;
7. report the release (text, and Markdown + PNG under ``DATA_ROOT/reports``) with the
   published numbers checked against the ground truth.

Dagster does the work: the demo submits the live release through ``dagster-graphql``, runs
``dagster-daemon`` meanwhile if none serves the instance (``release.daemon.DaemonSupervisor``), and
for each reconciliation starts the real ``reconciliation_sensor`` (the UI's "start" button,
through GraphQL), waits for the daemon's tick and resets the sensor to the status its code
declares. The demo's daemon has the sensor off by default (``BACKFILL_RECONCILE_SENSOR=off``
unless set) and ticking every 30 s while started (``BACKFILL_RECONCILE_INTERVAL_SECONDS``),
so the ticks are the demo's three; they are in the sensor's tick history in ``make ui``,
and the release it submitted shows as launched by it.

It honours ``BACKUP_ROOT``, ``DATA_ROOT`` and ``DAGSTER_HOME``; the runs, checks,
observations and lineage show in ``make ui``. Running it again regenerates the demo's
backup tree (only a tree the generator wrote: ``raw/``, ``_held_back/``, ``_truth/``),
clears the sensor's cursor and publishes new versions over the previous demo's; nothing
else is deleted. The runs' own logs (Dagster event log, Spark) go to
``DATA_ROOT/demo.log``. Exit code 1 if a run or a tick fails or a number does not match
the ground truth.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from backfill_assets.cli.main import CommandError

if TYPE_CHECKING:
    import dagster as dg

    from backfill_assets.core.names import Layer
    from backfill_assets.core.reporting.render import BackfillReport
    from backfill_assets.release.daemon import DaemonSupervisor
    from backfill_assets.release.outcomes import BackfillOutcome, RunSummary
    from backfill_assets.settings import Settings
    from backfill_assets_dev.expected import Delivery

START = "2026-11-20T00"
LAST = "2026-11-20T23"
CLIENTS = 4
USERS_PER_CLIENT = 150
SEED = 7
# The outage: the backup uploads of client 2 (09:00-11:59) and client 3 (10:00) land late.
OUTAGE = ("2026-11-20T09/2", "2026-11-20T10/2", "2026-11-20T11/2", "2026-11-20T10/3")
LOG_NAME = "demo.log"
DAEMON_LOG_NAME = "demo-daemon.log"
# The sensor's interval in the daemon the demo starts: longer than one start-tick-reset
# (so each reconciliation is one tick), short enough not to keep the demo waiting.
SENSOR_INTERVAL_SECONDS = "30"
TICK_TIMEOUT_SECONDS = 900.0


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
    from backfill_assets.settings import is_uri
    from backfill_assets_dev.generator import TRUTH_DIR

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


def _label(run: RunSummary) -> str:
    """The layers a run built (from its shadow assets), or ``publish``."""
    import dagster as dg

    from backfill_assets.core.names import LAYERS as REGISTRY
    from backfill_assets.core.plan import LAYERS
    from backfill_assets.release.keys import PUBLISH_KEY, table_name

    tables = {table_name(dg.AssetKey.from_user_string(asset)) for asset in run.assets}
    names = [
        name
        for name in LAYERS
        if name in REGISTRY and tables & {shadow for shadow, _ in REGISTRY[name].pairs}
    ]
    if PUBLISH_KEY.to_user_string() in run.assets:
        names.append("publish")
    return "+".join(names) or ", ".join(run.assets) or "?"


def _show(run: RunSummary) -> None:
    checks = list(run.checks.values())
    passed = sum(1 for c in checks if c["passed"])
    span = run.partition_range
    if ".." in span:
        first, last = span.split("..")
        from backfill_assets.core.hours import hour_range

        span = f"{span} ({len(hour_range(first, last)):>2} h)"
    print(
        f"  [{'ok' if run.success else 'HELD BACK' if run.held_back else 'FAILED'}] "
        f"{_label(run):<22} {span} in "
        f"{run.seconds:5.1f}s, checks {passed}/{len(checks)} passed, run {run.run_id}",
        flush=True,
    )
    for failure in run.failures:
        print(f"      failure: {failure}")


def _follow(
    instance: dg.DagsterInstance, supervisor: DaemonSupervisor, backfill_id: str
) -> BackfillOutcome:
    from backfill_assets.release import launch

    outcome = launch.follow(instance, backfill_id=backfill_id, supervisor=supervisor, on_run=_show)
    print(
        f"  release {backfill_id}: {outcome.status.lower()}, "
        f"{sum(r.success for r in outcome.runs)} of {len(outcome.runs)} run(s) succeeded",
        flush=True,
    )
    return outcome


@dataclass
class Tick:
    """One finished tick of the reconciliation sensor, and what it recorded and submitted."""

    status: str  # SUCCESS | SKIPPED | FAILURE
    message: str  # the skip reason (the sensor's summary) or the error
    observations: list = field(default_factory=list)  # AssetObservation of the tick
    releases: list = field(default_factory=list)  # the backfills (releases) it submitted

    @property
    def clean(self) -> bool:
        from backfill_assets.defs.sensors.reconciliation import NO_FINDINGS

        return self.status != "FAILURE" and self.message == NO_FINDINGS

    def lines(self) -> list[str]:
        from backfill_assets.defs.sensors.reconciliation import DRIFT, OBSERVATION, RESOLVED

        failed = self.status == "FAILURE"
        out = [f"tick FAILED: {self.message}" if failed else f"tick: {self.message}"]
        for event in self.observations:
            meta = {k: v.value for k, v in event.metadata.items()}
            where = f"{event.partition or '':13}  {event.asset_key.to_user_string()}"
            if meta.get(OBSERVATION) == DRIFT:
                out.append(f"{where}: {meta['kinds']} -> {meta['action']}")
                out += [f"    {f['kind']}: {f['detail']}" for f in meta["findings"]]
            elif meta.get(OBSERVATION) == RESOLVED:
                out.append(f"{where}: resolved")
            else:
                out.append(f"recorded for {event.asset_key.to_user_string()}: "
                           f"{event.description}")  # fmt: skip
        for backfill in self.releases:
            out.append(
                f"submitted release {backfill.backfill_id} ({backfill.title}), launched by "
                f"the sensor: {backfill.description}"
            )
        return out


def _sensor_tick(
    settings: Settings,
    instance: dg.DagsterInstance,
    supervisor: DaemonSupervisor,
    layers: Sequence[Layer],
    *,
    first: bool = False,
) -> Tick:
    """Start the reconciliation sensor (the first time from an empty cursor), wait for the
    daemon's tick, reset the sensor to its declared status; what the tick did."""
    import dagster as dg

    from backfill_assets.core import tags
    from backfill_assets.defs.sensors.reconciliation import SENSOR_NAME
    from backfill_assets.release.keys import table_key

    began = time.time()
    supervisor.ensure()
    actions = ("clear_cursor", "start") if first else ("start",)
    control_sensor(settings, SENSOR_NAME, *actions)
    try:
        tick = None
        while tick is None:
            supervisor.ensure()
            if time.time() - began > TICK_TIMEOUT_SECONDS:
                raise CommandError(
                    f"no tick of {SENSOR_NAME} within {TICK_TIMEOUT_SECONDS:.0f} s of starting "
                    f"it; see {supervisor.log_file} (is a daemon with a longer "
                    f"BACKFILL_RECONCILE_INTERVAL_SECONDS serving this instance?)"
                )
            for state in instance.all_instigator_state():
                if state.instigator_name != SENSOR_NAME:
                    continue
                ticks = instance.get_ticks(
                    state.instigator_origin_id, state.selector_id, after=began
                )
                done = [t for t in ticks if t.status.value != "STARTED"]
                tick = min(done, key=lambda t: t.timestamp) if done else None
            if tick is None:
                time.sleep(1.0)
    finally:
        control_sensor(settings, SENSOR_NAME, "reset")
    observations = [
        record.asset_observation
        for layer in layers
        for record in instance.fetch_observations(
            dg.AssetRecordsFilter(
                asset_key=table_key(layer.pairs[0][1]), after_timestamp=tick.timestamp
            ),
            limit=1000,
        ).records
        if record.asset_observation is not None
    ]
    releases = [
        b
        for b in instance.get_backfills(limit=50)
        if b.tags.get(tags.DAGSTER_SENSOR) == SENSOR_NAME and b.backfill_timestamp >= tick.timestamp
    ]
    return Tick(
        tick.status.value,
        tick.skip_reason or (tick.error.message.strip() if tick.error else ""),
        sorted(observations, key=lambda e: (e.partition or "", e.asset_key.to_user_string())),
        sorted(releases, key=lambda b: b.backfill_timestamp),
    )


def run(args: argparse.Namespace) -> int:
    from backfill_assets.settings import Settings

    # The daemon this demo starts runs the real sensor only when the demo starts it (set
    # BACKFILL_RECONCILE_SENSOR=on to let it tick on its own too).
    os.environ.setdefault("BACKFILL_RECONCILE_SENSOR", "off")
    os.environ.setdefault("BACKFILL_RECONCILE_INTERVAL_SECONDS", SENSOR_INTERVAL_SECONDS)
    settings = Settings.from_env()
    log_path = Path(settings.data_root) / LOG_NAME
    print(
        f"backfill-assets demo\n  BACKUP_ROOT  {settings.backup_root}\n  DATA_ROOT    "
        f"{settings.data_root}\n  DAGSTER_HOME {settings.dagster_home}\n  run logs     "
        f"{log_path}"
    )
    from backfill_assets.release import daemon
    from backfill_assets.release.instance import get_instance

    with _quiet(log_path):
        instance = get_instance(settings)
        daemon_log = Path(settings.data_root) / DAEMON_LOG_NAME
        with daemon.DaemonSupervisor(settings, instance, daemon_log) as supervisor:
            code = _demo(settings, log_path, instance, supervisor)
    logging.getLogger("py4j").setLevel(logging.WARNING)  # its goodbye at interpreter exit
    return code


def _demo(
    settings: Settings,
    log_path: Path,
    instance: dg.DagsterInstance,
    supervisor: DaemonSupervisor,
) -> int:
    from backfill_assets.core import plan, tags
    from backfill_assets.core.hours import hour_range
    from backfill_assets.core.names import LAYERS
    from backfill_assets.definitions import build_definitions
    from backfill_assets.release import keys, launch
    from backfill_assets.release.report import BackfillReport, build_report
    from backfill_assets_dev import expected
    from backfill_assets_dev.generator import generate_backups, land_held_back

    step = _Steps()
    layers = [LAYERS[name] for name in plan.LAYERS if name in LAYERS]
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

    def reconcile(first: bool = False) -> Tick:
        tick = _sensor_tick(settings, instance, supervisor, layers, first=first)
        print("\n".join(f"  {line}" for line in tick.lines()), flush=True)
        return tick

    with step("live run", "Live pipeline over the day (the outage goes unnoticed)"):
        # One release over the day; the session hours at the day's edges read hours
        # outside the backup tree, which the IO manager reads as empty.
        chosen = plan.release_layers([plan.LAYERS[0]])
        live_id = launch.submit_backfill(
            settings,
            keys.release_selection(defs, chosen),
            day,
            launch.request_tags(
                dry_run=False,
                reason="demo: live pipeline",
                requested_by="demo",
                extra={tags.MODE: "live"},
            ),
            title=f"demo live {START}..{LAST}",
            description="demo: live pipeline",
        )
        print(f"  submitted release {live_id}: {'+'.join(chosen)} + publish for {START}..{LAST}")
        live = _follow(instance, supervisor, live_id)
        if not live.success:
            print(f"the live pipeline failed; see {log_path}, {supervisor.log_file} and `make ui`")
            return 1

    title = "Reconciliation after the live run (a tick of the reconciliation sensor)"
    with step("reconcile", title):
        print("  reconciliation_sensor started (from an empty cursor) until the daemon's tick")
        if reconcile(first=True).status == "FAILURE":
            return 1
        print(
            "  (a client with no folder looks like a client with no traffic: the outage "
            "is invisible until its files land)"
        )

    with step("land", "The late files land"):
        moved = land_held_back(settings.backup_root)
        print(f"  {len(moved)} folder(s) landed: {', '.join(moved)}")
        seen_after = expected.read_deliveries(settings.backup_root)

    with step("reconcile", "Reconciliation: the sensor's tick finds the damage, submits a release"):
        found = reconcile()
        if not found.releases:
            print("  nothing submitted, but the late files changed published hours")
            return 1
        release_ids = [b.backfill_id for b in found.releases]
        damaged = sorted({e.partition for e in found.observations if e.partition})

    title = f"The sensor's release(s): {len(release_ids)} Dagster backfill(s), run by the daemon"
    with step("backfill", title):
        for release_id in release_ids:
            outcome = _follow(instance, supervisor, release_id)
            if not outcome.success:
                print(f"a release failed; see {log_path}, {supervisor.log_file} and `make ui`")
                return 1

    with step("reconcile", "Reconciliation again (a tick of the sensor)"):
        again = reconcile()

    ident = release_ids[0] if len(release_ids) == 1 else "+".join(release_ids)
    with step("report", f"Report of release {ident}"):
        reports = [build_report(instance, layers, backfill_id=r) for r in release_ids]
        report = (
            reports[0]
            if len(reports) == 1
            else BackfillReport(
                f"releases {', '.join(release_ids)}",
                [run for r in reports for run in r.runs],
                partitions=[p for r in reports for p in r.partitions],
                release_id=ident,
            )
        )
        lines, truth_ok = _truth_lines(
            instance, layers, settings.backup_root, seen_live, seen_after, report
        )
        report.truth = lines
        markdown, chart = report.write(Path(settings.reports_dir) / ident[:120])
        print(report.text(), end="")
        print(f"written: {markdown} and {chart}")

    print(f"\n== {step.summary()}")
    print(
        f"`make ui` shows the releases on the Backfills page (the repair launched by "
        f"reconciliation_sensor), their runs, the checks, the lineage, the sensor's ticks "
        f"(Automation) and its observations (asset raw/raw_payloads, partitions "
        f"{damaged[0]}..{damaged[-1]})."
    )
    if not again.clean:
        print("  the last tick still found damage (above)")
    return 0 if truth_ok and again.clean else 1


def _truth_lines(
    instance: dg.DagsterInstance,
    layers: Sequence[Layer],
    root: str,
    seen_live: Sequence[Delivery],
    seen_after: Sequence[Delivery],
    report: BackfillReport,
) -> tuple[list[str], bool]:
    """The published numbers against the ground truth, and whether they all match."""
    from backfill_assets.core.hours import hour_range
    from backfill_assets.release.state import published_from_instance
    from backfill_assets_dev import expected

    day = hour_range(START, LAST)
    published = published_from_instance(instance, layers, day)
    lines, ok = [], True

    def compare(label: str, actual: dict[str, tuple], truth: dict[str, tuple], what: str) -> None:
        nonlocal ok
        good = [h for h in day if actual.get(h) == truth.get(h)]
        ok &= len(good) == len(day)
        bad = sorted(set(day) - set(good))
        lines.append(
            f"ground truth, {label}: {len(good)}/{len(day)} hours match ({what})"
            + (f"; DIFFER: {', '.join(bad)}" if bad else "")
        )

    if "raw" in published:
        compare(
            "raw",
            {
                h: (p.rows.get("raw.payloads", 0), p.rows.get("raw.quarantine", 0))
                for h, p in published["raw"].items()
            },
            expected.raw_rows(root),
            "payload rows and quarantined lines per hour",
        )
    if "transformed" in published:
        compare(
            "transformed",
            {h: (p.lines,) for h, p in published["transformed"].items()},
            {h: (n,) for h, n in expected.transformed_rows(seen_after).items()},
            "distinct payloads per received hour",
        )
    for layer in layers:
        table = next((t for t in layer.tables if t.endswith(".sessions")), None)
        if table is None:
            continue
        mine = [p for p in report.partitions if p.table == table]
        hours = sorted({p.hour for p in mine})
        if not hours:
            continue
        rows = published_from_instance(instance, [layer], hours).get(layer.name, {})
        before = expected.sessions(seen_live, hours)
        after = expected.sessions(seen_after, hours)
        truth = (sum(len(s) for s in before.values()), sum(len(s) for s in after.values()))
        actual = (
            sum(p.before or 0 for p in mine),
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


# ------------------------------------------------------------- the sensor, as the UI's buttons

_SENSOR_ACTIONS = {
    "clear_cursor": "setSensorCursor(sensorSelector: $selector)",  # no cursor: forget
    "start": "startSensor(sensorSelector: $selector)",
    "reset": "resetSensor(sensorSelector: $selector)",  # back to the status in its code
}


def control_sensor(settings: Settings, name: str, *actions: str) -> str:
    """Do what the UI's sensor buttons do, in order, in one GraphQL request: ``clear_cursor``,
    ``start``, ``reset`` (to the default status its code declares). Returns the sensor's
    status afterwards (``RUNNING`` or ``STOPPED``)."""
    from backfill_assets.release import launch

    unknown = [a for a in actions if a not in _SENSOR_ACTIONS]
    if unknown or not actions:
        raise ValueError(f"sensor actions {list(actions)}: each one of {sorted(_SENSOR_ACTIONS)}")
    fields = "".join(
        f"  {action}: {_SENSOR_ACTIONS[action]} {{\n    __typename\n"
        f"    ... on Sensor {{ sensorState {{ status }} }}\n    ... on Error {{ message }}\n  }}\n"
        for action in actions
    )
    selector = {"repositoryLocationName": launch.LOCATION, "repositoryName": launch.REPOSITORY}
    query = f"mutation Sensor($selector: SensorSelector!) {{\n{fields}}}"
    data = launch.graphql(settings, query, {"selector": {**selector, "sensorName": name}})
    states = [launch.mutation_outcome(data[action], "Sensor")["sensorState"] for action in actions]
    return states[-1]["status"]
