"""Operator text is inert and bounded: a release's reason, ticket and requester show as one
line of text in the report file and the publish's ``report`` metadata (which the UI renders
as Markdown), never as Markdown or HTML; past its limit it is refused in one line."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from markdown_it import MarkdownIt

from backfill_assets.core import tags
from backfill_assets.core.names import LAYERS
from backfill_assets.core.text import markdown_text, one_line
from backfill_assets.release import keys
from backfill_assets.release.report import build_report

FIRST, LAST = "2026-11-20T00", "2026-11-20T01"
HOSTILE = (
    "INC-1 <img src=x onerror=alert(1)>\n# INJECTED HEADING\n| a | b |\n"
    "[x](javascript:alert(1)) **bold** `code`"
)
TICKET = "OPS-7\n## ticket heading"


def _render(markdown: str) -> str:
    """HTML of ``markdown`` as a CommonMark renderer with raw HTML and GitHub tables (what
    the UI's metadata view renders) makes it."""
    return MarkdownIt("commonmark", {"html": True}).enable("table").render(markdown)


def _assert_inert(markdown: str) -> None:
    lines = markdown.splitlines()
    assert "<img src=x" not in markdown
    assert not any(line.lstrip("- ").startswith(("# INJECTED", "## ticket")) for line in lines)
    assert not any(line.startswith("| a | b") for line in lines)
    assert "[x](javascript:" not in markdown
    html = _render(markdown)
    assert "<img src=x" not in html and "<h1>INJECTED" not in html and "<h2>ticket" not in html
    assert 'href="javascript' not in html and "<strong>" not in html
    assert html.count("<code>") == html.count("<pre><code>")  # the chart's block only
    assert "<td>a</td>" not in html
    # readable: the rendered page shows the operator's text, as text, on one line
    assert "INC-1 &lt;img src=x onerror=alert(1)&gt; # INJECTED HEADING | a | b |" in html
    assert "[x](javascript:alert(1)) **bold** `code`" in html
    assert "OPS-7 ## ticket heading" in html


def test_markdown_text_renders_as_exactly_its_one_line():
    for text in (HOSTILE, TICKET, "a_b __c__ _d_ ~~e~~ ![i](j) <!-- k --> &amp; \\# \x1b[31m"):
        html = _render(f"- {markdown_text(text)}")
        assert html == f"<ul>\n<li>{_escape_html(one_line(text))}</li>\n</ul>\n", html
    assert one_line("x" * 50, 10) == "x" * 9 + "…"


def _escape_html(text: str) -> str:
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )


def test_a_hostile_reason_and_ticket_show_as_text_in_the_report_file_and_metadata(
    make_backups, run_release, instance: dg.DagsterInstance, tmp_path: Path
):
    result = run_release(
        make_backups(hours=2),
        FIRST,
        LAST,
        extra_tags={tags.REASON: HOSTILE, tags.TICKET: TICKET},
    )
    assert result.success, result.failures
    event = instance.get_latest_materialization_event(keys.PUBLISH_KEY)
    metadata = event.asset_materialization.metadata["report"]
    assert isinstance(metadata, dg.MarkdownMetadataValue)
    _assert_inert(metadata.value)
    layers = [LAYERS[name] for name in ("raw", "transformed", "aggregated")]
    report = build_report(instance, layers, backfill_id=result.release_id)
    markdown, _ = report.write(tmp_path / "report")
    _assert_inert(markdown.read_text())
    text = report.text()
    assert "reason INC-1 <img src=x onerror=alert(1)> # INJECTED HEADING | a | b |" in text
    assert "\n# INJECTED" not in text and "ticket OPS-7 ## ticket heading;" in text


def test_a_launch_whose_ticket_tag_is_past_the_limit_fails_its_first_step_in_one_line(
    make_backups, run_release
):
    """A UI launch with hand-typed tags: the first step fails at once, naming the tag."""
    result = run_release(
        make_backups(hours=1), FIRST, FIRST, extra_tags={tags.TICKET: "T" * 100_000}
    )
    assert not result.success
    assert len(result.runs) == 1  # nothing downstream ran
    (failure,) = result.failures[:1]
    assert f"{tags.TICKET} is 100,000 characters, more than the limit of 100" in failure
    assert "\n" not in failure and len(failure) < 400
