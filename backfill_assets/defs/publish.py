"""The release's Dagster definitions: the published tables, the publish step, rollback.

- The **published tables** (``raw/raw_payloads`` ...) are asset specs that no run computes:
  they change only when a release is published or rolled back, and each change is
  recorded as a materialization of the (table, hour) with the publish metadata.
- **``release/publish``** publishes one release: in a backfill, the backfill's own release
  after every layer's shadows and checks ran; alone (UI or ``backfill-assets publish``),
  the release named in its config or tag, or the newest checked release of a range.
- **``rollback_release``** (``rollback.py``) rolls one release back in every layer.
"""

import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence

import dagster as dg
from py4j.protocol import Py4JJavaError
from pydantic import Field
from pyspark.errors import PySparkException

from backfill_assets.core import tags
from backfill_assets.core.errors import cause_line
from backfill_assets.core.hours import InvalidHourError, hour_range, parse_hour
from backfill_assets.core.names import LAYERS, Layer
from backfill_assets.core.reporting.verdicts import held_back_verdict
from backfill_assets.core.tags import PUBLISH_POOL
from backfill_assets.core.warehouse import database, erasure, gates, publisher
from backfill_assets.defs.checks.published import release_gate_evaluations
from backfill_assets.defs.layers import aggregated, raw, transformed
from backfill_assets.defs.layers.common import json_metadata, refuse, run_lineage
from backfill_assets.defs.partitions import RUN_POLICY, hourly_partitions
from backfill_assets.defs.resources.launch_form import LaunchForm
from backfill_assets.defs.resources.spark import usage_metadata
from backfill_assets.defs.resources.warehouse import Warehouse
from backfill_assets.release import progress
from backfill_assets.release.instance import run_tags
from backfill_assets.release.keys import table_key
from backfill_assets.release.report import build_report

PUBLISH = dg.AssetKey(["release", "publish"])
GROUP = "release"

DESCRIPTIONS = {
    "raw.payloads": "Published raw payloads: a faithful typed copy of the valid backup lines "
    "of each received hour.",
    "raw.quarantine": "Published quarantine: the malformed lines and unreadable files of each "
    "received hour, with the reason.",
    "transformed.payloads": "Published transformed payloads: the distinct payloads of each "
    "received hour with page_url normalized.",
    "aggregated.sessions": "Published sessions: every session starting in the hour, with "
    "entry/exit URL, device, counts and a may_be_truncated flag.",
    "aggregated.client_hourly": "Published per-client metrics of the session hour: sessions, "
    "payloads, pageviews, bounces, mean/p95 duration.",
}
RECEIVED_SHADOWS = [raw.SHADOW_PAYLOADS, raw.SHADOW_QUARANTINE, transformed.SHADOW_PAYLOADS]
SESSION_SHADOWS = [aggregated.SHADOW_SESSIONS, aggregated.SHADOW_CLIENT_HOURLY]
SHADOWS = [*RECEIVED_SHADOWS, *SESSION_SHADOWS]


def publish_deps() -> list[dg.AssetDep]:
    """The publish step's parents, hour for hour as the session layer reads them: the
    received-hour shadows through the session window (a release rebuilding received hours
    T1..T2 publishes the session hours their windows touch), the session shadows hour for
    hour. So Dagster derives the same hours for the publish step as for the session layer
    (in the UI's launch dialog too) and runs it in that layer's run, after its checks."""
    window = aggregated.session_window_mapping()
    return [
        *(dg.AssetDep(key, partition_mapping=window) for key in RECEIVED_SHADOWS),
        *(dg.AssetDep(key) for key in SESSION_SHADOWS),
    ]


published_tables = [
    dg.AssetSpec(
        table_key(published),
        description=DESCRIPTIONS[published],
        group_name=layer.name,
        partitions_def=hourly_partitions,
        deps=[table_key(shadow)],
        kinds={"spark", "parquet"},
        metadata={"published_by": PUBLISH.to_user_string()},
    )
    for layer in LAYERS.values()
    for shadow, published in layer.pairs
]


class PublishConfig(dg.Config):
    """What to publish when ``release/publish`` runs on its own (in a backfill: the
    backfill's own release, all its layers)."""

    release_id: str = Field(
        default="", description="the release (backfill id) to publish; empty: see first_hour"
    )
    first_hour: str = Field(
        default="", description="with last_hour: publish the newest release of this range"
    )
    last_hour: str = Field(default="", description="last hour (YYYY-MM-DDTHH) of the range")
    layers: list[str] = Field(
        default_factory=list, description="layers to publish (default: all the release built)"
    )
    approve: bool = Field(
        default=False,
        description="approve the change gates' findings of this release (the hours they hold "
        "waiting for approval) and publish those hours; needs approval_reason",
    )
    approve_hours: list[str] = Field(
        default_factory=list,
        description="with approve: only these hours (YYYY-MM-DDTHH; default: every held hour)",
    )
    approval_reason: str = Field(
        default="", description="with approve: why the change is right (recorded)"
    )
    approved_by: str = Field(
        default="", description="with approve: who approves (default: the run's requested_by)"
    )


def resolve_release(spark, config: PublishConfig, run_tags: Mapping[str, str], run_id: str) -> str:
    """The release a publish run publishes (config, then tags, then the newest of a range)."""
    if config.release_id:
        tags.validate_release_id(config.release_id)
        return config.release_id
    if config.first_hour or config.last_hour:
        hours = hour_range(config.first_hour, config.last_hour or config.first_hour)
        layers = selected_layers(config.layers)
        found = publisher.releases_of(spark, [layer.checked_table for layer in layers], hours)
        covering = [r for r in found if set(hours) <= set(r["hours"])]
        if not covering:
            raise dg.Failure(
                description=f"no release rebuilt every hour of {hours[0]}..{hours[-1]} "
                f"({', '.join(layer.name for layer in layers)}): run a dry run of that "
                f"range first (backfill-assets backfill --dry-run)",
                allow_retries=False,
            )
        return covering[0]["release_id"]
    return tags.release_id(run_tags, run_id)


def approval_of(config: PublishConfig, run_tags: Mapping[str, str]) -> publisher.Approval | None:
    """The approval this publish gives to change-gate findings: from the config (``approve``);
    for a whole release requested by an erasure (the request approves the removal); or given
    at launch with tag ``backfill_assets/approve_changes``."""
    who = config.approved_by or tags.requested_by(run_tags) or ""
    if config.approve:
        if not config.approval_reason.strip():
            raise dg.Failure(
                description="approve needs approval_reason: why the change is right",
                allow_retries=False,
            )
        hours = set()
        for hour in config.approve_hours:
            try:
                parse_hour(hour)
            except InvalidHourError as exc:
                raise dg.Failure(description=f"approve_hours: {exc}", allow_retries=False) from None
            hours.add(hour)
        return publisher.Approval(
            who or "unknown",
            config.approval_reason.strip(),
            frozenset(hours) or None,
            run_tags.get(tags.TICKET),
        )
    if run_tags.get(tags.ERASURE):  # the erasure request is the approval of its removal
        return publisher.Approval(
            who or "erasure",
            f"erasure {run_tags[tags.ERASURE]}: removal of an erased user's data",
            None,
            run_tags.get(tags.TICKET),
        )
    if tags.approves_changes(run_tags):
        reason = run_tags.get(tags.REASON) or "approved at launch"
        return publisher.Approval(
            who or "unknown", f"approved at launch: {reason}", None, run_tags.get(tags.TICKET)
        )
    return None


def selected_layers(names: Sequence[str]) -> list[Layer]:
    unknown = [n for n in names if n not in LAYERS]
    if unknown:
        raise dg.Failure(
            description=f"unknown layer(s) {', '.join(unknown)}; choose from {', '.join(LAYERS)}",
            allow_retries=False,
        )
    return [layer for name, layer in LAYERS.items() if not names or name in names]


def partition_events(
    plan: publisher.ReleasePlan, lineage: Mapping[str, object]
) -> list[dg.AssetMaterialization]:
    """One materialization per (published table, hour) that the release published or left
    unchanged, with the per-hour facts the sensor and the UI read."""
    events = []
    for outcome in plan.outcomes:
        if outcome.status == publisher.HELD_BACK:
            continue
        for table, info in outcome.tables.items():
            events.append(
                dg.AssetMaterialization(
                    asset_key=table_key(table),
                    partition=outcome.hour,
                    metadata={
                        **lineage,
                        "status": outcome.status,
                        "release_id": plan.release_id,
                        "shadow_version": outcome.version or "",
                        publisher.PROVISIONAL: outcome.provisional_note,
                        **{k: "" if v is None else str(v) for k, v in info.items()},
                    },
                )
            )
    return events


def _dry_run(
    context: dg.AssetExecutionContext, layers: Sequence[Layer], release: str
) -> dg.AssetObservation:
    """A dry run publishes nothing: the release's report as an observation."""
    verdict = (
        f"dry run: release {release} was built and checked, nothing was published. "
        f"Publish it with "
        f"backfill-assets publish --backfill {release}, or launch release/publish with "
        f"release_id: {release}"
    )
    context.log.info(verdict)
    return dg.AssetObservation(
        asset_key=PUBLISH,
        metadata={
            "release_id": release,
            "mode": "dry_run",
            "verdict": verdict,
            **release_report(context, layers, release, {}),
        },
    )


def _publish(
    context: dg.AssetExecutionContext,
    config: PublishConfig,
    warehouse: Warehouse,
    run_tags: Mapping[str, str],
    release: str,
    layers: Sequence[Layer],
) -> publisher.ReleasePlan:
    """The ledger transaction (``publisher.publish_release``); a Spark or file-system error
    is a ``dg.Failure`` that names the release and its cause. Raises ``PublishError`` when
    the release is refused as a whole."""
    try:
        return publisher.publish_release(
            warehouse.spark,
            warehouse.warehouse_dir,
            release,
            layers,
            run_id=context.run_id,
            manifest=tags.run_manifest(run_tags),
            limits=gates.Limits.from_env(),
            approve=approval_of(config, run_tags),
        )
    except database.LedgerUnavailable as exc:  # the ledger itself: nothing to retry
        raise dg.Failure(
            description=f"release {release} not published: {exc}", allow_retries=False
        ) from None
    except (Py4JJavaError, PySparkException, OSError) as exc:  # Spark or the file system
        context.log.error(f"publishing release {release} failed: {exc}")
        raise dg.Failure(
            description=f"publishing release {release} failed: "
            f"{cause_line(exc, warehouse.warehouse_dir)}; what is published stays one release "
            f"per table (an unfinished transaction is settled by the next publish or "
            f"backfill-assets verify): free the cause, then publish again",
        ) from exc


def check_ledger(warehouse_dir: str) -> None:
    """The ledger checked now (``database.check``), not only when this process first
    opened it: a missing, damaged or rolled-back ledger fails the step, nothing published."""
    try:
        database.check(warehouse_dir)
    except database.LedgerUnavailable as exc:
        raise dg.Failure(description=f"nothing published: {exc}", allow_retries=False) from None


def _log_outcomes(
    context: dg.AssetExecutionContext,
    config: PublishConfig,
    release: str,
    plan: publisher.ReleasePlan,
    layers: Sequence[Layer],
) -> tuple[dict, dict[str, str], dict[str, list[str]]]:
    """Each layer's counts, the provisional hours, the approvals and the held-back hours,
    logged; returns (counts per layer, provisional notes, held-back reasons)."""
    counts = {
        layer.name: {
            status: sum(o.status == status for o in plan.by_layer(layer.name))
            for status in (publisher.PUBLISHED, publisher.UNCHANGED, publisher.HELD_BACK)
        }
        for layer in layers
    }
    for layer, numbers in counts.items():
        context.log.info(
            f"release {release} {layer}: {numbers[publisher.PUBLISHED]} hour(s) published, "
            f"{numbers[publisher.UNCHANGED]} unchanged, {numbers[publisher.HELD_BACK]} held back"
        )
    provisional = {
        f"{o.layer} {o.hour}": o.provisional_note
        for o in plan.outcomes
        if o.provisional and o.status != publisher.HELD_BACK
    }
    for key, note in sorted(provisional.items()):
        context.log.info(f"{key} published {note}")
    for a in plan.approvals:
        context.log.info(
            f"{a['layer']} {a['hour']}: change approved by {a['approved_by']} "
            f"({a['reason']}): {a['gate']}"
        )
    if config.approve and not plan.approvals:
        context.log.warning(f"release {release}: no hour of it was waiting for approval")
    held = {f"{o.layer} {o.hour}": o.reasons for o in plan.held}
    for key, reasons in sorted(held.items()):
        context.log.warning(f"{key} held back: {'; '.join(reasons)}")
    return counts, provisional, held


def _publish_asset(fn: Callable) -> dg.AssetsDefinition:
    """``release/publish`` as an asset (``backfill_policy`` on ``@asset`` is beta in dagster
    1.13: the warning is silenced here, as for the layers' multi-assets, which have none)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.BetaWarning)
        return dg.asset(
            key=PUBLISH,
            deps=publish_deps(),
            group_name=GROUP,
            pool=PUBLISH_POOL,
            kinds={"spark"},
            description="The release's publication: one ledger transaction swapping every "
            "checked candidate of the release into the published tables (held-back hours "
            "keep theirs).",
            output_required=False,  # a dry run, or a refused publish, materializes nothing
            # Hourly like the layers, one run per range: in a backfill Dagster runs it in
            # the run of the release's last layer (the same hours, ``publish_deps``), after
            # that layer's checks, when the release is one chunk of that layer; a longer
            # release's chunks are each followed by a short publish run of their own
            # (Dagster joins a child over a window mapping only when its parent's whole
            # target is requested in the same iteration).
            partitions_def=hourly_partitions,
            backfill_policy=RUN_POLICY,
        )(fn)


@_publish_asset
def publish_release(
    context: dg.AssetExecutionContext,
    config: PublishConfig,
    warehouse: Warehouse,
    launch_form: LaunchForm,  # the launch dialog's form: its answers become the run's tags
) -> Iterator[
    dg.AssetMaterialization | dg.AssetCheckEvaluation | dg.AssetObservation | dg.MaterializeResult
]:
    """Swap the release's checked candidates into the published tables in one transaction.

    A generator: each (table, hour) materialization is stored before the release gate's
    evaluation of that hour, which targets it. In a dry run (``launch_form`` mode or tag
    ``backfill_assets/mode: dry_run``) it publishes nothing and records the release's
    report as an observation."""
    started = time.monotonic()
    spark = warehouse.spark
    check_ledger(warehouse.warehouse_dir)
    tags_now = run_tags(context.instance, context.run_id)  # with the form's answers
    release = resolve_release(spark, config, tags_now, context.run_id)
    layers = selected_layers(config.layers)
    waiting = None if config.release_id or config.first_hour else _waiting(context, spark, release)
    if waiting:  # a chunk of a long release: the run that builds its last hours publishes
        context.log.info(waiting)
        yield dg.MaterializeResult(metadata={"release_id": release, "deferred": waiting})
        return
    if tags_now.get(tags.MODE) == "dry_run":
        yield _dry_run(context, layers, release)
        return
    try:
        plan = _publish(context, config, warehouse, tags_now, release, layers)
    except publisher.PublishError as exc:
        hint = (
            ""
            if config.release_id or config.first_hour or tags.DAGSTER_BACKFILL in tags_now
            else " (run alone, release/publish needs config release_id, or first_hour and "
            "last_hour, naming the dry-run release to publish)"
        )
        # refused as a whole, an expected outcome: nothing was published
        verdict = f"release {release} refused: {exc}{hint}"
        yield from refuse(context, verdict, {"release_id": release})
        return
    lineage = {**run_lineage(context, "release"), "backfill_id": release}
    yield from partition_events(plan, lineage)
    yield from release_gate_evaluations(context.instance, plan, layers)
    counts, provisional, held = _log_outcomes(context, config, release, plan, layers)
    waiting = sorted(f"{o.layer} {o.hour}" for o in plan.held if o.awaiting_approval)
    purge = purge_erased(context, spark, warehouse.warehouse_dir, release)
    metadata = {
        "release_id": release,
        "txn_id": next(
            (i["txn_id"] for o in plan.outcomes for i in o.tables.values() if i.get("txn_id")),
            "",
        ),
        "layers": json_metadata(counts),
        "held_back": json_metadata(held),
        "provisional": json_metadata(provisional),
        "awaiting_approval": json_metadata(waiting),
        "approvals": json_metadata(plan.approvals),
        **purge,
        "seconds": round(time.monotonic() - started, 2),
        **usage_metadata(warehouse.pyspark),
    }
    if held:
        # An expected outcome, not a crash: the step ends with the verdict (run tag, warning,
        # metadata, red release_gate evaluations) and no stack trace; the CLI and the run
        # summaries count the run as not successful (outcomes.summarize_run).
        verdict = held_back_verdict(release, held, waiting)
        context.log.warning(verdict)
        context.instance.add_run_tags(context.run_id, {tags.HELD_BACK: str(len(held))})
        metadata["verdict"] = verdict
    metadata.update(release_report(context, layers, release, held))
    yield dg.MaterializeResult(metadata=metadata)


def _waiting(context: dg.AssetExecutionContext, spark, release: str) -> str | None:
    if context.instance.get_backfill(release) is None:  # a release that is no backfill
        return None
    try:
        graph = context.repository_def.asset_graph
    except Exception:  # run outside a code location (execute_in_process): never in chunks
        return None
    return progress.waiting_line(context.instance, graph, spark, release, list(LAYERS.values()))


def release_report(
    context: dg.AssetExecutionContext,
    layers: Sequence[Layer],
    release: str,
    held: Mapping[str, list[str]],
) -> dict[str, dg.MetadataValue]:
    """The release's report (``backfill-assets report``) as Markdown metadata, shown on the
    publish's materialization in the UI. The ledger transaction is committed by now: a
    report that cannot be built is a warning, never a failed publish."""

    try:
        report = build_report(context.instance, layers, backfill_id=release, held=held)
        return {"report": dg.MetadataValue.md(report.markdown(chart=None))}
    except Exception as exc:  # the publish itself succeeded
        context.log.warning(
            f"release {release}: no report attached ({exc}); run backfill-assets report "
            f"--backfill {release}"
        )
        return {}


def purge_erased(context: dg.AssetExecutionContext, spark, warehouse_dir: str, release: str):
    """After an erasure's release is published: purge every older version holding an erased
    user (``erasure.purge``); the metadata to attach (none for other releases)."""
    requested = erasure.releases_requested(spark, release)
    if not requested:
        return {}
    deletions, still = erasure.purge(
        spark, warehouse_dir, list(LAYERS.values()), run_id=context.run_id, salt_=erasure.salt()
    )
    for d in deletions:
        context.log.info(
            f"purged {d.table_name} hour={d.hour} version={d.version} "
            f"(release {d.release_id or '-'}, {d.row_count:,} rows): {d.reason}"
        )
    context.log.info(
        f"erasure {', '.join(sorted({r['erasure_id'] for r in requested}))}: "
        f"{len(deletions)} older version(s) purged"
    )
    for hour in still:
        context.log.warning(
            f"{hour} is still published with an erased user's rows (held back): rebuild it"
        )
    return {
        "erasures": json_metadata(sorted({r["erasure_id"] for r in requested})),
        "purged_versions": len(deletions),
        "still_published_with_erased_users": json_metadata(still),
    }
