"""Evaluate a pandera model over a whole backfill range and name the hours that break it.

The pandera ``DataFrameModel`` is the single declaration of the rules. pandera's PySpark
backend validates the schema (columns, types: no Spark action); the data rules it
declares (nullability, ``isin``, ``ge``, ``str_length``, the model's ``row_rules``) are
translated into Spark predicates, and ONE grouped aggregation over the range counts the
rows that break any of them, so a clean range costs one Spark job however many rules and
hours there are. Only when rows break a rule does a second aggregation, over those rows,
count the violations per hour and rule (and a third fetch examples). (pandera's own data
validation runs one job per rule and does not attribute failures to partitions;
``test_rules`` shows both verdicts agree.)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import reduce

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from backfill_assets.core.warehouse import audit


@dataclass
class RuleReport:
    passed: bool
    hours: list[str]
    failing_hours: dict[str, dict[str, int]] = field(default_factory=dict)
    pandera_errors: dict = field(default_factory=dict)
    examples: list[dict] = field(default_factory=list)
    # rows per (hour, *by) group of the aggregation (``evaluate(..., by=...)``)
    group_rows: dict[tuple, int] = field(default_factory=dict)
    # the caller's own aggregates per (hour, *by) group (``evaluate(..., extra=...)``)
    group_values: dict[tuple, dict[str, object]] = field(default_factory=dict)

    @property
    def reasons(self) -> dict[str, str]:
        """Failing hour -> ``rule=violations, ...`` (a check's per-hour detail)."""
        return {
            hour: ", ".join(f"{rule}={n}" for rule, n in rules.items())
            for hour, rules in self.failing_hours.items()
        }


def _violation(column: str, check_name: str, stats: dict) -> Column:
    c = F.col(column)
    if check_name == "isin":
        return ~c.isin(list(stats["allowed_values"]))
    if check_name == "notin":
        return c.isin(list(stats["forbidden_values"]))
    if check_name == "greater_than_or_equal_to":
        return c < F.lit(stats["min_value"])
    if check_name == "greater_than":
        return c <= F.lit(stats["min_value"])
    if check_name == "less_than_or_equal_to":
        return c > F.lit(stats["max_value"])
    if check_name == "str_length":
        if stats.get("min_value") == 1 and stats.get("max_value") is None:
            return c == F.lit("")  # the same verdict without counting every string's characters
        length = F.length(c)
        low = length < stats["min_value"] if stats.get("min_value") is not None else F.lit(False)
        high = length > stats["max_value"] if stats.get("max_value") is not None else F.lit(False)
        return low | high
    raise NotImplementedError(f"no per-hour translation for pandera check {check_name!r}")


def violation_predicates(model: type) -> dict[str, Column]:
    """``{rule: Column that is true on a violating row}`` for every rule of ``model``.

    Column rules come from the model's fields; data-frame rules from the model's
    ``row_rules()`` classmethod (the same predicates its ``@dataframe_check`` uses).
    """
    schema = model.to_schema()
    predicates: dict[str, Column] = {}
    for name, column in schema.columns.items():
        if not column.nullable:
            predicates[f"{name}:not_null"] = F.col(name).isNull()
        for check in column.checks:
            predicates[f"{name}:{check.name}"] = F.coalesce(
                _violation(name, check.name, check.statistics or {}), F.lit(False)
            )
    for name, predicate in getattr(model, "row_rules", dict)().items():
        predicates[name] = F.coalesce(~predicate, F.lit(True))
    return predicates


def _violations(broken: DataFrame, predicates: dict[str, Column]) -> dict[str, dict[str, int]]:
    """Hour -> {rule: violations} over the rows that break a rule (one aggregation)."""
    names = list(predicates)
    counts = (
        broken.groupBy("hour")
        .agg(*[F.count(F.when(p, 1)).alias(f"r{i}") for i, p in enumerate(predicates.values())])
        .collect()
    )
    return {
        row["hour"]: {names[i]: int(row[f"r{i}"]) for i in range(len(names)) if row[f"r{i}"]}
        for row in sorted(counts, key=lambda r: r["hour"])
    }


def _any_violation(predicates: Mapping[str, Column]) -> Column:
    return reduce(lambda a, b: a | b, predicates.values(), F.lit(False))


def broken_count(model: type, where: Column | None = None) -> Column:
    """An aggregate: the rows (of those ``where`` holds) that break a rule of ``model``, as
    ``evaluate`` counts them per group (for ``precount``)."""
    broken = _any_violation(violation_predicates(model))
    return F.count(F.when(broken if where is None else where & broken, 1))


# evaluate's aggregation of a shadow version, as the build that wrote the version computed
# it over the rows it wrote, in a scan it runs anyway (its statistics): kept in the ledger
# database for the version's check step (``audit.rule_counts``), so the check scans nothing.
def _model_name(model: type) -> str:
    return f"{model.__module__}.{model.__qualname__}"


def precount(
    spark: SparkSession,
    table: str,
    version: str,
    model: type,
    by: tuple[str, ...],
    groups: Iterable[Mapping],
) -> None:
    """Keep the rule counts of ``table`` version ``version`` for its check: ``groups``, rows
    of an aggregation by (``hour``, *``by``) of the written rows with ``rows`` (their
    count) and ``broken`` (``broken_count``); groups without rows are left out, as
    ``evaluate`` over the written rows would never see them."""
    kept = [dict(g) for g in groups if g["rows"]]
    row = {
        "table_name": table,
        "version": version,
        "model": _model_name(model),
        "by_columns": ",".join(by),
        "groups": json.dumps(kept, default=str),
        "run_id": version,
        "counted_at": audit.now(),
    }
    audit.append(audit.warehouse_of(spark), audit.RULE_COUNTS, [row])


def precounted(
    spark: SparkSession, table: str, version: str, model: type, by: tuple[str, ...]
) -> list[dict] | None:
    """The groups ``precount`` kept for this version, else None (the check counts)."""
    where = {"table_name": table, "version": version, "model": _model_name(model)}
    found = audit.rows(audit.warehouse_of(spark), audit.RULE_COUNTS, where)
    kept = [r for r in found if r["by_columns"] == ",".join(by)]
    return json.loads(kept[-1]["groups"]) if kept else None


def evaluate(
    df: DataFrame,
    model: type,
    example_columns: list[str],
    by: tuple[str, ...] = (),
    extra: Mapping[str, Column] | None = None,
    counted: list[Mapping] | None = None,
) -> RuleReport:
    """Validate ``df`` (all hours of a run) with ``model``; attribute failures to hours.

    ``by``: columns to group by within the hour as well; the report's ``group_rows`` then
    counts the rows of each (hour, *by), from the same aggregation (no second scan for a
    check that needs those counts). ``extra``: the caller's aggregate columns by name,
    computed in the same aggregation; their values per group in ``group_values``.
    ``counted``: that aggregation as the build computed it (``precounted``; with the
    ``extra`` aggregates under their names), so that a clean range costs no scan here."""
    from pandera.config import ValidationDepth, config_context  # in the run that validates

    extra = dict(extra or {})
    reserved = {"hour", "rows", "broken", *by} & extra.keys()
    if reserved:
        raise ValueError(f"extra aggregates named like the aggregation's own: {sorted(reserved)}")
    schema = model.to_schema()
    # Structure only (columns, types) on zero rows. pandera counts nulls per non-nullable
    # column even at SCHEMA_ONLY depth (a Spark job each): nullability is a data rule here,
    # counted with the others below, so the structural pass treats every column as nullable.
    structure = schema.update_columns({name: {"nullable": True} for name in schema.columns})
    with config_context(validation_depth=ValidationDepth.SCHEMA_ONLY):
        errors = dict(structure.validate(df.limit(0)).pandera.errors or {})
    predicates = violation_predicates(model) if not errors else {}
    any_violation = _any_violation(predicates)
    groups = counted
    if groups is None:
        groups = (
            df.groupBy("hour", *by)
            .agg(
                F.count(F.when(any_violation, 1)).alias("broken"),
                F.count(F.lit(1)).alias("rows"),
                *[column.alias(name) for name, column in extra.items()],
            )
            .collect()
        )
    keys = ("hour", *by)
    group_rows = {tuple(row[c] for c in keys): int(row["rows"]) for row in groups}
    group_values = {
        tuple(row[c] for c in keys): {name: row[name] for name in extra} for row in groups
    }
    hours = sorted({r["hour"] for r in groups})
    failing: dict[str, dict[str, int]] = {}
    if predicates and any(row["broken"] for row in groups):
        failing = _violations(df.where(any_violation), predicates)
    if errors:
        # A schema-level failure (missing column, wrong type) breaks every hour.
        failing = {h: {"schema": 1} for h in hours}
    if not failing:
        return RuleReport(
            passed=True, hours=hours, group_rows=group_rows, group_values=group_values
        )
    examples = []
    if predicates:
        examples = [
            r.asDict() for r in df.where(any_violation).select(*example_columns).limit(5).collect()
        ]
    return RuleReport(
        passed=False,
        hours=hours,
        failing_hours=dict(sorted(failing.items())),
        pandera_errors=json.loads(json.dumps(errors, default=str)),
        examples=json.loads(json.dumps(examples, default=str)),
        group_rows=group_rows,
        group_values=group_values,
    )
