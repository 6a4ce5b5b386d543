"""The launch form: typed run configuration whose answers become the run's tags."""

from __future__ import annotations

import dagster as dg
import pytest

from backfill_assets.core import plan, tags
from backfill_assets.core.warehouse import publisher
from backfill_assets.definitions import build_definitions
from backfill_assets.defs.resources import LAUNCH_FORM
from backfill_assets.defs.resources.launch_form import LaunchForm, Mode
from backfill_assets.release import keys

FIRST, LAST = "2026-11-20T00", "2026-11-20T01"


def form(**answers) -> dict:
    return {"resources": {LAUNCH_FORM: {"config": answers}}}


def test_defaults_set_no_tag_and_answers_are_the_cli_tags():
    assert LaunchForm().answers() == {}
    assert LaunchForm(
        reason=" INC: lost hour ",
        ticket="INC-7",
        requested_by="ops",
        mode=Mode.dry_run,
        allow_missing_hours=True,
        approve_changes=True,
    ).answers() == {
        tags.REASON: "INC: lost hour",
        tags.TICKET: "INC-7",
        tags.REQUESTED_BY: "ops",
        tags.MODE: "dry_run",
        tags.ALLOW_MISSING_HOURS: "true",
        tags.APPROVE_CHANGES: "true",
    }


def test_every_layer_and_the_publish_ask_for_the_form(settings_for, make_backups):
    """The launch dialog shows the config of the selection's resources: each layer's (through
    its IO manager) and the publish's include the form, with descriptions."""
    defs = build_definitions(settings_for(make_backups(hours=1)))
    job = defs.resolve_implicit_global_asset_job_def()
    for layer in plan.LAYERS:
        subset = job.get_subset(asset_selection=set(keys.layer_keys(defs, layer)))
        assert LAUNCH_FORM in subset.get_required_resource_defs(), layer
    publish = job.get_subset(asset_selection={keys.PUBLISH_KEY})
    assert LAUNCH_FORM in publish.get_required_resource_defs()
    fields = LaunchForm.to_config_schema().as_field().config_type.fields
    assert set(fields) == {
        "reason",
        "ticket",
        "requested_by",
        "mode",
        "allow_missing_hours",
        "approve_changes",
    }
    assert all(field.description for field in fields.values())


@pytest.mark.parametrize("asked_by", ["form", "tags"])
def test_a_dry_run_from_the_form_or_tags_records_its_answers_and_publishes_nothing(
    asked_by, spark, warehouse, instance, make_backups, settings_for
):
    """The form's answers and the same answers typed as tags (the form at its defaults,
    mode publish) are one dry run: nothing published, the verdict and report recorded."""
    defs = build_definitions(settings_for(make_backups(hours=2)))
    job = defs.resolve_implicit_global_asset_job_def()
    answers = {"reason": "lost hour", "ticket": "INC-7", "mode": "dry_run"}
    typed = {getattr(tags, k.upper()): v for k, v in answers.items()} if asked_by == "tags" else {}
    result = job.execute_in_process(
        instance=instance,
        asset_selection=[*keys.layer_keys(defs, "raw"), keys.PUBLISH_KEY],
        tags={
            "dagster/asset_partition_range_start": FIRST,
            "dagster/asset_partition_range_end": LAST,
            **typed,
        },
        run_config=form(**answers) if asked_by == "form" else form(),
    )
    assert result.success
    run = instance.get_run_by_id(result.run_id)
    assert run.tags[tags.REASON] == "lost hour" and run.tags[tags.MODE] == "dry_run"
    assert run.tags[tags.TICKET] == "INC-7"

    raw = keys.layer_keys(defs, "raw")[0]
    materialized = result.asset_materializations_for_node("raw_shadow")
    lineage = next(m for m in materialized if m.asset_key == raw).metadata
    assert lineage["reason"].value == "lost hour" and lineage["mode"].value == "dry_run"
    assert lineage["ticket"].value == "INC-7"

    # the publish materialized nothing, swapped nothing, and left the report and verdict
    assert not result.asset_materializations_for_node("release__publish")
    observed = [
        e.event_specific_data.asset_observation
        for e in result.all_events
        if e.event_type == dg.DagsterEventType.ASSET_OBSERVATION
    ]
    [note] = [o for o in observed if o.asset_key == keys.PUBLISH_KEY]
    verdict = note.metadata["verdict"].value
    assert "nothing was published" in verdict and "(publish)" not in verdict
    report = note.metadata["report"].value
    assert "| 2026-11-20T00 | raw.payloads | - |" in report and "would publish" in report
    assert not publisher.ledger(spark)  # no publish event at all


def test_a_form_that_contradicts_a_tag_is_refused_before_anything_runs(
    spark, warehouse, instance, make_backups, settings_for
):
    defs = build_definitions(settings_for(make_backups(hours=1)))
    job = defs.resolve_implicit_global_asset_job_def()
    with pytest.raises(dg.DagsterResourceFunctionError) as raised:
        job.execute_in_process(
            instance=instance,
            asset_selection=keys.layer_keys(defs, "raw"),
            tags={tags.REASON: "a", "dagster/partition": FIRST},
            run_config=form(reason="b"),
        )
    assert "contradicts the run's tags" in str(raised.value.__cause__)
    assert "reason: tag 'a', form 'b'" in str(raised.value.__cause__)
    assert not spark.catalog.databaseExists("shadow")  # nothing ran, nothing was written
