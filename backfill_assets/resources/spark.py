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

from backfill_assets.resources import jvm_archive
from backfill_assets.settings import Settings, is_uri

# ${VAR} (required) or ${VAR:-default}.
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class SparkConfigError(ValueError):
    """A Spark configuration file that cannot be used, with the file and line named."""


def read_conf(
    path: Path, env: Mapping[str, str] | None = None, *, resolve: bool = True
) -> dict[str, str]:
    """Read a ``spark-defaults.conf``-style file, substituting ``${VAR}`` from ``env``.

    With ``resolve=False`` the ``${VAR}`` placeholders are kept as written, to be resolved
    by ``resolve_conf`` where the Spark session starts (the run's process).
    """
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
    env = os.environ if env is None else env
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
    java_options = [f"-Dlog4j2.configurationFile=file:{conf_dir / 'log4j2.properties'}"]
    if settings.environment == "local" and not is_uri(settings.data_root):
        # Embedded Hive metastore (Derby) under DATA_ROOT; derby.log beside it. The
        # production profile uses the shared metastore service (hive.metastore.uris).
        conf["spark.hadoop.javax.jdo.option.ConnectionURL"] = (
            f"jdbc:derby:;databaseName={settings.metastore_dir};create=true"
        )
        java_options.append(f"-Dderby.system.home={settings.data_root}")
    conf["spark.driver.extraJavaOptions"] = " ".join(java_options)
    return conf


class SparkResource(LazyPySparkResource):
    """dagster-pyspark's lazy session (started on first use, once per run process).

    ``spark_config`` may hold ``${VAR}`` placeholders (the production profile): they are
    resolved from the run process's environment when the session starts, so the code
    location loads anywhere and a run missing a variable fails naming it.

    Python workers run the driver's interpreter (the project's virtualenv) unless
    ``PYSPARK_PYTHON`` says otherwise, as on a cluster image. Before the session starts,
    ``data_root`` (when set) is checked by ``preflight.before_spark``: an unwritable
    ``DATA_ROOT`` or a metastore held by another process fails the run at once with a
    ``dg.Failure`` naming the cause, before a JVM is started.
    """

    data_root: str | None = None

    def _init_session(self) -> None:
        if self._spark_session is None:
            if self.data_root:
                from backfill_assets import preflight

                try:
                    preflight.before_spark(self.data_root)
                except preflight.PreflightError as exc:
                    raise dg.Failure(description=str(exc)) from None
            conf = resolve_conf(self.spark_config)  # raises naming a missing variable
            archive = jvm_archive.java_options()  # a faster JVM start, when there is one
            if archive:
                for key in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"):
                    conf[key] = " ".join([conf.get(key, ""), *archive]).strip()
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            builder = SparkSession.builder
            for key, value in conf.items():
                builder = builder.config(key, value)
            self._spark_session = builder.getOrCreate()


def spark_resource(settings: Settings) -> SparkResource:
    """The Spark resource of ``settings`` (its session is checked before it starts)."""
    return SparkResource(
        spark_config=spark_config(settings, resolve=False), data_root=settings.data_root
    )


def spark_session(settings: Settings) -> SparkSession:
    """A session outside Dagster (CLI, tests) with exactly the code location's config."""
    return spark_resource(settings).spark_session
