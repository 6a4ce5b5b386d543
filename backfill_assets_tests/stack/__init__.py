"""The production stack on this machine (a package, so its conftest is ``stack.conftest``,
not a second module named ``conftest``). Its servers and the production environment are
``backfill_assets_dev.stack``'s, shared with the scale benchmark."""
