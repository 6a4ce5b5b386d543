"""One Spark configuration, from spark/ and DATA_ROOT; profiles and their errors."""

import os
import subprocess
from pathlib import Path

import dagster as dg
import pytest

from backfill_assets.core.spark.session import (
    SHORT_RUN_CONF,
    SHORT_RUN_JAVA_OPTIONS,
    SparkConfigError,
    is_short_run,
    launch_conf,
    read_conf,
    resolve_conf,
    spark_config,
    unresolved_variables,
)
from backfill_assets.settings import PROJECT_ROOT, Settings
from backfill_assets_tests.helpers.processes import bin_of

PRODUCTION_VARIABLES = (
    "SPARK_MASTER",
    "SPARK_DRIVER_HOST",
    "SPARK_EXECUTOR_INSTANCES",
    "SPARK_IMAGE",
    "SPARK_NAMESPACE",
    "SPARK_SERVICE_ACCOUNT",
    "SPARK_DRIVER_POD_NAME",
    "HIVE_METASTORE_URIS",
)


def test_local_profile_uses_embedded_metastore_under_data_root(tmp_path: Path):
    settings = Settings.from_env({"DATA_ROOT": str(tmp_path / "data")})
    conf = spark_config(settings, env={})
    assert conf["spark.master"] == "local[*]"
    assert conf["spark.sql.catalogImplementation"] == "hive"
    assert conf["spark.sql.warehouse.dir"] == f"{tmp_path}/data/warehouse"
    assert (
        f"databaseName={tmp_path}/data/metastore_db"
        in conf["spark.hadoop.javax.jdo.option.ConnectionURL"]
    )
    java_options = conf["spark.driver.extraJavaOptions"].split()
    # the profile's JIT options (spark-defaults.conf) first, then the project's own
    assert java_options[:2] == ["-XX:FreqInlineSize=100", "-XX:InlineSmallCode=500"]
    assert f"-Dlog4j2.configurationFile=file:{PROJECT_ROOT / 'spark' / 'log4j2.properties'}" in (
        java_options
    )


def test_production_profile_needs_its_variables(tmp_path: Path):
    settings = Settings.from_env({"BACKFILL_ENV": "production", "DATA_ROOT": "s3://bucket/data"})
    with pytest.raises(SparkConfigError, match="SPARK_MASTER"):
        spark_config(settings, env={})
    env = dict.fromkeys(PRODUCTION_VARIABLES, "x")
    env["SPARK_MASTER"] = "k8s://https://kubernetes.default"
    conf = spark_config(settings, env=env)
    assert conf["spark.master"] == "k8s://https://kubernetes.default"
    assert "spark.hadoop.javax.jdo.option.ConnectionURL" not in conf
    # Configured as s3://, written by Spark through S3A.
    assert conf["spark.sql.warehouse.dir"] == "s3a://bucket/data/warehouse"


def test_malformed_conf_line_is_named(tmp_path: Path):
    bad = tmp_path / "bad.conf"
    bad.write_text("spark.master local[*]\njust-a-key\n")
    with pytest.raises(SparkConfigError, match=r"bad\.conf:2"):
        read_conf(bad, {})


def test_unknown_environment_is_rejected():
    with pytest.raises(ValueError, match="BACKFILL_ENV"):
        Settings.from_env({"BACKFILL_ENV": "staging"})


def test_production_profile_names_exactly_the_variables_it_needs(tmp_path: Path):
    settings = Settings.from_env({"BACKFILL_ENV": "production", "DATA_ROOT": str(tmp_path)})
    conf = spark_config(settings, env={}, resolve=False)
    assert unresolved_variables(conf) == sorted(PRODUCTION_VARIABLES)
    with pytest.raises(SparkConfigError, match="SPARK_DRIVER_HOST") as error:
        resolve_conf(conf, {n: "x" for n in PRODUCTION_VARIABLES if n != "SPARK_DRIVER_HOST"})
    assert "spark.driver.host" in str(error.value)


def _without_spark_variables() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in PRODUCTION_VARIABLES}


def test_code_location_loads_in_production_without_spark_variables(tmp_path: Path):
    """The module the webserver and daemon load, in a process with no Spark variable set."""
    env = {
        **_without_spark_variables(),
        "BACKFILL_ENV": "production",
        "DATA_ROOT": str(tmp_path / "data"),
        "BACKUP_ROOT": "s3://backups/prefix",
        "DAGSTER_HOME": str(tmp_path),
        "DAGSTER_DISABLE_TELEMETRY": "1",
    }
    result = subprocess.run(
        [bin_of("dagster"), "definitions", "validate", "-m", "backfill_assets.definitions"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "passed validation" in result.stdout + result.stderr


def test_production_run_fails_naming_the_missing_variable(
    tmp_path: Path, make_backups, monkeypatch: pytest.MonkeyPatch
):
    """The definitions build; the run fails when its Spark session starts, naming the variable."""
    from backfill_assets.definitions import build_definitions
    from backfill_assets.defs.layers.raw import SHADOW_PAYLOADS, SHADOW_QUARANTINE

    for name in PRODUCTION_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    settings = Settings.from_env(
        {
            "BACKFILL_ENV": "production",
            "BACKUP_ROOT": str(make_backups(hours=1)),
            "DATA_ROOT": str(tmp_path / "data"),
            "DAGSTER_HOME": str(tmp_path / "home"),
        }
    )
    defs = build_definitions(settings)
    job = defs.resolve_implicit_global_asset_job_def()
    with dg.DagsterInstance.ephemeral() as instance:
        result = job.execute_in_process(
            instance=instance,
            asset_selection=[SHADOW_PAYLOADS, SHADOW_QUARANTINE],
            partition_key="2026-11-20T00",
            raise_on_error=False,
        )
    assert not result.success
    failures = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failures
    texts = []
    for event in failures:
        error = event.event_specific_data.error
        while error is not None:
            texts.append(error.message)
            error = error.cause
    text = "\n".join(texts)
    assert "missing environment variable(s)" in text, text
    for name in ("SPARK_MASTER", "SPARK_DRIVER_HOST", "HIVE_METASTORE_URIS"):
        assert name in text, text


def test_a_runs_spark_usage_counts_the_stages_since_its_mark(spark):
    """The task time of a run's stages only, read newest first from the status store (which
    holds up to a thousand stages of earlier work in a long-lived driver)."""
    import time

    from backfill_assets.core.spark.session import last_stage, spark_usage

    before = last_stage(spark)
    started = time.monotonic()
    spark.range(5_000_000).selectExpr("max(xxhash64(id, repeat('x', 50)))").collect()
    after = last_stage(spark)

    assert after > before  # the new job's stages are the newest
    assert spark_usage(spark, before, started).task_seconds > 0
    assert spark_usage(spark, after, started).task_seconds == 0  # nothing newer than the mark
    cores = spark.sparkContext._jvm.java.lang.Runtime.getRuntime().availableProcessors()
    assert spark_usage(spark, after, started).cores == cores  # local[*]: the JVM's cores


def test_column_expressions_are_built_without_dataframe_debugging(spark, monkeypatch):
    # A static setting: it only holds if the profile's value reached the session when it
    # started. With PySpark's debugging on, the column functions below also make more py4j
    # round trips (for the active session, a configuration value, the origin object).
    from py4j.clientserver import ClientServerConnection
    from pyspark.sql import functions as F

    assert spark.conf.get("spark.python.sql.dataFrameDebugging.enabled") == "false"
    calls = []
    send = ClientServerConnection.send_command

    def counted(self, command):
        calls.append(command)
        return send(self, command)

    monkeypatch.setattr(ClientServerConnection, "send_command", counted)
    F.coalesce(F.upper(F.col("a")), F.lower(F.col("b")), F.lit("c"))
    monkeypatch.undo()
    assert 0 < len(calls) < 40  # 30 here; 45 with the debugging hooks (PySpark 4.3)


def test_a_short_run_starts_its_jvms_for_a_short_life():
    """A release that reads at most the limit (the CLI's estimate, a run tag) gets the
    short-run JVM options on the driver and the executors, after the profile's own; a
    long or unknown one keeps the profile's."""
    assert is_short_run(2_300, 16 << 20) and is_short_run(16 << 20, 16 << 20)
    assert not is_short_run((16 << 20) + 1, 16 << 20)
    assert not is_short_run(None, 16 << 20) and not is_short_run(10, 0)  # unknown; never
    profile = {"spark.driver.extraJavaOptions": "-XX:FreqInlineSize=100", "spark.app.name": "x"}
    short = launch_conf(profile, short_run=True)
    long = launch_conf(profile)
    for key in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"):
        options = short[key].split()
        assert options[-len(SHORT_RUN_JAVA_OPTIONS) :] == list(SHORT_RUN_JAVA_OPTIONS)
        assert not set(SHORT_RUN_JAVA_OPTIONS) & set(long.get(key, "").split())
    assert short["spark.driver.extraJavaOptions"].startswith("-XX:FreqInlineSize=100")
    assert {k: short[k] for k in SHORT_RUN_CONF} == SHORT_RUN_CONF  # one task per shuffle
    assert not SHORT_RUN_CONF.keys() & long.keys()
