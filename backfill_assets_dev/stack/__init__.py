"""The production stack on this machine: its servers started on 127.0.0.1 and stopped by
PID (``servers``, ``metastore_server``), the production environment and instance against
them (``production``), and the scale benchmark on it (``bench_scale``, ``make
bench-stack``). The stack tests (``backfill_assets_tests/stack``) start the same servers."""
