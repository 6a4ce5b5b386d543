"""One Spark configuration, from spark/ and DATA_ROOT; profiles and their errors."""

from pathlib import Path

import pytest

from backfill_assets.resources.spark import SparkConfigError, read_conf, spark_config
from backfill_assets.settings import PROJECT_ROOT, Settings


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
    assert (
        str(PROJECT_ROOT / "spark" / "log4j2.properties") in conf["spark.driver.extraJavaOptions"]
    )


def test_production_profile_needs_its_variables(tmp_path: Path):
    settings = Settings.from_env({"BACKFILL_ENV": "production", "DATA_ROOT": "s3://bucket/data"})
    with pytest.raises(SparkConfigError, match="SPARK_MASTER"):
        spark_config(settings, env={})
    env = {
        name: "x"
        for name in (
            "SPARK_MASTER",
            "SPARK_DRIVER_HOST",
            "SPARK_EXECUTOR_INSTANCES",
            "SPARK_IMAGE",
            "SPARK_NAMESPACE",
            "HIVE_METASTORE_URIS",
        )
    }
    env["SPARK_MASTER"] = "k8s://https://kubernetes.default"
    conf = spark_config(settings, env=env)
    assert conf["spark.master"] == "k8s://https://kubernetes.default"
    assert "spark.hadoop.javax.jdo.option.ConnectionURL" not in conf
    assert conf["spark.sql.warehouse.dir"] == "s3://bucket/data/warehouse"


def test_malformed_conf_line_is_named(tmp_path: Path):
    bad = tmp_path / "bad.conf"
    bad.write_text("spark.master local[*]\njust-a-key\n")
    with pytest.raises(SparkConfigError, match=r"bad\.conf:2"):
        read_conf(bad, {})


def test_unknown_environment_is_rejected():
    with pytest.raises(ValueError, match="BACKFILL_ENV"):
        Settings.from_env({"BACKFILL_ENV": "staging"})
