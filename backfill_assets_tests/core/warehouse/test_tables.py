"""Values that reach SQL or paths are validated: no injection through keys or paths."""

import dagster as dg
import pytest

from backfill_assets.core.hours import InvalidHourError
from backfill_assets.core.warehouse import tables
from backfill_assets.release import keys


def test_table_names_come_from_two_part_asset_keys():
    assert keys.table_name(dg.AssetKey(["audit", "publications"])) == "audit.publications"
    with pytest.raises(tables.UnsafeValueError):
        keys.table_name(dg.AssetKey(["raw", "payloads; drop table x"]))
    with pytest.raises(tables.UnsafeValueError):
        keys.table_name(dg.AssetKey(["payloads"]))


def test_each_table_has_one_readable_key_and_back():
    assert keys.table_key("raw.payloads") == dg.AssetKey(["raw", "raw_payloads"])
    assert keys.table_key("shadow.raw_payloads").path[-1] == "raw_payloads_candidate"
    labels = [key.path[-1] for key in keys.TABLE_KEYS.values()]  # what the graph shows
    assert len(set(labels)) == len(labels)
    for table, key in keys.TABLE_KEYS.items():
        assert keys.table_name(key) == table


def test_partition_spec_accepts_only_valid_hours_and_run_ids():
    assert tables.partition_spec("2026-11-20T03") == "hour='2026-11-20T03'"
    assert tables.partition_spec("2026-11-20T03", "abc-123") == (
        "hour='2026-11-20T03', version='abc-123'"
    )
    with pytest.raises(InvalidHourError):
        tables.partition_spec("2026-11-20T03' OR '1'='1")
    with pytest.raises(tables.UnsafeValueError):
        tables.partition_spec("2026-11-20T03", "x' OR 'y")


@pytest.mark.parametrize("bad", ["/data/it's", "/data/../etc", "/data/a b", "/d/x;drop"])
def test_locations_are_validated(bad: str):
    with pytest.raises(tables.UnsafeValueError):
        tables.location(bad)


def test_swap_partitions_adds_relocates_and_drops_hours_of_a_table(spark, warehouse, tmp_path):
    spark.sql("CREATE DATABASE IF NOT EXISTS swaps")
    spark.sql(
        f"CREATE TABLE swaps.t (n int, hour string) USING parquet PARTITIONED BY (hour) "
        f"LOCATION '{tmp_path}/t'"
    )
    hours = [f"2026-11-20T{h:02d}" for h in range(3)]
    where = {}
    for release in ("a", "b"):
        for number, hour in enumerate(hours):
            where[release, hour] = f"file:{tmp_path}/{release}/hour={hour}"
            spark.createDataFrame([(number,)], "n int").write.parquet(where[release, hour][5:])

    tables.swap_partitions(spark, "swaps.t", [(h, None, where["a", h]) for h in hours])
    assert tables.partition_locations(spark, "swaps.t") == {h: where["a", h] for h in hours}
    # the new partitions are stored as SQL's ADD stores them (format, serde, location)
    spark.sql(f"CREATE TABLE swaps.s LIKE swaps.t LOCATION '{tmp_path}/s'")
    specs = " ".join(f"PARTITION (hour='{h}') LOCATION '{where['a', h]}'" for h in hours)
    spark.sql(f"ALTER TABLE swaps.s ADD {specs}")
    assert _storage(spark, "swaps.t") == _storage(spark, "swaps.s")
    # an hour that is there already fails the whole add: the new hour is not added either
    with pytest.raises(Exception, match=r"(?i)already exist"):
        tables.swap_partitions(
            spark,
            "swaps.t",
            [("2026-11-20T03", None, where["b", hours[0]]), (hours[0], None, where["b", hours[0]])],
        )
    assert tables.partition_locations(spark, "swaps.t") == {h: where["a", h] for h in hours}
    # two hours move to release b in one metastore call, the third is dropped
    tables.swap_partitions(
        spark,
        "swaps.t",
        [(h, where["a", h], where["b", h]) for h in hours[:2]]
        + [(hours[2], where["a", hours[2]], None)],
    )
    assert tables.partition_locations(spark, "swaps.t") == {h: where["b", h] for h in hours[:2]}
    spark.catalog.refreshTable("swaps.t")
    assert sorted(tuple(r) for r in spark.table("swaps.t").collect()) == [
        (0, hours[0]),
        (1, hours[1]),
    ]
    with pytest.raises(ValueError, match="2026-11-20T02"):
        tables.swap_partitions(
            spark, "swaps.t", [(hours[2], where["a", hours[2]], where["b", hours[2]])]
        )
    with pytest.raises(tables.UnsafeValueError):
        tables.swap_partitions(spark, "swaps.t", [(hours[0], where["b", hours[0]], "/x' OR 1=1")])


def test_shadow_partitions_are_registered_once_as_sql_would_register_them(
    spark, warehouse, tmp_path
):
    """``register_partitions`` (the metastore client, not ``ALTER TABLE ... ADD``): the
    locations qualified as SQL stores them, the rows readable by hour and version at once,
    and a second registration (a retried step) leaves the partitions as they are."""
    spark.sql("CREATE DATABASE IF NOT EXISTS shadows")
    spark.sql(
        f"CREATE TABLE shadows.t (n int, hour string, version string) USING parquet "
        f"PARTITIONED BY (hour, version) LOCATION '{tmp_path}/t'"
    )
    hours = [f"2026-11-20T{h:02d}" for h in range(3)]
    root = f"{tmp_path}/t/version=v1"
    spark.createDataFrame(
        [(n, h) for n, h in enumerate(hours)], "n int, hour string"
    ).write.partitionBy("hour").parquet(root)
    wanted = {(h, "v1"): f"{root}/hour={h}" for h in hours}

    tables.register_partitions(spark, "shadows.t", wanted)
    tables.register_partitions(spark, "shadows.t", wanted)  # already there: left alone

    assert tables.partition_locations(spark, "shadows.t") == {
        h: f"file:{root}/hour={h}" for h in hours
    }
    assert sorted(tuple(r) for r in spark.table("shadows.t").collect()) == [
        (n, h, "v1") for n, h in enumerate(hours)
    ]
    with pytest.raises(tables.UnsafeValueError):
        tables.register_partitions(spark, "shadows.t", {(hours[0], "v2"): "/x' OR 1=1"})
    with pytest.raises(tables.UnsafeValueError):
        tables.register_partitions(spark, "shadows.t", {(hours[0], "v2'--"): f"{root}/x"})


def _storage(spark, table: str) -> dict[str, str]:
    """Each partition's storage (location, format, serde, properties) as the metastore has it,
    the table's own location (a ``path`` property) named as such."""
    root = tables.table_location(spark, table)
    return {
        hour: str(p.storage()).replace(root, "<table>")
        for hour, p in tables._partitions(spark, table)
    }


def test_a_metastore_yet_to_be_created_is_not_warmed_in_a_second_thread(tmp_path):
    # A new DATA_ROOT's first run: Hive and Derby create the embedded metastore wrongly
    # from two threads at once (its run failed), so warm_metastore leaves it to the run.
    url = f"jdbc:derby:;databaseName={tmp_path}/metastore_db;create=true"
    assert tables.embedded_metastore_missing(url)
    (tmp_path / "metastore_db").mkdir()  # a folder Derby began to create is not a database
    assert tables.embedded_metastore_missing(url)
    (tmp_path / "metastore_db" / "service.properties").write_text("")
    assert not tables.embedded_metastore_missing(url)
    assert not tables.embedded_metastore_missing("")  # a metastore service (production)


def test_a_session_whose_metastore_exists_is_warmed(spark, warehouse):
    thread = tables.warm_metastore(spark)
    assert thread is not None
    thread.join(timeout=120)
    assert not thread.is_alive()
