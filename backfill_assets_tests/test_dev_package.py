"""The development tooling (generator, demo, benchmarks, half-cut) lives in
``backfill_assets_dev``: the runtime package never imports it, the image does not carry it,
and where it is absent its subcommands fail in one line naming what to install."""

from __future__ import annotations

import os
import subprocess
import sys

from backfill_assets.settings import PROJECT_ROOT

# The CLI as the image runs it: the development package cannot be imported.
WITHOUT_DEV = """
import sys
class Absent:
    def find_spec(self, name, path=None, target=None):
        if name == "backfill_assets_dev" or name.startswith("backfill_assets_dev."):
            raise ModuleNotFoundError(f"No module named {name!r}", name="backfill_assets_dev")
sys.meta_path.insert(0, Absent())
from backfill_assets.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def _cli_without_dev(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_DEV, *args], capture_output=True, text=True, env=env
    )


def test_dev_commands_name_the_missing_package():
    for command in ("demo", "generate", "land", "bench", "halfcut"):
        result = _cli_without_dev(command, "--hours", "3")
        assert result.returncode == 2, (command, result.stderr)
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith(f"backfill-assets {command}: a development command"), line
        assert "backfill_assets_dev is not installed" in line


def test_runtime_commands_work_without_the_dev_package():
    result = _cli_without_dev("backfill", "--help")
    assert result.returncode == 0, result.stderr
    assert "usage: backfill-assets backfill" in result.stdout


def test_image_carries_the_runtime_package_only():
    text = (PROJECT_ROOT / "Dockerfile").read_text()
    assert "COPY backfill_assets ./backfill_assets\n" in text
    assert "backfill_assets_dev" not in text
