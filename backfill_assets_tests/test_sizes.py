"""Sizes a reader can hold: no module of the runtime package over MAX_MODULE_LINES, no
function over MAX_FUNCTION_LINES, except those a line of OVERSIZED names with why. An entry
is a ceiling: the module or function may shrink (then lower or drop the entry), not grow."""

from __future__ import annotations

import ast
from pathlib import Path

from backfill_assets.settings import PROJECT_ROOT

PACKAGE = PROJECT_ROOT / "backfill_assets"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80

# "path" or "path:function" -> (lines at most, why in one line).
OVERSIZED: dict[str, tuple[int, str]] = {
    "core/backups/spark_contract.py:judge": (
        93,
        "one Spark expression per contract rule, in order",
    ),
}


def sizes(package: Path) -> dict[str, int]:
    """Lines of every module and of every function (``def`` to its last line) over the
    limits, keyed as OVERSIZED is."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        name = path.relative_to(package).as_posix()
        text = path.read_text()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            found[name] = len(text.splitlines())
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    key = f"{name}:{node.name}"
                    found[key] = max(lines, found.get(key, 0))
    return found


def test_no_module_or_function_over_its_limit():
    over = {
        key: lines
        for key, lines in sizes(PACKAGE).items()
        if key not in OVERSIZED or lines > OVERSIZED[key][0]
    }
    assert not over, (
        f"over {MAX_MODULE_LINES} lines (module) or {MAX_FUNCTION_LINES} (function): {over}"
    )


def test_oversized_entries_are_current():
    """An entry for a module or function now within the limits is dropped (no stale
    exemption)."""
    found = sizes(PACKAGE)
    assert sorted(k for k in OVERSIZED if k not in found) == []


def test_a_long_function_is_found(tmp_path: Path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "long.py").write_text(f"def long():\n{body}\n")
    assert sizes(tmp_path) == {"long.py:long": MAX_FUNCTION_LINES + 1}
