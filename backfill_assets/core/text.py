"""Operator text (a release's reason, ticket, requester) and other free text shown as text.

Free text reaches reports, metadata and the UI from people (the CLI's flags, the launch
form, hand-typed tags) and from files (names in a backup tree). It is shown as one line of
text, never as Markdown or HTML: ``one_line`` collapses line breaks and control characters
and bounds the length; ``markdown_text`` also escapes it for a Markdown document, so no
tag, heading, table row, link or emphasis it spells is rendered as such. Every piece of free
text a Markdown document carries goes through ``markdown_text``.
"""

from __future__ import annotations

import re

# A line of a report or a failure, at most (a longer one ends in "…").
MAX_LINE_CHARS = 4000
ELLIPSIS = "…"
_BREAKS = re.compile(r"[\s\x00-\x1f\x7f-\x9f\u2028\u2029]+")
# Characters Markdown (CommonMark + GitHub tables) gives a meaning anywhere in a line:
# escaped with a backslash (the text is always placed after the document's own bullet,
# heading or cell marker, so a leading ``-``, ``+`` or ``1.`` cannot start a list).
# An underscore inside a word (``release__publish``) cannot emphasize: left as it is.
_MARKDOWN = re.compile(r"([\\`*\[\]#!|~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")
# HTML: no tag, comment or entity can start without ``<`` or ``&``.
_HTML = {"&": "&amp;", "<": "&lt;"}


def one_line(value: object, limit: int = MAX_LINE_CHARS) -> str:
    """``value`` as one line of plain text: every run of whitespace, line breaks and control
    characters (terminal escapes included) becomes one space; at most ``limit`` characters."""
    text = _BREAKS.sub(" ", "" if value is None else str(value)).strip()
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + ELLIPSIS


def markdown_text(value: object, limit: int = MAX_LINE_CHARS) -> str:
    """``value`` as one line of text inside a Markdown document: ``one_line``, then HTML's
    special characters as entities and Markdown's punctuation backslash-escaped, so it
    renders exactly as the text it is."""
    text = one_line(value, limit)
    text = "".join(_HTML.get(c, c) for c in text)
    return _MARKDOWN.sub(r"\\\1", text)
