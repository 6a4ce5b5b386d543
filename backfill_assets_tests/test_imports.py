"""Imports run one way (pyproject.toml's contracts, `lint-imports`): tooling > commands > the
definitions > the Dagster wiring (defs) > the release > the Dagster-free engine (core) >
settings, each folder layered inside, no cycle, and the engine imports no Dagster even
indirectly. Every module imports alone in a fresh interpreter, and no import of the package
hides inside a function to dodge a loop (the commands import lazily for a fast `--help`)."""

from __future__ import annotations

import ast
import os
import pkgutil
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp

from backfill_assets.settings import PROJECT_ROOT

PACKAGE = "backfill_assets"
LAZY_IMPORTS_ALLOWED = ("cli",)  # the commands: each subcommand loads what it needs
# Modules imported inside the functions that use them, for what they load: the pandera
# models bring pandera and pandas (about a second), which only a run's steps need.
LAZY_MODULES = {f"{PACKAGE}.core.layers.models"}
# What a process that loads the code location without validating (the CLI, the code
# server, the UI's and the daemon's) must not load.
NOT_LOADED_BY_THE_DEFINITIONS = ("pandera", "pandas")
# Alembic's environment script runs inside alembic only (it reads alembic.context).
NOT_IMPORTABLE = {f"{PACKAGE}.core.warehouse.migrations.env"}


def _contracts() -> list[dict]:
    config = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())
    return config["tool"]["importlinter"]["contracts"]


def _lint_imports(root: Path, config: Path) -> subprocess.CompletedProcess:
    binary = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [binary, str(config), "--no-cache"], cwd=root, env=env, capture_output=True, text=True
    )


def _modules() -> list[str]:
    package = __import__(PACKAGE)
    return sorted(m.name for m in pkgutil.walk_packages(package.__path__, f"{PACKAGE}."))


def test_import_contracts_hold():
    result = _lint_imports(PROJECT_ROOT, PROJECT_ROOT / "pyproject.toml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_every_module_has_a_place_in_the_layers():
    """No module escapes the rules: each lies in a floor, and inside core, release and defs
    in a layer of its folder."""
    contracts = [c for c in _contracts() if c["type"] == "layers"]
    graph = grimp.build_graph(PACKAGE, f"{PACKAGE}_dev", cache_dir=None)
    for contract in contracts:
        containers = contract.get("containers", [""])
        placed = {
            f"{container}.{m.strip()}" if container else m.strip()
            for container in containers
            for line in contract["layers"]
            for m in line.split("|")
        }
        inside = [m for m in graph.modules if any(m.startswith(c + ".") for c in containers if c)]
        candidates = inside if containers != [""] else graph.modules
        unplaced = sorted(
            m
            for m in candidates
            if m not in (PACKAGE, *containers)
            and not any(m == p or m.startswith(p + ".") for p in placed)
        )
        assert not unplaced, f"{contract['name']}: modules in no layer: {unplaced}"


def test_an_upward_import_breaks_the_contracts(tmp_path: Path):
    """The engine reaching up to the release (which imports Dagster) is refused twice: by the
    floors and by the Dagster-free rule; so is a resource that builds the definitions."""
    shutil.copytree(PROJECT_ROOT / PACKAGE, tmp_path / PACKAGE)
    shutil.copy(PROJECT_ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    gates = tmp_path / PACKAGE / "core" / "warehouse" / "gates.py"
    gates.write_text(gates.read_text() + "\nfrom backfill_assets.release import keys\n")
    releases = tmp_path / PACKAGE / "defs" / "resources" / "releases.py"
    releases.write_text(releases.read_text() + "\nfrom backfill_assets import definitions\n")
    result = _lint_imports(tmp_path, tmp_path / "pyproject.toml")
    assert result.returncode != 0
    out = result.stdout
    assert "backfill_assets.core is not allowed to import backfill_assets.release" in out
    assert "backfill_assets.core is not allowed to import dagster" in out
    assert "backfill_assets.core.warehouse.gates -> backfill_assets.release.keys" in out
    assert "backfill_assets.defs is not allowed to import backfill_assets.definitions" in out
    assert "3 broken" in out, out  # the floors, the wiring's layers, Dagster-free core


# A fresh interpreter that has imported the third-party libraries (as any module would) but
# nothing of the package, then forks once per module: each child imports one module first,
# as a process that starts with it would (a module that needs another one imported before
# it fails here: a cycle).
_ALONE = """
import importlib, os, sys, traceback
import dagster, dagster_aws, dagster_pyspark, pandera, pyspark.sql, sqlalchemy, alembic
assert not [m for m in sys.modules if m.split(".")[0] == "backfill_assets"]
failed = []
for name in sys.argv[1:]:
    pid = os.fork()
    if pid == 0:
        try:
            importlib.import_module(name)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    if os.waitpid(pid, 0)[1] != 0:
        failed.append(name)
print("FAILED:", " ".join(failed))
"""


def test_every_module_imports_alone_in_a_fresh_interpreter():
    modules = [m for m in _modules() if m not in NOT_IMPORTABLE]
    assert len(modules) > 90
    result = subprocess.run(
        [sys.executable, "-c", _ALONE, *modules], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "FAILED:", result.stdout + result.stderr[-3000:]


def test_no_import_of_the_package_hides_inside_a_function():
    hidden = []
    for path in sorted((PROJECT_ROOT / PACKAGE).rglob("*.py")):
        folder = path.relative_to(PROJECT_ROOT / PACKAGE).parts[0]
        if folder in LAZY_IMPORTS_ALLOWED:
            continue
        tree = ast.parse(path.read_text())
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                module = node.module if isinstance(node, ast.ImportFrom) else None
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                imported = [module] if module else names
                if any(n.startswith(PACKAGE) and n not in LAZY_MODULES for n in imported):
                    hidden.append(f"{path.relative_to(PROJECT_ROOT)}:{node.lineno}")
    assert not hidden, f"imports of the package inside functions: {hidden}"


def test_the_definitions_load_no_pandera_until_a_step_validates():
    """The code location loads in every Dagster process (the CLI, the code server, each
    run); pandera and pandas load in the run's steps that validate (``LAZY_MODULES``)."""
    code = (
        "import sys, backfill_assets.definitions; "
        f"print(sorted(m for m in {NOT_LOADED_BY_THE_DEFINITIONS!r} if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]", done.stdout
