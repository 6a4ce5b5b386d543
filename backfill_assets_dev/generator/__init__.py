"""Synthetic backup trees for tests, demos and load runs, with their ground truth.

``generate_backups`` writes ``<root>/raw/...`` exactly as ``shared/backup-format.md``
describes (plus ``_held_back/`` and ``_truth/``); ``land_held_back`` lands held-back
folders; ``sessionize`` and the ``read_truth_*`` readers give the expected answers.
"""

from backfill_assets_dev.generator.generate import (
    HELD_BACK_DIR,
    MARKER_NAME,
    RAW_DIR,
    TRUTH_DIR,
    BackupTreeExistsError,
    GenerationSummary,
    GeneratorError,
    generate_backups,
    is_generated_tree,
    land_held_back,
    parse_hold_back,
)
from backfill_assets_dev.generator.truth import (
    SESSION_GAP_MS,
    read_truth_folders,
    read_truth_payloads,
    read_truth_sessions,
    read_truth_summary,
    sessionize,
)

__all__ = [
    "HELD_BACK_DIR",
    "MARKER_NAME",
    "RAW_DIR",
    "SESSION_GAP_MS",
    "TRUTH_DIR",
    "BackupTreeExistsError",
    "GenerationSummary",
    "GeneratorError",
    "generate_backups",
    "is_generated_tree",
    "land_held_back",
    "parse_hold_back",
    "read_truth_folders",
    "read_truth_payloads",
    "read_truth_sessions",
    "read_truth_summary",
    "sessionize",
]
