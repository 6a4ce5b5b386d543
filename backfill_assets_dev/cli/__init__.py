"""The development subcommands of ``backfill-assets`` (``backfill_assets.cli.main``)."""
