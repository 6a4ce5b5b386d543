"""Where the test suite's CPU goes: a pytest plugin that measures each test's whole process
tree (the pytest process, its Spark JVM, and every command, daemon, run and JVM the test
starts, also those that outlive their parent) from a cgroup of its own.

    make test PYTEST_ARGS='-p backfill_assets_dev.suite_cpu'

Each worker writes one JSON line per test into ``var/test-cpu/``; the end of the session
prints the modules by CPU seconds. It needs root and a cgroup hierarchy with CPU accounting
(cgroup v1 ``cpuacct``, or v2); without them it says so once and measures nothing. A
module's shared setup counts in its first test; the suite's wall time is about its CPU
time over the machine's cores when every core is busy.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import time
from pathlib import Path

import pytest

CGROUPS = Path("/sys/fs/cgroup")
OUT = Path("var") / "test-cpu"
SHOWN = 25  # modules in the summary


def _accounting() -> tuple[Path, str, float] | None:
    """(hierarchy, usage file, seconds per unit) of a writable CPU-accounting cgroup tree."""
    for root, usage, unit in (
        (CGROUPS / "cpuacct", "cpuacct.usage", 1e-9),
        (CGROUPS, "cpu.stat", 1e-6),
    ):
        if (root / usage).exists() and os.access(root, os.W_OK):
            return root, usage, unit
    return None


def _usage(group: Path, usage: str, unit: float) -> float:
    text = (group / usage).read_text()
    if usage == "cpu.stat":  # "usage_usec N" among others
        text = dict(line.split() for line in text.splitlines())["usage_usec"]
    return int(text) * unit


def _tree(pid: int) -> list[int]:
    """``pid`` and its living descendants."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            with contextlib.suppress(OSError):  # exited meanwhile
                todo.extend(int(c) for c in (task / "children").read_text().split())
    return found


def _move_tree(group: Path) -> None:
    group.mkdir(parents=True, exist_ok=True)
    for pid in _tree(os.getpid()):
        with contextlib.suppress(OSError):  # exited meanwhile
            (group / "cgroup.procs").write_text(str(pid))


class SuiteCpu:
    def __init__(self, config: pytest.Config, accounting: tuple[Path, str, float]):
        self.root, self.usage, self.unit = accounting
        self.worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        self.base = self.root / f"backfill-assets-tests-{os.getpid()}"
        self.out = Path(config.rootpath) / OUT
        self.count = 0

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem):
        self.count += 1
        group = self.base / f"test-{self.count}"
        _move_tree(group)
        started = time.monotonic()
        yield
        wall = time.monotonic() - started
        cpu = _usage(group, self.usage, self.unit)
        _move_tree(self.base / "between")
        self.out.mkdir(parents=True, exist_ok=True)
        line = {"test": item.nodeid, "cpu": round(cpu, 2), "wall": round(wall, 2)}
        with open(self.out / f"{self.worker}.jsonl", "a") as file:
            file.write(json.dumps(line) + "\n")

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """Every process back in the hierarchy's root, this process's groups removed."""
        if not self.base.exists():  # no test ran here (xdist's controller)
            return
        _move_tree(self.root)
        for group in [g for g in self.base.iterdir() if g.is_dir()]:
            group.rmdir()
        self.base.rmdir()


def summary(out: Path) -> list[str]:
    """Lines of the modules by CPU seconds, from every worker's file under ``out``."""
    modules: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for path in sorted(out.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            totals = modules[row["test"].split("::")[0]]
            totals[0] += row["cpu"]
            totals[1] += row["wall"]
            totals[2] += 1
    total = sum(t[0] for t in modules.values())
    lines = [f"CPU of the tests' process trees: {total:.0f} s in all ({out})"]
    for name, (cpu, wall, tests) in sorted(modules.items(), key=lambda kv: -kv[1][0])[:SHOWN]:
        lines.append(f"{cpu:8.0f} s CPU {wall:8.0f} s wall {tests:4d} test(s)  {name}")
    return lines


def pytest_configure(config: pytest.Config) -> None:
    accounting = _accounting()
    if accounting is None:
        config.issue_config_time_warning(
            pytest.PytestWarning("suite_cpu: no writable cgroup with CPU accounting (needs root)"),
            stacklevel=2,
        )
        return
    if not hasattr(config, "workerinput"):  # the controller (or the only process)
        for old in (Path(config.rootpath) / OUT).glob("*.jsonl"):
            old.unlink()
    config.pluginmanager.register(SuiteCpu(config, accounting), "backfill_assets_suite_cpu")


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    out = Path(config.rootpath) / OUT
    if not hasattr(config, "workerinput") and any(out.glob("*.jsonl")):
        for line in summary(out):
            terminalreporter.write_line(line)
