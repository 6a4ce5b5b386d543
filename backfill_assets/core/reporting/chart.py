"""The report's chart: rows per hour before and after, one panel per table (PNG, Agg).

Uses matplotlib's object API with the Agg canvas directly, so it never touches the global
backend of the process (the CLI, the tests and a notebook may all import it). matplotlib
is imported when a chart is drawn, not with this module: it takes most of a second, and
every process that loads the code location (the code server, each run) imports this one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

BEFORE_COLOR = "#9aa5b1"
AFTER_COLOR = "#2f7ed8"


def rows_chart(
    series: Mapping[str, Sequence[tuple[str, int | None, int | None]]],
    path: str | Path,
    title: str,
) -> Path:
    """Write grouped bars of rows ``before``/``after`` per hour, for each table of
    ``series`` (table -> [(hour, before, after)]) that has rows; a missing count is 0."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    path = Path(path)
    tables = [t for t, points in series.items() if any(b or a for _, b, a in points)] or [
        "(no rows)"
    ]
    figure = Figure(
        figsize=(
            max(6.0, 0.45 * max((len(series.get(t, ())) for t in tables), default=1) + 2),
            2.6 * len(tables) + 0.6,
        ),
        layout="constrained",
    )
    FigureCanvasAgg(figure)
    figure.suptitle(title, fontsize=10)
    axes = figure.subplots(len(tables), 1, squeeze=False)[:, 0]
    for ax, table in zip(axes, tables, strict=True):
        points = list(series.get(table, ()))
        xs = range(len(points))
        ax.bar(
            [x - 0.2 for x in xs],
            [b or 0 for _, b, _ in points],
            width=0.4,
            color=BEFORE_COLOR,
            label="before",
        )
        ax.bar(
            [x + 0.2 for x in xs],
            [a or 0 for _, _, a in points],
            width=0.4,
            color=AFTER_COLOR,
            label="after",
        )
        ax.set_title(table, fontsize=10, loc="left")
        ax.set_ylabel("rows")
        ax.set_xticks(
            list(xs),
            [hour[5:].replace("T", " ") + "h" for hour, _, _ in points],
            rotation=60,
            fontsize=7,
        )
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8, ncols=2, loc="lower right", bbox_to_anchor=(1.0, 1.0), frameon=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    return path


def rows_bars(
    series: Mapping[str, Sequence[tuple[str, int | None, int | None]]], width: int = 24
) -> list[str]:
    """The same chart as text (the Dagster UI's Markdown shows no inline images): per
    table, one line per hour with bars of rows before and after, scaled to the table's
    largest count."""
    lines: list[str] = []
    for table, points in series.items():
        top = max((max(b or 0, a or 0) for _, b, a in points), default=0)
        if not top:
            continue
        lines += [table, f"{'hour':<13}  {'before':<{width + 10}}  after"]
        for hour, before, after in points:
            cells = []
            for value in (before, after):
                bar = "█" * round(width * (value or 0) / top)
                cells.append(f"{bar:<{width}} {'-' if value is None else f'{value:,}':>9}")
            lines.append(f"{hour:<13}  {cells[0]}  {cells[1]}")
        lines.append("")
    return lines[:-1]
