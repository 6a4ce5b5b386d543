"""Write-audit-publish: table DDL (``tables``), audit tables and ledger (``audit``), and
the pointer swap (``publisher``)."""
