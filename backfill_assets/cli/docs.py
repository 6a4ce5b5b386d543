"""docs/cli.md, rendered from the argument parser (``main.build_parser``).

``python -m backfill_assets.cli.docs > docs/cli.md`` (or ``make docs``) writes it;
``backfill_assets_tests/cli/test_cli_docs.py`` fails when the file and the parser differ.
The text does not depend on the terminal: usage lines are wrapped at ``WIDTH`` columns and
everything else is built here, from the parser's actions.
"""

from __future__ import annotations

import argparse
import functools
import sys

WIDTH = 100
REGENERATE = "python -m backfill_assets.cli.docs > docs/cli.md"


def _formatter(parser: argparse.ArgumentParser) -> argparse.HelpFormatter:
    """A help formatter of a fixed width (argparse's own reads the terminal's)."""
    parser.formatter_class = functools.partial(argparse.HelpFormatter, width=WIDTH)
    return parser._get_formatter()


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = _formatter(parser)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _expand(action: argparse.Action, prog: str) -> str:
    """The action's help with ``%(default)s``-style fields filled in, as argparse does."""
    if not action.help:
        return ""
    params = dict(vars(action), prog=prog)
    params = {k: v for k, v in params.items() if v is not argparse.SUPPRESS}
    for key, value in list(params.items()):
        if hasattr(value, "__name__"):
            params[key] = value.__name__
    if params.get("choices") is not None:
        params["choices"] = ", ".join(str(c) for c in params["choices"])
    return action.help % params


def _text(text: str) -> str:
    """Help text as Markdown: one line; ``<``/``>`` escaped outside code spans (``<out>``
    would otherwise read as an HTML tag)."""
    parts = " ".join(text.split()).split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)


def _cell(text: str) -> str:
    """Text for one Markdown table cell (one line, pipes escaped)."""
    return _text(text).replace("|", "\\|")


def _value(action: argparse.Action) -> str:
    """What an option takes: its metavar, its choices, or nothing for a flag."""
    if action.nargs == 0:
        return ""
    if action.metavar is not None:
        name = action.metavar
    elif action.choices is not None:
        name = "{" + ",".join(str(c) for c in action.choices) + "}"
    else:
        name = action.dest.upper()
    return f"`{name}`" + (" …" if action.nargs in ("+", "*") else "")


def _arguments(parser: argparse.ArgumentParser) -> list[str]:
    """The parser's arguments as a Markdown table (help and subcommand actions left out)."""
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        name = ", ".join(f"`{s}`" for s in action.option_strings) or f"`{action.dest}`"
        what = _expand(action, parser.prog)
        if action.required and action.option_strings:
            what = f"required; {what}" if what else "required"
        rows.append(f"| {name} | {_value(action)} | {_cell(what)} |")
    if not rows:
        return ["No arguments."]
    return ["| argument | value | what |", "|---|---|---|", *rows]


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line help, parser) of each subcommand, in the order they are registered."""
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
    return [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]


def _command(name: str, summary: str, parser: argparse.ArgumentParser) -> list[str]:
    lines = [f"## {name}", "", _text(f"{summary[:1].upper()}{summary[1:]}.") if summary else ""]
    description = " ".join((parser.description or "").split())
    if description and description.rstrip(".") != summary.rstrip("."):
        lines += ["", _text(description)]
    lines += ["", "```", _usage(parser), "```", "", *_arguments(parser), ""]
    return lines


def render_markdown(parser: argparse.ArgumentParser) -> str:
    """The command-line reference of ``parser`` (the ``backfill-assets`` parser) as Markdown."""
    commands = _subcommands(parser)
    lines = [
        "# Command-line reference",
        "",
        "<!-- Generated from backfill_assets/cli/main.py::build_parser. Do not edit by hand:",
        f"     regenerate with `{REGENERATE}` (or `make docs`). -->",
        "",
        f"`{parser.prog}`: {parser.description}",
        "",
        "Run it as `.venv/bin/backfill-assets COMMAND …` (or "
        "`python -m backfill_assets.cli.main COMMAND …`). Exit codes: 0 when everything "
        "succeeded; 1 when the work did not all succeed (a run failed, hours were held back, "
        "a step refused to build; `reconcile`: findings to act on; `verify`: the ledger and "
        "the metastore disagree); 2 for a problem to fix before anything runs (a bad "
        "argument, a missing or unwritable path), printed in one line.",
        "",
        "```",
        _usage(parser),
        "```",
        "",
        *_arguments(parser),
        "",
        "| command | what it does |",
        "|---|---|",
        *(f"| [`{name}`](#{name}) | {_cell(summary)} |" for name, summary, _ in commands),
        "",
    ]
    for name, summary, sub in commands:
        lines += _command(name, summary, sub)
    return "\n".join(lines).rstrip("\n") + "\n"


def main() -> int:
    from backfill_assets.cli.main import build_parser

    sys.stdout.write(render_markdown(build_parser()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
