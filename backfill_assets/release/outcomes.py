"""One outcome per check from its per-hour evaluations (the CLI's summaries, the report).

The check steps record one Dagster evaluation per (check, hour); a run's summary of a
check is: passed if every hour passed, else the failing hours with their reasons.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import dagster as dg

NOT_EVALUATED = "not evaluated: "


@dataclass
class CheckSummary:
    name: str
    asset: str
    hours: list[str] = field(default_factory=list)
    failing: dict[str, str] = field(default_factory=dict)
    errors: set[str] = field(default_factory=set)  # failing hours of severity ERROR

    @property
    def severity(self) -> str:
        """ERROR if an hour fails with ERROR (held back), WARN if only warnings (e.g. not
        evaluated), ERROR when nothing fails (the checks' declared severity)."""
        warn_only = self.failing and not self.errors
        return (dg.AssetCheckSeverity.WARN if warn_only else dg.AssetCheckSeverity.ERROR).value

    @property
    def passed(self) -> bool:
        return bool(self.hours) and not self.failing

    @property
    def description(self) -> str:
        if not self.failing:
            return f"{len(self.hours)} hour(s) pass"
        reasons = set(self.failing.values())
        if len(reasons) == 1 and len(self.failing) == len(self.hours):
            (reason,) = reasons  # e.g. every hour "not evaluated: ..." for the same cause
            if reason.startswith(NOT_EVALUATED):
                return reason
        names = sorted(self.failing)
        return f"{len(names)} of {len(self.hours)} hour(s) fail: {', '.join(names[:24])}" + (
            " ..." if len(names) > 24 else ""
        )


def summarize(
    evaluations: Iterable[dg.AssetCheckEvaluation],
) -> dict[tuple[str, str], CheckSummary]:
    """(asset, check name) -> its summary over the evaluations (one per hour, or one per
    run)."""
    found: dict[tuple[str, str], CheckSummary] = {}
    for e in evaluations:
        asset = e.asset_key.to_user_string()
        summary = found.setdefault((asset, e.check_name), CheckSummary(e.check_name, asset))
        hour = e.partition or "(run)"
        summary.hours.append(hour)
        if not e.passed:
            summary.failing[hour] = e.description or "failed"
            if e.severity == dg.AssetCheckSeverity.ERROR:
                summary.errors.add(hour)
    return found
