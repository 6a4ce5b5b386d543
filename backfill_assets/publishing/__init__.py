"""Write-audit-publish: table DDL (``tables``), the ledger (``ledger``), the swap (``publisher``)."""
