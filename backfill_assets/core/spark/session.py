"""The one Spark configuration: ``spark/`` files + locations derived from ``DATA_ROOT``.

Every Spark session of the project (Dagster runs, the CLI, the test suite) is built from
``spark_config(settings)``, so local runs, tests and production differ only by profile.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from pyspark.sql import SparkSession

from backfill_assets.core.spark import jvm_archive, preflight, shared_driver
from backfill_assets.core.warehouse.tables import METASTORE_URL, embedded_database
from backfill_assets.settings import Settings, environ, is_uri, without_spark_conf_dir

log = logging.getLogger(__name__)

# ${VAR} (required) or ${VAR:-default}.
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
# Spark's file writers bound to Hadoop's committer of the destination's scheme (the
# spark-hadoop-cloud jar of deploy/spark-jars.txt): S3A's magic committer for s3a://.
S3A_COMMITTER_CONF = {
    "spark.sql.sources.commitProtocolClass": (
        "org.apache.spark.internal.io.cloud.PathOutputCommitProtocol"
    ),
    "spark.sql.parquet.output.committer.class": (
        "org.apache.spark.internal.io.cloud.BindingParquetOutputCommitter"
    ),
    "spark.hadoop.mapreduce.outputcommitter.factory.scheme.s3a": (
        "org.apache.hadoop.fs.s3a.commit.S3ACommitterFactory"
    ),
    "spark.hadoop.fs.s3a.committer.name": "magic",
    "spark.hadoop.fs.s3a.committer.magic.enabled": "true",
}


class SparkConfigError(ValueError):
    """A Spark configuration file that cannot be used, with the file and line named."""


def read_conf(
    path: Path, env: Mapping[str, str] | None = None, *, resolve: bool = True
) -> dict[str, str]:
    """Read a ``spark-defaults.conf``-style file, substituting ``${VAR}`` from ``env``.

    With ``resolve=False`` the ``${VAR}`` placeholders are kept as written, to be resolved
    by ``resolve_conf`` where the Spark session starts (the run's process).
    """
    env = environ(env)
    conf: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 1)
        if len(parts) != 2:
            raise SparkConfigError(f"{path}:{number}: expected 'key value', got {raw!r}")
        key, value = parts
        conf[key] = value.strip()
        if resolve:
            conf[key] = resolve_conf({key: conf[key]}, env, source=f"{path}:{number}")[key]
    return conf


def unresolved_variables(conf: Mapping[str, str]) -> list[str]:
    """The variables a configuration requires (``${VAR}`` without a default), sorted."""
    return sorted(
        {m.group(1) for v in conf.values() for m in _VAR.finditer(v) if m.group(2) is None}
    )


def resolve_conf(
    conf: Mapping[str, str], env: Mapping[str, str] | None = None, *, source: str = ""
) -> dict[str, str]:
    """``conf`` with every ``${VAR}`` replaced from ``env`` (default: this process's).

    A missing variable raises ``SparkConfigError`` naming every missing variable and the
    keys that need them, so a run fails where its session starts, saying what to set.
    """
    env = environ(env)
    missing: dict[str, list[str]] = {}
    for key, value in conf.items():
        for match in _VAR.finditer(value):
            name, default = match.groups()
            if name not in env and default is None:
                missing.setdefault(name, []).append(key)
    if missing:
        where = f"{source}: " if source else ""
        needs = "; ".join(f"{', '.join(keys)} needs {name}" for name, keys in missing.items())
        raise SparkConfigError(
            f"{where}missing environment variable(s) {', '.join(missing)} for the Spark "
            f"configuration ({needs}); set them where the run executes (the run pod or the "
            f"process that starts Spark)"
        )
    return {
        key: _VAR.sub(lambda m: env.get(m.group(1), m.group(2) or ""), value)
        for key, value in conf.items()
    }


def spark_config(
    settings: Settings, env: Mapping[str, str] | None = None, *, resolve: bool = True
) -> dict[str, str]:
    """The full Spark configuration for ``settings`` (local or production profile).

    ``resolve=False`` keeps ``${VAR}`` placeholders of the profile for ``SparkResource``
    to resolve when the session starts: the code location loads without them.
    """
    conf_dir = Path(settings.spark_conf_dir)
    conf = read_conf(conf_dir / "spark-defaults.conf", env, resolve=resolve)
    if settings.environment == "production":
        conf.update(read_conf(conf_dir / "production.conf", env, resolve=resolve))
    conf["spark.sql.warehouse.dir"] = settings.warehouse_dir
    java_options = [  # the profile's JVM options (JIT), then the project's
        *conf.get("spark.driver.extraJavaOptions", "").split(),
        f"-Dlog4j2.configurationFile=file:{conf_dir / 'log4j2.properties'}",
    ]
    if settings.environment == "local" and not is_uri(settings.data_root):
        # Embedded Hive metastore (Derby) under DATA_ROOT; derby.log beside it. The
        # production profile uses the shared metastore service (hive.metastore.uris).
        conf[METASTORE_URL] = f"jdbc:derby:;databaseName={settings.metastore_dir};create=true"
        java_options.append(f"-Dderby.system.home={settings.data_root}")
        # Hive makes a resources directory per session (and never removes it): under
        # DATA_ROOT, not one more empty directory in /tmp for every run.
        conf["spark.hadoop.hive.downloaded.resources.dir"] = (
            f"{settings.data_root}/hive_resources/${{hive.session.id}}_resources"
        )
    conf["spark.driver.extraJavaOptions"] = " ".join(java_options)
    conf.update(s3a_conf(settings))
    return conf


def s3a_conf(settings: Settings) -> dict[str, str]:
    """Spark's S3A connector: its jars on the driver's and executors' classpath (when
    ``make jars`` installed them), the S3 endpoint and region of the settings, and the
    magic committer for a warehouse on S3. {} without the jars: nothing s3a:// can work.

    On the system classpath (``extraClassPath``), not ``spark.jars``: Hadoop's file systems
    and the Hive client's isolated class loader find S3A there. Executors must have the
    jars at the same path (the image: deploy/Dockerfile; the stack: this machine).
    """
    if not settings.spark_jars:
        return {}
    classpath = f"{settings.spark_jars_dir}/*"
    conf = {"spark.driver.extraClassPath": classpath, "spark.executor.extraClassPath": classpath}
    if settings.s3_endpoint:  # an S3-compatible store: path-style requests, its own scheme
        conf["spark.hadoop.fs.s3a.endpoint"] = settings.s3_endpoint
        conf["spark.hadoop.fs.s3a.path.style.access"] = "true"
        secure = settings.s3_endpoint.startswith("https://")
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(secure).lower()
    if settings.s3_region:
        conf["spark.hadoop.fs.s3a.endpoint.region"] = settings.s3_region
    if settings.warehouse_dir.startswith("s3a://"):
        conf.update(S3A_COMMITTER_CONF)
    return conf


# The JVMs of a run that reads little live for seconds, and the JIT's optimizing tier (C2)
# compiles all the while for code that runs a few times: a one-hour repair's driver JVM
# spent 24 s compiling (25,900 compilations) in its 29 s (JFR, 2026-11-29). The quick tier
# alone (C1) and the serial collector (one heap of a few hundred MB, no collector threads)
# leave the cores to the work. Long runs keep the defaults: C2's code pays off there.
SHORT_RUN_JAVA_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
JAVA_OPTIONS_KEYS = ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions")
# And one partition where the profile's would split a few MB into many tasks: every shuffle
# and every read of a short run is one task (a few MB at most: adaptive execution merged
# their shuffle partitions anyway), and each hour of a table one file: less CPU per task
# and file (docs/benchmarks.md, the fixed cost).
SHORT_RUN_CONF = MappingProxyType(
    {"spark.sql.shuffle.partitions": "1", "spark.default.parallelism": "1"}
)


def is_short_run(input_bytes: int | None, limit: int) -> bool:
    """Whether a release reading ``input_bytes`` backup bytes (None: unknown) is short."""
    return input_bytes is not None and limit > 0 and input_bytes <= limit


def launch_conf(config: Mapping[str, str], *, short_run: bool = False) -> dict[str, str]:
    """The configuration a session starts with: ``config`` resolved from this process's
    environment (a missing variable raises naming it), the JVM options of the class
    archive (a faster JVM start, when there is one) and, for a short run,
    ``SHORT_RUN_JAVA_OPTIONS`` on the driver and the executors and ``SHORT_RUN_CONF``."""
    conf = resolve_conf(config)
    if short_run:
        conf.update(SHORT_RUN_CONF)
    extra = [*jvm_archive.java_options(), *(SHORT_RUN_JAVA_OPTIONS if short_run else ())]
    if extra:
        for key in JAVA_OPTIONS_KEYS:
            conf[key] = " ".join([conf.get(key, ""), *extra]).strip()
    return conf


def start_session(
    config: Mapping[str, str], data_root: str | None = None, *, short_run: bool = False
) -> SparkSession:
    """This process's Spark session for ``config`` (``spark_config``'s, its ``${VAR}``s
    resolved here from this process's environment, so a missing variable fails naming it;
    ``launch_conf``).

    Before a JVM starts, ``data_root`` (when given) is checked by
    ``preflight.before_spark`` (``PreflightError``: an unwritable ``DATA_ROOT``, a
    metastore held by another process).
    Python workers run the driver's interpreter (the project's virtualenv) unless
    ``PYSPARK_PYTHON`` says otherwise, as on a cluster image.
    """
    host = _attach()
    if data_root:
        preflight.before_spark(data_root, host=host.pid if host else None)
    conf = launch_conf(config, short_run=short_run)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the workers' (child) environment
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    # Spark's launcher puts $SPARK_CONF_DIR first on the driver JVM's class path, and a JVM
    # maps the class archive (jvm_archive) only on the class path it was dumped with, which
    # cannot hold a non-empty directory: every Dagster run process has SPARK_CONF_DIR
    # (release.launch.settings_env), so its driver ignored the archive and loaded some
    # 18,000 classes from the jars. The launcher reads nothing the project needs there:
    # spark_config reads the directory's files and every value reaches the JVM as --conf.
    with without_spark_conf_dir():
        return builder.getOrCreate()


def _attach() -> shared_driver.Host | None:
    """Attach this process to the driver JVM its environment names (``driver_host``), if
    one runs and no JVM is attached yet: PySpark then starts its context there. A context
    a killed run left in it is stopped first. None: a JVM of its own is launched."""
    from pyspark import SparkContext

    host = shared_driver.hosted()
    if host is None or SparkContext._gateway is not None:
        return None
    if not shared_driver.claim():
        log.warning("the shared driver JVM %d serves another process now: launching one", host.pid)
        return None
    for key, value in host.gateway_env().items():  # read by PySpark's gateway launch
        os.environ[key] = value
    SparkContext._ensure_initialized()
    if shared_driver.stop_leftover_context(SparkContext._jvm):
        log.warning("stopped a Spark context a killed run left in the driver JVM %d", host.pid)
    log.info("Spark: attached to the shared driver JVM (PID %d)", host.pid)
    return host


def spark_session(settings: Settings) -> SparkSession:
    """A session outside Dagster (CLI, tests) with exactly the code location's config. The
    driver JVM it launches is stopped as this process exits, before it exits
    (``stop_driver``): the next command finds the metastore free."""
    spark = start_session(spark_config(settings, resolve=False), settings.data_root)
    atexit.unregister(stop_driver)  # once, however many sessions this process starts
    atexit.register(stop_driver)
    return spark


DRIVER_EXIT_SECONDS = 60.0


def stop_driver(timeout: float = DRIVER_EXIT_SECONDS) -> None:
    """Stop this process's Spark context and the driver JVM it launched, and wait until
    that JVM has exited (SIGKILL after ``timeout``); nothing to do without one.

    Left alone, the JVM exits on its own after this process: it reads its standard input
    until this process's end closes it, then stops. Until then it holds the embedded
    metastore, and a run reports its end before its process exits, so the next run or
    command could find the metastore in use. A context on a gateway this process did not
    launch (no JVM process of its own) is only stopped.
    """
    from pyspark import SparkContext

    context, gateway = SparkContext._active_spark_context, SparkContext._gateway
    database = embedded_database(context.getConf().get(METASTORE_URL, "")) if context else None
    if context is not None:
        context.stop()
    jvm: subprocess.Popen | None = getattr(gateway, "proc", None)
    if jvm is None:
        if gateway is not None and database:  # a host's JVM (no process of this one's)
            shared_driver.shut_down_database(SparkContext._jvm, database)
        shared_driver.release()  # the next process may attach
        return
    gateway.shutdown()  # its connections closed: no call reaches the JVM as it goes
    if jvm.poll() is None:
        jvm.stdin.close()  # end of input: its gateway server exits (System.exit, hooks run)
        try:
            jvm.wait(timeout)
        except subprocess.TimeoutExpired:
            jvm.kill()
            jvm.wait()
    with SparkContext._lock:  # a later session in this process launches a JVM of its own
        SparkContext._gateway = None
        SparkContext._jvm = None


# ----------------------------------------------------------------------- cost of a run


@dataclass(frozen=True)
class SparkUsage:
    """Spark work since a mark: executor task time and the cores the session holds."""

    task_seconds: float  # executor core-seconds spent running tasks (the work done)
    cores: int  # executor cores of the session (local mode: the driver's)
    wall_seconds: float  # since the mark
    driver_peak_bytes: int = 0  # the driver's peak resident memory so far (0: unknown)
    jobs: int = 0  # Spark jobs since the mark (an action is one, or more with adaptive plans)


def _peak_resident_bytes(pid: int) -> int:
    """A process's peak resident set (``VmHWM``), 0 where /proc cannot tell."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def driver_peak_bytes(spark: SparkSession) -> int:
    """The driver's peak memory so far: its JVM's peak resident set and this Python
    process's (local mode: the executors' tasks run in that JVM, their Python workers
    apart); 0 where the JVM's process is not on this machine's /proc."""
    jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    jvm = _peak_resident_bytes(jvm_pid)
    return jvm + _peak_resident_bytes(os.getpid()) if jvm else 0


def _status_store(spark: SparkSession):
    # Spark's status store feeds its UI; it is kept whether or not the UI runs.
    return spark.sparkContext._jsc.sc().statusStore()


def _stages_newest_first(spark: SparkSession):
    """The status store's stages, newest first (its view of them in reverse key order: stage
    id, then attempt): a caller that wants the recent ones stops early instead of walking
    every retained stage through py4j, two calls each."""
    jvm = spark.sparkContext._jvm
    wrapper = jvm.java.lang.Class.forName(
        "org.apache.spark.status.StageDataWrapper",
        True,
        jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader(),
    )
    iterator = _status_store(spark).store().view(wrapper).reverse().closeableIterator()
    try:
        while iterator.hasNext():
            yield iterator.next().info()
    finally:
        iterator.close()


def last_stage(spark: SparkSession) -> int:
    return next((stage.stageId() for stage in _stages_newest_first(spark)), -1)


def _job_ids(spark: SparkSession) -> list[int]:
    """The ids of the jobs Spark's status tracker keeps (``spark.ui.retainedJobs``, 1000)."""
    return list(spark.sparkContext.statusTracker().getJobIdsForGroup(None))


def last_job(spark: SparkSession) -> int:
    return max(_job_ids(spark), default=-1)


def spark_usage(
    spark: SparkSession, after_stage: int, since: float, after_job: int = -1
) -> SparkUsage:
    """Executor task time of the stages after ``after_stage`` (the status store keeps the
    last ``spark.ui.retainedStages``, 1000 by default), the executor cores, the wall
    time since ``since`` (``time.monotonic``) and the jobs after ``after_job``."""
    task_ms = 0
    for stage in _stages_newest_first(spark):
        if stage.stageId() <= after_stage:
            break
        task_ms += stage.executorRunTime()
    executors = _status_store(spark).executorList(True)
    cores, iterator = {}, executors.iterator()
    while iterator.hasNext():
        executor = iterator.next()
        cores[executor.id()] = executor.totalCores()
    # local mode: the driver runs the tasks; on a cluster, only the executors do
    held = sum(c for ident, c in cores.items() if ident != "driver") or cores.get("driver", 0)
    return SparkUsage(
        round(task_ms / 1000, 1),
        int(held),
        round(time.monotonic() - since, 1),
        driver_peak_bytes(spark),
        sum(1 for job in _job_ids(spark) if job > after_job),
    )


# Run-level cost facts on shadow and publish materializations: the run's totals so far.
SPARK_TASK_SECONDS = "spark_task_seconds"
SPARK_CORES = "spark_cores"
SPARK_SESSION_SECONDS = "spark_session_seconds"
# When this process started its Spark session (epoch seconds) and how long that took
# (JVM, context, session): where a run's time before its first Spark job goes.
SPARK_STARTED_AT = "spark_started_at"
SPARK_START_SECONDS = "spark_start_seconds"
# The driver's peak resident memory (JVM + Python) so far in the run, bytes.
DRIVER_PEAK_BYTES = "driver_peak_rss_bytes"
# The Spark jobs the run has run so far (its actions: a count, a write, a collect; adaptive
# execution runs a plan's shuffle stages as jobs of their own).
SPARK_JOBS = "spark_jobs"
