"""The driver JVM's class-data-sharing archive: made by ``make`` (``backfill_assets_dev``),
mapped by every driver (``backfill_assets.core.spark.jvm_archive``)."""

import json
import os
import subprocess
import sys
from pathlib import Path

from backfill_assets.core.spark import jvm_archive
from backfill_assets.settings import PROJECT_ROOT
from backfill_assets_dev import jvm_archive as making


def test_the_suite_driver_jvm_maps_the_archive_make_created(spark):
    # `make test` made it (the jvm-archive target); the session's JVM has it mapped, so
    # the archive was accepted (a stale one is ignored by the JVM and never mapped).
    archive = jvm_archive.archive_path()
    assert archive.is_file(), "run `make jvm-archive` (make test and make demo do)"
    assert making.is_current()
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    maps = Path(f"/proc/{pid}/maps").read_text()
    assert str(archive) in maps


def test_without_an_archive_the_jvm_options_are_unchanged(monkeypatch, tmp_path: Path):
    monkeypatch.setattr(jvm_archive, "archive_path", lambda: tmp_path / "none.jsa")
    assert jvm_archive.java_options() == []
    assert not making.is_current()


def test_an_archive_of_another_java_is_not_current(monkeypatch, tmp_path: Path):
    archive = tmp_path / "spark-driver.jsa"
    archive.write_bytes(b"")
    archive.with_suffix(".json").write_text(json.dumps({"java": "another", "pyspark": "0"}))
    monkeypatch.setattr(jvm_archive, "archive_path", lambda: archive)
    assert not making.is_current()
    assert jvm_archive.java_options()[0] == f"-XX:SharedArchiveFile={archive}"


def test_a_stale_archive_is_ignored_quietly(monkeypatch, tmp_path: Path):
    archive = tmp_path / "spark-driver.jsa"
    archive.write_bytes(b"not an archive")
    monkeypatch.setattr(jvm_archive, "archive_path", lambda: archive)
    java = subprocess.run(
        [making.java(), *jvm_archive.java_options(), "-version"],
        capture_output=True,
        text=True,
    )
    assert java.returncode == 0, java.stderr
    assert "cds" not in java.stderr.lower() and "shared archive" not in java.stderr.lower()


def test_an_archive_dumped_before_the_jars_changed_is_not_current(monkeypatch, tmp_path: Path):
    # An archive made before `make jars` put the S3A connector on the driver's classpath
    # (or with other jars) is stale: the JVM would ignore it quietly, so make remakes it.
    archive = tmp_path / "spark-driver.jsa"
    archive.write_bytes(b"")
    jars = tmp_path / "jars"
    jars.mkdir()
    monkeypatch.setenv("BACKFILL_SPARK_JARS", str(jars))
    monkeypatch.setattr(jvm_archive, "archive_path", lambda: archive)
    archive.with_suffix(".json").write_text(json.dumps(making.identity()))
    assert making.is_current()
    (jars / "hadoop-aws-3.5.0.jar").write_bytes(b"a jar")
    assert not making.is_current()


def test_a_run_process_driver_maps_the_archive_too(tmp_path: Path):
    # A Dagster run process has SPARK_CONF_DIR (release.launch.settings_env), which Spark's
    # launcher puts on the JVM's class path: the archive did not map there (a class path
    # other than the dump's), and every run loaded its classes from the jars.
    code = """
import os, sys
from pathlib import Path
from backfill_assets.core.spark import jvm_archive
from backfill_assets.settings import PROJECT_ROOT
from backfill_assets.core.spark.session import spark_session
from backfill_assets.settings import Settings

spark = spark_session(Settings.from_env())
pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
mapped = str(jvm_archive.archive_path()) in Path(f"/proc/{pid}/maps").read_text()
print("mapped" if mapped else "not mapped", os.environ["SPARK_CONF_DIR"])
"""
    env = {
        **os.environ,
        "SPARK_CONF_DIR": str(PROJECT_ROOT / "spark"),
        "DATA_ROOT": str(tmp_path / "data"),
        "BACKUP_ROOT": str(tmp_path / "backups"),
        "DAGSTER_HOME": str(tmp_path / "home"),
    }
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # mapped, and the process's own variable is as it was (the settings read it)
    assert done.stdout.split() == ["mapped", str(PROJECT_ROOT / "spark")]
