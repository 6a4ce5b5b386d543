"""Every environment variable the project reads, read here and only here, when it is needed
(never at import): a bad value raises ``SettingsError``, one line naming the variable and
the form it expects (the commands print it and exit 2; ``--help`` needs none of them).

Where things live: every path the project reads or writes.

- ``BACKUP_ROOT`` (``var/backups``): the backup tree to read (local path or ``s3://``).
- ``DATA_ROOT`` (``var/data``): warehouse, embedded metastore, ledger (local path or
  ``s3://``).
- ``DAGSTER_HOME`` (``var/dagster_home``): the Dagster instance.
- ``SPARK_CONF_DIR`` (``spark``): ``spark-defaults.conf``, profiles, ``log4j2.properties``.
- ``BACKFILL_ENV`` (``local``): ``local`` or ``production`` (resources, Spark profile).
- ``BACKFILL_SPARK_JARS`` (``<virtualenv>/share/backfill_assets/jars``): the S3A connector's
  jars and the ledger database's JDBC drivers (``make jars``, deploy/spark-jars.txt), put on
  the driver's and executors' classpath.
- ``BACKFILL_LEDGER_URL`` (``sqlite:///<DATA_ROOT>/ledger.sqlite``): the SQLAlchemy URL of
  the database holding the ledger and the audit tables (PostgreSQL in production:
  ``postgresql+psycopg2://user:password@host/db``); required when ``DATA_ROOT`` is a URI.
- ``BACKFILL_LOCK_TIMEOUT_SECONDS`` (900): how long a publish, rollback or ``verify`` waits
  for another holder of a layer's publish fence before it fails naming the layer.
- ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` (none: AWS): an S3-compatible endpoint,
  also for Spark's S3A (path-style requests); ``AWS_REGION`` / ``AWS_DEFAULT_REGION``: the
  region S3A signs for.

Defaults are inside the checkout and git-ignored.

Object-store locations are written ``s3://bucket/prefix`` everywhere they are configured.
The driver lists backups and reads manifests with boto3, which takes ``s3://``; Spark reads
the part files and writes the warehouse through Hadoop's S3A connector, so what Spark opens
(``warehouse_dir`` and every table location under it, the backups' part files) is spelled
``s3a://`` (``spark_location``): one spelling per reader, one place to map.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
ENVIRONMENTS = ("local", "production")
_URI = re.compile(r"^[a-z][a-z0-9+.-]*://")
# Where `make jars` puts the S3A connector: inside the virtualenv that runs the project.
DEFAULT_SPARK_JARS = Path(sys.prefix) / "share" / "backfill_assets" / "jars"


class SettingsError(ValueError):
    """A variable whose value cannot be used; the message names it and the expected form."""


def environ(env: Mapping[str, str] | None = None) -> Mapping[str, str]:
    """``env``, else this process's environment (what ``${VAR}`` in Spark's files reads)."""
    return os.environ if env is None else env


def is_uri(location: str) -> bool:
    """True for ``s3://bucket/...``-style locations, False for local paths."""
    return bool(_URI.match(location))


def _location(value: str) -> str:
    """Normalise a configured location: URIs stay as they are, paths become absolute."""
    if is_uri(value):
        return value.rstrip("/")
    return str(Path(value).expanduser().resolve())


def metastore_dir(data_root: str) -> str:
    """The embedded (Derby) metastore's folder under ``DATA_ROOT``."""
    return f"{data_root}/metastore_db"


def spark_location(location: str) -> str:
    """A location as Spark/Hadoop writes it: ``s3://`` becomes ``s3a://`` (the S3A file
    system); local paths and other schemes are unchanged."""
    return "s3a://" + location.removeprefix("s3://") if location.startswith("s3://") else location


@dataclass(frozen=True)
class Settings:
    backup_root: str
    data_root: str
    dagster_home: str
    spark_conf_dir: str
    environment: str = "local"
    spark_jars_dir: str = str(DEFAULT_SPARK_JARS)
    s3_endpoint: str | None = None  # None: AWS's own endpoints
    s3_region: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        var = PROJECT_ROOT / "var"
        environment = env.get("BACKFILL_ENV", "local")
        if environment not in ENVIRONMENTS:
            raise SettingsError(
                f"BACKFILL_ENV={environment!r} is not one of {', '.join(ENVIRONMENTS)}"
            )
        return cls(
            backup_root=_location(env.get("BACKUP_ROOT") or str(var / "backups")),
            data_root=_location(env.get("DATA_ROOT") or str(var / "data")),
            dagster_home=_location(env.get("DAGSTER_HOME") or str(var / "dagster_home")),
            spark_conf_dir=_location(env.get("SPARK_CONF_DIR") or str(PROJECT_ROOT / "spark")),
            environment=environment,
            spark_jars_dir=_location(env.get("BACKFILL_SPARK_JARS") or str(DEFAULT_SPARK_JARS)),
            s3_endpoint=s3_endpoint(env),
            s3_region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None,
        )

    @property
    def warehouse_dir(self) -> str:
        return spark_location(f"{self.data_root}/warehouse")

    @property
    def spark_jars(self) -> list[str]:
        """The S3A connector's jars (sorted), [] when ``make jars`` has not put them there."""
        folder = Path(self.spark_jars_dir)
        return sorted(str(p) for p in folder.glob("*.jar")) if folder.is_dir() else []

    @property
    def metastore_dir(self) -> str:
        return metastore_dir(self.data_root)

    @property
    def reports_dir(self) -> str:
        return f"{self.data_root}/reports"


LEDGER_URL_ENV = "BACKFILL_LEDGER_URL"
LEDGER_FILE = "ledger.sqlite"  # the default ledger database's file under DATA_ROOT
LOCK_TIMEOUT_ENV = "BACKFILL_LOCK_TIMEOUT_SECONDS"
DEFAULT_LOCK_TIMEOUT_SECONDS = 900.0


def data_root_of(warehouse_dir: str) -> str:
    """``DATA_ROOT`` of a warehouse directory (``<DATA_ROOT>/warehouse``)."""
    root = warehouse_dir.rstrip("/").removesuffix("/warehouse")
    return root.removeprefix("file:") if root.startswith("file:/") else root


def ledger_url(warehouse_dir: str, env: Mapping[str, str] | None = None) -> str:
    """The SQLAlchemy URL of the ledger database of ``warehouse_dir``: ``BACKFILL_LEDGER_URL``,
    else a SQLite file under its ``DATA_ROOT`` (a URI ``DATA_ROOT`` needs the variable)."""
    env = os.environ if env is None else env
    url = env.get(LEDGER_URL_ENV, "").strip()
    if url:
        return url
    root = data_root_of(warehouse_dir)
    if is_uri(root):
        raise ValueError(
            f"DATA_ROOT {root} is not a local folder: set {LEDGER_URL_ENV} to the ledger's "
            f"database (postgresql+psycopg2://...)"
        )
    return f"sqlite:///{root}/{LEDGER_FILE}"


def lock_timeout_seconds(env: Mapping[str, str] | None = None) -> float:
    """``BACKFILL_LOCK_TIMEOUT_SECONDS``: how long to wait for a layer's publish fence."""
    env = os.environ if env is None else env
    text = env.get(LOCK_TIMEOUT_ENV, "").strip()
    try:
        return float(text) if text else DEFAULT_LOCK_TIMEOUT_SECONDS
    except ValueError:
        raise SettingsError(f"{LOCK_TIMEOUT_ENV}={text!r} is not a number of seconds") from None


# What a backup file may cost to read (``ReadLimits``): its environment variables.
MAX_PART_EXPANDED_BYTES_ENV = "BACKFILL_MAX_PART_EXPANDED_BYTES"
MAX_LINE_BYTES_ENV = "BACKFILL_MAX_LINE_BYTES"
MAX_MANIFEST_BYTES_ENV = "BACKFILL_MAX_MANIFEST_BYTES"
_MIB = 2**20


def _env_bytes(env: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    return env_int(env, name, default, minimum, unit=" bytes")


@dataclass(frozen=True)
class ReadLimits:
    """Bounds on what one backup file may cost to read; a file past one is refused before
    Spark holds it (its folder's hour is held back), a line past ``line_bytes`` is
    quarantined (``line_too_long``) and the rest of its file read.

    - ``BACKFILL_MAX_PART_EXPANDED_BYTES`` (512 MiB): a part file's decompressed size (and
      its compressed size), enforced while decompressing;
    - ``BACKFILL_MAX_LINE_BYTES`` (1 MiB, at least 1 KiB): one line of a part file;
    - ``BACKFILL_MAX_MANIFEST_BYTES`` (16 MiB): a folder's ``_MANIFEST.json``.
    """

    part_expanded_bytes: int = 512 * _MIB
    line_bytes: int = _MIB
    manifest_bytes: int = 16 * _MIB

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ReadLimits:
        env = os.environ if env is None else env
        default = cls()
        return cls(
            part_expanded_bytes=_env_bytes(
                env, MAX_PART_EXPANDED_BYTES_ENV, default.part_expanded_bytes, 1024
            ),
            line_bytes=_env_bytes(env, MAX_LINE_BYTES_ENV, default.line_bytes, 1024),
            manifest_bytes=_env_bytes(env, MAX_MANIFEST_BYTES_ENV, default.manifest_bytes, 1024),
        )


# Read when they are needed (each call), as a process's environment may change under it.
GRAPHQL_URL_ENV = "DAGSTER_GRAPHQL_URL"  # a remote webserver's GraphQL (else the workspace)
MAX_RANGE_HOURS_ENV = "BACKFILL_MAX_RANGE_HOURS"  # hours one backfill command may name
PAUSE_AT_ENV = "BACKFILL_ASSETS_PAUSE_AT"  # fault tests: the checkpoint to stop at
PAUSE_FIFO_ENV = "BACKFILL_ASSETS_PAUSE_FIFO"  # fault tests: where to say it stopped


def _environ(env: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if env is None else env


DRIVER_HOST_ENV = "BACKFILL_ASSETS_DRIVER_HOST"


def driver_host_file(env: Mapping[str, str] | None = None) -> str | None:
    """``BACKFILL_ASSETS_DRIVER_HOST``: the file of the driver JVM local runs attach to
    (``core.spark.shared_driver``); ``backfill``, ``resume`` and ``driver_host --run`` set
    it for the processes they start, it is not an operator's setting."""
    return _environ(env).get(DRIVER_HOST_ENV) or None


def graphql_url(env: Mapping[str, str] | None = None) -> str | None:
    """``DAGSTER_GRAPHQL_URL``: the webserver the commands submit to (None: the workspace)."""
    return _environ(env).get(GRAPHQL_URL_ENV) or None


def max_range_hours(default: int, env: Mapping[str, str] | None = None) -> int:
    """``BACKFILL_MAX_RANGE_HOURS`` (``default``): hours one command may name, at least 1."""
    return env_int(_environ(env), MAX_RANGE_HOURS_ENV, default, 1)


def s3_endpoint(env: Mapping[str, str] | None = None) -> str | None:
    """``AWS_ENDPOINT_URL_S3``, else ``AWS_ENDPOINT_URL`` (None: AWS's own endpoints)."""
    env = _environ(env)
    return env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None


@contextmanager
def without_spark_conf_dir() -> Iterator[None]:
    """This process's environment without ``SPARK_CONF_DIR`` while the block runs, as it was
    after (for a child that must not see it: Spark's launcher, ``core.spark.session``)."""
    conf_dir = os.environ.pop("SPARK_CONF_DIR", None)
    try:
        yield
    finally:
        if conf_dir is not None:
            os.environ["SPARK_CONF_DIR"] = conf_dir


def java_home(env: Mapping[str, str] | None = None) -> str | None:
    """``JAVA_HOME``: the Java Spark's launcher runs (None: ``java`` on the PATH)."""
    return _environ(env).get("JAVA_HOME")


def pause_at(env: Mapping[str, str] | None = None) -> str | None:
    """``BACKFILL_ASSETS_PAUSE_AT``: the fault checkpoint this process stops at, if any."""
    return _environ(env).get(PAUSE_AT_ENV)


def pause_fifo(env: Mapping[str, str] | None = None) -> str:
    """``BACKFILL_ASSETS_PAUSE_FIFO``: where a paused process writes its checkpoint."""
    return _environ(env)[PAUSE_FIFO_ENV]


def env_int(env: Mapping[str, str], name: str, default: int, minimum: int, unit: str = "") -> int:
    """A whole-number variable of ``env`` (``default`` when unset or empty)."""
    text = (env.get(name) or "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise SettingsError(
            f"{name}={text!r} is not a whole number{unit and ' of' + unit}"
        ) from None
    if value < minimum:
        raise SettingsError(f"{name}={value} must be at least {minimum}{unit}")
    return value


def _switch(env: Mapping[str, str], name: str, default: str) -> bool:
    text = (env.get(name) or default).strip().lower()
    if text in ("on", "1", "true", "yes"):
        return True
    if text in ("off", "0", "false", "no"):
        return False
    raise SettingsError(f"{name}={text!r}: expected on or off")


# --------------------------------------------------------------------- the partitions
PARTITIONS_START_ENV, PARTITIONS_END_ENV = "BACKFILL_PARTITIONS_START", "BACKFILL_PARTITIONS_END"
DEFAULT_PARTITIONS_START = "2026-01-01T00"
HOUR_FORMAT = "%Y-%m-%dT%H"
_HOUR_KEY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}")  # fullmatch, ASCII digits


def _hour_value(name: str, value: str) -> str:
    try:
        if _HOUR_KEY.fullmatch(value):
            datetime.strptime(value, HOUR_FORMAT)
            return value
    except ValueError:
        pass
    raise SettingsError(
        f"{name}={value!r}: expected an hour YYYY-MM-DDTHH (UTC), e.g. 2026-01-01T00"
    )


def partition_span(env: Mapping[str, str] | None = None) -> tuple[str, str | None]:
    """The partitions: ``BACKFILL_PARTITIONS_START`` (``2026-01-01T00``), the first hour, and
    ``BACKFILL_PARTITIONS_END`` (unset: up to the current hour), the first hour after them."""
    env = _environ(env)
    start = _hour_value(
        PARTITIONS_START_ENV,
        (env.get(PARTITIONS_START_ENV) or "").strip() or DEFAULT_PARTITIONS_START,
    )
    end_text = (env.get(PARTITIONS_END_ENV) or "").strip()
    end = _hour_value(PARTITIONS_END_ENV, end_text) if end_text else None
    if end is not None and end <= start:
        raise SettingsError(
            f"{PARTITIONS_END_ENV}={end} must be after {PARTITIONS_START_ENV}={start}"
        )
    return start, end


# ------------------------------------------------------------------- a release's runs
HOURS_PER_RUN_ENV = "BACKFILL_HOURS_PER_RUN"
# A day and its session window (3 hours on each side): a day's release is one run per layer.
DEFAULT_HOURS_PER_RUN = 30


def hours_per_run(env: Mapping[str, str] | None = None) -> int:
    """``BACKFILL_HOURS_PER_RUN`` (30): the most hours of a layer one run builds, every layer
    alike; a longer release is built in chunks of runs, so a failure costs one chunk
    (``resume``) and a run's memory stays about a day's."""
    return env_int(_environ(env), HOURS_PER_RUN_ENV, DEFAULT_HOURS_PER_RUN, 1)


# ---------------------------------------------------------- a release's cost and progress
MAX_CORE_HOURS_ENV = "BACKFILL_MAX_CORE_HOURS"
DEFAULT_MAX_CORE_HOURS = 24.0
PROGRESS_SECONDS_ENV = "BACKFILL_PROGRESS_SECONDS"
DEFAULT_PROGRESS_SECONDS = 30


def max_core_hours(env: Mapping[str, str] | None = None) -> float | None:
    """``BACKFILL_MAX_CORE_HOURS`` (24): the estimated executor core-hours above which a
    release needs ``--approve-cost --reason``; ``0`` or ``off``: no cap (unset or empty:
    the default, as every other variable)."""
    text = (_environ(env).get(MAX_CORE_HOURS_ENV) or "").strip().lower()
    if not text:
        return DEFAULT_MAX_CORE_HOURS
    if text == "off":
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise SettingsError(
            f"{MAX_CORE_HOURS_ENV}={text!r}: expected a number of core-hours such as 24 "
            f"(0 or off: no cap)"
        )
    return value or None


def progress_seconds(env: Mapping[str, str] | None = None) -> int:
    """``BACKFILL_PROGRESS_SECONDS`` (30): how often ``backfill`` prints its progress line
    while it follows a release (and once when a run ends)."""
    return env_int(_environ(env), PROGRESS_SECONDS_ENV, DEFAULT_PROGRESS_SECONDS, 1, " seconds")


SHORT_RUN_BYTES_ENV = "BACKFILL_SHORT_RUN_BYTES"
DEFAULT_SHORT_RUN_BYTES = 16 * 1024 * 1024


def short_run_bytes(env: Mapping[str, str] | None = None) -> int:
    """``BACKFILL_SHORT_RUN_BYTES`` (16 MiB; 0: never): a release that reads at most this
    many backup bytes (the estimate ``backfill`` tags it with) starts its runs' JVMs for a
    short life (``core.spark.session.SHORT_RUN_JAVA_OPTIONS``, ``SHORT_RUN_CONF``)."""
    return env_int(_environ(env), SHORT_RUN_BYTES_ENV, DEFAULT_SHORT_RUN_BYTES, 0, " bytes")


# ------------------------------------------------------------------ the change gates
GATE_MAX_DECREASE_ENV = "BACKFILL_GATE_MAX_DECREASE"
GATE_MAX_INCREASE_ENV = "BACKFILL_GATE_MAX_INCREASE"
GATE_MAX_REMOVED_ENV = "BACKFILL_GATE_MAX_REMOVED"


def _share(env: Mapping[str, str], name: str, *, off: bool = False) -> float | str | None:
    text = (env.get(name) or "").strip()
    if off and text.lower() == "off":
        return None
    if not text:
        return ""
    try:
        value = float(text)
    except ValueError:
        form = "a share such as 0.2" + (" or off" if off else "")
        raise SettingsError(f"{name}={text!r}: expected {form}") from None
    if value < 0 or (not off and value > 1):
        raise SettingsError(f"{name}={text}: expected {'0 or more' if off else '0..1'}")
    return value


def gate_limits(env: Mapping[str, str] | None = None) -> dict[str, float | None]:
    """The change gates' limits that are set (``core.warehouse.gates.Limits``' fields):
    ``BACKFILL_GATE_MAX_DECREASE``, ``_MAX_INCREASE`` (or ``off``), ``_MAX_REMOVED``."""
    env = _environ(env)
    values = {
        "max_decrease": _share(env, GATE_MAX_DECREASE_ENV),
        "max_increase": _share(env, GATE_MAX_INCREASE_ENV, off=True),
        "max_removed": _share(env, GATE_MAX_REMOVED_ENV),
    }
    return {field: value for field, value in values.items() if value != ""}


# ------------------------------------------------------------------- reconciliation
def reconcile_values(env: Mapping[str, str] | None = None) -> dict[str, int | bool]:
    """``core.reconcile.findings.ReconcileConfig``'s fields from the environment:
    ``BACKFILL_RECONCILE_INTERVAL_SECONDS`` (300), ``BACKFILL_MAX_HOURS_PER_TICK`` (48),
    ``BACKFILL_RECONCILE_WINDOW_HOURS`` (168), ``BACKFILL_RECONCILE_GRACE_HOURS`` (2),
    ``BACKFILL_RECONCILE_SENSOR`` (on)."""
    env = _environ(env)
    return {
        "interval_seconds": env_int(env, "BACKFILL_RECONCILE_INTERVAL_SECONDS", 300, 1),
        "max_hours_per_tick": env_int(env, "BACKFILL_MAX_HOURS_PER_TICK", 48, 1),
        "window_hours": env_int(env, "BACKFILL_RECONCILE_WINDOW_HOURS", 168, 1),
        "grace_hours": env_int(env, "BACKFILL_RECONCILE_GRACE_HOURS", 2, 0),
        "enabled": _switch(env, "BACKFILL_RECONCILE_SENSOR", "on"),
    }


# ------------------------------------------------------------- erasure and retention
ERASURE_SALT_ENV = "BACKFILL_ERASURE_SALT"
VACUUM_SCHEDULE_ENV = "BACKFILL_VACUUM_SCHEDULE"


def erasure_salt(default: str, env: Mapping[str, str] | None = None) -> str:
    """``BACKFILL_ERASURE_SALT``: the salt erased users' digests are made with."""
    return _environ(env).get(ERASURE_SALT_ENV) or default


def vacuum_schedule_on(env: Mapping[str, str] | None = None) -> bool:
    """``BACKFILL_VACUUM_SCHEDULE`` (off): whether the daily vacuum schedule runs."""
    return _switch(_environ(env), VACUUM_SCHEDULE_ENV, "off")


def check_environment(env: Mapping[str, str] | None = None) -> None:
    """Read every variable above once (``SettingsError`` at the first bad one): what a
    command calls before it starts anything, so a bad value read later, in a run or the
    sensor, is named at once, in one line."""
    env = _environ(env)
    Settings.from_env(env)
    partition_span(env)
    max_range_hours(1, env)
    hours_per_run(env)
    max_core_hours(env)
    progress_seconds(env)
    short_run_bytes(env)
    lock_timeout_seconds(env)
    ReadLimits.from_env(env)
    gate_limits(env)
    reconcile_values(env)
    vacuum_schedule_on(env)
