"""The import contracts of pyproject.toml (`lint-imports`): imports run one way, from the
commands down to the leaf that names things, with no cycle; the engine does not import
Dagster. Every module is placed in a layer, so none escapes the rule."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp

from backfill_assets.settings import PROJECT_ROOT

PACKAGE = "backfill_assets"
# Placed by no layer: the package itself and `resources/__init__` (build_resources, imported
# by the definitions and the commands only).
UNPLACED = {PACKAGE, f"{PACKAGE}.resources"}


def _contracts() -> list[dict]:
    return tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["tool"]["importlinter"][
        "contracts"
    ]


def _lint_imports(root: Path, config: Path) -> subprocess.CompletedProcess:
    binary = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [binary, str(config), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )


def test_import_contracts_hold():
    result = _lint_imports(PROJECT_ROOT, PROJECT_ROOT / "pyproject.toml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_module_has_a_layer():
    (layers,) = [c["layers"] for c in _contracts() if c["type"] == "layers"]
    placed = {m.strip() for line in layers for m in line.split("|")}
    graph = grimp.build_graph(PACKAGE, f"{PACKAGE}_dev")
    unplaced = sorted(
        m
        for m in graph.modules
        if m not in UNPLACED
        and not any(m == p or m.startswith(p + ".") or p.startswith(m + ".") for p in placed)
    )
    assert not unplaced, f"modules in no layer of pyproject.toml's import contract: {unplaced}"


def test_an_upward_import_breaks_the_contract(tmp_path: Path):
    """A resource that builds the definitions (how asset keys were once computed) is refused."""
    shutil.copytree(PROJECT_ROOT / PACKAGE, tmp_path / PACKAGE)
    shutil.copy(PROJECT_ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    releases = tmp_path / PACKAGE / "resources" / "releases.py"
    releases.write_text(releases.read_text() + "\nfrom backfill_assets import definitions\n")
    result = _lint_imports(tmp_path, tmp_path / "pyproject.toml")
    assert result.returncode != 0
    assert "backfill_assets.defs.resources.releases is not allowed to import" in result.stdout
