"""Where things live: every path the project reads or writes, from the environment.

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
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
ENVIRONMENTS = ("local", "production")
_URI = re.compile(r"^[a-z][a-z0-9+.-]*://")
# Where `make jars` puts the S3A connector: inside the virtualenv that runs the project.
DEFAULT_SPARK_JARS = Path(sys.prefix) / "share" / "backfill_assets" / "jars"


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
            raise ValueError(
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
        raise ValueError(f"{LOCK_TIMEOUT_ENV}={text!r} is not a number of seconds") from None


# What a backup file may cost to read (``ReadLimits``): its environment variables.
MAX_PART_EXPANDED_BYTES_ENV = "BACKFILL_MAX_PART_EXPANDED_BYTES"
MAX_LINE_BYTES_ENV = "BACKFILL_MAX_LINE_BYTES"
MAX_MANIFEST_BYTES_ENV = "BACKFILL_MAX_MANIFEST_BYTES"
_MIB = 2**20


def _env_bytes(env: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not a whole number of bytes") from None
    if value < minimum:
        raise ValueError(f"{name}={value} must be at least {minimum} bytes")
    return value


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


def graphql_url(env: Mapping[str, str] | None = None) -> str | None:
    """``DAGSTER_GRAPHQL_URL``: the webserver the commands submit to (None: the workspace)."""
    return _environ(env).get(GRAPHQL_URL_ENV) or None


def max_range_hours(default: int, env: Mapping[str, str] | None = None) -> int:
    """``BACKFILL_MAX_RANGE_HOURS`` (``default``); ValueError if it is not a whole number."""
    return int(_environ(env).get(MAX_RANGE_HOURS_ENV, default))


def s3_endpoint(env: Mapping[str, str] | None = None) -> str | None:
    """``AWS_ENDPOINT_URL_S3``, else ``AWS_ENDPOINT_URL`` (None: AWS's own endpoints)."""
    env = _environ(env)
    return env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None


def java_home(env: Mapping[str, str] | None = None) -> str | None:
    """``JAVA_HOME``: the Java Spark's launcher runs (None: ``java`` on the PATH)."""
    return _environ(env).get("JAVA_HOME")


def pause_at(env: Mapping[str, str] | None = None) -> str | None:
    """``BACKFILL_ASSETS_PAUSE_AT``: the fault checkpoint this process stops at, if any."""
    return _environ(env).get(PAUSE_AT_ENV)


def pause_fifo(env: Mapping[str, str] | None = None) -> str:
    """``BACKFILL_ASSETS_PAUSE_FIFO``: where a paused process writes its checkpoint."""
    return _environ(env)[PAUSE_FIFO_ENV]
