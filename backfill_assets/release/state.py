"""What reconciliation compares: the backup tree's hours, the published state, runs in flight.

The published state has two readers that give the same ``findings.Published``:

- ``published_from_instance`` (the source of truth of the sensor and, by default, of
  ``backfill-assets reconcile``): Dagster's own records, no Spark. The latest
  materialization of each published table per partition carries the per-hour row count,
  shadow version and code version (``defs.layers.common.publish_asset``); the shadow
  materialization of the backup-reading layer's version carries the files it read
  (``input_files_list``), which tells which client's manifest appeared or changed since.
- ``published_from_ledger`` (``reconcile --source ledger``): the publication ledger and
  ``audit.shadow_partitions``, one small Spark query; it also sees rollbacks made with the
  CLI, but not which files a version read (then only counts are compared per hour).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import dagster as dg

from backfill_assets.core.backups.inventory import backup_bounds, take_inventory
from backfill_assets.core.backups.store import BackupStore
from backfill_assets.core.hours import backup_hour_path, hour_range
from backfill_assets.core.hours import shift_hour as _shift
from backfill_assets.core.names import ERASED_LINES, HOUR_INPUT_FILES, INPUT_FILES_LIST, Layer
from backfill_assets.core.reconcile.findings import Published, ReconcileConfig, Window, find
from backfill_assets.core.reconcile.requests import Reconciliation, plan
from backfill_assets.core.warehouse import audit
from backfill_assets.core.warehouse.publisher import COMMIT, PROVISIONAL
from backfill_assets.release.keys import table_key

if TYPE_CHECKING:
    pass

_READ_FILE = re.compile(r"raw/(date=[^/]+/hour=[0-9]{2})/client_id=([0-9]+)/([^/]+)")  # fullmatch
PAGE = 500
UNPUBLISHED = "unpublished"  # status of a rollback that removed the partition


# ------------------------------------------------------------------------- backup tree


def reconcile_window(
    store: BackupStore,
    config: ReconcileConfig,
    first: str | None = None,
    last: str | None = None,
) -> Window | None:
    """The hours to compare: ``first..last`` if given, else the newest
    ``config.window_hours`` hours of the backup tree (None: empty tree, nothing given)."""
    bounds = backup_bounds(store)
    if bounds is None and not (first and last):
        return None
    earliest, newest = bounds or (first, last)
    last = last or newest
    first = first or max(earliest, _shift(last, -(config.window_hours - 1)))
    return Window(tuple(hour_range(first, last)), earliest, newest)


# --------------------------------------------------------------- published: Dagster records


def metadata_value(metadata: Mapping[str, Any], key: str) -> Any:
    """The plain value of a metadata entry (None if absent)."""
    entry = metadata.get(key)
    return getattr(entry, "value", entry)


def text_or_none(value: Any) -> str | None:
    """A metadata text, None for missing, empty or the string \"None\"."""
    return None if value in (None, "", "None") else str(value)


def partition_facts(metadata: Mapping[str, Any], hour: str) -> dict[str, Any]:
    """Per-hour facts of a publish materialization, whichever way it was recorded."""
    published = metadata_value(metadata, "published")
    if isinstance(published, Mapping):  # one materialization for the range, facts by hour
        info = dict(published.get(hour) or {})
    else:  # one materialization per published hour (some hours were held back)
        info = {
            key: metadata_value(metadata, key)
            for key in ("status", "shadow_version", "row_count", "code_version", PROVISIONAL)
        }
    rows = text_or_none(info.get("row_count"))
    return {
        "status": text_or_none(info.get("status")) or "published",
        "version": text_or_none(info.get("shadow_version")),
        "rows": int(rows) if rows is not None else 0,
        "code_version": text_or_none(info.get("code_version")),
        PROVISIONAL: text_or_none(info.get(PROVISIONAL)) or "",
    }


def _manifest(metadata: Mapping[str, Any]) -> dict[str, str]:
    return {
        key: str(metadata_value(metadata, key) or "")
        for key in ("run_id", "mode", "reason", "requested_by", "ticket", "backfill_id")
        if key in metadata
    }


def latest_by_partition(
    instance: dg.DagsterInstance,
    key: dg.AssetKey,
    hours: Sequence[str],
    before: float | None = None,
) -> dict[str, dict[str, Any]]:
    """Newest materialization of ``key`` per hour (before epoch ``before`` if given): its
    ``partition_facts``, run id, manifest, and the time its version was published (an
    ``unchanged`` re-publish keeps the time of the publish that put the version there)."""
    found: dict[str, dict[str, Any]] = {}
    pending = set(hours)
    cursor = None
    while pending:
        page = instance.fetch_materializations(
            dg.AssetRecordsFilter(
                asset_key=key, asset_partitions=sorted(pending), before_timestamp=before
            ),
            limit=PAGE,
            cursor=cursor,
        )
        for record in page.records:
            hour = record.partition_key
            if hour not in pending or record.asset_materialization is None:
                continue
            metadata = record.asset_materialization.metadata
            info = partition_facts(metadata, hour)
            state = found.get(hour)
            if state is None and info["status"] == UNPUBLISHED:
                pending.discard(hour)  # rolled back to nothing: not published now
                continue
            if state is None:
                lineage_code = text_or_none(metadata_value(metadata, "code_version"))
                code = info["code_version"] or lineage_code
                state = found[hour] = {
                    **info,
                    "code_version": code,
                    "published_at": None,
                    "seen_at": record.timestamp,
                    "run_id": record.run_id,
                    "manifest": _manifest(metadata),
                }
            if info["version"] != state["version"]:
                # An older version: the current one was put in place by the oldest record
                # of it seen so far (all of them were "unchanged" re-publishes).
                state["published_at"] = state["seen_at"]
                pending.discard(hour)
                continue
            state["seen_at"] = record.timestamp
            if info["status"] != "unchanged":
                state["published_at"] = record.timestamp
                pending.discard(hour)
        if not page.has_more:
            break
        cursor = page.cursor
    for state in found.values():
        if state["published_at"] is None:
            state["published_at"] = state["seen_at"]
    return found


def _read_files(
    instance: dg.DagsterInstance,
    shadow: dg.AssetKey,
    version: str,
    hour: str,
) -> tuple[dict[str, dict[int, dict[str, str]]] | None, str | None, int]:
    """The files shadow version ``version`` read for ``hour``, by hour and client (None if
    unknown), the code version it was written with, and the lines it left out as erased,
    from that hour's shadow materialization (each hour's event lists that hour's files)."""
    cursor = None
    while True:
        page = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=shadow, asset_partitions=[hour]),
            limit=20,
            cursor=cursor,
        )
        for record in page.records:
            if record.run_id != version or record.asset_materialization is None:
                continue
            metadata = record.asset_materialization.metadata
            code = text_or_none(metadata_value(metadata, "code_version"))
            erased = int(metadata_value(metadata, ERASED_LINES) or 0)
            listed = metadata_value(metadata, INPUT_FILES_LIST)
            total = metadata_value(metadata, HOUR_INPUT_FILES)
            if not isinstance(listed, list) or total is None or len(listed) != int(total):
                return None, code, erased  # not recorded, or cut short: compare counts only
            read: dict[str, dict[int, dict[str, str]]] = {}
            for entry in listed:
                match = _READ_FILE.fullmatch(str(entry.get("file", "")))
                if match:
                    files = read.setdefault(match.group(1), {}).setdefault(int(match.group(2)), {})
                    files[match.group(3)] = str(entry.get("sha256"))
            return read, code, erased
        if not page.has_more:
            return None, None, 0
        cursor = page.cursor


def published_from_instance(
    instance: dg.DagsterInstance,
    layers: Sequence[Layer],
    hours: Sequence[str],
) -> dict[str, dict[str, Published]]:
    """Published partitions of ``layers`` in ``hours`` from Dagster's records (no Spark)."""
    result: dict[str, dict[str, Published]] = {}
    for index, layer in enumerate(layers):
        tables = [published for _, published in layer.pairs]
        latest = {table: latest_by_partition(instance, table_key(table), hours) for table in tables}
        main = latest[tables[0]]
        read_by_hour: dict[str, tuple[dict | None, str | None, int]] = {}
        if index == 0:  # the backup-reading layer: which files did each hour's version read?
            shadow = table_key(layer.checked_table)
            for hour, state in sorted(main.items()):
                if state["version"]:
                    read_by_hour[hour] = _read_files(instance, shadow, state["version"], hour)
        partitions = {}
        for hour, state in main.items():
            read, code, erased = read_by_hour.get(hour, (None, None, 0))
            per_hour = read.get(backup_hour_path(hour), {}) if read is not None else None
            partitions[hour] = Published(
                layer=layer.name,
                hour=hour,
                rows={t: latest[t][hour]["rows"] for t in tables if hour in latest[t]},
                version=state["version"],
                code_version=state["code_version"] or code,
                published_at=state["published_at"],
                run_id=state["run_id"],
                read=per_hour,
                manifest=state["manifest"],
                erased=erased,
            )
        result[layer.name] = partitions
    return result


# ------------------------------------------------------------------- published: the ledger


def published_from_ledger(
    warehouse_dir: str,
    layers: Sequence[Layer],
    hours: Sequence[str],
) -> dict[str, dict[str, Published]]:
    """Published partitions of ``layers`` in ``hours`` from the ledger: the last committed
    event per (table, hour), joined to ``audit.shadow_partitions`` by location (a rollback
    event names the location, not the version). Database queries, no Spark."""

    table_layer = {table: layer.name for layer in layers for _, table in layer.pairs}
    where = {"phase": COMMIT, "table_name": list(table_layer), "hour": list(hours)}
    last: dict[tuple[str, str], dict] = {}
    for event in audit.rows(warehouse_dir, audit.PUBLICATIONS, where, "recorded_at"):
        last[(event["table_name"], event["hour"])] = event  # the newest wins
    located = {e["new_location"] for e in last.values() if e["new_location"]}
    shadows = {
        r["location"]: r
        for r in audit.rows(warehouse_dir, audit.SHADOW_PARTITIONS, {"location": located})
    }
    rows = []
    for event in last.values():
        shadow = shadows.get(event["new_location"], {})
        rows.append(
            {
                **event,
                "shadow_version": shadow.get("version"),
                "shadow_rows": shadow.get("row_count"),
                "shadow_code": shadow.get("code_version"),
            }
        )

    main_table = {layer.name: layer.pairs[0][1] for layer in layers}
    by_hour: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        if row["new_location"] is None:  # rolled back to no partition at all
            continue
        layer = table_layer[row["table_name"]]
        entry = by_hour.setdefault((layer, row["hour"]), {"rows": {}, "row": row})
        count = row["row_count"] if row["row_count"] is not None else row["shadow_rows"]
        entry["rows"][row["table_name"]] = int(count or 0)
        if row["table_name"] == main_table[layer]:
            entry["row"] = row
    erased: dict[tuple[str, str], int] = {}  # (hour, version) -> lines left out as erased
    for r in audit.rows(warehouse_dir, audit.ERASED_LINES, {"hour": list(hours)}):
        erased[(r["hour"], r["version"])] = erased.get((r["hour"], r["version"]), 0) + int(
            r["lines"] or 0
        )
    result: dict[str, dict[str, Published]] = {layer.name: {} for layer in layers}
    for (layer, hour), entry in by_hour.items():
        row = entry["row"]
        version = row["version"] or row["shadow_version"]
        result[layer][hour] = Published(
            layer=layer,
            hour=hour,
            rows=entry["rows"],
            version=version,
            code_version=row["code_version"] or row["shadow_code"],
            published_at=row["recorded_at"].timestamp() if row["recorded_at"] else None,
            run_id=row["run_id"],
            manifest={k: row[k] or "" for k in ("reason", "requested_by", "ticket", "backfill_id")},
            erased=erased.get((hour, version), 0) if layer == layers[0].name else 0,
        )
    return result


# ---------------------------------------------------------------------------- runs


def layer_asset_keys(
    assets_defs_by_key: Mapping[dg.AssetKey, dg.AssetsDefinition],
    layers: Sequence[str],
) -> dict[str, list[dg.AssetKey]]:
    """The assets of each layer (its Dagster group), as ``keys.layer_keys`` selects them."""
    keys: dict[str, list[dg.AssetKey]] = {layer: [] for layer in layers}
    for key, assets_def in assets_defs_by_key.items():
        group = assets_def.group_names_by_key.get(key)
        if group in keys:
            keys[group].append(key)
    return {layer: sorted(k, key=lambda x: x.to_user_string()) for layer, k in keys.items()}


# ---------------------------------------------------------------------------- together


def reconcile(
    store: BackupStore,
    published: Mapping[str, Mapping[str, Published]],
    layers: Sequence[Layer],
    window: Window,
    config: ReconcileConfig,
    *,
    source: str,
    in_flight: Mapping[str, Mapping[str, str]] | None = None,
    requested: Mapping[str, Mapping[str, str]] | None = None,
) -> Reconciliation:
    """Inventory the window's backups, compare with ``published``, plan the requests."""
    inventory = take_inventory(store, list(window.hours))
    findings = find(inventory, published, layers, window, grace_hours=config.grace_hours)
    planned = plan(
        findings,
        [layer.name for layer in layers],
        window,
        max_hours=config.max_hours_per_tick,
        in_flight=in_flight,
        requested=requested,
    )
    return Reconciliation(
        window,
        findings,
        planned,
        source,
        config.max_hours_per_tick,
        tuple(layer.name for layer in layers),
        {layer.name: frozenset(published.get(layer.name, {})) for layer in layers},
    )
