"""Development tooling of backfill_assets: the backup generator and its truth, the demo, the
benchmarks and the half-cut analysis. Installed from the repository (``make install``) for
development; the code location and its image deploy without it (``backfill_assets`` never
imports it; the ``demo``, ``generate``, ``land``, ``bench`` and ``halfcut`` subcommands load
it when it is installed)."""
