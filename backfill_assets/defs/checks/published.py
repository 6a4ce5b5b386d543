"""The release gate on the published tables: each hour's verdict where operators look.

``release/publish`` records, for every (published table, hour) of a release, one
evaluation of ``release_gate``: passed when the hour's candidate passed its layer's
checks (and change gates) and went live or was already live, failed with the reasons when
it was held back (the previous version stays published). Launched alone from the UI, the
check re-verifies from the ledger that the version live at each hour passed every check
of its layer.
"""

from collections.abc import Iterator, Sequence

import dagster as dg

from backfill_assets.core.names import LAYERS, Layer
from backfill_assets.core.warehouse import publisher
from backfill_assets.defs.checks import common
from backfill_assets.defs.resources.warehouse import Warehouse
from backfill_assets.release.keys import table_key

RELEASE_GATE = "release_gate"
DESCRIPTION = (
    "Per hour: the release's candidate passed its layer's checks and went live, or was "
    "held back (why). Launched alone: the live version passed every check (ledger)."
)


def release_gate_evaluations(
    instance: dg.DagsterInstance, plan: publisher.ReleasePlan, layers: Sequence[Layer]
) -> Iterator[dg.AssetCheckEvaluation]:
    """One evaluation per (published table, hour) of a published release (after its
    materializations: each targets its partition's newest one)."""
    tables = {layer.name: layer.tables for layer in layers}
    hours = sorted({o.hour for o in plan.outcomes})
    targets = {
        table: common.latest_materializations(instance, table_key(table), hours)
        for names in tables.values()
        for table in names
    }
    for outcome in plan.outcomes:
        held = outcome.status == publisher.HELD_BACK
        description = (
            f"held back from release {plan.release_id}: {'; '.join(outcome.reasons)} "
            f"(the previous version stays published)"
            if held
            else f"release {plan.release_id}: {outcome.status}, version "
            f"{(outcome.version or '')[:8]} passed its checks"
        )
        for table in tables.get(outcome.layer, ()):
            yield common.evaluation(
                SPECS[table_key(table)],
                outcome.hour,
                not held,
                description,
                {
                    "release_id": plan.release_id,
                    "status": outcome.status,
                    "shadow_version": outcome.version or "",
                    "awaiting_approval": outcome.awaiting_approval,
                },
                dg.AssetCheckSeverity.ERROR,
                target=targets[table].get(outcome.hour),
            )


SPECS = {
    table_key(table): common.check_spec(RELEASE_GATE, table_key(table), DESCRIPTION, blocking=False)
    for layer in LAYERS.values()
    for table in layer.tables
}


@dg.multi_asset_check(name="published_checks", specs=list(SPECS.values()), can_subset=True)
def published_checks(context: dg.AssetCheckExecutionContext, warehouse: Warehouse):
    """Re-verify from the ledger that each hour's live version passed its layer's checks."""
    hours = common.run_hours(context)
    selected = {key.asset_key for key in context.selected_asset_check_keys}
    specs = {spec.asset_key: spec for spec in context.check_specs}
    outputs = common.check_outputs(context)
    for layer in LAYERS.values():
        wanted = [t for t in layer.tables if table_key(t) in selected]
        if not wanted:
            continue
        verdicts = (
            publisher.published_versions_checked(warehouse.spark, layer, hours) if hours else {}
        )
        for table in wanted:
            spec = specs[table_key(table)]
            targets = common.latest_materializations(context.instance, spec.asset_key, hours)
            for hour in hours or [None]:
                verdict = verdicts.get(table, {}).get(hour)
                if verdict is None:
                    why = "nothing published for the hour" if hour else "choose a range of hours"
                    yield common.unevaluated(spec, hour, why, targets.get(hour))
                else:
                    yield common.evaluation(
                        spec,
                        hour,
                        verdict[0],
                        verdict[1],
                        {},
                        dg.AssetCheckSeverity.ERROR,
                        target=targets.get(hour),
                    )
            yield dg.Output(None, output_name=outputs[spec.key])
