"""Suite-wide fixtures: ONE Spark session (local mode, embedded metastore) for every test.

Tests share the session and its metastore, so the ``warehouse`` fixture empties the catalog
before each test that uses it; backup trees are generated per test (milliseconds). The
hooks group the tests for pytest-xdist. Fixtures and hooks only: what tests import is in
``backfill_assets_tests.helpers``.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import dagster as dg
import pytest

from backfill_assets.definitions import build_definitions
from backfill_assets.settings import DRIVER_HOST_ENV, Settings
from backfill_assets_dev.generator import generate_backups
from backfill_assets_tests.helpers.processes import one_driver_jvm
from backfill_assets_tests.helpers.releases import ReleaseResult, empty_warehouse, execute_release

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
# CPU its two cores did not have (about a quarter of the stack test's and the CLI backfills'
# time; the figures are in the commit that chose it).
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


@pytest.fixture(scope="session")
def driver_jvm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """One warm driver JVM for this worker's process tests (``core.spark.driver_host``, as
    an operator's shell under ``driver_host --run``): added to a command's environment, the
    release's runs and every Spark session of its processes attach to it instead of
    launching a JVM each, in a JVM whose classes, compiled code and generated plans earlier
    tests warmed (about 15 s less CPU a release). One process at a time attaches
    (``shared_driver.claim``): another at once launches its own, as a process without it
    does. Started at its first use, stopped with the session."""
    import os

    where = tmp_path_factory.mktemp("driver-jvm")
    env = {key: value for key, value in os.environ.items() if key != DRIVER_HOST_ENV}
    env.update({"DATA_ROOT": str(where / "data"), "DAGSTER_HOME": str(where / "home")})
    with one_driver_jvm(env, where) as served:
        yield {DRIVER_HOST_ENV: served[DRIVER_HOST_ENV]}


@pytest.fixture
def warehouse(spark, base_settings: Settings) -> None:
    """An empty catalog and warehouse for this test."""
    empty_warehouse(spark, base_settings)


MEMORY_FS = Path("/dev/shm")


@pytest.fixture
def instance(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dg.DagsterInstance]:
    """The Dagster instance of the test's in-process releases: Dagster's in-memory one
    (``DagsterInstance.ephemeral``): the same SQL run, event-log and schedule storage as the
    local SQLite instance, on one in-memory SQLite database through one engine, where the
    SQLite instance creates a database engine for each of the three or four connections an
    event takes (an asset event cost 8.1 ms of CPU there, 2.8 ms here; in-process releases
    write hundreds).

    A test whose processes open the instance by its home (``@pytest.mark.dagster_home``:
    the console's webserver, the erasure command) gets a real SQLite-backed instance in a
    temporary DAGSTER_HOME, in memory (``/dev/shm``) where the machine has it, else beside
    the test's files: Dagster stores each event as its own SQLite transactions, each
    waiting for its sync to disk (a run of 164 events took 1.9-2.1 s on this VM's disk and
    1.2-1.4 s there); the storage and what it does are the same."""
    import os
    import tempfile

    if request.node.get_closest_marker("dagster_home") is None:
        with dg.DagsterInstance.ephemeral() as inst:
            yield inst
        return
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


@pytest.fixture
def run_release(spark, warehouse, instance: dg.DagsterInstance, settings_for):
    """Execute a release in-process against a given backup tree (see ``execute_release``)."""

    def run(backups: Path, first: str, last: str, **kwargs) -> ReleaseResult:
        return execute_release(
            build_definitions(settings_for(backups)), instance, first, last, **kwargs
        )

    return run


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
# one session runs on about one core), by the folder a test module is in: the layers',
# the checks', the reports', the console's and the small folders' tests, and the rest
# (backups, the warehouse, the release).
_FIRST_SPARK_GROUP = (
    "layers", "checks", "analysis", "cli", "sensors", "reporting", "resources", "ui"
)  # fmt: skip


def _spark_group(item: pytest.Item) -> str:
    """``spark-1`` or ``spark-2`` by the innermost folder of the test's module
    (``backfill_assets_tests/core/layers/test_x.py``: ``layers``)."""
    folders = item.nodeid.split("::")[0].split("/")[1:-1]
    return "spark-1" if folders and folders[-1] in _FIRST_SPARK_GROUP else "spark-2"


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook turns the marks into groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``make test`` runs pytest-xdist workers (``--dist loadgroup``): the tests that use a
    Spark session are in two groups (``_spark_group``), each run by one worker in ONE
    session; the production stack's tests are one group too (one stack of servers); the
    others (servers, Dagster daemons, subprocesses, pure Python) are grouped by module (a
    module's fixtures are set up once; each test of an ``independent`` module is a group of
    its own) and spread over the other workers, mostly
    waiting on processes while the Spark workers compute; the longest start first."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            group = _spark_group(item)
        elif "/stack/" in item.nodeid:
            group = "stack"  # one production stack (its servers are session fixtures)
        elif item.get_closest_marker("independent"):
            group = item.nodeid  # long tests of a module that share nothing: side by side
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
