"""The suite's CPU plugin (``backfill_assets_dev.suite_cpu``) counts what a test's child
processes use, also a grandchild its parent left behind, and removes its cgroups."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from backfill_assets_dev import suite_cpu

BURNING = """
import subprocess, sys

def test_burns_in_a_grandchild():
    # a child that starts a grandchild burning CPU, then exits without waiting for it
    burn = "sum(range(3 * 10**7))"
    code = f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {burn!r}])"
    subprocess.run([sys.executable, "-c", code], check=True)
    import time, os
    deadline = time.monotonic() + 60
    while any(p.isdigit() and b"range(3" in open(f"/proc/{p}/cmdline", "rb").read()
              for p in os.listdir("/proc") if os.path.exists(f"/proc/{p}/cmdline")):
        assert time.monotonic() < deadline
        time.sleep(0.05)

def test_idle():
    pass
"""


def test_each_test_is_charged_its_whole_process_tree(tmp_path: Path):
    accounting = suite_cpu._accounting()
    if accounting is None:
        pytest.skip("no writable cgroup with CPU accounting (needs root)")
    (tmp_path / "test_burn.py").write_text(BURNING)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    root = accounting[0]
    # the suite's own, when it runs with the plugin too (one per worker, in use)
    before = set(root.glob("backfill-assets-tests-*"))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "backfill_assets_dev.suite_cpu", "-q",
         "-p", "no:cacheprovider", "test_burn.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=dict(os.environ),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {
        line.split("::")[1].split('"')[0]: line
        for path in (tmp_path / suite_cpu.OUT).glob("*.jsonl")
        for line in path.read_text().splitlines()
    }
    assert set(rows) == {"test_burns_in_a_grandchild", "test_idle"}
    burn = float(rows["test_burns_in_a_grandchild"].split('"cpu": ')[1].split(",")[0])
    idle = float(rows["test_idle"].split('"cpu": ')[1].split(",")[0])
    assert burn > 0.3 > idle, rows
    assert "CPU of the tests' process trees" in done.stdout and "test_burn.py" in done.stdout
    left = set(root.glob("backfill-assets-tests-*")) - before
    assert not left, f"cgroups left behind: {sorted(left)}"
