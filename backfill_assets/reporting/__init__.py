"""Backfill reports (text, Markdown, PNG chart) and dry-run diffs."""
