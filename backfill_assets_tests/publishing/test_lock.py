"""Publish lock selection: no silent no-op when DATA_ROOT is object storage."""

import pytest

from backfill_assets.publishing import lock


def test_uri_data_root_without_a_lock_database_is_refused(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(lock.LOCK_URL_ENV, raising=False)
    monkeypatch.delenv(lock.DAGSTER_POSTGRES_URL_ENV, raising=False)
    with (
        pytest.raises(lock.PublishLockUnavailable, match="DAGSTER_POSTGRES_URL") as error,
        lock.publish_lock("s3a://bucket/data/warehouse", "raw", holder="run-A"),
    ):
        pytest.fail("published without a fence")
    assert "layer 'raw'" in str(error.value)


def test_lock_database_url_prefers_the_dedicated_variable():
    env = {lock.DAGSTER_POSTGRES_URL_ENV: "postgresql+psycopg2://d/dagster"}
    assert lock.lock_database_url(env) == "postgresql+psycopg2://d/dagster"
    env[lock.LOCK_URL_ENV] = "postgresql+psycopg2://l/locks"
    assert lock.lock_database_url(env) == "postgresql+psycopg2://l/locks"
    assert lock.lock_database_url({}) is None
    assert lock.libpq_url("postgresql+psycopg2://u:p@h:5/db") == "postgresql://u:p@h:5/db"


def test_publish_pool_is_the_one_the_instance_configs_limit():
    import yaml

    from backfill_assets.settings import PROJECT_ROOT

    assert lock.PUBLISH_POOL == "publish"
    for name in ("dagster.yaml", "dagster.production.yaml"):
        config = yaml.safe_load((PROJECT_ROOT / "deploy" / name).read_text())
        pools = config["concurrency"]["pools"]
        assert (pools["default_limit"], pools["granularity"]) == (1, "op"), name
