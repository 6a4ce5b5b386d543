"""The launch form: a release's options as typed run configuration.

The UI's launch dialog (Config, "Scaffold all default config") and the launchpad show these
fields with their descriptions and defaults and validate them before launching; the CLI
fills the same fields from its flags. When a run starts, the form's answers become the
run's tags (``backfill_assets/reason`` ...), the one place every reader looks (lineage,
ledger, checks, reports, the sensor), so a form and hand-typed tags mean the same thing.
An answer that contradicts a tag the run already has is refused before anything runs.

The session window is not a field: it is the sessions' partition mapping in code
(``layers/windows.py``), so an hour's sessions do not depend on who launched the build.
"""

import enum

import dagster as dg
from pydantic import Field

from backfill_assets.core import tags


class Mode(enum.Enum):
    """Publish the release's checked hours, or build and check them only."""

    publish = "publish"
    dry_run = "dry_run"


class LaunchForm(dg.ConfigurableResource):
    """Why, for whom and how a release runs (the fields of ``backfill-assets backfill``)."""

    reason: str = Field(
        default="",
        description="Why this release: recorded in run tags, lineage and the ledger "
        f"(at most {tags.MAX_REASON_CHARS} characters, shown as one line of text).",
    )
    ticket: str = Field(
        default="",
        description="Ticket or incident reference, e.g. INC-1234 "
        f"(at most {tags.MAX_TICKET_CHARS} characters).",
    )
    requested_by: str = Field(
        default="",
        description="Who asked for it (default: the Dagster user who launched it, if any; "
        f"at most {tags.MAX_REQUESTED_BY_CHARS} characters).",
    )
    mode: Mode = Field(
        default=Mode.publish,
        description="publish: publish every hour whose checks pass, in one transaction. "
        "dry_run: build and check every layer, publish nothing (the release's report is "
        "attached to release/publish; publish it later with backfill-assets publish).",
    )
    allow_missing_hours: bool = Field(
        default=False,
        description="Publish hours that have no backup folder at all as empty partitions "
        "(otherwise the raw check holds them back).",
    )
    approve_changes: bool = Field(
        default=False,
        description="Approve now the change gates' findings (hours whose rows, keys or sums "
        "move beyond the limits); recorded with requested_by and reason.",
    )

    def answers(self) -> dict[str, str]:
        """The run tags this form sets: only the fields given (defaults set nothing)."""
        answers = {
            tags.REASON: self.reason.strip(),
            tags.TICKET: self.ticket.strip(),
            tags.REQUESTED_BY: self.requested_by.strip(),
            tags.MODE: "dry_run" if self.mode == Mode.dry_run else "",
            tags.ALLOW_MISSING_HOURS: "true" if self.allow_missing_hours else "",
            tags.APPROVE_CHANGES: "true" if self.approve_changes else "",
        }
        return {key: value for key, value in answers.items() if value}

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        run = context.dagster_run
        answers = self.answers()
        if run is None:
            return
        # a reason, ticket or requester past its limit (form or typed tags): the step fails
        # at once with the one line that names it
        tags.check_text_limits({**run.tags, **answers})
        if context.instance is None or not answers:
            return
        clashes = [
            f"{key}: tag {run.tags[key]!r}, form {value!r}"
            for key, value in answers.items()
            if run.tags.get(key) not in (None, value)
        ]
        if clashes:
            raise ValueError(
                "the launch form contradicts the run's tags (keep one of them): "
                + "; ".join(clashes)
            )
        new = {key: value for key, value in answers.items() if key not in run.tags}
        if new:
            context.instance.add_run_tags(run.run_id, new)
            if context.log is not None:
                context.log.info(
                    "launch form: " + ", ".join(f"{k.split('/')[-1]}={v}" for k, v in new.items())
                )
