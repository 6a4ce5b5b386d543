"""The code location loads, validates, and every asset follows the project's conventions."""

import os
import subprocess
import tomllib
from pathlib import Path

import dagster as dg
import yaml

from backfill_assets.core.tags import PUBLISH_POOL
from backfill_assets.definitions import build_definitions
from backfill_assets.defs.checks.published import RELEASE_GATE
from backfill_assets.defs.jobs.vacuum import SCHEDULE_ENV, VACUUM_JOB, VACUUM_SCHEDULE
from backfill_assets.defs.partitions import RUN_POLICY, hourly_partitions_def
from backfill_assets.defs.publish import PUBLISH
from backfill_assets.settings import PROJECT_ROOT
from backfill_assets_tests.helpers.processes import bin_of


def test_one_entry_point_named_in_workspace_and_pyproject():
    pyproject = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())
    workspace = yaml.safe_load((PROJECT_ROOT / "workspace.yaml").read_text())
    module = pyproject["tool"]["dagster"]["module_name"]
    assert module == "backfill_assets.definitions"
    assert workspace["load_from"][0]["python_module"]["module_name"] == module


def test_every_asset_is_hourly_single_run_described_and_versioned(base_settings):
    """Shadows (what a release builds) are hourly, in runs of BACKFILL_HOURS_PER_RUN hours
    plus the session window's (one policy for every layer), versioned; the
    published tables are specs no run computes (changed only by publish and rollback);
    ``release/publish`` is hourly and of the same policy, in the publish pool, its
    parents the shadows: the session layer's hour for hour, the received-hour layers'
    through the session window (so Dagster runs it in the session layer's run)."""
    defs = build_definitions(base_settings)
    dg.Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    shadows, published = [], []
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        assert node.description, key
        if key == PUBLISH:
            assert node.partitions_def == hourly_partitions_def() and node.group_name == "release"
            assert node.backfill_policy == RUN_POLICY  # its layer's: in the same run
            assert node.pools == {PUBLISH_POOL}
            assert node.is_materializable
            continue
        assert node.partitions_def == hourly_partitions_def(), key
        assert node.group_name in ("raw", "transformed", "aggregated"), key
        if key.path[0] == "shadow":
            shadows.append(key)
            assert node.is_materializable, key
            assert node.backfill_policy == RUN_POLICY, key  # one policy: layers share runs
            assert node.code_version, key
        else:
            published.append(key)
            assert not node.is_materializable, key  # only publish/rollback change them
    assert len(shadows) == len(published) == 5
    assert set(graph.get(PUBLISH).parent_keys) == set(shadows)
    sessions = dg.AssetKey(["shadow", "sessions_candidate"])
    window = graph.get_partition_mapping(
        sessions, dg.AssetKey(["shadow", "transformed_payloads_candidate"])
    )
    for shadow in shadows:
        mapping = graph.get_partition_mapping(PUBLISH, shadow)
        if graph.get(shadow).group_name == "aggregated":  # hour for hour
            assert isinstance(mapping, dg.IdentityPartitionMapping | type(None)) or (
                mapping.start_offset == mapping.end_offset == 0
            ), shadow
        else:
            assert mapping == window, shadow
    checks = {k: graph.get_check_spec(k) for k in graph.asset_check_keys}
    # every check is evaluated per hour (one result per partition in the UI)
    assert all(spec.partitions_def == hourly_partitions_def() for spec in checks.values())
    # the shadows' checks block the publish; the published tables show the release gate
    assert {k.asset_key for k, spec in checks.items() if spec.blocking} == set(shadows) - {
        dg.AssetKey(["shadow", "raw_quarantine_candidate"])
    }
    assert {k.asset_key for k, spec in checks.items() if not spec.blocking} == set(published)
    assert {k.name for k, spec in checks.items() if not spec.blocking} == {RELEASE_GATE}
    assert defs.resolve_job_def("rollback_release") is not None


def test_vacuum_schedule_is_stopped_unless_enabled(base_settings, monkeypatch):
    """Retention deletes data: its schedule runs only once an operator turns it on."""
    schedule = build_definitions(base_settings).resolve_schedule_def(VACUUM_SCHEDULE)
    assert schedule.job_name == VACUUM_JOB
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    monkeypatch.setenv(SCHEDULE_ENV, "on")
    enabled = build_definitions(base_settings).resolve_schedule_def(VACUUM_SCHEDULE)
    assert enabled.default_status == dg.DefaultScheduleStatus.RUNNING


def test_dagster_cli_validates_the_code_location(tmp_path: Path):
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path), "DAGSTER_DISABLE_TELEMETRY": "1"}
    result = subprocess.run(
        [bin_of("dagster"), "definitions", "validate", "-w", str(PROJECT_ROOT / "workspace.yaml")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=PROJECT_ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "passed validation" in result.stdout + result.stderr


def test_layer_specs_name_the_shadow_assets_of_each_group(base_settings):
    """What a release rebuilds, from the layer specs alone (resources and sensors, which the
    definitions are built from, cannot build them) is each layer's Dagster group."""
    from backfill_assets.core import plan
    from backfill_assets.release import keys

    defs = build_definitions(base_settings)
    for layer in plan.LAYERS:
        assert keys.spec_keys(layer) == keys.layer_keys(defs, layer), layer
    everything = list(plan.LAYERS)
    assert keys.release_keys(everything) == keys.release_selection(defs, everything)
