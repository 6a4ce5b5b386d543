"""The S3A connector's configuration: its jars on both classpaths when installed, the S3
endpoint and region of the environment, the magic committer only for an s3a:// warehouse,
and backups on S3 opened by Spark as s3a:// when it can."""

from __future__ import annotations

from pathlib import Path

from backfill_assets.core.backups.store import S3BackupStore
from backfill_assets.core.spark.session import S3A_COMMITTER_CONF, spark_config
from backfill_assets.defs.resources import BACKUPS, build_resources
from backfill_assets.settings import PROJECT_ROOT, Settings


def _settings(tmp_path: Path, jars: bool, **env: str) -> Settings:
    folder = tmp_path / "jars"
    folder.mkdir(exist_ok=True)
    if jars:
        (folder / "hadoop-aws-3.5.0.jar").write_bytes(b"")
    return Settings.from_env(
        {
            "BACKFILL_SPARK_JARS": str(folder),
            "DATA_ROOT": str(tmp_path / "data"),
            "SPARK_CONF_DIR": str(PROJECT_ROOT / "spark"),
            **env,
        }
    )


def _dir(tmp_path: Path, jars: bool) -> Path:
    folder = tmp_path / ("with-jars" if jars else "without-jars")
    folder.mkdir()
    return folder


def test_jars_endpoint_and_committer(tmp_path: Path):
    settings = _settings(
        tmp_path,
        jars=True,
        DATA_ROOT="s3://warehouse/data",
        AWS_ENDPOINT_URL_S3="http://127.0.0.1:9000",
        AWS_DEFAULT_REGION="eu-west-1",
    )
    conf = spark_config(settings)
    classpath = f"{tmp_path / 'jars'}/*"
    assert conf["spark.driver.extraClassPath"] == classpath
    assert conf["spark.executor.extraClassPath"] == classpath
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-1"
    assert conf["spark.sql.warehouse.dir"] == "s3a://warehouse/data/warehouse"
    assert S3A_COMMITTER_CONF.items() <= conf.items()


def test_local_warehouse_keeps_spark_committers(tmp_path: Path):
    conf = spark_config(_settings(tmp_path, jars=True))
    assert "spark.driver.extraClassPath" in conf
    assert not any(key in conf for key in S3A_COMMITTER_CONF)
    assert "spark.hadoop.fs.s3a.endpoint" not in conf


def test_without_jars_nothing_of_s3a(tmp_path: Path):
    conf = spark_config(_settings(tmp_path, jars=False, DATA_ROOT="s3://warehouse/data"))
    assert not [key for key in conf if "s3a" in key or "extraClassPath" in key]
    assert not any(key in conf for key in S3A_COMMITTER_CONF)


def test_backups_on_s3_are_opened_by_spark_through_s3a(tmp_path: Path):
    for jars, reads in ((True, True), (False, False)):
        settings = _settings(_dir(tmp_path, jars), jars=jars, BACKUP_ROOT="s3://backups/tree")
        store = build_resources(settings)[BACKUPS]
        assert isinstance(store, S3BackupStore)
        assert store.spark_reads_files() is reads
        rel = "raw/date=2026-11-20/hour=00/client_id=1/part-0.jsonl.zst"
        scheme = "s3a" if reads else "s3"
        assert store.spark_path(rel) == f"{scheme}://backups/tree/{rel}"
    plain = S3BackupStore(root="s3://b/p")
    assert plain.spark_path("x") == "s3://b/p/x"
