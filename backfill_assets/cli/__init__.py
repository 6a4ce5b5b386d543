"""The ``backfill-assets`` console script: one module per subcommand, each with ``register``.
Subcommands import the engine and Dagster inside their functions (the only lazy imports of
the package), so ``--help`` and a refused argument answer in a second."""
