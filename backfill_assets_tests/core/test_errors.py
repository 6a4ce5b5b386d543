"""Failures in words: ``core.errors.cause_line`` names the cause of a Spark (JVM) or file-system
failure in one line, never only the Py4J call."""

from __future__ import annotations

import errno

import pytest
from py4j.protocol import Py4JJavaError

from backfill_assets.core.errors import cause_line


def test_a_java_failure_is_its_java_cause_not_the_py4j_call(spark):
    with pytest.raises(Py4JJavaError) as raised:
        spark._jvm.java.io.FileInputStream("/nonexistent/part-0.zst")
    line = cause_line(raised.value)
    assert line == "FileNotFoundException: /nonexistent/part-0.zst (No such file or directory)"
    assert "An error occurred while calling" in str(raised.value)  # what it replaces


def test_a_java_cause_chain_is_walked_to_the_os_cause_with_its_path(spark):
    jvm = spark._jvm
    disk = jvm.java.io.IOException("No space left on device")
    write = jvm.org.apache.spark.SparkException(
        "[TASK_WRITE_FAILED] Task failed while writing rows to file:/data/warehouse/shadow/x.", disk
    )
    thrown = Py4JJavaError("An error occurred while calling o243.close", write)
    assert cause_line(thrown) == "no space left on device (file:/data/warehouse/shadow/x)"


def test_an_os_error_names_its_file_and_a_wrapped_one_its_cause():
    full = OSError(errno.ENOSPC, "No space left on device", "/data/reports/report.md")
    assert cause_line(full) == "no space left on device (/data/reports/report.md)"
    try:
        try:
            raise full
        except OSError as exc:
            raise RuntimeError("writing the report failed") from exc
    except RuntimeError as wrapped:
        assert cause_line(wrapped) == "no space left on device (/data/reports/report.md)"
    assert cause_line(ValueError("plain\nsecond line")) == "ValueError: plain"
    assert cause_line(OSError(errno.EACCES, "Permission denied"), "/x") == "permission denied (/x)"
