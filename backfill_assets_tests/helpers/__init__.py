"""What the tests import besides their fixtures (``conftest.py`` holds fixtures and hooks
only; it imports from here too):

- ``processes``: the ``backfill-assets`` command and other real processes (``BIN``,
  ``cli``, process groups, fault pauses, Dagster's daemon, a memory cap);
- ``releases``: releases run in the test process, and what a release published;
- ``backups``: backup folders and part files written by hand;
- ``hostile``, ``corpus``: hostile backup files, and corpora of part-file lines;
- ``fence``: the publish fence's holder, waiter and publisher processes;
- ``stack``: the production stack the stack tests run on (its servers and the production
  environment are ``backfill_assets_dev.stack``'s, shared with the scale benchmark).
"""
