"""A release estimated above ``BACKFILL_MAX_CORE_HOURS`` is refused before anything is
submitted, in one line naming the estimate, the cap and the flag (exit 2);
``--approve-cost --reason`` launches it, the approval recorded in its tags."""

from pathlib import Path

import pytest

from backfill_assets.core import tags
from backfill_assets.release.instance import get_instance
from backfill_assets_tests.helpers.processes import cli, operator_tree

pytestmark = pytest.mark.slow

RANGE = ["--from", "2026-11-20T00", "--to", "2026-11-20T01", "--layers", "raw", "--no-downstream"]


def test_a_release_over_the_cost_cap_needs_approval_with_a_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    env, settings = operator_tree(tmp_path, monkeypatch)
    env["BACKFILL_MAX_CORE_HOURS"] = "0.000001"  # the tree's two hours cost more than that
    refused = cli(env, "backfill", *RANGE, "--reason", "repair")
    assert refused.returncode == 2, refused.output[-3000:]
    assert "cost: about " in refused.stdout and "executor core-hour(s)" in refused.stdout
    line = refused.stderr.strip().splitlines()[-1]  # after the daemon's start, if any
    assert "refused: release 2026-11-20T00..2026-11-20T01 is estimated at " in line
    assert "BACKFILL_MAX_CORE_HOURS=1e-06" in line and "--approve-cost --reason" in line
    assert "nothing submitted" in line
    instance = get_instance(settings)
    assert instance.get_backfills() == []  # nothing submitted

    unexplained = cli(env, "backfill", *RANGE, "--approve-cost")
    assert unexplained.returncode == 2
    assert unexplained.stderr.strip().endswith(
        "--approve-cost needs --reason: why the cost is right"
    )

    approved = cli(
        env, "backfill", *RANGE, "--dry-run", "--no-wait", "--approve-cost", "--reason", "a day"
    )
    assert approved.returncode == 0, approved.output[-3000:]
    assert "cost approved above the cap of 1e-06 core-hour(s): a day" in approved.stdout
    (backfill,) = instance.get_backfills()
    assert float(backfill.tags[tags.APPROVE_COST]) > 1e-06
    assert backfill.tags[tags.REASON] == "a day"

    unlimited = {**env, "BACKFILL_MAX_CORE_HOURS": "0"}  # no cap: no approval needed
    later = ["--from", "2026-11-20T02", "--to", "2026-11-20T03", *RANGE[4:]]  # not held
    free = cli(unlimited, "backfill", *later, "--dry-run", "--no-wait", "--reason", "no cap")
    assert free.returncode == 0, free.output[-3000:]
    assert len(instance.get_backfills()) == 2
