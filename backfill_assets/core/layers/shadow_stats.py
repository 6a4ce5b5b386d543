"""Row counts and checksums of shadow partitions (``Stats``): measured by an asset over the
rows it wrote (``Measured``), or read back by the IO manager (``partition_stats``), with
the rules of the pandera model its check evaluates (``WithRules``) counted in the same pass."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from backfill_assets.core.layers import rules

LINEAGE_COLUMNS = ("run_id", "code_version")


Stats = dict[str, tuple[int, str, str | None]]  # hour -> (rows, checksum, code version)


def data_columns(df: DataFrame) -> list[str]:
    """The columns a checksum hashes: all but the lineage and partition columns."""
    return [c for c in df.columns if c not in (*LINEAGE_COLUMNS, "hour", "version")]


def stats_aggregates(columns: list[str], where: Column | None = None) -> dict[str, Column]:
    """Aggregates of ``partition_stats`` over the rows ``where`` holds (all by default) of a
    frame whose data columns are ``columns``, for an aggregation grouped by ``hour`` and
    possibly finer (``stats_of`` adds the groups of an hour up)."""
    kept = F.lit(True) if where is None else where
    return {
        "rows": F.count(F.when(kept, 1)),
        **exact_sum(F.when(kept, F.xxhash64(*columns)), "hash"),
        "code_version": F.max(F.when(kept, F.col("code_version"))).cast("string"),
    }


def stats_of(groups: Iterable[Mapping]) -> Stats:
    """``partition_stats`` from the rows of an aggregation of ``stats_aggregates`` (with
    ``hour``): the groups of each hour added up."""
    rows: dict[str, int] = {}
    totals: dict[str, int] = {}
    codes: dict[str, set[str]] = {}
    for g in groups:
        hour = g["hour"]
        rows[hour] = rows.get(hour, 0) + int(g["rows"])
        totals[hour] = totals.get(hour, 0) + summed(g, "hash")
        if g["code_version"] is not None:
            codes.setdefault(hour, set()).add(g["code_version"])
    return {
        hour: (n, f"{n}:{totals[hour]}", max(codes[hour]) if hour in codes else None)
        for hour, n in rows.items()
    }


def added_groups(groups: Iterable[Mapping], keys: tuple[str, ...]) -> list[dict]:
    """The groups of several aggregations of the same counts and sums (``stats_aggregates``
    and the like, over disjoint rows) added up per ``keys``: numbers added, strings (the
    code version, a max) the greatest; None where every group has None (a sum of no rows)."""
    merged: dict[tuple, dict] = {}
    for group in groups:
        into = merged.setdefault(tuple(group[k] for k in keys), {k: group[k] for k in keys})
        for name, value in group.items():
            have = into.get(name)
            if name in keys or value is None:
                into.setdefault(name, None)
            elif have is None:
                into[name] = value
            elif isinstance(value, str):
                into[name] = max(have, value)
            else:
                into[name] = have + value
    return list(merged.values())


def partition_stats(df: DataFrame) -> Stats:
    """Rows, an order-independent checksum and the code version per hour, in one Spark action.

    The checksum hashes every data column (``data_columns``), so the same input and code
    give the same checksum in every run; the code version is the rows' own
    ``code_version`` lineage column (None for an hour without rows).
    """
    return stats_of(_stats_groups(df))


def _stats_groups(df: DataFrame, extra: Mapping[str, Column] | None = None) -> list[dict]:
    """Per hour, the aggregates of ``partition_stats`` and ``extra`` ones (one Spark action)."""
    if "code_version" not in df.columns:
        df = df.withColumn("code_version", F.lit(None).cast("string"))
    aggregates = stats_aggregates(data_columns(df))
    clash = aggregates.keys() & (extra or {}).keys()
    if clash:
        raise ValueError(f"aggregates named like the statistics': {sorted(clash)}")
    columns = [c.alias(n) for n, c in {**aggregates, **(extra or {})}.items()]
    return [row.asDict() for row in df.groupBy("hour").agg(*columns).collect()]


@dataclass(frozen=True)
class WithRules:
    """A frame to write, and the pandera model its check evaluates: the read-back that
    measures what was written counts the model's rules (and the check's ``extra``
    aggregates) in the same scan, for the check step of the same run (``rules.precount``).

    ``cached``: the frame's rows are deterministic and cached by the asset (persisted
    before the write): they are measured in the cache, as ``Measured`` rows are, instead of
    reading the written files back."""

    frame: DataFrame
    model: type
    extra: Mapping[str, Column] = field(default_factory=dict)
    cached: bool = False


def stats_and_rules(table: str, version: str, written: DataFrame, checked: WithRules) -> Stats:
    """``partition_stats`` of the written rows, and ``checked``'s rules counted in the same
    aggregation (``rules.precount``)."""
    counted = _stats_groups(written, {"broken": rules.broken_count(checked.model), **checked.extra})
    rules.precount(written.sparkSession, table, version, checked.model, (), counted)
    return stats_of(counted)


@dataclass(frozen=True)
class Measured:
    """A frame to write and its ``partition_stats``, which its asset measured in a Spark
    action it runs anyway, over the same deterministic rows (cached ones): the IO manager
    records them instead of reading the written rows back."""

    frame: DataFrame
    stats: Stats


def exact_sum(value: Column, name: str) -> dict[str, Column]:
    """Aggregates whose ``summed`` is the exact sum of a 64-bit column, as two long sums (no
    decimal arithmetic): high halves (signed) and low halves (unsigned), exact below 2**31
    rows a group."""
    return {
        f"{name}_high": F.sum(F.shiftright(value, 32)),
        f"{name}_low": F.sum(value.bitwiseAND(F.lit(0xFFFFFFFF))),
    }


def summed(values: Mapping, name: str) -> int:
    """The exact sum ``exact_sum(..., name)`` aggregated (0 for no rows)."""
    return ((values[f"{name}_high"] or 0) << 32) + (values[f"{name}_low"] or 0)
