"""What the code location names: the ``Layer`` spec and the metadata keys of its events.

Near the bottom of the engine: it imports only the hours and the session window
(``core.hours``, ``core.windows``), so the engine, the release, the Dagster wiring and the
commands all refer to the same names (pyproject.toml's import contracts hold it so).
"""

from __future__ import annotations

from dataclasses import dataclass

from backfill_assets.core.hours import hours_between, shift_hour
from backfill_assets.core.windows import LOOKAHEAD_HOURS, LOOKBACK_HOURS


@dataclass(frozen=True)
class Layer:
    """The tables a layer publishes together, the checks that gate them, what it reads."""

    name: str
    checked_table: str  # the shadow table whose checks gate the layer
    pairs: tuple[tuple[str, str], ...]  # (shadow table, published table)
    checks: tuple[str, ...]
    code_version: str
    upstream: str | None = None  # the layer whose published table this layer reads
    window: tuple[int, int] = (0, 0)  # upstream hours [H - back, H + ahead] an hour reads

    @property
    def tables(self) -> list[str]:
        return [published for _, published in self.pairs]

    def reads(self, hour: str) -> list[str]:
        """The upstream hours partition ``hour`` of this layer is built from."""
        back, ahead = self.window
        return hours_between(shift_hour(hour, -back), shift_hour(hour, ahead))


# Per-partition lineage of a raw shadow materialization: what that hour read.
MANIFEST_RECORDS = "manifest_records"
RECEIVED_OUTSIDE = "received_outside_this_hour"
ERASED_LINES = "erased_lines"  # lines of erased users left out (counted, not quarantined)
HOUR_INPUT_FILES = "hour_input_files"
INPUT_FILES_LIST = "input_files_list"  # this hour's files, at most MAX_LISTED_FILES
LINES_READ = "lines_read"  # of a file in INPUT_FILES_LIST: lines read (valid, rejected, erased)
MAX_LISTED_FILES = 500
HOUR_BACKUP_PROBLEMS = "hour_backup_problems"  # this hour's problems, at most MAX_LISTED_PROBLEMS
MAX_LISTED_PROBLEMS = 200
ROWS = "rows"  # of a shadow materialization: the rows written (per hour)
# Run-level metadata (the same on every hour's event, so a count, never a list).
BACKUP_PROBLEMS = "backup_problems"


# The publishable layers, in dependency order. Check names are constants: the publisher gates
# on them, tests and the UI refer to them (``layers/*.py`` name each one).
RAW = Layer(
    name="raw",
    checked_table="shadow.raw_payloads",
    pairs=(("shadow.raw_payloads", "raw.payloads"), ("shadow.raw_quarantine", "raw.quarantine")),
    checks=("raw_row_rules", "raw_manifest_reconciliation"),
    code_version="raw-1",
)
TRANSFORMED = Layer(
    name="transformed",
    checked_table="shadow.transformed_payloads",
    pairs=(("shadow.transformed_payloads", "transformed.payloads"),),
    checks=("transformed_row_rules", "transformed_raw_reconciliation"),
    code_version="transformed-1",
    upstream="raw",
)
AGGREGATED = Layer(
    name="aggregated",
    checked_table="shadow.sessions",
    pairs=(
        ("shadow.sessions", "aggregated.sessions"),
        ("shadow.client_hourly", "aggregated.client_hourly"),
    ),
    checks=(
        "sessions_row_rules",
        "sessions_end_not_before_start",
        "sessions_duration_is_end_minus_start",
        "sessions_start_in_partition_hour",
        "sessions_unique_id",
        "client_hourly_matches_sessions",
    ),
    code_version="aggregated-1",
    upstream="transformed",
    window=(LOOKBACK_HOURS, LOOKAHEAD_HOURS),
)
LAYERS: dict[str, Layer] = {layer.name: layer for layer in (RAW, TRANSFORMED, AGGREGATED)}
# Layers whose partitions are received hours (the damaged hours of a backfill).
RECEIVED_HOUR_LAYERS = (RAW.name, TRANSFORMED.name)

# Resource keys of the code location (``defs.resources.build_resources``).
PYSPARK = "pyspark"
SHADOW_IO_MANAGER = "shadow_io_manager"
BACKUPS = "backups"
WAREHOUSE = "warehouse"
RELEASES = "releases"
LAUNCH_FORM = "launch_form"
