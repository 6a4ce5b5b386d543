"""Suite-wide fixtures: ONE Spark session (local mode, embedded metastore) for every test.

Tests share the session and its metastore, so the ``warehouse`` fixture empties the catalog
before each test that uses it; backup trees are generated per test (milliseconds).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import pytest

from backfill_assets.core import names, plan, tags
from backfill_assets.definitions import build_definitions
from backfill_assets.release import keys, launch
from backfill_assets.settings import Settings
from backfill_assets_dev.generator import generate_backups

# The suite's JVMs compile with C1 only (HotSpot's quick JIT tier), with C2's code cache size,
# and collect with the serial collector (below).
# They run small data: short runs, fault and stack processes, a driver that plans many small
# releases. The machine's cores are the suite's limit, and C2 spent them compiling code that
# then ran a few times: C2's compiler threads used 32 of a cold release's 58 s of JVM CPU (C1
# only: 34 s in all, the same wall-clock time), and 132 of test_release.py's 294 s (C1 only,
# with the codegen cache of spark/spark-defaults.conf: 167 s). Behaviour is the same: only
# the machine code the JIT makes differs. The bench, ``make demo`` and production keep the
# JVM's default tiers (C2 for long, hot loops over large data). With C1's own default code
# cache (48 MB) it filled up: its sweeper used 94 of test_release.py's 359 s (C2: 294 s).
# And the serial collector: G1's concurrent and parallel threads cost every JVM of the suite
# CPU its two cores did not have (the whole suite 13:24 with it instead of 15:29; the stack
# test 197 s instead of 261 s, the CLI backfills 148 s instead of 210 s, erasure 81 s
# instead of 98 s; 2026-11-27, the installed checkout).
TEST_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:ReservedCodeCacheSize=240m", "-XX:+UseSerialGC")


@pytest.fixture(scope="session", autouse=True)
def temporary_files() -> Iterator[Path]:
    """Every temporary file of the session's processes in one directory, removed at the end.

    Spark and Hive put theirs under ``java.io.tmpdir`` (``spark-*``, ``blockmgr-*``,
    ``artifacts-*``, per-session ``*_resources`` directories, native libraries), Python's
    ``tempfile`` and Chromium under ``TMPDIR``, and a JVM killed by a fault test never
    removes its own. Set here, before the first process starts, both reach every JVM and
    Python process of the suite: this one's Spark session and what the stack and fault
    tests start. (The production instance's compute log manager stages in the directory
    its config names: the stack tests point it into their own Dagster home.)

    Traversable by other users (not listable): the stack's Postgres runs as its service
    user in a directory of its own below it.

    The same variable gives every JVM of the suite ``TEST_JVM_OPTIONS``."""
    import os
    import shutil
    import tempfile

    directory = Path(tempfile.mkdtemp(prefix="backfill-assets-tests-"))
    directory.chmod(0o711)
    saved = {name: os.environ.get(name) for name in ("TMPDIR", "JAVA_TOOL_OPTIONS")}
    os.environ["TMPDIR"] = str(directory)
    os.environ["JAVA_TOOL_OPTIONS"] = " ".join(
        filter(
            None, [saved["JAVA_TOOL_OPTIONS"], f"-Djava.io.tmpdir={directory}", *TEST_JVM_OPTIONS]
        )
    )
    tempfile.tempdir = None  # this process's tempfile reads TMPDIR again
    try:
        yield directory
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        tempfile.tempdir = None
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def base_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    root = tmp_path_factory.mktemp("suite")
    return Settings.from_env(
        {
            "BACKUP_ROOT": str(root / "backups"),
            "DATA_ROOT": str(root / "data"),
            "DAGSTER_HOME": str(root / "dagster_home"),
        }
    )


@pytest.fixture(scope="session")
def spark(base_settings: Settings):
    import logging

    logging.getLogger("py4j").setLevel(logging.WARNING)  # no "closing" chatter at exit
    from backfill_assets.core.spark.session import spark_session

    session = spark_session(base_settings)
    yield session
    session.stop()


def empty_warehouse(spark, settings: Settings) -> None:
    """An empty catalog and warehouse. The tables are external, so dropping them leaves
    their files (the audit tables' too, which a new table at the same place would read):
    drop every database, then delete the warehouse directory."""
    import shutil

    for row in spark.sql("SHOW DATABASES").collect():
        if row[0] != "default":
            spark.sql(f"DROP DATABASE IF EXISTS {row[0]} CASCADE")
    spark.catalog.clearCache()
    shutil.rmtree(settings.warehouse_dir, ignore_errors=True)
    empty_ledger(settings.warehouse_dir)


def empty_ledger(warehouse_dir: str) -> None:
    """Every row of the ledger database deleted (its schema stays, at the newest revision),
    and its marker with them (a ledger that lost publications is otherwise refused)."""
    from backfill_assets import settings
    from backfill_assets.core.warehouse import audit, database, ledger_file

    with database.transaction(warehouse_dir) as connection:
        for table in audit.METADATA.sorted_tables:
            connection.execute(table.delete())
    db = ledger_file.sqlite_file(settings.ledger_url(warehouse_dir))
    if db is not None:
        ledger_file.marker_of(db).unlink(missing_ok=True)


@pytest.fixture
def warehouse(spark, base_settings: Settings) -> None:
    """An empty catalog and warehouse for this test."""
    empty_warehouse(spark, base_settings)


MEMORY_FS = Path("/dev/shm")


@pytest.fixture
def instance(tmp_path: Path) -> Iterator[dg.DagsterInstance]:
    """A real SQLite-backed Dagster instance in a temporary DAGSTER_HOME.

    In memory (``/dev/shm``) where the machine has it, else beside the test's files: Dagster
    stores each event as its own SQLite transactions, each waiting for its sync to disk (a
    run of 164 events took 1.9-2.1 s on this VM's disk and 1.2-1.4 s there); the storage
    and what it does are the same."""
    import os
    import tempfile

    memory = MEMORY_FS.is_dir() and os.access(MEMORY_FS, os.W_OK)
    with (
        tempfile.TemporaryDirectory(
            prefix="backfill-assets-dagster-home-", dir=MEMORY_FS if memory else tmp_path
        ) as home,
        dg.DagsterInstance.local_temp(home, overrides={"telemetry": {"enabled": False}}) as inst,
    ):
        yield inst


@pytest.fixture
def make_backups(tmp_path: Path) -> Callable[..., Path]:
    """Generate a small backup tree; keyword arguments go to ``generate_backups``."""

    def make(**kwargs) -> Path:
        root = tmp_path / f"backups{len(list(tmp_path.glob('backups*')))}"
        options = {
            "start": "2026-11-20T00",
            "hours": 4,
            "clients": 2,
            "users_per_client": 25,
            "seed": 11,
            "workers": 1,
        }
        options.update(kwargs)
        generate_backups(root, **options)
        return root

    return make


@pytest.fixture
def settings_for(base_settings: Settings) -> Callable[[Path], Settings]:
    """The suite's settings pointed at another backup tree (same Spark session/warehouse)."""
    return lambda backups: dataclasses.replace(base_settings, backup_root=str(backups))


@dataclasses.dataclass
class ReleaseResult:
    """What an in-process release did: its id and each run's summary, in order."""

    release_id: str
    runs: list[launch.RunSummary]

    @property
    def success(self) -> bool:
        return bool(self.runs) and all(r.success for r in self.runs)

    @property
    def checks(self) -> dict[str, dict]:
        return {name: c for r in self.runs for name, c in r.checks.items()}

    @property
    def failures(self) -> list[str]:
        return [f for r in self.runs for f in r.failures]

    def run_of(self, asset: str) -> launch.RunSummary:
        return next(r for r in self.runs if asset in r.assets)


Stage = tuple[list[str], str, str]  # (layers, first, last); the layer PUBLISH: the publish step
PUBLISH = "publish"


def release_stages(layers: list[str], first: str, last: str, publish: bool) -> list[Stage]:
    """The runs Dagster's backfill daemon makes of a release, in order: the received-hour
    layers over ``first..last`` in one run, the session layer over the session hours their
    windows touch (or ``first..last`` when it is the root) in the same run when those are
    the same hours, else in a second one; the publish step in the last run (its hours)."""
    from backfill_assets.core.windows import session_hours_touching

    received = [layer for layer in layers if layer in names.RECEIVED_HOUR_LAYERS]
    session_span = session_hours_touching(first, last) if received else (first, last)
    stages: list[Stage] = []
    if received:
        stages.append((received, first, last))
    if "aggregated" in layers:
        if stages and session_span == (first, last):
            stages[0][0].append("aggregated")
        else:
            stages.append((["aggregated"], *session_span))
    if publish:  # the publish step's hours are the session hours (``publish_deps``)
        if (stages[-1][1], stages[-1][2]) == session_span:
            stages[-1][0].append(PUBLISH)
        else:
            stages.append(([PUBLISH], *session_span))
    return stages


def execute_stages(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    stages: list[Stage],
    *,
    release_id: str,
    run_tags: dict[str, str],
    run_config: dict | None = None,
) -> list[launch.RunSummary]:
    """Run a release's stages in this process with Dagster's public testing API
    (``execute_in_process``), each a Dagster run tagged with the release: the suite's fast
    path, without the daemon's iterations and the run processes. The product runs releases
    only as Dagster asset backfills (the CLI tests, the sensor and the stack test do).
    Stops after a stage whose asset step failed, as Dagster does not build downstream of a
    failed step."""
    job = defs.resolve_implicit_global_asset_job_def()
    summaries: list[launch.RunSummary] = []
    for stage_layers, first, last in stages:
        selection = [
            k for layer in stage_layers if layer != PUBLISH for k in keys.layer_keys(defs, layer)
        ]
        publishes = PUBLISH in stage_layers
        if publishes:
            selection.append(keys.PUBLISH_KEY)
        stage_tags = {
            **run_tags,
            tags.RELEASE: release_id,
            "dagster/asset_partition_range_start": first,
            "dagster/asset_partition_range_end": last,
        }
        result = job.execute_in_process(
            instance=instance,
            asset_selection=selection,
            tags=stage_tags,
            run_config=dict(run_config) if run_config and publishes else None,
            raise_on_error=False,
        )
        summary = launch.summarize_run(instance, instance.get_run_by_id(result.run_id))
        summaries.append(summary)
        if any(not f.split(":")[0].endswith("_checks") for f in summary.failures):
            break
    return summaries


def execute_release(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    first: str,
    last: str,
    *,
    layers: tuple[str, ...] = ("raw",),
    downstream: bool = True,
    publish: bool = True,
    release_id: str | None = None,
    extra_tags: dict[str, str] | None = None,
    publish_only: str | None = None,
    publish_config: dict | None = None,
) -> ReleaseResult:
    """Run a release in this process, stage by stage as the daemon would, all runs tagged
    with one release id (the suite's fast path; the CLI tests drive the real daemon)."""
    import uuid

    release_id = release_id or f"test-{uuid.uuid4().hex[:10]}"
    chosen = plan.release_layers(list(layers), downstream=downstream)
    stages = release_stages(chosen, first, last, publish)
    run_tags = launch.request_tags(dry_run=not publish, extra=extra_tags)
    config = None
    if publish_only:  # publish an earlier (dry-run) release without rebuilding it
        stages = [([PUBLISH], first, last)]
        run_tags[tags.MODE] = "publish"
        config = {
            "ops": {
                "release__publish": {
                    "config": {"release_id": publish_only, **(publish_config or {})}
                }
            }
        }
    runs = execute_stages(
        defs, instance, stages, release_id=release_id, run_tags=run_tags, run_config=config
    )
    return ReleaseResult(release_id, runs)


@pytest.fixture
def run_release(spark, warehouse, instance: dg.DagsterInstance, settings_for):
    """Execute a release in-process against a given backup tree (see ``execute_release``)."""

    def run(backups: Path, first: str, last: str, **kwargs) -> ReleaseResult:
        return execute_release(
            build_definitions(settings_for(backups)), instance, first, last, **kwargs
        )

    return run


def end_backfill(instance: dg.DagsterInstance, backfill_id: str, status: str) -> None:
    """Mark a backfill that no daemon runs here as ended (``COMPLETED_SUCCESS``,
    ``CANCELED``), as Dagster's daemon would: a backfill left requested holds its hours
    for every later release of the instance (one release per hour at a time)."""
    backfill = instance.get_backfill(backfill_id)
    instance.update_backfill(backfill.with_status(getattr(type(backfill.status), status)))


def write_backup_folder(
    root: Path,
    hour: str,
    client_id: int,
    files: dict[str, bytes],
    *,
    manifest: dict | None = None,
    records: dict[str, int] | None = None,
    closed: bool = True,
) -> Path:
    """Write one (hour, client) folder by hand: ``files`` are compressed part-file bytes.

    The manifest is derived from the files unless ``manifest`` overrides fields of it;
    ``records`` overrides the per-file line counts; ``closed=False`` writes no manifest.
    """
    import hashlib
    import json

    import zstandard

    from backfill_assets.core.hours import backup_hour_path, parse_hour

    folder = root / "raw" / backup_hour_path(hour) / f"client_id={client_id}"
    folder.mkdir(parents=True, exist_ok=True)
    entries = []
    for name, data in files.items():
        (folder / name).write_bytes(data)
        if name in (records or {}):  # given: a hostile file is never decompressed here
            count = (records or {})[name]
        else:
            try:
                count = zstandard.ZstdDecompressor().decompressobj().decompress(data).count(b"\n")
            except zstandard.ZstdError:
                count = 0
        entries.append(
            {
                "name": name,
                "records": count,
                "bytes": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
            }
        )
    if closed:
        body = {
            "client_id": client_id,
            "hour": f"{parse_hour(hour):%Y-%m-%dT%H}:00:00Z",
            "records": sum(e["records"] for e in entries),
            "files": entries,
            "closed_at": f"{parse_hour(hour):%Y-%m-%dT%H}:59:59Z",
        }
        body.update(manifest or {})
        (folder / "_MANIFEST.json").write_text(json.dumps(body))
    return folder


def zst(lines: list[bytes | str]) -> bytes:
    """Compress lines into one zstd frame (newline-terminated), as the backup tool does."""
    import zstandard

    raw = b"".join((x.encode() if isinstance(x, str) else x) + b"\n" for x in lines)
    return zstandard.ZstdCompressor().compress(raw)


@contextmanager
def fault_pause(fifo: Path, pause_at: str, *, arm: bool = True) -> Iterator[tuple[dict, Callable]]:
    """The FIFO a process writes ``pause_at`` into when it reaches that fault point and
    stops there (``faults.checkpoint``: no sleeps). Yields the environment to give the
    process (``arm``: with the pause set, else the process arms it itself) and
    ``reached(process, describe)``, which returns once the point is reached, or fails with
    ``describe()`` if the process exits first."""
    import os
    import select

    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo)
    env = {"BACKFILL_ASSETS_PAUSE_FIFO": str(fifo)}
    if arm:
        env["BACKFILL_ASSETS_PAUSE_AT"] = pause_at
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    keeper = os.open(fifo, os.O_WRONLY)  # no end of file before the process writes

    def reached(process, describe: Callable[[], str]) -> None:
        while not select.select([reader], [], [], 5)[0]:
            if process.poll() is not None:
                raise AssertionError(describe())
        assert os.read(reader, 4096).decode().startswith(pause_at)  # one or more writers

    try:
        yield env, reached
    finally:
        os.close(reader)
        os.close(keeper)


def kill_at_fault(
    command: list[str], env: dict[str, str], fifo: Path, pause_at: str, *, arm: bool = True
) -> int:
    """Start ``command`` in a process group of its own, wait until it reaches the fault
    point ``pause_at`` (``fault_pause``), then SIGKILL the group. ``arm``: set the pause in
    its environment (else the process arms it itself, once it is ready). Fails, with its
    stderr, if it exits before the point. Returns its pid."""
    import os
    import signal
    import subprocess

    errors = fifo.with_suffix(".stderr")
    with fault_pause(fifo, pause_at, arm=arm) as (pause, reached), open(errors, "w") as stderr:
        process = subprocess.Popen(
            command,
            env={**env, **pause},
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )
        try:
            reached(
                process,
                lambda: (
                    f"exited with {process.returncode} before {pause_at}: "
                    f"{errors.read_text()[-3000:]}"
                ),
            )
        finally:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL
    return process.pid


def read_tree_lines(root: Path) -> tuple[list[tuple], list[tuple]]:
    """Parse every closed folder's part files in Python: (valid, malformed) line keys."""
    import json

    import zstandard

    from backfill_assets.core.backups.contract import Rejected, parse_iso_ms, parse_line

    valid, malformed = [], []
    for manifest in sorted((root / "raw").glob("date=*/hour=*/client_id=*/_MANIFEST.json")):
        body = json.loads(manifest.read_text())
        client_id, hour_ms = body["client_id"], parse_iso_ms(body["hour"])
        for entry in body["files"]:
            path = manifest.parent / entry["name"]
            rel = str(path.relative_to(root))
            text = zstandard.ZstdDecompressor().decompressobj().decompress(path.read_bytes())
            lines = text.split(b"\n")
            if lines and lines[-1] == b"":
                lines.pop()
            for number, line in enumerate(lines, start=1):
                try:
                    payload = parse_line(line, client_id, hour_ms)
                    valid.append((payload.payload_id, payload.received_at_ms, payload.client_id))
                except Rejected:
                    malformed.append((rel, number))
    return valid, malformed


def _start_order(item: pytest.Item) -> int:
    """Which tests xdist hands out first (``--no-loadscope-reorder``): the Spark groups, then
    the longest process-bound modules (the stack, the ``slow`` ones), so that none of them
    starts last and runs alone."""
    if "spark" in getattr(item, "fixturenames", ()):
        return 0
    if "/stack/" in item.nodeid:
        return 1
    return 2 if item.get_closest_marker("slow") else 3


# The Spark tests in two groups of about equal time (two workers, a Spark session each:
# one session runs on about one core): the layers', the checks' and the small packages'
# tests, and the rest (backups, publishing, the console).
_FIRST_SPARK_GROUP = ("layers", "checks", "analysis", "cli", "sensors", "reporting", "resources")


def _spark_group(item: pytest.Item) -> str:
    package = item.nodeid.split("/")[1] if item.nodeid.count("/") > 1 else ""
    return "spark-1" if package in _FIRST_SPARK_GROUP else "spark-2"


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook turns the marks into groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``make test`` runs pytest-xdist workers (``--dist loadgroup``): the tests that use a
    Spark session are in two groups (``_spark_group``), each run by one worker in ONE
    session; the production stack's tests are one group too (one stack of servers); the
    others (servers, Dagster daemons, subprocesses, pure Python) are grouped by module (a
    module's fixtures are set up once) and spread over the other workers, mostly
    waiting on processes while the Spark workers compute; the longest start first."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            group = _spark_group(item)
        elif "/stack/" in item.nodeid:
            group = "stack"  # one production stack (its servers are session fixtures)
        else:
            group = item.module.__name__ if isinstance(item, pytest.Function) else "processes"
        item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=_start_order)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """Fail fast if the groups did not reach pytest-xdist (it names a grouped test
    ``<id>@<group>``): the Spark tests would spread over every worker, a session each."""
    if not getattr(session.config.option, "loadgroup", False):  # an xdist worker of it
        return
    ungrouped = [item.nodeid for item in session.items if "@" not in item.nodeid]
    if ungrouped:
        raise pytest.UsageError(
            f"pytest-xdist did not group {len(ungrouped)} test(s) (e.g. {ungrouped[0]}): "
            f"this pytest and pytest-xdist do not work together for --dist loadgroup"
        )


@pytest.fixture(autouse=True)
def _no_second_spark_session(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that does not ask for ``spark`` must not start a Spark JVM in the test
    process: in its worker that would be a second session (Spark in subprocesses is fine)."""

    def active() -> bool:
        if "pyspark" not in sys.modules:
            return False
        from pyspark import SparkContext

        return SparkContext._active_spark_context is not None

    before = active()
    yield
    if "spark" not in request.fixturenames and not before and active():
        pytest.fail(
            f"{request.node.nodeid} started Spark in the test process without the `spark` "
            f"fixture: ask for it, so that it runs beside the suite's other Spark tests"
        )
