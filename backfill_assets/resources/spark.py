"""The one Spark configuration: ``spark/`` files + locations derived from ``DATA_ROOT``.

Every Spark session of the project (Dagster runs, the CLI, the test suite) is built from
``spark_config(settings)``, so local runs, tests and production differ only by profile.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path

import dagster as dg
from dagster_pyspark import LazyPySparkResource
from pyspark.sql import SparkSession

from backfill_assets.settings import Settings, is_uri

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class SparkConfigError(ValueError):
    """A Spark configuration file that cannot be used, with the file and line named."""


def read_conf(path: Path, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Read a ``spark-defaults.conf``-style file, substituting ``${VAR}`` from ``env``."""
    env = os.environ if env is None else env
    conf: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 1)
        if len(parts) != 2:
            raise SparkConfigError(f"{path}:{number}: expected 'key value', got {raw!r}")
        key, value = parts

        def substitute(match: re.Match[str], key: str = key, number: int = number) -> str:
            name = match.group(1)
            if name not in env:
                raise SparkConfigError(f"{path}:{number}: {key} needs environment variable {name}")
            return env[name]

        conf[key] = _VAR.sub(substitute, value.strip())
    return conf


def spark_config(settings: Settings, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The full Spark configuration for ``settings`` (local or production profile)."""
    conf_dir = Path(settings.spark_conf_dir)
    conf = read_conf(conf_dir / "spark-defaults.conf", env)
    if settings.environment == "production":
        conf.update(read_conf(conf_dir / "production.conf", env))
    conf["spark.sql.warehouse.dir"] = settings.warehouse_dir
    java_options = [f"-Dlog4j2.configurationFile=file:{conf_dir / 'log4j2.properties'}"]
    if not is_uri(settings.data_root):
        # Embedded Hive metastore (Derby) under DATA_ROOT; derby.log beside it.
        conf["spark.hadoop.javax.jdo.option.ConnectionURL"] = (
            f"jdbc:derby:;databaseName={settings.metastore_dir};create=true"
        )
        java_options.append(f"-Dderby.system.home={settings.data_root}")
    conf["spark.driver.extraJavaOptions"] = " ".join(java_options)
    return conf


class SparkResource(LazyPySparkResource):
    """dagster-pyspark's lazy session (started on first use, once per run process).

    Python workers run the driver's interpreter (the project's virtualenv) unless
    ``PYSPARK_PYTHON`` says otherwise, as on a cluster image. Before the session starts,
    ``data_root`` (when set) is checked by ``preflight.before_spark``: an unwritable
    ``DATA_ROOT`` or a metastore held by another process fails the run at once with a
    ``dg.Failure`` naming the cause, before a JVM is started.
    """

    data_root: str | None = None

    @property
    def spark_session(self) -> SparkSession:
        if self._spark_session is None and self.data_root:
            from backfill_assets import preflight

            try:
                preflight.before_spark(self.data_root)
            except preflight.PreflightError as exc:
                raise dg.Failure(description=str(exc)) from None
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        return super().spark_session


def spark_resource(settings: Settings) -> SparkResource:
    """The Spark resource of ``settings`` (its session is checked before it starts)."""
    return SparkResource(spark_config=spark_config(settings), data_root=settings.data_root)


def spark_session(settings: Settings) -> SparkSession:
    """A session outside Dagster (CLI, tests) with exactly the code location's config."""
    return spark_resource(settings).spark_session
