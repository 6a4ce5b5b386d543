"""The ``backfill-assets`` console script: one module per subcommand, each with ``register``."""
