import time


def test_explore(make_backups, run_layers, spark):
    from backfill_assets.checks import rules
    from backfill_assets.checks.schemas import SessionSchema, TransformedPayloadSchema
    from backfill_assets.checks.aggregated import duplicate_session_ids, reconcile_client_hourly
    from backfill_assets.layers.aggregated import build_sessions, client_hourly
    root = make_backups(hours=12, clients=2, users_per_client=40)
    runs = run_layers(root, [("raw", "2026-11-20T00", "2026-11-20T11"),
                             ("transformed", "2026-11-20T00", "2026-11-20T11")])
    t = time.time(); spark.sql("select count(*) from raw.payloads").collect(); print("count raw", time.time()-t)
    t = time.time(); spark.sql("select count(*) from raw.payloads").collect(); print("count raw", time.time()-t)
    s = spark.table("transformed.payloads")
    for i in range(2):
        t = time.time(); b = build_sessions(s, "2026-11-20T03", "2026-11-20T08", 3, 3); b.collect(); print("build", time.time()-t)
    b = b.withColumn("run_id", b.hour).withColumn("code_version", b.hour).cache()
    b.count()
    for i in range(2):
        t = time.time(); r = rules.evaluate(b, SessionSchema, ["hour"]); print("eval sessions", time.time()-t, r.passed)
    t = time.time(); r = rules.evaluate(s, TransformedPayloadSchema, ["hour"]); print("eval transformed", time.time()-t, r.passed)
    t = time.time(); duplicate_session_ids(b); print("dups", time.time()-t)
    h = client_hourly(b)
    t = time.time(); print(reconcile_client_hourly(b, h)); print("recon", time.time()-t)
    t = time.time(); spark.sql("show partitions transformed.payloads").collect(); print("showparts", time.time()-t)
