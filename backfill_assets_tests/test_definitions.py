"""The code location loads, validates, and every asset follows the project's conventions."""

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import dagster as dg
import yaml

from backfill_assets.definitions import build_definitions
from backfill_assets.partitions import hourly_partitions
from backfill_assets.settings import PROJECT_ROOT


def test_one_entry_point_named_in_workspace_and_pyproject():
    pyproject = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())
    workspace = yaml.safe_load((PROJECT_ROOT / "workspace.yaml").read_text())
    module = pyproject["tool"]["dagster"]["module_name"]
    assert module == "backfill_assets.definitions"
    assert workspace["load_from"][0]["python_module"]["module_name"] == module


def test_every_asset_is_hourly_single_run_described_and_versioned(base_settings):
    defs = build_definitions(base_settings)
    dg.Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        assert node.partitions_def == hourly_partitions, key
        assert node.backfill_policy == dg.BackfillPolicy.single_run(), key
        assert node.description, key
        assert node.code_version, key
        assert node.group_name in ("raw", "transformed", "aggregated"), key
    assert graph.asset_check_keys, "blocking checks are defined"
    assert all(graph.get_check_spec(k).blocking for k in graph.asset_check_keys)


def test_dagster_cli_validates_the_code_location(tmp_path: Path):
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path), "DAGSTER_DISABLE_TELEMETRY": "1"}
    dagster = Path(sys.executable).parent / "dagster"
    result = subprocess.run(
        [str(dagster), "definitions", "validate", "-w", str(PROJECT_ROOT / "workspace.yaml")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=PROJECT_ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "passed validation" in result.stdout + result.stderr
