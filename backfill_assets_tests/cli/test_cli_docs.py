"""docs/cli.md is the rendering of the argument parser: it fails when they drift apart."""

from __future__ import annotations

import argparse

from backfill_assets.cli.docs import REGENERATE, render_markdown
from backfill_assets.cli.main import build_parser
from backfill_assets.settings import PROJECT_ROOT

CLI_DOC = PROJECT_ROOT / "docs" / "cli.md"


def test_docs_cli_md_is_the_rendering_of_the_parser():
    expected = render_markdown(build_parser())
    actual = CLI_DOC.read_text() if CLI_DOC.exists() else ""
    assert actual == expected, (
        f"{CLI_DOC} differs from the command-line parser; regenerate it: {REGENERATE}"
    )


def test_the_rendering_names_every_command_and_option_whatever_the_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    narrow = render_markdown(build_parser())
    monkeypatch.setenv("COLUMNS", "250")
    assert render_markdown(build_parser()) == narrow
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in commands.choices.items():
        assert f"\n## {name}\n" in narrow
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            for option in action.option_strings:
                assert f"`{option}`" in narrow, f"{name} {option} missing from docs/cli.md"
